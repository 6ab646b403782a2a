/* SPDX-License-Identifier: MIT */
/* Reader side of the per-core latency histograms (see histo.h). */
#include "runtime/metrics/histo.h"

void histo_snapshot(const struct histo *h, uint64_t *out)
{
	for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++)
		out[k] = READ_ONCE(h->b[k]);
}

uint64_t histo_count(const uint64_t *b)
{
	uint64_t n = 0;

	for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++)
		n += b[k];
	return n;
}

uint64_t histo_bucket_max(unsigned k)
{
	if (k == 0)
		return 0;
	if (k >= FERRY_HISTO_BUCKETS - 1)
		return UINT64_MAX;
	return (1ull << k) - 1;
}

/*
 * ceil(p * n) clamped to [1, n], without libm (the library links none).
 * A decimal p such as 0.07 is not exact in binary, and 0.07 * 100 comes out
 * one ulp above 7: a fraction within a few ulps of an integer is rounding,
 * not a rank.  The `!(p > 0)` form also sends NaN to the smallest sample.
 */
static uint64_t nearest_rank(uint64_t n, double p)
{
	double r;
	uint64_t rank;

	if (!(p > 0))
		return 1;
	if (p >= 1)
		return n;
	r = p * (double)n;
	rank = (uint64_t)r;
	if (r - (double)rank > r * 1e-15)
		rank++;
	return rank < 1 ? 1 : rank > n ? n : rank;
}

uint64_t histo_percentile(const uint64_t *b, double p)
{
	uint64_t n = histo_count(b), rank, seen = 0;

	if (n == 0)
		return 0;
	rank = nearest_rank(n, p);
	for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++) {
		seen += b[k];
		if (seen >= rank)
			return histo_bucket_max(k);
	}
	return histo_bucket_max(FERRY_HISTO_BUCKETS - 1); /* not reached */
}

uint64_t histo_ticks_to_ns(uint64_t ticks, uint64_t hz)
{
	unsigned __int128 ns;

	if (ticks == 0)
		return 0;
	if (ticks == UINT64_MAX || hz == 0)
		return UINT64_MAX;
	ns = ((unsigned __int128)ticks * 1000000000u + hz - 1) / hz;
	return ns > UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}
