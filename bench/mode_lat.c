/* SPDX-License-Identifier: MIT */
/*
 * --lat, latency like perftest's ib_write_lat: a port's turn is a single
 * request, timed from its submit to its end.  Its percentiles are summed
 * as in throughput runs (run.c) and printed in the --lat columns.
 */
#include <errno.h>

#include "bench.h"

/*
 * --lat: one request, busy-polled.  ferry_batch_wait(b, 0) only checks, so
 * this thread never sleeps in the library (perftest's busy poll); the clock
 * is read every 4096 checks for the stall_ns give-up.
 */
int lat_run(struct bench_port *bp, uint64_t n)
{
	uint64_t t0, t1;
	unsigned spins = 0;
	int rc;

	t0 = now_ns();
	rc = port_submit(bp, bp->batch, 0, 1, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	while ((rc = ferry_batch_wait(bp->batch, 0)) == -ETIMEDOUT) {
		if ((++spins & 4095) == 0 && now_ns() - t0 > bp->b->stall_ns)
			break;
	}
	t1 = now_ns();
	if (!rc) /* DONE, all of it: as in throughput runs, failures are only counted */
		bench_samples_add(&bp->lat, t1 - t0);
	bp->lat_ns += t1 - t0;
	bp->batches++;
	if (rc == -ETIMEDOUT)
		rc = batch_wait(bp); /* a large request may still be moving */
	return batch_finish(bp, n, rc, 0);
}
