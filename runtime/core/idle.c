/* SPDX-License-Identifier: MIT */
/*
 * A core with nothing to do: spin a little, then yield, then sleep -- on
 * its wake eventfd (submitters and the control path kick it) and, with work
 * in flight on a NIC that has one, the CQ's completion channel.  On a real
 * NIC the hardware moves the bytes and the CPU is better given back; on
 * Soft-RoCE the kernel needs that CPU to move them.  FERRY_IDLE_SPIN keeps a
 * dedicated core spinning.
 */
/* Inline urcu fast paths, except under TSan (see core.c). */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <urcu/urcu-qsbr.h>

#include "ring/base/clock.h"
#include "ring/base/counters.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

#define SPIN_LOOPS 256          /* idle checks before giving the CPU back */
#define CQ_SLEEP_MS 10          /* work in flight on a NIC with a completion channel */

static void eventfd_drain(int fd)
{
	eventfd_t v;

	eventfd_read(fd, &v); /* non-blocking: EAGAIN when nothing was written */
}

static bool core_has_input(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	unsigned hw = load_acquire(e->n_ports_hw); /* pairs with: store_release in ferry_port_create */

	if (ferry_ring_count(&c->cmds))
		return true;
	for (unsigned i = 0; c->xfer_in && i < e->ncores; i++)
		if (i != c->index && ferry_ring_count(&c->xfer_in[i]))
			return true;
	for (unsigned i = 0; i < hw; i++) {
		struct ferry_port *p = rcu_dereference(e->ports[i]); /* pairs with: ferry_port_create */

		if (p && ferry_ring_count(&p->rings[c->index]))
			return true;
	}
	return false;
}

/*
 * Arm the completion channel of every context that should wake us (with
 * work in flight, or serving peers), add its fd to fds and its bit to
 * *armed.  False when a completion slipped in before an arm: poll again
 * instead of sleeping.
 */
static bool core_arm_cqs(struct ferry_core *c, bool in_flight, struct pollfd *fds, nfds_t *n,
			 unsigned *armed)
{
	for (unsigned t = 0; t < c->ntx; t++) {
		struct qctx *q = &c->tx[t];

		if (!q->prov->cq_arm || !(q->serves || (in_flight && q->cq_quota.depth)))
			continue;
		*armed |= 1u << t;
		/* A CQE that landed before the arm raises no event: poll once more. */
		if (q->prov->cq_arm(q->cq) || qctx_poll(q) != 0)
			return false;
		fds[(*n)++] = (struct pollfd){ .fd = q->prov->cq_fd(q->cq), .events = POLLIN };
	}
	return true;
}

static void core_ack_cqs(struct ferry_core *c, unsigned armed)
{
	for (unsigned t = 0; t < c->ntx; t++)
		if (armed & (1u << t))
			c->tx[t].prov->cq_ack(c->tx[t].cq);
}

/*
 * Sleep until kicked through the wake eventfd, until a completion channel
 * fires (with on_cq: contexts with work in flight, or serving peers), or
 * for timeout_ms: offline for RCU while asleep.  With let_go an application
 * thread may run the core's passes meanwhile (drive.c).
 */
static void core_sleep(struct ferry_core *c, int timeout_ms, bool on_cq, bool let_go)
{
	struct pollfd fds[1 + CORE_MAX_TX] = { { .fd = c->wake_fd, .events = POLLIN } };
	unsigned armed = 0;
	nfds_t n = 1;

	store_sc(c->sleeping, 1); /* Dekker pair with core_kick: see there */
	smp_mb_after_sc(); /* the rings' tails below are ck loads, not seq_cst */
	if (on_cq && !core_arm_cqs(c, c->slices_out != 0, fds, &n, &armed))
		goto out;
	if (core_has_input(c) || load_acquire(c->stop)) /* stop: pairs with core_stop */
		goto out;
	stat_add(&c->ctr, sleeps, 1); /* counted going in: an idle core may stay asleep */
	ferry_tsan_release(&c->e->tsan_gp);
	if (let_go && !core_thread_sleeps(c))
		goto out; /* idle caller: an application thread asked for the core */
	if (unlikely(log_box_pending(&c->logbox)))
		repair_kick(c->e); /* what the core logged goes out now: it sleeps anyway */
	urcu_qsbr_thread_offline();
	poll(fds, n, timeout_ms);
	if (let_go) /* offline while a waiter's pass ends: no grace period waits on us */
		core_thread_wakes(c);
	urcu_qsbr_thread_online();
out:
	core_ack_cqs(c, armed);
	WRITE_ONCE(c->sleeping, 0);
	eventfd_drain(c->wake_fd);
}

/*
 * When broken qp is asked for (again): never on an endpoint that goes or
 * leads to a gone incarnation (core_ask_repair skips those: a stale
 * segment's QPs stay broken until it is closed), at once if never asked,
 * else once its ask is old.
 */
static uint64_t qp_reask_at(const struct ferry_core *c, const struct qpx *qp)
{
	const struct ferry_ep *ep = qp->owner;

	if (ep->closing || ep->down == EP_STALE)
		return UINT64_MAX;
	return qp->repair_asked ? qp->repair_asked_at + c->reask_ticks : 0;
}

/* When the first broken QP is asked for again (its repair did not come). */
static uint64_t core_first_reask(const struct ferry_core *c)
{
	uint64_t first = UINT64_MAX;

	for (unsigned t = 0; t < c->ntx; t++) {
		const struct qctx *q = &c->tx[t];

		for (uint32_t i = 0; i < q->n_qps; i++) {
			const struct qpx *qp = q->qps[i];

			if (qp && qp->broken && qp_reask_at(c, qp) < first)
				first = qp_reask_at(c, qp);
		}
	}
	return first;
}

/*
 * How long the core may sleep with nothing in flight: until its first rail
 * pause ends (the sweep publishes the rail usable again) or a broken QP is
 * due to be asked for again, else for ever -- and not before the next
 * sweep, which does both.  Before, a QP never asked for (a stale
 * segment's: never is) counted as due at 0, and the idle core slept 0 ms
 * over and over: a CPU spent for as long as the stale handle stayed open
 * (test_teardown's test_stale_segment_idle).
 */
static int core_pause_left_ms(struct ferry_core *c)
{
	uint64_t now = ferry_tsc(), first = core_first_reask(c);

	for (uint32_t k = 0; k < c->eps.cap; k++) { /* O(ep_cache), not O(segments) */
		const struct ferry_ep *ep = core_ep_at(c, k);

		if (ep && ep->rail.paused && ep->rail.paused_until < first)
			first = ep->rail.paused_until;
	}
	if (first == UINT64_MAX)
		return -1;
	if (first < c->next_sweep) /* only a sweep ends a pause or asks */
		first = c->next_sweep;
	if (first <= now)
		return 0;
	return (int)(ferry_tsc_to_ns(first - now) / 1000000) + 1;
}

/* A context that can wake us: a completion channel with work in flight on
 * it, or one serving peers. */
static bool core_can_sleep_on_cq(const struct ferry_core *c, bool in_flight)
{
	for (unsigned t = 0; t < c->ntx; t++) {
		const struct qctx *q = &c->tx[t];

		if (q->prov->cq_arm && (q->serves || (in_flight && q->cq_quota.depth)))
			return true;
	}
	return false;
}

/* Work in flight that only polling moves (loop, cma: no completion channel). */
static bool core_must_poll(const struct ferry_core *c)
{
	for (unsigned t = 0; t < c->ntx; t++)
		if (!c->tx[t].prov->cq_arm && c->tx[t].cq_quota.depth)
			return true;
	return false;
}

/* Slices or parts this core still has to move or end. */
static bool core_in_flight(const struct ferry_core *c)
{
	return c->slices_out || cut_fifo_count(&c->cut) || c->xfer_wait.count ||
	       c->xfer_back.count || c->n_parked;
}

/* Work in flight: poll again soon; give the CPU back while a NIC with a
 * completion channel (or loop's polling, with a yield) moves the bytes. */
static void core_idle_busy(struct ferry_core *c)
{
	if (++c->idle_loops < SPIN_LOOPS)
		ferry_cpu_relax();
	else if (!core_must_poll(c) && core_can_sleep_on_cq(c, true))
		core_sleep(c, CQ_SLEEP_MS, true, core_thread_lets_go_asleep(c, false));
	else
		sched_yield(); /* loop's and cma's work happens inside poll */
}

/*
 * Nothing in flight: wait for input without running loop passes (each one
 * looks at every ring and context), spinning briefly, then asleep until a
 * submitter or the control path kicks the wake eventfd -- or, for a
 * context that serves peers (tcp), until their frames arrive.  An idle
 * core costs nothing then.  Its wake-up is the scheduler's (a few
 * microseconds on a host, ~100 us for a VM's halted vCPU), so asleep it
 * lets go of the core: a thread waiting in ferry_batch_wait runs the pass
 * of the request that woke it (drive.c).  Rails still paused wake it when
 * the pause ends.
 */
static void core_idle_wait(struct ferry_core *c)
{
	for (unsigned i = 0; i < SPIN_LOOPS; i++) {
		if (core_has_input(c) || load_acquire(c->stop)) /* pairs with: core_stop */
			return;
		ferry_cpu_relax();
	}
	core_sleep(c, core_pause_left_ms(c), core_can_sleep_on_cq(c, false),
		   core_thread_lets_go_asleep(c, true));
	c->idle_loops = 0;
}

/*
 * Shortly after work: keep polling.  A ping-pong's answer or a serving
 * loop's next request usually follows within microseconds, and a core
 * asleep costs a wake-up through the scheduler (tens of microseconds on a
 * host, close to a millisecond in an emulated VM) on every message.  The
 * yield every 64 checks leaves the CPU to a thread it shares it with.
 */
static bool core_linger(struct ferry_core *c)
{
	if (c->now - c->last_work >= c->linger_ticks)
		return false;
	if ((++c->idle_loops & 63) == 0)
		sched_yield();
	else
		ferry_cpu_relax();
	return true;
}

void core_idle(struct ferry_core *c)
{
	if (c->e->opts.idle == FERRY_IDLE_SPIN) {
		ferry_cpu_relax();
		return;
	}
	if (core_linger(c))
		return;
	if (core_in_flight(c))
		core_idle_busy(c);
	else
		core_idle_wait(c);
}

void core_kick(struct ferry_core *c)
{
	/*
	 * Dekker pair with core_sleep: the submitter enqueues, then reads
	 * sleeping; the core sets sleeping, then looks for input.  Either it
	 * sees our entry or we see it asleep.  A seq_cst read-modify-write is
	 * the full barrier here on x86 (TSan understands it where it rejects
	 * fences); elsewhere C11 needs the fence too, the tail's store being
	 * ck's, not seq_cst.  The exchange also clears the flag: of a burst
	 * of kicks, only the first makes a system call.
	 */
	smp_mb_before_sc();
	if (xchg_sc(c->sleeping, 0))
		eventfd_write(c->wake_fd, 1);
}
