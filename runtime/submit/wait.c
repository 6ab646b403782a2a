/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a batch and reading request status.  The owner spins a
 * little, then sleeps on the batch's pending word (a futex); the core that
 * ends the last request wakes it only if it said it sleeps (RQ_BATCH_WAITER),
 * so a busy-polling owner costs the cores no system call.  Under
 * FERRY_IDLE_CALLER the owner runs the cores' passes itself while it spins
 * (runtime/core/drive.c), and spins as long as they do work; under
 * adaptive it runs those of cores whose threads sleep with nothing in
 * flight, so a request at an idle engine need not wait for a wake-up.
 */
#include <errno.h>

#include "ring/base/clock.h"
#include "ring/base/futex.h"
#include "runtime/engine/engine.h"

#define WAIT_SPINS 4096
#define WAIT_SLICE_NS (100ll * 1000 * 1000)

_Static_assert((int)RQ_PENDING == (int)FERRY_PENDING && (int)RQ_DONE == (int)FERRY_DONE &&
	       (int)RQ_FAILED == (int)FERRY_FAILED && (int)RQ_TIMEOUT == (int)FERRY_TIMEOUT,
	       "a request's state is the public one");

static int batch_result(const struct ferry_batch *b)
{
	/* Read once pending is 0: pairs with the acq_rel decrement that ended it. */
	return READ_ONCE(b->acct.failed) ? -EIO : 0;
}

/* Sleep on the batch's pending word until it changes or timeout_ns passes. */
static void batch_sleep(struct ferry_batch *b, int64_t timeout_ns)
{
	uint32_t v = load_acquire(b->acct.pending); /* pairs with: batch_requests_ended */

	if (RQ_BATCH_COUNT(v) == 0)
		return;
	if (!(v & RQ_BATCH_WAITER)) {
		/* pairs with: fetch_sub_acq_rel in batch_requests_ended (it reads the flag) */
		if (!cas_acq_rel(b->acct.pending, &v, v | RQ_BATCH_WAITER))
			return; /* it changed: look again */
		v |= RQ_BATCH_WAITER;
	}
	/* Returns at once if a core decremented after our read. */
	ferry_futex_wait(&b->acct.pending, v, timeout_ns);
}

/* One pass of every core (FERRY_IDLE_CALLER), or of every core whose
 * thread sleeps with nothing in flight while b still waits (adaptive: the
 * cores' threads serve everyone else); whether any did work. */
static bool batch_drive(const struct ferry_batch *b)
{
	struct ferry_engine *e = b->port->e;
	uint32_t work = 0;

	if (e->opts.idle == FERRY_IDLE_CALLER) {
		for (unsigned i = 0; i < e->ncores; i++)
			work += core_drive(e->cores[i]);
	} else if (e->opts.idle == FERRY_IDLE_ADAPTIVE &&
		   /* pairs with: fetch_sub_acq_rel in batch_requests_ended */
		   RQ_BATCH_COUNT(load_acquire(b->acct.pending)) != 0) {
		for (unsigned i = 0; i < e->ncores; i++)
			work += core_drive_asleep(e->cores[i]);
	}
	return work != 0;
}

/* Whether the deadline (0: none) has passed; *left shrinks to what is left. */
static bool batch_deadline_passed(uint64_t deadline, int64_t *left)
{
	uint64_t now;

	if (!deadline)
		return false;
	now = ferry_now_ns();
	if (now >= deadline)
		return true;
	if ((int64_t)(deadline - now) < *left)
		*left = (int64_t)(deadline - now);
	return false;
}

/* The deadline of a wait of timeout_ms > 0; 0 (none) for one of more than
 * 2^63 ns (292 years: the monotonic clock is below that, so the sum cannot
 * wrap).  INT64_MAX ms wrapped into the past: -ETIMEDOUT at once. */
static uint64_t batch_deadline(int64_t timeout_ms)
{
	if (timeout_ms > INT64_MAX / 1000000)
		return 0;
	return ferry_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

int ferry_batch_wait(struct ferry_batch *b, int64_t timeout_ms)
{
	uint64_t deadline = 0;
	unsigned spins = 0, passes = 0;
	int rc;

	if (!b)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (timeout_ms > 0)
		deadline = batch_deadline(timeout_ms);
	for (;;) {
		int64_t left = WAIT_SLICE_NS;
		bool worked = batch_drive(b);

		/* pairs with: fetch_sub_acq_rel in batch_requests_ended */
		if (RQ_BATCH_COUNT(load_acquire(b->acct.pending)) == 0) {
			rc = batch_result(b);
			break;
		}
		if (timeout_ms == 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (worked) { /* our passes move the batch: keep running them */
			spins = 0;
			if ((++passes & 255) == 0 && batch_deadline_passed(deadline, &left)) {
				rc = -ETIMEDOUT;
				break;
			}
			continue;
		}
		if (++spins < WAIT_SPINS) {
			ferry_cpu_relax();
			continue;
		}
		if (batch_deadline_passed(deadline, &left)) {
			rc = -ETIMEDOUT;
			break;
		}
		/* Caller passes that found nothing to do for a while: the core's
		 * own thread takes over CALLER_FALLBACK_MS after the last one. */
		batch_sleep(b, left);
	}
	/* Cores stop calling futex_wake once nobody sleeps. */
	fetch_and_relaxed(b->acct.pending, ~RQ_BATCH_WAITER);
	if (b->port->e->opts.idle == FERRY_IDLE_ADAPTIVE)
		core_waiter_done();
	return rc;
}

int ferry_req_status(const struct ferry_batch *b, uint32_t i, struct ferry_req_status *st)
{
	const struct ferry_rq *rq;
	int32_t state, error;

	if (!b || !st)
		return -EINVAL;
	/* Any thread: the slots below n are filled in.  pairs with: store_release of
	 * n in submit_some, ferry_prep_submit, prep_refuse, ferry_notify */
	if (i >= load_acquire(b->n)) /* pairs with: the store_release of n above */
		return -ERANGE;
	rq = &b->rqs[i];
	state = load_acquire(rq->state); /* pairs with: store_release in rq_finish/rq_refuse */
	error = READ_ONCE(rq->error);
	st->state = state;
	/* final only once the request is; a DONE one's may hold a cancel that
	 * came too late (rq_outcome).  PENDING 0, DONE 1: one compare. */
	_Static_assert(FERRY_PENDING == 0 && FERRY_DONE == 1, "the two states without an error");
	st->error = (uint32_t)state <= FERRY_DONE ? 0 : error;
	st->bytes = READ_ONCE(rq->ok_bytes);
	return 0;
}
