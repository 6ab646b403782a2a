/* SPDX-License-Identifier: MIT */
/*
 * The integration and bad-input suites across two processes, on tcp and on
 * cma: a target process (tests/harness/target.h) registers a 72 MiB buffer
 * holding a known pattern; the initiator keeps a shadow of what the
 * target's bytes must be, moves random sizes from 1 B to 64 MiB both ways
 * (READs checked byte by byte against the shadow, WRITEs applied to it),
 * and at the end compares the target's own hash of its buffer and a full
 * READ with the shadow.  Then the bad input: ranges outside the peer's
 * region, a read-only region, a region the target unregistered behind the
 * initiator's back (refused by the target's side), a local range outside
 * ours, a batch mixing good and bad requests.
 *
 * cma is skipped, with the kernel's reason, where it refuses
 * process_vm_readv; FERRY_TEST_SCALE multiplies the rounds.
 */
#include <sys/uio.h>

#include "tests/harness/plan.h"
#include "tests/harness/target.h"

#define MAX_REQ (64ull << 20)
#define AREA (MAX_REQ + MAX_REQ / 8)
#define PER_BATCH 6
#define SEED 4242

static struct target T;
static uint8_t *lbuf, *shadow;
static struct ferry_engine *E;
static struct ferry_port *port;
static ferry_seg_t seg;

static void *remote(uint64_t off)
{
	return (void *)(uintptr_t)(T.buf + off);
}

static int cma_refused(void)
{
	uint8_t byte;
	struct iovec l = { &byte, 1 }, r = { remote(0), 1 };

	return process_vm_readv(T.pid, &l, 1, &r, 1, 0) == 1 ? 0 : -errno;
}

/* Target up, engine, segment over transport nics (skip: cma refused). */
static void up(const char *nics)
{
	struct ferry_opts o;

	assert_int_equal(target_start(&T, nics, "127.0.0.1:0", AREA, SEED), 0);
	if (!strcmp(nics, "cma") && cma_refused()) {
		print_message("cma: the kernel refuses process_vm_readv of our child (%s)\n",
			      strerror(-cma_refused()));
		target_stop(&T);
		skip();
	}
	ferry_opts_default(&o);
	o.cores = "0-1";
	o.nics = nics;
	o.timeout_ms = 60000;
	assert_int_equal(ferry_engine_create(&o, &E), 0);
	lbuf = aligned_alloc(4096, AREA);
	shadow = aligned_alloc(4096, AREA);
	assert_non_null(lbuf);
	assert_non_null(shadow);
	memset(lbuf, 0, AREA);
	fill_pattern(shadow, AREA, SEED);
	assert_int_equal(ferry_mem_register(E, lbuf, AREA), 0);
	assert_int_equal(ferry_segment_open(E, T.addr, &seg), 0);
	assert_string_equal(ferry_segment_transport(E, seg), nics);
	assert_int_equal(ferry_port_create(E, &port), 0);
}

static void down(void)
{
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_segment_close(E, seg), 0);
	target_stop(&T);
	assert_int_equal(ferry_mem_unregister(E, lbuf), 0);
	ferry_engine_destroy(E);
	free(lbuf);
	free(shadow);
}

static void random_transfers(const char *nics)
{
	struct ferry_batch *b;
	uint64_t seed = 99, moved = 0;
	struct planned pl[PER_BATCH];
	struct ferry_req r[PER_BATCH];

	up(nics);
	assert_int_equal(ferry_batch_create(port, PER_BATCH, &b), 0);
	for (int round = 0; round < 8 * test_scale(); round++) {
		unsigned n = plan_batch(&seed, pl, PER_BATCH, AREA, 27);

		for (unsigned i = 0; i < n; i++) {
			uint8_t *l = lbuf + pl[i].off;

			if (pl[i].op == FERRY_OP_WRITE)
				fill_pattern(l, pl[i].len, pl[i].seed);
			else
				poison(l, shadow + pl[i].off, pl[i].len);
			r[i] = mkreq(pl[i].op, l, seg, remote(pl[i].off), pl[i].len);
		}
		run_all_done(b, r, n);
		for (unsigned i = 0; i < n; i++) {
			uint8_t *l = lbuf + pl[i].off, *s = shadow + pl[i].off;

			if (pl[i].op == FERRY_OP_WRITE)
				memcpy(s, l, pl[i].len);
			else if (memcmp(l, s, pl[i].len))
				fail_msg("%s: READ of %llu bytes at %llu differs", nics,
					 (unsigned long long)pl[i].len,
					 (unsigned long long)pl[i].off);
			moved += pl[i].len;
		}
	}
	/* What the target holds, by its own hash and by one READ of it all. */
	assert_true(target_hash(&T) == fnv1a(shadow, AREA));
	poison(lbuf, shadow, AREA);
	r[0] = mkreq(FERRY_OP_READ, lbuf, seg, remote(0), AREA);
	run_all_done(b, r, 1);
	assert_memory_equal(lbuf, shadow, AREA);
	print_message("%s: moved and verified %llu bytes across processes\n", nics,
		      (unsigned long long)moved + AREA);
	assert_int_equal(ferry_batch_destroy(b), 0);
	down();
}

static struct ferry_req_status run_one(struct ferry_req r)
{
	return run_one_on(port, r, 60000);
}

static void expect_refused(struct ferry_req r, int err)
{
	assert_refused(run_one(r), err);
}

static void expect_done(struct ferry_req r)
{
	struct ferry_req_status st = run_one(r);

	assert_int_equal(st.state, FERRY_DONE);
	assert_int_equal(st.bytes, r.len);
}

static void bad_input(const char *nics)
{
	static uint8_t unregistered[4096];
	char msg[TARGET_MSG];
	unsigned long long ro;
	uint8_t *want;
	int rc;

	up(nics);
	/* Outside the peer's region: before, after, straddling, wrapping. */
	expect_refused(mkreq(FERRY_OP_WRITE, lbuf, seg, remote(AREA), 1), -EFAULT);
	expect_refused(mkreq(FERRY_OP_WRITE, lbuf, seg, remote(AREA - 1), 2), -EFAULT);
	expect_refused(mkreq(FERRY_OP_READ, lbuf, seg, (void *)(uintptr_t)(T.buf - 64), 128), -EFAULT);
	expect_refused(mkreq(FERRY_OP_READ, lbuf, seg, (void *)(uintptr_t)(UINT64_MAX - 3), 16),
		       -EFAULT);
	/* Outside ours. */
	expect_refused(mkreq(FERRY_OP_WRITE, unregistered, seg, remote(0), 10), -EFAULT);
	expect_refused(mkreq(FERRY_OP_READ, lbuf + AREA - 5, seg, remote(0), 10), -EFAULT);

	/* A read-only region: WRITE refused, READ works. */
	target_cmd(&T, 'r', msg);
	assert_int_equal(sscanf(msg, "%d %llu", &rc, &ro), 2);
	assert_int_equal(rc, 0);
	assert_int_equal(ferry_segment_refresh(E, seg), 0);
	expect_refused(mkreq(FERRY_OP_WRITE, lbuf, seg, (void *)(uintptr_t)ro, 4096), -EACCES);
	expect_done(mkreq(FERRY_OP_READ, lbuf, seg, (void *)(uintptr_t)ro, TARGET_RO_LEN));
	want = malloc(TARGET_RO_LEN);
	assert_non_null(want);
	fill_pattern(want, TARGET_RO_LEN, SEED + 1);
	assert_memory_equal(lbuf, want, TARGET_RO_LEN);
	free(want);

	/* Unregistered behind our back: our view is stale, the target refuses. */
	target_cmd(&T, 'u', msg);
	assert_int_equal(atoi(msg), 0);
	expect_refused(mkreq(FERRY_OP_READ, lbuf, seg, (void *)(uintptr_t)ro, 4096), -EFAULT);

	/* A batch of good and bad requests: the good ones go on. */
	{
		struct ferry_req r[3] = {
			mkreq(FERRY_OP_WRITE, lbuf, seg, remote(0), 1000),
			mkreq(FERRY_OP_WRITE, lbuf, seg, remote(AREA), 1000),
			mkreq(FERRY_OP_READ, lbuf + 8192, seg, remote(8192), 5000),
		};
		struct ferry_req_status st;
		struct ferry_batch *b;

		fill_pattern(lbuf, 1000, 5);
		memcpy(shadow, lbuf, 1000);
		assert_int_equal(ferry_batch_create(port, 3, &b), 0);
		assert_int_equal(ferry_submit(b, r, 3), 0);
		assert_int_equal(ferry_batch_wait(b, 60000), -EIO);
		assert_int_equal(ferry_req_status(b, 0, &st), 0);
		assert_int_equal(st.state, FERRY_DONE);
		assert_int_equal(ferry_req_status(b, 1, &st), 0);
		assert_int_equal(st.state, FERRY_FAILED);
		assert_int_equal(st.error, -EFAULT);
		assert_int_equal(ferry_req_status(b, 2, &st), 0);
		assert_int_equal(st.state, FERRY_DONE);
		assert_memory_equal(lbuf + 8192, shadow + 8192, 5000);
		assert_int_equal(ferry_batch_destroy(b), 0);
	}
	/* Nothing refused wrote a byte: the target holds the shadow. */
	assert_true(target_hash(&T) == fnv1a(shadow, AREA));
	assert_engine_quiet(E);
	down();
}

static void test_random_tcp(void **state)
{
	(void)state;
	random_transfers("tcp");
}

static void test_random_cma(void **state)
{
	(void)state;
	random_transfers("cma");
}

static void test_bad_input_tcp(void **state)
{
	(void)state;
	bad_input("tcp");
}

static void test_bad_input_cma(void **state)
{
	(void)state;
	bad_input("cma");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_tcp),
		cmocka_unit_test(test_random_cma),
		cmocka_unit_test(test_bad_input_tcp),
		cmocka_unit_test(test_bad_input_cma),
	};

	target_main_if(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
