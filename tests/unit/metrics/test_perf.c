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
#include "tests/harness/wait.h"

static volatile uint64_t sink;

/*
 * Some user-mode instructions, then a sleep: one voluntary context switch.
 * The sleep is what is measured, not a wait; its length does not matter
 * (any sleep blocks the thread once), and no test counts time.
 */
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

/* The main thread watching the worker's counters, and its own. */
struct watch {
	struct perf_ctrs self;
	uint64_t prev[PERF_CTR_N], mine0[PERF_CTR_N];
	uint8_t pok[PERF_CTR_N], mok0[PERF_CTR_N];
	uint64_t first_cs;
	unsigned samples;
};

/* Context switches of the worker, and of this thread, since the watch began. */
static uint64_t worker_cs(const struct watch *w)
{
	return w->prev[PERF_CTR_CTX_SWITCHES] - w->first_cs;
}

static uint64_t own_cs(const struct watch *w)
{
	uint64_t v[PERF_CTR_N];
	uint8_t ok[PERF_CTR_N];

	perf_read(&w->self, v, ok);
	if (!w->mok0[PERF_CTR_CTX_SWITCHES] || !ok[PERF_CTR_CTX_SWITCHES])
		return 0; /* not counted here: nothing to compare with */
	return v[PERF_CTR_CTX_SWITCHES] - w->mine0[PERF_CTR_CTX_SWITCHES];
}

/* Read the worker's counters: valid as they were opened, never backwards. */
static void look(struct watch *w)
{
	uint64_t cur[PERF_CTR_N];
	uint8_t cok[PERF_CTR_N];

	perf_read(&worker_ctrs, cur, cok);
	for (unsigned i = 0; i < PERF_CTR_N; i++)
		assert_int_equal(cok[i], worker_ctrs.fd[i] >= 0);
	check_monotonic(w->prev, w->pok, cur, cok);
	memcpy(w->prev, cur, sizeof(cur));
	memcpy(w->pok, cok, sizeof(cok));
	w->samples++;
}

/*
 * One look; true once the worker has switched more than 20 times and more
 * often than this thread, which sleeps once a poll while the worker sleeps
 * after every bit of work: each counter counts its own thread.  Without
 * the context-switch counter there is nothing to compare: 20 looks will do.
 */
static bool worker_outswitched_us(struct watch *w)
{
	look(w);
	if (!w->pok[PERF_CTR_CTX_SWITCHES])
		return w->samples >= 20;
	return worker_cs(w) > 20 && worker_cs(w) > own_cs(w);
}

static void test_other_thread(void **state)
{
	struct watch w;
	uint64_t cur[PERF_CTR_N];
	uint8_t cok[PERF_CTR_N];
	pthread_t th;

	(void)state;
	memset(&worker_ctrs, 0, sizeof(worker_ctrs));
	memset(&w, 0, sizeof(w));
	perf_open_self(&w.self);
	assert_int_equal(pthread_create(&th, NULL, worker_main, NULL), 0);
	/* Read from the start: before the worker has opened, nothing is valid. */
	while (!__atomic_load_n(&worker_ready, __ATOMIC_ACQUIRE))
		perf_read(&worker_ctrs, w.prev, w.pok);
	perf_read(&worker_ctrs, w.prev, w.pok);
	w.first_cs = w.prev[PERF_CTR_CTX_SWITCHES];
	perf_read(&w.self, w.mine0, w.mok0);
	WAIT_UNTIL(worker_outswitched_us(&w), WAIT_DEADLINE_MS,
		   "the worker's context switches to outnumber this thread's (%u looks)",
		   w.samples);
	print_message("worker: %llu context switches over %u looks\n",
		      (unsigned long long)worker_cs(&w), w.samples);
	__atomic_store_n(&worker_stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	/* The worker is gone: reading its counters still must not fail badly. */
	perf_read(&worker_ctrs, cur, cok);
	check_monotonic(w.prev, w.pok, cur, cok);
	perf_close(&worker_ctrs);
	perf_close(&worker_ctrs);
	perf_close(&w.self);
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
