/* SPDX-License-Identifier: MIT */
/*
 * What a call waited for, seen from inside instead of timed from outside:
 * a call given timeout_ms must never wait in poll() longer than that, and
 * ends -ETIMEDOUT only after a wait that ran out; a call that fails on a
 * refused connection waits nothing out at all.  That is what the call did,
 * whatever a loaded host made of the time it took.
 *
 * This header defines poll() for its test binary (include it in one file
 * only): ferry's calls (linked in from libferry.a) and the shared libraries
 * (libcurl, hiredis: it is exported to them) reach it, and it hands on to
 * the next one (libc's, or a sanitizer's).  It records for the thread that
 * called poll_watch() only: the servers' threads poll too.
 */
#ifndef FERRY_TESTS_POLLWATCH_H
#define FERRY_TESTS_POLLWATCH_H

#include <dlfcn.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "ring/base/atomics.h"

static __thread bool pollw_on;
static __thread int pollw_max_ms, pollw_ran_out;

__attribute__((visibility("default"))) int poll(struct pollfd *fds, nfds_t n, int timeout);
int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	static int (*real)(struct pollfd *, nfds_t, int);
	int (*fn)(struct pollfd *, nfds_t, int) = READ_ONCE(real);
	int rc;

	if (!fn) { /* every thread finds the same one: a race to store it is benign */
		*(void **)&fn = dlsym(RTLD_NEXT, "poll");
		WRITE_ONCE(real, fn);
	}
	rc = fn(fds, n, timeout);
	if (pollw_on) {
		if (timeout < 0 || timeout > pollw_max_ms)
			pollw_max_ms = timeout < 0 ? INT32_MAX : timeout; /* < 0: no limit */
		pollw_ran_out += rc == 0 && timeout > 0;
	}
	return rc;
}

/* Record this thread's waits from now on. */
static inline void poll_watch(void)
{
	pollw_max_ms = 0;
	pollw_ran_out = 0;
	pollw_on = true;
}

/* Stop recording: the longest wait asked for (ms) and how many ran out. */
static inline void poll_watched(int *max_ms, int *ran_out)
{
	pollw_on = false;
	*max_ms = pollw_max_ms;
	*ran_out = pollw_ran_out;
}

/* Stop recording; the waits kept to timeout_ms and one ran out (the call
 * waited for its deadline, it did not give up before it). */
#define poll_check_timed_out(timeout_ms)                                                  \
	do {                                                                              \
		int pc_max_, pc_out_;                                                     \
		poll_watched(&pc_max_, &pc_out_);                                         \
		if (pc_max_ > (timeout_ms) || pc_out_ < 1)                                \
			fail_msg("waits: longest %d ms (at most %d), %d ran out (at least 1)", \
				 pc_max_, (int)(timeout_ms), pc_out_);                    \
	} while (0)

#endif /* FERRY_TESTS_POLLWATCH_H */
