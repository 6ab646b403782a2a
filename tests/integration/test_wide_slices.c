/* SPDX-License-Identifier: MIT */
/*
 * The largest slice_size over tcp, whose frames carry at most 1 GiB: no
 * slice is cut longer than a transport takes.  Its own file: it moves
 * 1 GiB (seconds, and more under TSan's shadow memory), so it stays out
 * of the suites run per transport and under TSan.
 */
#include "tests/harness/harness.h"

/*
 * The largest WR every transport takes is 1 GiB (tcp's frame cap), and
 * slice_size may be 1 GiB.  A tail under a quarter slice was merged into
 * the slice before it even then: a request of 1 GiB + 4 KiB was one WR
 * of 1 GiB + 4 KiB, which tcp refuses (a bad WR): FAILED -EIO, every
 * retry alike.  Over tcp whatever FERRY_TEST_*_NICS say.
 */
static void test_largest_slice_size_over_tcp(void **state)
{
	const uint64_t len = (1ull << 30) + 4096;
	struct ferry_engine *in, *t;
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_opts o;
	ferry_seg_t seg;
	uint8_t *lbuf = aligned_alloc(4096, len), *rbuf = aligned_alloc(4096, len);

	(void)state;
	assert_non_null(lbuf);
	assert_non_null(rbuf);
	pair_opts(&o, "0");
	o.nics = "tcp";
	o.slice_size = 1u << 30;
	o.retries = 0;
	o.timeout_ms = 60000;
	assert_int_equal(ferry_engine_create(&o, &in), 0);
	assert_int_equal(ferry_engine_create(&o, &t), 0);
	assert_int_equal(ferry_mem_register(in, lbuf, len), 0);
	assert_int_equal(ferry_mem_register(t, rbuf, len), 0);
	assert_int_equal(ferry_segment_open(in, ferry_engine_address(t), &seg), 0);
	assert_int_equal(ferry_port_create(in, &port), 0);
	/* the first page, the last of the first GiB, the tail (the rest is zero) */
	memset(lbuf, 0x5a, 4096);
	memset(lbuf + (1u << 30) - 4096, 0xa5, 8192);
	memset(rbuf + len - 4096, 0xff, 4096);
	st = run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, len), 60000);
	if (st.state != FERRY_DONE)
		fail_msg("1 GiB + 4 KiB with 1 GiB slices over tcp: state %d error %d", st.state,
			 st.error);
	assert_int_equal(st.bytes, len);
	assert_memory_equal(rbuf, lbuf, 4096);
	assert_memory_equal(rbuf + (1u << 30) - 4096, lbuf + (1u << 30) - 4096, 8192);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_segment_close(in, seg), 0);
	assert_int_equal(ferry_mem_unregister(in, lbuf), 0);
	assert_int_equal(ferry_mem_unregister(t, rbuf), 0);
	ferry_engine_destroy(in);
	ferry_engine_destroy(t);
	free(lbuf);
	free(rbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_largest_slice_size_over_tcp),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
