/* SPDX-License-Identifier: MIT */
/*
 * Two cores whose hand-over steps the test runs itself, one core after the
 * other in the order it picks: the lockstep that two threads never keep by
 * themselves (a bounce between two cores that only such a lockstep shows
 * had no test).  The engine runs under FERRY_IDLE_CALLER, where who runs a
 * core's pass is one word (runtime/core/drive.c); the test takes it as a
 * caller would and keeps it, so each core's thread only naps until it is
 * given back.  Nothing is sampled from a clock: a wait that a slice
 * timeout ends is ended by moving the core's pass clock (c->now).
 */
#ifndef FERRY_TESTS_HELD_H
#define FERRY_TESTS_HELD_H

#include <sched.h>
#include <stdlib.h>

#include "tests/harness/harness.h"

/* drive.c's DRIVER_FREE and DRIVER_CALLER (its enum is its own). */
#define HELD_FREE 0u
#define HELD_CALLER 2u

#define HELD_SLICE 4096
#define HELD_CQES 16 /* a core's pool: 2 x HELD_CQES slices */

struct held {
	struct pair q;
	struct ferry_core *a, *b; /* a: the core whose rail is cut off */
	struct ferry_seg *seg;
	struct ferry_port *port;
	struct ferry_batch *batch;  /* one request, one slice on each core */
	struct slice **stash;       /* b's free slices, taken while its pool is dry */
	uint32_t stashed;
};

static inline void held_core_take(struct ferry_core *c)
{
	uint32_t v = HELD_FREE;

	/* pairs with: xchg_release in core_thread_lets_go (the thread's last pass) */
	while (!cas_acquire(c->driver, &v, HELD_CALLER)) {
		v = HELD_FREE;
		sched_yield();
	}
}

static inline void held_core_give(struct ferry_core *c)
{
	/* pairs with: cas_acquire in core_thread_drives, core_thread_takes_back */
	store_release(c->driver, HELD_FREE);
}

/*
 * An engine pair under caller mode (2 cores, small pools); both of the
 * initiator's cores held, and one request of two slices submitted and cut:
 * one slice waits on each core's rail, nothing posted.
 */
static inline void held_setup(struct held *h, unsigned timeout_ms, unsigned retries)
{
	struct ferry_batch *w;
	struct ferry_req r;
	struct ferry_opts o;

	memset(h, 0, sizeof(*h));
	pair_opts(&o, "0-1");
	o.idle = FERRY_IDLE_CALLER;
	o.timeout_ms = timeout_ms;
	o.retries = retries;
	o.cqes = HELD_CQES;
	o.wrs_per_qp = HELD_CQES / 2;
	o.signal_every = 4;
	o.slice_size = HELD_SLICE;
	pair_setup(&h->q, &o, &o, 1u << 20);
	h->a = h->q.init->cores[0];
	h->b = h->q.init->cores[1];
	h->seg = seg_at(&h->q.init->segs, (uint32_t)h->q.seg - 1);
	/* A transfer first: both cores' endpoints are attached. */
	assert_int_equal(ferry_port_create(h->q.init, &h->port), 0);
	assert_int_equal(ferry_batch_create(h->port, 1, &w), 0);
	r = mkreq(FERRY_OP_WRITE, h->q.lbuf, h->q.seg, h->q.rbuf, 2 * HELD_SLICE);
	assert_int_equal(ferry_submit(w, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(w, WAIT_DEADLINE_MS), 0);
	assert_int_equal(ferry_batch_destroy(w), 0);
	assert_int_equal(ferry_batch_create(h->port, 1, &h->batch), 0);

	held_core_take(h->a);
	held_core_take(h->b);
	assert_int_equal(ferry_submit(h->batch, &r, 1), 0);
	for (struct ferry_core *c = h->a; c; c = c == h->a ? h->b : NULL) {
		core_drain_ports(c);
		core_cut(c);
		assert_int_equal(core_ep(c, (uint32_t)h->q.seg - 1)->pending.count, 1);
	}
}

/* b's pool dry: its free slices taken out (b keeps none to serve with). */
static inline void held_dry(struct held *h)
{
	struct slice *s;

	h->stash = calloc(h->b->pool.size, sizeof(*h->stash));
	assert_non_null(h->stash);
	while ((s = slice_get(&h->b->pool)))
		h->stash[h->stashed++] = s;
}

/* ... and every slice of it lent out (xfer_refuse's case). */
static inline void held_all_lent(struct held *h)
{
	held_dry(h);
	h->b->slices_lent = h->b->pool.size;
}

/* b's pool back as it was, a's rail no longer cut off. */
static inline void held_restore(struct held *h)
{
	while (h->stashed)
		slice_put(&h->b->pool, h->stash[--h->stashed]);
	free(h->stash);
	h->stash = NULL;
	h->b->slices_lent = 0;
	WRITE_ONCE(h->seg->rail_down[0], 0);
}

/* The request's end once b runs again (a given back or stopped first). */
static inline void held_wait(struct held *h, struct ferry_req_status *st)
{
	/* A hang guard only (it ends in milliseconds): 0, or -EIO if it failed. */
	assert_int_not_equal(ferry_batch_wait(h->batch, WAIT_DEADLINE_MS), -ETIMEDOUT);
	assert_int_equal(ferry_req_status(h->batch, 0, st), 0);
}

/* b's pool back, the cores given back: the request ends. */
static inline void held_release(struct held *h, struct ferry_req_status *st)
{
	held_restore(h);
	held_core_give(h->a);
	held_core_give(h->b);
	held_wait(h, st);
}

static inline void held_teardown(struct held *h)
{
	assert_int_equal(ferry_batch_destroy(h->batch), 0);
	assert_int_equal(ferry_port_destroy(h->port), 0);
	pair_teardown(&h->q);
}

#endif /* FERRY_TESTS_HELD_H */
