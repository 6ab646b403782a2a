/* SPDX-License-Identifier: MIT */
/*
 * verbs_depth: qp/post (selective signalling, QP depth, CQ quota, the drain
 * marker) over the verbs provider on two real devices, in one process.
 * Like verbs_smoke, not a cmocka test: it needs RDMA devices.
 *
 *   ../shared/softroce/vm-run --devices 2 --timeout 300 -- ./build/verbs_depth rxe0 rxe1
 *
 * Each scenario posts slices over several QPs sharing one small CQ, breaks
 * something (a QP set to error mid-stream, an unsignalled WR with a wrong
 * rkey, a chain the provider posts only in part), then polls until every
 * slice retired.  Checked: every slice retired exactly once, each QP's depth
 * and the CQ quota back to 0, no provider error, no CQ error event.
 * Exit 0: all passed; 1: a check failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qp/nic.h"
#include "qp/post/post.h"
#include "qp/verbs/verbs.h"
#include "slice/slice.h"

#define NQ 8
#define QP_WRS 64u
#define CQES 128u /* < NQ * QP_WRS: the quota binds */
#define NSL 2048
#define SL_LEN 4096u
#define WAIT_SEC 60

#define CHECK(c)                                                                  \
	do {                                                                      \
		if (!(c)) {                                                       \
			fprintf(stderr, "verbs_depth: FAIL %s:%d: %s\n", __FILE__, \
				__LINE__, #c);                                    \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

struct side {
	struct nic *nic;
	struct nic_cq *cq;
	uint8_t *buf;
	struct nic_mr mr;
};

static const struct nic_provider *P = &nic_verbs_provider;
static struct side A, B;
static struct slice sl[NSL];
static unsigned done_cnt[NSL];
static int done_err[NSL];
static struct nic_qp *resp[NQ];

static void on_done(void *owner, struct slice *s, int err)
{
	(void)owner;
	done_cnt[s - sl]++;
	done_err[s - sl] = err;
}

static const struct qp_events EV = { .slice_done = on_done };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void side_open(struct side *s, const char *name)
{
	CHECK(P->open(name, &s->nic) == 0);
	s->buf = aligned_alloc(4096, (size_t)NSL * SL_LEN);
	CHECK(s->buf);
	memset(s->buf, 0x5a, (size_t)NSL * SL_LEN);
	CHECK(P->reg_mr(s->nic, s->buf, (size_t)NSL * SL_LEN, NIC_ACCESS_ALL, &s->mr) == 0);
	CHECK(P->cq_create(s->nic, CQES, &s->cq) == 0);
}

static struct qctx *ctx_new(void)
{
	struct qctx *c = ferry_zalloc_lines(sizeof(*c));

	CHECK(c);
	memset(c, 0, sizeof(*c));
	c->prov = P;
	c->nic = A.nic;
	c->cq = A.cq;
	c->ev = &EV;
	c->signal_every = 16;
	c->max_reads = 16;
	c->cq_quota.max = CQES;
	for (int i = 0; i < NQ; i++) {
		struct nic_qp_info ia, ib;
		struct nic_addr aa, ab;
		struct qpx *q;

		CHECK(qpx_create(c, QP_WRS, NULL, &q) == 0);
		CHECK(qctx_attach(c, q) == 0);
		CHECK(P->qp_create(B.nic, B.cq, 1, &resp[i]) == 0);
		P->qp_info(q->nqp, &ia);
		P->qp_info(resp[i], &ib);
		P->addr(A.nic, &aa);
		P->addr(B.nic, &ab);
		CHECK(P->qp_connect(q->nqp, &ab, &ib) == 0);
		CHECK(P->qp_connect(resp[i], &aa, &ia) == 0);
	}
	return c;
}

static void ctx_free(struct qctx *c)
{
	for (int i = 0; i < NQ; i++) {
		qpx_destroy(c, c->qps[i]);
		P->qp_destroy(resp[i]);
	}
	free(c);
}

/* Slice i: 4 KiB at offset i * 4 KiB, even WRITE, odd READ. */
static void slices_init(struct slice_list *l)
{
	memset(sl, 0, sizeof(sl));
	memset(done_cnt, 0, sizeof(done_cnt));
	slice_list_init(l);
	for (int i = 0; i < NSL; i++) {
		struct slice *s = &sl[i];

		s->local = (uintptr_t)A.buf + (uint64_t)i * SL_LEN;
		s->remote = (uintptr_t)B.buf + (uint64_t)i * SL_LEN;
		s->len = SL_LEN;
		s->lkey = A.mr.lkey;
		s->rkey = B.mr.rkey;
		s->op = i & 1 ? NIC_OP_READ : NIC_OP_WRITE;
		slice_list_push(l, s);
	}
}

static uint32_t depth_sum(const struct qctx *c)
{
	uint32_t d = 0;

	for (int i = 0; i < NQ; i++)
		d += c->qps[i]->depth.depth;
	return d;
}

/* A CQ error (overrun) would come as an async event. */
static void check_no_cq_err(void)
{
	struct ibv_context *ctx = ((struct fv_nic *)(void *)A.nic)->ctx;
	struct ibv_async_event ev;

	while (ibv_get_async_event(ctx, &ev) == 0) {
		printf("verbs_depth: async event %s\n", ibv_event_type_str(ev.event_type));
		CHECK(ev.event_type != IBV_EVENT_CQ_ERR);
		ibv_ack_async_event(&ev);
	}
}

/*
 * Post everything in l round-robin over the QPs, polling as we go; hook(k)
 * runs once after the k-th post call.  Then poll until nothing is out.
 */
static void run(struct qctx *c, struct slice_list *l, void (*hook)(struct qctx *, int))
{
	double deadline = now_s() + WAIT_SEC;
	int k = 0;

	while (l->count || depth_sum(c)) {
		for (int i = 0; i < NQ && l->count; i++) {
			struct qpx *q = c->qps[i];

			if (!q->broken)
				qpx_post(c, q, l, 8, 0);
			if (hook)
				hook(c, k);
			k++;
		}
		CHECK(qctx_poll(c) >= 0);
		CHECK(depth_sum(c) == c->cq_quota.depth);
		if (l->count) {
			bool any = false;

			for (int i = 0; i < NQ; i++)
				any |= !c->qps[i]->broken;
			if (!any) /* nothing can take the rest: end them here */
				while (l->count)
					on_done(NULL, slice_list_pop(l), -ECANCELED);
		}
		if (now_s() > deadline) {
			fprintf(stderr, "verbs_depth: FAIL: %u WRs still out after %d s\n",
				depth_sum(c), WAIT_SEC);
			exit(1);
		}
	}
	CHECK(c->cq_quota.depth == 0);
	for (int i = 0; i < NSL; i++)
		if (done_cnt[i] != 1) {
			fprintf(stderr, "verbs_depth: FAIL: slice %d retired %u times\n", i,
				done_cnt[i]);
			exit(1);
		}
	check_no_cq_err();
}

static unsigned count_err(int err)
{
	unsigned n = 0;

	for (int i = 0; i < NSL; i++)
		n += done_err[i] == err;
	return n;
}

/* ---- scenarios ---- */

/* Not marked broken here: posting goes on until a flush says so, and
 * those WRs flush too (rxe runs a WR inside the post: one set to error
 * before its successor's post is the way to see flushes). */
static void hook_set_error(struct qctx *c, int k)
{
	if (k == 40)
		for (int i = 0; i < NQ; i += 2)
			CHECK(P->qp_set_error(c->qps[i]->nqp) == 0);
}

static void test_flush(void)
{
	struct qctx *c = ctx_new();
	struct slice_list l;

	slices_init(&l);
	run(c, &l, hook_set_error);
	CHECK(c->ctr.provider_errors == 0);
	printf("verbs_depth: half the QPs set to error mid-stream: %u ok, %u flushed or "
	       "not posted; %llu CQEs for %llu WRs; depth 0\n", count_err(0),
	       count_err(-ECANCELED), (unsigned long long)c->ctr.cqes,
	       (unsigned long long)c->ctr.completions);
	ctx_free(c);
}

static void test_bad_rkey(void)
{
	struct qctx *c = ctx_new();
	struct slice_list l;

	slices_init(&l);
	/* Slice 100 goes out unsignalled (not 16th, not a chain's last of 8). */
	sl[100].rkey ^= 0x5a5a00;
	sl[101].rkey ^= 0x5a5a00;
	run(c, &l, NULL);
	CHECK(c->ctr.provider_errors == 0);
	CHECK(done_err[100] == -EFAULT || done_err[101] == -EFAULT);
	printf("verbs_depth: unsignalled WR with a wrong rkey: %u ok, %u EFAULT, %u flushed; "
	       "depth 0\n", count_err(0), count_err(-EFAULT), count_err(-ECANCELED));
	ctx_free(c);
}

static void test_partial_post(void)
{
	struct qctx *c = ctx_new();
	struct slice_list l;

	slices_init(&l);
	/* A chain's WR 4 of 8 has an op the provider refuses: WRs 0..3 go
	 * (their last unsignalled: the drain marker follows), 4..7 fail. */
	sl[8 * 5 + 4].op = 7;
	run(c, &l, NULL);
	CHECK(c->ctr.provider_errors == 1);
	CHECK(done_err[8 * 5 + 4] == -EINVAL);
	printf("verbs_depth: chain posted in part (4 of 8): %u ok, %u EINVAL, %u flushed; "
	       "depth 0\n", count_err(0), count_err(-EINVAL), count_err(-ECANCELED));
	ctx_free(c);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	side_open(&A, argc > 1 ? argv[1] : "rxe0");
	side_open(&B, argc > 2 ? argv[2] : "rxe1");
	(void)fcntl(((struct fv_nic *)(void *)A.nic)->ctx->async_fd, F_SETFL, O_NONBLOCK);
	test_flush();
	test_bad_rkey();
	test_partial_post();
	P->close(A.nic);
	P->close(B.nic);
	printf("verbs_depth: all checks passed\n");
	return 0;
}
