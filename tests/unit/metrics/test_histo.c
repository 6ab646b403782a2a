/* SPDX-License-Identifier: MIT */
/*
 * Latency histograms: bucket edges, bounds, nearest-rank percentiles on
 * distributions whose answer is known by construction, tick -> ns bounds,
 * and one writer against a snapshotting reader (run under TSan too: the
 * single-writer store / relaxed load pattern must be race-free, counts
 * must never go backwards and the final total must be exact).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/metrics/histo.h"

#define LAST (FERRY_HISTO_BUCKETS - 1)

static void test_bucket_edges(void **state)
{
	struct histo h;

	(void)state;
	assert_int_equal(histo_bucket(0), 0);
	assert_int_equal(histo_bucket(1), 1);
	assert_int_equal(histo_bucket(2), 2);
	assert_int_equal(histo_bucket(3), 2);
	assert_int_equal(histo_bucket(4), 3);
	assert_int_equal(histo_bucket((1ull << 40) - 1), 40);
	assert_int_equal(histo_bucket(1ull << 40), 41);
	assert_int_equal(histo_bucket((1ull << 46) - 1), 46);
	assert_int_equal(histo_bucket(1ull << 46), LAST);
	assert_int_equal(histo_bucket(1ull << 63), LAST);
	assert_int_equal(histo_bucket(UINT64_MAX), LAST);

	memset(&h, 0, sizeof(h));
	histo_add(&h, 0);
	histo_add(&h, 1);
	histo_add(&h, 2);
	histo_add(&h, 3);
	histo_add(&h, 4);
	histo_add(&h, 1ull << 40);
	histo_add(&h, UINT64_MAX);
	assert_int_equal(h.b[0], 1);
	assert_int_equal(h.b[1], 1);
	assert_int_equal(h.b[2], 2);
	assert_int_equal(h.b[3], 1);
	assert_int_equal(h.b[41], 1);
	assert_int_equal(h.b[LAST], 1);
	assert_int_equal(histo_count(h.b), 7);
}

/* Every bucket's bound is its largest member: the next tick is the next bucket. */
static void test_bucket_max(void **state)
{
	(void)state;
	assert_int_equal(histo_bucket_max(0), 0);
	assert_int_equal(histo_bucket_max(1), 1);
	assert_int_equal(histo_bucket_max(2), 3);
	assert_true(histo_bucket_max(LAST) == UINT64_MAX);
	for (unsigned k = 0; k < LAST; k++) {
		assert_int_equal(histo_bucket(histo_bucket_max(k)), k);
		assert_int_equal(histo_bucket(histo_bucket_max(k) + 1), k + 1);
	}
}

static void test_empty(void **state)
{
	uint64_t b[FERRY_HISTO_BUCKETS] = { 0 };
	const double ps[] = { 0, 0.5, 0.99, 0.999, 1.0 };

	(void)state;
	assert_int_equal(histo_count(b), 0);
	for (unsigned i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		assert_int_equal(histo_percentile(b, ps[i]), 0);
}

static void test_one_bucket(void **state)
{
	struct histo h;
	uint64_t b[FERRY_HISTO_BUCKETS];
	const double ps[] = { 0, 0.5, 0.99, 0.999, 1.0 };

	(void)state;
	memset(&h, 0, sizeof(h));
	for (unsigned i = 0; i < 1000; i++)
		histo_add(&h, 64 + i % 64);  /* all in [64, 128): bucket 7 */
	histo_snapshot(&h, b);
	assert_int_equal(b[7], 1000);
	for (unsigned i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		assert_int_equal(histo_percentile(b, ps[i]), 127);
}

/* 100 samples in each of buckets 1..10: the k-th hundred is bucket k. */
static void test_uniform(void **state)
{
	uint64_t b[FERRY_HISTO_BUCKETS] = { 0 };

	(void)state;
	for (unsigned k = 1; k <= 10; k++)
		b[k] = 100;
	assert_int_equal(histo_percentile(b, 0), 1);
	assert_int_equal(histo_percentile(b, 0.001), 1);   /* rank 1 */
	assert_int_equal(histo_percentile(b, 0.1), 1);     /* rank 100 */
	assert_int_equal(histo_percentile(b, 0.1001), 3);  /* rank 101: bucket 2 */
	assert_int_equal(histo_percentile(b, 0.5), 31);    /* rank 500: bucket 5 */
	assert_int_equal(histo_percentile(b, 0.99), 1023);
	assert_int_equal(histo_percentile(b, 0.999), 1023);
	assert_int_equal(histo_percentile(b, 1.0), 1023);
}

/* A tail built so that p50, p99, p99.9 and p100 each fall in another bucket. */
static void test_tail(void **state)
{
	uint64_t b[FERRY_HISTO_BUCKETS] = { 0 };

	(void)state;
	b[3] = 989;   /* ranks 1..989 */
	b[20] = 9;    /* ranks 990..998 */
	b[30] = 1;    /* rank 999 */
	b[LAST] = 1;  /* rank 1000: beyond the range */
	assert_int_equal(histo_percentile(b, 0), 7);
	assert_int_equal(histo_percentile(b, 0.5), 7);
	assert_int_equal(histo_percentile(b, 0.989), 7);
	assert_int_equal(histo_percentile(b, 0.99), (1u << 20) - 1);
	assert_int_equal(histo_percentile(b, 0.999), (1u << 30) - 1);
	assert_true(histo_percentile(b, 1.0) == UINT64_MAX);
	/* Out-of-range p is clamped, not an error. */
	assert_int_equal(histo_percentile(b, -1), 7);
	assert_true(histo_percentile(b, 2) == UINT64_MAX);
}

/* 0.07 * 100 is 7.000000000000001 in binary: still rank 7, not 8. */
static void test_decimal_p(void **state)
{
	uint64_t b[FERRY_HISTO_BUCKETS] = { 0 };

	(void)state;
	b[1] = 7;
	b[2] = 93;
	assert_int_equal(histo_percentile(b, 0.07), 1);
	assert_int_equal(histo_percentile(b, 0.0701), 3);
	b[1] = 29;
	b[2] = 71;
	assert_int_equal(histo_percentile(b, 0.29), 1);
}

static void test_ticks_to_ns(void **state)
{
	(void)state;
	assert_int_equal(histo_ticks_to_ns(0, 3000000000ull), 0);
	assert_int_equal(histo_ticks_to_ns(1023, 1000000000ull), 1023);
	assert_int_equal(histo_ticks_to_ns(3, 3000000000ull), 1);
	assert_int_equal(histo_ticks_to_ns(4, 3000000000ull), 2); /* rounded up */
	/* 2^40 ticks at 2.5 GHz = 439804651110.4 ns: the 128-bit product is exact. */
	assert_int_equal(histo_ticks_to_ns(1ull << 40, 2500000000ull), 439804651111ull);
	assert_int_equal(histo_ticks_to_ns((1ull << 46) - 1, 1000000000ull), (1ull << 46) - 1);
	assert_true(histo_ticks_to_ns(UINT64_MAX, 3000000000ull) == UINT64_MAX);
	assert_true(histo_ticks_to_ns(1ull << 62, 1) == UINT64_MAX);  /* saturates */
	assert_true(histo_ticks_to_ns(5, 0) == UINT64_MAX);
}

/* ---- one writer, one snapshotting reader ---- */

#define SAMPLES 1000000u

static struct histo shared;
static int writer_done;

/* Samples spread over buckets 0..21; want[] is counted from the same list. */
static uint64_t sample(unsigned i)
{
	return (i % 21 ? 1ull << (i % 21 - 1) : 0) + i % 7;
}

static void *writer_main(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < SAMPLES; i++)
		histo_add(&shared, sample(i));
	__atomic_store_n(&writer_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_concurrent(void **state)
{
	uint64_t prev[FERRY_HISTO_BUCKETS] = { 0 }, cur[FERRY_HISTO_BUCKETS];
	uint64_t want[FERRY_HISTO_BUCKETS] = { 0 };
	unsigned backwards = 0, snaps = 0;
	pthread_t w;

	(void)state;
	memset(&shared, 0, sizeof(shared));
	for (unsigned i = 0; i < SAMPLES; i++)
		want[histo_bucket(sample(i))]++;
	assert_int_equal(pthread_create(&w, NULL, writer_main, NULL), 0);
	do {
		histo_snapshot(&shared, cur);
		for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++)
			backwards += cur[k] < prev[k];
		backwards += histo_count(cur) < histo_count(prev);
		memcpy(prev, cur, sizeof(cur));
		snaps++;
	} while (!__atomic_load_n(&writer_done, __ATOMIC_ACQUIRE));
	pthread_join(w, NULL);
	histo_snapshot(&shared, cur);
	assert_int_equal(backwards, 0);
	assert_true(snaps > 0);
	assert_int_equal(histo_count(cur), SAMPLES);
	assert_memory_equal(cur, want, sizeof(want));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bucket_edges),
		cmocka_unit_test(test_bucket_max),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_one_bucket),
		cmocka_unit_test(test_uniform),
		cmocka_unit_test(test_tail),
		cmocka_unit_test(test_decimal_p),
		cmocka_unit_test(test_ticks_to_ns),
		cmocka_unit_test(test_concurrent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
