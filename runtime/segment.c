/* SPDX-License-Identifier: MIT */
/*
 * Segments: a peer engine's registered memory as seen from here, and the
 * endpoints every local core holds to it.  Submitters take a reference
 * (inflight) before they look at a segment and the closer waits for
 * references to drain after marking it closing: a Dekker pair of seq_cst
 * operations, so neither can miss the other and no lock is needed on the
 * submit path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define FETCH_TIMEOUT_MS 5000

static ferry_seg_t seg_handle(uint32_t gen, uint32_t slot)
{
	return (uint64_t)gen << 32 | (slot + 1);
}

static struct ferry_seg *seg_lookup(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	uint32_t s = (uint32_t)h - 1;

	if ((uint32_t)h == 0 || s >= FERRY_MAX_SEGS)
		return NULL;
	if (__atomic_load_n(&e->segs[s].gen, __ATOMIC_SEQ_CST) != (uint32_t)(h >> 32))
		return NULL;
	*slot = s;
	return &e->segs[s];
}

struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	struct ferry_seg *s = seg_lookup(e, h, slot);

	if (!s)
		return NULL;
	__atomic_fetch_add(&s->inflight, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != SEG_OPEN ||
	    __atomic_load_n(&s->gen, __ATOMIC_SEQ_CST) != (uint32_t)(h >> 32)) {
		seg_release_ref(s);
		return NULL;
	}
	return s;
}

void seg_release_ref(struct ferry_seg *s)
{
	__atomic_fetch_sub(&s->inflight, 1, __ATOMIC_SEQ_CST);
}

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

static void ep_disconnect_peer(struct ferry_engine *e, struct ferry_seg *s, unsigned core);

/* Remove slot's endpoint from every core; waits out flushes (-EBUSY). */
static void seg_remove_eps(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	for (unsigned i = 0; i < e->ncores; i++) {
		struct core_cmd cmd = { .type = CMD_EP_REMOVE, .slot = slot };

		if (!s->eps[i])
			continue;
		while (core_command(e->cores[i], &cmd) == -EBUSY)
			sleep_us(100);
		s->eps[i] = NULL;
		ep_disconnect_peer(e, s, i);
	}
}

static int seg_check_desc(struct ferry_engine *e, const struct seg_desc *d, const char *address)
{
	for (unsigned i = 0; i < e->ncores; i++) {
		const struct seg_nic *n = &d->nics[i % d->n_nics];

		if (strcmp(n->provider, e->prov[i]->name) != 0) {
			fprintf(stderr, "ferry: segment %s: its NIC %u is '%s', core %u has '%s'\n",
				address, i % d->n_nics, n->provider, i, e->prov[i]->name);
			return -EPROTONOSUPPORT;
		}
	}
	return 0;
}

static void handshake_req(struct ferry_engine *e, unsigned i, const struct seg_desc *d,
			  uint32_t remote_nic, struct qpx *q, uint64_t token,
			  struct wire_connect_req *req)
{
	struct ferry_core *c = e->cores[i];

	memset(req, 0, sizeof(*req));
	req->incarnation = e->incarnation;
	req->token = token;
	req->target_incarnation = d->incarnation;
	req->target_nic = (uint16_t)remote_nic;
	req->n_qps = 1;
	snprintf(req->nic.provider, sizeof(req->nic.provider), "%s", c->q.prov->name);
	c->q.prov->addr(c->q.nic, &req->nic.addr);
	c->q.prov->qp_info(q->nqp, &req->qps[0]);
}

/*
 * Connect one of core i's QPs to a new responder QP on the peer's NIC
 * remote_nic: ours here, the peer's on its control thread.  One handshake
 * per QP, each with its own token, so a broken QP can be replaced alone.
 */
int seg_qp_handshake(struct ferry_engine *e, unsigned i, struct ferry_seg *s,
		     uint32_t remote_nic, struct qpx *q, uint64_t *token)
{
	struct ferry_core *c = e->cores[i];
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	char here[160];
	int rc;

	*token = ++e->next_token;
	handshake_req(e, i, s->desc, remote_nic, q, *token, &req);
	rc = ctl_connect(s->address, FETCH_TIMEOUT_MS, &req, &rep);
	if (rc == 0) {
		rc = c->q.prov->qp_connect(q->nqp, &s->desc->nics[remote_nic].addr, &rep.qps[0]);
		if (rc)
			seg_disconnect_token(e, s, *token);
	}
	if (rc) {
		*token = 0;
		c->q.prov->describe(c->q.nic, here, sizeof(here));
		fprintf(stderr, "ferry: segment %s: connecting a QP of core %u (%s) to the peer's "
			"NIC %u failed: %s\n", s->address, i, here, remote_nic, strerror(-rc));
	}
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
		fprintf(stderr, "ferry: segment %s: disconnect: %s\n", s->address, strerror(-rc));
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

/* One endpoint per local core, core i to the peer's NIC i mod n. */
static int seg_connect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	const struct seg_desc *d = s->desc;

	for (unsigned i = 0; i < e->ncores; i++) {
		struct core_cmd cmd = { .type = CMD_EP_ADD, .slot = slot };
		struct ferry_ep *ep;
		int rc;

		rc = ep_create(&e->cores[i]->q, e->opts.qps_per_ep, e->opts.wrs_per_qp, &ep);
		if (rc)
			return rc;
		ep->seg_slot = slot;
		ep->seg_gen = s->gen;
		ep->remote_nic = i % d->n_nics;
		ep->seg = s;
		rc = ep_handshake(e, i, s, ep);
		if (rc == 0) {
			cmd.ep = ep;
			rc = core_command(e->cores[i], &cmd);
		}
		if (rc) {
			ep_destroy(&e->cores[i]->q, ep);
			ep_disconnect_peer(e, s, i);
			return rc;
		}
		s->eps[i] = ep;
	}
	return 0;
}

static struct ferry_seg *seg_find_open(struct ferry_engine *e, const char *address, uint32_t *slot)
{
	for (uint32_t i = 0; i < FERRY_MAX_SEGS; i++) {
		struct ferry_seg *s = &e->segs[i];

		if (s->state == SEG_OPEN && strcmp(s->address, address) == 0) {
			*slot = i;
			return s;
		}
	}
	return NULL;
}

static int seg_open_locked(struct ferry_engine *e, const char *address, ferry_seg_t *out)
{
	struct ferry_seg *s;
	uint32_t slot;
	int rc;

	s = seg_find_open(e, address, &slot);
	if (s) {
		*out = seg_handle(s->gen, slot);
		return 0;
	}
	for (slot = 0; slot < FERRY_MAX_SEGS && e->segs[slot].state != SEG_FREE; slot++)
		;
	if (slot == FERRY_MAX_SEGS)
		return -ENOSPC;
	s = &e->segs[slot];
	/* A reused slot starts with healthy rails. */
	memset(s->rail_down, 0, sizeof(s->rail_down));
	memset(s->rail_paused, 0, sizeof(s->rail_paused));
	s->desc = calloc(1, sizeof(*s->desc));
	if (!s->desc)
		return -ENOMEM;
	rc = ctl_fetch_desc(address, FETCH_TIMEOUT_MS, s->desc);
	if (rc == 0)
		rc = seg_check_desc(e, s->desc, address);
	if (rc == 0) {
		__atomic_store_n(&s->gen, s->gen + 1, __ATOMIC_SEQ_CST);
		snprintf(s->address, sizeof(s->address), "%s", address);
		rc = seg_connect(e, s, slot);
	}
	if (rc) {
		seg_remove_eps(e, s, slot);
		seg_desc_free(s->desc);
		free(s->desc);
		s->desc = NULL;
		return rc;
	}
	__atomic_store_n(&s->state, SEG_OPEN, __ATOMIC_SEQ_CST);
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

static int seg_refresh_locked(struct ferry_seg *s)
{
	struct seg_desc *d;
	int rc;

	if (s->n_old == ARRAY_SIZE(s->old_descs))
		return -ENOSPC;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	rc = ctl_fetch_desc(s->address, FETCH_TIMEOUT_MS, d);
	/* A restarted peer (new incarnation) needs new endpoints: close and reopen. */
	if (rc == 0 && (d->incarnation != s->desc->incarnation || d->n_nics != s->desc->n_nics))
		rc = -ESTALE;
	if (rc) {
		seg_desc_free(d);
		free(d);
		return rc;
	}
	/* Requests in flight may still point into the old regions. */
	s->old_descs[s->n_old++] = s->desc;
	__atomic_store_n(&s->desc, d, __ATOMIC_RELEASE);
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
		rc = seg_refresh_locked(s);
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
	__atomic_store_n(&s->state, SEG_CLOSING, __ATOMIC_SEQ_CST);
	/* Requests in flight end on their own: every slice completes, fails,
	 * times out or is retried (possibly on a QP the repair thread must
	 * replace, which needs ctl_lock: wait without it).  New submissions
	 * already see CLOSING, and nobody else touches a CLOSING slot. */
	pthread_mutex_unlock(&e->ctl_lock);
	while (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST))
		sleep_us(50);
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
	__atomic_store_n(&s->state, SEG_FREE, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&e->ctl_lock);
	return 0;
}

void seg_disconnect_all(struct ferry_engine *e)
{
	for (uint32_t slot = 0; slot < FERRY_MAX_SEGS; slot++) {
		struct ferry_seg *s = &e->segs[slot];

		if (s->state != SEG_OPEN)
			continue;
		for (unsigned i = 0; i < e->ncores; i++)
			ep_disconnect_peer(e, s, i);
	}
}
