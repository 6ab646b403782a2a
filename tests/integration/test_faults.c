/* SPDX-License-Identifier: MIT */
/*
 * Fault injection on the software NIC: error completions, QPs going to the
 * error state and lost completions.  With retries (the default), failed
 * slices go again on another QP while the repair thread replaces the broken
 * ones, and every request ends DONE; without retries the errors reach the
 * requests' status.  Nothing hangs; every DONE request's bytes are right;
 * the accounting returns to zero.
 */
#include "tests/harness/harness.h"

#define BUF (32u << 20)
#define REQS 48

static struct pair P;

static int error_expected(int err)
{
	return err == -EHOSTUNREACH || err == -ECANCELED || err == -ENOTCONN ||
	       err == -ETIMEDOUT;
}

struct outcome {
	unsigned done, failed, timedout;
	int first_err; /* the first failed request's error: what a flake needs to say */
};

/* One round: REQS random requests in one batch, checked one by one. */
static void round_run(uint64_t *seed, struct outcome *out)
{
	struct ferry_req reqs[REQS];
	uint64_t seeds[REQS];
	struct ferry_port *port;
	struct ferry_batch *b;
	const size_t area = BUF / REQS;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, REQS, &b), 0);
	for (unsigned i = 0; i < REQS; i++) {
		uint64_t len = 1 + splitmix(seed) % area;
		enum ferry_op op = splitmix(seed) & 1 ? FERRY_OP_READ : FERRY_OP_WRITE;
		uint8_t *l = P.lbuf + i * area, *r = P.rbuf + i * area;

		seeds[i] = splitmix(seed);
		fill_pattern(op == FERRY_OP_WRITE ? l : r, len, seeds[i]);
		memset(op == FERRY_OP_WRITE ? r : l, 0, len);
		reqs[i] = mkreq(op, l, P.seg, r, len);
	}
	assert_int_equal(ferry_submit(b, reqs, REQS), 0);
	/* Must end: errors, flushes and timeouts all terminate requests. */
	int rc = ferry_batch_wait(b, 30000);
	assert_true(rc == 0 || rc == -EIO);
	for (unsigned i = 0; i < REQS; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		if (st.state == FERRY_DONE) {
			assert_int_equal(st.bytes, reqs[i].len);
			assert_memory_equal(reqs[i].local, (void *)(uintptr_t)reqs[i].remote,
					    reqs[i].len);
			out->done++;
		} else {
			assert_true(st.state == FERRY_FAILED || st.state == FERRY_TIMEOUT);
			if (!error_expected(st.error))
				fail_msg("request %u: unexpected error %d", i, st.error);
			assert_true(st.bytes < reqs[i].len);
			out->failed += st.state == FERRY_FAILED;
			if (!out->first_err)
				out->first_err = st.error;
			if (getenv("FAULTS_DEBUG"))
				print_message("request %u: %s %d, %llu of %llu bytes\n", i,
					      ferry_state_name(st.state), st.error,
					      (unsigned long long)st.bytes,
					      (unsigned long long)reqs[i].len);
			out->timedout += st.state == FERRY_TIMEOUT;
		}
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
}

static void rounds(const struct loop_faults *f, unsigned n, struct outcome *out)
{
	uint64_t seed = f->seed;

	engine_set_faults(P.init, f);
	for (unsigned r = 0; r < n; r++) {
		round_run(&seed, out);
		/* A fresh segment: new QPs for the next round. */
		assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
		assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.target), &P.seg), 0);
	}
	engine_set_faults(P.init, &(struct loop_faults){ 0 });
	assert_engine_quiet(P.init);
	wait_slices_zero(P.init);
}

/* 1 % of WRs fail: retries on the other QP and repaired QPs hide every one. */
static void test_error_completions(void **state)
{
	struct loop_faults f = { .err_ppm = 10000, .seed = 7 };
	struct ferry_core_stats sum;
	struct outcome o = { 0 };

	(void)state;
	rounds(&f, 8, &o);
	engine_stats_sum(P.init, &sum);
	print_message("done %u failed %u timeout %u (first error %d), %llu retries, %llu QPs "
		      "replaced\n", o.done, o.failed, o.timedout, o.first_err,
		      (unsigned long long)sum.retries,
		      (unsigned long long)sum.qp_resets);
	assert_int_equal(o.failed + o.timedout, 0);
	assert_true(sum.retries > 0);
	assert_true(sum.qp_resets > 0);
}

static void test_qp_fatal(void **state)
{
	struct loop_faults f = { .qp_fatal_ppm = 5000, .seed = 11 };
	struct outcome o = { 0 };

	(void)state;
	rounds(&f, 8, &o);
	print_message("done %u failed %u timeout %u (first error %d)\n", o.done, o.failed,
		      o.timedout, o.first_err);
	assert_int_equal(o.failed + o.timedout, 0);
}

/* One rail fails every WR: its slices are handed to the other core's rail,
 * the bad rail is paused, and every request still ends DONE. */
static void test_bad_rail_hands_over(void **state)
{
	struct loop_faults bad = { .err_ppm = 1000000, .seed = 21 };
	struct ferry_core_stats st0, st1;
	struct outcome o = { 0 };
	uint64_t seed = 99;

	(void)state;
	assert_int_equal(ferry_engine_cores(P.init), 2);
	loop_set_faults(ferry_engine_nic(P.init, 1), &bad);
	for (int r = 0; r < 4; r++)
		round_run(&seed, &o);
	loop_set_faults(ferry_engine_nic(P.init, 1), &(struct loop_faults){ 0 });
	ferry_core_stats(P.init, 0, &st0);
	ferry_core_stats(P.init, 1, &st1);
	print_message("done %u failed %u timeout %u (first error %d); core 1 handed over %llu "
		      "slices, paused %llu times, %llu retries; core 0 moved %llu bytes\n",
		      o.done, o.failed, o.timedout, o.first_err,
		      (unsigned long long)st1.handovers, (unsigned long long)st1.rail_pauses,
		      (unsigned long long)st1.retries, (unsigned long long)st0.bytes);
	assert_int_equal(o.failed + o.timedout, 0);
	assert_true(st1.handovers > 0);
	assert_true(st1.rail_pauses > 0);
	/* Healthy again: the rail comes back into use. */
	o = (struct outcome){ 0 };
	uint64_t before = st1.bytes;
	const struct ferry_seg *seg = seg_at(&P.init->segs, (uint32_t)P.seg - 1);

	/* The pause (it doubled while errors went on) runs out. */
	WAIT_UNTIL(!__atomic_load_n(&seg->rail_paused[1], __ATOMIC_RELAXED), WAIT_DEADLINE_MS,
		   "the pause of core 1's rail to run out");
	for (int r = 0; r < 2; r++)
		round_run(&seed, &o);
	ferry_core_stats(P.init, 1, &st1);
	assert_int_equal(o.failed + o.timedout, 0);
	assert_true(st1.bytes > before);
}

/* Without retries the injected errors reach the requests' status. */
static void test_no_retries(void **state)
{
	struct loop_faults f = { .err_ppm = 10000, .seed = 5 };
	struct outcome o = { 0 };
	struct pair saved = P;
	struct ferry_opts opt;

	(void)state;
	pair_opts(&opt, "0-1");
	opt.retries = 0;
	opt.slice_size = 16384;
	pair_setup(&P, &opt, &opt, BUF);
	rounds(&f, 4, &o);
	print_message("done %u failed %u timeout %u\n", o.done, o.failed, o.timedout);
	assert_true(o.failed > 0);
	assert_true(o.done > 0);
	pair_teardown(&P);
	P = saved;
}

/* Every completion lost: the slice timeout ends the requests TIMEOUT, and
 * while they are pending the batch and the memory are busy. */
static void test_lost_completions(void **state)
{
	struct loop_faults f = { .lost_ppm = 1000000, .seed = 3 };
	struct ferry_req r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, 300000);
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;

	(void)state;
	engine_set_faults(P.init, &f);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, 0), -ETIMEDOUT);
	assert_int_equal(ferry_batch_destroy(b), -EBUSY);
	assert_int_equal(ferry_batch_reset(b), -EBUSY);
	assert_int_equal(ferry_mem_unregister(P.init, P.lbuf), -EBUSY);
	ferry_req_status(b, 0, &st);
	assert_int_equal(st.state, FERRY_PENDING);
	assert_int_equal(ferry_batch_wait(b, 20000), -EIO);
	ferry_req_status(b, 0, &st);
	assert_int_equal(st.state, FERRY_TIMEOUT);
	assert_int_equal(st.error, -ETIMEDOUT);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	engine_set_faults(P.init, &(struct loop_faults){ 0 });
	assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.target), &P.seg), 0);
	assert_engine_quiet(P.init);
}

/* Closing a segment while its requests are in flight lets them end first. */
static void test_close_in_flight(void **state)
{
	struct ferry_req reqs[8];
	struct ferry_port *port;
	struct ferry_batch *b;

	(void)state;
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 8, &b), 0);
	for (unsigned i = 0; i < 8; i++)
		reqs[i] = mkreq(FERRY_OP_WRITE, P.lbuf + i * (BUF / 8), P.seg, P.rbuf + i * (BUF / 8),
				BUF / 8);
	assert_int_equal(ferry_submit(b, reqs, 8), 0);
	assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
	assert_int_equal(ferry_batch_wait(b, 0), 0); /* all ended before close returned */
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.target), &P.seg), 0);
}

static uint64_t core_stat_qp_resets(struct ferry_engine *e, unsigned core)
{
	struct ferry_core_stats st;

	assert_int_equal(ferry_core_stats(e, core, &st), 0);
	return st.qp_resets;
}

/*
 * Core 1's device dies: every WR breaks its QP and no new QP can be made.
 * Its rail must not hold work: the repair thread marks it down when it
 * cannot make a QP, the slices waiting there move to core 0's rail (or end
 * after the slice timeout), and every request ends DONE.  When the device
 * comes back, the QPs are replaced -- even though the repair thread had
 * dropped the failed jobs (its queue of retries is 0 here): the core asks
 * again.
 */
static void test_dead_device(void **state)
{
	struct loop_faults dead = { .qp_fatal_ppm = 1000000, .no_new_qps = 1, .seed = 5 };
	const struct ferry_seg *seg = seg_at(&P.init->segs, (uint32_t)P.seg - 1);
	struct outcome o = { 0 };
	uint64_t seed = 123, resets;

	(void)state;
	WRITE_ONCE(P.init->repair.later_max, 0); /* every failed repair is dropped */
	loop_set_faults(ferry_engine_nic(P.init, 1), &dead);
	for (int r = 0; r < 3; r++)
		round_run(&seed, &o);
	print_message("dead device on core 1: done %u failed %u timeout %u; rail down %u\n",
		      o.done, o.failed, o.timedout, READ_ONCE(seg->rail_down[1]));
	assert_int_equal(o.failed + o.timedout, 0);
	assert_true(READ_ONCE(seg->rail_down[1]));
	/* The device is back: the core asks again and the rail is repaired. */
	resets = core_stat_qp_resets(P.init, 1);
	loop_set_faults(ferry_engine_nic(P.init, 1), NULL);
	WAIT_UNTIL(core_stat_qp_resets(P.init, 1) > resets && !READ_ONCE(seg->rail_down[1]),
		   WAIT_DEADLINE_MS, "core 1's QPs to be replaced after the device came back");
	WRITE_ONCE(P.init->repair.later_max, REPAIR_LATER_MAX);
	o = (struct outcome){ 0 };
	round_run(&seed, &o);
	assert_int_equal(o.failed + o.timedout, 0);
}

static uint64_t core_nic_events(struct ferry_engine *e, unsigned core)
{
	struct ferry_core_stats st;

	assert_int_equal(ferry_core_stats(e, core, &st), 0);
	return st.nic_events;
}

/*
 * Device events: core 1's port goes down -- its rails are down at once
 * (not after a timeout) and the work moves to core 0; the port comes back
 * -- the rail is used again; a QP fails by itself -- it is replaced.
 */
static void test_nic_events(void **state)
{
	const struct ferry_seg *seg = seg_at(&P.init->segs, (uint32_t)P.seg - 1);
	struct nic_event down = { .kind = NIC_EV_PORT_DOWN }, up = { .kind = NIC_EV_PORT_UP };
	struct ferry_core *c0 = P.init->cores[0];
	struct outcome o = { 0 };
	uint64_t seed = 321, resets;
	struct nic_event fatal;

	(void)state;
	assert_int_equal(loop_inject_event(ferry_engine_nic(P.init, 1), &down), 0);
	WAIT_UNTIL(READ_ONCE(seg->rail_down[1]), WAIT_DEADLINE_MS,
		   "core 1's rail to go down on its port's event");
	assert_true(core_nic_events(P.init, 1) >= 1);
	round_run(&seed, &o);
	assert_int_equal(o.failed + o.timedout, 0);
	assert_int_equal(loop_inject_event(ferry_engine_nic(P.init, 1), &up), 0);
	WAIT_UNTIL(!READ_ONCE(seg->rail_down[1]), WAIT_DEADLINE_MS,
		   "core 1's rail to come back on its port's event");
	/* A QP of core 0 fails by itself: its core fails it, the repair
	 * thread replaces it. */
	resets = core_stat_qp_resets(P.init, 0);
	fatal = (struct nic_event){ .kind = NIC_EV_QP_FATAL };
	for (uint32_t i = 0; i < c0->tx[0].n_qps; i++) {
		if (c0->tx[0].qps[i]) { /* read racily: the core is idle now */
			fatal.qp_num = c0->tx[0].prov->qp_num(c0->tx[0].qps[i]->nqp);
			break;
		}
	}
	assert_int_not_equal(fatal.qp_num, 0);
	assert_int_equal(loop_inject_event(ferry_engine_nic(P.init, 0), &fatal), 0);
	WAIT_UNTIL(core_stat_qp_resets(P.init, 0) > resets, WAIT_DEADLINE_MS,
		   "core 0's failed QP to be replaced");
	round_run(&seed, &o);
	assert_int_equal(o.failed + o.timedout, 0);
}

/* A loop address's context id (its bytes 4..7, little endian: loop.c). */
static uint32_t loop_addr_id(const struct nic_addr *a)
{
	return (uint32_t)a->bytes[4] | (uint32_t)a->bytes[5] << 8 | (uint32_t)a->bytes[6] << 16 |
	       (uint32_t)a->bytes[7] << 24;
}

/*
 * The target's NIC changes its address (as a port whose IB LID or RoCE GID
 * changed) after we fetched its descriptor; then a QP of ours breaks.  Its
 * repair must connect the new QP to the address the target has now, not
 * to the one cached at open (a QP there reaches nobody).
 */
static void test_target_readdressed(void **state)
{
	const struct ferry_seg *seg = seg_at(&P.init->segs, (uint32_t)P.seg - 1);
	struct ferry_ep *ep = seg->eps[0];
	const struct nic_provider *prov = P.init->cores[0]->tx[0].prov;
	struct nic *ours = ferry_engine_nic(P.init, 0), *tnic;
	struct nic_event fatal = { .kind = NIC_EV_QP_FATAL };
	struct nic_addr then, now;
	uint64_t resets;

	(void)state;
	assert_non_null(ep);
	assert_int_equal(P.target->ntx, 1); /* its NIC k is its core k's */
	tnic = ferry_engine_nic(P.target, ep->remote_nic);
	prov->addr(tnic, &then);
	assert_true(loop_qps_connected_to(ours, loop_addr_id(&then)) >= ep->nqps);
	loop_readdress(tnic);
	prov->addr(tnic, &now);
	assert_int_not_equal(loop_addr_id(&now), loop_addr_id(&then));

	resets = core_stat_qp_resets(P.init, 0);
	fatal.qp_num = prov->qp_num(ep->qps[0]->nqp); /* read racily: the core is idle */
	assert_int_equal(loop_inject_event(ours, &fatal), 0);
	WAIT_UNTIL(core_stat_qp_resets(P.init, 0) > resets, WAIT_DEADLINE_MS,
		   "core 0's failed QP to be replaced");
	/* The new QP goes to the target's NIC as it is now. */
	assert_int_equal(loop_qps_connected_to(ours, loop_addr_id(&now)), 1);

	/* The other QPs still have the old address: a fresh segment. */
	assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.target), &P.seg), 0);
}

/* An initiator on cores 0-1 whose cache holds one endpoint per core, and
 * two targets on core 1; lbuf registered at the initiator, rbuf at t[0]. */
struct evict_pair {
	struct ferry_engine *in, *t[2];
	uint8_t *lbuf, *rbuf;
	size_t len;
};

static void evict_pair_up(struct evict_pair *x, size_t len)
{
	struct ferry_opts o;

	x->len = len;
	x->lbuf = aligned_alloc(4096, len);
	x->rbuf = aligned_alloc(4096, len);
	assert_true(x->lbuf && x->rbuf);
	pair_opts(&o, "0-1");
	o.ep_cache = 1;
	o.timeout_ms = 200;
	assert_int_equal(ferry_engine_create(&o, &x->in), 0);
	pair_opts(&o, "1");
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_engine_create(&o, &x->t[i]), 0);
	assert_int_equal(ferry_mem_register(x->in, x->lbuf, len), 0);
	assert_int_equal(ferry_mem_register(x->t[0], x->rbuf, len), 0);
}

static void evict_pair_down(struct evict_pair *x)
{
	wait_slices_zero(x->in);
	assert_int_equal(ferry_mem_unregister(x->in, x->lbuf), 0);
	assert_int_equal(ferry_mem_unregister(x->t[0], x->rbuf), 0);
	ferry_engine_destroy(x->in);
	for (int i = 0; i < 2; i++)
		ferry_engine_destroy(x->t[i]);
	free(x->lbuf);
	free(x->rbuf);
}

/*
 * As test_target_readdressed, for an endpoint the cache evicted: the
 * target's NIC changes its address while we hold no endpoint to it, then
 * a request to it reconnects it (a miss: both cores' endpoints, in one
 * round trip).  The reconnect's QPs must go to the address the target has
 * now, not to the one cached at open (there the target's keys are gone:
 * the WRITE fails, and only repairs, one QP at a time, would reach it).
 */
static void test_evicted_target_readdressed(void **state)
{
	struct evict_pair x;
	struct ferry_port *port;
	struct ferry_req_status st;
	struct nic_addr then, now;
	ferry_seg_t seg[2];
	struct nic *tnic;
	const struct nic_provider *prov;
	const struct ferry_seg *s;
	uint32_t round;

	(void)state;
	evict_pair_up(&x, 1u << 16);
	prov = x.in->cores[0]->tx[0].prov;
	tnic = ferry_engine_nic(x.t[0], 0);
	assert_int_equal(ferry_segment_open(x.in, ferry_engine_address(x.t[0]), &seg[0]), 0);
	assert_int_equal(ferry_segment_open(x.in, ferry_engine_address(x.t[1]), &seg[1]), 0);
	s = seg_at(&x.in->segs, (uint32_t)seg[0] - 1);
	assert_true(!s->eps[0] && !s->eps[1]); /* evicted by the second open */
	prov->addr(tnic, &then);
	loop_readdress(tnic);
	prov->addr(tnic, &now);
	assert_int_not_equal(loop_addr_id(&now), loop_addr_id(&then));

	fill_pattern(x.lbuf, x.len, 77);
	memset(x.rbuf, 0, x.len);
	assert_int_equal(ferry_port_create(x.in, &port), 0);
	round = load_acquire(s->connect_round);
	st = run_one_on(port, mkreq(FERRY_OP_WRITE, x.lbuf, seg[0], x.rbuf, x.len), 10000);
	if (st.state != FERRY_DONE)
		fail_msg("WRITE after the reconnect: %s %d", ferry_state_name(st.state), st.error);
	assert_memory_equal(x.lbuf, x.rbuf, x.len);
	/* The request may go on once its own core's endpoint is in, before
	 * the other's; pairs with: fetch_add_release in reconnect_done. */
	WAIT_UNTIL(load_acquire(s->connect_round) != round, WAIT_DEADLINE_MS,
		   "the reconnect to end");
	/* Every QP the reconnect made, on both cores, goes to the target's
	 * NIC as it is now, none had to be repaired; the segment keeps that
	 * address for its next handshakes. */
	for (unsigned c = 0; c < 2; c++) {
		assert_non_null(s->eps[c]);
		assert_int_equal(loop_qps_connected_to(ferry_engine_nic(x.in, c),
						       loop_addr_id(&now)), s->eps[c]->nqps);
		assert_int_equal(core_stat_qp_resets(x.in, c), 0);
		assert_int_equal(loop_addr_id(&s->desc->nics[s->eps[c]->remote_nic].addr),
				 loop_addr_id(&now));
	}

	assert_int_equal(ferry_port_destroy(port), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_segment_close(x.in, seg[i]), 0);
	evict_pair_down(&x);
}

static int setup(void **state)
{
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.timeout_ms = 200;
	o.wrs_per_qp = 64; /* several QPs' worth of depth per round */
	o.slice_size = 16384;
	pair_setup(&P, &o, &o, BUF);
	*state = &P;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_completions),
		cmocka_unit_test(test_qp_fatal),
		cmocka_unit_test(test_bad_rail_hands_over),
		cmocka_unit_test(test_no_retries),
		cmocka_unit_test(test_lost_completions),
		cmocka_unit_test(test_close_in_flight),
		cmocka_unit_test(test_dead_device),
		cmocka_unit_test(test_nic_events),
		cmocka_unit_test(test_target_readdressed),
		cmocka_unit_test(test_evicted_target_readdressed),
	};

	if (getenv("FERRY_TEST_ONLY")) /* one test by name (a pattern) */
		cmocka_set_test_filter(getenv("FERRY_TEST_ONLY"));
	return cmocka_run_group_tests(tests, setup, pair_group_teardown);
}
