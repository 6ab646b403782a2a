/* SPDX-License-Identifier: MIT */
#include "slice/request.h"

#include <errno.h>
#include <stdbool.h>

#include "ring/base/atomics.h"
#include "ring/base/futex.h"

uint64_t rq_range_bytes(const struct ferry_rq *rq, uint32_t slice_size, uint64_t a, uint64_t b)
{
	uint64_t end = b >= rq->nslices ? rq->len : b * slice_size;

	return end - a * slice_size;
}

static int32_t final_state(int err)
{
	if (err == 0)
		return RQ_DONE;
	return err == -ETIMEDOUT ? RQ_TIMEOUT : RQ_FAILED;
}

static int batch_request_ended(struct rq_batch *b, int err)
{
	uint32_t old;

	if (err)
		fetch_add_relaxed(b->failed, 1); /* read after pending reaches 0 (acq_rel below) */
	/* Last access to b: its owner may free it as soon as this lands.
	 * pairs with: load_acquire of pending in ferry_batch_wait */
	old = fetch_sub_acq_rel(b->pending, 1);
	/* Only the last request wakes the owner: it sleeps until the count
	 * is 0 (its futex_wait compares the whole word, so a decrement
	 * before it sleeps makes it look again, and one after leaves it
	 * asleep until the last). */
	if (old == (RQ_BATCH_WAITER | 1)) {
		/* The futex call only names the address; a spurious or late
		 * wake is harmless to whatever lives there. */
		ferry_futex_wake(&b->pending);
		return 1;
	}
	return 0;
}

static int rq_finish(struct ferry_rq *rq)
{
	int err = load_acquire(rq->error); /* pairs with: cas_release in rq_account */
	struct rq_batch *b = rq->batch;

	if (rq->lreg_refs)
		fetch_sub_release(*rq->lreg_refs, 1); /* pairs with: load_acquire in ferry_mem_unregister */
	if (rq->seg_refs)
		fetch_sub_sc(*rq->seg_refs, 1); /* Dekker pair with the segment's closer and evictor */
	store_release(rq->state, final_state(err)); /* pairs with: load_acquire in ferry_req_status */
	return batch_request_ended(b, err);
}

int rq_end(struct ferry_rq *rq, int err)
{
	int32_t none = 0;

	if (err)
		cas_release(rq->error, &none, err); /* a cancel's error stays; pairs with: rq_finish */
	return rq_finish(rq);
}

void rq_refuse(struct ferry_rq *rq, int err)
{
	WRITE_ONCE(rq->error, err);
	store_release(rq->state, RQ_FAILED); /* pairs with: load_acquire in ferry_req_status */
	fetch_add_relaxed(rq->batch->failed, 1);
}

int rq_account(struct ferry_rq *rq, uint64_t len, int err)
{
	if (rq->nslices == 1) {
		/* Its one slice (or its one part failing) is accounted once, by
		 * one core: no other core folds into it, nothing to count down. */
		int32_t none = 0;

		if (unlikely(err))
			cas_release(rq->error, &none, err); /* a cancel's error stays; pairs with: rq_finish */
		else
			WRITE_ONCE(rq->ok_bytes, len); /* published by rq_finish's release of state */
		return rq_finish(rq);
	}
	if (unlikely(err)) {
		int32_t none = 0;

		cas_release(rq->error, &none, err); /* the first error wins; pairs with: rq_finish */
	} else {
		fetch_add_relaxed(rq->ok_bytes, len);
	}
	/* pairs with itself: the last decrement sees every earlier core's folds */
	if (sub_fetch_acq_rel(rq->remaining, len) == 0)
		return rq_finish(rq);
	return 0;
}
