/* SPDX-License-Identifier: MIT */
/*
 * The worker core's loop (see core.h).  It never blocks, locks, mallocs or
 * logs inside the loop; the only system calls are the provider's, a futex
 * wake for an application thread that sleeps in ferry_batch_wait (counted
 * as wakeups), and the idle back-off when there is nothing to do (idle.c).
 * tests/unit/runtime/test_hotpath.c proves the first three by interposing them.
 */
/* Inline urcu fast paths, except under TSan: its benign internal races would
 * be reported inside our code. */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include "ring/base/fd.h"
#include "runtime/core/core.h"

#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <urcu/urcu-qsbr.h>

#include "ep/teardown.h"
#include "qp/loop/loop.h"
#include "ring/base/clock.h"
#include "ring/base/counters.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

#define SWEEP_MS 10             /* QP timeouts, repairs, pause ends: by time, not
                                 * by passes (a core asleep on its CQ passes rarely) */
#define DRAIN_NS (2ull * 1000 * 1000 * 1000)
#define REPAIR_REASK_MS 1000    /* a repair that did not happen is asked for again */
#define ABANDON_MS 5000         /* a broken QP's flushes come at once; none in this
                                 * long: the device died under them */

/* ---- repair requests ---- */

/* slot (16 bits) | qp (4 bits) | core (6 bits) | gen (32 bits), shifted so it is never 0. */
#define RJ_SLOT_BITS 16
#define RJ_QP_SHIFT RJ_SLOT_BITS
#define RJ_CORE_SHIFT (RJ_QP_SHIFT + 4)
#define RJ_GEN_SHIFT (RJ_CORE_SHIFT + 6)
_Static_assert(FERRY_MAX_SEGMENTS <= (1 << RJ_SLOT_BITS), "a segment slot fits the repair encoding");
_Static_assert(EP_MAX_QPS <= (1 << 4), "a QP index fits the repair encoding");
_Static_assert(FERRY_MAX_CORES <= (1 << 6), "a core index fits the repair encoding");
_Static_assert(sizeof(uintptr_t) * 8 >= 1 + RJ_GEN_SHIFT + 32, "the repair encoding fits a pointer");

uintptr_t core_repair_encode(uint32_t slot, uint32_t qp, uint32_t core, uint32_t gen)
{
	return ((uintptr_t)gen << RJ_GEN_SHIFT | (uintptr_t)core << RJ_CORE_SHIFT |
		(uintptr_t)qp << RJ_QP_SHIFT | slot) << 1 | 1;
}

void core_repair_decode(uintptr_t v, struct repair_job *j)
{
	v >>= 1;
	j->slot = v & ((1u << RJ_SLOT_BITS) - 1);
	j->qp = (v >> RJ_QP_SHIFT) & 0xf;
	j->core = (v >> RJ_CORE_SHIFT) & 0x3f;
	j->gen = (uint32_t)(v >> RJ_GEN_SHIFT);
}

/* ---- slice outcomes ---- */

/* Transport trouble is worth another try; a protection error never is. */
static bool err_retryable(int err)
{
	return err == -ECANCELED || err == -EHOSTUNREACH || err == -ETIMEDOUT || err == -EIO ||
	       err == -ENOTCONN;
}

/*
 * Give a failed slice another go: on another rail when its own is broken,
 * down or paused and another core's is healthy; else on its endpoint's
 * other QPs, or on the same ones once the repair thread replaced them.
 * False when it has had its tries, its endpoint is going away (or down with
 * no other rail), or its request failed already.
 */
static bool slice_retry(struct ferry_core *c, struct slice *s, int err)
{
	struct ferry_ep *ep = s->ep;

	if (!err_retryable(err) || s->tries >= c->retries)
		return false;
	if (ep->closing || load_acquire(c->stop)) /* pairs with: store_release in core_stop */
		return false;
	if (READ_ONCE(s->rq->error))
		return false;
	/* The first retry stays on the endpoint (another QP); later ones, and
	 * any on a rail that is down, paused or without a healthy QP, move.
	 * (tries is counted first: once handed over the slice is not ours.) */
	if (++s->tries > 1 || ep->down || ep->rail.paused || ep_all_broken(ep)) {
		if (slice_handover(c, s))
			return true;
	}
	if (ep->down)
		return false;
	stat_add(&c->ctr, retries, 1);
	slice_list_push_front(&ep->pending, s);
	core_ep_activate(c, ep);
	return true;
}

/* A failed slice, or a success on a rail that had trouble: off the hot path. */
__attribute__((noinline, cold)) void core_slice_trouble(struct ferry_core *c, struct slice *s,
							 int err)
{
	if (err) {
		/* A flush is the echo of an error, not another one. */
		if (err != -ECANCELED && rail_note_error(&s->ep->rail, &c->rail, c->now))
			stat_add(&c->ctr, rail_pauses, 1);
		if (slice_retry(c, s, err))
			return;
		/* The peer is gone: the flush or timeout that brought the slice
		 * back is not the news.  (Unreachable alone keeps its error: a
		 * stopped peer's requests end TIMEOUT, as documented.) */
		if (s->ep->down >= EP_PEER_GONE && !s->ep->closing && err_retryable(err))
			err = -EHOSTDOWN;
	} else {
		rail_note_success(&s->ep->rail);
	}
	core_slice_finish(c, s, err);
}

/* qp_events.slice_done: a WR's outcome, from qctx_poll (or a failed post). */
static void core_on_slice_done(void *owner, struct slice *s, int err)
{
	if (unlikely(err))
		core_slice_trouble(owner, s, err);
	else
		core_on_slices_ok(owner, &s, 0, 0, 1); /* a run of one */
}

/* qp_events.latency: n slices took ticks from post to completion. */
static void core_on_latency(void *owner, uint64_t ticks, uint32_t n)
{
	struct ferry_core *c = owner;

	histo_add_n(&c->lat, ticks, n);
}

/* qp_events.burst_done: the accounting core_on_slices_ok set aside, done
 * before qctx_poll returns, whoever polled (the loop pass, the idle path's
 * last look before sleeping, core_drain). */
static void core_on_burst_done(void *owner)
{
	core_acct_flush(owner);
}

static const struct qp_events core_events = { core_on_slice_done, core_on_slices_ok,
					       core_on_latency, core_on_burst_done };
static const struct qp_events core_events_uncounted = { core_on_slice_done, core_on_slices_ok,
							NULL, core_on_burst_done };

void core_part_fail(struct ferry_core *c, struct ferry_rq *rq, uint64_t a, uint64_t b, int err)
{
	if (rq_account(rq, rq_range_bytes(rq, c->slice_size, a, b), err))
		stat_add(&c->ctr, wakeups, 1);
	stat_add(&c->ctr, reqs_done, 1);
}

/* ---- posting ---- */

void core_fail_pending(struct ferry_core *c, struct ferry_ep *ep, int err)
{
	struct slice *s;

	while ((s = slice_list_pop(&ep->pending)))
		core_slice_finish(c, s, err);
}

/* A batch was cancelled: slices waiting for room whose request failed
 * (cancelled, or failed on another core) are dropped, not posted, and
 * parts parked for a reconnect end now (park_state), not when it lands
 * or times out (test_epcache's test_cancel_parked: before, up to
 * timeout_ms after the cancel). */
static __attribute__((noinline, cold)) void core_drop_failed(struct ferry_core *c)
{
	c->cancel_seen = load_acquire(c->e->cancel_epoch); /* pairs with: ferry_batch_cancel's release */
	if (c->n_parked)
		core_sweep_parked(c);
	for (struct ferry_ep *ep = c->active; ep; ep = ep->next_active) {
		uint32_t k = ep->pending.count;
		struct slice *s;

		while (k-- && (s = slice_list_pop(&ep->pending))) {
			int err = READ_ONCE(s->rq->error);

			if (err)
				core_slice_finish(c, s, err);
			else
				slice_list_push(&ep->pending, s);
		}
	}
}

static uint32_t core_post(struct ferry_core *c)
{
	struct ferry_ep **pp = &c->active;
	struct ferry_ep *ep;
	uint32_t posted = 0;

	while ((ep = *pp)) {
		/* With every QP broken, slices wait for the repair thread. */
		if (unlikely(ep->closing || ep->down))
			core_fail_pending(c, ep, ep->closing ? -ECANCELED : -EHOSTDOWN);
		else
			posted += ep_post(&c->tx[ep->tx], ep);
		if (ep->pending.count == 0) {
			*pp = ep->next_active;
			ep->active = 0;
		} else {
			pp = &ep->next_active;
		}
	}
	return posted;
}

/* ---- sweeps: timeouts, repairs, pause ends ---- */

/* Index of qp in its endpoint. */
static uint32_t ep_qp_index(const struct ferry_ep *ep, const struct qpx *qp)
{
	uint32_t k = 0;

	while (k < ep->nqps && ep->qps[k] != qp)
		k++;
	return k;
}

/* A broken QP whose WRs have all come back can be replaced: ask once. */
static void core_ask_repair(struct ferry_core *c, struct qpx *qp)
{
	struct ferry_ep *ep = qp->owner;
	uintptr_t v;

	/* A stale segment's QPs lead to an incarnation that is gone for good. */
	if (ep->closing || ep->down == EP_STALE ||
	    load_acquire(c->stop)) /* pairs with: store_release in core_stop */
		return;
	v = core_repair_encode(ep->seg_slot, ep_qp_index(ep, qp), c->index, ep->seg_gen);
	if (ferry_ring_put(&c->repairs, (void *)v)) {
		qp->repair_asked = 1; /* a full ring: asked again next sweep */
		qp->repair_asked_at = c->now;
		repair_kick(c->e); /* an error path: a system call only if it sleeps */
	}
}

/*
 * Slices waiting on an endpoint whose QPs are all broken wait for the
 * repair thread -- but not for ever: a rail whose QPs cannot be made again
 * (its device is dead) would hold them.  After the slice timeout they move
 * to another core's rail, or end -ETIMEDOUT.  The same for a context whose
 * CQ room is all gone with the WRs of QPs given up (core_watch_broken).
 */
static void core_sweep_stuck(struct ferry_core *c, struct ferry_ep *ep)
{
	const CqQuotaBlock *cq = &c->tx[ep->tx].cq_quota;
	uint32_t k = ep->pending.count;
	struct slice *s;

	/* A CQ without room and nothing out that would give some back (the
	 * QPs given up took it: qpx_abandon) posts nothing again either. */
	if (!k || !(ep_all_broken(ep) || (!cq->depth && !cq_quota_room(cq)))) {
		ep->all_broken_since = 0;
		return;
	}
	if (!ep->all_broken_since) {
		ep->all_broken_since = c->now;
		return;
	}
	if (!c->timeout_ticks || c->now - ep->all_broken_since <= c->timeout_ticks)
		return;
	while (k-- && (s = slice_list_pop(&ep->pending)))
		slice_stuck_move(c, s);
}

static void core_sweep_rails(struct ferry_core *c)
{
	for (uint32_t k = 0; k < c->eps.cap; k++) {
		struct ferry_ep *ep = core_ep_at(c, k);

		if (ep) {
			rail_pause_over(&ep->rail, c->now);
			core_sweep_stuck(c, ep);
		}
	}
}

/*
 * A QP in error gives its WRs back as flushes at once; one whose WRs stay
 * out ABANDON_MS without any coming back sits on a device that died (no
 * completion, no flush): its slices go on (retried elsewhere, or ended)
 * instead of holding their requests PENDING for as long as we run.
 */
static void core_watch_broken(struct ferry_core *c, struct qctx *q, struct qpx *qp)
{
	if (!qp->stuck_since || qp->head != qp->stuck_head) {
		qp->stuck_head = qp->head;
		qp->stuck_since = c->now ? c->now : 1;
		return;
	}
	if (c->now - qp->stuck_since <= c->abandon_ticks)
		return;
	stat_add(&c->ctr, qp_abandons, 1);
	/* What its flushes would have said (qctx_poll): a QP that timed out
	 * ends its slices -ETIMEDOUT, a request out of retries TIMEOUT. */
	qpx_abandon(q, qp, qp->timed_out ? -ETIMEDOUT : -EIO);
	core_acct_flush(c);
	qp->stuck_since = 0;
}

/*
 * A QP that made no progress for the slice timeout is failed (its WRs
 * flush; their slices retry or end TIMEOUT), and broken, drained QPs are
 * handed to the repair thread.
 */
static void core_sweep_qps(struct ferry_core *c, struct qctx *q)
{
	for (uint32_t i = 0; i < q->n_qps; i++) {
		struct qpx *qp = q->qps[i];

		if (!qp)
			continue;
		if (qp->broken) {
			/* Asked once; again if nothing came of it (the repair
			 * thread drops what it cannot keep: its queue is bounded). */
			if (!qp->depth.depth &&
			    (!qp->repair_asked || c->now - qp->repair_asked_at > c->reask_ticks))
				core_ask_repair(c, qp);
			else if (qp->depth.depth)
				core_watch_broken(c, q, qp);
			continue;
		}
		if (c->timeout_ticks && qp->depth.depth && q->now - qp->oldest_tsc > c->timeout_ticks) {
			qp->timed_out = 1;
			qp->broken = 1;
			q->prov->qp_set_error(qp->nqp);
		}
	}
}

/* Every SWEEP_MS.  noinline: out of the pass's hot path, and
 * bench/callgrind.sh prints its share (wall-clock paced, it weighs more
 * under valgrind's slowdown than natively). */
__attribute__((noinline, cold)) static void core_sweep(struct ferry_core *c)
{
	for (unsigned t = 0; t < c->ntx; t++)
		core_sweep_qps(c, &c->tx[t]);
	core_sweep_rails(c);
	if (c->xfer_wait.count)
		core_sweep_xfer_wait(c);
	if (c->n_parked)
		core_sweep_parked(c);
	c->next_sweep = c->now + c->sweep_ticks;
}

/* ---- the loop ---- */

/* noinline: bench/callgrind.sh counts the instructions spent in here. */
__attribute__((noinline)) static uint32_t core_pass(struct ferry_core *c)
{
	uint32_t work = ferry_ring_peek(&c->cmds) ? core_drain_cmds(c) : 0;

	work += core_drain_ports(c);
	if (c->xfer_in)
		work += core_drain_xfer(c);
	work += cut_fifo_count(&c->cut) ? core_cut(c) : 0; /* most passes: none (port_take cut them) */
	/* pairs with: fetch_add_release in ferry_batch_cancel */
	if (unlikely(load_acquire(c->e->cancel_epoch) != c->cancel_seen))
		core_drop_failed(c);
	work += core_post(c);
	for (unsigned t = 0; t < c->ntx; t++) {
		struct qctx *q = &c->tx[t];

		if (q->cq_quota.depth || q->serves) { /* serves: peers' frames arrive there */
			int n = qctx_poll(q);

			if (n > 0)
				work += (uint32_t)n;
		}
	}
	core_acct_settle(c);
	if (unlikely(c->now >= c->next_sweep))
		core_sweep(c);
	return work;
}

/*
 * WRs the device did not give back within DRAIN_NS, not even as flushes:
 * it died under them (unplugged, a fatal error).  Their requests end
 * FAILED -ECANCELED like the rest of a stopping core's, instead of staying
 * PENDING with their QPs' depth held (core_destroy could not free them).
 */
static void core_drain_abandon(struct ferry_core *c)
{
	uint32_t wrs = 0;

	for (unsigned t = 0; t < c->ntx; t++)
		wrs += c->tx[t].cq_quota.depth;
	if (!wrs)
		return;
	log_warn("%u work requests never came back from the device in %llu ms (not even "
		 "flushed): their requests end FAILED -ECANCELED", /* "core N: " by its box */
		 wrs, DRAIN_NS / 1000000);
	for (uint32_t k = 0; k < c->eps.cap; k++) {
		struct ferry_ep *ep = core_ep_at(c, k);

		if (ep && !ep->qps_gone && ep_depth(ep))
			ep_abandon(&c->tx[ep->tx], ep, -ECANCELED);
	}
}

/* On stop: fail what was queued, flush what was posted, free the endpoints. */
static void core_drain(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	uint64_t deadline = ferry_now_ns() + DRAIN_NS;
	void *obj;

	/* pairs with: store_release of n_ports_hw, rcu_assign_pointer in ferry_port_create */
	for (unsigned i = 0; i < load_acquire(e->n_ports_hw); i++) {
		struct ferry_port *p = rcu_dereference(e->ports[i]); /* pairs with: the same */

		while (p && (obj = ferry_ring_get(&p->rings[c->index]))) {
			struct cut_part pt;
			unsigned part;
			struct ferry_rq *rq = rq_part_untag(obj, &part);

			cut_part_init(&pt, rq, part);
			core_part_fail(c, rq, pt.next, pt.end, -ECANCELED);
		}
	}
	if (c->xfer_in)
		core_drain_xfer_at_stop(c);
	for (; cut_fifo_count(&c->cut); c->cut.head++) {
		struct cut_part *pt = cut_fifo_head(&c->cut);

		core_part_fail(c, pt->rq, pt->next, pt->end, -ECANCELED);
	}
	for (; c->n_parked; c->n_parked--) {
		struct cut_part *pt = &c->parked[c->n_parked - 1].pt;

		core_part_fail(c, pt->rq, pt->next, pt->end, -ECANCELED);
	}
	for (uint32_t k = 0; k < c->eps.cap; k++) {
		struct ferry_ep *ep = core_ep_at(c, k);

		if (ep && !ep->qps_gone) {
			ep->closing = 1;
			core_fail_pending(c, ep, -ECANCELED);
			ep_set_error(&c->tx[ep->tx], ep);
		}
	}
	for (unsigned t = 0; t < c->ntx; t++)
		while (c->tx[t].cq_quota.depth && ferry_now_ns() < deadline)
			qctx_poll(&c->tx[t]);
	core_drain_abandon(c);
	core_acct_flush(c);
	for (uint32_t k = 0; k < c->eps.cap; k++) {
		struct ferry_ep *ep = core_ep_at(c, k);

		if (ep && ep_depth(ep) == 0)
			ep_destroy_qps(&c->tx[ep->tx], ep); /* memory: core_destroy */
	}
	c->active = NULL;
}

uint32_t core_run_pass(struct ferry_core *c, uint64_t t0)
{
	uint32_t work;

	c->now = t0;
	for (unsigned t = 0; t < c->ntx; t++)
		c->tx[t].now = t0;
	work = core_pass(c);
	/* Before the idle back-off, not after it: a pass can end slices
	 * and count no work (dropping a cancelled batch's waiting slices,
	 * failing a closing endpoint's), and the core may then sleep
	 * until the next kick -- with the gauge still counting them. */
	stat_set(&c->ctr, slices_in_flight, c->slices_out);
	ferry_tsan_release(&c->e->tsan_gp);
	if (work) {
		c->idle_loops = 0;
		c->last_work = t0;
	}
	return work;
}

static void *core_main(void *arg)
{
	struct ferry_core *c = arg;
	uint64_t t0, t1;

	log_defer(&c->logbox); /* never the sink's lock or callback on a core */
	urcu_qsbr_register_thread();
	if (c->e->opts.counters)
		perf_open_self(&c->perf);
	if (c->e->opts.verbose && c->perf.why[0])
		log_info("hardware counters: %s", c->perf.why); /* "core N: " by its box */
	if (c->waiters_drive)
		core_thread_takes_back(c); /* held while awake; let go only asleep */
	t0 = ferry_tsc();
	while (!load_acquire(c->stop)) { /* pairs with: store_release in core_stop */
		uint32_t work;

		/* FERRY_IDLE_CALLER: application threads run the passes while
		 * they call in; the thread naps and takes over when they stop. */
		if (c->caller_mode) {
			if (!core_thread_drives(c)) {
				t0 = ferry_tsc();
				continue;
			}
			/* A caller's pass may have run since t0 was read: a pass
			 * with an older clock than its would see now - since
			 * underflow (false QP and park timeouts). */
			t0 = ferry_tsc();
		}
		work = core_run_pass(c, t0);
		urcu_qsbr_quiescent_state();
		if (!work)
			core_idle(c);
		t1 = ferry_tsc();
		core_account_time(c, t0, t1, work);
		if (c->caller_mode) /* last: the counters are the driver's too */
			core_thread_lets_go(c);
		t0 = t1;
	}
	if (c->caller_mode)
		core_thread_takes_back(c);
	core_drain(c);
	stat_set(&c->ctr, slices_in_flight, c->slices_out);
	urcu_qsbr_unregister_thread();
	return NULL;
}

/* ---- lifecycle (control path) ---- */

/* What the provider opens: "tcp" listens for its peers' data connections on
 * the engine's control address ("tcp@127.0.0.1"); other names as given. */
static const char *core_nic_dev(const struct ferry_core *c, const char *nic, char *buf, size_t len)
{
	const char *listen = c->e->opts.listen ? c->e->opts.listen : "127.0.0.1:0";
	const char *colon = strrchr(listen, ':');

	if (strcmp(nic, "tcp") != 0 || !colon)
		return nic;
	snprintf(buf, len, "tcp@%.*s", (int)(colon - listen), listen);
	return buf;
}

static int core_open_nic(struct ferry_core *c, struct qctx *q, const char *nic)
{
	const struct nic_provider *prov = nic_provider_for(nic);
	const struct ferry_opts *o = &c->e->opts;
	struct nic_caps caps = { 0 }; /* a provider fills what it knows */
	char dev[96];
	int rc;

	if (!prov) {
		log_err("empty NIC name in the nics list");
		return -ENODEV;
	}
	q->prov = prov;
	rc = prov->open(core_nic_dev(c, nic, dev, sizeof(dev)), &q->nic);
	if (rc) {
		log_err("cannot open NIC '%s': %s", nic, strerror(-rc));
		return rc;
	}
	prov->caps(q->nic, &caps);
	q->max_reads = caps.max_rd_atomic ? caps.max_rd_atomic : 1;
	q->serves = !!(caps.flags & NIC_CAP_SERVES);
	rc = prov->cq_create(q->nic, o->cqes, &q->cq);
	if (rc)
		log_err("cannot create a CQ of %u entries on '%s': %s", o->cqes, nic, strerror(-rc));
	if (rc == 0 && c->e->knobs.loop_nocopy && strcmp(prov->name, "loop") == 0)
		loop_set_nocopy(q->nic, 1);
	return rc;
}

/* Options the loop reads, converted once. */
static void core_set_limits(struct ferry_core *c, const struct ferry_opts *o)
{
	c->slice_size = o->slice_size;
	c->retries = o->retries;
	c->timeout_ticks = ferry_ms_to_tsc(o->timeout_ms);
	c->sweep_ticks = ferry_ms_to_tsc(SWEEP_MS);
	c->reask_ticks = ferry_ms_to_tsc(REPAIR_REASK_MS);
	c->abandon_ticks = ferry_ms_to_tsc(c->e->knobs.abandon_ms ? c->e->knobs.abandon_ms
								   : ABANDON_MS);
	c->linger_ticks = ferry_ms_to_tsc(o->idle_linger_us) / 1000;
	c->caller_mode = o->idle == FERRY_IDLE_CALLER;
	c->waiters_drive = o->idle == FERRY_IDLE_ADAPTIVE;
	c->caller_fallback_ticks = ferry_ms_to_tsc(CALLER_FALLBACK_MS);
	c->rail.errors = o->rail_errors;
	c->rail.window = ferry_ms_to_tsc(o->rail_window_ms);
	c->rail.pause_min = ferry_ms_to_tsc(o->rail_pause_ms);
	c->rail.pause_max = ferry_ms_to_tsc(o->rail_pause_max_ms);
}

/* Context t of c, before it opens: its share of the core's options. */
static void core_tx_init(struct ferry_core *c, struct qctx *q)
{
	const struct ferry_opts *o = &c->e->opts;

	q->ev = o->counters ? &core_events : &core_events_uncounted;
	q->owner = c;
	q->signal_every = o->signal_every;
	q->cq_quota.max = o->cqes;
}

static int core_open_nics(struct ferry_core *c, const char *const *nics, unsigned n)
{
	size_t len = 0;

	for (unsigned t = 0; t < n; t++) {
		int rc;

		core_tx_init(c, &c->tx[t]);
		rc = core_open_nic(c, &c->tx[t], nics[t]);
		if (rc)
			return rc;
		c->ntx++;
		len += (size_t)snprintf(c->nic_name + len, sizeof(c->nic_name) - len, "%s%s",
					t ? "," : "", nics[t]);
		if (len >= sizeof(c->nic_name))
			len = sizeof(c->nic_name) - 1;
	}
	return 0;
}

/*
 * Endpoints the core keeps: ep_cache, but no more than a context's QP
 * table holds with one QP to spare, which a repair needs (it attaches the
 * new QP before the broken one goes).  Beyond, an open with room in the
 * cache failed -ENOSPC, and with the table exactly full no broken QP was
 * ever replaced (test_epcache's test_cache_full_of_qps).
 */
static uint32_t core_ep_cap(const struct ferry_opts *o)
{
	uint32_t fits = QP_MAX_PER_CORE / o->qps_per_ep - 1; /* qps_per_ep 1..16 */

	return o->ep_cache < fits ? o->ep_cache : fits;
}

/* Every context's slices come from one pool of 2 x cqes per context. */
static int core_init(struct ferry_core *c, const char *const *nics, unsigned n, int node)
{
	const struct ferry_opts *o = &c->e->opts;
	int rc;

	c->wake_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	rc = c->wake_fd < 0 ? -errno : ep_table_init(&c->eps, core_ep_cap(o));
	if (c->wake_fd < 0)
		log_err("core %u: cannot make its wake-up eventfd: %s", c->index, strerror(-rc));
	if (rc == 0 && c->eps.cap < o->ep_cache && c->index == 0 && o->verbose)
		log_info("ep_cache %u lowered to %u: a core's context holds %u QPs, %u per endpoint "
			 "and one spare for a repair", o->ep_cache, c->eps.cap, QP_MAX_PER_CORE,
			 o->qps_per_ep);
	if (rc == 0)
		rc = ferry_ring_init(&c->cmds, CMD_RING);
	if (rc == 0)
		rc = ferry_ring_init(&c->repairs, REPAIR_RING);
	if (rc == 0)
		rc = slice_pool_init(&c->pool, 2 * o->cqes * n, node);
	if (rc == 0)
		rc = core_open_nics(c, nics, n);
	for (uint32_t k = 0; rc == 0 && k < c->pool.size; k++)
		c->pool.slab[k].home = (uint8_t)c->index;
	slice_list_init(&c->xfer_wait);
	slice_list_init(&c->xfer_back);
	return rc;
}

int core_create(struct ferry_engine *e, unsigned index, unsigned cpu, const char *const *nics,
		unsigned n, struct ferry_core **out)
{
	int node = numa_available() >= 0 ? numa_node_of_cpu((int)cpu) : -1;
	struct ferry_core *c;
	int rc;

	if (n == 0 || n > CORE_MAX_TX)
		return -EINVAL;
	c = node >= 0 ? numa_alloc_onnode(sizeof(*c), node) : numa_alloc_local(sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	log_box_init(&c->logbox, "core", index); /* first: core_destroy finis it */
	c->e = e;
	c->segs = &e->segs;
	c->index = index;
	c->seg_ep_off = offsetof(struct ferry_seg, eps) + index * sizeof(struct ferry_ep *);
	c->cpu = cpu;
	c->numa = node;
	c->wake_fd = -1;
	if (!e->opts.counters) { /* before the thread starts: readers see it whole */
		snprintf(c->perf.why, sizeof(c->perf.why), "off (counters=0)");
		c->perf.tried = 1;
	}
	core_set_limits(c, &e->opts);
	rc = core_init(c, nics, n, node);
	if (rc) {
		core_destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

int core_tx_of(const struct ferry_core *c, const char *prov)
{
	for (unsigned t = 0; t < c->ntx; t++)
		if (strcmp(c->tx[t].prov->name, prov) == 0)
			return (int)t;
	return -1;
}

int core_start(struct ferry_core *c)
{
	char name[16];
	pthread_attr_t attr;
	cpu_set_t set;
	int rc;

	CPU_ZERO(&set);
	CPU_SET(c->cpu, &set);
	pthread_attr_init(&attr);
	pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	rc = -pthread_create(&c->thread, &attr, core_main, c);
	pthread_attr_destroy(&attr);
	if (rc) { /* EINVAL: a CPU outside this process's cpuset, say */
		log_err("core %u: cannot start its thread on CPU %u: %s", c->index, c->cpu,
			strerror(-rc));
		return rc;
	}
	snprintf(name, sizeof(name), "ferry-core%u", c->index);
	(void)pthread_setname_np(c->thread, name); /* top -H and perf show who is who */
	c->started = 1;
	return 0;
}

/* Tell c's thread to stop (it drains: fails what is queued, waits up to
 * DRAIN_NS for what is posted); core_stop waits for it.  Several cores
 * told first drain side by side: a dead device costs one DRAIN_NS, not
 * one per core. */
void core_stop_begin(struct ferry_core *c)
{
	if (!c->started)
		return;
	store_release(c->stop, 1); /* pairs with: load_acquire in core_main */
	eventfd_write(c->wake_fd, 1);
}

void core_stop(struct ferry_core *c)
{
	if (!c->started)
		return;
	core_stop_begin(c);
	pthread_join(c->thread, NULL);
	log_box_drain(&c->logbox); /* its last words: core_drain's */
	c->started = 0;
}

void core_destroy(struct ferry_core *c)
{
	if (!c)
		return;
	core_stop(c);
	/* Stopped: no reader is left, no grace period needed. */
	for (uint32_t k = 0; k < c->eps.cap; k++) {
		struct ferry_ep *ep = core_ep_at(c, k);

		if (ep) {
			ep_table_del(&c->eps, ep);
			ep_destroy(&c->tx[ep->tx], ep);
		}
	}
	ep_table_fini(&c->eps);
	for (unsigned t = 0; t < CORE_MAX_TX; t++) {
		struct qctx *q = &c->tx[t];

		if (q->cq)
			q->prov->cq_destroy(q->cq);
		if (q->nic)
			q->prov->close(q->nic);
	}
	slice_pool_fini(&c->pool);
	ferry_ring_fini(&c->cmds);
	ferry_ring_fini(&c->repairs);
	handover_fini(c);
	perf_close(&c->perf);
	if (c->wake_fd >= 0)
		fd_close(c->wake_fd);
	log_box_fini(&c->logbox);
	numa_free(c, sizeof(*c));
}
