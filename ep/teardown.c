/* SPDX-License-Identifier: MIT */
/*
 * Retired endpoints: the control path unpublishes an endpoint (its owner
 * destroyed the QPs already) and hands it here; its memory is freed after
 * an RCU grace period, since a core may still hold the pointer it loaded
 * in its last pass.  call_rcu needs an online QSBR thread and the control
 * path runs on application threads, so the repair thread -- registered,
 * offline while it works or sleeps -- goes online just to queue the frees.
 * The callbacks run on liburcu's call_rcu thread and only free memory.
 * Engine destroy waits for its own callbacks (a count, not rcu_barrier:
 * a forked child inherits liburcu's record of call_rcu threads, not them).
 *
 * ThreadSanitizer cannot see inside liburcu (not instrumented): the
 * annotations model the queue hand-off and the grace period.
 */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include <time.h>
#include <urcu/urcu-qsbr.h>

#include "runtime/internal.h"

void ep_retire(struct ferry_engine *e, struct ferry_ep *ep)
{
	struct ferry_ep *head = __atomic_load_n(&e->retired, __ATOMIC_RELAXED);

	ep->reaper = e;
	do
		ep->next_retired = head;
	while (!__atomic_compare_exchange_n(&e->retired, &head, ep, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

static void ep_free_rcu(struct rcu_head *h)
{
	struct ferry_ep *ep = caa_container_of(h, struct ferry_ep, rcu);
	struct ferry_engine *e;

	ferry_tsan_acquire(ep);          /* queued by reap_run */
	e = ep->reaper;
	ferry_tsan_acquire(&e->tsan_gp); /* every core passed a quiescent state */
	ep_free(ep);
	__atomic_fetch_sub(&e->rcu_pending, 1, __ATOMIC_RELEASE);
}

unsigned reap_run(struct ferry_engine *e)
{
	struct ferry_ep *ep;
	unsigned n = 0;

	if (!__atomic_load_n(&e->retired, __ATOMIC_RELAXED))
		return 0;
	ep = __atomic_exchange_n(&e->retired, NULL, __ATOMIC_ACQUIRE);
	urcu_qsbr_thread_online();
	while (ep) {
		struct ferry_ep *next = ep->next_retired;

		__atomic_fetch_add(&e->rcu_pending, 1, __ATOMIC_RELAXED);
		ferry_tsan_release(ep);
		urcu_qsbr_call_rcu(&ep->rcu, ep_free_rcu);
		ep = next;
		n++;
	}
	urcu_qsbr_thread_offline();
	return n;
}

void reap_wait(struct ferry_engine *e)
{
	struct timespec ts = { 0, 100 * 1000 };

	while (__atomic_load_n(&e->rcu_pending, __ATOMIC_ACQUIRE))
		nanosleep(&ts, NULL);
}
