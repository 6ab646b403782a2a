/* SPDX-License-Identifier: MIT */
/*
 * Shared set-up for the integration tests: two engines in one process on the
 * software NIC, each with a registered buffer, the initiator having opened
 * the target as a segment.  Header-only so every test binary stays one file.
 */
#ifndef FERRY_TESTS_HARNESS_H
#define FERRY_TESTS_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/knobs.h"
#include "runtime/ferry.h"
#include "runtime/ctl/passive.h"
#include "runtime/engine/engine.h"
#include "qp/loop/loop.h"
#include "tests/harness/wait.h"

struct pair {
	struct ferry_engine *init;
	struct ferry_engine *target;
	uint8_t *lbuf; /* initiator's registered buffer */
	uint8_t *rbuf; /* target's registered buffer */
	size_t len;
	ferry_seg_t seg;
	struct ferry_port *port; /* pair_open_port's; pair_teardown destroys it */
};

static inline uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A pattern that differs per byte and per seed, cheap to generate. */
static inline void fill_pattern(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);

		memcpy(p + i, &v, 8);
	}
	for (; i < len; i++)
		p[i] = (uint8_t)splitmix(&s);
}

/* dst = ~src: a destination byte the transfer did not write cannot match. */
static inline void poison(uint8_t *dst, const uint8_t *src, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		memcpy(&v, src + i, 8);
		v = ~v;
		memcpy(dst + i, &v, 8);
	}
	for (; i < len; i++)
		dst[i] = (uint8_t)~src[i];
}

static inline void pair_opts(struct ferry_opts *o, const char *cores)
{
	ferry_opts_default(o);
	o->cores = cores;
	o->nics = "loop"; /* deterministic on any host; see pair_setup for RDMA runs */
	o->timeout_ms = 2000;
}

/*
 * FERRY_TEST_INIT_NICS / FERRY_TEST_TARGET_NICS pick each engine's NICs
 * (the Soft-RoCE run puts the initiator on rxe0 and the target on rxe1);
 * unset, both use the options' nics.
 */
static inline void pair_setup_knobs(struct pair *p, const struct ferry_opts *io,
				    const struct ferry_opts *to, size_t len,
				    const struct ferry_knobs *k)
{
	struct ferry_opts i = *io, t = *to;

	if (getenv("FERRY_TEST_INIT_NICS"))
		i.nics = getenv("FERRY_TEST_INIT_NICS");
	if (getenv("FERRY_TEST_TARGET_NICS"))
		t.nics = getenv("FERRY_TEST_TARGET_NICS");
	/* make test-caller: the suites again with the application's threads
	 * running the passes (the target's cores fall back on their threads). */
	if (getenv("FERRY_TEST_IDLE") && !strcmp(getenv("FERRY_TEST_IDLE"), "caller"))
		i.idle = t.idle = FERRY_IDLE_CALLER;
	memset(p, 0, sizeof(*p));
	assert_int_equal(ferry_engine_create_knobs(&i, k, &p->init), 0);
	assert_int_equal(ferry_engine_create_knobs(&t, k, &p->target), 0);
	p->len = len;
	p->lbuf = aligned_alloc(4096, len);
	p->rbuf = aligned_alloc(4096, len);
	assert_non_null(p->lbuf);
	assert_non_null(p->rbuf);
	memset(p->lbuf, 0, len);
	memset(p->rbuf, 0, len);
	assert_int_equal(ferry_mem_register(p->init, p->lbuf, len), 0);
	assert_int_equal(ferry_mem_register(p->target, p->rbuf, len), 0);
	assert_int_equal(ferry_segment_open(p->init, ferry_engine_address(p->target), &p->seg), 0);
}

static inline void pair_setup(struct pair *p, const struct ferry_opts *io,
			      const struct ferry_opts *to, size_t len)
{
	pair_setup_knobs(p, io, to, len, NULL);
}

/* A port on the initiator, in p->port. */
static inline void pair_open_port(struct pair *p)
{
	assert_int_equal(ferry_port_create(p->init, &p->port), 0);
}

static inline void pair_teardown(struct pair *p)
{
	if (p->port)
		assert_int_equal(ferry_port_destroy(p->port), 0);
	if (p->seg)
		assert_int_equal(ferry_segment_close(p->init, p->seg), 0);
	assert_int_equal(ferry_mem_unregister(p->init, p->lbuf), 0);
	assert_int_equal(ferry_mem_unregister(p->target, p->rbuf), 0);
	ferry_engine_destroy(p->init);
	ferry_engine_destroy(p->target);
	free(p->lbuf);
	free(p->rbuf);
}

/* cmocka group teardown of the pair its group setup left in *state. */
/* A group fixture: the pair on cores, buf bytes each side, a port; *state = p. */
static inline int pair_group_setup_port(struct pair *p, const char *cores, size_t buf,
					void **state)
{
	struct ferry_opts o;

	pair_opts(&o, cores);
	pair_setup(p, &o, &o, buf);
	pair_open_port(p);
	*state = p;
	return 0;
}

static inline int pair_group_teardown(void **state)
{
	pair_teardown(*state);
	return 0;
}

static inline struct ferry_req mkreq(enum ferry_op op, void *local, ferry_seg_t seg,
				     const void *remote, uint64_t len)
{
	struct ferry_req r = { op, local, seg, (uint64_t)(uintptr_t)remote, len };

	return r;
}

/* One request on port p in a batch of its own, which must end within
 * wait_ms; its status. */
static inline struct ferry_req_status run_one_on(struct ferry_port *p, struct ferry_req r,
						 int wait_ms)
{
	struct ferry_req_status st;
	struct ferry_batch *b;

	assert_int_equal(ferry_batch_create(p, 1, &b), 0);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_true(ferry_batch_wait(b, wait_ms) != -ETIMEDOUT);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(ferry_batch_destroy(b), 0);
	return st;
}

/* A request refused: FAILED with err, no byte moved. */
static inline void assert_refused(struct ferry_req_status st, int err)
{
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, err);
	assert_int_equal(st.bytes, 0);
}

/* After all requests ended, every core's accounting must be back to zero. */
static inline void assert_engine_quiet(struct ferry_engine *e)
{
	for (unsigned i = 0; i < ferry_engine_cores(e); i++) {
		struct ferry_core_stats st;

		assert_int_equal(ferry_core_stats(e, i, &st), 0);
		assert_int_equal(st.provider_errors, 0);
		for (unsigned t = 0; t < e->cores[i]->ntx; t++)
			assert_int_equal(READ_ONCE(e->cores[i]->tx[t].cq_quota.depth), 0);
	}
}

/*
 * e's per-core counters summed field by field, from one snapshot per core
 * (so that two fields of the sum can be compared).  Every field after
 * numa_node is a uint64_t (cpu and numa_node stay 0; the sums of lat_hz and
 * of refused perf counters, UINT64_MAX, mean nothing).
 */
static inline void engine_stats_sum(struct ferry_engine *e, struct ferry_core_stats *sum)
{
	const size_t first = offsetof(struct ferry_core_stats, wrs_posted);

	_Static_assert((sizeof(struct ferry_core_stats) -
			offsetof(struct ferry_core_stats, wrs_posted)) % sizeof(uint64_t) == 0,
		       "ferry_core_stats: uint64_t fields after numa_node");
	memset(sum, 0, sizeof(*sum));
	for (unsigned i = 0; i < ferry_engine_cores(e); i++) {
		struct ferry_core_stats st;

		assert_int_equal(ferry_core_stats(e, i, &st), 0);
		for (size_t off = first; off < sizeof(st); off += sizeof(uint64_t))
			*(uint64_t *)((char *)sum + off) += *(const uint64_t *)((const char *)&st + off);
	}
}

/* One counter of ferry_core_stats (at offset off), summed over e's cores:
 * ENGINE_STAT_SUM(e, wrs_posted). */
static inline uint64_t engine_stat_sum(struct ferry_engine *e, size_t off)
{
	struct ferry_core_stats sum;

	engine_stats_sum(e, &sum);
	return *(const uint64_t *)((const char *)&sum + off);
}
#define ENGINE_STAT_SUM(e, field) engine_stat_sum((e), offsetof(struct ferry_core_stats, field))

/* Every core's loop NIC of e injects the faults f (NULL: none). */
static inline void engine_set_faults(struct ferry_engine *e, const struct loop_faults *f)
{
	for (unsigned i = 0; i < ferry_engine_cores(e); i++)
		loop_set_faults(ferry_engine_nic(e, i), f);
}

static inline uint64_t slices_in_flight(struct ferry_engine *e, unsigned core)
{
	struct ferry_core_stats st;

	assert_int_equal(ferry_core_stats(e, core, &st), 0);
	return st.slices_in_flight;
}

/* slices_in_flight is a gauge the core refreshes every pass: allow it a moment. */
static inline void wait_slices_zero(struct ferry_engine *e)
{
	for (unsigned i = 0; i < ferry_engine_cores(e); i++)
		WAIT_UNTIL(slices_in_flight(e, i) == 0, WAIT_DEADLINE_MS,
			   "core %u's slices in flight to drain", i);
}

#endif /* FERRY_TESTS_HARNESS_H */
