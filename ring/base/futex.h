/* SPDX-License-Identifier: MIT */
/*
 * Futex wait and wake on a 32-bit word: an application thread sleeps in
 * ferry_batch_wait on its batch's pending count, and the core that ends the
 * last request wakes it.  Process-private.
 */
#ifndef FERRY_BASE_FUTEX_H
#define FERRY_BASE_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Wake every thread sleeping on word. */
static inline void ferry_futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleep while *word == val, at most timeout_ns (< 0: no limit); 0 or -1 (errno). */
static inline int ferry_futex_wait(uint32_t *word, uint32_t val, int64_t timeout_ns)
{
	struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };

	return (int)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val,
			    timeout_ns >= 0 ? &ts : NULL, NULL, 0);
}

#endif /* FERRY_BASE_FUTEX_H */
