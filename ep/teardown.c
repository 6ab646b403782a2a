/* SPDX-License-Identifier: MIT */
/*
 * Two-phase teardown (see teardown.h).  ThreadSanitizer cannot see inside
 * liburcu (not instrumented): the annotations model the queue hand-off and
 * the grace period.
 */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include "ep/teardown.h"

#include <errno.h>
#include <urcu/urcu-qsbr.h>

#include "ring/base/atomics.h"
#include "ring/base/clock.h"

int ep_teardown_qps(struct qctx *ctx, struct ferry_ep *ep)
{
	if (ep->qps_gone)
		return 0;
	ep->closing = 1;
	if (ep_depth(ep)) {
		ep_set_error(ctx, ep);
		return -EBUSY; /* the control path asks again */
	}
	if (ep->active)
		return -EBUSY;
	ep_destroy_qps(ctx, ep);
	return 0;
}

void ep_retire(struct ep_reaper *r, struct ferry_ep *ep)
{
	struct ferry_ep *head = READ_ONCE(r->retired);

	ep->reaper = r;
	do
		ep->next_retired = head;
	while (!cas_weak_release(r->retired, &head, ep)); /* pairs with: xchg_acquire in reap_run */
}

static void ep_free_rcu(struct rcu_head *h)
{
	struct ferry_ep *ep = caa_container_of(h, struct ferry_ep, rcu);
	struct ep_reaper *r;

	ferry_tsan_acquire(ep);        /* queued by reap_run */
	r = ep->reaper;
	ferry_tsan_acquire(r->grace);  /* every core passed a quiescent state */
	ep_free(ep);
	fetch_sub_release(r->pending, 1); /* pairs with: load_acquire in reap_wait */
}

unsigned reap_run(struct ep_reaper *r)
{
	struct ferry_ep *ep;
	unsigned n = 0;

	if (!READ_ONCE(r->retired))
		return 0;
	ep = xchg_acquire(r->retired, NULL); /* pairs with: cas_weak_release in ep_retire */
	urcu_qsbr_thread_online();
	while (ep) {
		struct ferry_ep *next = ep->next_retired;

		fetch_add_relaxed(r->pending, 1);
		ferry_tsan_release(ep);
		urcu_qsbr_call_rcu(&ep->rcu, ep_free_rcu);
		ep = next;
		n++;
	}
	urcu_qsbr_thread_offline();
	return n;
}

void reap_wait(struct ep_reaper *r)
{
	while (load_acquire(r->pending)) /* pairs with: fetch_sub_release in ep_free_rcu */
		ferry_sleep_us(100);
}
