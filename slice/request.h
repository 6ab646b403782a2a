/* SPDX-License-Identifier: MIT */
/*
 * Requests and their accounting.  A request (one slot of a batch) is
 * validated by its submitter, then split into at most one part per core;
 * every core that serves a part folds its slices' outcomes into the request
 * with atomics, and whoever accounts the last byte ends the request --
 * exactly once -- releases what it held and tells its batch.  The batch's
 * pending count doubles as the futex word its owner sleeps on.
 */
#ifndef FERRY_SLICE_REQUEST_H
#define FERRY_SLICE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

struct mem_region;
struct seg_region;
struct ferry_seg;

/*
 * A doorbell that ending requests ring: the engine's notifier thread,
 * asleep until a WRITE its notification waits for has landed.  It lives
 * as long as the engine (a batch only points at it), so it may be rung
 * after the decrement that lets the batch go.
 */
struct rq_bell {
	uint32_t rung;                 /* rung since the sleeper last reset it */
	int fd;                        /* eventfd */
};

/* What a batch counts: its requests not yet final, and those that failed. */
struct rq_batch {
	/*
	 * Requests not yet final, plus RQ_BATCH_WAITER while the owner sleeps
	 * in ferry_batch_wait and RQ_BATCH_BELL while a notification waits
	 * for some of them: one word, so that the core's decrement is its last
	 * access to the batch (the owner may free it right after).
	 */
	uint32_t pending ferry_cache_aligned;
	uint32_t failed;               /* requests that ended badly */
	struct rq_bell *bell;          /* rung on an end under RQ_BATCH_BELL; read before it */
	uint32_t bell_jobs;            /* the notifier's leader's alone: its jobs that set RQ_BATCH_BELL */
};

#define RQ_BATCH_WAITER 0x80000000u
#define RQ_BATCH_BELL 0x40000000u
#define RQ_BATCH_COUNT(v) ((v) & ~(RQ_BATCH_WAITER | RQ_BATCH_BELL))

/* Final states, as enum ferry_state has them. */
enum rq_state { RQ_PENDING = 0, RQ_DONE = 1, RQ_FAILED = 2, RQ_TIMEOUT = 3 };

/* Request parts ride in the low bits of the request's pointer on the rings. */
#define RQ_PART_BITS 6

/* One submitted request, a slot of a batch. */
/* An op refused before it was known to be one (neither READ nor WRITE):
 * no WRITE for a notification to wait on.  (0xff is a notification's.) */
#define RQ_OP_NONE 0xfe

struct ferry_rq {
	/* The transfer, set by the submitter before the parts are queued (the
	 * ring's release publishes it to the cores). */
	uint64_t local;
	uint64_t remote;
	uint64_t len;
	uint8_t op;                    /* enum nic_op, as its slices carry it; RQ_OP_NONE */
	uint32_t nparts;
	uint64_t nslices;
	/* seg_slot .. seg_refs: what the requests of one submit run share
	 * (runtime/submit copies them as one block: RQ_SHARED_*). */
	uint32_t seg_slot;
	uint32_t seg_gen;
	uint64_t rails;                /* cores the parts go to (bit i: core i) */
	struct rq_batch *batch;
	struct mem_region *lreg;       /* the local region (keys per core) */
	const struct seg_region *rreg; /* the peer's region (keys per peer NIC) */
	struct ferry_seg *seg;         /* the peer (rail state) */
	uint64_t *lreg_refs;           /* requests using lreg: released at the end */
	uint64_t *seg_refs;            /* requests using seg: released at the end */
	/* Folded by every core that serves a part: own cache line. */
	uint64_t remaining ferry_cache_aligned; /* bytes not yet accounted */
	uint64_t ok_bytes;
	int32_t error;                 /* first error, negative errno */
	int32_t state;                 /* enum rq_state, release-stored last */
} ferry_cache_aligned;

#define RQ_SHARED_FIRST seg_slot
#define RQ_SHARED_SIZE \
	(offsetof(struct ferry_rq, seg_refs) + sizeof(uint64_t *) - offsetof(struct ferry_rq, seg_slot))

/* local .. nslices: the transfer itself, which a prepared set keeps as an
 * image copied as one block (runtime/submit/prep.c); seg_slot follows. */
#define RQ_HEAD_SIZE (offsetof(struct ferry_rq, nslices) + sizeof(uint64_t))
_Static_assert(RQ_HEAD_SIZE == offsetof(struct ferry_rq, seg_slot), "local .. nslices, then seg_slot");

/* A slot (perhaps reused) starts PENDING with nothing done or failed:
 * ferry_req_status may read it while the submitter fills it. */
static inline void rq_outcome_clear(struct ferry_rq *rq)
{
	rq->ok_bytes = 0;
	rq->error = 0;
	WRITE_ONCE(rq->state, RQ_PENDING);
}

_Static_assert(_Alignof(struct ferry_rq) >= (1 << RQ_PART_BITS),
	       "a part index fits the request pointer's low bits");

/*
 * Account len bytes of rq as done (err == 0) or failed (negative errno).
 * Ends the request when they were the last: returns 1 when ending it woke
 * the batch's sleeping owner (a futex call), else 0.  Any core.
 */
int rq_account(struct ferry_rq *rq, uint64_t len, int err);

/*
 * Requests one core ended during a burst of completions, released together
 * (rq_ends_flush): one decrement of a region's and a segment's reference
 * count and of a batch's pending count per run of requests that share them,
 * instead of three atomics per request.  The core's alone.
 */
#define RQ_ENDS 64
struct rq_ends {
	uint32_t n;
	struct ferry_rq *rq[RQ_ENDS];
};

/* rq_account, but a request it ends goes on x (flushed when full) instead
 * of being released now.  Returns the owners woken (a flush). */
int rq_account_defer(struct rq_ends *x, struct ferry_rq *rq, uint64_t len, int err);
/* Release the requests on x, each as rq_account would have; returns the
 * sleeping owners it woke. */
int rq_ends_flush(struct rq_ends *x);

/* End a request that no core serves and that holds nothing (a
 * notification: the notifier thread ends it); err 0 = done.  Returns 1
 * when it woke the batch's sleeping owner.  Any thread. */
int rq_end(struct ferry_rq *rq, int err);

/* End a request refused before anything was queued (nothing held). */
void rq_refuse(struct ferry_rq *rq, int err);

/* Bytes covered by slices [a, b) of rq. */
uint64_t rq_range_bytes(const struct ferry_rq *rq, uint32_t slice_size, uint64_t a, uint64_t b);

/* The ring entry for part p of rq, and back. */
static inline void *rq_part_tag(struct ferry_rq *rq, unsigned part)
{
	return (void *)((uintptr_t)rq | part);
}

static inline struct ferry_rq *rq_part_untag(void *tagged, unsigned *part)
{
	uintptr_t mask = (1u << RQ_PART_BITS) - 1;

	*part = (unsigned)((uintptr_t)tagged & mask);
	return (struct ferry_rq *)((uintptr_t)tagged & ~mask);
}

#endif /* FERRY_SLICE_REQUEST_H */
