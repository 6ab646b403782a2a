/* SPDX-License-Identifier: MIT */
/*
 * The worker core: one pinned thread that owns one NIC context, its CQ and
 * its QPs, and runs to completion:
 *
 *   commands -> drain port rings -> cut slices -> post -> poll -> timeouts
 *   -> RCU quiescent state -> (idle back-off)
 *
 * It never blocks, locks, mallocs or logs inside the loop; the only system
 * calls are the provider's, a futex wake for an application thread that
 * sleeps in ferry_batch_wait (counted as wakeups), and the idle back-off
 * when there is nothing to do: sched_yield, then poll(2) on the core's wake
 * eventfd and, with work in flight on a NIC that has one, the CQ's
 * completion channel (counted as sleeps).
 */
/* Inline urcu fast paths, except under TSan: its benign internal races would
 * be reported inside our code. */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include <errno.h>
#include <numa.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-qsbr.h>

#include "qp/loop/loop.h"
#include "runtime/internal.h"
#include "ring/base/counters.h"

#define PORT_BURST 32
#define CUT_BUDGET 512          /* slices cut per pass: keeps polls frequent */
#define SPIN_LOOPS 256          /* idle passes before yielding the CPU */
#define SLEEP_LOOPS 4096        /* idle passes (nothing in flight) before sleeping */
#define SLEEP_MS 20               /* idle, nothing in flight */
#define CQ_SLEEP_MS 10            /* work in flight on a NIC with a completion channel */
#define SWEEP_MS 10                /* QP timeouts, repairs, pause ends: by time, not
                                   * by passes (a core asleep on its CQ passes rarely) */
#define DRAIN_NS (2ull * 1000 * 1000 * 1000)

static void eventfd_drain(int fd)
{
	eventfd_t v;

	eventfd_read(fd, &v); /* non-blocking: EAGAIN when nothing was written */
}

static struct ferry_core *core_of(struct qctx *ctx)
{
	return (struct ferry_core *)((char *)ctx - offsetof(struct ferry_core, q));
}

/* The slice's last outcome: account its bytes to the request and free it. */
void core_slice_finish(struct ferry_core *c, struct slice *s, int err)
{
	if (likely(!err))
		stat_add(&c->stats, bytes, s->len);
	if (rq_account(s->rq, s->len, err))
		stat_add(&c->stats, wakeups, 1);
	slice_put(&c->pool, s);
	c->slices_out--;
}

/* Transport trouble is worth another try; a protection error never is. */
static bool err_retryable(int err)
{
	return err == -ECANCELED || err == -EHOSTUNREACH || err == -ETIMEDOUT || err == -EIO ||
	       err == -ENOTCONN;
}


static void rail_publish(struct ferry_core *c, struct ferry_ep *ep)
{
	if (ep->seg)
		__atomic_store_n(&ep->seg->rail_paused[c->index], ep->paused, __ATOMIC_RELAXED);
}

/* Rail health: rail_errors errors within a window pause the rail, each
 * pause longer than the last while it keeps failing. */
static void rail_note_error(struct ferry_core *c, struct ferry_ep *ep)
{
	uint64_t now = c->q.now;

	if (now - ep->win_start > c->rail_window_tsc) {
		ep->win_start = now;
		ep->errs = 0;
	}
	if (++ep->errs < c->rail_errs || ep->paused)
		return;
	ep->backoff = ep->backoff ? 2 * ep->backoff : c->rail_backoff_min_tsc;
	if (ep->backoff > c->rail_backoff_max_tsc)
		ep->backoff = c->rail_backoff_max_tsc;
	ep->paused_until = now + ep->backoff;
	ep->paused = 1;
	rail_publish(c, ep);
	stat_add(&c->stats, rail_pauses, 1);
}

/* A success ends a pause early and resets the back-off. */
static void rail_note_success(struct ferry_core *c, struct ferry_ep *ep)
{
	ep->errs = 0;
	ep->backoff = 0;
	if (ep->paused) {
		ep->paused = 0;
		rail_publish(c, ep);
	}
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

	if (!err_retryable(err) || s->tries >= c->e->opts.retries)
		return false;
	if (ep->closing || __atomic_load_n(&c->stop, __ATOMIC_RELAXED))
		return false;
	if (__atomic_load_n(&s->rq->error, __ATOMIC_RELAXED))
		return false;
	/* The first retry stays on the endpoint (another QP); later ones, and
	 * any on a rail that is down, paused or without a healthy QP, move.
	 * (tries is counted first: once handed over the slice is not ours.) */
	if (++s->tries > 1 || ep->down || ep->paused || ep_all_broken(ep)) {
		if (slice_handover(c, s))
			return true;
	}
	if (ep->down)
		return false;
	stat_add(&c->stats, retries, 1);
	slice_list_push_front(&ep->pending, s);
	core_ep_activate(c, ep);
	return true;
}

void core_slice_done(struct qctx *ctx, struct slice *s, int err)
{
	struct ferry_core *c = core_of(ctx);

	if (unlikely(err)) {
		if (err != -ECANCELED) /* a flush is the echo of an error, not another */
			rail_note_error(c, s->ep);
		if (slice_retry(c, s, err))
			return;
	} else {
		if (unlikely(s->ep->errs | s->ep->paused))
			rail_note_success(c, s->ep);
	}
	core_slice_finish(c, s, err);
}

static void part_fail(struct ferry_core *c, struct ferry_rq *rq, uint64_t a, uint64_t b, int err)
{
	if (rq_account(rq, rq_range_bytes(rq, c->slice_size, a, b), err))
		stat_add(&c->stats, wakeups, 1);
	stat_add(&c->stats, reqs_done, 1);
}

/* ---- commands from the control path ---- */

static void cmd_done(struct core_cmd *cmd, int rc)
{
	cmd->rc = rc;
	__atomic_store_n(&cmd->done, 1, __ATOMIC_RELEASE);
}

static void fail_pending(struct ferry_core *c, struct ferry_ep *ep, int err)
{
	struct slice *s;

	while ((s = slice_list_pop(&ep->pending)))
		core_slice_finish(c, s, err);
}

/* A new endpoint's QPs join the core's table; the control path publishes
 * the endpoint itself once they have. */
static void cmd_ep_add(struct ferry_core *c, struct core_cmd *cmd)
{
	cmd_done(cmd, ep_attach(&c->q, cmd->ep));
}

/*
 * Teardown, phase one: post nothing more, fail what waits, move the QPs to
 * error and consume the flushes (their slices retry elsewhere or fail);
 * -EBUSY until the depth counters are zero, then the QPs are destroyed
 * here, by their owner.  Phase two (unpublish, call_rcu) is the control
 * path's.  Normally nothing is in flight (the segment is idle or closing).
 */
static void cmd_ep_remove(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = cmd->ep;

	if (ep->qps_gone)
		return cmd_done(cmd, 0);
	ep->closing = 1;
	fail_pending(c, ep, -ECANCELED);
	if (ep_depth(ep)) {
		ep_set_error(&c->q, ep);
		return cmd_done(cmd, -EBUSY); /* the control path asks again */
	}
	if (ep->active)
		return cmd_done(cmd, -EBUSY);
	ep_destroy_qps(&c->q, ep);
	cmd_done(cmd, 0);
}

/* Swap in a QP the repair thread connected for a broken, drained one. */
static void cmd_qp_replace(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = core_ep(c, cmd->slot);
	struct qpx *old;
	int rc;

	if (ep != cmd->ep || !ep || ep->closing || cmd->index >= ep->nqps)
		return cmd_done(cmd, -ENOENT);
	old = ep->qps[cmd->index];
	if (!old->broken || old->depth.depth)
		return cmd_done(cmd, -EBUSY);
	rc = qctx_attach(&c->q, cmd->qp);
	if (rc)
		return cmd_done(cmd, rc);
	cmd->qp->owner = ep;
	ep->qps[cmd->index] = cmd->qp;
	qpx_destroy(&c->q, old);
	ep->down = 0;
	stat_add(&c->stats, qp_resets, 1);
	cmd_done(cmd, 0);
}

/* The repair thread found the peer unreachable (or reachable again). */
static void cmd_ep_down(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = core_ep(c, cmd->slot);

	if (ep != cmd->ep || !ep || ep->closing)
		return cmd_done(cmd, -ENOENT);
	ep->down = (uint8_t)cmd->rc;
	if (ep->down)
		fail_pending(c, ep, -EHOSTDOWN);
	cmd_done(cmd, 0);
}

static uint32_t core_drain_cmds(struct ferry_core *c)
{
	struct core_cmd *cmd;
	uint32_t n = 0;

	if (!ferry_ring_peek(&c->cmds))
		return 0;
	while ((cmd = ferry_ring_get(&c->cmds))) {
		if (cmd->type == CMD_EP_ADD)
			cmd_ep_add(c, cmd);
		else if (cmd->type == CMD_EP_REMOVE)
			cmd_ep_remove(c, cmd);
		else if (cmd->type == CMD_QP_REPLACE)
			cmd_qp_replace(c, cmd);
		else if (cmd->type == CMD_EP_DOWN)
			cmd_ep_down(c, cmd);
		else
			cmd_done(cmd, -EINVAL);
		n++;
	}
	return n;
}

/* ---- request parts from the ports ---- */

static void cut_push(struct ferry_core *c, void *tagged)
{
	struct ferry_rq *rq = (struct ferry_rq *)((uintptr_t)tagged & ~(uintptr_t)((1 << PART_BITS) - 1));
	unsigned part = (unsigned)((uintptr_t)tagged & ((1 << PART_BITS) - 1));
	struct cut_part *pt = &c->cut[c->cut_tail++ & (CUT_FIFO - 1)];
	unsigned nparts = rq->nparts;

	pt->rq = rq;
	pt->next = slice_part_start(rq->nslices, nparts, part);
	pt->end = slice_part_start(rq->nslices, nparts, part + 1);
}

static uint32_t core_drain_ports(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	unsigned hw = __atomic_load_n(&e->n_ports_hw, __ATOMIC_ACQUIRE);
	void *objs[PORT_BURST];
	uint32_t got = 0;

	for (unsigned i = 0; i < hw; i++) {
		struct ferry_port *p = __atomic_load_n(&e->ports[i], __ATOMIC_ACQUIRE);
		uint32_t room = CUT_FIFO - (c->cut_tail - c->cut_head);
		unsigned n;

		if (!p || !ferry_ring_peek(&p->rings[c->index]))
			continue;
		if (room == 0)
			break;
		n = ferry_ring_get_burst(&p->rings[c->index], objs, room < PORT_BURST ? room : PORT_BURST);
		for (unsigned k = 0; k < n; k++)
			cut_push(c, objs[k]);
		got += n;
	}
	return got;
}

/* ---- cutting ---- */

/* Why a part cannot be served (negative errno), or 0. */
static int cut_refusal(const struct ferry_rq *rq, const struct ferry_ep *ep)
{
	int err;

	if (!ep)
		return -EBUSY; /* no endpoint and no room to wait for one */
	if (ep->seg_gen != rq->seg_gen)
		return -EBADF;
	if (ep->closing)
		return -ECANCELED;
	if (ep->down)
		return -EHOSTDOWN; /* fail fast: the repair thread probes the peer */
	err = __atomic_load_n(&rq->error, __ATOMIC_RELAXED);
	return err; /* the request failed already: do not move more bytes */
}

void core_ep_activate(struct ferry_core *c, struct ferry_ep *ep)
{
	if (!ep->active) {
		ep->active = 1;
		ep->next_active = c->active;
		c->active = ep;
	}
}

/* What every slice of one part shares, looked up once per part and pass. */
struct cut_tmpl {
	struct ferry_rq *rq;
	struct ferry_ep *ep;
	uint64_t local, remote;  /* the request's bases */
	uint32_t lkey, rkey;
	uint8_t op;
};

static void cut_tmpl_init(struct cut_tmpl *t, const struct ferry_core *c, struct ferry_rq *rq,
			  struct ferry_ep *ep)
{
	t->rq = rq;
	t->ep = ep;
	t->local = (uint64_t)(uintptr_t)rq->req.local;
	t->remote = rq->req.remote;
	t->lkey = rq->lreg->mr[c->index].lkey;
	t->rkey = rq->rreg->rkey[ep->remote_nic];
	t->op = rq->req.op == FERRY_OP_READ ? NIC_OP_READ : NIC_OP_WRITE;
}

static void slice_fill(const struct ferry_core *c, struct slice *s, const struct cut_tmpl *t,
		       uint64_t i)
{
	uint64_t off;

	slice_bounds(t->rq->req.len, c->slice_size, t->rq->nslices, i, &off, &s->len);
	s->rq = t->rq;
	s->ep = t->ep;
	s->tries = 0;
	s->local = t->local + off;
	s->remote = t->remote + off;
	s->lkey = t->lkey;
	s->rkey = t->rkey;
	s->op = t->op;
}

/*
 * A part whose segment has no endpoint on this core (evicted: a cache miss)
 * waits here, without blocking anything, while the repair thread
 * reconnects; asked again from here in case the submitter's request was
 * served already.  False when it cannot wait (full, or segment gone).
 */
static bool core_park(struct ferry_core *c, const struct cut_part *pt)
{
	struct ferry_seg *s = pt->rq->seg;
	struct parked_part *p;

	if (c->n_parked == PARK_MAX || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SEG_OPEN ||
	    __atomic_load_n(&s->gen, __ATOMIC_RELAXED) != pt->rq->seg_gen)
		return false;
	p = &c->parked[c->n_parked++];
	p->pt = *pt;
	p->round = __atomic_load_n(&s->connect_round, __ATOMIC_ACQUIRE);
	p->since = c->q.now;
	__atomic_store_n(&s->want_eps, 1, __ATOMIC_RELEASE);
	return true;
}

/* Parked part i: 0 to go back to cutting, 1 to keep waiting, or -errno. */
static int park_state(struct ferry_core *c, const struct parked_part *p)
{
	struct ferry_rq *rq = p->pt.rq;
	struct ferry_seg *s = rq->seg;
	struct ferry_ep *ep = core_ep(c, rq->seg_slot);

	if (ep)
		return ep->seg_gen == rq->seg_gen ? 0 : -EBADF;
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SEG_OPEN)
		return -EBADF;
	if (__atomic_load_n(&s->connect_round, __ATOMIC_ACQUIRE) != p->round) {
		int err = __atomic_load_n(&s->connect_err, __ATOMIC_RELAXED);

		return err ? err : -EBUSY; /* reconnected, but no room on this core */
	}
	if (c->timeout_tsc && c->q.now - p->since > c->timeout_tsc)
		return -ETIMEDOUT;
	return 1;
}

/* Every sweep: parts whose endpoint is back are cut again, or end. */
static void core_sweep_parked(struct ferry_core *c)
{
	for (uint32_t i = 0; i < c->n_parked;) {
		struct parked_part *p = &c->parked[i];
		int st = park_state(c, p);

		if (st == 1 || (st == 0 && c->cut_tail - c->cut_head == CUT_FIFO)) {
			i++;
			continue;
		}
		if (st == 0)
			c->cut[c->cut_tail++ & (CUT_FIFO - 1)] = p->pt;
		else
			part_fail(c, p->pt.rq, p->pt.next, p->pt.end, st);
		*p = c->parked[--c->n_parked];
	}
}

static uint32_t core_cut(struct ferry_core *c)
{
	struct cut_tmpl t;
	uint32_t cut = 0;

	while (c->cut_head != c->cut_tail && cut < CUT_BUDGET) {
		struct cut_part *pt = &c->cut[c->cut_head & (CUT_FIFO - 1)];
		struct ferry_rq *rq = pt->rq;
		struct ferry_ep *ep = core_ep(c, rq->seg_slot);
		int err;

		if (unlikely(!ep) && core_park(c, pt)) {
			c->cut_head++;
			continue;
		}
		err = cut_refusal(rq, ep);
		if (err) {
			part_fail(c, rq, pt->next, pt->end, err);
			c->cut_head++;
			continue;
		}
		cut_tmpl_init(&t, c, rq, ep);
		ep_touch(ep);
		core_ep_activate(c, ep);
		while (pt->next < pt->end && cut < CUT_BUDGET) {
			struct slice *s = slice_get(&c->pool);

			if (!s) {
				stat_add(&c->stats, pool_empty, 1);
				goto out;
			}
			slice_fill(c, s, &t, pt->next++);
			slice_list_push(&ep->pending, s);
			cut++;
		}
		if (pt->next == pt->end) {
			stat_add(&c->stats, reqs_done, 1);
			c->cut_head++;
		}
	}
out:
	c->slices_out += cut;
	return cut;
}

/* ---- posting ---- */

static uint32_t core_post(struct ferry_core *c)
{
	struct ferry_ep **pp = &c->active;
	struct ferry_ep *ep;
	uint32_t posted = 0;

	while ((ep = *pp)) {
		/* With every QP broken, slices wait for the repair thread. */
		if (unlikely(ep->closing || ep->down))
			fail_pending(c, ep, ep->closing ? -ECANCELED : -EHOSTDOWN);
		else
			posted += ep_post(&c->q, ep);
		if (ep->pending.count == 0) {
			*pp = ep->next_active;
			ep->active = 0;
		} else {
			pp = &ep->next_active;
		}
	}
	return posted;
}

/* ---- timeouts ---- */

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

	if (ep->closing || __atomic_load_n(&c->stop, __ATOMIC_RELAXED))
		return;
	v = repair_encode(ep->seg_slot, ep_qp_index(ep, qp), c->index, ep->seg_gen);
	if (ferry_ring_put(&c->repairs, (void *)v))
		qp->repair_asked = 1; /* a full ring: asked again next sweep */
}

/*
 * Every SWEEP_MS: a QP that made no progress for the slice timeout is
 * failed (its WRs flush; their slices retry or end TIMEOUT), and broken,
 * drained QPs are handed to the repair thread.
 */
static void core_sweep_rails(struct ferry_core *c)
{
	for (unsigned s = 0; s < FERRY_MAX_SEGS; s++) {
		struct ferry_ep *ep = core_ep(c, s);

		if (ep && ep->paused && c->q.now >= ep->paused_until) {
			ep->paused = 0;
			rail_publish(c, ep);
		}
	}
}

static void core_sweep_qps(struct ferry_core *c)
{
	struct qctx *q = &c->q;

	for (uint32_t i = 0; i < q->n_qps; i++) {
		struct qpx *qp = q->qps[i];

		if (!qp)
			continue;
		if (qp->broken) {
			if (!qp->depth.depth && !qp->repair_asked)
				core_ask_repair(c, qp);
			continue;
		}
		if (c->timeout_tsc && qp->depth.depth && q->now - qp->oldest_tsc > c->timeout_tsc) {
			qp->timed_out = 1;
			qp->broken = 1;
			q->prov->qp_set_error(qp->nqp);
		}
	}
}

/* ---- the loop ---- */

/* noinline: bench/callgrind.sh counts the instructions spent in here. */
__attribute__((noinline)) static uint32_t core_pass(struct ferry_core *c)
{
	uint32_t work = core_drain_cmds(c);

	work += core_drain_ports(c);
	if (c->xfer_in)
		work += core_drain_xfer(c);
	work += core_cut(c);
	work += core_post(c);
	if (c->q.cq_quota.depth) {
		int n = qctx_poll(&c->q);

		if (n > 0)
			work += (uint32_t)n;
	}
	if (unlikely(c->q.now >= c->next_sweep)) {
		core_sweep_qps(c);
		core_sweep_rails(c);
		if (c->n_parked)
			core_sweep_parked(c);
		c->next_sweep = c->q.now + c->sweep_tsc;
	}
	return work;
}

static bool core_has_input(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	unsigned hw = __atomic_load_n(&e->n_ports_hw, __ATOMIC_ACQUIRE);

	if (ferry_ring_count(&c->cmds))
		return true;
	for (unsigned i = 0; c->xfer_in && i < e->ncores; i++)
		if (i != c->index && ferry_ring_count(&c->xfer_in[i]))
			return true;
	for (unsigned i = 0; i < hw; i++) {
		struct ferry_port *p = __atomic_load_n(&e->ports[i], __ATOMIC_ACQUIRE);

		if (p && ferry_ring_count(&p->rings[c->index]))
			return true;
	}
	return false;
}

/*
 * Sleep until kicked through the wake eventfd, until the CQ's completion
 * channel fires (on_cq), or for ns: offline for RCU while asleep.
 */
static void core_sleep(struct ferry_core *c, int timeout_ms, bool on_cq)
{
	const struct nic_provider *prov = c->q.prov;
	struct pollfd fds[2] = { { .fd = c->wake_fd, .events = POLLIN } };
	nfds_t n = 1;

	__atomic_store_n(&c->sleeping, 1, __ATOMIC_SEQ_CST);
	if (on_cq) {
		/* A CQE that landed before the arm raises no event: poll once more. */
		if (prov->cq_arm(c->q.cq) || qctx_poll(&c->q) != 0)
			goto out;
		fds[n++] = (struct pollfd){ .fd = prov->cq_fd(c->q.cq), .events = POLLIN };
	}
	/* Pairs with core_kick(): enqueue, full barrier, read sleeping. */
	if (core_has_input(c) || __atomic_load_n(&c->stop, __ATOMIC_ACQUIRE))
		goto out;
	ferry_tsan_release(&c->e->tsan_gp);
	urcu_qsbr_thread_offline();
	poll(fds, n, timeout_ms);
	urcu_qsbr_thread_online();
	stat_add(&c->stats, sleeps, 1);
out:
	if (on_cq)
		prov->cq_ack(c->q.cq);
	__atomic_store_n(&c->sleeping, 0, __ATOMIC_RELAXED);
	eventfd_drain(c->wake_fd);
}

static void core_idle(struct ferry_core *c)
{
	bool in_flight = c->slices_out || c->cut_head != c->cut_tail || c->xfer_wait.count ||
			 c->xfer_back.count;

	if (c->e->opts.idle == FERRY_IDLE_SPIN) {
		ferry_cpu_relax();
		return;
	}
	c->idle_loops++;
	if (c->idle_loops < SPIN_LOOPS) {
		ferry_cpu_relax();
	} else if (in_flight && c->q.prov->cq_arm) {
		/* A real NIC moves the bytes: give the CPU back until it reports. */
		core_sleep(c, CQ_SLEEP_MS, true);
	} else if (in_flight || c->idle_loops < SLEEP_LOOPS) {
		/* loop's work happens inside poll: stay awake, let others run. */
		sched_yield();
	} else {
		core_sleep(c, SLEEP_MS, false);
		c->idle_loops = 0;
	}
}

void core_kick(struct ferry_core *c)
{
	/* A seq_cst read-modify-write orders our enqueue before this read (a
	 * full barrier, and TSan understands it where it rejects fences). */
	if (__atomic_fetch_or(&c->sleeping, 0, __ATOMIC_SEQ_CST))
		eventfd_write(c->wake_fd, 1);
}

/* On stop: fail what was queued, flush what was posted, free the endpoints. */
static void core_drain(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	uint64_t deadline = ferry_now_ns() + DRAIN_NS;
	void *obj;

	for (unsigned i = 0; i < e->n_ports_hw; i++) {
		struct ferry_port *p = __atomic_load_n(&e->ports[i], __ATOMIC_ACQUIRE);

		while (p && (obj = ferry_ring_get(&p->rings[c->index])))
			cut_push(c, obj);
	}
	if (c->xfer_in)
		core_drain_xfer_at_stop(c);
	for (; c->cut_head != c->cut_tail; c->cut_head++) {
		struct cut_part *pt = &c->cut[c->cut_head & (CUT_FIFO - 1)];

		part_fail(c, pt->rq, pt->next, pt->end, -ECANCELED);
	}
	for (; c->n_parked; c->n_parked--) {
		struct cut_part *pt = &c->parked[c->n_parked - 1].pt;

		part_fail(c, pt->rq, pt->next, pt->end, -ECANCELED);
	}
	for (unsigned s = 0; s < FERRY_MAX_SEGS; s++) {
		struct ferry_ep *ep = core_ep(c, s);

		if (ep && !ep->qps_gone) {
			ep->closing = 1;
			fail_pending(c, ep, -ECANCELED);
			ep_set_error(&c->q, ep);
		}
	}
	while (c->q.cq_quota.depth && ferry_now_ns() < deadline)
		qctx_poll(&c->q);
	for (unsigned s = 0; s < FERRY_MAX_SEGS; s++) {
		struct ferry_ep *ep = core_ep(c, s);

		if (ep && ep_depth(ep) == 0)
			ep_destroy_qps(&c->q, ep); /* memory: core_destroy */
	}
	c->active = NULL;
}

static void core_account_time(struct ferry_core *c, uint64_t t0, uint64_t t1, uint32_t work)
{
	if (work)
		stat_add(&c->stats, busy_ns, t1 - t0);
	else
		stat_add(&c->stats, idle_ns, t1 - t0);
	stat_add(&c->stats, loops, 1);
	stat_set(&c->stats, slices_in_flight, c->slices_out);
}

static void *core_main(void *arg)
{
	struct ferry_core *c = arg;
	uint64_t t0, t1;

	urcu_qsbr_register_thread();
	if (c->e->opts.counters)
		perf_open_self(&c->perf);
	if (c->e->opts.verbose && c->perf.why[0])
		fprintf(stderr, "ferry: core %u: hardware counters: %s\n", c->index, c->perf.why);
	t0 = ferry_tsc();
	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		uint32_t work;

		c->q.now = t0;
		work = core_pass(c);
		ferry_tsan_release(&c->e->tsan_gp);
		urcu_qsbr_quiescent_state();
		if (work)
			c->idle_loops = 0;
		else
			core_idle(c);
		t1 = ferry_tsc();
		core_account_time(c, t0, t1, work);
		t0 = t1;
	}
	core_drain(c);
	stat_set(&c->stats, slices_in_flight, c->slices_out);
	urcu_qsbr_unregister_thread();
	return NULL;
}

/* ---- lifecycle (control path) ---- */

static int core_open_nic(struct ferry_core *c, const char *nic)
{
	const struct nic_provider *prov = nic_provider_for(nic);
	const struct ferry_opts *o = &c->e->opts;
	struct nic_caps caps;
	int rc;

	if (!prov) {
		fprintf(stderr, "ferry: empty NIC name in the nics list\n");
		return -ENODEV;
	}
	c->q.prov = prov;
	snprintf(c->nic_name, sizeof(c->nic_name), "%s", nic);
	rc = prov->open(nic, &c->q.nic);
	if (rc) {
		fprintf(stderr, "ferry: cannot open NIC '%s': %s\n", nic, strerror(-rc));
		return rc;
	}
	prov->caps(c->q.nic, &caps);
	c->q.max_reads = caps.max_rd_atomic ? caps.max_rd_atomic : 1;
	rc = prov->cq_create(c->q.nic, o->cqes, &c->q.cq);
	if (rc)
		fprintf(stderr, "ferry: cannot create a CQ of %u entries on '%s': %s\n",
			o->cqes, nic, strerror(-rc));
	return rc;
}

int core_create(struct ferry_engine *e, unsigned index, unsigned cpu, const char *nic,
		struct ferry_core **out)
{
	int node = numa_available() >= 0 ? numa_node_of_cpu((int)cpu) : -1;
	struct ferry_core *c;
	int rc;

	c = node >= 0 ? numa_alloc_onnode(sizeof(*c), node) : numa_alloc_local(sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->e = e;
	c->index = index;
	c->cpu = cpu;
	c->numa = node;
	c->slice_size = e->opts.slice_size;
	if (!e->opts.counters) { /* before the thread starts: readers see it whole */
		snprintf(c->perf.why, sizeof(c->perf.why), "off (counters=0)");
		c->perf.tried = 1;
	}
	c->stats.cpu = cpu;
	c->stats.numa_node = node;
	c->q.stats = &c->stats;
	c->q.lat = e->opts.counters ? &c->lat : NULL;
	c->q.pool = &c->pool;
	c->q.signal_every = e->opts.signal_every;
	c->q.cq_quota.max = e->opts.cqes;
	c->timeout_tsc = (uint64_t)e->opts.timeout_ms * ferry_tsc_hz() / 1000;
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	rc = c->wake_fd < 0 ? -errno : sieve_init(&c->ep_cache, e->opts.ep_cache);
	if (rc == 0)
		rc = ferry_ring_init(&c->cmds, CMD_RING);
	if (rc == 0)
		rc = ferry_ring_init(&c->repairs, REPAIR_RING);
	if (rc == 0)
		rc = slice_pool_init(&c->pool, 2 * e->opts.cqes, node);
	if (rc == 0)
		rc = core_open_nic(c, nic);
	for (uint32_t k = 0; rc == 0 && k < c->pool.size; k++)
		c->pool.slab[k].home = (uint8_t)index;
	slice_list_init(&c->xfer_wait);
	slice_list_init(&c->xfer_back);
	c->sweep_tsc = SWEEP_MS * ferry_tsc_hz() / 1000;
	c->rail_errs = e->opts.rail_errors;
	c->rail_window_tsc = (uint64_t)e->opts.rail_window_ms * ferry_tsc_hz() / 1000;
	c->rail_backoff_min_tsc = (uint64_t)e->opts.rail_pause_ms * ferry_tsc_hz() / 1000;
	c->rail_backoff_max_tsc = (uint64_t)e->opts.rail_pause_max_ms * ferry_tsc_hz() / 1000;
	if (rc) {
		core_destroy(c);
		return rc;
	}
	if (e->opts.loop_nocopy && strncmp(c->q.prov->name, "loop", 4) == 0)
		loop_set_nocopy(c->q.nic, 1);
	*out = c;
	return 0;
}

int core_start(struct ferry_core *c)
{
	pthread_attr_t attr;
	cpu_set_t set;
	int rc;

	CPU_ZERO(&set);
	CPU_SET(c->cpu, &set);
	pthread_attr_init(&attr);
	pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	rc = -pthread_create(&c->thread, &attr, core_main, c);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		c->started = 1;
	return rc;
}

void core_stop(struct ferry_core *c)
{
	if (!c->started)
		return;
	__atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
	eventfd_write(c->wake_fd, 1);
	pthread_join(c->thread, NULL);
	c->started = 0;
}

void core_destroy(struct ferry_core *c)
{
	if (!c)
		return;
	core_stop(c);
	/* Stopped: no reader is left, no grace period needed. */
	for (unsigned s = 0; s < FERRY_MAX_SEGS; s++) {
		if (c->eps[s])
			ep_destroy(&c->q, c->eps[s]);
		c->eps[s] = NULL;
	}
	if (c->q.cq)
		c->q.prov->cq_destroy(c->q.cq);
	if (c->q.nic)
		c->q.prov->close(c->q.nic);
	slice_pool_fini(&c->pool);
	ferry_ring_fini(&c->cmds);
	ferry_ring_fini(&c->repairs);
	handover_fini(c);
	perf_close(&c->perf);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	numa_free(c, sizeof(*c));
}

int core_command(struct ferry_core *c, struct core_cmd *cmd)
{
	struct timespec pause = { 0, 20 * 1000 };

	__atomic_store_n(&cmd->done, 0, __ATOMIC_RELAXED);
	while (!ferry_ring_put(&c->cmds, cmd))
		nanosleep(&pause, NULL);
	core_kick(c);
	while (!__atomic_load_n(&cmd->done, __ATOMIC_ACQUIRE))
		nanosleep(&pause, NULL);
	return cmd->rc;
}
