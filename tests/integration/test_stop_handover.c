/* SPDX-License-Identifier: MIT */
/*
 * A slice handed over (handover.c slice_handover) to a core that has
 * already stopped is ended by engine destroy, not left PENDING (found by
 * an audit; before, every request of the test stayed PENDING).  ferry_engine_destroy stops the cores one after the other
 * (engine.c), so between core_stop(0) and core_stop(1) core 1 can hand
 * slices to core 0 whose drain (core_drain_xfer_at_stop) already ran.
 * Here core 0 is stopped by hand (the state of that window) while core 1's
 * QPs stall (lost completions) and time out: its slices move to core 0.
 */
#include <stdlib.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/harness/held.h"

#define BUF (8u << 20)
#define REQS 8

static struct pair P;

static void test_handover_to_stopped_core(void **state)
{
	struct loop_faults lost = { .lost_ppm = 1000000, .seed = 3 };
	struct ferry_req reqs[REQS];
	struct ferry_port *port;
	struct ferry_batch *b;
	unsigned pending = 0;
	int rc;

	(void)state;
	assert_int_equal(ferry_engine_cores(P.init), 2);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, REQS, &b), 0);
	for (unsigned i = 0; i < REQS; i++)
		reqs[i] = mkreq(FERRY_OP_WRITE, P.lbuf + i * (BUF / REQS), P.seg,
				P.rbuf + i * (BUF / REQS), BUF / REQS);
	loop_set_faults(ferry_engine_nic(P.init, 1), &lost);
	assert_int_equal(ferry_submit(b, reqs, REQS), 0);
	usleep(50 * 1000); /* core 0 ends its parts; core 1's stall */
	core_stop(P.init->cores[0]);
	rc = ferry_batch_wait(b, 3000);
	for (unsigned i = 0; i < REQS; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		print_message("request %u: %s %d %llu bytes\n", i, ferry_state_name(st.state),
			      st.error, (unsigned long long)st.bytes);
		pending += st.state == FERRY_PENDING;
	}
	{
		struct ferry_core_stats st1;

		ferry_core_stats(P.init, 1, &st1);
		print_message("wait rc %d, %u pending; core 1 handed over %llu slices\n", rc,
			      pending, (unsigned long long)st1.handovers);
	}
	/* ferry_engine_destroy: "Requests still in flight end FAILED (-ECANCELED) first." */
	ferry_engine_destroy(P.init);
	pending = 0;
	for (unsigned i = 0; i < REQS; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		pending += st.state == FERRY_PENDING;
	}
	print_message("after ferry_engine_destroy: %u pending\n", pending);
	assert_int_equal(pending, 0);
	/* The batch outlived its engine (its port went with it): its memory
	 * only, as ferry_batch_destroy would free it. */
	free(b->rqs);
	free(b);
	ferry_engine_destroy(P.target);
	free(P.lbuf);
	free(P.rbuf);
}

/*
 * A slice refused back (handover.c xfer_refuse: TAG_REFUSED) still in its
 * owner's ring when the owner stops: core_drain_xfer_at_stop ends its bytes
 * -ECANCELED like a foreign slice's.  Core a's rail is cut off, so its
 * slice goes to b, whose pool is all lent out: b refuses it, and a stops
 * before a pass of its own reads the refusal (the test runs both cores'
 * steps, holding them; a's thread takes a back only to stop).  Before,
 * only a foreign slice was ended there: this one's request stayed PENDING.
 */
static void test_refused_in_ring_at_stop(void **state)
{
	struct ferry_req_status st;
	struct held h;

	(void)state;
	held_setup(&h, 0, 3);
	WRITE_ONCE(h.seg->rail_down[0], 1);
	held_all_lent(&h);
	core_drain_xfer(h.a); /* evacuated to b */
	core_drain_xfer(h.b); /* waits: b's pool is dry */
	core_drain_xfer(h.b); /* all lent: refused */
	assert_int_equal(ferry_ring_count(&h.a->xfer_in[1]), 1);
	held_restore(&h);
	core_stop_begin(h.a); /* set before a's thread can take a back */
	held_core_give(h.a);
	core_stop(h.a);
	held_core_give(h.b);
	held_wait(&h, &st);
	print_message("request: %s %d\n", ferry_state_name(st.state), st.error);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ECANCELED);
	/* a is stopped: no segment close (its endpoint's owner is gone); the
	 * batch outlives the engine, as above. */
	ferry_engine_destroy(h.q.init);
	free(h.batch->rqs);
	free(h.batch);
	ferry_engine_destroy(h.q.target);
	free(h.q.lbuf);
	free(h.q.rbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handover_to_stopped_core),
		cmocka_unit_test(test_refused_in_ring_at_stop),
	};
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.timeout_ms = 200;
	o.wrs_per_qp = 64;
	o.slice_size = 16384;
	pair_setup(&P, &o, &o, BUF);
	return cmocka_run_group_tests(tests, NULL, NULL); /* no teardown: the batch may be stuck */
}
