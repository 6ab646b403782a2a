/* SPDX-License-Identifier: MIT */
/*
 * Per-core latency histogram with log2 buckets counted in raw clock ticks.
 *
 * The cores time with the TSC; converting every sample to ns would put a
 * division on the hot path, so samples stay in ticks and only the (few)
 * bucket bounds are converted, on the reader's side.  Bucket k holds
 * [2^(k-1), 2^k) ticks, bucket 0 holds 0, and the last bucket also takes
 * everything above its range (2^46 ticks is hours at any TSC rate).
 *
 * Single writer (the owning core), like ring/base/counters.h: a relaxed atomic
 * store of old + 1, no read-modify-write, so a sample costs a clz, a load
 * and a store.  Readers on any thread take a snapshot with relaxed loads;
 * each bucket is exact and never goes backwards, though buckets of one
 * snapshot may be a few samples apart in time.
 */
#ifndef FERRY_RUNTIME_HISTO_H
#define FERRY_RUNTIME_HISTO_H

#include <stdint.h>
#include "ring/base/atomics.h"

#define FERRY_HISTO_BUCKETS 48

struct histo {
	uint64_t b[FERRY_HISTO_BUCKETS];
};

/* Bucket of a sample of `ticks`. */
static inline unsigned histo_bucket(uint64_t ticks)
{
	unsigned k = ticks ? 64 - (unsigned)__builtin_clzll(ticks) : 0;

	return k < FERRY_HISTO_BUCKETS ? k : FERRY_HISTO_BUCKETS - 1;
}

/* Count one sample.  The owning thread only. */
static inline void histo_add(struct histo *h, uint64_t ticks)
{
	uint64_t *slot = &h->b[histo_bucket(ticks)];

	WRITE_ONCE(*slot, *slot + 1);
}

/* Count n samples of the same `ticks`.  The owning thread only. */
static inline void histo_add_n(struct histo *h, uint64_t ticks, uint64_t n)
{
	uint64_t *slot = &h->b[histo_bucket(ticks)];

	WRITE_ONCE(*slot, *slot + n);
}

/* Copy the FERRY_HISTO_BUCKETS counts of h to out.  Any thread. */
void histo_snapshot(const struct histo *h, uint64_t *out);

/* Samples in a snapshot of FERRY_HISTO_BUCKETS counts. */
uint64_t histo_count(const uint64_t *b);

/*
 * Largest tick count bucket k holds (inclusive): 0 for bucket 0, 2^k - 1
 * for the others, UINT64_MAX for the last one (it is unbounded: "+Inf").
 * This is Prometheus' `le`.
 */
uint64_t histo_bucket_max(unsigned k);

/*
 * Upper bound (histo_bucket_max) of the bucket holding the p-quantile of a
 * snapshot, in ticks: the bucket of the ceil(p * n)-th smallest sample
 * (nearest rank; p <= 0 gives the smallest, p >= 1 the largest).  0 when
 * the histogram is empty.
 */
uint64_t histo_percentile(const uint64_t *b, double p);

/*
 * A bucket bound in ticks as ns at a clock of hz ticks per second, rounded
 * up so that it stays a bound.  UINT64_MAX (the unbounded last bucket)
 * stays UINT64_MAX, larger results saturate to it, and so does any nonzero
 * bound at an unknown rate (hz 0).
 */
uint64_t histo_ticks_to_ns(uint64_t ticks, uint64_t hz);

#endif /* FERRY_RUNTIME_HISTO_H */
