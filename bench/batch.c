/* SPDX-License-Identifier: MIT */
/*
 * What every mode does with a port's batch once it is submitted: wait for
 * it with stall detection (give up only when no byte moved for stall_ns),
 * check each request, report the failed ones (the first few one by one),
 * make the batch reusable, or stop the port when it cannot be.
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

static void batch_check(struct bench_port *bp, uint64_t n)
{
	struct ferry_req_status st;
	uint32_t cnt = bp->b->nreq;

	for (uint32_t i = 0; i < cnt; i++) {
		int rc = ferry_req_status(bp->batch, i, &st);

		if (rc) {
			st = (struct ferry_req_status){ .state = FERRY_FAILED, .error = rc };
			req_failed(bp, n, i, &st);
		} else if (st.state != FERRY_DONE || st.bytes != bp->b->size) {
			req_failed(bp, n, i, &st);
		} else {
			bp->ok++;
		}
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

/* After the wait: check, and make the batch reusable. */
int batch_finish(struct bench_port *bp, uint64_t n, int rc)
{
	char what[160];

	if (rc == -ETIMEDOUT) {
		/* Requests are still in flight: the batch's memory must live on. */
		bp->stuck = true;
		batch_check(bp, n);
		snprintf(what, sizeof(what),
			 "ferry_batch_wait (no progress for %.0f s, past the engine's timeout_ms %u: "
			 "requests still pending)",
			 (double)bp->b->stall_ns / 1e9, bp->b->iopts.timeout_ms);
		return port_stop(bp, n, what, rc);
	}
	if (rc && rc != -EIO)
		return port_stop(bp, n, "ferry_batch_wait", rc);
	batch_check(bp, n);
	rc = ferry_batch_reset(bp->batch);
	if (rc)
		return port_stop(bp, n, "ferry_batch_reset", rc);
	return 0;
}

/* Bytes the batch's requests have moved so far. */
static uint64_t batch_bytes(const struct bench_port *bp)
{
	struct ferry_req_status st;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < bp->b->nreq; i++)
		if (!ferry_req_status(bp->batch, i, &st))
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
		m = batch_bytes(bp);
		if (m != moved) {
			moved = m;
			since = now_ns();
		} else if (now_ns() - since >= bp->b->stall_ns) {
			return rc;
		}
	}
}

/* No request ended for a while: are bytes still moving?  Give up after stall_ns. */
bool batch_stalled(struct bench_port *bp, uint64_t now, uint64_t *moved, uint64_t *since)
{
	uint64_t m = batch_bytes(bp);

	if (m != *moved) {
		*moved = m;
		*since = now;
		return false;
	}
	return now - *since >= bp->b->stall_ns;
}
