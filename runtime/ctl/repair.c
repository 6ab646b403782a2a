/* SPDX-License-Identifier: MIT */
/*
 * The repair thread: replaces QPs that broke (an error completion, a flush,
 * a timeout) once their owning core has drained them, through a new
 * handshake with the peer.  A core asks through its repair ring (SPSC, core
 * -> this thread; the request is an encoded integer, not a pointer, so a
 * request for an endpoint that has gone since is simply dropped).  When the
 * peer cannot be reached through the core's rail, the rail is marked down
 * (new work avoids it, its waiting slices move to another rail); when no
 * rail reaches the peer, the cores fail its requests fast (-EHOSTDOWN).
 * The repair is tried again with a growing back-off: a link that comes back,
 * or a restarted peer, becomes reachable again.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <urcu/urcu-qsbr.h>

#include "runtime/internal.h"
#include "ring/base/counters.h"

#define REPAIR_IDLE_NS (1000 * 1000)      /* polls the cores' rings every 1 ms */
#define REPAIR_BACKOFF_MIN_MS 50
#define REPAIR_BACKOFF_MAX_MS 2000

/* slot (8 bits) | qp (4 bits) | core (6 bits) | gen (32 bits), shifted so it is never 0. */
uintptr_t repair_encode(uint32_t slot, uint32_t qp, uint32_t core, uint32_t gen)
{
	return ((uintptr_t)gen << 19 | (uintptr_t)core << 13 | (uintptr_t)qp << 9 | slot) << 1 | 1;
}

static void repair_decode(uintptr_t v, struct repair_job *j)
{
	v >>= 1;
	j->slot = v & 0x1ff;
	j->qp = (v >> 9) & 0xf;
	j->core = (v >> 13) & 0x3f;
	j->gen = (uint32_t)(v >> 19);
}

static uint64_t now_ms(void)
{
	return ferry_now_ns() / 1000000;
}

/*
 * Core i's rail cannot reach the peer.  New work avoids the rail at once
 * (submitters and hand-overs read the flag), but the cores are told to
 * fail fast only when no rail of the segment reaches the peer: while one
 * does, the slices waiting on this rail move there (runtime/handover.c)
 * instead of failing with -EHOSTDOWN.
 */
static void rail_unreachable(struct ferry_engine *e, struct ferry_seg *s, unsigned i,
			     uint32_t slot)
{
	__atomic_store_n(&s->rail_down[i], 1, __ATOMIC_RELEASE);
	for (unsigned k = 0; k < e->ncores; k++)
		if (s->eps[k] && !__atomic_load_n(&s->rail_down[k], __ATOMIC_ACQUIRE))
			return; /* the peer answers on core k's rail */
	for (unsigned k = 0; k < e->ncores; k++)
		if (s->eps[k])
			seg_rail_set_down(e, s, k, slot, 1);
}

/* Replace QP j->qp of core j->core's endpoint; ctl_lock held.  0, or -errno to retry later. */
static int repair_one(struct ferry_engine *e, const struct repair_job *j)
{
	struct ferry_seg *s = &e->segs[j->slot];
	struct ferry_core *c = e->cores[j->core];
	struct core_cmd cmd = { .type = CMD_QP_REPLACE, .slot = j->slot };
	struct ferry_ep *ep;
	uint64_t token;
	struct qpx *q;
	int rc;

	/* A CLOSING segment still has requests in flight that may need the QP. */
	if ((s->state != SEG_OPEN && s->state != SEG_CLOSING) || s->gen != j->gen ||
	    !(ep = s->eps[j->core]))
		return 0; /* the segment went: nothing to repair */
	rc = qpx_create(&c->q, e->opts.wrs_per_qp, ep, &q);
	if (rc)
		return rc;
	rc = seg_qp_handshake(e, j->core, s, ep->remote_nic, q, &token);
	if (rc) {
		qpx_destroy(&c->q, q);
		if (rc == -ESTALE) /* the peer restarted: its keys are gone for good */
			seg_mark_stale(e, s, j->slot);
		rail_unreachable(e, s, j->core, j->slot);
		return rc;
	}
	cmd.ep = ep;
	cmd.qp = q;
	cmd.index = j->qp;
	rc = core_command(c, &cmd);
	if (rc) {
		qpx_destroy(&c->q, q);
		seg_disconnect_token(e, s, token);
		return rc;
	}
	seg_disconnect_token(e, s, s->qp_tokens[j->core][j->qp]);
	s->qp_tokens[j->core][j->qp] = token;
	if (s->rail_down[j->core])
		__atomic_store_n(&s->rail_down[j->core], 0, __ATOMIC_RELEASE);
	return 0;
}

static void repair_later(struct repair *r, struct repair_job *j)
{
	uint32_t backoff = j->backoff_ms ? j->backoff_ms * 2 : REPAIR_BACKOFF_MIN_MS;

	if (r->n_later == REPAIR_LATER_MAX)
		return; /* the core asks again if the QP is still broken */
	j->backoff_ms = backoff < REPAIR_BACKOFF_MAX_MS ? backoff : REPAIR_BACKOFF_MAX_MS;
	j->due_ms = now_ms() + j->backoff_ms;
	r->later[r->n_later++] = *j;
}

static void repair_run(struct ferry_engine *e, struct repair_job *j)
{
	int rc;

	pthread_mutex_lock(&e->ctl_lock);
	rc = repair_one(e, j);
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc)
		repair_later(&e->repair, j);
}

/* Jobs whose back-off ran out go again. */
static unsigned repair_due(struct ferry_engine *e)
{
	struct repair *r = &e->repair;
	uint64_t now = now_ms();
	unsigned ran = 0;

	for (unsigned k = 0; k < r->n_later;) {
		struct repair_job j = r->later[k];

		if (j.due_ms > now) {
			k++;
			continue;
		}
		r->later[k] = r->later[--r->n_later];
		repair_run(e, &j);
		ran++;
	}
	return ran;
}

static unsigned repair_drain(struct ferry_engine *e)
{
	unsigned got = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		void *v;

		while ((v = ferry_ring_get(&e->cores[i]->repairs))) {
			struct repair_job j = { 0 };

			repair_decode((uintptr_t)v, &j);
			repair_run(e, &j);
			got++;
		}
	}
	return got;
}

#define KEEPALIVE_TIMEOUT_MS 1000

/* Tell every open segment's peer we are alive, so it keeps our QPs.  The
 * calls go without ctl_lock: a dead peer costs a connect timeout. */
static void peers_keepalive(struct ferry_engine *e)
{
	char addr[FERRY_MAX_SEGS][sizeof(e->segs[0].address)];
	int timeout = e->opts.keepalive_ms < KEEPALIVE_TIMEOUT_MS ? (int)e->opts.keepalive_ms
								   : KEEPALIVE_TIMEOUT_MS;
	unsigned n = 0;

	pthread_mutex_lock(&e->ctl_lock);
	for (unsigned i = 0; i < FERRY_MAX_SEGS; i++) {
		const struct ferry_seg *s = &e->segs[i];

		if (s->state == SEG_OPEN && !__atomic_load_n(&s->stale, __ATOMIC_RELAXED))
			memcpy(addr[n++], s->address, sizeof(addr[0]));
	}
	pthread_mutex_unlock(&e->ctl_lock);
	for (unsigned i = 0; i < n; i++)
		(void)ctl_keepalive(addr[i], timeout, e->incarnation);
}

/* Segments whose endpoints were evicted and that a request waits for. */
static unsigned repair_reconnects(struct ferry_engine *e)
{
	unsigned n = 0;

	for (uint32_t slot = 0; slot < FERRY_MAX_SEGS; slot++) {
		struct ferry_seg *s = &e->segs[slot];
		int rc;

		if (!__atomic_load_n(&s->want_eps, __ATOMIC_ACQUIRE) ||
		    !__atomic_exchange_n(&s->want_eps, 0, __ATOMIC_ACQ_REL))
			continue;
		rc = seg_reconnect(e, s, slot, __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE));
		__atomic_store_n(&s->connect_err, rc < 0 ? rc : 0, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->connect_round, 1, __ATOMIC_RELEASE);
		for (unsigned i = 0; i < e->ncores; i++)
			core_kick(e->cores[i]);
		n++;
	}
	return n;
}

/* Keepalives out, and the QPs of initiators that went silent freed. */
static void repair_leases(struct ferry_engine *e)
{
	struct repair *r = &e->repair;
	uint64_t now = now_ms();

	if (e->opts.keepalive_ms && now >= r->next_keepalive_ms) {
		peers_keepalive(e);
		r->next_keepalive_ms = now + e->opts.keepalive_ms;
	}
	if (e->opts.lease_ms && now >= r->next_expire_ms) {
		passive_expire(e, (uint64_t)e->opts.lease_ms * 1000000);
		r->next_expire_ms = now + (e->opts.lease_ms + 3) / 4;
	}
}

static void *repair_main(void *arg)
{
	struct ferry_engine *e = arg;
	struct timespec idle = { 0, REPAIR_IDLE_NS };

	/* Registered for call_rcu (runtime/reap.c), offline but for that. */
	urcu_qsbr_register_thread();
	urcu_qsbr_thread_offline();
	while (!__atomic_load_n(&e->repair.stop, __ATOMIC_ACQUIRE)) {
		if (repair_drain(e) + repair_due(e) + reap_run(e) + repair_reconnects(e) == 0)
			nanosleep(&idle, NULL);
		repair_leases(e);
	}
	reap_run(e);
	urcu_qsbr_thread_online();
	urcu_qsbr_unregister_thread();
	return NULL;
}

int repair_start(struct ferry_engine *e)
{
	int rc = -pthread_create(&e->repair.thread, NULL, repair_main, e);

	e->repair.started = rc == 0;
	return rc;
}

void repair_stop(struct ferry_engine *e)
{
	if (!e->repair.started)
		return;
	__atomic_store_n(&e->repair.stop, 1, __ATOMIC_RELEASE);
	pthread_join(e->repair.thread, NULL);
	e->repair.started = 0;
}
