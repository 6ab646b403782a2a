/* SPDX-License-Identifier: MIT */
/*
 * SPSC rings: size validation, capacity (size - 1), back-pressure on a full
 * ring (put fails, nothing is lost or overwritten), FIFO order, bursts,
 * many wraparounds, and a two-thread producer/consumer run that also runs
 * under ThreadSanitizer (the wrappers publish release/acquire for TSan).
 *
 * Objects are small integers cast to pointers: the ring stores the pointer
 * value it is given, never dereferences it, and 0 (NULL) is "empty" for
 * ferry_ring_get, so every value used here is >= 1.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ring/ring.h"

#define P(v) ((void *)(uintptr_t)(v))
#define V(p) ((uintptr_t)(p))

static void test_init_rejects_bad_sizes(void **state)
{
	static const uint32_t bad[] = { 0, 1, 2, 3, 5, 6, 7, 12, 100, 0x80000001u, 0xffffffffu };
	struct ferry_ring r;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* Poison: a refused init must not have half-initialised anything we rely on. */
		memset(&r, 0xa5, sizeof(r));
		assert_int_equal(ferry_ring_init(&r, bad[i]), -EINVAL);
	}
}

static void test_init_capacity(void **state)
{
	static const uint32_t good[] = { 4, 8, 16, 64, 1024, 65536 };
	struct ferry_ring r;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(ferry_ring_init(&r, good[i]), 0);
		assert_int_equal(r.size, good[i]);
		assert_int_equal(ferry_ring_capacity(&r), good[i] - 1);
		assert_int_equal(ferry_ring_count(&r), 0);
		assert_null(ferry_ring_get(&r));
		ferry_ring_fini(&r);
		assert_null(r.slots);
	}
}

/* Fill to capacity; the next put is refused and the ring is unchanged. */
static void check_fill_drain(uint32_t size)
{
	struct ferry_ring r;
	uint32_t cap = size - 1;

	assert_int_equal(ferry_ring_init(&r, size), 0);
	for (uint32_t i = 0; i < cap; i++) {
		assert_true(ferry_ring_put(&r, P(i + 1)));
		assert_int_equal(ferry_ring_count(&r), i + 1);
	}
	/* Back-pressure: refused, repeatedly, without overwriting anything. */
	for (int k = 0; k < 3; k++) {
		assert_false(ferry_ring_put(&r, P(0xdead)));
		assert_int_equal(ferry_ring_count(&r), cap);
	}
	for (uint32_t i = 0; i < cap; i++)
		assert_int_equal(V(ferry_ring_get(&r)), i + 1);
	assert_null(ferry_ring_get(&r));
	assert_null(ferry_ring_get(&r));
	assert_int_equal(ferry_ring_count(&r), 0);

	/* After a full drain the whole capacity is usable again. */
	for (uint32_t i = 0; i < cap; i++)
		assert_true(ferry_ring_put(&r, P(1000 + i)));
	assert_false(ferry_ring_put(&r, P(1)));
	/* One slot freed: exactly one more put fits. */
	assert_int_equal(V(ferry_ring_get(&r)), 1000);
	assert_true(ferry_ring_put(&r, P(5000)));
	assert_false(ferry_ring_put(&r, P(1)));
	for (uint32_t i = 1; i < cap; i++)
		assert_int_equal(V(ferry_ring_get(&r)), 1000 + i);
	assert_int_equal(V(ferry_ring_get(&r)), 5000);
	assert_null(ferry_ring_get(&r));
	ferry_ring_fini(&r);
}

static void test_fill_backpressure_fifo(void **state)
{
	(void)state;
	check_fill_drain(4);
	check_fill_drain(8);
	check_fill_drain(64);
	check_fill_drain(4096);
}

static void test_get_burst(void **state)
{
	struct ferry_ring r;
	void *objs[64];
	uintptr_t next = 1;
	unsigned n;

	(void)state;
	assert_int_equal(ferry_ring_init(&r, 16), 0);

	/* Empty: a burst returns 0 and writes nothing. */
	objs[0] = P(0x77);
	assert_int_equal(ferry_ring_get_burst(&r, objs, 8), 0);
	assert_int_equal(V(objs[0]), 0x77);
	/* max == 0 on a non-empty ring takes nothing. */
	assert_true(ferry_ring_put(&r, P(next)));
	assert_int_equal(ferry_ring_get_burst(&r, objs, 0), 0);
	assert_int_equal(ferry_ring_count(&r), 1);
	assert_int_equal(ferry_ring_get_burst(&r, objs, 1), 1);
	assert_int_equal(V(objs[0]), next);
	next++;

	/* 10 queued, max 4: 4, 4, then the last 2; FIFO across the bursts. */
	for (uintptr_t i = 0; i < 10; i++)
		assert_true(ferry_ring_put(&r, P(next + i)));
	for (unsigned want = 4; want;) {
		n = ferry_ring_get_burst(&r, objs, 4);
		assert_int_equal(n, want);
		for (unsigned i = 0; i < n; i++)
			assert_int_equal(V(objs[i]), next++);
		want = ferry_ring_count(&r) < 4 ? ferry_ring_count(&r) : 4;
	}
	assert_int_equal(ferry_ring_count(&r), 0);

	/* 7 queued, max larger than the ring: exactly 7, and the slot after untouched. */
	for (uintptr_t i = 0; i < 7; i++)
		assert_true(ferry_ring_put(&r, P(next + i)));
	objs[7] = P(0x55);
	n = ferry_ring_get_burst(&r, objs, 64);
	assert_int_equal(n, 7);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(V(objs[i]), next++);
	assert_int_equal(V(objs[7]), 0x55);

	/* A full ring drained in one burst. */
	for (uintptr_t i = 0; i < 15; i++)
		assert_true(ferry_ring_put(&r, P(next + i)));
	assert_false(ferry_ring_put(&r, P(1)));
	n = ferry_ring_get_burst(&r, objs, 15);
	assert_int_equal(n, 15);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(V(objs[i]), next++);
	assert_null(ferry_ring_get(&r));
	ferry_ring_fini(&r);
}

/* Staged entries: invisible until published, counted against the room,
 * published together in order; the room is looked at again only when
 * what was last seen runs out. */
static void test_stage_publish(void **state)
{
	struct ferry_ring r;
	struct ferry_ring_run run = { 0 };
	void *objs[16];
	uintptr_t next = 1, got = 1;

	(void)state;
	assert_int_equal(ferry_ring_init(&r, 8), 0);
	assert_false(ferry_ring_peek(&r));
	for (int i = 0; i < 3; i++)
		assert_true(ferry_ring_stage(&r, &run, P(next++)));
	assert_int_equal(run.n, 3);
	assert_int_equal(ferry_ring_count(&r), 0); /* not yet seen */
	assert_null(ferry_ring_get(&r));
	ferry_ring_publish(&r, &run);
	assert_int_equal(run.n, 0);
	assert_int_equal(ferry_ring_count(&r), 3);
	/* Capacity 7, 3 queued: 4 more stage, the 5th is refused (staged counted). */
	for (int i = 0; i < 4; i++)
		assert_true(ferry_ring_stage(&r, &run, P(next++)));
	assert_false(ferry_ring_stage(&r, &run, P(0xdead)));
	assert_false(ferry_ring_fits(&r, &run));
	ferry_ring_publish(&r, &run);
	assert_int_equal(ferry_ring_count(&r), 7);
	assert_false(ferry_ring_stage(&r, &run, P(0xdead)));
	/* The consumer frees 2: a new look finds them. */
	assert_int_equal(ferry_ring_get_burst(&r, objs, 2), 2);
	assert_int_equal(V(objs[0]), got++);
	assert_int_equal(V(objs[1]), got++);
	assert_true(ferry_ring_fits(&r, &run));
	assert_true(ferry_ring_stage(&r, &run, P(next++)));
	assert_true(ferry_ring_stage(&r, &run, P(next++)));
	assert_false(ferry_ring_stage(&r, &run, P(0xdead)));
	ferry_ring_publish(&r, &run);
	/* FIFO across the runs and the wrap. */
	while (ferry_ring_peek(&r)) {
		unsigned n = ferry_ring_get_burst(&r, objs, 16);

		for (unsigned i = 0; i < n; i++)
			assert_int_equal(V(objs[i]), got++);
	}
	assert_int_equal(got, next);
	/* An empty run publishes nothing. */
	ferry_ring_publish(&r, &run);
	assert_int_equal(ferry_ring_count(&r), 0);
	ferry_ring_fini(&r);
}

/* A window stages from locals: up to its stop and the room last seen
 * (under TSan nothing: every stage takes the lock), the run's count
 * written back on close, then ferry_ring_stage goes on from there; a
 * window on a run already at its stop stages nothing; order kept across
 * the wrap. */
static void test_window(void **state)
{
	struct ferry_ring r;
	struct ferry_ring_run run = { 0 };
	struct ferry_ring_window w;
	void *objs[16];
	uintptr_t next = 1, got = 1;
	unsigned staged = 0, n;

	(void)state;
	assert_int_equal(ferry_ring_init(&r, 8), 0);
	assert_true(ferry_ring_room(&r, &run)); /* 7 free */
	ferry_ring_window_open(&r, &run, &w, 5);
	while (ferry_ring_window_put(&w, P(next))) {
		next++;
		staged++;
	}
#ifdef FERRY_TSAN
	assert_int_equal(staged, 0);
#else
	assert_int_equal(staged, 5);
#endif
	ferry_ring_window_close(&r, &run, &w);
	assert_int_equal(run.n, staged);
	assert_int_equal(ferry_ring_count(&r), 0); /* staged, not published */
	while (ferry_ring_stage(&r, &run, P(next)))
		next++;
	assert_int_equal(run.n, 7);
	ferry_ring_window_open(&r, &run, &w, 5); /* n 7 is past the stop */
	assert_false(ferry_ring_window_put(&w, P(0xdead)));
	ferry_ring_window_close(&r, &run, &w);
	assert_int_equal(run.n, 7);
	ferry_ring_publish(&r, &run);
	n = ferry_ring_get_burst(&r, objs, 16);
	assert_int_equal(n, 7);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(V(objs[i]), got++);
	/* Room is what was last seen: none until a new look. */
	ferry_ring_window_open(&r, &run, &w, 16);
	assert_false(ferry_ring_window_put(&w, P(0xdead)));
	ferry_ring_window_close(&r, &run, &w);
	assert_true(ferry_ring_room(&r, &run));
	ferry_ring_window_open(&r, &run, &w, 16); /* in the wrapped slots */
	while (ferry_ring_window_put(&w, P(next)))
		next++;
	ferry_ring_window_close(&r, &run, &w);
	while (ferry_ring_stage(&r, &run, P(next)))
		next++;
	assert_int_equal(run.n, 7);
	ferry_ring_publish(&r, &run);
	n = ferry_ring_get_burst(&r, objs, 16);
	assert_int_equal(n, 7);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(V(objs[i]), got++);
	assert_int_equal(got, next);
	ferry_ring_fini(&r);
}

/* A burst read in place: the entries in order, the producer kept off
 * their slots until ferry_ring_done, max respected. */
static void test_look_done(void **state)
{
	struct ferry_ring r;
	struct ferry_ring_view v;
	uintptr_t next = 1, got = 1;

	(void)state;
	assert_int_equal(ferry_ring_init(&r, 8), 0);
	assert_int_equal(ferry_ring_look(&r, &v, 8), 0);
	ferry_ring_done(&r, &v); /* an empty look gives back nothing */
	for (int lap = 0; lap < 20; lap++) {
		while (ferry_ring_put(&r, P(next)))
			next++;
		assert_int_equal(ferry_ring_look(&r, &v, 4), 4);
		for (unsigned k = 0; k < 4; k++)
			assert_int_equal(V(ferry_ring_at(&v, k)), got + k);
		/* Not given back yet: still full for the producer. */
		assert_false(ferry_ring_put(&r, P(0xdead)));
		ferry_ring_done(&r, &v);
		got += 4;
		assert_int_equal(ferry_ring_count(&r), 3);
		assert_int_equal(ferry_ring_look(&r, &v, 16), 3);
		for (unsigned k = 0; k < 3; k++)
			assert_int_equal(V(ferry_ring_at(&v, k)), got + k);
		ferry_ring_done(&r, &v);
		got += 3;
		assert_null(ferry_ring_get(&r));
	}
	assert_int_equal(got, next);
	ferry_ring_fini(&r);
}

/* Single thread, small ring, many laps with varying fill levels. */
static void test_wraparound(void **state)
{
	struct ferry_ring r;
	void *objs[8];
	uintptr_t put = 1, got = 1;
	uint32_t rng = 12345;

	(void)state;
	assert_int_equal(ferry_ring_init(&r, 8), 0);
	for (int round = 0; round < 200000; round++) {
		unsigned k;

		rng = rng * 1103515245u + 12345u;
		k = (rng >> 16) % 8; /* 0..7: sometimes more than the room */
		for (unsigned i = 0; i < k; i++) {
			unsigned before = ferry_ring_count(&r);

			if (ferry_ring_put(&r, P(put))) {
				put++;
			} else {
				/* Refused only when full, and nothing changed. */
				assert_int_equal(before, ferry_ring_capacity(&r));
				assert_int_equal(ferry_ring_count(&r), before);
			}
		}
		assert_int_equal(ferry_ring_count(&r), put - got);
		rng = rng * 1103515245u + 12345u;
		if (rng & 0x10000) {
			k = ferry_ring_get_burst(&r, objs, 1 + (rng >> 20) % 8);
			for (unsigned i = 0; i < k; i++)
				assert_int_equal(V(objs[i]), got++);
		} else {
			void *o = ferry_ring_get(&r);

			if (o)
				assert_int_equal(V(o), got++);
			else
				assert_int_equal(put, got);
		}
	}
	/* Drain the remainder. */
	for (void *o; (o = ferry_ring_get(&r));)
		assert_int_equal(V(o), got++);
	assert_int_equal(put, got);
	/* Hundreds of thousands of items through 8 slots: many laps of the indices. */
	assert_true(put > 100000);
	ferry_ring_fini(&r);
}

#define PC_ITEMS 1000000u
#define PC_RING 64

struct pc {
	struct ferry_ring r;
	uint64_t full;   /* producer saw back-pressure (producer only) */
	int stop;        /* consumer gave up: the producer must not spin forever */
	int staged;      /* the producer stages runs of entries instead of putting each */
};

/*
 * Spin a few times, then give the CPU away: the box may have as few CPUs as
 * threads, and in TSan builds every failed attempt takes the ring's lock.
 */
static void backoff(unsigned *spins)
{
	if (++*spins < 4) {
		ferry_cpu_relax();
	} else {
		*spins = 0;
		sched_yield();
	}
}

/* Runs of 1..16 entries, published when a run is complete or the ring full. */
static void *producer_staged(struct pc *pc)
{
	struct ferry_ring_run run = { 0 };
	unsigned spins = 0;

	for (uintptr_t i = 0; i < PC_ITEMS; i++) {
		while (!ferry_ring_stage(&pc->r, &run, P(i + 1))) {
			ferry_ring_publish(&pc->r, &run);
			if (__atomic_load_n(&pc->stop, __ATOMIC_RELAXED))
				return NULL;
			pc->full++;
			backoff(&spins);
		}
		if (run.n > (i % 16))
			ferry_ring_publish(&pc->r, &run);
	}
	ferry_ring_publish(&pc->r, &run);
	return NULL;
}

static void *producer(void *arg)
{
	struct pc *pc = arg;
	unsigned spins = 0;

	if (pc->staged)
		return producer_staged(pc);
	for (uintptr_t i = 0; i < PC_ITEMS; i++) {
		while (!ferry_ring_put(&pc->r, P(i + 1))) {
			if (__atomic_load_n(&pc->stop, __ATOMIC_RELAXED))
				return NULL;
			pc->full++;
			backoff(&spins);
		}
	}
	return NULL;
}

static void two_threads(int staged)
{
	struct pc *pc;
	pthread_t th;
	void *objs[32];
	uintptr_t expect = 1;
	unsigned spins = 0, k = 0;
	struct timespec t0, t1;
	double secs;

	/* The ring is cache-line aligned: keep the holder on the heap, aligned. */
	pc = aligned_alloc(FERRY_CACHE_LINE, sizeof(*pc));
	assert_non_null(pc);
	memset(pc, 0, sizeof(*pc));
	pc->staged = staged;
	assert_int_equal(ferry_ring_init(&pc->r, PC_RING), 0);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(pthread_create(&th, NULL, producer, pc), 0);
	while (expect <= PC_ITEMS) {
		unsigned n;

		/* Mostly bursts of varying size (copied out or read in place),
		 * some single gets: every path, and fewer calls under TSan. */
		if ((k++ & 7) == 0) {
			void *o = ferry_ring_get(&pc->r);

			n = 0;
			if (o) {
				if (V(o) != expect)
					break;
				expect++;
				n = 1;
			}
		} else if (k & 1) {
			n = ferry_ring_get_burst(&pc->r, objs, 1 + k % 32);
			for (unsigned i = 0; i < n; i++) {
				if (V(objs[i]) != expect)
					goto out;
				expect++;
			}
		} else {
			struct ferry_ring_view v;

			n = ferry_ring_look(&pc->r, &v, 1 + k % 32);
			for (unsigned i = 0; i < n; i++) {
				if (V(ferry_ring_at(&v, i)) != expect)
					goto out;
				expect++;
			}
			ferry_ring_done(&pc->r, &v);
		}
		if (!n)
			backoff(&spins);
	}
out:
	__atomic_store_n(&pc->stop, 1, __ATOMIC_RELAXED);
	assert_int_equal(pthread_join(th, NULL), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Every item once, in order, and nothing extra behind the last one. */
	assert_int_equal(expect, PC_ITEMS + 1);
	assert_null(ferry_ring_get(&pc->r));
	assert_int_equal(ferry_ring_count(&pc->r), 0);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_message("  1M items through a %u-slot ring%s: %.3f s, producer saw full %llu times\n",
		      PC_RING, staged ? " (staged runs)" : "", secs, (unsigned long long)pc->full);
	ferry_ring_fini(&pc->r);
	free(pc);
}

static void test_two_threads(void **state)
{
	(void)state;
	two_threads(0);
}

static void test_two_threads_staged(void **state)
{
	(void)state;
	two_threads(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rejects_bad_sizes),
		cmocka_unit_test(test_init_capacity),
		cmocka_unit_test(test_fill_backpressure_fifo),
		cmocka_unit_test(test_get_burst),
		cmocka_unit_test(test_stage_publish),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_look_done),
		cmocka_unit_test(test_wraparound),
		cmocka_unit_test(test_two_threads),
		cmocka_unit_test(test_two_threads_staged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
