/* SPDX-License-Identifier: MIT */
/*
 * Integration on the software NIC: two engines in one process, several
 * ports on several threads, random sizes from 1 byte to 64 MiB, READ and
 * WRITE, every byte checked; then every kind of bad input.
 *
 * FERRY_TEST_SCALE (default 1) multiplies the number of rounds;
 * FERRY_TEST_MAX_REQ (default 64 MiB) caps request sizes (the Soft-RoCE run
 * in an emulated VM moves ~50 MB/s and uses a smaller cap).
 */
#include <pthread.h>
#include <time.h>

#include "tests/harness/harness.h"

#define THREADS 3
#define DEFAULT_MAX_REQ (64u << 20)

static uint64_t max_req = DEFAULT_MAX_REQ;
static uint64_t area; /* per thread, both sides: max_req + 1/8 */
#define MAX_REQ max_req
#define AREA area
#define PER_BATCH 6

static struct pair P;

static int scale(void)
{
	const char *s = getenv("FERRY_TEST_SCALE");

	return s && atoi(s) > 0 ? atoi(s) : 1;
}

/* Log-uniform sizes: as many tiny as huge requests, 1 B .. 64 MiB. */
static uint64_t random_len(uint64_t *seed)
{
	unsigned bits = (unsigned)(splitmix(seed) % (64 - __builtin_clzll(MAX_REQ)));
	uint64_t len = (splitmix(seed) & ((1ull << bits) - 1)) | (1ull << bits);

	return len > MAX_REQ ? MAX_REQ : len;
}

struct worker {
	unsigned id;
	uint64_t seed;
	unsigned rounds;
	uint64_t bytes;
	int failures;
};

struct planned {
	enum ferry_op op;
	uint64_t off;
	uint64_t len;
	uint64_t seed;
};

/* Plan non-overlapping requests inside the thread's area. */
static unsigned plan_batch(struct worker *w, struct planned *pl)
{
	uint64_t used = 0;
	unsigned n = 0;

	while (n < PER_BATCH) {
		uint64_t len = random_len(&w->seed);
		uint64_t gap = splitmix(&w->seed) % 4096;

		if (used + gap + len > AREA)
			break;
		pl[n].op = splitmix(&w->seed) & 1 ? FERRY_OP_WRITE : FERRY_OP_READ;
		pl[n].off = used + gap;
		pl[n].len = len;
		pl[n].seed = splitmix(&w->seed);
		used += gap + len;
		n++;
	}
	return n;
}

static void prepare(uint8_t *local, uint8_t *remote, const struct planned *pl)
{
	uint8_t *src = pl->op == FERRY_OP_WRITE ? local : remote;
	uint8_t *dst = pl->op == FERRY_OP_WRITE ? remote : local;

	fill_pattern(src + pl->off, pl->len, pl->seed);
	memset(dst + pl->off, 0xee, pl->len);
}

static int check(uint8_t *local, uint8_t *remote, const struct planned *pl)
{
	return memcmp(local + pl->off, remote + pl->off, pl->len) != 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *local = P.lbuf + (size_t)w->id * AREA;
	uint8_t *remote = P.rbuf + (size_t)w->id * AREA;
	struct planned pl[PER_BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, PER_BATCH, &b), 0);
	for (unsigned r = 0; r < w->rounds; r++) {
		struct ferry_req reqs[PER_BATCH];
		unsigned n = plan_batch(w, pl);

		for (unsigned i = 0; i < n; i++) {
			prepare(local, remote, &pl[i]);
			reqs[i] = mkreq(pl[i].op, local + pl[i].off, P.seg, remote + pl[i].off, pl[i].len);
		}
		assert_int_equal(ferry_submit(b, reqs, n), 0);
		assert_int_equal(ferry_batch_wait(b, 60000), 0);
		for (unsigned i = 0; i < n; i++) {
			struct ferry_req_status st;

			assert_int_equal(ferry_req_status(b, i, &st), 0);
			assert_int_equal(st.state, FERRY_DONE);
			assert_int_equal(st.error, 0);
			assert_int_equal(st.bytes, pl[i].len);
			w->failures += check(local, remote, &pl[i]);
			w->bytes += pl[i].len;
		}
		assert_int_equal(ferry_batch_reset(b), 0);
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return NULL;
}

static void test_random_transfers(void **state)
{
	pthread_t th[THREADS];
	struct worker w[THREADS];
	uint64_t total = 0;

	(void)state;
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .id = i, .seed = 1000 + i, .rounds = 6 * (unsigned)scale() };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
		total += w[i].bytes;
	}
	print_message("moved and verified %llu bytes\n", (unsigned long long)total);
	/* Large requests are striped: every core (NIC) of the initiator worked. */
	for (unsigned i = 0; i < ferry_engine_cores(P.init); i++) {
		struct ferry_core_stats st;

		ferry_core_stats(P.init, i, &st);
		print_message("core %u (%s): %llu WRs, %llu bytes\n", i, ferry_core_nic(P.init, i),
			      (unsigned long long)st.wrs_posted, (unsigned long long)st.bytes);
		assert_true(st.wrs_posted > 0);
	}
	assert_engine_quiet(P.init);
	wait_slices_zero(P.init);
}

/* Sizes around the slice boundaries, both ops, one port. */
static void test_slice_edges(void **state)
{
	const uint64_t ss = 65536;
	const uint64_t lens[] = { 1, 2, ss - 1, ss, ss + 1, ss + ss / 4 - 1, ss + ss / 4,
				  2 * ss, 2 * ss + 1, 7 * ss + 12345 };
	struct ferry_port *port;
	struct ferry_batch *b;

	(void)state;
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	for (unsigned i = 0; i < ARRAY_SIZE(lens); i++) {
		for (int op = 0; op < 2; op++) {
			struct planned pl = { op, 4096 * i + 3, lens[i], i * 7 + (unsigned)op };
			struct ferry_req r = mkreq(op, P.lbuf + pl.off, P.seg, P.rbuf + pl.off, pl.len);

			prepare(P.lbuf, P.rbuf, &pl);
			assert_int_equal(ferry_submit(b, &r, 1), 0);
			assert_int_equal(ferry_batch_wait(b, 10000), 0);
			assert_int_equal(check(P.lbuf, P.rbuf, &pl), 0);
			assert_int_equal(ferry_batch_reset(b), 0);
		}
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
}

static int group_setup(void **state)
{
	struct ferry_opts o;

	if (getenv("FERRY_TEST_MAX_REQ") && strtoull(getenv("FERRY_TEST_MAX_REQ"), NULL, 0) >= 65536)
		max_req = strtoull(getenv("FERRY_TEST_MAX_REQ"), NULL, 0);
	area = (max_req + max_req / 8 + 4095) & ~4095ull;
	pair_opts(&o, "0-1");
	o.timeout_ms = 60000; /* emulated Soft-RoCE is slow; a timeout here is a failure */
	pair_setup(&P, &o, &o, (size_t)THREADS * AREA);
	*state = &P;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slice_edges),
		cmocka_unit_test(test_random_transfers),
	};

	return cmocka_run_group_tests(tests, group_setup, pair_group_teardown);
}
