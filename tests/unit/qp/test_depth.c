/* SPDX-License-Identifier: MIT */
/*
 * QP depth and CQ quota accounting (qp/post/depth.h, qp/post/post.c) against the real
 * software NIC (qp/loop/loop.c): layout of the counter blocks, post_budget,
 * selective signalling, back-pressure that loses nothing, a failed post
 * mid-chain, errors attributed to the right slice, and randomized schedules
 * of post/poll (with and without injected faults) checked after every step:
 *
 *   - every QP's depth <= its max, the CQ quota's depth <= its max,
 *   - the sum of QP depths == the CQ quota's depth == WRs posted - retired,
 *   - the loop NIC saw no send queue or CQ overflow, no provider errors,
 *
 * and at the end every slice retired exactly once, with the bytes where
 * they should be (or untouched, for a slice that failed).
 *
 * This test is the runtime: the posting context's owner, whose
 * qp_events.slice_done receives every retired slice.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "qp/post/depth.h"
#include "qp/loop/loop.h"
#include "qp/nic.h"
#include "qp/post/post.h"
#include "ring/base/clock.h"
#include "runtime/ferry.h"
#include "slice/slice.h"

#define REG 256     /* bytes of each buffer a job owns: no two jobs share a byte */
#define MAX_Q 4

/* splitmix64: deterministic, so a failing schedule reproduces. */
static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- layout and budget ------------------------------------------------ */

static void test_layout(void **state)
{
	struct WrDepthBlock two[2];

	(void)state;
	assert_int_equal(sizeof(struct WrDepthBlock), 64);
	assert_int_equal(_Alignof(struct WrDepthBlock), 64);
	assert_int_equal(sizeof(CqQuotaBlock), 64);
	/* Neighbours never share a line. */
	assert_int_equal((uintptr_t)&two[0] % 64, 0);
	assert_int_equal((uintptr_t)&two[1] - (uintptr_t)&two[0], 64);
	/* The blocks head their owners: the hot counter starts the line. */
	assert_int_equal(offsetof(struct qpx, depth), 0);
	assert_int_equal(offsetof(struct qctx, cq_quota), 0);
	assert_int_equal(_Alignof(struct qpx) % 64, 0);
	assert_int_equal(_Alignof(struct qctx) % 64, 0);
	/* Nothing else lives on the depth line. */
	assert_true(offsetof(struct qpx, nqp) >= 64);
	assert_true(offsetof(struct qctx, prov) >= 64);
}

static void test_post_budget(void **state)
{
	static const struct {
		uint32_t qd, qm, cd, cm, pend, want;
	} c[] = {
		{ 0, 16, 0, 64, 100, 16 },   /* QP room binds */
		{ 0, 16, 60, 64, 100, 4 },   /* CQ room binds */
		{ 0, 16, 0, 64, 3, 3 },      /* pending binds */
		{ 16, 16, 0, 64, 5, 0 },     /* QP full */
		{ 0, 16, 64, 64, 5, 0 },     /* CQ full */
		{ 3, 16, 10, 64, 0, 0 },     /* nothing pending */
		{ 5, 16, 50, 64, 11, 11 },   /* all three equal */
		{ 5, 16, 52, 64, 11, 11 },   /* QP 11, CQ 12 */
		{ 5, 16, 54, 64, 11, 10 },   /* CQ 10 */
		{ 0, 0xffffffffu, 0, 0xffffffffu, 0xfffffffeu, 0xfffffffeu },
		{ 1, 0xffffffffu, 0, 0xffffffffu, 0xffffffffu, 0xfffffffeu },
	};
	struct WrDepthBlock q;
	CqQuotaBlock cq;

	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		memset(&q, 0, sizeof(q));
		memset(&cq, 0, sizeof(cq));
		q.depth = c[i].qd;
		q.max = c[i].qm;
		cq.depth = c[i].cd;
		cq.max = c[i].cm;
		assert_int_equal(post_budget(&q, &cq, c[i].pend), c[i].want);
	}
	/* add/sub round trip, and room follows. */
	memset(&q, 0, sizeof(q));
	q.max = 8;
	wr_depth_add(&q, 8);
	assert_int_equal(wr_depth_room(&q), 0);
	wr_depth_sub(&q, 3);
	assert_int_equal(depth_load(&q.depth), 5);
	assert_int_equal(wr_depth_room(&q), 3);
}

/* ---- the harness: one core's qctx over a loop NIC --------------------- */

enum { J_FREE, J_PENDING, J_POSTED, J_DONE };

struct job {
	uint8_t state;
	uint8_t op;
	uint8_t slot;      /* QP slot it was posted on */
	int err;
	uint32_t len;
	uint32_t order;    /* retirement order */
};

struct harness {
	struct qctx *ctx;
	struct nic *rnic;            /* the "remote" context */
	struct nic_addr raddr;
	struct nic_mr lmr, rmr;
	uint8_t *lbuf, *rbuf;
	struct slice_pool pool;
	uint32_t nq, max_wr;
	struct qpx *q[MAX_Q];
	struct slice_list pend[MAX_Q];
	uint32_t slot_errs[MAX_Q];   /* errored slices since the QP was created */
	uint8_t slot_killed[MAX_Q];  /* moved to error by us (teardown), not by a WR */
	struct job *jobs;
	uint32_t njobs, max_jobs;
	uint64_t posted, retired, errors, replaced;
	uint64_t held;               /* posts that left work pending for lack of room */
};

/* The test in progress (set and cleared around each). */
static struct harness *H;

/* The runtime's half of the contract: each slice comes back exactly once. */
static void test_slice_done(void *owner, struct slice *s, int err)
{
	struct harness *h = owner;
	struct job *j = (struct job *)(void *)s->rq;

	assert_non_null(h);
	assert_ptr_equal(h, H);
	assert_true(j >= h->jobs && j < h->jobs + h->njobs);
	assert_int_equal(j->state, J_POSTED);
	j->state = J_DONE;
	j->err = err;
	j->order = (uint32_t)h->retired++;
	if (err) {
		h->errors++;
		h->slot_errs[j->slot]++;
	}
	memset(s, 0x5a, sizeof(*s)); /* a retired slice must not be read again */
	slice_put(&h->pool, s);
}

/* No slices_ok: qctx_poll falls back to slice_done for every slice. */
static const struct qp_events test_events = { .slice_done = test_slice_done };

static uint8_t pat(uint32_t id, uint32_t k)
{
	/* Odd, so never 0: a copied byte always differs from an untouched one. */
	return (uint8_t)((id * 131u + k * 29u + (id >> 8)) | 1u);
}

static struct job *job_of(const struct slice *s)
{
	return (struct job *)(void *)s->rq;
}

static void add_qp(struct harness *h, uint32_t i)
{
	struct qctx *ctx = h->ctx;

	assert_int_equal(qpx_create(ctx, h->max_wr, NULL, &h->q[i]), 0);
	assert_int_equal(ctx->prov->qp_connect(h->q[i]->nqp, &h->raddr, NULL), 0);
	assert_int_equal(h->q[i]->depth.depth, 0);
	assert_int_equal(h->q[i]->depth.max, h->max_wr);
	assert_int_equal(qctx_attach(ctx, h->q[i]), 0);
	/* The lowest free index: the slot's own after a replacement. */
	assert_int_equal(h->q[i]->index, i);
	h->slot_errs[i] = 0;
	h->slot_killed[i] = 0;
}

static void harness_init(struct harness *h, uint32_t nq, uint32_t max_wr, uint32_t cqe,
			 uint32_t signal_every, uint32_t pool_size, uint32_t max_jobs)
{
	const struct nic_provider *prov = &nic_loop_provider;
	struct qctx *ctx;
	size_t blen = (size_t)max_jobs * REG;

	assert_true(nq <= MAX_Q);
	memset(h, 0, sizeof(*h));
	H = h;
	ctx = aligned_alloc(FERRY_CACHE_LINE, sizeof(*ctx));
	assert_non_null(ctx);
	memset(ctx, 0, sizeof(*ctx));
	h->ctx = ctx;
	ctx->prov = prov;
	assert_ptr_equal(nic_provider_for("loop"), prov);
	assert_int_equal(prov->open("loop", &ctx->nic), 0);
	assert_int_equal(prov->open("loop", &h->rnic), 0);
	prov->addr(h->rnic, &h->raddr);
	assert_int_equal(prov->cq_create(ctx->nic, cqe, &ctx->cq), 0);
	/* One credit per CQE: the quota is what makes the CQ impossible to overflow. */
	ctx->cq_quota.max = cqe;
	assert_int_equal(slice_pool_init(&h->pool, pool_size, -1), 0);
	ctx->ev = &test_events;
	ctx->owner = h;
	ctx->signal_every = signal_every;
	ctx->max_reads = 1u << 30; /* test_read_bound sets its own */

	h->lbuf = calloc(1, blen);
	h->rbuf = calloc(1, blen);
	assert_non_null(h->lbuf);
	assert_non_null(h->rbuf);
	assert_int_equal(prov->reg_mr(ctx->nic, h->lbuf, blen, NIC_ACCESS_ALL, &h->lmr), 0);
	assert_int_equal(prov->reg_mr(h->rnic, h->rbuf, blen, NIC_ACCESS_ALL, &h->rmr), 0);
	h->jobs = calloc(max_jobs, sizeof(*h->jobs));
	assert_non_null(h->jobs);
	h->max_jobs = max_jobs;

	h->nq = nq;
	h->max_wr = max_wr;
	for (uint32_t i = 0; i < nq; i++) {
		add_qp(h, i);
		slice_list_init(&h->pend[i]);
	}
}

static void harness_fini(struct harness *h)
{
	const struct nic_provider *prov = h->ctx->prov;

	for (uint32_t i = 0; i < h->nq; i++)
		qpx_destroy(h->ctx, h->q[i]);
	for (uint32_t i = 0; i < h->nq; i++)
		assert_null(h->ctx->qps[i]);
	if (prov == &nic_loop_provider) {
		prov->cq_destroy(h->ctx->cq);
		assert_int_equal(prov->dereg_mr(h->ctx->nic, &h->lmr), 0);
		assert_int_equal(prov->dereg_mr(h->rnic, &h->rmr), 0);
		prov->close(h->ctx->nic);
		prov->close(h->rnic);
	}
	slice_pool_fini(&h->pool);
	free(h->jobs);
	free(h->lbuf);
	free(h->rbuf);
	free(h->ctx);
	H = NULL;
}

/* A new job of len bytes: its source filled, its target zero.  NULL if the pool is dry. */
static struct slice *new_job(struct harness *h, uint8_t op, uint32_t len)
{
	struct slice *s;
	struct job *j;
	uint32_t id;
	uint8_t *src;

	assert_true(len >= 1 && len <= REG);
	if (h->njobs == h->max_jobs)
		return NULL;
	s = slice_get(&h->pool);
	if (!s)
		return NULL;
	id = h->njobs++;
	j = &h->jobs[id];
	j->state = J_PENDING;
	j->op = op;
	j->len = len;
	src = (op == NIC_OP_WRITE ? h->lbuf : h->rbuf) + (size_t)id * REG;
	for (uint32_t k = 0; k < len; k++)
		src[k] = pat(id, k);
	memset(s, 0, sizeof(*s));
	s->rq = (struct ferry_rq *)(void *)j;
	s->local = (uint64_t)(uintptr_t)(h->lbuf + (size_t)id * REG);
	s->remote = (uint64_t)(uintptr_t)(h->rbuf + (size_t)id * REG);
	s->len = len;
	s->lkey = h->lmr.lkey;
	s->rkey = h->rmr.rkey;
	s->op = op;
	return s;
}

static struct slice *new_rand_job(struct harness *h)
{
	return new_job(h, (rnd() & 1) ? NIC_OP_READ : NIC_OP_WRITE, 1 + (uint32_t)(rnd() % REG));
}

/* Post up to max from slot i's pending list; the count must be exactly the budget. */
static uint32_t do_post(struct harness *h, uint32_t i, uint32_t max)
{
	struct qctx *ctx = h->ctx;
	struct qpx *q = h->q[i];
	struct slice_list *l = &h->pend[i];
	uint32_t want = l->count < max ? l->count : max;
	uint32_t exp = post_budget(&q->depth, &ctx->cq_quota, want);
	uint32_t d0 = q->depth.depth, c0 = ctx->cq_quota.depth, n0 = l->count;
	uint64_t wp0 = h->ctx->ctr.wrs_posted;
	struct slice *s = l->head;
	uint32_t got;

	if (exp > POST_MAX_CHAIN)
		exp = POST_MAX_CHAIN;
	if (exp < want)
		h->held++;
	/* The first exp pending slices go, in list order. */
	for (uint32_t k = 0; k < exp; k++, s = s->next) {
		assert_int_equal(job_of(s)->state, J_PENDING);
		job_of(s)->state = J_POSTED;
		job_of(s)->slot = (uint8_t)i;
	}
	got = qpx_post(ctx, q, l, max, 0);
	assert_int_equal(got, exp);
	assert_int_equal(q->depth.depth, d0 + exp);
	assert_int_equal(ctx->cq_quota.depth, c0 + exp);
	/* Back-pressure keeps the rest, in order, at the head of the list. */
	assert_int_equal(l->count, n0 - exp);
	assert_ptr_equal(l->head, s);
	assert_int_equal(h->ctx->ctr.wrs_posted, wp0 + exp);
	h->posted += exp;
	return got;
}

static void check_invariants(struct harness *h)
{
	struct qctx *ctx = h->ctx;
	struct loop_counters lc;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < h->nq; i++) {
		const struct qpx *q = h->q[i];

		assert_true(q->depth.depth <= q->depth.max);
		assert_int_equal(q->depth.max, h->max_wr);
		sum += q->depth.depth;
		/* A QP that failed a WR is broken; nothing else breaks it here. */
		if (h->slot_errs[i])
			assert_true(q->broken);
		if (q->broken)
			assert_true(h->slot_errs[i] || h->slot_killed[i]);
	}
	assert_true(ctx->cq_quota.depth <= ctx->cq_quota.max);
	assert_int_equal(sum, ctx->cq_quota.depth);
	/* Exact: every WR posted and not retired is counted once, nowhere twice. */
	assert_int_equal(h->posted - h->retired, sum);
	assert_int_equal(h->ctx->ctr.wrs_posted, h->posted);
	assert_int_equal(h->ctx->ctr.completions, h->retired);
	assert_int_equal(h->ctx->ctr.wr_errors, h->errors);
	assert_int_equal(h->ctx->ctr.provider_errors, 0);
	loop_get_counters(ctx->nic, &lc);
	assert_int_equal(lc.sq_overflows, 0);
	assert_int_equal(lc.cq_overflows, 0);
}

static int poll_once(struct harness *h)
{
	int n = qctx_poll(h->ctx);

	assert_true(n >= 0);
	return n;
}

/* Poll until nothing is outstanding; bounded so that a leak fails instead of hanging. */
static void drain(struct harness *h)
{
	for (int i = 0; i < 100000 && h->ctx->cq_quota.depth; i++) {
		poll_once(h);
		check_invariants(h);
	}
	assert_int_equal(h->ctx->cq_quota.depth, 0);
}

/* Byte-exact outcome of job id: copied on success, untouched on failure. */
static void check_job_bytes(const struct harness *h, uint32_t id)
{
	const struct job *j = &h->jobs[id];
	const uint8_t *src = (j->op == NIC_OP_WRITE ? h->lbuf : h->rbuf) + (size_t)id * REG;
	const uint8_t *dst = (j->op == NIC_OP_WRITE ? h->rbuf : h->lbuf) + (size_t)id * REG;

	for (uint32_t k = 0; k < j->len; k++) {
		if (src[k] != pat(id, k))
			fail_msg("job %u: source byte %u changed", id, k);
		if (dst[k] != (j->err ? 0 : pat(id, k)))
			fail_msg("job %u (%s, len %u, err %d): target byte %u is %#x", id,
				 j->op == NIC_OP_WRITE ? "write" : "read", j->len, j->err, k, dst[k]);
	}
	/* Nothing written past the slice, on either side. */
	for (uint32_t k = j->len; k < REG; k++)
		if (dst[k] || src[k])
			fail_msg("job %u: byte %u past len %u touched", id, k, j->len);
}

/* ---- deterministic cases ---------------------------------------------- */

/* One chain of n WRs with signal_every 4: CQEs = n/4 (+1 if n%4); all retire in order. */
static void test_selective_signalling(void **state)
{
	static const struct {
		uint32_t n, every, cqes;
	} c[] = {
		{ 16, 4, 4 }, { 5, 4, 2 }, { 1, 4, 1 }, { 3, 4, 1 }, { 4, 4, 1 },
		{ 16, 1, 16 }, { 16, 16, 1 }, { 16, 100, 1 }, { 7, 2, 4 },
	};
	struct harness hs, *h = &hs;

	(void)state;
	for (size_t t = 0; t < sizeof(c) / sizeof(c[0]); t++) {
		uint64_t cqes0;
		uint32_t first;

		harness_init(h, 1, 16, 64, c[t].every, 64, 64);
		for (uint32_t i = 0; i < c[t].n; i++)
			slice_list_push(&h->pend[0], new_rand_job(h));
		assert_int_equal(do_post(h, 0, UINT32_MAX), c[t].n);
		check_invariants(h);
		/* Nothing moves until the CQ is polled (loop executes WRs at poll). */
		assert_int_equal(h->retired, 0);
		cqes0 = h->ctx->ctr.cqes;
		assert_int_equal(poll_once(h), c[t].cqes);
		assert_int_equal(h->ctx->ctr.cqes - cqes0, c[t].cqes);
		/* One poll retired the whole chain, through unsignalled WRs too. */
		assert_int_equal(h->retired, c[t].n);
		assert_int_equal(h->q[0]->depth.depth, 0);
		assert_int_equal(h->ctx->cq_quota.depth, 0);
		check_invariants(h);
		/* RC order: retired in post order, successfully. */
		first = h->jobs[0].order;
		for (uint32_t i = 0; i < c[t].n; i++) {
			assert_int_equal(h->jobs[i].state, J_DONE);
			assert_int_equal(h->jobs[i].err, 0);
			assert_int_equal(h->jobs[i].order, first + i);
			check_job_bytes(h, i);
		}
		/* An empty CQ stays empty. */
		assert_int_equal(poll_once(h), 0);
		harness_fini(h);
	}
}

/* The latency callback's view: what a completion entry reported. */
static uint64_t lat_ticks, lat_slices, lat_calls;

static void test_latency(void *owner, uint64_t ticks, uint32_t n)
{
	assert_ptr_equal(owner, H);
	lat_ticks = ticks;
	lat_slices += n;
	lat_calls++;
}

static const struct qp_events latency_events = { .slice_done = test_slice_done,
						  .latency = test_latency };

/*
 * A slice posted and completed within one pass (ctx->now unchanged, as when
 * rxe runs the round trip inside the doorbell) counts the time from its post
 * to the poll that found it, not 0: the poll reads the clock.
 */
static void test_latency_same_pass(void **state)
{
	struct harness hs, *h = &hs;
	uint64_t t_post, t_after;
	struct slice *s;

	(void)state;
	harness_init(h, 1, 16, 64, 4, 64, 64);
	h->ctx->ev = &latency_events;
	lat_ticks = lat_slices = lat_calls = 0;
	for (uint32_t i = 0; i < 6; i++)
		slice_list_push(&h->pend[0], new_rand_job(h));
	for (s = h->pend[0].head; s; s = s->next)
		job_of(s)->state = J_POSTED;
	t_post = ferry_tsc();
	h->ctx->now = t_post; /* the pass's clock, for both the post and the poll */
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, t_post), 6);
	h->posted += 6;
	assert_int_equal(poll_once(h), 2); /* signal_every 4: two CQEs for six WRs */
	t_after = ferry_tsc();
	assert_int_equal(lat_calls, 2);
	assert_int_equal(lat_slices, 6);
	assert_true(lat_ticks > 0);
	assert_true(lat_ticks <= t_after - t_post);
	assert_int_equal(h->retired, 6);
	check_invariants(h);
	harness_fini(h);
}

/* QP room and CQ room both bind; refusals keep everything, in order. */
static void test_backpressure(void **state)
{
	struct harness hs, *h = &hs;

	(void)state;
	/* 2 QPs of 8 WRs, but only 12 CQ credits. */
	harness_init(h, 2, 8, 12, 4, 64, 64);
	for (int i = 0; i < 20; i++)
		slice_list_push(&h->pend[0], new_rand_job(h));
	for (int i = 0; i < 20; i++)
		slice_list_push(&h->pend[1], new_rand_job(h));
	assert_int_equal(do_post(h, 0, UINT32_MAX), 8);  /* QP full */
	assert_int_equal(do_post(h, 0, UINT32_MAX), 0);
	assert_int_equal(do_post(h, 1, 2), 2);           /* max binds */
	assert_int_equal(do_post(h, 1, UINT32_MAX), 2);  /* CQ quota binds */
	assert_int_equal(h->ctx->cq_quota.depth, 12);
	assert_int_equal(do_post(h, 1, UINT32_MAX), 0);
	assert_int_equal(h->pend[0].count, 12);
	assert_int_equal(h->pend[1].count, 16);
	check_invariants(h);
	/* Drain and refill until everything went through. */
	for (int guard = 0; guard < 1000 && (h->pend[0].count || h->pend[1].count); guard++) {
		poll_once(h);
		do_post(h, 0, UINT32_MAX);
		do_post(h, 1, UINT32_MAX);
		check_invariants(h);
	}
	drain(h);
	assert_int_equal(h->retired, 40);
	assert_int_equal(h->errors, 0);
	for (uint32_t i = 0; i < h->njobs; i++)
		check_job_bytes(h, i);
	/* Posting from an empty list is a no-op, not a zero-length doorbell. */
	{
		uint64_t db = h->ctx->ctr.doorbells;

		assert_int_equal(do_post(h, 0, UINT32_MAX), 0);
		assert_int_equal(h->ctx->ctr.doorbells, db);
	}
	assert_int_equal(h->pool.avail, h->pool.size);
	harness_fini(h);
}

/* A bad rkey fails that slice only: earlier ones succeed, later ones flush. */
static void test_error_attribution(void **state)
{
	struct harness hs, *h = &hs;
	struct slice *s[6];

	(void)state;
	harness_init(h, 2, 16, 64, 4, 64, 64);
	for (int i = 0; i < 6; i++) {
		s[i] = new_job(h, NIC_OP_WRITE, 100);
		slice_list_push(&h->pend[0], s[i]);
	}
	s[3]->rkey ^= 0x00010000; /* another generation of the same MR slot: stale */
	assert_int_equal(do_post(h, 0, UINT32_MAX), 6);
	drain(h);
	check_invariants(h);
	assert_int_equal(h->jobs[0].err, 0);
	assert_int_equal(h->jobs[1].err, 0);
	assert_int_equal(h->jobs[2].err, 0);
	assert_int_equal(h->jobs[3].err, -EFAULT);
	assert_int_equal(h->jobs[4].err, -ECANCELED);
	assert_int_equal(h->jobs[5].err, -ECANCELED);
	for (uint32_t i = 0; i < 6; i++)
		check_job_bytes(h, i);
	assert_true(h->q[0]->broken);
	assert_false(h->q[1]->broken);
	/* The other QP on the same CQ is unaffected. */
	slice_list_push(&h->pend[1], new_job(h, NIC_OP_READ, 10));
	assert_int_equal(do_post(h, 1, UINT32_MAX), 1);
	drain(h);
	assert_int_equal(h->jobs[6].err, 0);
	check_job_bytes(h, 6);
	assert_int_equal(h->ctx->ctr.wr_errors, 3);
	harness_fini(h);
}

/*
 * The provider refuses a WR in the middle of a chain (an invalid opcode):
 * the slices from it on fail at once, the ones before it flush, the QP is
 * broken, and the counters come back to 0.  This is the one path where a
 * provider error is expected.
 */
static void test_post_failure_mid_chain(void **state)
{
	struct harness hs, *h = &hs;
	struct slice *s[5];
	uint32_t got;

	(void)state;
	harness_init(h, 1, 16, 64, 4, 64, 64);
	for (int i = 0; i < 5; i++) {
		s[i] = new_job(h, NIC_OP_WRITE, 64);
		slice_list_push(&h->pend[0], s[i]);
		job_of(s[i])->state = J_POSTED;
		job_of(s[i])->slot = 0;
	}
	s[2]->op = 7;
	got = qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0);
	/* All five left the list: two went out, three failed at once. */
	assert_int_equal(got, 5);
	assert_int_equal(h->pend[0].count, 0);
	assert_int_equal(h->ctx->ctr.provider_errors, 1);
	assert_true(h->q[0]->broken);
	/* Two went out, the second unsignalled: a drain marker follows them. */
	assert_int_equal(h->q[0]->depth.depth, 3);
	assert_int_equal(h->ctx->cq_quota.depth, 3);
	assert_int_equal(h->retired, 3);
	for (int i = 2; i < 5; i++) {
		assert_int_equal(h->jobs[i].state, J_DONE);
		assert_int_equal(h->jobs[i].err, -EINVAL);
	}
	/* The two that were posted (the second one unsignalled) come back as flushes. */
	for (int i = 0; i < 100 && h->ctx->cq_quota.depth; i++)
		poll_once(h);
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	assert_int_equal(h->retired, 5);
	assert_int_equal(h->jobs[0].err, -ECANCELED);
	assert_int_equal(h->jobs[1].err, -ECANCELED);
	for (uint32_t i = 0; i < 5; i++)
		check_job_bytes(h, i);
	assert_int_equal(h->ctx->ctr.wrs_posted, 3);
	assert_int_equal(h->ctx->ctr.completions, 3);
	assert_int_equal(h->ctx->ctr.provider_errors, 1);
	assert_int_equal(h->pool.avail, h->pool.size);
	harness_fini(h);
}

/* ---- a scripted provider: CQEs the loop NIC would never produce -------- */

/*
 * post records the chain (and can refuse it at a chosen WR); poll returns
 * scripted completions.  This reaches the defensive paths of qctx_poll
 * (stale, duplicate and foreign CQEs, poll errors) and of qpx_post (a
 * refused post), which a correct NIC never triggers.
 */
static struct fake {
	struct nic_wr wrs[1024];
	uint32_t nwr;
	int post_rc;          /* returned when the chain reaches fail_at */
	int fail_at;          /* index in the chain; -1 never; -2 queue all, fail without *bad */
	struct nic_wc script[64];
	int nscript;
	int poll_rc;          /* one-shot poll failure */
	int set_error_calls;
	int qps_live;
} F;

static int fake_qp_create(struct nic *nic, struct nic_cq *cq, uint32_t max_wr, struct nic_qp **out)
{
	(void)nic;
	(void)cq;
	(void)max_wr;
	F.qps_live++;
	*out = (struct nic_qp *)(void *)&F; /* any non-NULL handle */
	return 0;
}

static int fake_qp_connect(struct nic_qp *qp, const struct nic_addr *remote,
			   const struct nic_qp_info *rqp)
{
	(void)qp;
	(void)remote;
	(void)rqp;
	return 0;
}

static int fake_qp_set_error(struct nic_qp *qp)
{
	(void)qp;
	F.set_error_calls++;
	return 0;
}

static void fake_qp_destroy(struct nic_qp *qp)
{
	(void)qp;
	F.qps_live--;
}

static int fake_post(struct nic_qp *qp, struct nic_wr *wr, struct nic_wr **bad)
{
	(void)qp;
	for (int k = 0; wr; wr = wr->next, k++) {
		if (k == F.fail_at) {
			*bad = wr;
			return F.post_rc;
		}
		assert_true(F.nwr < ARRAY_SIZE(F.wrs));
		F.wrs[F.nwr] = *wr;
		F.wrs[F.nwr++].next = NULL;
	}
	return F.fail_at == -2 ? F.post_rc : 0; /* librxe: its doorbell failed */
}

static int fake_poll(struct nic_cq *cq, int n, struct nic_wc *wc)
{
	int k;

	(void)cq;
	if (F.poll_rc) {
		k = F.poll_rc;
		F.poll_rc = 0;
		return k;
	}
	k = F.nscript < n ? F.nscript : n;
	memcpy(wc, F.script, (size_t)k * sizeof(*wc));
	memmove(F.script, F.script + k, (size_t)(F.nscript - k) * sizeof(*wc));
	F.nscript -= k;
	return k;
}

static const struct nic_provider fake_provider = {
	.name = "fake",
	.qp_create = fake_qp_create,
	.qp_connect = fake_qp_connect,
	.qp_set_error = fake_qp_set_error,
	.qp_destroy = fake_qp_destroy,
	.post = fake_post,
	.poll = fake_poll,
};

static void fake_init(struct harness *h, uint32_t nq, uint32_t max_wr, uint32_t cqe,
		      uint32_t signal_every)
{
	struct qctx *ctx;

	memset(&F, 0, sizeof(F));
	F.fail_at = -1;
	memset(h, 0, sizeof(*h));
	H = h;
	ctx = aligned_alloc(FERRY_CACHE_LINE, sizeof(*ctx));
	assert_non_null(ctx);
	memset(ctx, 0, sizeof(*ctx));
	h->ctx = ctx;
	ctx->prov = &fake_provider;
	ctx->nic = (struct nic *)(void *)&F;
	ctx->cq = (struct nic_cq *)(void *)&F;
	ctx->cq_quota.max = cqe;
	assert_int_equal(slice_pool_init(&h->pool, 256, -1), 0);
	ctx->ev = &test_events;
	ctx->owner = h;
	ctx->signal_every = signal_every;
	ctx->max_reads = 1u << 30; /* test_read_bound sets its own */
	h->max_jobs = 256;
	h->lbuf = calloc(h->max_jobs, REG);
	h->rbuf = calloc(h->max_jobs, REG);
	h->jobs = calloc(h->max_jobs, sizeof(*h->jobs));
	assert_non_null(h->lbuf);
	assert_non_null(h->rbuf);
	assert_non_null(h->jobs);
	h->nq = nq;
	h->max_wr = max_wr;
	for (uint32_t i = 0; i < nq; i++) {
		add_qp(h, i);
		slice_list_init(&h->pend[i]);
	}
}

static void script_cqe(uint32_t qidx, uint32_t seq, uint16_t status)
{
	assert_true(F.nscript < (int)ARRAY_SIZE(F.script));
	F.script[F.nscript].wr_id = (uint64_t)qidx << 32 | seq;
	F.script[F.nscript].status = status;
	F.nscript++;
}

static void fake_post_jobs(struct harness *h, uint32_t i, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		slice_list_push(&h->pend[i], new_job(h, NIC_OP_WRITE, 8));
	assert_int_equal(do_post(h, i, UINT32_MAX), n);
}

/*
 * qpx_abandon: every outstanding slice ends with the error, the QP's depth
 * and the CQ credits come back, the CQ's room shrinks by as many until
 * their late completions come.  A QP attached later at the same index has
 * other wr_ids: a completion of the abandoned one that comes after all
 * retires nothing of the new one, and gives back one entry of room.
 */
static void test_abandon_and_generation(void **state)
{
	struct harness hs, *h = &hs;
	uint64_t stale;

	(void)state;
	fake_init(h, 1, 16, 64, 4);
	fake_post_jobs(h, 0, 8);
	stale = F.wrs[3].wr_id;
	qpx_abandon(h->ctx, h->q[0], -EIO);
	for (uint32_t k = 0; k < 8; k++) {
		assert_int_equal(h->jobs[k].state, J_DONE);
		assert_int_equal(h->jobs[k].err, -EIO);
	}
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	assert_int_equal(h->ctx->cq_quota.max, 64 - 8);
	/* Replaced at the same index: a new generation in its wr_ids. */
	qpx_destroy(h->ctx, h->q[0]);
	add_qp(h, 0);
	fake_post_jobs(h, 0, 4);
	assert_true(F.wrs[8 + 3].wr_id != stale);
	assert_true((uint32_t)F.wrs[8 + 3].wr_id == (uint32_t)stale); /* same sequence */
	F.script[F.nscript].wr_id = stale; /* the old QP's, late */
	F.script[F.nscript++].status = NIC_WC_SUCCESS;
	assert_int_equal(poll_once(h), 1);
	assert_int_equal(h->q[0]->depth.depth, 4); /* nothing of the new QP retired */
	/* ... and it gives back the entry set aside for it: not a bug. */
	assert_int_equal(h->ctx->ctr.provider_errors, 0);
	assert_int_equal(h->ctx->cq_quota.max, 64 - 8 + 1);
	for (uint32_t k = 0; k < 7; k++) { /* the other seven come too */
		F.script[F.nscript].wr_id = stale;
		F.script[F.nscript++].status = NIC_WC_FLUSH_ERR;
	}
	assert_int_equal(poll_once(h), 7);
	assert_int_equal(h->ctx->cq_quota.max, 64);
	F.script[F.nscript].wr_id = stale; /* one more than it lent: a bug again */
	F.script[F.nscript++].status = NIC_WC_SUCCESS;
	assert_int_equal(poll_once(h), 1);
	assert_int_equal(h->ctx->ctr.provider_errors, 1);
	assert_int_equal(h->ctx->cq_quota.max, 64);
	F.script[F.nscript].wr_id = F.wrs[8 + 3].wr_id;
	F.script[F.nscript++].status = NIC_WC_SUCCESS;
	assert_int_equal(poll_once(h), 1);
	assert_int_equal(h->q[0]->depth.depth, 0);
	for (uint32_t k = 8; k < 12; k++)
		assert_int_equal(h->jobs[k].err, 0);
	harness_fini(h);
}

static void test_wc_status_errno(void **state)
{
	(void)state;
	assert_int_equal(wc_status_errno(NIC_WC_SUCCESS), 0);
	assert_int_equal(wc_status_errno(NIC_WC_LOC_PROT_ERR), -EFAULT);
	assert_int_equal(wc_status_errno(NIC_WC_REM_ACCESS_ERR), -EFAULT);
	assert_int_equal(wc_status_errno(NIC_WC_FLUSH_ERR), -ECANCELED);
	assert_int_equal(wc_status_errno(NIC_WC_RETRY_EXC_ERR), -EHOSTUNREACH);
	assert_int_equal(wc_status_errno(NIC_WC_GENERAL_ERR), -EIO);
	assert_int_equal(wc_status_errno(0xffff), -EIO);
}

/* Duplicate, stale, future and foreign CQEs are refused; nothing retires twice. */
static void test_bogus_cqes(void **state)
{
	struct harness hs, *h = &hs;

	(void)state;
	fake_init(h, 2, 16, 64, 4);
	fake_post_jobs(h, 0, 8);
	/* WR3 and WR7 are the signalled ones. */
	assert_int_equal(F.nwr, 8);
	for (uint32_t k = 0; k < 8; k++)
		assert_int_equal(F.wrs[k].signaled, k == 3 || k == 7);
	script_cqe(0, 3, NIC_WC_SUCCESS);
	script_cqe(0, 3, NIC_WC_SUCCESS);   /* duplicate */
	script_cqe(0, 2, NIC_WC_SUCCESS);   /* already retired by the one above */
	script_cqe(0, 100, NIC_WC_SUCCESS); /* never posted */
	script_cqe(1, 0, NIC_WC_SUCCESS);   /* QP 1 has nothing outstanding */
	script_cqe(7, 0, NIC_WC_SUCCESS);   /* no such QP */
	script_cqe(0, 7, NIC_WC_SUCCESS);
	assert_int_equal(poll_once(h), 7);
	assert_int_equal(h->ctx->ctr.provider_errors, 5);
	assert_int_equal(h->retired, 8);
	for (uint32_t k = 0; k < 8; k++) {
		assert_int_equal(h->jobs[k].state, J_DONE);
		assert_int_equal(h->jobs[k].order, k);
		assert_int_equal(h->jobs[k].err, 0);
	}
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	assert_false(h->q[0]->broken);
	assert_int_equal(h->ctx->ctr.completions, 8);
	assert_int_equal(h->ctx->ctr.cqes, 7);

	/* A failing poll is a provider error and changes nothing else. */
	fake_post_jobs(h, 1, 3);
	F.poll_rc = -EIO;
	assert_int_equal(qctx_poll(h->ctx), -EIO);
	assert_int_equal(h->ctx->ctr.provider_errors, 6);
	assert_int_equal(h->q[1]->depth.depth, 3);
	script_cqe(1, 2, NIC_WC_SUCCESS);
	assert_int_equal(poll_once(h), 1);
	assert_int_equal(h->q[1]->depth.depth, 0);
	assert_int_equal(h->retired, 11);
	harness_fini(h);
	assert_int_equal(F.qps_live, 0);
}

/* An error CQE on a timed-out QP reports -ETIMEDOUT, for it and its flushes. */
static void test_timed_out_errors(void **state)
{
	struct harness hs, *h = &hs;

	(void)state;
	fake_init(h, 1, 16, 64, 4);
	fake_post_jobs(h, 0, 4);
	h->q[0]->timed_out = 1;
	script_cqe(0, 1, NIC_WC_RETRY_EXC_ERR);
	script_cqe(0, 2, NIC_WC_FLUSH_ERR);
	script_cqe(0, 3, NIC_WC_FLUSH_ERR);
	assert_int_equal(poll_once(h), 3);
	assert_int_equal(h->jobs[0].err, 0); /* completed before the failing WR */
	assert_int_equal(h->jobs[1].err, -ETIMEDOUT);
	assert_int_equal(h->jobs[2].err, -ETIMEDOUT);
	assert_int_equal(h->jobs[3].err, -ETIMEDOUT);
	assert_true(h->q[0]->broken);
	assert_int_equal(h->ctx->ctr.wr_errors, 3);
	assert_int_equal(h->q[0]->depth.depth, 0);
	harness_fini(h);
}

/* The provider refuses a chain: what did not go fails at once, what went flushes. */
static void test_post_refused(void **state)
{
	struct harness hs, *h = &hs;
	struct slice *s;

	(void)state;
	/* Refused at the first WR, with *bad set. */
	fake_init(h, 1, 16, 64, 4);
	for (int k = 0; k < 5; k++) {
		s = new_job(h, NIC_OP_WRITE, 8);
		job_of(s)->state = J_POSTED;
		slice_list_push(&h->pend[0], s);
	}
	F.fail_at = 0;
	F.post_rc = -ENOMEM;
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 5);
	assert_int_equal(h->retired, 5);
	for (int k = 0; k < 5; k++)
		assert_int_equal(h->jobs[k].err, -ENOMEM);
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	assert_int_equal(h->q[0]->tail, 0);
	assert_true(h->q[0]->broken);
	assert_int_equal(F.set_error_calls, 1);
	assert_int_equal(h->ctx->ctr.provider_errors, 1);
	assert_int_equal(h->ctx->ctr.wrs_posted, 0);
	harness_fini(h);

	/* Refused without naming a WR, the chain queued all the same (librxe's
	 * failed doorbell): all count as posted -- the CQ quota holds an entry
	 * for each flush to come, none of them is a stray -- and they end once,
	 * by those flushes, not at the post. */
	fake_init(h, 1, 16, 64, 4);
	for (int k = 0; k < 3; k++) {
		s = new_job(h, NIC_OP_READ, 8);
		job_of(s)->state = J_POSTED;
		slice_list_push(&h->pend[0], s);
	}
	F.fail_at = -2;
	F.post_rc = -EAGAIN;
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 3);
	assert_int_equal(h->retired, 0);
	assert_int_equal(h->q[0]->depth.depth, 3);
	assert_int_equal(h->ctx->cq_quota.depth, 3);
	assert_int_equal(h->q[0]->reads, 3);
	assert_true(h->q[0]->broken);
	assert_int_equal(F.set_error_calls, 1);
	for (uint32_t k = 0; k < 3; k++)
		script_cqe(0, k, NIC_WC_FLUSH_ERR);
	assert_int_equal(poll_once(h), 3);
	assert_int_equal(h->retired, 3);
	for (int k = 0; k < 3; k++)
		assert_int_equal(h->jobs[k].err, -ECANCELED);
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	assert_int_equal(h->q[0]->reads, 0);
	assert_int_equal(h->ctx->ctr.provider_errors, 1); /* the post; no stray */
	harness_fini(h);

	/* Refused at WR 3 of 6: 3 outstanding until their flush CQEs come. */
	fake_init(h, 1, 16, 64, 4);
	for (int k = 0; k < 6; k++) {
		s = new_job(h, NIC_OP_WRITE, 8);
		job_of(s)->state = J_POSTED;
		slice_list_push(&h->pend[0], s);
	}
	F.fail_at = 3;
	F.post_rc = -ENOMEM;
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 6);
	assert_int_equal(h->retired, 3);
	/* WR 2 went out unsignalled: a drain marker (seq 3) follows. */
	assert_int_equal(h->q[0]->depth.depth, 4);
	assert_int_equal(h->ctx->cq_quota.depth, 4);
	for (uint32_t k = 0; k < 4; k++)
		script_cqe(0, k, NIC_WC_FLUSH_ERR);
	assert_int_equal(poll_once(h), 4);
	assert_int_equal(h->retired, 6);
	assert_int_equal(h->q[0]->depth.depth, 0);
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	harness_fini(h);
}

/* A full QP table refuses; a freed index is reused; n_qps is a high-water mark. */
static void test_attach_table(void **state)
{
	static struct qpx dummies[QP_MAX_PER_CORE + 1];
	struct qctx *ctx;

	(void)state;
	ctx = aligned_alloc(FERRY_CACHE_LINE, sizeof(*ctx));
	assert_non_null(ctx);
	memset(ctx, 0, sizeof(*ctx));
	for (uint32_t i = 0; i <= QP_MAX_PER_CORE; i++)
		dummies[i].index = QPX_UNATTACHED;
	for (uint32_t i = 0; i < QP_MAX_PER_CORE; i++) {
		assert_int_equal(qctx_attach(ctx, &dummies[i]), 0);
		assert_int_equal(dummies[i].index, i);
	}
	assert_int_equal(ctx->n_qps, QP_MAX_PER_CORE);
	assert_int_equal(qctx_attach(ctx, &dummies[QP_MAX_PER_CORE]), -ENOSPC);
	assert_int_equal(dummies[QP_MAX_PER_CORE].index, QPX_UNATTACHED);
	/* What qpx_destroy does to the table. */
	ctx->qps[500] = NULL;
	assert_int_equal(qctx_attach(ctx, &dummies[QP_MAX_PER_CORE]), 0);
	assert_int_equal(dummies[QP_MAX_PER_CORE].index, 500);
	assert_int_equal(ctx->n_qps, QP_MAX_PER_CORE);
	free(ctx);
}

/* Sequence numbers wrap at 2^32 mid-flight: wr_id and the FIFO keep working. */
static void test_sequence_wrap(void **state)
{
	struct harness hs, *h = &hs;
	struct qpx *q;

	(void)state;
	harness_init(h, 1, 10, 24, 3, 64, 512);
	q = h->q[0];
	/* White box: an idle QP that has already retired 2^32 - 7 WRs. */
	q->head = q->tail = UINT32_MAX - 6;
	for (int round = 0; round < 20; round++) {
		for (int k = 0; k < 17; k++)
			slice_list_push(&h->pend[0], new_rand_job(h));
		while (h->pend[0].count || h->ctx->cq_quota.depth) {
			do_post(h, 0, 1 + (uint32_t)(rnd() % 12));
			poll_once(h);
			check_invariants(h);
		}
	}
	assert_true(q->tail < 1000); /* it did wrap */
	assert_int_equal(q->head, q->tail);
	assert_int_equal(h->retired, h->njobs);
	for (uint32_t i = 0; i < h->njobs; i++) {
		assert_int_equal(h->jobs[i].order, i);
		assert_int_equal(h->jobs[i].err, 0);
		check_job_bytes(h, i);
	}
	harness_fini(h);
}

/* One doorbell carries at most POST_MAX_CHAIN WRs, whatever the room. */
static void test_chain_cap(void **state)
{
	struct harness hs, *h = &hs;

	(void)state;
	harness_init(h, 1, 1024, 2048, 16, 2048, 600);
	for (int k = 0; k < 600; k++)
		slice_list_push(&h->pend[0], new_rand_job(h));
	assert_int_equal(do_post(h, 0, UINT32_MAX), POST_MAX_CHAIN);
	assert_int_equal(do_post(h, 0, UINT32_MAX), POST_MAX_CHAIN);
	assert_int_equal(do_post(h, 0, UINT32_MAX), 600 - 2 * POST_MAX_CHAIN);
	assert_int_equal(h->ctx->ctr.doorbells, 3);
	check_invariants(h);
	drain(h);
	check_invariants(h);
	assert_int_equal(h->retired, 600);
	for (uint32_t i = 0; i < h->njobs; i++)
		check_job_bytes(h, i);
	harness_fini(h);
}

/* ---- randomized schedules --------------------------------------------- */

struct rparams {
	const char *name;
	uint32_t nq, max_wr, cqe, signal_every;
	uint32_t steps, max_jobs;
	uint32_t err_ppm, fatal_ppm;
	uint32_t kill_per_10k;  /* QPs moved to error by "teardown", per 10k steps */
	uint64_t seed;
};

/* A broken QP that has drained is replaced, as an endpoint would be reconnected. */
static void replace_broken(struct harness *h)
{
	for (uint32_t i = 0; i < h->nq; i++) {
		if (!h->q[i]->broken || h->q[i]->depth.depth)
			continue;
		qpx_destroy(h->ctx, h->q[i]);
		assert_null(h->ctx->qps[i]);
		add_qp(h, i);
		h->replaced++;
	}
}

static void run_random(const struct rparams *p)
{
	struct harness hs, *h = &hs;
	struct loop_counters lc;
	uint64_t ok = 0, ok_bytes = 0, unreach = 0, canceled = 0, polls = 0;
	uint32_t pool_size = 2 * p->cqe + 32;
	int guard;

	rng_state = p->seed;
	harness_init(h, p->nq, p->max_wr, p->cqe, p->signal_every, pool_size, p->max_jobs);
	if (p->err_ppm || p->fatal_ppm) {
		struct loop_faults f = {
			.err_ppm = p->err_ppm,
			.qp_fatal_ppm = p->fatal_ppm,
			.seed = p->seed,
		};

		/* Faults belong to the context whose CQ executes the WRs: the local one. */
		loop_set_faults(h->ctx->nic, &f);
	}

	for (uint32_t step = 0; step < p->steps; step++) {
		uint64_t r = rnd() % 100;
		uint32_t i = (uint32_t)(rnd() % h->nq);

		if (r < 55) {
			/* Cut some new slices for slot i, then one doorbell. */
			uint32_t k = (uint32_t)(rnd() % 24);

			while (k--) {
				struct slice *s = new_rand_job(h);

				if (!s)
					break; /* pool dry or job budget spent: back-pressure */
				slice_list_push(&h->pend[i], s);
			}
			/* Like ep_post: a broken QP takes nothing more. */
			if (!h->q[i]->broken)
				do_post(h, i, 1 + (uint32_t)(rnd() % 40));
		} else if (p->kill_per_10k && rnd() % 10000 < p->kill_per_10k) {
			/* Teardown: move a QP to error with work in flight. */
			h->q[i]->broken = 1;
			h->slot_killed[i] = 1;
			assert_int_equal(h->ctx->prov->qp_set_error(h->q[i]->nqp), 0);
		} else {
			poll_once(h);
			polls++;
		}
		if (p->err_ppm || p->fatal_ppm || p->kill_per_10k)
			replace_broken(h);
		check_invariants(h);
	}

	/* Wind down: post what is pending, poll, until nothing is left anywhere. */
	for (guard = 0; guard < 200000; guard++) {
		uint32_t pending = 0;

		for (uint32_t i = 0; i < h->nq; i++) {
			if (!h->q[i]->broken)
				do_post(h, i, UINT32_MAX);
			pending += h->pend[i].count;
		}
		if (!pending && !h->ctx->cq_quota.depth)
			break;
		poll_once(h);
		replace_broken(h);
		check_invariants(h);
	}
	assert_true(guard < 200000);
	for (uint32_t i = 0; i < h->nq; i++) {
		assert_int_equal(h->q[i]->depth.depth, 0);
		assert_int_equal(h->pend[i].count, 0);
	}
	assert_int_equal(h->ctx->cq_quota.depth, 0);
	check_invariants(h);

	/* Every slice retired exactly once, with the right bytes. */
	assert_int_equal(h->posted, h->njobs);
	assert_int_equal(h->retired, h->njobs);
	for (uint32_t id = 0; id < h->njobs; id++) {
		const struct job *j = &h->jobs[id];

		assert_int_equal(j->state, J_DONE);
		check_job_bytes(h, id);
		if (!j->err) {
			ok++;
			ok_bytes += j->len;
		} else if (j->err == -EHOSTUNREACH) {
			unreach++;
		} else if (j->err == -ECANCELED) {
			canceled++;
		} else {
			fail_msg("job %u: unexpected error %d", id, j->err);
		}
	}
	assert_int_equal(h->pool.avail, h->pool.size);

	/* The NIC's view agrees with the runtime's. */
	loop_get_counters(h->ctx->nic, &lc);
	assert_int_equal(lc.wrs_executed, ok);
	assert_int_equal(lc.bytes_copied, ok_bytes);
	assert_int_equal(lc.errs_injected, unreach);
	assert_true(lc.fatal_injected <= canceled);
	assert_int_equal(lc.lost_injected, 0);
	assert_int_equal(h->ctx->ctr.wr_errors, unreach + canceled);
	/* Selective signalling: fewer CQEs than WRs unless every WR reports. */
	assert_true(h->ctx->ctr.cqes <= h->posted);
	if (!p->err_ppm && !p->fatal_ppm && !p->kill_per_10k) {
		assert_int_equal(h->errors, 0);
		assert_int_equal(ok, h->njobs);
		if (p->signal_every > 1)
			assert_true(h->ctx->ctr.cqes < h->posted);
	} else {
		/* The faults really happened, and QPs really were replaced. */
		if (p->err_ppm)
			assert_true(unreach > 0);
		if (p->fatal_ppm)
			assert_true(lc.fatal_injected > 0);
		assert_true(h->replaced > 0);
		assert_true(ok > h->njobs / 2);
	}
	print_message("  %-10s %u slices (%llu ok, %llu unreachable, %llu flushed), %llu CQEs, "
		      "%llu polls, %llu posts held back, %llu QPs replaced\n",
		      p->name, h->njobs, (unsigned long long)ok, (unsigned long long)unreach,
		      (unsigned long long)canceled, (unsigned long long)h->ctx->ctr.cqes,
		      (unsigned long long)polls, (unsigned long long)h->held,
		      (unsigned long long)h->replaced);
	harness_fini(h);
}

/* At most max_reads RDMA READs per QP are outstanding; WRITEs are not held. */
static void test_read_bound(void **state)
{
	struct harness hs, *h = &hs;

	(void)state;
	harness_init(h, 1, 64, 256, 4, 256, 256);
	h->ctx->max_reads = 4;
	for (int i = 0; i < 10; i++) {
		struct slice *s = new_job(h, i == 2 ? NIC_OP_WRITE : NIC_OP_READ, 64);

		job_of(s)->state = J_POSTED;
		job_of(s)->slot = 0;
		slice_list_push(&h->pend[0], s);
	}
	/* READ, READ, WRITE, READ, READ | READ...: five go, the fifth READ waits. */
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 5);
	assert_int_equal(h->q[0]->reads, 4);
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 0);
	while (h->ctx->cq_quota.depth)
		poll_once(h);
	assert_int_equal(h->q[0]->reads, 0);
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 4);
	while (h->ctx->cq_quota.depth)
		poll_once(h);
	assert_int_equal(qpx_post(h->ctx, h->q[0], &h->pend[0], UINT32_MAX, 0), 1);
	while (h->ctx->cq_quota.depth)
		poll_once(h);
	assert_int_equal(h->retired, 10);
	assert_int_equal(h->q[0]->reads, 0);
	for (uint32_t i = 0; i < 10; i++)
		check_job_bytes(h, i);
	harness_fini(h);
}

static void test_random_qp_bound(void **state)
{
	/* 3 x 16 WRs < 64 CQEs: QP room is what binds. */
	static const struct rparams p = {
		.name = "qp-bound", .nq = 3, .max_wr = 16, .cqe = 64, .signal_every = 4,
		.steps = 20000, .max_jobs = 150000, .seed = 1,
	};

	(void)state;
	run_random(&p);
}

static void test_random_cq_bound(void **state)
{
	/* 3 x 32 WRs > 40 CQEs: the CQ quota binds; CQ smaller than a poll burst too. */
	static const struct rparams p = {
		.name = "cq-bound", .nq = 3, .max_wr = 32, .cqe = 40, .signal_every = 8,
		.steps = 20000, .max_jobs = 150000, .seed = 2,
	};

	(void)state;
	run_random(&p);
}

static void test_random_big_cq(void **state)
{
	/* More CQEs than one poll burst (64) can take: CQEs wait across polls. */
	static const struct rparams p = {
		.name = "big-cq", .nq = 4, .max_wr = 64, .cqe = 200, .signal_every = 1,
		.steps = 20000, .max_jobs = 150000, .seed = 3,
	};

	(void)state;
	run_random(&p);
}

static void test_random_odd_sizes(void **state)
{
	/* max_wr not a power of two (FIFO rounds up), CQ quota below one QP's worth. */
	static const struct rparams p = {
		.name = "odd-sizes", .nq = 2, .max_wr = 10, .cqe = 7, .signal_every = 3,
		.steps = 20000, .max_jobs = 150000, .seed = 6,
	};

	(void)state;
	run_random(&p);
}

static void test_random_faults(void **state)
{
	static const struct rparams p = {
		.name = "faults", .nq = 3, .max_wr = 16, .cqe = 64, .signal_every = 4,
		.steps = 20000, .max_jobs = 150000, .err_ppm = 20000, .fatal_ppm = 5000,
		.seed = 4,
	};

	(void)state;
	run_random(&p);
}

static void test_random_faults_cq_bound(void **state)
{
	static const struct rparams p = {
		.name = "faults-cq", .nq = 3, .max_wr = 32, .cqe = 40, .signal_every = 8,
		.steps = 20000, .max_jobs = 150000, .err_ppm = 20000, .fatal_ppm = 5000,
		.kill_per_10k = 20, .seed = 5,
	};

	(void)state;
	run_random(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_post_budget),
		cmocka_unit_test(test_selective_signalling),
		cmocka_unit_test(test_latency_same_pass),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_error_attribution),
		cmocka_unit_test(test_post_failure_mid_chain),
		cmocka_unit_test(test_wc_status_errno),
		cmocka_unit_test(test_bogus_cqes),
		cmocka_unit_test(test_abandon_and_generation),
		cmocka_unit_test(test_timed_out_errors),
		cmocka_unit_test(test_post_refused),
		cmocka_unit_test(test_attach_table),
		cmocka_unit_test(test_sequence_wrap),
		cmocka_unit_test(test_chain_cap),
		cmocka_unit_test(test_read_bound),
		cmocka_unit_test(test_random_qp_bound),
		cmocka_unit_test(test_random_cq_bound),
		cmocka_unit_test(test_random_big_cq),
		cmocka_unit_test(test_random_odd_sizes),
		cmocka_unit_test(test_random_faults),
		cmocka_unit_test(test_random_faults_cq_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
