/* SPDX-License-Identifier: MIT */
/*
 * --sync, batch-synchronous throughput (the default before requests were
 * kept in flight, mode_inflight.c): a port submits its whole batch, waits
 * for it and starts over.  While it waits it notes when each request is
 * seen ended, for the latency percentiles, looking at gaps that grow with
 * the time waited: a long batch is not polled millions of times, and the
 * last request is waited for in the library, whose wake-up is immediate.
 * --status-once reads no status while waiting: each request's once after
 * the wait (make callgrind counts the status reads).
 */
#include <errno.h>
#include <sched.h>
#include <time.h>

#include "bench.h"

/* pause_ns: yield, sleep above these. */
#define POLL_YIELD_NS 2000ull
#define POLL_SLEEP_NS 20000ull
#define POLL_MAX_NS 10000000ull
/* batch_poll: a batch where no request ended for this long is checked for progress. */
#define STALL_CHECK_NS 1000000000ull

/*
 * The requests of bp->open[0, nopen) seen ended now: each one's latency is
 * from the batch's submit (t0) to now.  The clock is read once, at the
 * first one found.  Returns how many are still open (kept at the front).
 */
static uint32_t batch_scan(struct bench_port *bp, uint64_t t0, uint32_t nopen)
{
	struct ferry_req_status st;
	uint32_t left = 0;
	uint64_t now = 0;

	for (uint32_t k = 0; k < nopen; k++) {
		uint32_t i = bp->open[k];

		if (!ferry_req_status(bp->batch, i, &st) && st.state == FERRY_PENDING) {
			bp->open[left++] = i;
			continue;
		}
		if (!now)
			now = now_ns();
		if (st.state == FERRY_DONE)
			bench_samples_add(&bp->lat, now - t0);
	}
	return left;
}

/*
 * Spin (short gaps), yield (longer) or sleep (long) for about gap ns: on a
 * shared host (and on Soft-RoCE, where the kernel moves the bytes) a
 * spinning port takes the CPU others need.
 */
void pause_ns(uint64_t gap)
{
	uint64_t until;
	struct timespec ts;

	if (gap > POLL_MAX_NS)
		gap = POLL_MAX_NS;
	if (gap >= POLL_SLEEP_NS) {
		ts.tv_sec = 0;
		ts.tv_nsec = (long)gap;
		nanosleep(&ts, NULL);
		return;
	}
	until = now_ns() + gap;
	do {
		if (gap >= POLL_YIELD_NS)
			sched_yield();
		else
			cpu_relax();
	} while (now_ns() < until);
}

/*
 * Wait between two looks at the requests: 1/32 of what the batch has
 * waited so far (poll_gap), so a latency is seen at most ~3 % late, while
 * a long request is not read (its cache line pulled away from the core
 * that updates it per slice) millions of times.
 */
static void poll_pause(uint64_t waited)
{
	pause_ns(poll_gap(waited));
}

/*
 * Wait for the batch, noting when each request is seen ended.  The last
 * one is waited for in ferry_batch_wait, whose wake-up is immediate: the
 * next batch never waits for a poll gap.
 */
static int batch_poll(struct bench_port *bp, uint64_t t0)
{
	uint32_t nopen = bp->b->nreq;
	uint64_t since = t0, moved = 0;
	int rc;

	for (uint32_t i = 0; i < nopen; i++)
		bp->open[i] = i;
	while (nopen > 1) {
		uint32_t left = batch_scan(bp, t0, nopen);
		uint64_t now = now_ns();

		if (left != nopen) {
			nopen = left;
			since = now;
			continue;
		}
		if (now - since >= STALL_CHECK_NS && batch_stalled(bp, now, &moved, &since))
			return -ETIMEDOUT;
		if (bp->b->cfg.caller && ferry_progress(bp->b->init) > 0)
			continue; /* --caller: our passes moved something, look again */
		poll_pause(now - t0);
	}
	rc = batch_wait(bp);
	if (nopen)
		batch_scan(bp, t0, nopen);
	return rc;
}

/* Batch n (UINT64_MAX: the --verify read-back, neither counted nor timed). */
int batch_run(struct bench_port *bp, uint64_t n)
{
	bool once = bp->b->cfg.status_once || n == UINT64_MAX;
	uint64_t t0 = now_ns(), ok = bp->ok, t = 0;
	int rc;

	rc = port_submit(bp, bp->batch, 0, bp->b->nreq, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	rc = once ? batch_wait(bp) : batch_poll(bp, t0);
	if (n != UINT64_MAX) {
		t = now_ns() - t0;
		bp->lat_ns += t;
		bp->batches++;
	}
	/* --status-once: every request is seen ended when the wait returns. */
	rc = batch_finish(bp, n, rc, bp->b->cfg.status_once ? t : 0);
	if (n == UINT64_MAX)
		bp->ok = ok;
	return rc;
}
