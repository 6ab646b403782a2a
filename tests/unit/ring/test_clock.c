/* SPDX-License-Identifier: MIT */
/*
 * The clock's arithmetic (ring/base/clock.c): the TSC's rate from a
 * calibration's counts, also one that was held up for seconds (stopped,
 * descheduled, a VM paused) between its two reads, and the conversions
 * built on the measured rate.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ring/base/clock.h"

#define GHZ3 3000000000ull

/* The usual calibration: 5 ms of a 3 GHz TSC. */
static void test_rate(void **state)
{
	(void)state;
	assert_true(ferry_tsc_rate(15000000ull, 5000000ull) == GHZ3);
	assert_true(ferry_tsc_rate(0, 5000000ull) == 1000000000ull); /* never 0 */
	assert_true(ferry_tsc_rate(15000000ull, 0) != 0);            /* no division by 0 */
}

/*
 * The 5 ms sleep took 10 s: 3e10 ticks, and ticks * 10^9 is past 2^64
 * (at 3 GHz any stall over ~6 s is).  The rate is the same 3 GHz; a
 * wrapped product made it ~1.16 GHz, and every timeout of the process
 * (slices, leases, rail pauses: all in ticks) 2.6 times too short.
 */
static void test_rate_after_a_stall(void **state)
{
	(void)state;
	assert_true(ferry_tsc_rate(10 * GHZ3, 10000000000ull) == GHZ3);
	assert_true(ferry_tsc_rate(100 * GHZ3, 100000000000ull) == GHZ3);
}

/* The conversions agree with the measured rate. */
static void test_conversions(void **state)
{
	uint64_t hz = ferry_tsc_hz();

	(void)state;
	assert_true(hz != 0);
	assert_true(ferry_ms_to_tsc(1000) == hz);
	assert_true(ferry_tsc_to_ns(hz) == 1000000000ull);
	assert_true(ferry_tsc_to_ns(ferry_ms_to_tsc(3600ull * 1000)) / 1000000 >= 3599999);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rate),
		cmocka_unit_test(test_rate_after_a_stall),
		cmocka_unit_test(test_conversions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
