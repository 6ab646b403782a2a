/* SPDX-License-Identifier: MIT */
/*
 * Waiting in a test for something another thread makes happen (a core, the
 * control thread, the kernel): poll the condition every millisecond up to a
 * generous deadline and fail naming what was awaited.  The clock decides
 * only when to give up, never whether the test passes: a slow or loaded
 * machine makes a wait longer, it does not make the test fail.  A test
 * sleeps only where the sleep itself is what it observes, and says so.
 *
 * harness.h includes this; unit tests that need nothing else of the
 * harness include it alone.
 */
#ifndef FERRY_TESTS_WAIT_H
#define FERRY_TESTS_WAIT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <cmocka.h>

#define WAIT_POLL_NS 1000000 /* 1 ms: prompt enough, and leaves a 2-CPU box to the others */
/* The usual deadline: only a failing test waits it out, so it is generous
 * (TSan on a loaded 2-CPU machine is slow). */
#define WAIT_DEADLINE_MS 10000

static inline int64_t wait_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The condition of a WAIT_UNTIL was false: if it was already late when the
 * condition was evaluated, fail (at the caller's file and line); else sleep
 * until the next poll.
 */
static inline void __attribute__((format(printf, 5, 6)))
wait_tick(bool late, unsigned timeout_ms, const char *file, int line, const char *what, ...)
{
	char msg[256];
	va_list ap;

	if (!late) {
		nanosleep(&(struct timespec){ 0, WAIT_POLL_NS }, NULL);
		return;
	}
	va_start(ap, what);
	vsnprintf(msg, sizeof(msg), what, ap);
	va_end(ap);
	print_error("ERROR: timed out after %u ms waiting for %s\n", timeout_ms, msg);
	_fail(file, line);
}

/*
 * Evaluate cond until it holds; once timeout_ms have passed, fail the test
 * with "timed out after <timeout_ms> ms waiting for <what>" (what is a
 * printf format, its arguments follow).  The clock is read before cond:
 * the evaluation that fails the test is one made after the deadline, so a
 * thread preempted at the wrong moment cannot fail a condition that holds.
 */
#define WAIT_UNTIL(cond, timeout_ms, what, ...)                                          \
	do {                                                                             \
		unsigned wait_ms_ = (timeout_ms);                                        \
		int64_t wait_end_ = wait_now_ms() + wait_ms_;                            \
                                                                                         \
		for (;;) {                                                               \
			bool wait_late_ = wait_now_ms() >= wait_end_;                    \
                                                                                         \
			if (cond)                                                        \
				break;                                                   \
			wait_tick(wait_late_, wait_ms_, __FILE__, __LINE__, what,        \
				  ##__VA_ARGS__);                                        \
		}                                                                        \
	} while (0)

#endif /* FERRY_TESTS_WAIT_H */
