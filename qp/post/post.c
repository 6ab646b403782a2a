/* SPDX-License-Identifier: MIT */
#include "qp/post/post.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/clock.h"
#include "ring/base/counters.h"

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

int qpx_create(struct qctx *ctx, uint32_t max_wr, void *owner, struct qpx **out)
{
	uint32_t slots = pow2_at_least(max_wr);
	struct qpx *q;
	int rc;

	q = ferry_zalloc_lines(sizeof(*q));
	if (!q)
		return -ENOMEM;
	memset(q, 0, sizeof(*q));
	q->fifo = calloc(slots, sizeof(*q->fifo));
	if (!q->fifo) {
		free(q);
		return -ENOMEM;
	}
	q->fifo_mask = slots - 1;
	q->depth.max = max_wr;
	q->index = QPX_UNATTACHED;
	q->owner = owner;
	rc = ctx->prov->qp_create(ctx->nic, ctx->cq, max_wr, &q->nqp);
	if (rc) {
		free(q->fifo);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

int qctx_attach(struct qctx *ctx, struct qpx *q)
{
	uint32_t idx;

	for (idx = 0; idx < QP_MAX_PER_CORE && ctx->qps[idx]; idx++)
		;
	if (idx == QP_MAX_PER_CORE)
		return -ENOSPC;
	q->index = (uint16_t)idx;
	q->wr_hi = ((uint64_t)(ctx->qp_gen[idx] & QPX_GEN_MASK) << QPX_INDEX_BITS | idx) << 32;
	ctx->qps[idx] = q;
	if (idx >= ctx->n_qps)
		ctx->n_qps = idx + 1;
	return 0;
}

void qpx_abandon(struct qctx *ctx, struct qpx *q, int err)
{
	uint32_t n = q->tail - q->head;

	for (uint32_t seq = q->head; seq != q->tail; seq++) {
		struct slice *s = q->fifo[seq & q->fifo_mask]; /* NULL: a drain marker */

		if (s)
			ctx->ev->slice_done(ctx->owner, s, err);
	}
	q->head = q->tail;
	q->reads = 0;
	wr_depth_sub(&q->depth, n);
	cq_quota_sub(&ctx->cq_quota, n);
	depth_store(&ctx->cq_quota.max, ctx->cq_quota.max - n);
	ctx->cq_lent += n;
}

void qpx_destroy(struct qctx *ctx, struct qpx *q)
{
	assert(q->depth.depth == 0);
	if (q->index != QPX_UNATTACHED) {
		ctx->qps[q->index] = NULL;
		ctx->qp_gen[q->index]++; /* the next QP here: other wr_ids */
	}
	ctx->prov->qp_destroy(q->nqp);
	free(q->fifo);
	free(q);
}

int wc_status_errno(uint16_t status)
{
	switch (status) {
	case NIC_WC_SUCCESS:
		return 0;
	case NIC_WC_LOC_PROT_ERR:
	case NIC_WC_REM_ACCESS_ERR:
		return -EFAULT;
	case NIC_WC_FLUSH_ERR:
		return -ECANCELED;
	case NIC_WC_RETRY_EXC_ERR:
		return -EHOSTUNREACH;
	case NIC_WC_REM_PERM_ERR:
		return -EPERM;
	default:
		return -EIO;
	}
}

/* The slice's local..unsignaled are a WR's local..signaled, in its order:
 * one block copy (to the WR's end), signaled 0. */
#define WR_SLICE_OFF(f) (offsetof(struct nic_wr, f) - offsetof(struct nic_wr, local))
#define SLICE_WR_OFF(f) (offsetof(struct slice, f) - offsetof(struct slice, local))
_Static_assert(WR_SLICE_OFF(remote) == SLICE_WR_OFF(remote) && WR_SLICE_OFF(len) == SLICE_WR_OFF(len) &&
		       WR_SLICE_OFF(lkey) == SLICE_WR_OFF(lkey) &&
		       WR_SLICE_OFF(rkey) == SLICE_WR_OFF(rkey) && WR_SLICE_OFF(op) == SLICE_WR_OFF(op) &&
		       WR_SLICE_OFF(signaled) == SLICE_WR_OFF(unsignaled) &&
		       sizeof(struct nic_wr) - offsetof(struct nic_wr, local) <=
			       sizeof(struct slice) - offsetof(struct slice, local),
	       "a slice's local..op are a work request's");

static void fill_wr(struct nic_wr *w, const struct slice *s, uint64_t wr_id)
{
	w->wr_id = wr_id;
	memcpy(&w->local, &s->local, sizeof(*w) - offsetof(struct nic_wr, local));
	/* signaled is 0 (the slice's unsignaled): qpx_post picks the signalled ones */
}

/*
 * After a partial post, the last WR that went out may be unsignalled: on a
 * real NIC the WRs before it may complete without a CQE and nothing would
 * ever retire them.  A signalled zero-length WR behind them (it flushes, the
 * QP being in error) produces one CQE that retires them all in order.
 */
static void post_drain_marker(struct qctx *ctx, struct qpx *q, uint32_t seq)
{
	struct nic_wr w = { .wr_id = q->wr_hi | seq, .signaled = 1 };
	struct nic_wr *bad = NULL;

	q->fifo[seq & q->fifo_mask] = NULL; /* retire_upto skips the marker */
	if (ctx->prov->post(q->nqp, &w, &bad) == 0) {
		q->tail++;
		wr_depth_add(&q->depth, 1);
		cq_quota_add(&ctx->cq_quota, 1);
		stat_add(&ctx->ctr, wrs_posted, 1);
	}
}

/* A failed post is a bug (we never exceed the QP's depth): fail what did not go. */
static void post_failed(struct qctx *ctx, struct qpx *q, uint32_t posted, uint32_t n, int rc)
{
	stat_add(&ctx->ctr, provider_errors, 1);
	for (uint32_t i = posted; i < n; i++) {
		struct slice *s = q->fifo[(q->tail + i) & q->fifo_mask];

		q->reads -= s->op == NIC_OP_READ;
		ctx->ev->slice_done(ctx->owner, s, rc ? rc : -EIO);
	}
	q->broken = 1;
	ctx->prov->qp_set_error(q->nqp);
}

uint32_t qpx_post(struct qctx *ctx, struct qpx *q, struct slice_list *list, uint32_t max,
		  uint64_t now)
{
	struct nic_wr wrs[POST_MAX_CHAIN];
	struct nic_wr *bad = NULL;
	uint32_t n, posted;
	int rc;

	n = post_budget(&q->depth, &ctx->cq_quota, list->count < max ? list->count : max);
	if (n > POST_MAX_CHAIN)
		n = POST_MAX_CHAIN;
	if (n == 0)
		return 0;
	/* The QP's counters in locals: the stores through s and wrs below
	 * would make the compiler reload them for every slice. */
	uint64_t id = q->wr_hi;
	uint32_t seq = q->tail, mask = q->fifo_mask, every = ctx->signal_every;
	uint32_t reads = q->reads, max_reads = ctx->max_reads;
	struct slice **fifo = q->fifo;
	struct slice *s = list->head;
	uint32_t i;

	for (i = 0; i < n; i++, seq++) {
		struct slice *next = s->next;

		/* A QP may have at most max_reads RDMA READs outstanding (the
		 * NIC's initiator depth, e.g. 128 on rxe): the chain stops at
		 * the first one over.  Where the peer grants fewer responder
		 * resources, the QP's max_rd_atomic is lower and the NIC holds
		 * the excess READs in its send queue: slower, never an error. */
		if (s->op == NIC_OP_READ) {
			if (reads >= max_reads)
				break;
			reads++;
		}
		fifo[seq & mask] = s;
		s->post_tsc = now;
		fill_wr(&wrs[i], s, id | seq);
		wrs[i].next = &wrs[i + 1];
		s = next;
	}
	n = i;
	if (n == 0)
		return 0;
	slice_list_cut(list, s, n);
	/* Selective signalling: every signal_every-th WR of the chain, and
	 * its last always, so nothing posted waits for a later signalled WR
	 * (and every chain starts afresh). */
	for (i = every - 1; i < n - 1; i += every)
		wrs[i].signaled = 1;
	wrs[n - 1].signaled = 1;
	q->reads = reads;
	wrs[n - 1].next = NULL;
	if (q->head == q->tail)
		q->oldest_tsc = now;
	rc = ctx->prov->post(q->nqp, wrs, &bad);
	/* bad NULL on failure: the provider may have queued them all (nic.h) */
	posted = rc && bad ? (uint32_t)(bad - wrs) : n;
	if (unlikely(rc))
		post_failed(ctx, q, posted, n, rc);
	q->tail += posted;
	wr_depth_add(&q->depth, posted);
	cq_quota_add(&ctx->cq_quota, posted);
	if (unlikely(rc) && posted && !wrs[posted - 1].signaled)
		post_drain_marker(ctx, q, q->tail);
	stat_add(&ctx->ctr, wrs_posted, posted);
	stat_add(&ctx->ctr, doorbells, 1);
	return n;
}

/* Slices fifo[(from + i) & mask], i < n, done without error. */
static void slices_ok(const struct qctx *ctx, struct slice *const *fifo, uint32_t mask,
		      uint32_t from, uint32_t n)
{
	if (likely(ctx->ev->slices_ok != NULL)) {
		ctx->ev->slices_ok(ctx->owner, fifo, mask, from, n);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		ctx->ev->slice_done(ctx->owner, fifo[(from + i) & mask], 0);
}

/*
 * Retire q's WRs up to and including seq; RC completes them in order, so
 * all before seq went fine whatever seq's status.  Every WR one completion
 * retires came from the same chain (each chain's last WR is signalled), so
 * they share one post time and one completion time: one histogram update,
 * weighted, counts them all exactly.  The completion time is polled_at,
 * when the poll found it (0 when nobody counts latency), not the pass's
 * clock: a slice posted and completed in one pass (rxe runs the round trip
 * in the doorbell's write(2); loop runs its WRs at the pass's poll) would
 * otherwise count 0 ticks.
 */
static void retire_upto(struct qctx *ctx, struct qpx *q, uint32_t seq, int err,
			uint64_t polled_at)
{
	uint32_t head = q->head, n = seq - head + 1, mask = q->fifo_mask;
	struct slice **fifo = q->fifo;
	struct slice *last = fifo[seq & mask]; /* NULL: a drain marker */
	uint32_t ok = likely(last && !err) ? n : n - 1;

	if (ctx->ev->latency && likely(last && !err))
		ctx->ev->latency(ctx->owner, polled_at - last->post_tsc, n);
	if (q->reads) { /* READs outstanding: count down those retired */
		for (uint32_t h = head; h != seq; h++)
			q->reads -= fifo[h & mask]->op == NIC_OP_READ;
		if (last)
			q->reads -= last->op == NIC_OP_READ;
	}
	/* head moves only here and the callbacks do not post (a retry goes
	 * to a pending list): it is stored once, after them. */
	if (ok)
		slices_ok(ctx, fifo, mask, head, ok);
	if (ok != n && last)
		ctx->ev->slice_done(ctx->owner, last, err);
	q->head = seq + 1;
	q->burst_retired += n;
}

static struct qpx *wc_qp(struct qctx *ctx, const struct nic_wc *wc, uint32_t *seq)
{
	uint64_t hi = wc->wr_id >> 32;
	/* Any index is inside qps[] (a slot past n_qps is NULL): no bound check. */
	struct qpx *q = ctx->qps[hi & (QP_MAX_PER_CORE - 1)];

	*seq = (uint32_t)wc->wr_id;
	/* This QP's (not an earlier one's at the index: the generation is in
	 * hi too), and only sequences in [head, tail) are outstanding. */
	if (unlikely(!q || hi != q->wr_hi >> 32 || *seq - q->head >= q->tail - q->head))
		return NULL;
	return q;
}

/* A completion that retires nothing: one a QP given up left behind gives
 * back the CQ entry qpx_abandon set aside for it; any other is a bug. */
static void qctx_stray(struct qctx *ctx)
{
	if (ctx->cq_lent) {
		ctx->cq_lent--;
		depth_store(&ctx->cq_quota.max, ctx->cq_quota.max + 1);
		return;
	}
	stat_add(&ctx->ctr, provider_errors, 1);
}

int qctx_poll(struct qctx *ctx)
{
	struct nic_wc wc[POLL_BURST];
	struct qpx *touched[POLL_BURST];
	uint32_t nt = 0, retired = 0;
	uint64_t polled_at;
	int n;

	n = ctx->prov->poll(ctx->cq, POLL_BURST, wc);
	stat_add(&ctx->ctr, polls, 1);
	if (n <= 0) {
		if (n < 0)
			stat_add(&ctx->ctr, provider_errors, 1);
		else
			stat_add(&ctx->ctr, empty_polls, 1);
		return n;
	}
	polled_at = ctx->ev->latency ? ferry_tsc() : 0;
	for (int i = 0; i < n; i++) {
		uint32_t seq;
		struct qpx *q = wc_qp(ctx, &wc[i], &seq);
		int err = wc_status_errno(wc[i].status);

		if (unlikely(!q)) {
			qctx_stray(ctx);
			continue;
		}
		if (unlikely(err)) {
			if (q->timed_out)
				err = -ETIMEDOUT;
			q->broken = 1;
			stat_add(&ctx->ctr, wr_errors, 1);
		}
		if (!q->in_burst) {
			q->in_burst = 1;
			touched[nt++] = q;
		}
		retire_upto(ctx, q, seq, err, polled_at);
	}
	/* One store per QP per burst: the depth line is touched once. */
	for (uint32_t i = 0; i < nt; i++) {
		struct qpx *q = touched[i];

		wr_depth_sub(&q->depth, q->burst_retired);
		retired += q->burst_retired;
		q->oldest_tsc = ctx->now; /* progress restarts the timeout clock */
		q->burst_retired = 0;
		q->in_burst = 0;
	}
	cq_quota_sub(&ctx->cq_quota, retired);
	stat_add(&ctx->ctr, completions, retired);
	stat_add(&ctx->ctr, cqes, n);
	if (ctx->ev->burst_done)
		ctx->ev->burst_done(ctx->owner);
	return n;
}
