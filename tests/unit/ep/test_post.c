/* SPDX-License-Identifier: MIT */
/*
 * ep_post's back-pressure counters (ep/ep.c) over the loop NIC: when a QP
 * takes nothing, the stat names the resource that had no room -- qp_full for
 * the QP (its send queue depth, or its RDMA READ credits: at most max_reads
 * READs outstanding), cq_full only for the core's CQ quota.  These are the
 * ferry_core_stats counters of the same names (runtime/ferry.h).
 *
 * This test is the runtime: one core's qctx, one endpoint with one QP, a
 * slice_done that counts what retires.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ep/ep.h"
#include "qp/loop/loop.h"
#include "qp/nic.h"
#include "qp/post/post.h"

#define NSLICES 4
#define LEN 64

struct fixture {
	struct qctx *ctx;
	struct nic *rnic; /* the "remote" device */
	struct nic_addr raddr;
	struct nic_mr lmr, rmr;
	uint8_t lbuf[NSLICES * LEN], rbuf[NSLICES * LEN];
	struct slice *sl;
	struct ferry_ep *ep;
	uint32_t done, errs;
};

static void count_done(void *owner, struct slice *s, int err)
{
	struct fixture *f = owner;

	(void)s;
	f->done++;
	f->errs += err != 0;
}

static const struct qp_events events = { .slice_done = count_done };

/* One core over a loop NIC: an endpoint of one QP of max_wr, a CQ quota of cqe. */
static void fixture_init(struct fixture *f, uint32_t max_wr, uint32_t cqe, uint32_t max_reads)
{
	const struct nic_provider *prov = &nic_loop_provider;
	struct qctx *ctx;

	memset(f, 0, sizeof(*f));
	ctx = aligned_alloc(FERRY_CACHE_LINE, sizeof(*ctx));
	assert_non_null(ctx);
	memset(ctx, 0, sizeof(*ctx));
	f->ctx = ctx;
	ctx->prov = prov;
	assert_int_equal(prov->open("loop", &ctx->nic), 0);
	assert_int_equal(prov->open("loop", &f->rnic), 0);
	prov->addr(f->rnic, &f->raddr);
	assert_int_equal(prov->cq_create(ctx->nic, cqe, &ctx->cq), 0);
	ctx->cq_quota.max = cqe;
	ctx->ev = &events;
	ctx->owner = f;
	ctx->signal_every = 1;
	ctx->max_reads = max_reads;
	assert_int_equal(prov->reg_mr(ctx->nic, f->lbuf, sizeof(f->lbuf), NIC_ACCESS_ALL, &f->lmr), 0);
	assert_int_equal(prov->reg_mr(f->rnic, f->rbuf, sizeof(f->rbuf), NIC_ACCESS_ALL, &f->rmr), 0);
	assert_int_equal(ep_create(ctx, 1, max_wr, &f->ep), 0);
	assert_int_equal(prov->qp_connect(f->ep->qps[0]->nqp, &f->raddr, NULL), 0);
	assert_int_equal(ep_attach(ctx, f->ep), 0);
	f->sl = calloc(NSLICES, sizeof(*f->sl));
	assert_non_null(f->sl);
}

static void fixture_fini(struct fixture *f)
{
	const struct nic_provider *prov = f->ctx->prov;

	ep_destroy(f->ctx, f->ep);
	prov->cq_destroy(f->ctx->cq);
	assert_int_equal(prov->dereg_mr(f->ctx->nic, &f->lmr), 0);
	assert_int_equal(prov->dereg_mr(f->rnic, &f->rmr), 0);
	prov->close(f->ctx->nic);
	prov->close(f->rnic);
	free(f->sl);
	free(f->ctx);
}

/* NSLICES slices of op waiting on the endpoint. */
static void queue_slices(struct fixture *f, uint8_t op)
{
	for (uint32_t i = 0; i < NSLICES; i++) {
		struct slice *s = &f->sl[i];

		s->local = (uint64_t)(uintptr_t)(f->lbuf + i * LEN);
		s->remote = (uint64_t)(uintptr_t)(f->rbuf + i * LEN);
		s->len = LEN;
		s->lkey = f->lmr.lkey;
		s->rkey = f->rmr.rkey;
		s->op = op;
		s->ep = f->ep;
		slice_list_push(&f->ep->pending, s);
	}
}

/* Poll until nothing is outstanding; bounded so that a leak fails, not hangs. */
static void drain(struct fixture *f)
{
	for (int i = 0; i < 1000 && f->ctx->cq_quota.depth; i++)
		assert_true(qctx_poll(f->ctx) >= 0);
	assert_int_equal(f->ctx->cq_quota.depth, 0);
}

/*
 * Two of the four slices go, the QP takes nothing more and the pass that
 * finds it so counts want_qp_full / want_cq_full; after a drain the rest go.
 */
static void run_case(uint32_t max_wr, uint32_t cqe, uint32_t max_reads, uint8_t op,
		     uint64_t want_qp_full, uint64_t want_cq_full)
{
	struct fixture fx, *f = &fx;

	fixture_init(f, max_wr, cqe, max_reads);
	queue_slices(f, op);
	assert_int_equal(ep_post(f->ctx, f->ep), 2);
	assert_int_equal(f->ctx->ctr.qp_full, 0);
	assert_int_equal(f->ctx->ctr.cq_full, 0);
	assert_int_equal(ep_post(f->ctx, f->ep), 0);
	assert_int_equal(f->ep->pending.count, 2);
	assert_int_equal(f->ctx->ctr.qp_full, want_qp_full);
	assert_int_equal(f->ctx->ctr.cq_full, want_cq_full);
	drain(f);
	assert_int_equal(ep_post(f->ctx, f->ep), 2);
	drain(f);
	assert_int_equal(f->done, NSLICES);
	assert_int_equal(f->errs, 0);
	fixture_fini(f);
}

/* READ credits used up, the QP's depth and the CQ with room: the QP's limit. */
static void test_reads_out_is_qp_full(void **state)
{
	(void)state;
	run_case(16, 64, 2, NIC_OP_READ, 1, 0);
}

/* The QP's send queue is full, the CQ has room. */
static void test_depth_out_is_qp_full(void **state)
{
	(void)state;
	run_case(2, 64, 16, NIC_OP_WRITE, 1, 0);
}

/* The CQ quota is full, the QP has room. */
static void test_cq_out_is_cq_full(void **state)
{
	(void)state;
	run_case(16, 2, 16, NIC_OP_READ, 0, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_out_is_qp_full),
		cmocka_unit_test(test_depth_out_is_qp_full),
		cmocka_unit_test(test_cq_out_is_cq_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
