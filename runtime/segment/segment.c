/* SPDX-License-Identifier: MIT */
/*
 * Segments: a peer engine's registered memory as seen from here, and the
 * endpoints every local core holds to it.  Submitters take a reference
 * (inflight) before they look at a segment and the closer waits for
 * references to drain after marking it closing: a Dekker pair of seq_cst
 * operations, so neither can miss the other and no lock is needed on the
 * submit path.
 */
#include "runtime/segment/segment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/ctl/ctl.h"
#include "runtime/engine/engine.h"

#define FETCH_TIMEOUT_MS 5000

static ferry_seg_t seg_handle(uint32_t gen, uint32_t slot)
{
	return (uint64_t)gen << 32 | (slot + 1);
}

struct ferry_seg *seg_lookup(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	uint32_t s = (uint32_t)h - 1;

	if ((uint32_t)h == 0 || s >= FERRY_MAX_SEGMENTS)
		return NULL;
	if (load_sc(e->segs[s].gen) != (uint32_t)(h >> 32))
		return NULL;
	*slot = s;
	return &e->segs[s];
}

struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	struct ferry_seg *s = seg_lookup(e, h, slot);

	if (!s)
		return NULL;
	/* Dekker pair with ferry_segment_close (state, then inflight) and
	 * ep_keep (rail_gone, then inflight): our reference, then their flag. */
	fetch_add_sc(s->inflight, 1);
	if (load_sc(s->state) != SEG_OPEN || load_sc(s->gen) != (uint32_t)(h >> 32)) {
		seg_release_ref(s);
		return NULL;
	}
	return s;
}

void seg_release_ref(struct ferry_seg *s)
{
	fetch_sub_sc(s->inflight, 1);
}

static void ep_disconnect_peer(struct ferry_engine *e, struct ferry_seg *s, unsigned core);

/*
 * Tear down core i's endpoint to s (ctl_lock held).  Phase one on the
 * owner core: stop, flush, drain, destroy the QPs (-EBUSY until then);
 * phase two here: unpublish, free after a grace period.
 */
static void seg_drop_ep(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, unsigned i)
{
	struct ferry_core *c = e->cores[i];
	struct ferry_ep *ep = s->eps[i];
	struct core_cmd cmd = { .type = CMD_EP_REMOVE, .slot = slot, .ep = ep };

	store_sc(s->rail_gone[i], 1); /* submitters stop picking the rail (rails_pick) */
	if (!ep)
		return;
	while (core_command(c, &cmd) == -EBUSY)
		ferry_sleep_us(100);
	ep_table_set(&c->eps, slot, NULL);
	sieve_remove(&c->eps.cache, slot);
	s->eps[i] = NULL;
	ep_disconnect_peer(e, s, i);
	ep_retire(&e->reaper, ep);
	repair_kick(e); /* it queues the free for after a grace period */
}

/* Remove slot's endpoint from every core. */
static void seg_remove_eps(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	for (unsigned i = 0; i < e->ncores; i++)
		seg_drop_ep(e, s, slot, i);
}

struct evict_arg {
	struct ferry_engine *e;
	unsigned core;
};

/*
 * SIEVE's second chance: the endpoint was used since the hand passed, or
 * its segment has requests in flight.  The busy test is a Dekker pair with
 * seg_acquire + rails_pick: we mark the rail gone, then look for
 * references; a submitter takes its reference, then looks at the rail.
 * Either we see its reference (and put the rail back) or it sees the rail
 * gone (and stripes over the others): never a part sent to a rail we free.
 */
static bool ep_keep(void *arg, uint32_t slot)
{
	struct evict_arg *x = arg;
	struct ferry_seg *s = &x->e->segs[slot];
	struct ferry_ep *ep = s->eps[x->core];

	if (ep && xchg_relaxed(ep->visited, 0))
		return true;
	store_sc(s->rail_gone[x->core], 1); /* Dekker pair with seg_acquire + rails_pick */
	if (load_sc(s->inflight) == 0)
		return false;
	store_sc(s->rail_gone[x->core], 0);
	return true;
}

/* Room in core i's endpoint cache, evicting with SIEVE if it is full;
 * -EBUSY when every cached endpoint is in use.  ctl_lock held. */
static int core_make_room(struct ferry_engine *e, unsigned i)
{
	struct ferry_core *c = e->cores[i];
	struct evict_arg x = { e, i };
	uint32_t slot;
	int rc;

	if (!sieve_full(&c->eps.cache))
		return 0;
	rc = sieve_evict(&c->eps.cache, ep_keep, &x, &slot);
	if (rc)
		return rc;
	seg_drop_ep(e, &e->segs[slot], slot, i);
	WRITE_ONCE(c->eps.evictions, c->eps.evictions + 1); /* one writer: ctl_lock */
	return 0;
}

static void handshake_req(struct ferry_engine *e, unsigned i, const struct ferry_seg *s,
			  uint32_t remote_nic, struct qpx *qp, uint64_t token,
			  struct wire_connect_req *req)
{
	const struct qctx *q = &e->cores[i]->tx[s->tx];
	const struct seg_desc *d = s->desc;

	memset(req, 0, sizeof(*req));
	req->incarnation = e->incarnation;
	req->token = token;
	req->target_incarnation = d->incarnation;
	req->target_nic = (uint16_t)remote_nic;
	req->n_qps = 1;
	snprintf(req->nic.provider, sizeof(req->nic.provider), "%s", q->prov->name);
	q->prov->addr(q->nic, &req->nic.addr);
	q->prov->qp_info(qp->nqp, &req->qps[0]);
}

/*
 * Connect one of core i's QPs to a new responder QP on the peer's NIC
 * remote_nic: ours here, the peer's on its control thread.  One handshake
 * per QP, each with its own token, so a broken QP can be replaced alone.
 * -ENETUNREACH when our provider could not connect to the peer's address
 * (the control plane worked: another transport may).
 */
int seg_qp_handshake(struct ferry_engine *e, unsigned i, struct ferry_seg *s,
		     uint32_t remote_nic, struct qpx *qp, uint64_t *token)
{
	const struct qctx *q = &e->cores[i]->tx[s->tx];
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	char here[160];
	int rc;

	*token = ++e->next_token;
	handshake_req(e, i, s, remote_nic, qp, *token, &req);
	rc = ctl_connect(s->address, FETCH_TIMEOUT_MS, &req, &rep);
	if (rc == 0) {
		rc = q->prov->qp_connect(qp->nqp, &s->desc->nics[remote_nic].addr, &rep.qps[0]);
		if (rc) {
			seg_disconnect_token(e, s, *token);
			q->prov->describe(q->nic, here, sizeof(here));
			log_err("segment %s: a QP of core %u (%s) cannot reach the peer's NIC %u: %s",
				s->address, i, here, remote_nic, strerror(-rc));
			rc = -ENETUNREACH;
		}
	} else {
		log_err("segment %s: endpoint handshake for core %u: %s", s->address, i,
			strerror(-rc));
	}
	if (rc)
		*token = 0;
	return rc;
}

void seg_disconnect_token(struct ferry_engine *e, struct ferry_seg *s, uint64_t token)
{
	struct wire_disconnect d = { .incarnation = e->incarnation, .token = token };
	int rc;

	if (!token)
		return;
	rc = ctl_disconnect(s->address, FETCH_TIMEOUT_MS, &d);
	/* A peer that is gone has nothing left to free. */
	if (rc && e->opts.verbose)
		log_info("segment %s: disconnect: %s", s->address, strerror(-rc));
}

static void ep_disconnect_peer(struct ferry_engine *e, struct ferry_seg *s, unsigned core)
{
	for (unsigned k = 0; k < EP_MAX_QPS; k++) {
		seg_disconnect_token(e, s, s->qp_tokens[core][k]);
		s->qp_tokens[core][k] = 0;
	}
}

static int ep_handshake(struct ferry_engine *e, unsigned i, struct ferry_seg *s,
			struct ferry_ep *ep)
{
	for (unsigned k = 0; k < ep->nqps; k++) {
		int rc = seg_qp_handshake(e, i, s, ep->remote_nic, ep->qps[k], &s->qp_tokens[i][k]);

		if (rc)
			return rc;
	}
	return 0;
}

/* Connect core i's endpoint to s (to the peer's NIC i mod n), have the
 * core attach its QPs, then publish it.  ctl_lock held. */
static int seg_add_ep(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, unsigned i)
{
	struct ferry_core *c = e->cores[i];
	struct core_cmd cmd = { .type = CMD_EP_ADD, .slot = slot };
	struct ferry_ep *ep;
	int rc = core_make_room(e, i);

	if (rc == 0)
		rc = ep_create(&c->tx[s->tx], e->opts.qps_per_ep, e->opts.wrs_per_qp, &ep);
	if (rc)
		return rc;
	ep->tx = s->tx;
	ep->seg_slot = slot;
	ep->seg_gen = s->gen;
	ep->remote_nic = s->peer_nics[i % s->n_peer_nics];
	ep->rail.published = &s->rail_paused[i];
	ep->cut_off = &s->rail_down[i];
	rc = ep_handshake(e, i, s, ep);
	if (rc == 0) {
		cmd.ep = ep;
		rc = core_command(c, &cmd);
	}
	if (rc) {
		ep_destroy(&c->tx[ep->tx], ep);
		ep_disconnect_peer(e, s, i);
		return rc;
	}
	s->eps[i] = ep;
	WRITE_ONCE(s->rail_down[i], 0);
	WRITE_ONCE(s->rail_paused[i], 0);
	ep_table_set(&c->eps, slot, ep); /* the core sees it whole (RCU publication) */
	sieve_insert(&c->eps.cache, slot);
	store_sc(s->rail_gone[i], 0); /* submitters may pick the rail again */
	return 0;
}

/* One endpoint per local core where the cache has room; fails only when
 * no core could take one, or on any other error. */
static int seg_connect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		int rc = seg_add_ep(e, s, slot, i);

		if (rc && rc != -EBUSY)
			return rc;
		n += rc == 0;
	}
	if (n == 0) {
		log_err("segment %s: every core's endpoint cache (ep_cache %u) is full of endpoints "
			"in use", s->address, e->opts.ep_cache);
		return -EBUSY;
	}
	return 0;
}

/*
 * Connect over the first transport that works (route.c): when ours cannot
 * reach the peer's address on one, the endpoints made so far go and the
 * next is tried.  ctl_lock held.
 */
static int seg_connect_routed(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	unsigned next = 0;
	int rc;

	for (;;) {
		rc = seg_route_next(e, s, s->desc, &next);
		if (rc)
			return rc;
		rc = seg_connect(e, s, slot);
		if (rc != -ENETUNREACH)
			return rc;
		seg_remove_eps(e, s, slot);
		log_warn("segment %s: %s does not reach the peer: trying the next transport",
			 s->address, s->transport);
	}
}

int seg_reconnect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, uint32_t gen)
{
	int rc = -EHOSTDOWN, added = 0;

	pthread_mutex_lock(&e->ctl_lock);
	if (s->state == SEG_OPEN && s->gen == gen) {
		for (unsigned i = 0; i < e->ncores; i++) {
			if (s->eps[i])
				continue;
			rc = seg_add_ep(e, s, slot, i);
			added += rc == 0;
		}
	}
	pthread_mutex_unlock(&e->ctl_lock);
	return added ? added : rc;
}

static struct ferry_seg *seg_find_open(struct ferry_engine *e, const char *address, uint32_t *slot)
{
	for (uint32_t i = 0; i < FERRY_MAX_SEGMENTS; i++) {
		struct ferry_seg *s = &e->segs[i];

		if (s->state == SEG_OPEN && !READ_ONCE(s->stale) &&
		    strcmp(s->address, address) == 0) {
			*slot = i;
			return s;
		}
	}
	return NULL;
}

void seg_rail_set_down(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot,
		       int down)
{
	struct core_cmd cmd = { .type = CMD_EP_DOWN, .slot = slot, .rc = down };

	WRITE_ONCE(s->rail_down[i], (uint8_t)down); /* a hint; the command below is the order */
	if ((cmd.ep = s->eps[i]))
		core_command(e->cores[i], &cmd);
}

void seg_mark_stale(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	if (xchg_relaxed(s->stale, 1))
		return;
	log_warn("segment %s: the peer restarted (new incarnation): requests to the old one "
		 "fail with ESTALE; open the address again", s->address);
	for (unsigned i = 0; i < e->ncores; i++)
		seg_rail_set_down(e, s, i, slot, 1);
}

/*
 * The address is open already: the same peer process keeps its handle; a
 * restarted one (new incarnation) gets a new segment and the old handle is
 * marked stale (its keys and QPs belong to a dead process), so nothing of
 * the old life is reused.  *fresh takes the new descriptor then.
 */
static int seg_check_reopen(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
			    struct seg_desc **fresh)
{
	struct seg_desc *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	rc = ctl_fetch_desc(s->address, FETCH_TIMEOUT_MS, d);
	if (rc == 0 && d->incarnation != s->desc->incarnation) {
		seg_mark_stale(e, s, slot);
		*fresh = d;
		return 0;
	}
	seg_desc_free(d);
	free(d);
	return rc ? rc : 1;
}

static int seg_open_locked(struct ferry_engine *e, const char *address, ferry_seg_t *out)
{
	struct seg_desc *fresh = NULL;
	struct ferry_seg *s;
	uint32_t slot;
	int rc;

	s = seg_find_open(e, address, &slot);
	if (s) {
		rc = seg_check_reopen(e, s, slot, &fresh);
		if (rc == 1)
			*out = seg_handle(s->gen, slot);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	for (slot = 0; slot < FERRY_MAX_SEGMENTS && e->segs[slot].state != SEG_FREE; slot++)
		;
	if (slot == FERRY_MAX_SEGMENTS) {
		if (fresh)
			seg_desc_free(fresh);
		free(fresh);
		return -ENOSPC;
	}
	s = &e->segs[slot];
	s->stale = 0;
	/* A reused slot starts with healthy rails, none connected yet. */
	memset(s->rail_down, 0, sizeof(s->rail_down));
	memset(s->rail_paused, 0, sizeof(s->rail_paused));
	memset(s->rail_gone, 1, sizeof(s->rail_gone));
	s->desc = fresh ? fresh : calloc(1, sizeof(*s->desc));
	if (!s->desc)
		return -ENOMEM;
	rc = fresh ? 0 : ctl_fetch_desc(address, FETCH_TIMEOUT_MS, s->desc);
	if (rc == 0) {
		store_sc(s->gen, s->gen + 1); /* read by seg_lookup/seg_acquire */
		snprintf(s->address, sizeof(s->address), "%s", address);
		rc = seg_connect_routed(e, s, slot);
	}
	if (rc) {
		seg_remove_eps(e, s, slot);
		seg_desc_free(s->desc);
		free(s->desc);
		s->desc = NULL;
		return rc;
	}
	store_sc(s->state, SEG_OPEN); /* pairs with: seg_acquire, core_park */
	*out = seg_handle(s->gen, slot);
	return 0;
}

int ferry_segment_open(struct ferry_engine *e, const char *address, ferry_seg_t *out)
{
	int rc;

	if (!e || !address || !out)
		return -EINVAL;
	if (strlen(address) >= sizeof(e->segs[0].address))
		return -EINVAL;
	pthread_mutex_lock(&e->ctl_lock);
	rc = seg_open_locked(e, address, out);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

static int seg_refresh_locked(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	struct seg_desc *d;
	int rc;

	if (s->n_old == ARRAY_SIZE(s->old_descs))
		return -ENOSPC;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	rc = ctl_fetch_desc(s->address, FETCH_TIMEOUT_MS, d);
	/* A restarted peer (new incarnation) needs new endpoints: open it again. */
	if (rc == 0 && (d->incarnation != s->desc->incarnation || d->n_nics != s->desc->n_nics)) {
		seg_mark_stale(e, s, slot);
		rc = -ESTALE;
	}
	if (rc) {
		seg_desc_free(d);
		free(d);
		return rc;
	}
	/* Requests in flight may still point into the old regions. */
	s->old_descs[s->n_old++] = s->desc;
	store_release(s->desc, d); /* pairs with: load_acquire in rq_prepare */
	return 0;
}

int ferry_segment_refresh(struct ferry_engine *e, ferry_seg_t seg)
{
	struct ferry_seg *s;
	uint32_t slot;
	int rc = -ENOENT;

	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (s && s->state == SEG_OPEN)
		rc = seg_refresh_locked(e, s, slot);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

int ferry_segment_close(struct ferry_engine *e, ferry_seg_t seg)
{
	struct ferry_seg *s;
	uint32_t slot;

	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (!s || s->state != SEG_OPEN) {
		pthread_mutex_unlock(&e->ctl_lock);
		return -ENOENT;
	}
	store_sc(s->state, SEG_CLOSING); /* Dekker pair with seg_acquire: see there */
	/* Requests in flight end on their own: every slice completes, fails,
	 * times out or is retried (possibly on a QP the repair thread must
	 * replace, which needs ctl_lock: wait without it).  New submissions
	 * already see CLOSING, and nobody else touches a CLOSING slot. */
	pthread_mutex_unlock(&e->ctl_lock);
	while (load_sc(s->inflight))
		ferry_sleep_us(50);
	pthread_mutex_lock(&e->ctl_lock);
	seg_remove_eps(e, s, slot);
	seg_desc_free(s->desc);
	free(s->desc);
	s->desc = NULL;
	for (unsigned i = 0; i < s->n_old; i++) {
		seg_desc_free(s->old_descs[i]);
		free(s->old_descs[i]);
	}
	s->n_old = 0;
	s->address[0] = 0;
	store_sc(s->state, SEG_FREE);
	pthread_mutex_unlock(&e->ctl_lock);
	return 0;
}

void seg_disconnect_all(struct ferry_engine *e)
{
	for (uint32_t slot = 0; slot < FERRY_MAX_SEGMENTS; slot++) {
		struct ferry_seg *s = &e->segs[slot];

		if (s->state != SEG_OPEN)
			continue;
		for (unsigned i = 0; i < e->ncores; i++)
			ep_disconnect_peer(e, s, i);
	}
}

void seg_release(struct ferry_seg *s)
{
	if (s->desc) {
		seg_desc_free(s->desc);
		free(s->desc);
	}
	for (unsigned i = 0; i < s->n_old; i++) {
		seg_desc_free(s->old_descs[i]);
		free(s->old_descs[i]);
	}
	s->desc = NULL;
	s->n_old = 0;
	memset(s->eps, 0, sizeof(s->eps));
}
