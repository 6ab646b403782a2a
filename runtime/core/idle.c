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

#include "ring/base/counters.h"
#include "runtime/engine/engine.h"

#define SPIN_LOOPS 256          /* idle passes before yielding the CPU */
#define SLEEP_LOOPS 4096        /* idle passes (nothing in flight) before sleeping */
#define SLEEP_MS 20             /* idle, nothing in flight */
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
 * Sleep until kicked through the wake eventfd, until the CQ's completion
 * channel fires (on_cq), or for timeout_ms: offline for RCU while asleep.
 */
static void core_sleep(struct ferry_core *c, int timeout_ms, bool on_cq)
{
	const struct nic_provider *prov = c->q.prov;
	struct pollfd fds[2] = { { .fd = c->wake_fd, .events = POLLIN } };
	nfds_t n = 1;

	store_sc(c->sleeping, 1); /* Dekker pair with core_kick: see there */
	if (on_cq) {
		/* A CQE that landed before the arm raises no event: poll once more. */
		if (prov->cq_arm(c->q.cq) || qctx_poll(&c->q) != 0)
			goto out;
		fds[n++] = (struct pollfd){ .fd = prov->cq_fd(c->q.cq), .events = POLLIN };
	}
	if (core_has_input(c) || load_acquire(c->stop)) /* stop: pairs with core_stop */
		goto out;
	ferry_tsan_release(&c->e->tsan_gp);
	urcu_qsbr_thread_offline();
	poll(fds, n, timeout_ms);
	urcu_qsbr_thread_online();
	stat_add(&c->ctr, sleeps, 1);
out:
	if (on_cq)
		prov->cq_ack(c->q.cq);
	WRITE_ONCE(c->sleeping, 0);
	eventfd_drain(c->wake_fd);
}

void core_idle(struct ferry_core *c)
{
	bool in_flight = c->slices_out || cut_fifo_count(&c->cut) || c->xfer_wait.count ||
			 c->xfer_back.count;

	if (c->e->opts.idle == FERRY_IDLE_SPIN) {
		ferry_cpu_relax();
		return;
	}
	c->idle_loops++;
	if (c->idle_loops < SPIN_LOOPS) {
		ferry_cpu_relax();
	} else if ((in_flight || c->q.serves) && c->q.prov->cq_arm) {
		/* A real NIC moves the bytes (or peers' frames wake us: tcp):
		 * give the CPU back until it reports. */
		core_sleep(c, in_flight ? CQ_SLEEP_MS : SLEEP_MS, true);
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
	/*
	 * Dekker pair with core_sleep: the submitter enqueues, then reads
	 * sleeping; the core sets sleeping, then looks for input.  Either it
	 * sees our entry or we see it asleep.  A seq_cst read-modify-write is
	 * the full barrier here (TSan understands it where it rejects fences).
	 */
	if (fetch_or_sc(c->sleeping, 0))
		eventfd_write(c->wake_fd, 1);
}
