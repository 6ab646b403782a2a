/* SPDX-License-Identifier: MIT */
#include "ring/base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

static uint64_t tsc_hz;
static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;

uint64_t ferry_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ferry_tsc_rate(uint64_t ticks, uint64_t ns)
{
	/* 128-bit: ticks * 10^9 passes 2^64 once the calibration's 5 ms sleep
	 * took over ~6 s of a 3 GHz TSC (the process stopped, a VM paused). */
	uint64_t hz = (uint64_t)((unsigned __int128)ticks * 1000000000ull / (ns ? ns : 1));

	return hz ? hz : 1000000000ull;
}

#ifdef HAVE_TSC
static void tsc_calibrate(void)
{
	struct timespec pause = { 0, 5 * 1000 * 1000 };
	uint64_t t0 = ferry_now_ns(), c0 = __rdtsc();
	uint64_t t1, c1;

	nanosleep(&pause, NULL);
	t1 = ferry_now_ns();
	c1 = __rdtsc();
	tsc_hz = ferry_tsc_rate(c1 - c0, t1 - t0);
}

uint64_t ferry_tsc(void)
{
	return __rdtsc();
}
#else
static void tsc_calibrate(void)
{
	tsc_hz = 1000000000ull;
}

uint64_t ferry_tsc(void)
{
	return ferry_now_ns();
}
#endif

uint64_t ferry_tsc_hz(void)
{
	pthread_once(&tsc_once, tsc_calibrate);
	return tsc_hz;
}

uint64_t ferry_tsc_to_ns(uint64_t ticks)
{
	return (uint64_t)((unsigned __int128)ticks * 1000000000ull / ferry_tsc_hz());
}

uint64_t ferry_ms_to_tsc(uint64_t ms)
{
	return (uint64_t)((unsigned __int128)ms * ferry_tsc_hz() / 1000);
}

uint64_t ferry_now_ms(void)
{
	return ferry_now_ns() / 1000000;
}

void ferry_sleep_us(long us)
{
	struct timespec ts;

	/* To an absolute deadline, again after a signal: a caller that waits
	 * out a lease (cma's grace before memory may go) must not return
	 * early because a handler ran (nanosleep is never restarted). */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += us / 1000000;
	ts.tv_nsec += (us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}
