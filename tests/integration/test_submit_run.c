/* SPDX-License-Identifier: MIT */
/*
 * ferry_submit checks the requests after a run's first more briefly (the
 * segment, regions and rails it looked up for the first are shared): every
 * kind of bad request must still be refused there, with its own error,
 * without holding on to a reference, while the good ones around it go on.
 */
#include <unistd.h>

#include "runtime/engine/engine.h"
#include "runtime/submit/dispatch.h"
#include "tests/harness/harness.h"

#define BUF (4u << 20)

static struct pair P;

static int setup(void **state)
{
	return pair_group_setup_port(&P, "0", BUF, state);
}

/* reqs[0..n) in a new batch, waited for: the wait's result is want. */
static struct ferry_batch *submit_wait(const struct ferry_req *reqs, uint32_t n, int want)
{
	struct ferry_batch *b;

	assert_int_equal(ferry_batch_create(P.port, n, &b), 0);
	assert_int_equal(ferry_submit(b, reqs, n), 0);
	assert_int_equal(ferry_batch_wait(b, 10000), want);
	return b;
}

/* Every kind of bad request in the middle of a run of good ones: each is
 * refused with its own error, the good ones around it go on. */
static void test_bad_in_run(void **state)
{
	const size_t len = 64 << 10;
	uint8_t *l = aligned_alloc(4096, len), *r = P.rbuf;
	static uint8_t unregistered[4096];
	const struct {
		struct ferry_req req;
		int err;
	} bad[] = {
		{ mkreq((enum ferry_op)7, l, P.seg, r, 10), -EINVAL },
		{ mkreq(FERRY_OP_WRITE, NULL, P.seg, r, 10), -EINVAL },
		{ mkreq(FERRY_OP_WRITE, l, P.seg, r, 0), -EINVAL },
		{ mkreq(FERRY_OP_READ, l, P.seg, (void *)(uintptr_t)(UINT64_MAX - 3), 16), -EFAULT },
		{ mkreq(FERRY_OP_READ, l, P.seg, r + BUF - 1, 2), -EFAULT },
		{ mkreq(FERRY_OP_READ, l, P.seg, r - 64, 128), -EFAULT },
		{ mkreq(FERRY_OP_WRITE, l + len - 5, P.seg, r, 10), -EFAULT },
		{ mkreq(FERRY_OP_WRITE, unregistered, P.seg, r, 10), -EFAULT },
		{ mkreq(FERRY_OP_READ, l, P.seg + 1, r, 10), -EBADF },
	};
	enum { NB = sizeof(bad) / sizeof(bad[0]), N = 3 * NB + 3 };
	struct ferry_req reqs[N];
	struct ferry_req_status st;
	struct ferry_batch *b;

	(void)state;
	assert_non_null(l);
	assert_int_equal(ferry_mem_register(P.init, l, len), 0);
	fill_pattern(l, len, 43);
	/* good good bad good good bad ...: each bad one is inside a run. */
	for (uint32_t i = 0, k = 0; i < N; i++) {
		if (i % 3 == 2 && k < NB)
			reqs[i] = bad[k++].req;
		else
			reqs[i] = mkreq(FERRY_OP_WRITE, l + i * 1024, P.seg, r + i * 1024, 1024);
	}
	b = submit_wait(reqs, N, -EIO);
	for (uint32_t i = 0, k = 0; i < N; i++) {
		assert_int_equal(ferry_req_status(b, i, &st), 0);
		if (i % 3 == 2 && k < NB) {
			if (st.state != FERRY_FAILED || st.error != bad[k].err)
				fail_msg("bad request %u (%u): %s %d, want %d", k, i,
					 ferry_state_name(st.state), st.error, bad[k].err);
			k++;
		} else {
			assert_int_equal(st.state, FERRY_DONE);
			assert_int_equal(st.bytes, 1024);
			assert_memory_equal(r + i * 1024, l + i * 1024, 1024);
		}
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	/* Every reference the submitter took on the region came back, and on
	 * the segment: its close waits for them (SIGALRM ends a leak's wait). */
	assert_int_equal(ferry_mem_unregister(P.init, l), 0);
	alarm(30);
	assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
	alarm(0);
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.target), &P.seg), 0);
	free(l);
	memset(P.rbuf, 0, BUF);
}

/* A region its owner registered read-only: a WRITE inside a run of READs
 * of it is refused (-EACCES), the READs around it go on. */
static void test_write_in_run_of_reads(void **state)
{
	const size_t len = 64 << 10;
	uint8_t *ro = aligned_alloc(4096, len);
	struct ferry_req reqs[3];
	struct ferry_req_status st;
	struct ferry_batch *b;

	(void)state;
	assert_non_null(ro);
	fill_pattern(ro, len, 77);
	assert_int_equal(ferry_mem_register_access(P.target, ro, len, FERRY_ACCESS_REMOTE_READ), 0);
	assert_int_equal(ferry_segment_refresh(P.init, P.seg), 0);
	reqs[0] = mkreq(FERRY_OP_READ, P.lbuf, P.seg, ro, 4096);
	reqs[1] = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, ro + 4096, 4096);
	reqs[2] = mkreq(FERRY_OP_READ, P.lbuf + 8192, P.seg, ro + 8192, 4096);
	b = submit_wait(reqs, 3, -EIO);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(ferry_req_status(b, i, &st), 0);
		assert_int_equal(st.state, i == 1 ? FERRY_FAILED : FERRY_DONE);
		if (i == 1)
			assert_int_equal(st.error, -EACCES);
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_memory_equal(P.lbuf, ro, 4096);
	assert_memory_equal(P.lbuf + 8192, ro + 8192, 4096);
	assert_int_equal(ferry_mem_unregister(P.target, ro), 0);
	assert_int_equal(ferry_segment_refresh(P.init, P.seg), 0);
	free(ro);
}

/* A region its owner lets peers only write: inside a run of WRITEs to
 * it a READ is refused -EACCES and an op that is none (2, -1) -EINVAL --
 * the run checks op and access in one compare -- and the WRITEs around
 * them go on. */
static void test_read_in_run_of_writes(void **state)
{
	const size_t len = 64 << 10;
	uint8_t *wo = aligned_alloc(4096, len);
	const int want[] = { 0, -EACCES, 0, -EINVAL, 0, -EINVAL, 0 };
	const enum ferry_op ops[] = { FERRY_OP_WRITE, FERRY_OP_READ,	  FERRY_OP_WRITE,
				      (enum ferry_op)2, FERRY_OP_WRITE, (enum ferry_op)-1,
				      FERRY_OP_WRITE };
	enum { N = sizeof(want) / sizeof(want[0]) };
	struct ferry_req reqs[N];
	struct ferry_req_status st;
	struct ferry_batch *b;

	(void)state;
	assert_non_null(wo);
	memset(wo, 0, len);
	fill_pattern(P.lbuf, N * 4096, 78);
	assert_int_equal(ferry_mem_register_access(P.target, wo, len, FERRY_ACCESS_REMOTE_WRITE), 0);
	assert_int_equal(ferry_segment_refresh(P.init, P.seg), 0);
	for (uint32_t i = 0; i < N; i++)
		reqs[i] = mkreq(ops[i], P.lbuf + i * 4096, P.seg, wo + i * 4096, 4096);
	b = submit_wait(reqs, N, -EIO);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(ferry_req_status(b, i, &st), 0);
		assert_int_equal(st.state, want[i] ? FERRY_FAILED : FERRY_DONE);
		assert_int_equal(st.error, want[i]);
		if (!want[i])
			assert_memory_equal(wo + i * 4096, P.lbuf + i * 4096, 4096);
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_mem_unregister(P.target, wo), 0);
	assert_int_equal(ferry_segment_refresh(P.init, P.seg), 0);
	free(wo);
}

/*
 * ferry_try_submit's look for room (rq_fits) asks only the rings the
 * request's parts would go to: a request of one part on two rails goes
 * to the first rail from the round-robin start, and a full ring on the
 * other does not stop it.  Before, every rail's ring counted, so
 * ferry_try_submit stopped early on a ring it would not have used.
 */
static void test_fits_asks_the_rings_used(void **state)
{
	struct ferry_ring rings[2];
	struct ferry_ring_run runs[2] = { { 0 } };
	struct dispatch d = { .rings = rings, .runs = runs, .ncores = 2, .rr = 0 };
	struct ferry_rq rq = { .rails = 3, .nparts = 1 };
	int token;

	(void)state;
	assert_int_equal(ferry_ring_init(&rings[0], 4), 0);
	assert_int_equal(ferry_ring_init(&rings[1], 4), 0);
	while (ferry_ring_stage(&rings[1], &runs[1], &token)) /* core 1's ring full */
		;
	assert_true(rq_fits(&d, &rq));  /* its one part goes to core 0 */
	d.rr = 1;
	assert_false(rq_fits(&d, &rq)); /* now to core 1 */
	rq.nparts = 2;
	d.rr = 0;
	assert_false(rq_fits(&d, &rq)); /* two parts: both rings */
	rq.rails = 1;
	rq.nparts = 1;
	d.rr = 1;
	assert_true(rq_fits(&d, &rq)); /* its one rail: core 0 */
	ferry_ring_fini(&rings[0]);
	ferry_ring_fini(&rings[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_in_run),
		cmocka_unit_test(test_write_in_run_of_reads),
		cmocka_unit_test(test_read_in_run_of_writes),
		cmocka_unit_test(test_fits_asks_the_rings_used),
	};

	return cmocka_run_group_tests(tests, setup, pair_group_teardown);
}
