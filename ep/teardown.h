/* SPDX-License-Identifier: MIT */
/*
 * Two-phase endpoint teardown.
 *
 * Phase one, on the owning core (ep_teardown_qps): post nothing more, move
 * the QPs to the error state, let the core consume the flushes until every
 * depth counter is zero, then destroy the QPs -- their owner destroys them,
 * never another thread.
 *
 * Phase two, on the control path: unpublish the endpoint (ep_table_del
 * and its segment's pointer), hand it to a reaper (ep_retire), which frees its memory after an
 * RCU grace period: a core may still hold the pointer it loaded in its last
 * pass.  call_rcu needs an online QSBR thread and the control path runs on
 * application threads, so a registered helper thread (the engine's repair
 * thread, offline while it works or sleeps) goes online just to queue the
 * frees (reap_run).  The callbacks run on liburcu's call_rcu thread and only
 * free memory.  Engine destroy waits for its own callbacks (reap_wait: a
 * count, not rcu_barrier -- a forked child inherits liburcu's record of
 * call_rcu threads, not the threads).
 */
#ifndef FERRY_EP_TEARDOWN_H
#define FERRY_EP_TEARDOWN_H

#include <stdint.h>

#include "ep/ep.h"

struct ep_reaper {
	struct ferry_ep *retired;  /* unpublished, not yet queued (lock-free stack) */
	uint64_t pending;          /* queued for call_rcu, not yet freed */
	const void *grace;         /* ThreadSanitizer's model of the grace period:
	                            * the cores release it at each quiescent state */
};

/*
 * Phase one, the owning core: 0 once the QPs are destroyed (idempotent),
 * -EBUSY while WRs are out (the QPs are in error: the flushes come back)
 * or the endpoint is still on the core's active list.  The caller failed
 * the endpoint's pending slices first.
 */
int ep_teardown_qps(struct qctx *ctx, struct ferry_ep *ep);

/* Phase two: queue ep, unpublished, for freeing after a grace period. */
void ep_retire(struct ep_reaper *r, struct ferry_ep *ep);

/* The helper thread: hand retired endpoints to call_rcu; how many. */
unsigned reap_run(struct ep_reaper *r);

/* Wait until every endpoint queued by reap_run is freed (engine destroy). */
void reap_wait(struct ep_reaper *r);

#endif /* FERRY_EP_TEARDOWN_H */
