/* SPDX-License-Identifier: MIT */
/*
 * Per-thread perf counters.  What the kernel grants depends on the host (a
 * VM without a PMU refuses the hardware events, perf_event_paranoid may
 * refuse everything), so the tests check the contract either way: a counter
 * either reads and never goes backwards, or is -1, reads invalid, and `why`
 * names it.  The software context-switch counter needs no PMU, so where it
 * opens the tests also check that it counts the right thread.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/metrics/perf.h"

static volatile uint64_t sink;

/* Some user-mode instructions, then a sleep: one voluntary context switch. */
static void work_and_sleep(unsigned iters)
{
	struct timespec ts = { 0, 100 * 1000 };

	for (unsigned i = 0; i < iters; i++)
		sink += i * 7;
	nanosleep(&ts, NULL);
}

static void check_open_state(const struct perf_ctrs *p, int n)
{
	int open = 0;

	assert_true(n >= 0 && n <= PERF_CTR_N);
	assert_int_equal(p->ok, n);
	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		open += p->fd[i] >= 0;
		/* A counter that failed is named in why. */
		if (p->fd[i] < 0)
			assert_non_null(strstr(p->why, perf_ctr_name(i)));
	}
	assert_int_equal(open, n);
	if (n < PERF_CTR_N)
		assert_true(strlen(p->why) > 0);
	else
		assert_string_equal(p->why, "");
	print_message("perf: %d of %d counters open%s%s\n", n, PERF_CTR_N,
		      n < PERF_CTR_N ? "; " : "", p->why);
}

/* later >= earlier for every counter valid in both; returns those that grew. */
static unsigned check_monotonic(const uint64_t *a, const uint8_t *va, const uint64_t *b,
				const uint8_t *vb)
{
	unsigned grew = 0;

	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		if (!va[i] || !vb[i])
			continue;
		assert_true(b[i] >= a[i]);
		grew |= (b[i] > a[i]) << i;
	}
	return grew;
}

static void test_self(void **state)
{
	struct perf_ctrs p;
	uint64_t v0[PERF_CTR_N], v1[PERF_CTR_N];
	uint8_t ok0[PERF_CTR_N], ok1[PERF_CTR_N];
	unsigned grew;
	int n;

	(void)state;
	memset(&p, 0, sizeof(p));
	n = perf_open_self(&p);
	check_open_state(&p, n);
	perf_read(&p, v0, ok0);
	for (unsigned i = 0; i < 10; i++)
		work_and_sleep(100000);
	perf_read(&p, v1, ok1);
	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		assert_int_equal(ok0[i], p.fd[i] >= 0);
		assert_int_equal(ok1[i], p.fd[i] >= 0);
		if (!ok1[i])
			assert_int_equal(v1[i], 0);
	}
	grew = check_monotonic(v0, ok0, v1, ok1);
	if (ok1[PERF_CTR_INSTRUCTIONS])
		assert_true(grew & 1u << PERF_CTR_INSTRUCTIONS);
	if (ok1[PERF_CTR_CYCLES])
		assert_true(grew & 1u << PERF_CTR_CYCLES);
	if (ok1[PERF_CTR_CTX_SWITCHES])  /* ten sleeps */
		assert_true(v1[PERF_CTR_CTX_SWITCHES] - v0[PERF_CTR_CTX_SWITCHES] >= 10);
	perf_close(&p);
	perf_close(&p);
	perf_read(&p, v1, ok1);
	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		assert_int_equal(p.fd[i], -1);
		assert_int_equal(ok1[i], 0);
	}
}

/* A zeroed struct (a core that never started) has nothing open: not fd 0. */
static void test_zeroed(void **state)
{
	struct perf_ctrs p;
	uint64_t v[PERF_CTR_N];
	uint8_t ok[PERF_CTR_N];
	int fd0 = fcntl(0, F_GETFD);

	(void)state;
	memset(&p, 0, sizeof(p));
	perf_read(&p, v, ok);
	for (unsigned i = 0; i < PERF_CTR_N; i++)
		assert_int_equal(ok[i], 0);
	perf_close(&p);
	perf_close(&p);
	assert_int_equal(fcntl(0, F_GETFD) >= 0, fd0 >= 0);
}

/* The note says plainly whether the counters were tried and what failed. */
static void test_note(void **state)
{
	struct perf_ctrs p;
	char buf[256];

	(void)state;
	memset(&p, 0, sizeof(p));
	perf_note(&p, buf, sizeof(buf));
	assert_string_equal(buf, "not opened yet");
	perf_open_self(&p);
	perf_note(&p, buf, sizeof(buf));
	assert_true(buf[0] != 0);
	if (__atomic_load_n(&p.ok, __ATOMIC_ACQUIRE) == PERF_CTR_N)
		assert_string_equal(buf, "all counting");
	else
		assert_string_not_equal(buf, "all counting");
	perf_note(&p, buf, 4);
	assert_int_equal(strlen(buf), 3);
	perf_close(&p);
}

/* ---- a worker's counters read from the main thread ---- */

static struct perf_ctrs worker_ctrs;
static int worker_ready, worker_stop;

static void *worker_main(void *arg)
{
	(void)arg;
	perf_open_self(&worker_ctrs);
	__atomic_store_n(&worker_ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&worker_stop, __ATOMIC_ACQUIRE))
		work_and_sleep(1000);
	return NULL;
}

static void test_other_thread(void **state)
{
	uint64_t prev[PERF_CTR_N] = { 0 }, cur[PERF_CTR_N], mine[PERF_CTR_N], mine1[PERF_CTR_N];
	uint8_t pok[PERF_CTR_N] = { 0 }, cok[PERF_CTR_N], mok[PERF_CTR_N], mok1[PERF_CTR_N];
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	struct perf_ctrs self;
	uint64_t first_cs = 0;
	pthread_t w;

	(void)state;
	memset(&worker_ctrs, 0, sizeof(worker_ctrs));
	memset(&self, 0, sizeof(self));
	perf_open_self(&self);
	assert_int_equal(pthread_create(&w, NULL, worker_main, NULL), 0);
	/* Read from the start: before the worker has opened, nothing is valid. */
	while (!__atomic_load_n(&worker_ready, __ATOMIC_ACQUIRE))
		perf_read(&worker_ctrs, prev, pok);
	perf_read(&worker_ctrs, prev, pok);
	first_cs = prev[PERF_CTR_CTX_SWITCHES];
	perf_read(&self, mine, mok);
	for (unsigned r = 0; r < 20; r++) {
		nanosleep(&ts, NULL);
		perf_read(&worker_ctrs, cur, cok);
		for (unsigned i = 0; i < PERF_CTR_N; i++)
			assert_int_equal(cok[i], worker_ctrs.fd[i] >= 0);
		check_monotonic(prev, pok, cur, cok);
		memcpy(prev, cur, sizeof(cur));
		memcpy(pok, cok, sizeof(cok));
	}
	perf_read(&self, mine1, mok1);
	/*
	 * The worker slept hundreds of times in 40 ms; the main thread slept 20
	 * times: each counter counts its own thread.
	 */
	if (pok[PERF_CTR_CTX_SWITCHES]) {
		assert_true(prev[PERF_CTR_CTX_SWITCHES] - first_cs > 20);
		if (mok1[PERF_CTR_CTX_SWITCHES])
			assert_true(mine1[PERF_CTR_CTX_SWITCHES] - mine[PERF_CTR_CTX_SWITCHES] <
				    prev[PERF_CTR_CTX_SWITCHES] - first_cs);
	}
	__atomic_store_n(&worker_stop, 1, __ATOMIC_RELEASE);
	pthread_join(w, NULL);
	/* The worker is gone: reading its counters still must not fail badly. */
	perf_read(&worker_ctrs, cur, cok);
	check_monotonic(prev, pok, cur, cok);
	perf_close(&worker_ctrs);
	perf_close(&worker_ctrs);
	perf_close(&self);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_self),
		cmocka_unit_test(test_zeroed),
		cmocka_unit_test(test_note),
		cmocka_unit_test(test_other_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
