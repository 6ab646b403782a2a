/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's wake-up floor (bench/wakefloor.c, --idle's
 * "floor" row): it takes as many samples as asked, pinned or not, and
 * fails cleanly -- no hang, no thread left behind -- for a CPU the sleeper
 * cannot run on.  No timing is judged here: bench/ does that.  The
 * Makefile links tests with libferry.a only, so the files under test are
 * included.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/bench_util.c"
#include "bench/wakefloor.c"

static void samples_new(struct bench_samples *s)
{
	assert_int_equal(bench_samples_init(s, 64, 1), 0);
}

/* Unpinned: n samples, each a positive time. */
static void test_floor_counts(void **state)
{
	struct bench_samples s;

	(void)state;
	samples_new(&s);
	assert_int_equal(wake_floor_measure(-1, NULL, 5, 1, &s), 0);
	assert_int_equal(s.seen, 5);
	assert_true(s.min > 0);
	bench_samples_free(&s);
}

/* Pinned as --idle pins it: the sleeper on one CPU, the waker on the others. */
static void test_floor_pinned(void **state)
{
	cpu_set_t mine, rest;
	struct bench_samples s;
	int cpu = -1;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
		if (CPU_ISSET(i, &mine))
			cpu = i;
	rest = mine;
	if (CPU_COUNT(&mine) > 1)
		CPU_CLR(cpu, &rest);
	samples_new(&s);
	assert_int_equal(wake_floor_measure(cpu, &rest, 3, 1, &s), 0);
	assert_int_equal(s.seen, 3);
	bench_samples_free(&s);
}

/* No samples asked: none taken, both threads still started and stopped. */
static void test_floor_none(void **state)
{
	struct bench_samples s;

	(void)state;
	samples_new(&s);
	assert_int_equal(wake_floor_measure(-1, NULL, 0, 1, &s), 0);
	assert_int_equal(s.seen, 0);
	bench_samples_free(&s);
}

/* A sleeper CPU that does not exist: an error at once, nothing sampled. */
static void test_floor_bad_cpu(void **state)
{
	struct bench_samples s;

	(void)state;
	samples_new(&s);
	assert_true(wake_floor_measure(CPU_SETSIZE - 1, NULL, 3, 1, &s) < 0);
	assert_int_equal(s.seen, 0);
	bench_samples_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_floor_counts),
		cmocka_unit_test(test_floor_pinned),
		cmocka_unit_test(test_floor_none),
		cmocka_unit_test(test_floor_bad_cpu),
	};

	return cmocka_run_group_tests_name("wakefloor", tests, NULL, NULL);
}
