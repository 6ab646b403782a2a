/* SPDX-License-Identifier: MIT */
/*
 * What the teardown suites share (test_teardown: endpoints torn down under
 * work in flight, peers restarted, killed, leases; test_slow_peers: peers
 * that answer late or never): one initiator/target pair P, batches of
 * checked requests, and the engine's accounting back at zero after each.
 */
#ifndef FERRY_TESTS_HARNESS_TEARDOWN_H
#define FERRY_TESTS_HARNESS_TEARDOWN_H

#include <time.h>

#include "tests/harness/harness.h"


#define BUF (16u << 20)
#define BATCH 16
#define SLOT (BUF / BATCH)            /* each request of a batch owns 1 MiB */
#define WAIT_MS 30000

static struct pair P;

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct counts {
	unsigned done, failed, timedout, refused; /* refused: -EBADF */
	unsigned by_err[3];                       /* ECANCELED, EHOSTDOWN, other */
};

/* Mostly small, every fourth large enough to be striped and still moving. */
static inline uint64_t random_len(uint64_t *seed, uint64_t max)
{
	uint64_t r = splitmix(seed);

	if ((r & 3) == 0)
		return max / 2 + splitmix(seed) % (max / 2) + 1;
	return 1 + splitmix(seed) % (256u << 10);
}

/* Fill n requests on seg over the slots of lbase/rbase: sources get a fresh
 * pattern, destinations its complement (an unwritten byte cannot match). */
static inline void prepare(struct ferry_req *reqs, unsigned n, ferry_seg_t seg,
			   uint8_t *lbase, uint8_t *rbase, size_t slot, uint64_t *seed)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t len = random_len(seed, slot);
		enum ferry_op op = splitmix(seed) & 1 ? FERRY_OP_WRITE : FERRY_OP_READ;
		uint8_t *l = lbase + i * slot, *r = rbase + i * slot;
		uint8_t *src = op == FERRY_OP_WRITE ? l : r, *dst = op == FERRY_OP_WRITE ? r : l;

		fill_pattern(src, len, splitmix(seed));
		poison(dst, src, len);
		reqs[i] = mkreq(op, l, seg, r, len);
	}
}

/*
 * Check request i of b; returns a description of a broken promise or NULL.
 * allowed: the errors FAILED may carry besides -ECANCELED and -EHOSTDOWN.
 */
static inline const char *check(const struct ferry_batch *b, uint32_t i,
				const struct ferry_req *r, int (*allowed)(int), struct counts *c)
{
	const void *src = r->op == FERRY_OP_WRITE ? r->local : (void *)(uintptr_t)r->remote;
	const void *dst = r->op == FERRY_OP_WRITE ? (void *)(uintptr_t)r->remote : r->local;
	struct ferry_req_status st;

	if (ferry_req_status(b, i, &st))
		return "no status";
	switch (st.state) {
	case FERRY_DONE:
		c->done++;
		if (st.bytes != r->len)
			return "DONE with a short byte count";
		return memcmp(src, dst, r->len) ? "DONE but the bytes differ" : NULL;
	case FERRY_FAILED:
	case FERRY_TIMEOUT:
		if (st.error == -EBADF) {
			c->refused++;
			return st.state == FERRY_FAILED && st.bytes == 0 ? NULL : "bad -EBADF status";
		}
		c->failed += st.state == FERRY_FAILED;
		c->timedout += st.state == FERRY_TIMEOUT;
		c->by_err[st.error == -ECANCELED ? 0 : st.error == -EHOSTDOWN ? 1 : 2]++;
		if (st.error != -ECANCELED && st.error != -EHOSTDOWN && !(allowed && allowed(st.error)))
			return "ended with an unexpected error";
		return st.bytes < r->len ? NULL : "not DONE but every byte counted";
	default:
		return "still PENDING";
	}
}

/* Fault injection is the loop NIC's: on another NIC (FERRY_TEST_*_NICS) skip. */
static inline void need_loop(void)
{
	const char *n = getenv("FERRY_TEST_INIT_NICS");

	if (n && strcmp(n, "loop") != 0)
		skip();
}

/* On another NIC the peer's death needs no help (test_peer_restart): nothing. */
static inline void set_faults(struct ferry_engine *e, const struct loop_faults *f)
{
	const char *n = getenv("FERRY_TEST_INIT_NICS");

	if (n && strcmp(n, "loop") != 0)
		return;
	engine_set_faults(e, f);
}

/*
 * Quiet: nothing in flight, CQ quota 0, every slice back in its pool.  The
 * pools are core-owned; closing the segment first makes each core answer a
 * command, which orders its last pool writes before our reads.
 */
static inline void assert_quiet_and_close(struct ferry_engine *e, ferry_seg_t *seg)
{
	wait_slices_zero(e);
	assert_engine_quiet(e);
	if (*seg)
		assert_int_equal(ferry_segment_close(e, *seg), 0);
	*seg = 0;
	for (unsigned i = 0; i < ferry_engine_cores(e); i++) {
		const struct slice_pool *pool = &e->cores[i]->pool;

		if (pool->avail != pool->size)
			fail_msg("core %u: slice pool has %u of %u slices", i, pool->avail,
				 pool->size);
	}
}

/*
 * Wait up to timeout_ms for the n requests of b to end (0: they must have
 * ended already), check each, add them to *c, reset b.
 */
static inline void wait_checked(struct ferry_batch *b, const struct ferry_req *reqs,
				unsigned n, int (*allowed)(int), int64_t timeout_ms,
				struct counts *c)
{
	int rc = ferry_batch_wait(b, timeout_ms);

	if (rc != 0 && rc != -EIO)
		fail_msg("requests not ended after %lld ms (%d)", (long long)timeout_ms, rc);
	for (uint32_t i = 0; i < n; i++) {
		const char *why = check(b, i, &reqs[i], allowed, c);

		if (why) {
			struct ferry_req_status st;

			ferry_req_status(b, i, &st);
			fail_msg("request %u (%s %llu B): %s: %s error %d", i,
				 reqs[i].op == FERRY_OP_WRITE ? "WRITE" : "READ",
				 (unsigned long long)reqs[i].len, why, ferry_state_name(st.state),
				 st.error);
		}
	}
	assert_int_equal(ferry_batch_reset(b), 0);
}

static inline struct counts run_checked(struct ferry_batch *b, const struct ferry_req *reqs,
					unsigned n, int (*allowed)(int))
{
	struct counts c = { 0 };

	assert_int_equal(ferry_submit(b, reqs, n), 0);
	wait_checked(b, reqs, n, allowed, WAIT_MS, &c);
	return c;
}

static inline void setup_pair(uint32_t timeout_ms)
{
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.timeout_ms = timeout_ms;
	o.slice_size = 16384; /* many slices per request: more of them in flight at close */
	pair_setup(&P, &o, &o, BUF);
}

/* How many repairs of seg failed in a row (the repair thread's count). */
static inline unsigned repairs_failed(struct ferry_engine *e, ferry_seg_t seg)
{
	const struct ferry_seg *s = seg_at(&e->segs, (uint32_t)(seg & 0xffffffffu) - 1);
	unsigned n;

	pthread_mutex_lock(&e->ctl_lock);
	n = s->repairs_failed;
	pthread_mutex_unlock(&e->ctl_lock);
	return n;
}

/* One batch on P's segment, on a port of its own: every request DONE, bytes right. */
static inline void assert_batch_done(uint64_t seed)
{
	struct ferry_req reqs[BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;
	struct counts c;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, BATCH, &b), 0);
	prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	c = run_checked(b, reqs, BATCH, NULL);
	assert_int_equal(c.done, BATCH);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
}

#endif
