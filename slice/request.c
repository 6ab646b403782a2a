/* SPDX-License-Identifier: MIT */
#include "slice/request.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/eventfd.h>

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

/*
 * A request of a batch under RQ_BATCH_BELL ended: wake the notifier,
 * one system call until it resets rung.  No wake is lost: the notifier
 * resets rung, then sets the flag with an acq_rel RMW on pending and looks
 * at the requests again; an end it did not see decrements pending after
 * that RMW, so it reads the reset (or a later ring's 1, which woke it).
 */
static __attribute__((noinline, cold)) void rq_bell_ring(struct rq_bell *bell)
{
	if (bell && !READ_ONCE(bell->rung) && !xchg_relaxed(bell->rung, 1))
		eventfd_write(bell->fd, 1); /* cannot block: the counter cannot fill */
}

/* k requests of b ended, failed of them badly: count them off; 1 when that
 * woke b's sleeping owner.  One place for both end paths (rq_finish, a
 * flushed run of ends_finish). */
static inline int batch_requests_ended(struct rq_batch *b, uint32_t failed, uint32_t k)
{
	struct rq_bell *bell = b->bell; /* b may be gone after the decrement */
	uint32_t old;

	if (failed)
		fetch_add_relaxed(b->failed, failed); /* read after pending reaches 0 (acq_rel below) */
	/* Last access to b: its owner may free it as soon as this lands.
	 * pairs with: load_acquire of pending in ferry_batch_wait, fetch_or_acq_rel in job_arm */
	old = fetch_sub_acq_rel(b->pending, k);
	if (unlikely(old & RQ_BATCH_BELL))
		rq_bell_ring(bell);
	/* Only the last request wakes the owner: it sleeps until the count
	 * is 0 (its futex_wait compares the whole word, so a decrement
	 * before it sleeps makes it look again, and one after leaves it
	 * asleep until the last). */
	if ((old & ~RQ_BATCH_BELL) == (RQ_BATCH_WAITER | k)) {
		/* The futex call only names the address; a spurious or late
		 * wake is harmless to whatever lives there. */
		ferry_futex_wake(&b->pending);
		return 1;
	}
	return 0;
}

/*
 * The request's final error, err its error word.  A cancel marks every
 * pending request, but one whose bytes all moved meanwhile (its slices
 * were posted already) completed: DONE, as ferry_batch_cancel promises
 * (the error word keeps -ECANCELED; ferry_req_status says 0 for DONE).
 * Only a whole success counts every byte: a slice that failed or was
 * dropped adds none.
 */
static int rq_outcome(const struct ferry_rq *rq, int err)
{
	if (unlikely(err == -ECANCELED) && rq->len && READ_ONCE(rq->ok_bytes) == rq->len)
		return 0;
	return err;
}

/* rq ended with final error err. */
static int rq_finish(struct ferry_rq *rq, int err)
{
	struct rq_batch *b = rq->batch;

	if (rq->lreg_refs)
		fetch_sub_release(*rq->lreg_refs, 1); /* pairs with: load_acquire in ferry_mem_unregister */
	if (rq->seg_refs)
		fetch_sub_sc(*rq->seg_refs, 1); /* Dekker pair with the segment's closer and evictor */
	store_release(rq->state, final_state(err)); /* pairs with: load_acquire in ferry_req_status */
	return batch_requests_ended(b, err != 0, 1);
}

int rq_end(struct ferry_rq *rq, int err)
{
	int32_t none = 0;

	if (!err) /* it happened: a cancel that came meanwhile is too late */
		return rq_finish(rq, 0);
	cas_release(rq->error, &none, err); /* a cancel's error stays; pairs with: load_acquire below */
	return rq_finish(rq, load_acquire(rq->error)); /* pairs with: the cas_release above */
}

void rq_refuse(struct ferry_rq *rq, int err)
{
	WRITE_ONCE(rq->error, err);
	store_release(rq->state, RQ_FAILED); /* pairs with: load_acquire in ferry_req_status */
	fetch_add_relaxed(rq->batch->failed, 1);
}

/* Fold len bytes (err) into rq; true when they were its last. */
static inline bool rq_fold(struct ferry_rq *rq, uint64_t len, int err)
{
	if (rq->nslices == 1) {
		/* Its one slice (or its one part failing) is accounted once, by
		 * one core: no other core folds into it, nothing to count down. */
		int32_t none = 0;

		if (unlikely(err))
			cas_release(rq->error, &none, err); /* a cancel's error stays; pairs with: rq_finish */
		else
			WRITE_ONCE(rq->ok_bytes, len); /* published by rq_finish's release of state */
		return true;
	}
	if (unlikely(err)) {
		int32_t none = 0;

		cas_release(rq->error, &none, err); /* the first error wins; pairs with: rq_finish */
	} else {
		fetch_add_relaxed(rq->ok_bytes, len);
	}
	/* pairs with itself: the last decrement sees every earlier core's folds */
	return sub_fetch_acq_rel(rq->remaining, len) == 0;
}

int rq_account_defer(struct rq_ends *x, struct ferry_rq *rq, uint64_t len, int err)
{
	int woke = 0;

	if (!rq_fold(rq, len, err))
		return 0;
	if (x->n == RQ_ENDS)
		woke = rq_ends_flush(x);
	x->rq[x->n++] = rq;
	return woke;
}

/*
 * rq_finish for the run of requests from r on (to end) that share the
 * first one's references and batch: the references first, then each
 * state, then the batch's count last (its owner may free the batch, and
 * the slots, once that lands; a later run's requests keep their own batch
 * alive until their own decrement).  Returns where the run ended.
 */
static struct ferry_rq **ends_finish(struct ferry_rq **r, struct ferry_rq **end, int *woke)
{
	struct rq_batch *b = (*r)->batch;
	uint64_t *lrefs = (*r)->lreg_refs, *srefs = (*r)->seg_refs;
	struct ferry_rq **q = r + 1;
	uint32_t k, failed = 0;

	int errs = load_acquire((*r)->error); /* pairs with: cas_release in rq_account */

	/* The run, and whether any of it failed (an ended request's error is
	 * final: read here, before the references go). */
	while (q < end && (*q)->batch == b && (*q)->lreg_refs == lrefs && (*q)->seg_refs == srefs) {
		errs |= load_acquire((*q)->error); /* pairs with: cas_release in rq_account */
		q++;
	}
	k = (uint32_t)(q - r);
	if (lrefs)
		fetch_sub_release(*lrefs, k); /* pairs with: load_acquire in ferry_mem_unregister */
	if (srefs)
		fetch_sub_sc(*srefs, k); /* Dekker pair with the segment's closer and evictor */
	if (likely(!errs)) {
		for (; r < q; r++) /* pairs with: load_acquire in ferry_req_status */
			store_release((*r)->state, RQ_DONE);
	} else {
		for (; r < q; r++) {
			int err = rq_outcome(*r, READ_ONCE((*r)->error)); /* acquired above */

			failed += err != 0;
			/* pairs with: load_acquire in ferry_req_status */
			store_release((*r)->state, err ? final_state(err) : RQ_DONE);
		}
	}
	*woke += batch_requests_ended(b, failed, k);
	return q;
}

int rq_ends_flush(struct rq_ends *x)
{
	struct ferry_rq **r = x->rq, **end = x->rq + x->n;
	int woke = 0;

	if (x->n == 1) { /* a lone request (a latency loop's): no run to look for */
		x->n = 0;
		/* pairs with: cas_release in rq_fold and ferry_batch_cancel */
		return rq_finish(*r, rq_outcome(*r, load_acquire((*r)->error)));
	}
	while (r < end)
		r = ends_finish(r, end, &woke);
	x->n = 0;
	return woke;
}

int rq_account(struct ferry_rq *rq, uint64_t len, int err)
{
	if (!rq_fold(rq, len, err))
		return 0;
	/* pairs with: cas_release in rq_fold and ferry_batch_cancel */
	return rq_finish(rq, rq_outcome(rq, load_acquire(rq->error)));
}
