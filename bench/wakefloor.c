/* SPDX-License-Identifier: MIT */
/*
 * --idle's yardstick: what this machine itself charges for a cold start.
 * An idle core sleeps in poll(2) on its wake eventfd, pinned to its CPU;
 * a request wakes it with one eventfd write from the submitting thread.
 * Here a bare thread does the same -- pinned to the core's CPU, asleep in
 * poll(2) on an eventfd -- and a thread on the port CPUs writes it after
 * the same idle gap and waits until the sleeper says it runs: that is the
 * machine's wake-up, with no ferry in it.  On a host it takes a few
 * microseconds; in a VM whose vCPU halts when idle, the hypervisor's
 * wake-up of the vCPU can take ~100 us, and no engine whose pinned core
 * sleeps can start sooner.  cold - warm - this is ferry's own part.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define FLOOR_GIVE_UP_NS 1000000000ull /* a sleeper that never runs: give up */

struct wake_floor {
	int efd;
	int running;  /* atomic: the sleeper ran after the last write */
	int stop;     /* atomic: the sleeper leaves at its next wake-up */
	unsigned n, gap_ms;
	struct bench_samples *out;
	int rc;
};

static void *floor_sleeper(void *arg)
{
	struct wake_floor *w = arg;
	struct pollfd pfd = { .fd = w->efd, .events = POLLIN };
	eventfd_t v;

	for (;;) {
		poll(&pfd, 1, -1);
		eventfd_read(w->efd, &v); /* non-blocking: EAGAIN if woken for nothing */
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) /* pairs with: floor_stop */
			return NULL;
		/* pairs with: the acquire load in floor_one */
		__atomic_store_n(&w->running, 1, __ATOMIC_RELEASE);
	}
}

/* One sample: the gap, a write, the wait until the sleeper runs. */
static int floor_one(struct wake_floor *w)
{
	struct timespec gap = { 0, (long)w->gap_ms * 1000000L };
	uint64_t t0, t1;

	while (nanosleep(&gap, &gap))
		;
	__atomic_store_n(&w->running, 0, __ATOMIC_RELAXED); /* it went back to poll(2) in the gap */
	t0 = now_ns();
	if (eventfd_write(w->efd, 1))
		return -errno;
	/* pairs with: the release store in floor_sleeper */
	while (!__atomic_load_n(&w->running, __ATOMIC_ACQUIRE)) {
		t1 = now_ns();
		if (t1 - t0 > FLOOR_GIVE_UP_NS)
			return -ETIMEDOUT;
	}
	bench_samples_add(w->out, now_ns() - t0);
	return 0;
}

static void *floor_waker(void *arg)
{
	struct wake_floor *w = arg;

	for (unsigned i = 0; !w->rc && i < w->n; i++)
		w->rc = floor_one(w);
	return NULL;
}

static void floor_stop(struct wake_floor *w, pthread_t sleeper)
{
	/* pairs with: the acquire load in floor_sleeper */
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	eventfd_write(w->efd, 1);
	pthread_join(sleeper, NULL);
}

int wake_floor_measure(int sleeper_cpu, const cpu_set_t *waker_cpus, unsigned n, unsigned gap_ms,
		       struct bench_samples *out)
{
	struct wake_floor w = { .n = n, .gap_ms = gap_ms, .out = out };
	pthread_t sleeper, waker;
	cpu_set_t one;
	int rc;

	CPU_ZERO(&one);
	if (sleeper_cpu >= 0)
		CPU_SET(sleeper_cpu, &one);
	w.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w.efd < 0)
		return -errno;
	rc = bench_thread_on(&sleeper, floor_sleeper, &w, sleeper_cpu >= 0 ? &one : NULL);
	if (rc)
		goto out;
	rc = bench_thread_on(&waker, floor_waker, &w, waker_cpus);
	if (!rc) {
		pthread_join(waker, NULL);
		rc = w.rc;
	}
	floor_stop(&w, sleeper);
out:
	close(w.efd);
	return rc;
}
