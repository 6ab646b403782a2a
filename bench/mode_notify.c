/* SPDX-License-Identifier: MIT */
/*
 * --notify: what a receiver waiting for "your blocks are there" sees.  A
 * turn WRITEs one request and queues a notification after it
 * (ferry_notify: delivered once the WRITE has landed); it is timed from the
 * submit until the target engine's ferry_notif_poll returns that
 * notification.  Both engines are in this process, so this thread polls
 * the receiver's queue itself.  The rows are --lat's; beside --lat (the
 * WRITE's own completion) they show what the notification adds.  With
 * --notifs K a turn queues K notifications after the WRITE and ends when
 * the last is polled (any order, each once): the report adds their rate.
 * With --peers P notification i goes to receiver i % P: receiver 0 is the
 * target (after the WRITE), the others follow no WRITE of theirs, so they
 * are ready at once: what telling several peers at a time costs (a prefill
 * node telling its decode nodes).
 */
#include <errno.h>
#include <string.h>

#include "bench.h"

/* One notification's message: its turn and its place in the turn. */
struct notify_msg {
	uint64_t turn;
	uint32_t i;
};

/* Whether a notification's slot (1..notifs) ended without being delivered
 * (its WRITE failed, or the receiver refused it): then it will not come. */
static int notify_slot_failed(const struct bench_port *bp)
{
	for (uint32_t i = 1; i <= bp->b->cfg.notifs; i++) {
		struct ferry_req_status st;
		int rc = ferry_req_status(bp->batch, i, &st);

		if (rc)
			return rc;
		if (st.state != FERRY_PENDING && st.state != FERRY_DONE)
			return st.error ? st.error : -EIO;
	}
	return 0;
}

/* One polled notification of turn `turn`: -EPROTO if it is not one of
 * this turn's or came twice (lost or duplicated), else 0. */
static int notify_check(const struct ferry_notif *got, uint64_t turn, uint8_t *seen,
			uint32_t notifs)
{
	struct notify_msg m;

	if (got->len != sizeof(m))
		return -EPROTO;
	memcpy(&m, got->msg, sizeof(m));
	if (m.turn != turn || m.i >= notifs || seen[m.i])
		return -EPROTO;
	seen[m.i] = 1;
	return 0;
}

/* The turn's notifications, polled for until all came, a slot fails or
 * stall_ns passes; the WRITE moves meanwhile (ferry_batch_wait(b, 0) runs
 * the cores' passes under --caller, and only checks otherwise). */
static int notify_poll(struct bench_port *bp, uint64_t turn, uint64_t t0, uint8_t *seen)
{
	struct bench *b = bp->b;
	uint32_t notifs = b->cfg.notifs, have = 0;
	struct ferry_notif got[16];
	unsigned spins = 0;
	int k, rc;

	memset(seen, 0, notifs);
	for (unsigned p = 0; have < notifs; p = p + 1 < b->cfg.peers ? p + 1 : 0) {
		k = ferry_notif_poll(b->fan[p], got, 16);
		if (k < 0)
			return k;
		for (int i = 0; i < k; i++) {
			rc = notify_check(&got[i], turn, seen, notifs);
			if (rc)
				return rc;
		}
		have += (uint32_t)k;
		if (k)
			continue;
		if (ferry_batch_wait(bp->batch, 0) != -ETIMEDOUT && (rc = notify_slot_failed(bp)))
			return rc;
		if ((++spins & 4095) == 0 && now_ns() - t0 > b->stall_ns)
			return -ETIMEDOUT;
	}
	return 0;
}

/* The turn's notifications, queued after the WRITE; 0 or ferry_notify's error. */
static int notify_queue(struct bench_port *bp, uint64_t turn)
{
	for (uint32_t i = 0; i < bp->b->cfg.notifs; i++) {
		struct notify_msg m = { .turn = turn, .i = i };
		int rc = ferry_notify(bp->batch, bp->b->fan_seg[i % bp->b->cfg.peers], &m, sizeof(m));

		if (rc < 0)
			return rc;
	}
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
	uint8_t seen[BENCH_MAX_NOTIFS];
	uint64_t t0, t1;
	bool wrote;
	int rc, wrc;

	t0 = now_ns();
	rc = port_submit(bp, bp->batch, 0, 1, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	rc = notify_queue(bp, n);
	if (rc < 0) { /* (a refused notification ends FAILED in its slot instead) */
		(void)batch_finish(bp, n, batch_wait(bp), 0); /* in flight: the WRITE, notifications */
		return port_stop(bp, n, "ferry_notify", rc);
	}
	rc = notify_poll(bp, n, t0, seen);
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
	return port_stop(bp, n, rc == -EPROTO ? "ferry_notif_poll (not this turn's, or twice)"
					      : "the notification", rc);
}
