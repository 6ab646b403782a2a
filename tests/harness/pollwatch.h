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
static __thread int64_t pollw_out_ms; /* the timeouts of the waits that ran out, summed */

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
		if (rc == 0 && timeout > 0) {
			pollw_ran_out++;
			pollw_out_ms += timeout;
		}
	}
	return rc;
}

/* Record this thread's waits from now on. */
static inline void poll_watch(void)
{
	pollw_max_ms = 0;
	pollw_ran_out = 0;
	pollw_out_ms = 0;
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

/* poll_check_timed_out for a call with one deadline, timeout_ms from its
 * start: also the waits that ran out add up to no more than that.  Each
 * wait kept to timeout_ms is not enough: a call that waited its timeout
 * out and then again (a retry, a deadline taken afresh) kept each wait
 * short and still took twice as long.  A wait that ran out lasted at least
 * its timeout, so their sum is a floor of the time the call waited. */
#define poll_check_deadline(timeout_ms)                                                   \
	do {                                                                              \
		int64_t pd_out_ = pollw_out_ms;                                           \
		poll_check_timed_out(timeout_ms);                                         \
		if (pd_out_ > (timeout_ms))                                               \
			fail_msg("waits that ran out: %lld ms in all (at most %d)",        \
				 (long long)pd_out_, (int)(timeout_ms));                  \
	} while (0)

#endif /* FERRY_TESTS_POLLWATCH_H */
