/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench helpers that touch no engine: the seeded data pattern that
 * --verify checks (the target and the initiator of the two-process mode
 * compute it independently) and the latency summary of --lat.  Kept apart
 * so that tests/unit/bench/test_bench_opts.c can include and test them directly.
 */
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <pthread.h>
#include <sched.h>
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

/*
 * Latency samples of one port, in memory allocated before the run.  The
 * first cap samples are kept as they come; when the array is full, half of
 * it is dropped at random and from then on a sample is kept with
 * probability 2^-shift (halving again when full), so what is kept is a
 * uniform random subset of all samples, whatever order they come in (a
 * fixed stride would always pick, say, the fastest request of each batch).
 * min, max and the mean stay exact.  One thread only.
 */
struct bench_samples {
	uint64_t *v;
	uint64_t cap, n;  /* room and samples kept */
	uint64_t seen;    /* samples offered */
	unsigned shift;   /* a sample is kept with probability 2^-shift */
	uint64_t rng;     /* splitmix64 state */
	uint64_t min, max;
	double sum;
};

/* Allocate and touch room for cap (>= 2) samples.  0 or -ENOMEM. */
int bench_samples_init(struct bench_samples *s, uint64_t cap, uint64_t seed);

void bench_samples_free(struct bench_samples *s);

/* Forget the samples, keep the memory (before each size). */
void bench_samples_reset(struct bench_samples *s);

/* One sample; never allocates. */
void bench_samples_add(struct bench_samples *s, uint64_t ns);

/*
 * The n gaps between n + 1 stamps, ts[j + 1] - ts[j], exactly as n calls of
 * bench_samples_add would add them, without a call per sample while they
 * are all kept (--lat's stamps, after its timed loop).
 */
void bench_samples_add_gaps(struct bench_samples *s, const uint64_t *ts, uint64_t n);

/*
 * Summary of n ports' samples together.  Ports that kept a larger share
 * are thinned first so that every kept sample stands for as many requests;
 * out->n is every sample offered, min, max and avg are exact.  May thin
 * (change) the samples; allocates a scratch array: not for the timed loop.
 * 0, or -ENOMEM (out then has the exact fields only).
 */
int bench_samples_summary(struct bench_samples *s, unsigned n, struct bench_lat *out);

/* Start fn(arg) on a new thread, on cpus (NULL: wherever the scheduler
 * puts it).  0 or -errno. */
int bench_thread_on(pthread_t *t, void *(*fn)(void *), void *arg, const cpu_set_t *cpus);

#endif /* FERRY_BENCH_UTIL_H */
