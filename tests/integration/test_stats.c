/* SPDX-License-Identifier: MIT */
/*
 * Per-core counters: one writer (the core), any reader, no locks.  A reader
 * thread samples them while requests stream (TSan checks the access
 * pattern; monotonic counters must never go backwards), and afterwards they
 * add up: bytes, WRs posted = retired, doorbells <= WRs, an idle core sleeps.
 */
#include <pthread.h>

#include "tests/harness/harness.h"

static struct pair P;
static int stop_reader;

struct sample_check {
	unsigned backwards;
	unsigned samples;
};

static void *reader_main(void *arg)
{
	struct sample_check *chk = arg;
	struct ferry_core_stats prev[2] = { 0 }, cur;

	while (!__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE)) {
		for (unsigned i = 0; i < ferry_engine_cores(P.init); i++) {
			ferry_core_stats(P.init, i, &cur);
			chk->backwards += cur.wrs_posted < prev[i].wrs_posted ||
					  cur.completions < prev[i].completions ||
					  cur.bytes < prev[i].bytes || cur.polls < prev[i].polls ||
					  cur.loops < prev[i].loops;
			prev[i] = cur;
			chk->samples++;
		}
	}
	return NULL;
}

static uint64_t run_requests(unsigned rounds, uint64_t len)
{
	struct ferry_port *port;
	struct ferry_batch *b;
	uint64_t bytes = 0;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 8, &b), 0);
	for (unsigned r = 0; r < rounds; r++) {
		struct ferry_req reqs[8];

		for (unsigned i = 0; i < 8; i++)
			reqs[i] = mkreq(FERRY_OP_WRITE, P.lbuf + i * len, P.seg, P.rbuf + i * len, len);
		assert_int_equal(ferry_submit(b, reqs, 8), 0);
		assert_int_equal(ferry_batch_wait(b, 10000), 0);
		assert_int_equal(ferry_batch_reset(b), 0);
		bytes += 8 * len;
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return bytes;
}

static uint64_t lat_samples(const struct ferry_core_stats *s)
{
	uint64_t n = 0;

	for (unsigned k = 0; k < FERRY_LAT_BUCKETS; k++)
		n += s->lat[k];
	return n;
}

static void test_counters_add_up(void **state)
{
	struct sample_check chk = { 0 };
	struct ferry_core_stats before, after;
	pthread_t reader;
	uint64_t bytes;

	(void)state;
	engine_stats_sum(P.init, &before);
	__atomic_store_n(&stop_reader, 0, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(&reader, NULL, reader_main, &chk), 0);
	/* 200 KiB requests at the default 64 KiB slices: 3 slices each. */
	bytes = run_requests(200, 200 * 1024);
	__atomic_store_n(&stop_reader, 1, __ATOMIC_RELEASE);
	pthread_join(reader, NULL);
	wait_slices_zero(P.init);
	engine_stats_sum(P.init, &after);
	assert_int_equal(chk.backwards, 0);
	assert_true(chk.samples > 0);
	assert_int_equal(after.bytes - before.bytes, bytes);
	assert_int_equal(after.wrs_posted - before.wrs_posted, 200 * 8 * 3);
	assert_int_equal(after.completions - before.completions, 200 * 8 * 3);
	/* One latency sample per slice, though counted once per completion
	 * entry (the slices it retires share their post and end times). */
	assert_int_equal(lat_samples(&after) - lat_samples(&before), 200 * 8 * 3);
	/* Selective signalling: fewer CQEs than WRs, never more. */
	assert_true(after.cqes - before.cqes <= after.completions - before.completions);
	assert_true(after.doorbells - before.doorbells <= after.wrs_posted - before.wrs_posted);
	assert_true(after.polls >= after.empty_polls);
	assert_int_equal(after.wr_errors, 0);
	assert_int_equal(after.provider_errors, 0);
	assert_int_equal(after.slices_in_flight, 0);
}

/*
 * An idle core sleeps until it is kicked instead of spinning on a 2-CPU
 * box: once asleep it makes no loop pass until there is work.
 */
static void test_idle_core_sleeps(void **state)
{
	struct ferry_core *c = P.target->cores[0];
	struct timespec window = { 0, 50 * 1000 * 1000 };
	struct ferry_core_stats s0, s1;

	(void)state;
	/* The target's cores have had nothing to do since set-up: asleep. */
	WAIT_UNTIL(READ_ONCE(c->sleeping), WAIT_DEADLINE_MS, "idle target core 0 to sleep");
	assert_int_equal(ferry_core_stats(P.target, 0, &s0), 0);
	/* The window is the observation, not a bound: however long it lasts,
	 * an idle core asleep until kicked makes no loop pass in it (at most
	 * the one it was in, if something woke it). */
	nanosleep(&window, NULL);
	assert_int_equal(ferry_core_stats(P.target, 0, &s1), 0);
	print_message("idle core: %llu loop passes, %llu sleeps in the window\n",
		      (unsigned long long)(s1.loops - s0.loops),
		      (unsigned long long)(s1.sleeps - s0.sleeps));
	assert_true(s1.loops - s0.loops <= 2);
	assert_true(s1.sleeps >= 1);
	assert_int_equal(s1.cpu, 0);
}

/*
 * idle_linger_us: after work a core keeps polling that long before it
 * sleeps, then sleeps.  With a 1 s linger, the initiator's one core makes
 * loop passes and no sleep right after a request; once the second is over
 * it sleeps.  Only what a linger guarantees is asserted: if this thread
 * was held off past the linger, the first check proves nothing and is
 * skipped (said), never failed.
 */
static void test_linger_keeps_core_awake(void **state)
{
	struct timespec window = { 0, 20 * 1000 * 1000 };
	struct ferry_core_stats s0, s1;
	struct ferry_batch *b;
	struct ferry_port *p;
	struct ferry_opts io, to;
	struct ferry_req r;
	struct pair L;
	int64_t t0;

	(void)state;
	pair_opts(&io, "0");
	io.idle_linger_us = 1000000;
	pair_opts(&to, "1");
	pair_setup(&L, &io, &to, 1u << 20);
	assert_int_equal(ferry_port_create(L.init, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);
	r = mkreq(FERRY_OP_WRITE, L.lbuf, L.seg, L.rbuf, 4096);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, WAIT_DEADLINE_MS), 0);
	t0 = wait_now_ms();
	assert_int_equal(ferry_core_stats(L.init, 0, &s0), 0);
	nanosleep(&window, NULL);
	assert_int_equal(ferry_core_stats(L.init, 0, &s1), 0);
	if (wait_now_ms() - t0 < 500) {
		print_message("lingering core: %llu loop passes, %llu sleeps in the window\n",
			      (unsigned long long)(s1.loops - s0.loops),
			      (unsigned long long)(s1.sleeps - s0.sleeps));
		assert_int_equal(s1.sleeps, s0.sleeps);
		assert_true(s1.loops > s0.loops);
	} else {
		print_message("lingering core: this thread was held off past the linger: not checked\n");
	}
	/* The linger ends: the core goes to sleep. */
	WAIT_UNTIL(READ_ONCE(L.init->cores[0]->sleeping), WAIT_DEADLINE_MS,
		   "the core to sleep once its linger is over");
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	pair_teardown(&L);
}

/*
 * The hardware counters are read through a cache refreshed at most every
 * 100 ms by whichever reader finds it stale: two readers refreshing at once
 * (or one preempted between its read and its store) could store an older
 * value over a newer one, and a counter stepped back (a Prometheus reset).
 * Four readers sample both engines' cores while one request after another
 * keeps core 0 switching in and out.
 */
#define HW_READERS 4
#define HW_SECONDS 4

static void *hw_reader_main(void *arg)
{
	unsigned *backwards = arg;
	uint64_t prev[2][4] = { { 0 } };

	while (!__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE)) {
		for (unsigned i = 0; i < ferry_engine_cores(P.init); i++) {
			struct ferry_core_stats s;
			uint64_t v[4];

			assert_int_equal(ferry_core_stats(P.init, i, &s), 0);
			v[0] = s.cycles;
			v[1] = s.instructions;
			v[2] = s.cache_misses;
			v[3] = s.ctx_switches;
			for (unsigned k = 0; k < 4; k++) {
				if (v[k] == UINT64_MAX) /* not measured */
					continue;
				*backwards += v[k] < prev[i][k];
				prev[i][k] = v[k];
			}
		}
	}
	return NULL;
}

static void test_hw_counters_never_back(void **state)
{
	unsigned backwards[HW_READERS] = { 0 }, sum = 0;
	pthread_t readers[HW_READERS];
	struct ferry_port *port;
	struct timespec t0, t;

	(void)state;
	__atomic_store_n(&stop_reader, 0, __ATOMIC_RELEASE);
	for (unsigned r = 0; r < HW_READERS; r++)
		assert_int_equal(pthread_create(&readers[r], NULL, hw_reader_main, &backwards[r]), 0);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		assert_int_equal(run_one_on(port, mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, 64),
					    10000).state, FERRY_DONE);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < HW_SECONDS);
	assert_int_equal(ferry_port_destroy(port), 0);
	__atomic_store_n(&stop_reader, 1, __ATOMIC_RELEASE);
	for (unsigned r = 0; r < HW_READERS; r++) {
		pthread_join(readers[r], NULL);
		sum += backwards[r];
	}
	print_message("hardware counters stepped back %u times\n", sum);
	assert_int_equal(sum, 0);
}

static void test_stats_bad_args(void **state)
{
	struct ferry_core_stats s;

	(void)state;
	assert_int_equal(ferry_core_stats(NULL, 0, &s), -EINVAL);
	assert_int_equal(ferry_core_stats(P.init, 0, NULL), -EINVAL);
	assert_int_equal(ferry_core_stats(P.init, ferry_engine_cores(P.init), &s), -ERANGE);
}

/* The engine-wide counters (0.5): a caller's size decides what is
 * filled; a newer caller's fields past ours read 0, a size below 0.5's
 * struct is refused.  A fresh pair dropped and gave up no DISCONNECT. */
static void test_engine_stats(void **state)
{
	struct {
		struct ferry_engine_stats s;
		uint64_t later; /* a field of a newer header */
	} big;
	struct ferry_engine_stats s;

	(void)state;
	memset(&s, 0xff, sizeof(s));
	assert_int_equal(ferry_engine_stats(P.init, &s), 0);
	assert_int_equal(s.disconnects_dropped, 0);
	assert_int_equal(s.disconnects_given_up, 0);
	memset(&big, 0xff, sizeof(big));
	assert_int_equal(ferry_engine_stats_get(P.init, &big.s, sizeof(big)), 0);
	assert_int_equal(big.later, 0);
	assert_int_equal(big.s.disconnects_given_up, 0);
	assert_int_equal(ferry_engine_stats_get(P.init, &s, sizeof(s) - 1), -EINVAL);
	assert_int_equal(ferry_engine_stats(NULL, &s), -EINVAL);
	assert_int_equal(ferry_engine_stats(P.init, NULL), -EINVAL);
	assert_int_equal((ferry_engine_stats)(P.init, &s), 0); /* the exported symbol */
}

static int setup(void **state)
{
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	pair_setup(&P, &o, &o, 8u << 20);
	*state = &P;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_add_up),
		cmocka_unit_test(test_idle_core_sleeps),
		cmocka_unit_test(test_linger_keeps_core_awake),
		cmocka_unit_test(test_hw_counters_never_back),
		cmocka_unit_test(test_stats_bad_args),
		cmocka_unit_test(test_engine_stats),
	};

	return cmocka_run_group_tests(tests, setup, pair_group_teardown);
}
