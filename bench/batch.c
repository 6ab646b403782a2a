/* SPDX-License-Identifier: MIT */
/*
 * What every mode does with a port's batches: submit (requests, or --prep's
 * prepared set by index), wait with stall detection (give up only when no
 * byte moved for stall_ns), check each request, report the failed ones
 * (the first few one by one), make the batch reusable, or stop the port
 * when it cannot be.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* Failed requests reported one by one per port; the rest are only counted. */
#define MAX_REPORTS 10

/* Request i of batch n did not end DONE with all its bytes: say so. */
static void req_failed(struct bench_port *bp, uint64_t n, uint32_t i,
		       const struct ferry_req_status *st)
{
	struct bench *b = bp->b;

	bp->failures++;
	if (bp->reported == MAX_REPORTS)
		fprintf(stderr, "ferry_bench: port %u: more failures, counted only\n", bp->idx);
	if (bp->reported++ >= MAX_REPORTS)
		return;
	fprintf(stderr,
		"ferry_bench: port %u %s %" PRIu64 " request %u: %s, error %d (%s), %" PRIu64
		" of %" PRIu64 " bytes\n",
		bp->idx, n == UINT64_MAX ? "read-back" : "batch", n == UINT64_MAX ? 0 : n, i,
		ferry_state_name(st->state), st->error, st->error ? strerror(-st->error) : "none",
		st->bytes, b->size);
	/* Only this thread hints, and only the first time: no race on the flag. */
	if (st->error == -EFAULT && b->cfg.mode == BENCH_INITIATOR && bp->idx == 0 &&
	    !b->efault_hinted) {
		b->efault_hinted = true;
		fprintf(stderr,
			"ferry_bench: hint: remote [0x%" PRIx64 ", +%" PRIu64
			") is not inside a region the target registered: give --remote-addr and a "
			"--buffer no larger than the target's (its first line says both)\n",
			b->remote_base, b->cfg.ports * b->per_port);
	}
}

/*
 * Request i of batch n seen ended: its status st, or the status call's
 * error rc.  Counts it; true when it ended DONE with all its bytes.
 */
bool req_count(struct bench_port *bp, uint64_t n, uint32_t i, int rc,
	       const struct ferry_req_status *st)
{
	struct ferry_req_status bad;

	if (rc) {
		bad = (struct ferry_req_status){ .state = FERRY_FAILED, .error = rc };
		req_failed(bp, n, i, &bad);
		return false;
	}
	if (st->state != FERRY_DONE || st->bytes != bp->b->size) {
		req_failed(bp, n, i, st);
		return false;
	}
	bp->ok++;
	return true;
}

/* Every request of the batch, once; lat_ns (0: none) is each DONE one's latency. */
static void batch_check(struct bench_port *bp, uint64_t n, uint64_t lat_ns)
{
	struct ferry_req_status st;
	uint32_t cnt = bp->b->nreq;

	for (uint32_t i = 0; i < cnt; i++) {
		int rc = ferry_req_status(bp->batch, i, &st);

		if (req_count(bp, n, i, rc, &st) && lat_ns)
			bench_samples_add(&bp->lat, lat_ns);
	}
}

/* Stop this port: the batch cannot be reused (or waited for) any more. */
int port_stop(struct bench_port *bp, uint64_t n, const char *call, int rc)
{
	fprintf(stderr, "ferry_bench: port %u batch %" PRIu64 ": %s: %s\n", bp->idx,
		n == UINT64_MAX ? 0 : n, call, strerror(-rc));
	bp->err = rc;
	return rc;
}

/*
 * After the wait: check, and make the batch reusable.  lat_ns (0: none):
 * the latency of each request that ended DONE, when the port saw them all
 * end at once (--status-once).
 */
int batch_finish(struct bench_port *bp, uint64_t n, int rc, uint64_t lat_ns)
{
	char what[160];

	if (rc == -ETIMEDOUT) {
		/* Requests are still in flight: the batch's memory must live on. */
		bp->stuck = true;
		batch_check(bp, n, 0);
		snprintf(what, sizeof(what),
			 "ferry_batch_wait (no progress for %.0f s, past the engine's timeout_ms %u: "
			 "requests still pending)",
			 (double)bp->b->stall_ns / 1e9, bp->b->iopts.timeout_ms);
		return port_stop(bp, n, what, rc);
	}
	if (rc && rc != -EIO)
		return port_stop(bp, n, "ferry_batch_wait", rc);
	batch_check(bp, n, lat_ns);
	rc = ferry_batch_reset(bp->batch);
	if (rc)
		return port_stop(bp, n, "ferry_batch_reset", rc);
	return 0;
}

/* Bytes the first n requests of batch b have moved so far. */
uint64_t batch_bytes(const struct ferry_batch *b, uint32_t n)
{
	struct ferry_req_status st;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < n; i++)
		if (!ferry_req_status(b, i, &st))
			sum += st.bytes;
	return sum;
}

/*
 * Wait for the whole batch.  A large batch on a slow NIC (128 x 1 MiB is
 * 10 s at Soft-RoCE's ~13 MB/s) may take longer than any fixed limit as a
 * whole: give up only when no byte moved for stall_ns.
 */
int batch_wait(struct bench_port *bp)
{
	uint64_t moved = 0, since = now_ns();

	for (;;) {
		int rc = ferry_batch_wait(bp->batch, 1000);
		uint64_t m;

		if (rc != -ETIMEDOUT)
			return rc;
		m = batch_bytes(bp->batch, bp->b->nreq);
		if (m != moved) {
			moved = m;
			since = now_ns();
		} else if (now_ns() - since >= bp->b->stall_ns) {
			return rc;
		}
	}
}

/*
 * No request ended for a while: are bytes still moving (m, against *moved
 * at *since)?  Give up after stall_ns without a byte.
 */
bool bytes_stalled(const struct bench_port *bp, uint64_t m, uint64_t now, uint64_t *moved,
		   uint64_t *since)
{
	if (m != *moved) {
		*moved = m;
		*since = now;
		return false;
	}
	return now - *since >= bp->b->stall_ns;
}

/* The same for the port's batch. */
bool batch_stalled(struct bench_port *bp, uint64_t now, uint64_t *moved, uint64_t *since)
{
	return bytes_stalled(bp, batch_bytes(bp->batch, bp->b->nreq), now, moved, since);
}

/*
 * Submit requests [first, first + n) of the port's set into batch: by
 * index with --prep (ferry_prep_submit waits for room on a full ring, as
 * ferry_submit does), else the requests; try: ferry_try_submit, which
 * takes what fits without waiting.  How many were taken, or -errno.
 */
int port_submit(struct bench_port *bp, struct ferry_batch *batch, uint32_t first, uint32_t n,
		bool try)
{
	int rc;

	if (bp->prep)
		rc = ferry_prep_submit(batch, bp->prep, bp->prep_idx + first, n);
	else if (try)
		return ferry_try_submit(batch, bp->reqs + first, n);
	else
		rc = ferry_submit(batch, bp->reqs + first, n);
	return rc < 0 ? rc : (int)n;
}

/* The call port_submit makes, for messages. */
const char *port_submit_call(const struct bench_port *bp, bool try)
{
	if (bp->prep)
		return "ferry_prep_submit";
	return try ? "ferry_try_submit" : "ferry_submit";
}

/*
 * --prep: this size's requests of every port prepared once (the main
 * thread, while the port threads do not run: a port is used by one thread
 * at a time), the last size's set freed.
 */
int ports_prep(struct bench *b)
{
	for (unsigned p = 0; b->cfg.prep && p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];
		int rc;

		if (bp->prep)
			ferry_prep_destroy(bp->prep);
		bp->prep = NULL;
		rc = ferry_prep_create(bp->port, b->seg, bp->reqs, b->nreq, &bp->prep);
		if (rc)
			return report("ferry_prep_create", rc);
	}
	return 0;
}
