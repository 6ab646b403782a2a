/* SPDX-License-Identifier: MIT */
/*
 * Request accounting: every core that serves a part of a request folds its
 * slices' outcomes into the request with atomics; whoever accounts the last
 * byte ends the request, exactly once, and tells the batch.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "ring/base/counters.h"

void ferry_futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

int ferry_futex_wait(uint32_t *word, uint32_t val, int64_t timeout_ns)
{
	struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };

	return (int)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val,
			    timeout_ns >= 0 ? &ts : NULL, NULL, 0);
}

uint64_t rq_range_bytes(const struct ferry_rq *rq, uint32_t slice_size, uint64_t a, uint64_t b)
{
	uint64_t end = b >= rq->nslices ? rq->req.len : b * slice_size;

	return end - a * slice_size;
}

static enum ferry_state final_state(int err)
{
	if (err == 0)
		return FERRY_DONE;
	return err == -ETIMEDOUT ? FERRY_TIMEOUT : FERRY_FAILED;
}

static int batch_request_ended(struct ferry_batch *b, int err)
{
	uint32_t old;

	if (err)
		__atomic_fetch_add(&b->failed, 1, __ATOMIC_RELAXED);
	/* Last access to b: its owner may free it as soon as this lands. */
	old = __atomic_fetch_sub(&b->pending, 1, __ATOMIC_ACQ_REL);
	if (old & BATCH_WAITER) {
		/* The futex call only names the address; a spurious or late
		 * wake is harmless to whatever lives there. */
		ferry_futex_wake(&b->pending);
		return 1;
	}
	return 0;
}

static int rq_finish(struct ferry_rq *rq)
{
	int err = __atomic_load_n(&rq->error, __ATOMIC_ACQUIRE);
	struct ferry_batch *b = rq->batch;

	if (rq->lreg)
		__atomic_fetch_sub(&rq->lreg->refs, 1, __ATOMIC_RELEASE);
	if (rq->seg)
		__atomic_fetch_sub(&rq->seg->inflight, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&rq->state, final_state(err), __ATOMIC_RELEASE);
	return batch_request_ended(b, err);
}

int rq_account(struct ferry_rq *rq, uint64_t len, int err)
{
	if (unlikely(err)) {
		int32_t none = 0;

		__atomic_compare_exchange_n(&rq->error, &none, err, false, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&rq->ok_bytes, len, __ATOMIC_RELAXED);
	}
	if (__atomic_sub_fetch(&rq->remaining, len, __ATOMIC_ACQ_REL) == 0)
		return rq_finish(rq);
	return 0;
}
