/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench helpers that touch no engine: the seeded data pattern that
 * --verify checks (the target and the initiator of the two-process mode
 * compute it independently) and the latency summary of --lat.  Kept apart
 * so that tests/test_bench_opts.c can include and test them directly.
 */
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <stdint.h>

/* splitmix64's finaliser: a cheap bijective mixer. */
uint64_t bench_mix64(uint64_t x);

/*
 * The pattern is a function of (seed, absolute position): the byte at
 * position x is byte (x mod 8) of mix64(x / 8 combined with seed), so a
 * slice that lands at the wrong offset is seen, and two seeds give
 * unrelated bytes (a write of seed B over a buffer holding seed A is seen
 * even where it did not arrive).
 */
uint8_t bench_pattern_byte(uint64_t pos, uint64_t seed);

/* Fill buf[0, len) with the pattern of positions [pos, pos + len). */
void bench_pattern_fill(uint8_t *buf, uint64_t len, uint64_t pos, uint64_t seed);

/*
 * Bytes of buf[0, len) that differ from the pattern of [pos, pos + len);
 * *first is set to the index of the first one (when any).
 */
uint64_t bench_pattern_check(const uint8_t *buf, uint64_t len, uint64_t pos, uint64_t seed,
			     uint64_t *first);

/* Latency summary in nanoseconds, perftest-style (typical = median). */
struct bench_lat {
	uint64_t n;
	uint64_t min, p50, p99, p999, max;
	double avg;
};

/*
 * Summarise n samples (sorted in place).  Percentiles are nearest-rank:
 * the smallest sample with at least q * n samples at or below it.  With
 * n == 0 everything is 0.
 */
void bench_lat_summary(uint64_t *ns, uint64_t n, struct bench_lat *out);

/* Nearest-rank percentile q in (0, 1] of sorted[0, n); 0 when n == 0. */
uint64_t bench_percentile(const uint64_t *sorted, uint64_t n, double q);

#endif /* FERRY_BENCH_UTIL_H */
