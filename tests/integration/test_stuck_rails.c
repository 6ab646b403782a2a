/* SPDX-License-Identifier: MIT */
/*
 * Both rails of a segment stuck, neither marked down: every request still
 * ends.  Both cores' devices die (loop's dead: no completion, no flush) but
 * new QPs can still be made, so the repair thread replaces the QPs given up
 * (core_watch_broken) and never marks a rail down; the CQ room those QPs
 * took stays lent (qpx_abandon), so nothing is posted again and slices
 * waiting on either rail move to the other after the slice timeout
 * (core.c core_sweep_stuck).
 */
#include <stdlib.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/harness/held.h"

#define BUF (1u << 20)
#define SLICE 4096
#define CQES 16 /* a core's pool: 2 x CQES slices */

static struct pair P;

static void print_state(struct pair *p, const char *what, int rc,
			const struct ferry_req_status *st)
{
	struct ferry_core_stats s0, s1;

	ferry_core_stats(p->init, 0, &s0);
	ferry_core_stats(p->init, 1, &s1);
	print_message("%s: wait %d, %s %d; handovers %llu + %llu, retries %llu + %llu, "
		      "QPs given up %llu + %llu\n", what, rc, ferry_state_name(st->state),
		      st->error, (unsigned long long)s0.handovers,
		      (unsigned long long)s1.handovers, (unsigned long long)s0.retries,
		      (unsigned long long)s1.retries, (unsigned long long)s0.qp_abandons,
		      (unsigned long long)s1.qp_abandons);
}

/* One request of n slices striped over both cores of p; its final state. */
static int run_on(struct pair *p, const char *what, unsigned n)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, p->lbuf, p->seg, p->rbuf, (uint64_t)n * SLICE);
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;
	int rc;

	assert_int_equal(ferry_port_create(p->init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	rc = ferry_batch_wait(b, WAIT_DEADLINE_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	print_state(p, what, rc, &st);
	if (st.state == FERRY_PENDING)
		return st.state; /* the batch stays: its request is in flight */
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return st.state;
}

static int run_one(const char *what, unsigned n)
{
	return run_on(&P, what, n);
}

/* Both devices die under a request: it times out, and the QPs given up
 * keep every entry of both CQs (a dead device never gives them back). */
static void kill_both_devices(void)
{
	static bool done;
	struct loop_faults dead = { .dead = 1, .seed = 3 };
	const struct ferry_seg *seg = seg_at(&P.init->segs, (uint32_t)P.seg - 1);

	if (done)
		return;
	done = true;
	loop_set_faults(ferry_engine_nic(P.init, 0), &dead);
	loop_set_faults(ferry_engine_nic(P.init, 1), &dead);
	assert_int_equal(run_one("devices die", 4 * CQES), FERRY_TIMEOUT);
	WAIT_UNTIL(!READ_ONCE(P.init->cores[0]->tx[0].cq_quota.max) &&
			   !READ_ONCE(P.init->cores[1]->tx[0].cq_quota.max),
		   WAIT_DEADLINE_MS, "both CQs' room to be lent to the QPs given up");
	assert_false(READ_ONCE(seg->rail_down[0]) || READ_ONCE(seg->rail_down[1]));
	usleep(5000); /* the rails' pauses (1 ms) run out: hand-overs go on */
}

/*
 * Each core's whole pool is handed to the other (a request of 4 x CQES
 * slices: 2 x CQES per core), where it waits in xfer_wait for a slice of
 * a pool that is all lent out.  Before, neither pool ever refilled: the
 * request stayed PENDING for good.  A slice that waited the slice timeout
 * there came to end TIMEOUT (handover.c core_sweep_xfer_wait); now, sooner,
 * a core whose slices are all lent sends the waiting ones home unserved
 * (xfer_refuse), where they end TIMEOUT once their retries are spent.
 */
static void test_pools_lent_to_each_other(void **state)
{
	(void)state;
	kill_both_devices();
	assert_int_equal(run_one("pools lent to each other", 4 * CQES), FERRY_TIMEOUT);
}

/*
 * A few slices per core, so that the other core's pool has room: each
 * hand-over (core_sweep_stuck) is served there at once, waits out the
 * slice timeout on that stuck rail too, and is handed back.  Before, that
 * hand-over counted no try: the slices went back and forth for good and
 * the request stayed PENDING; now it is a retry like slice_retry's, and
 * the request ends TIMEOUT once the slices are out of them.
 */
static void test_stuck_slices_do_not_bounce(void **state)
{
	(void)state;
	kill_both_devices();
	assert_int_equal(run_one("stuck slices bounce", 8), FERRY_TIMEOUT);
}

/* The suite's options: small pools (2 x CQES slices a core), short pauses. */
static void stuck_opts(struct ferry_opts *o, unsigned timeout_ms)
{
	pair_opts(o, "0-1");
	o->timeout_ms = timeout_ms;
	o->wrs_per_qp = CQES / 2;
	o->cqes = CQES;
	o->signal_every = 4;
	o->slice_size = SLICE;
	o->retries = 2;
	o->rail_pause_ms = 1;
	o->rail_pause_max_ms = 1;
}

/*
 * Timeouts off (timeout_ms 0): every WR of the initiator moves its QP to
 * the error state (the repair thread replaces the QPs), a slice retries
 * up to 20 times and rails do not pause.  Each core's slices fail, flush
 * and are handed to the other core, until both pools (2 x CQES slices)
 * are lent out whole, each waiting in the other core's xfer_wait.  Before,
 * nothing ended those waits: 32 + 32 slices waited, pools empty, the
 * request PENDING for good; now a core with every slice lent refuses them
 * (handover.c xfer_refuse), they retry at home, and the request ends
 * FAILED once their retries are out.
 */
static void test_pools_lent_without_timeouts(void **state)
{
	struct loop_faults fatal = { .qp_fatal_ppm = 1000000, .seed = 3 };
	struct ferry_core *c0, *c1;
	struct ferry_opts o;
	struct pair q;
	int st;

	(void)state;
	stuck_opts(&o, 0);
	o.retries = 20;
	o.rail_errors = 1000;
	pair_setup(&q, &o, &o, BUF);
	c0 = q.init->cores[0];
	c1 = q.init->cores[1];
	engine_set_faults(q.init, &fatal);
	st = run_on(&q, "pools lent, timeouts off", 4 * CQES);
	if (st == FERRY_PENDING) /* the cores' own fields: a hint, racy */
		print_message("xfer_wait %u + %u, pools' free slices %u + %u\n",
			      c0->xfer_wait.count, c1->xfer_wait.count, c0->pool.avail,
			      c1->pool.avail);
	assert_int_equal(st, FERRY_FAILED);
	engine_set_faults(q.init, &(struct loop_faults){ 0 });
	pair_teardown(&q);
}

#define HELD_RETRIES 3

/* Whether a's slice is still out: on a's rail, lent, or in a ring. */
static bool held_slice_out(const struct held *h)
{
	return core_ep(h->a, (uint32_t)h->q.seg - 1)->pending.count || h->a->slices_lent;
}

/*
 * The lockstep bounce (handover.c xfer_refused), timeouts off: core a's
 * rail is cut off (the repair thread's rail_down), so its slice is
 * evacuated to b; b's pool is all lent out, so b refuses it (xfer_refuse)
 * and it goes home to a, whose next pass evacuates it again.  The test runs
 * the two cores' hand-over steps one after the other, the lockstep that two
 * threads fall into only by chance.  Each refusal to a cut-off rail counts
 * a try (c42be7f), so the slice ends -ENOTCONN once out of them; before,
 * an evacuation counted none and the slice went round for good (here: still
 * out after 8 x (retries + 1) rounds, where about 3 make a try).
 */
static void test_refused_to_cut_off_rail_ends(void **state)
{
	struct ferry_req_status st;
	struct held h;
	unsigned rounds;

	(void)state;
	held_setup(&h, 0, HELD_RETRIES);
	WRITE_ONCE(h.seg->rail_down[0], 1);
	held_all_lent(&h);
	for (rounds = 0; rounds < 8 * (HELD_RETRIES + 1) && held_slice_out(&h); rounds++) {
		core_drain_xfer(h.a);
		core_drain_xfer(h.b);
	}
	print_message("a's slice %s after %u rounds\n",
		      held_slice_out(&h) ? "still out" : "ended", rounds);
	assert_false(held_slice_out(&h));
	assert_int_equal(h.b->xfer_wait.count, 0);
	held_release(&h, &st);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ENOTCONN);
	held_teardown(&h);
}

/*
 * core_sweep_xfer_wait's own case: a foreign slice waits in b's xfer_wait
 * because b's pool is dry, but b's slices are its own, out on its rail
 * (not lent: xfer_refuse does not apply), so none may come back for as
 * long as that rail is stuck.  The wait ends once the slice timeout has
 * passed (not at it): the slice -ETIMEDOUT, its original home to a's pool.
 * The time passes on b's pass clock, moved by the test.
 */
static void test_wait_on_dry_pool_times_out(void **state)
{
	struct ferry_req_status st;
	struct held h;
	uint64_t now0;

	(void)state;
	held_setup(&h, 1000, HELD_RETRIES);
	held_dry(&h);
	WRITE_ONCE(h.seg->rail_down[0], 1);
	core_drain_xfer(h.a); /* evacuated to b */
	WRITE_ONCE(h.seg->rail_down[0], 0);
	assert_int_equal(h.a->slices_lent, 1);
	core_drain_xfer(h.b);
	assert_int_equal(h.b->xfer_wait.count, 1);

	now0 = h.b->now;
	h.b->now += h.b->timeout_ticks; /* the slice timeout, not past it */
	core_sweep_xfer_wait(h.b);
	core_drain_xfer(h.b);
	assert_int_equal(h.b->xfer_wait.count, 1);
	h.b->now++;
	core_sweep_xfer_wait(h.b);
	assert_int_equal(h.b->xfer_wait.count, 0);
	h.b->now = now0; /* nothing kept the moved clock: b's next pass sets it */
	core_drain_xfer(h.a); /* the original back */
	assert_int_equal(h.a->slices_lent, 0);
	held_release(&h, &st);
	assert_int_equal(st.state, FERRY_TIMEOUT);
	assert_int_equal(st.error, -ETIMEDOUT);
	held_teardown(&h);
}

/* Every request ended (or the test failed first): the devices come back
 * for the segment's close and the engines' ends. */
static int teardown(void **state)
{
	(void)state;
	engine_set_faults(P.init, &(struct loop_faults){ 0 });
	pair_teardown(&P);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pools_lent_to_each_other),
		cmocka_unit_test(test_stuck_slices_do_not_bounce),
		cmocka_unit_test(test_pools_lent_without_timeouts),
		cmocka_unit_test(test_refused_to_cut_off_rail_ends),
		cmocka_unit_test(test_wait_on_dry_pool_times_out),
	};
	struct ferry_opts o;
	struct ferry_knobs k = { .abandon_ms = 30 };

	stuck_opts(&o, 30);
	pair_setup_knobs(&P, &o, &o, BUF, &k);
	return cmocka_run_group_tests(tests, NULL, teardown);
}
