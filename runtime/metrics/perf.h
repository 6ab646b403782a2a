/* SPDX-License-Identifier: MIT */
/*
 * Per-thread hardware counters with perf_event_open(2): a worker opens its
 * own at start-up (a system call, so never in the loop), and any thread
 * reads them with read(2) on the fds.  The kernel fetches the count itself
 * (an IPI to the worker's CPU if the worker is on it at that moment, about
 * a microsecond): the worker's code does nothing for a reader.
 *
 * Virtual machines often have no PMU and containers or
 * kernel.perf_event_paranoid may refuse: a counter that cannot be opened
 * stays -1, is reported invalid by perf_read, and `why` says which and why.
 */
#ifndef FERRY_RUNTIME_PERF_H
#define FERRY_RUNTIME_PERF_H

#include <stddef.h>
#include <stdint.h>

enum perf_ctr {
	PERF_CTR_CYCLES = 0,       /* user-mode CPU cycles */
	PERF_CTR_INSTRUCTIONS = 1, /* user-mode instructions retired */
	PERF_CTR_CACHE_MISSES = 2, /* user-mode last-level cache misses */
	PERF_CTR_CTX_SWITCHES = 3, /* context switches of the thread (software) */
	PERF_CTR_N = 4,
};

struct perf_ctrs {
	int fd[PERF_CTR_N];        /* -1: not counting */
	int ok;                    /* counters opened; published last (see perf.c) */
	int tried;                 /* perf_open_self finished: why is final */
	/* "" when all opened, else what failed and why; 192 so that the usual
	 * worst case (a VM without PMU, unprivileged) fits whole. */
	char why[192];
};

/*
 * Open the four counters for the calling thread (only it is counted, not
 * threads it creates later).  Returns how many opened (0..4); never fails
 * otherwise.  p must not be open already.  A reader on another thread may
 * call perf_read concurrently: it sees nothing until p is complete.
 */
int perf_open_self(struct perf_ctrs *p);

/*
 * Current counts (out[i]) and whether each is real (valid[i]; out[i] is 0
 * when not).  Raw counts: if the kernel had to multiplex the PMU they are
 * undercounts, never estimates, so they never go backwards.  Any thread,
 * also after the counted thread has exited.  A zeroed struct reads as
 * nothing open.
 */
void perf_read(const struct perf_ctrs *p, uint64_t out[PERF_CTR_N], uint8_t valid[PERF_CTR_N]);

/*
 * Close the counters.  Safe twice and on a zeroed struct (it closes nothing,
 * not fd 0).  Must not race with perf_read.
 */
void perf_close(struct perf_ctrs *p);

/* Copy why into buf once the owner tried to open (else "not started yet"). */
void perf_note(const struct perf_ctrs *p, char *buf, size_t len);

/* Short name of counter i ("cycles", ...), as in `why`. */
const char *perf_ctr_name(unsigned i);

#endif /* FERRY_RUNTIME_PERF_H */
