/* SPDX-License-Identifier: MIT */
/*
 * Throughput, the default mode: each port keeps --batch requests in flight
 * and resubmits them as they end, like perftest's -t depth.  A ferry batch
 * reuses its slots only once every request of it has ended
 * (ferry_batch_reset), so the N requests are split into sub-batches of
 * --refill K, each its own ferry batch: a sub-batch whose requests have
 * all been seen ended is reset and submitted again at once (K = 1: each
 * request is resubmitted as soon as it is seen ended; the default is N/4,
 * four rotating sub-batches: a core fed one request at a time costs about
 * twice as much per request, README "In flight").  ferry_try_submit never
 * waits: when a core's ring is full the rest of a sub-batch goes in on a
 * later pass, and meanwhile the port keeps noting the requests that end (a
 * waiting submit would make their latencies late).  A request's latency
 * runs from its own submit to the pass that sees it ended; a sub-batch is
 * looked at again after 1/32 of its age, as --sync looks at its batch.
 *
 * A "batch" of the rows here is a sub-batch's turn: batches counts them,
 * batch_us is the mean time from a sub-batch's reset to its last request
 * seen ended.
 */
#include <errno.h>
#include <stdlib.h>

#include "bench.h"

/* Nothing seen ended for this long: check that bytes still move. */
#define STALL_CHECK_NS 1000000000ull
/* A sub-batch whose reset was refused (-EBUSY) is tried again this soon
 * (pause_ns yields): the core drops its count a moment later. */
#define RESET_RETRY_NS 2000ull

struct flight {
	struct ferry_batch **sub;  /* nsub_max sub-batches of cfg.refill slots */
	uint32_t nsub_max;
	/* this size */
	uint32_t nsub, width;      /* sub-batches in use; requests in each (the last: fewer) */
	uint32_t *sent;            /* per sub-batch: submitted since its reset */
	uint32_t *open;            /* per sub-batch: submitted, not yet seen ended */
	uint64_t *turn_ns;         /* per sub-batch: its reset */
	uint64_t *look_ns;         /* per sub-batch: when to look at it again */
	uint64_t *sub_ns;          /* per request: its submit */
	uint8_t *live;             /* per request: submitted, not yet seen ended */
	uint64_t submitted, ended;
	uint64_t limit;            /* requests to submit at most (--iters rounds) */
	uint64_t quiet_ns;         /* since: nothing seen ended (and no byte moved) */
	uint64_t moved;            /* bytes at the last stall check */
};

int flight_setup(struct bench_port *bp)
{
	const struct bench_cfg *c = &bp->b->cfg;
	struct flight *f = calloc(1, sizeof(*f));
	int rc;

	if (!f)
		return report("in-flight state", -ENOMEM);
	bp->flight = f;
	f->nsub_max = (c->batch + c->refill - 1) / c->refill;
	f->sub = calloc(f->nsub_max, sizeof(*f->sub));
	f->sent = calloc(f->nsub_max, sizeof(*f->sent));
	f->open = calloc(f->nsub_max, sizeof(*f->open));
	f->turn_ns = calloc(f->nsub_max, sizeof(*f->turn_ns));
	f->look_ns = calloc(f->nsub_max, sizeof(*f->look_ns));
	f->sub_ns = calloc(c->batch, sizeof(*f->sub_ns));
	f->live = calloc(c->batch, sizeof(*f->live));
	if (!f->sub || !f->sent || !f->open || !f->turn_ns || !f->look_ns || !f->sub_ns || !f->live)
		return report("in-flight state", -ENOMEM);
	for (uint32_t g = 0; g < f->nsub_max; g++) {
		rc = ferry_batch_create(bp->port, c->refill, &f->sub[g]);
		if (rc)
			return report("ferry_batch_create (sub-batch)", rc);
	}
	return 0;
}

/* A sub-batch still busy (a port stopped early) is left to the engine, with the port. */
void flight_free(struct bench_port *bp)
{
	struct flight *f = bp->flight;

	if (!f)
		return;
	for (uint32_t g = 0; f->sub && g < f->nsub_max; g++)
		if (f->sub[g] && ferry_batch_destroy(f->sub[g]))
			bp->stuck = true;
	free(f->sub);
	free(f->sent);
	free(f->open);
	free(f->turn_ns);
	free(f->look_ns);
	free(f->sub_ns);
	free(f->live);
	free(f);
	bp->flight = NULL;
}

/* Requests of sub-batch g at this size, and its first. */
static uint32_t sub_count(const struct flight *f, uint32_t nreq, uint32_t g, uint32_t *first)
{
	*first = g * f->width;
	return nreq - *first < f->width ? nreq - *first : f->width;
}

/*
 * Reset sub-batch g after the last size's drain: its requests were all
 * seen ended, but a core may not have dropped its count yet (-EBUSY, see
 * sub_fill): wait for it, as long as a stalled batch is waited for.
 */
static int sub_reset_drained(struct bench_port *bp, uint32_t g)
{
	uint64_t t0 = now_ns();
	int rc;

	while ((rc = ferry_batch_reset(bp->flight->sub[g])) == -EBUSY &&
	       now_ns() - t0 < bp->b->stall_ns)
		pause_ns(RESET_RETRY_NS);
	return rc;
}

/* The first turn of a size: every sub-batch empty (the last size drained). */
static int flight_begin(struct bench_port *bp)
{
	struct bench *b = bp->b;
	struct flight *f = bp->flight;

	f->width = b->cfg.refill < b->nreq ? b->cfg.refill : b->nreq;
	f->nsub = (b->nreq + f->width - 1) / f->width;
	f->submitted = f->ended = f->moved = 0;
	/* --iters may be anything up to 2^64 - 1: a product that wrapped (to 0
	 * at 2^59 x 32) let nothing be submitted while the turns went on. */
	f->limit = UINT64_MAX;
	if (b->cfg.iters && b->cfg.iters <= UINT64_MAX / b->nreq)
		f->limit = b->cfg.iters * b->nreq;
	f->quiet_ns = now_ns();
	for (uint32_t g = 0; g < f->nsub; g++) {
		int rc = sub_reset_drained(bp, g);

		if (rc)
			return port_stop(bp, 0, "ferry_batch_reset", rc);
		f->sent[g] = f->open[g] = 0;
		f->turn_ns[g] = f->quiet_ns;
		f->look_ns[g] = 0;
	}
	return 0;
}

/*
 * Sub-batch g has room (a new turn once all its requests were seen ended,
 * or the rest of a turn that did not fit): submit what the limit allows.
 */
static int sub_fill(struct bench_port *bp, uint64_t n, uint32_t g)
{
	struct flight *f = bp->flight;
	uint32_t first, cnt = sub_count(f, bp->b->nreq, g, &first), want;
	uint64_t t;
	int k;

	if (f->sent[g] == cnt) {
		/*
		 * A request's status is final a moment before the core drops its
		 * count from the batch (rq_finish): -EBUSY in between, and for
		 * as long as that core is preempted there.  Next pass.
		 */
		k = ferry_batch_reset(f->sub[g]);
		if (k == -EBUSY)
			return 0;
		if (k)
			return port_stop(bp, n, "ferry_batch_reset", k);
		f->sent[g] = 0;
		f->turn_ns[g] = now_ns();
	}
	want = cnt - f->sent[g];
	if (f->limit - f->submitted < want)
		want = (uint32_t)(f->limit - f->submitted);
	if (!want)
		return 0;
	first += f->sent[g];
	t = now_ns();
	k = port_submit(bp, f->sub[g], first, want, true);
	if (k < 0)
		return port_stop(bp, n, port_submit_call(bp, true), k);
	for (uint32_t i = first; i < first + (uint32_t)k; i++) {
		f->sub_ns[i] = t;
		f->live[i] = 1;
	}
	f->sent[g] += (uint32_t)k;
	f->open[g] += (uint32_t)k;
	f->submitted += (uint32_t)k;
	return 0;
}

/*
 * The requests of sub-batch g seen ended now: counted, and the latency of
 * each DONE one from its submit (the clock is read once, at the first
 * found).  Returns how many.
 */
static uint32_t sub_scan(struct bench_port *bp, uint64_t n, uint32_t g)
{
	struct flight *f = bp->flight;
	uint32_t first, cnt = sub_count(f, bp->b->nreq, g, &first), seen = 0;
	struct ferry_req_status st;
	uint64_t now = 0;

	for (uint32_t i = first; i < first + f->sent[g]; i++) {
		int rc;

		if (!f->live[i])
			continue;
		rc = ferry_req_status(f->sub[g], i - first, &st);
		if (!rc && st.state == FERRY_PENDING)
			continue;
		if (!now)
			now = now_ns();
		f->live[i] = 0;
		seen++;
		if (req_count(bp, n, i, rc, &st))
			bench_samples_add(&bp->lat, now - f->sub_ns[i]);
	}
	f->open[g] -= seen;
	f->ended += seen;
	if (seen && !f->open[g] && f->sent[g] == cnt) {
		bp->batches++;
		bp->lat_ns += now - f->turn_ns[g];
	}
	return seen;
}

/* Bytes the requests in flight have moved so far (the stall check). */
static uint64_t flight_bytes(const struct bench_port *bp)
{
	const struct flight *f = bp->flight;
	uint64_t sum = 0;

	for (uint32_t g = 0; g < f->nsub; g++)
		if (f->open[g])
			sum += batch_bytes(f->sub[g], f->sent[g]);
	return sum;
}

/*
 * Submit more now?  Not when draining, past the limit, or (without --iters)
 * the deadline -- except for the first round: like --sync's first batch it
 * runs even when the thread starts past a tiny duration, else the row
 * would show nothing moved and the run still end well.
 */
static bool refill_ok(const struct bench_port *bp, uint64_t now, bool drain)
{
	const struct bench *b = bp->b;
	const struct flight *f = bp->flight;

	if (drain || f->submitted >= f->limit)
		return false;
	return b->cfg.iters || now < b->deadline_ns || f->submitted < b->nreq;
}

/*
 * Look at the sub-batches that are due, note what ended, refill what has
 * room; until `until` requests have ended, or nothing is in flight and
 * nothing may be submitted.  A pass that saw nothing end pauses until the
 * next sub-batch is due (pause_ns: spin, yield or sleep).
 */
static int pump(struct bench_port *bp, uint64_t n, uint64_t until, bool drain)
{
	struct flight *f = bp->flight;

	for (;;) {
		uint64_t now = now_ns(), next = UINT64_MAX;
		bool refill = refill_ok(bp, now, drain);
		uint32_t seen = 0;

		for (uint32_t g = 0; g < f->nsub; g++) {
			uint32_t first, cnt = sub_count(f, bp->b->nreq, g, &first);

			if (f->open[g] && now >= f->look_ns[g]) {
				seen += sub_scan(bp, n, g);
				/* poll_gap of its age: the lines a core is about to
				 * write are not read over and over. */
				f->look_ns[g] = now + poll_gap(now - f->turn_ns[g]);
			}
			if (refill && (f->sent[g] < cnt || !f->open[g]) && sub_fill(bp, n, g))
				return bp->err;
			if (f->open[g] && f->look_ns[g] < next)
				next = f->look_ns[g];
			/* Its reset was refused: nothing of it is open, yet it is due
			 * again at once (else, with no other sub-batch open, the pause
			 * below was POLL_MAX_NS, 10 ms of a run with nothing in flight). */
			if (refill && !f->open[g] && f->sent[g] == cnt && now + RESET_RETRY_NS < next)
				next = now + RESET_RETRY_NS;
		}
		if (seen)
			f->quiet_ns = now; /* before returning: the next turn's pauses start here */
		if (f->ended >= until || (f->submitted == f->ended && !refill))
			return 0;
		if (seen)
			continue;
		if (now - f->quiet_ns >= STALL_CHECK_NS &&
		    bytes_stalled(bp, flight_bytes(bp), now, &f->moved, &f->quiet_ns)) {
			bp->stuck = true; /* the sub-batches' memory must live on */
			return port_stop(bp, n, "in flight (no byte moved: requests still pending)",
					 -ETIMEDOUT);
		}
		if (bp->b->cfg.caller && ferry_progress(bp->b->init) > 0)
			continue; /* --caller: our passes moved something, look again */
		pause_ns(next > now ? next - now : 0);
	}
}

/* Turn n: until --batch more requests have been seen ended (a round, for --iters). */
int flight_run(struct bench_port *bp, uint64_t n)
{
	struct flight *f = bp->flight;

	if (n == 0 && flight_begin(bp))
		return bp->err;
	return pump(bp, n, f->ended + bp->b->nreq, false);
}

/* After the last turn (n - 1): the requests still in flight end, and count. */
int flight_drain(struct bench_port *bp, uint64_t n)
{
	if (bp->err)
		return bp->err;
	return pump(bp, n, UINT64_MAX, true);
}
