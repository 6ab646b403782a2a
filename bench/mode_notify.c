/* SPDX-License-Identifier: MIT */
/*
 * --notify: what a receiver waiting for "your blocks are there" sees.  A
 * turn WRITEs one request and queues a notification after it
 * (ferry_notify: delivered once the WRITE has landed); it is timed from the
 * submit until the target engine's ferry_notif_poll returns that
 * notification.  Both engines are in this process, so this thread polls
 * the receiver's queue itself.  The rows are --lat's; beside --lat (the
 * WRITE's own completion) they show what the notification adds.
 */
#include <errno.h>
#include <string.h>

#include "bench.h"

/* Whether the notification's slot (index 1) ended without being delivered
 * (its WRITE failed, or the receiver refused it): then nothing will come. */
static int notify_slot_failed(const struct bench_port *bp)
{
	struct ferry_req_status st;
	int rc = ferry_req_status(bp->batch, 1, &st);

	if (rc)
		return rc;
	if (st.state == FERRY_PENDING || st.state == FERRY_DONE)
		return 0;
	return st.error ? st.error : -EIO;
}

/* The notification of turn seq, polled for until it comes, its slot fails
 * or stall_ns passes; the WRITE moves meanwhile (ferry_batch_wait(b, 0)
 * runs the cores' passes under --caller, and only checks otherwise). */
static int notify_poll(struct bench_port *bp, uint64_t seq, uint64_t t0)
{
	struct bench *b = bp->b;
	struct ferry_notif got;
	unsigned spins = 0;
	int k;

	while ((k = ferry_notif_poll(b->target, &got, 1)) == 0) {
		if (ferry_batch_wait(bp->batch, 0) != -ETIMEDOUT && (k = notify_slot_failed(bp)))
			return k;
		if ((++spins & 4095) == 0 && now_ns() - t0 > b->stall_ns)
			return -ETIMEDOUT;
	}
	if (k < 0)
		return k;
	/* One port, one notification at a time: anything else is a lost or
	 * duplicated one. */
	if (got.len != sizeof(seq) || memcmp(got.msg, &seq, sizeof(seq)))
		return -EPROTO;
	return 0;
}

/* Whether the WRITE (index 0) ended DONE. */
static bool write_done(const struct bench_port *bp)
{
	struct ferry_req_status st;

	return ferry_req_status(bp->batch, 0, &st) == 0 && st.state == FERRY_DONE;
}

int notify_run(struct bench_port *bp, uint64_t n)
{
	uint64_t t0, t1, seq = n;
	bool wrote;
	int rc, wrc;

	t0 = now_ns();
	rc = port_submit(bp, bp->batch, 0, 1, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	rc = ferry_notify(bp->batch, bp->b->seg, &seq, sizeof(seq));
	if (rc < 0) { /* (a refused notification ends FAILED in its slot instead) */
		(void)batch_finish(bp, n, batch_wait(bp), 0); /* the WRITE is in flight */
		return port_stop(bp, n, "ferry_notify", rc);
	}
	rc = notify_poll(bp, seq, t0);
	t1 = now_ns();
	if (!rc) {
		bench_samples_add(&bp->lat, t1 - t0);
		bp->lat_ns += t1 - t0;
	}
	bp->batches++;
	/* The batch ends once the notification is delivered (or failed). */
	wrc = batch_wait(bp);
	if (wrc == -ETIMEDOUT)
		return batch_finish(bp, n, wrc, 0); /* still in flight: stops the port */
	wrote = write_done(bp);
	if (!rc)
		rc = notify_slot_failed(bp);
	wrc = batch_finish(bp, n, wrc, 0); /* counts the WRITE; the batch is reusable */
	/* A failed WRITE's notification is rightly never delivered: the
	 * WRITE's failure is what counts (and is reported). */
	if (wrc || !rc || !wrote)
		return wrc;
	return port_stop(bp, n, rc == -EPROTO ? "ferry_notif_poll (not this turn's message)"
					      : "the notification", rc);
}
