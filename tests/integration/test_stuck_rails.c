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

#define BUF (1u << 20)
#define SLICE 4096
#define CQES 16 /* a core's pool: 2 x CQES slices */

static struct pair P;

static void print_state(const char *what, int rc, const struct ferry_req_status *st)
{
	struct ferry_core_stats s0, s1;

	ferry_core_stats(P.init, 0, &s0);
	ferry_core_stats(P.init, 1, &s1);
	print_message("%s: wait %d, %s %d; handovers %llu + %llu, retries %llu + %llu, "
		      "QPs given up %llu + %llu\n", what, rc, ferry_state_name(st->state),
		      st->error, (unsigned long long)s0.handovers,
		      (unsigned long long)s1.handovers, (unsigned long long)s0.retries,
		      (unsigned long long)s1.retries, (unsigned long long)s0.qp_abandons,
		      (unsigned long long)s1.qp_abandons);
}

/* One request of n slices striped over both cores; its final state. */
static int run_one(const char *what, unsigned n)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, (uint64_t)n * SLICE);
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;
	int rc;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	rc = ferry_batch_wait(b, WAIT_DEADLINE_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	print_state(what, rc, &st);
	if (st.state == FERRY_PENDING)
		return st.state; /* the batch stays: its request is in flight */
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return st.state;
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
 * request stayed PENDING for good; now a slice that waited the slice
 * timeout there ends TIMEOUT (handover.c core_sweep_xfer_wait).
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
	};
	struct ferry_opts o;
	struct ferry_knobs k = { .abandon_ms = 30 };

	pair_opts(&o, "0-1");
	o.timeout_ms = 30;
	o.wrs_per_qp = CQES / 2;
	o.cqes = CQES;
	o.signal_every = 4;
	o.slice_size = SLICE;
	o.retries = 2;
	o.rail_pause_ms = 1;
	o.rail_pause_max_ms = 1;
	pair_setup_knobs(&P, &o, &o, BUF, &k);
	return cmocka_run_group_tests(tests, NULL, teardown);
}
