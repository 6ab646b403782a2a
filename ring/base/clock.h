/* SPDX-License-Identifier: MIT */
/*
 * Time.  The cores read the TSC (a few ns) rather than clock_gettime (~20 ns)
 * once per loop pass; its rate is measured once per process against
 * CLOCK_MONOTONIC.  Where there is no TSC the ticks are nanoseconds.
 */
#ifndef FERRY_BASE_CLOCK_H
#define FERRY_BASE_CLOCK_H

#include <stdint.h>

/* Clock ticks now (TSC). */
uint64_t ferry_tsc(void);
/* Ticks per second from ticks counted over ns nanoseconds; never 0 (none
 * counted reads as 10^9, the rate where there is no TSC). */
uint64_t ferry_tsc_rate(uint64_t ticks, uint64_t ns);
/* Ticks per second (measured once, ~5 ms, on the first call). */
uint64_t ferry_tsc_hz(void);
/* ticks as nanoseconds. */
uint64_t ferry_tsc_to_ns(uint64_t ticks);
/* ms as ticks. */
uint64_t ferry_ms_to_tsc(uint64_t ms);
/* CLOCK_MONOTONIC in ns. */
uint64_t ferry_now_ns(void);
/* CLOCK_MONOTONIC in ms. */
uint64_t ferry_now_ms(void);
/* Sleep at least us microseconds, signals or not (control paths only, never a core). */
void ferry_sleep_us(long us);

#endif /* FERRY_BASE_CLOCK_H */
