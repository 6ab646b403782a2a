/* SPDX-License-Identifier: MIT */
/*
 * Two-level back-pressure: each QP's outstanding WRs are counted in a
 * WrDepthBlock that sits alone on its cache line (only the owning core
 * writes it; readers elsewhere would otherwise false-share with hot data),
 * and each core's CQ has a quota: every WR posted holds one CQE credit until
 * it is retired, signalled or not, because after a QP error every
 * outstanding WR comes back as a flush CQE.  That keeps the CQ impossible to
 * overflow with selective signalling.
 *
 * Counters are written by one thread with relaxed atomic stores so that
 * stats readers on other threads see whole values.
 */
#ifndef FERRY_QP_DEPTH_H
#define FERRY_QP_DEPTH_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/base/compiler.h"
#include "ring/base/atomics.h"

struct WrDepthBlock {
	uint32_t depth; /* WRs posted and not yet retired */
	uint32_t max;   /* the QP's send queue depth */
	uint8_t pad[FERRY_CACHE_LINE - 2 * sizeof(uint32_t)];
} ferry_cache_aligned;

_Static_assert(sizeof(struct WrDepthBlock) == FERRY_CACHE_LINE,
	       "a depth counter owns exactly one cache line");

static inline uint32_t depth_load(const uint32_t *c)
{
	return READ_ONCE(*c);
}

static inline void depth_store(uint32_t *c, uint32_t v)
{
	WRITE_ONCE(*c, v); /* single writer; stats readers want whole values */
}

static inline uint32_t wr_depth_room(const struct WrDepthBlock *d)
{
	return d->max - d->depth;
}

static inline void wr_depth_add(struct WrDepthBlock *d, uint32_t n)
{
	assert(d->depth + n <= d->max);
	depth_store(&d->depth, d->depth + n);
}

static inline void wr_depth_sub(struct WrDepthBlock *d, uint32_t n)
{
	assert(n <= d->depth);
	depth_store(&d->depth, d->depth - n);
}

/* The CQ quota has the same shape: used credits out of the CQ's entries. */
typedef struct WrDepthBlock CqQuotaBlock;

#define cq_quota_room wr_depth_room
#define cq_quota_add wr_depth_add
#define cq_quota_sub wr_depth_sub

/* n = min(QP room, CQ room, pending): what one doorbell may carry. */
static inline uint32_t post_budget(const struct WrDepthBlock *qp, const CqQuotaBlock *cq,
				   uint32_t pending)
{
	uint32_t n = wr_depth_room(qp);
	uint32_t c = cq_quota_room(cq);

	if (c < n)
		n = c;
	return pending < n ? pending : n;
}

#endif /* FERRY_QP_DEPTH_H */
