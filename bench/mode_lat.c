/* SPDX-License-Identifier: MIT */
/*
 * --lat, latency like perftest's ib_read_lat: a port's turn is a single
 * request, timed from its submit to its end.  Its percentiles are summed
 * as in throughput runs (run.c) and printed in the --lat columns.
 *
 * The timed loop is as lean as perftest's: one clock read per request
 * (the stamp that sees request i ended is request i + 1's start, so a
 * sample is the difference of two stamps; the loop's overhead and the
 * batch's reset, perftest's CQE reap here, fall in the next sample, as in
 * perftest), and nothing a request can do without: ferry_batch_wait's 0
 * already says the request ended DONE, and the library ends a request
 * DONE only once every byte moved, so its status is read only when it did
 * not (batch_finish); the samples are added after a chunk of requests.
 * --idle keeps lat_run, a cold request timed on its own.
 */
#include <errno.h>

#include "bench.h"

/* Requests per timed chunk: their stamps live on the port thread's stack. */
#define LAT_CHUNK 1024

/* How a chunk of requests stopped. */
enum lat_end {
	LAT_OK,     /* every request DONE, the batch reset */
	LAT_SUBMIT, /* the submit failed: that request is not in the batch */
	LAT_WAIT,   /* the last request did not end DONE in time (or failed) */
	LAT_RESET,  /* the last request DONE, the batch not reusable */
};

/* One request into the port's batch: by index with --prep, else the request. */
static inline int lat_submit(struct bench_port *bp)
{
	if (bp->prep)
		return ferry_prep_submit(bp->batch, bp->prep, bp->prep_idx, 1);
	return ferry_submit(bp->batch, bp->reqs, 1);
}

/*
 * Busy-poll the batch until its request ends.  ferry_batch_wait(b, 0) only
 * checks, so this thread never sleeps in the library (perftest's busy
 * poll); the clock is read every 4096 checks for the stall_ns give-up
 * (then -ETIMEDOUT), measured from t0.
 */
static inline int lat_spin(struct bench_port *bp, uint64_t t0)
{
	unsigned spins = 0;
	int rc;

	while ((rc = ferry_batch_wait(bp->batch, 0)) == -ETIMEDOUT)
		if ((++spins & 4095) == 0 && now_ns() - t0 > bp->b->stall_ns)
			break;
	return rc;
}

/*
 * The timed loop: up to max requests one after the other, the first at
 * least, then until a stamp reaches stop_ns.  ts[i] is request i's submit,
 * ts[i + 1] the moment it was seen ended; *stamped: how many have both.
 * *rc: the error of the call that stopped the chunk (LAT_OK: 0).
 */
static enum lat_end lat_timed(struct bench_port *bp, uint64_t *ts, uint32_t max,
			      uint64_t stop_ns, uint32_t *stamped, int *rc)
{
	enum lat_end end = LAT_OK;
	uint32_t i = 0;

	ts[0] = now_ns();
	do {
		*rc = lat_submit(bp);
		if (*rc < 0) {
			end = LAT_SUBMIT;
			break;
		}
		*rc = lat_spin(bp, ts[i]);
		ts[++i] = now_ns();
		if (*rc) {
			end = LAT_WAIT;
			break;
		}
		*rc = ferry_batch_reset(bp->batch);
		if (*rc) {
			end = LAT_RESET;
			break;
		}
	} while (i < max && ts[i] < stop_ns);
	*stamped = i;
	return end;
}

/*
 * After the timed loop: request j's sample is ts[j + 1] - ts[j], kept for
 * the first done ones (they ended DONE); every stamped one is a turn.
 */
static void lat_fold(struct bench_port *bp, const uint64_t *ts, uint32_t stamped, uint32_t done)
{
	bench_samples_add_gaps(&bp->lat, ts, done);
	bp->lat_ns += ts[stamped] - ts[0]; /* the sum of every stamped one's sample */
	bp->ok += done;
	bp->batches += stamped;
}

/*
 * --lat from turn n: a chunk of requests, at most what --iters leaves, or
 * until the duration is over.  *turns: how many it ran.  0, or the error
 * that stopped the port.
 */
int lat_chunk(struct bench_port *bp, uint64_t n, uint64_t *turns)
{
	const struct bench_cfg *c = &bp->b->cfg;
	uint64_t ts[LAT_CHUNK + 1];
	uint64_t stop_ns = c->iters ? UINT64_MAX : bp->b->deadline_ns;
	uint32_t max = LAT_CHUNK, stamped;
	enum lat_end end;
	int rc;

	if (c->iters && c->iters - n < max)
		max = (uint32_t)(c->iters - n);
	end = lat_timed(bp, ts, max, stop_ns, &stamped, &rc);
	*turns = stamped;
	lat_fold(bp, ts, stamped, end == LAT_WAIT ? stamped - 1 : stamped);
	n += stamped;
	switch (end) {
	case LAT_OK:
		return 0;
	case LAT_SUBMIT:
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	case LAT_RESET:
		return port_stop(bp, n - 1, "ferry_batch_reset", rc);
	case LAT_WAIT:
		break;
	}
	if (rc == -ETIMEDOUT)
		rc = batch_wait(bp); /* a large request may still be moving */
	/* The request's status counts it, DONE late or failed, as lat_run does. */
	return batch_finish(bp, n - 1, rc, 0);
}

/*
 * --idle: one request, busy-polled, timed on its own (the first after an
 * idle gap has no earlier request to share a stamp with).
 */
int lat_run(struct bench_port *bp, uint64_t n)
{
	uint64_t t0, t1;
	int rc;

	t0 = now_ns();
	rc = port_submit(bp, bp->batch, 0, 1, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	rc = lat_spin(bp, t0);
	t1 = now_ns();
	if (!rc) /* DONE, all of it: as in throughput runs, failures are only counted */
		bench_samples_add(&bp->lat, t1 - t0);
	bp->lat_ns += t1 - t0;
	bp->batches++;
	if (rc == -ETIMEDOUT)
		rc = batch_wait(bp); /* a large request may still be moving */
	return batch_finish(bp, n, rc, 0);
}
