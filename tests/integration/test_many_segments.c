/* SPDX-License-Identifier: MIT */
/*
 * 4,096 open segments on one engine (FERRY_MAX_SEGMENTS), on the software
 * NIC, with an endpoint cache of 64 per core, so SIEVE evicts all the time.
 * One target engine is reached under 4,096 distinct addresses: it listens
 * on 0.0.0.0 and every 127.0.x.y is the loopback (no traffic leaves the
 * host); to the initiator each address is another peer, with its own slot,
 * descriptor and endpoints.
 *
 *  - open all 4,096, writing 64 bytes through each right after its open
 *    (each to its own 64 bytes of the target's buffer), every request DONE;
 *    the target's whole buffer then holds exactly what was written;
 *  - read each segment's 64 bytes back through its own handle, in batches:
 *    nearly all endpoints were evicted, so these are cache misses that
 *    reconnect (and evict others); every byte is checked;
 *  - the per-core endpoint table stays ep_cache entries, the segment slots
 *    grew to 4,096 in chunks, the target never held more than a bounded
 *    number of QPs for us; closing them all leaves it none.
 *
 * Wall times are printed, not judged.
 */
#include <time.h>

#include "tests/harness/harness.h"

#define N_SEGS FERRY_MAX_SEGMENTS
#define SLOT 64                 /* bytes per segment */
#define EP_CACHE 64
#define READ_BATCH 32

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct ferry_engine *engine(const char *cores, const char *listen, uint32_t ep_cache)
{
	struct ferry_engine *e;
	struct ferry_opts o;

	pair_opts(&o, cores);
	o.listen = listen;
	o.cqes = 256;
	o.wrs_per_qp = 64;
	o.signal_every = 16;
	o.ring_size = 64;
	o.qps_per_ep = 1;
	o.ep_cache = ep_cache;
	o.timeout_ms = 10000;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	return e;
}

/* The i-th distinct loopback address of the target's port: 127.0.1.1 on. */
static void address_of(unsigned i, unsigned port, char *buf, size_t len)
{
	snprintf(buf, len, "127.0.%u.%u:%u", 1 + i / 250, 1 + i % 250, port);
}

static uint64_t evictions(struct ferry_engine *e)
{
	struct ferry_core_stats st;
	uint64_t n = 0;

	for (unsigned c = 0; c < ferry_engine_cores(e); c++) {
		assert_int_equal(ferry_core_stats(e, c, &st), 0);
		n += st.ep_evictions;
	}
	return n;
}

static void submit_wait(struct ferry_batch *b, const struct ferry_req *r, uint32_t n)
{
	struct ferry_req_status st;

	assert_int_equal(ferry_submit(b, r, n), 0);
	ferry_batch_wait(b, 60000);
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(ferry_req_status(b, k, &st), 0);
		if (st.state != FERRY_DONE)
			fail_msg("request %u: state %d error %d", k, st.state, st.error);
	}
	assert_int_equal(ferry_batch_reset(b), 0);
}

static void test_4096_segments(void **state)
{
	struct ferry_engine *t = engine("1", "0.0.0.0:0", 128);
	struct ferry_engine *in = engine("0", "127.0.0.1:0", EP_CACHE);
	const char *taddr = ferry_engine_address(t);
	unsigned port = (unsigned)atoi(strrchr(taddr, ':') + 1);
	size_t len = (size_t)N_SEGS * SLOT;
	uint8_t *lbuf = aligned_alloc(4096, len), *back = aligned_alloc(4096, len);
	uint8_t *rbuf = aligned_alloc(4096, len);
	ferry_seg_t *seg = calloc(N_SEGS, sizeof(*seg));
	struct ferry_req r[READ_BATCH];
	struct ferry_port *p;
	struct ferry_batch *b;
	double t0, t_open, t_read, t_close;
	unsigned max_passive = 0;
	char addr[64];

	(void)state;
	assert_non_null(lbuf);
	assert_non_null(back);
	assert_non_null(rbuf);
	assert_non_null(seg);
	fill_pattern(lbuf, len, 4096);
	memset(rbuf, 0, len);
	memset(back, 0, len);
	assert_int_equal(ferry_mem_register(in, lbuf, len), 0);
	assert_int_equal(ferry_mem_register(in, back, len), 0);
	assert_int_equal(ferry_mem_register(t, rbuf, len), 0);
	assert_int_equal(ferry_port_create(in, &p), 0);
	assert_int_equal(ferry_batch_create(p, READ_BATCH, &b), 0);

	t0 = now_s();
	for (unsigned i = 0; i < N_SEGS; i++) {
		int rc;

		address_of(i, port, addr, sizeof(addr));
		rc = ferry_segment_open(in, addr, &seg[i]);
		if (rc)
			fail_msg("open %u (%s): %d", i, addr, rc);
		r[0] = mkreq(FERRY_OP_WRITE, lbuf + (size_t)i * SLOT, seg[i],
			     rbuf + (size_t)i * SLOT, SLOT);
		submit_wait(b, r, 1);
		if (passive_count(t) > max_passive)
			max_passive = passive_count(t);
	}
	t_open = now_s() - t0;
	assert_memory_equal(lbuf, rbuf, len); /* every byte, each where its segment wrote it */
	/* One more open of an address would need a 4,097th slot. */
	assert_int_equal(in->segs.n_slots, N_SEGS);
	assert_int_equal(in->cores[0]->eps.cap, EP_CACHE);
	assert_true(evictions(in) >= N_SEGS - EP_CACHE);
	/* The target holds QPs for our cached endpoints, and those whose
	 * DISCONNECT is on its way: bounded by the cache, not by 4,096. */
	assert_true(max_passive <= 2 * EP_CACHE);

	t0 = now_s();
	for (unsigned i = 0; i < N_SEGS; i += READ_BATCH) {
		for (unsigned k = 0; k < READ_BATCH; k++)
			r[k] = mkreq(FERRY_OP_READ, back + (size_t)(i + k) * SLOT, seg[i + k],
				     rbuf + (size_t)(i + k) * SLOT, SLOT);
		submit_wait(b, r, READ_BATCH);
	}
	t_read = now_s() - t0;
	assert_memory_equal(back, rbuf, len);
	assert_true(evictions(in) >= 2 * (N_SEGS - EP_CACHE));

	t0 = now_s();
	for (unsigned i = 0; i < N_SEGS; i++)
		assert_int_equal(ferry_segment_close(in, seg[i]), 0);
	t_close = now_s() - t0;
	assert_int_equal(passive_count(t), 0);
	printf("%u segments (ep_cache %u, one target under %u loopback addresses): opened and "
	       "written in %.2f s (%.0f opens/s), read back through evicted endpoints in %.2f s, "
	       "closed in %.2f s; %llu evictions; target held at most %u QPs for us\n",
	       N_SEGS, EP_CACHE, N_SEGS, t_open, N_SEGS / t_open, t_read, t_close,
	       (unsigned long long)evictions(in), max_passive);

	assert_engine_quiet(in);
	ferry_batch_destroy(b);
	ferry_port_destroy(p);
	ferry_engine_destroy(in);
	ferry_engine_destroy(t);
	free(seg);
	free(lbuf);
	free(back);
	free(rbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_4096_segments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
