/* SPDX-License-Identifier: MIT */
#include "ep/ep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


#include "ring/base/counters.h"

int ep_create(struct qctx *ctx, uint32_t nqps, uint32_t max_wr, struct ferry_ep **out)
{
	struct ferry_ep *ep;
	int rc = 0;

	if (nqps == 0 || nqps > EP_MAX_QPS)
		return -EINVAL;
	ep = ferry_zalloc_lines(sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	memset(ep, 0, sizeof(*ep));
	slice_list_init(&ep->pending);
	for (uint32_t i = 0; i < nqps && rc == 0; i++) {
		rc = qpx_create(ctx, max_wr, ep, &ep->qps[i]);
		if (rc == 0)
			ep->nqps++;
	}
	if (rc) {
		ep_destroy(ctx, ep);
		return rc;
	}
	*out = ep;
	return 0;
}

void ep_qp_infos(const struct qctx *ctx, const struct ferry_ep *ep, struct nic_qp_info *out)
{
	for (uint32_t i = 0; i < ep->nqps; i++)
		ctx->prov->qp_info(ep->qps[i]->nqp, &out[i]);
}

int ep_connect(struct qctx *ctx, struct ferry_ep *ep, const struct nic_addr *remote,
	       const struct nic_qp_info *rqps)
{
	for (uint32_t i = 0; i < ep->nqps; i++) {
		int rc = ctx->prov->qp_connect(ep->qps[i]->nqp, remote, &rqps[i]);

		if (rc)
			return rc;
	}
	return 0;
}

int ep_attach(struct qctx *ctx, struct ferry_ep *ep)
{
	for (uint32_t i = 0; i < ep->nqps; i++) {
		int rc = qctx_attach(ctx, ep->qps[i]);

		if (rc)
			return rc;
	}
	return 0;
}

void ep_destroy_qps(struct qctx *ctx, struct ferry_ep *ep)
{
	if (ep->qps_gone)
		return;
	for (uint32_t i = 0; i < ep->nqps; i++) {
		qpx_destroy(ctx, ep->qps[i]);
		ep->qps[i] = NULL;
	}
	ep->nqps = 0; /* a stale reader sees no QP, not freed ones */
	ep->qps_gone = 1;
}

void ep_free(struct ferry_ep *ep)
{
	free(ep);
}

void ep_destroy(struct qctx *ctx, struct ferry_ep *ep)
{
	ep_destroy_qps(ctx, ep);
	ep_free(ep);
}

uint32_t ep_post(struct qctx *ctx, struct ferry_ep *ep)
{
	uint32_t posted = 0;

	for (uint32_t k = 0; k < ep->nqps && ep->pending.count; k++) {
		struct qpx *q = ep->qps[(ep->rr + k) % ep->nqps];
		uint32_t n;

		if (q->broken)
			continue;
		/* Spread the backlog: each QP takes its share, not all it can. */
		n = (ep->pending.count + ep->nqps - 1 - k) / (ep->nqps - k);
		n = qpx_post(ctx, q, &ep->pending, n, ctx->now);
		if (n == 0) {
			/* Nothing went: the CQ quota was out, or the QP was (its
			 * depth, or its READ credits: max_reads outstanding). */
			if (wr_depth_room(&q->depth) && !cq_quota_room(&ctx->cq_quota))
				stat_add(&ctx->ctr, cq_full, 1);
			else
				stat_add(&ctx->ctr, qp_full, 1);
		}
		posted += n;
	}
	ep->rr++;
	return posted;
}

bool ep_all_broken(const struct ferry_ep *ep)
{
	for (uint32_t i = 0; i < ep->nqps; i++)
		if (!ep->qps[i]->broken)
			return false;
	return true;
}

uint32_t ep_depth(const struct ferry_ep *ep)
{
	uint32_t d = 0;

	for (uint32_t i = 0; i < ep->nqps; i++)
		d += ep->qps[i]->depth.depth;
	return d;
}

void ep_abandon(struct qctx *ctx, struct ferry_ep *ep, int err)
{
	for (uint32_t i = 0; i < ep->nqps; i++)
		if (ep->qps[i]->depth.depth)
			qpx_abandon(ctx, ep->qps[i], err);
}

void ep_set_error(struct qctx *ctx, struct ferry_ep *ep)
{
	for (uint32_t i = 0; i < ep->nqps; i++) {
		ep->qps[i]->broken = 1;
		ctx->prov->qp_set_error(ep->qps[i]->nqp);
	}
}
