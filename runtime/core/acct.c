/* SPDX-License-Identifier: MIT */
/*
 * Accounting of completed slices (core.h: core_on_slices_ok): the bytes of a
 * run of one request's slices summed and folded once, and the requests
 * that end in a burst released together (slice/request.h: struct rq_ends).
 * The core's thread only.
 */
#include "runtime/core/core.h"

static void core_count_wakes(struct ferry_core *c, int woke)
{
	if (woke)
		stat_add(&c->ctr, wakeups, (uint64_t)woke);
}

/* The bytes summed for c->acct_rq, accounted (its end, if they were the
 * last, goes on the ended list). */
static void core_acct_fold(struct ferry_core *c)
{
	if (c->acct_rq) {
		core_count_wakes(c, rq_account_defer(&c->ends, c->acct_rq, c->acct_len, 0));
		c->acct_rq = NULL;
		c->acct_len = 0;
	}
}

void core_acct_flush(struct ferry_core *c)
{
	core_acct_fold(c);
	if (c->ends.n)
		core_count_wakes(c, rq_ends_flush(&c->ends));
}

__attribute__((noinline)) void core_ends_full(struct ferry_core *c)
{
	core_count_wakes(c, rq_ends_flush(&c->ends));
}

__attribute__((noinline)) void core_acct_switch(struct ferry_core *c, struct ferry_rq *rq,
						uint64_t len)
{
	core_acct_fold(c);
	c->acct_rq = rq;
	c->acct_len = len;
}

/* A run of one QP's slices done without error (core.h).  They all went
 * out on one endpoint (its QP's: ep_post posts only its pending slices),
 * so its rail is looked at once: with trouble, each goes its own way. */
void core_on_slices_ok(void *owner, struct slice *const *fifo, uint32_t mask, uint32_t from,
		       uint32_t n)
{
	struct ferry_core *c = owner;
	uint64_t bytes = 0;

	if (unlikely(rail_troubled(&fifo[from & mask]->ep->rail))) {
		for (uint32_t i = 0; i < n; i++)
			core_slice_trouble(c, fifo[(from + i) & mask], 0);
		return;
	}
	/* The ended list's count and the pool's free list in locals (the
	 * stores into the requests and slices would make the compiler read
	 * them again every time). */
	struct slice *free = c->pool.free;
	struct ferry_rq **ended = c->ends.rq + c->ends.n, **full = c->ends.rq + RQ_ENDS;

	for (uint32_t i = 0; i < n; i++) {
		struct slice *s = fifo[(from + i) & mask];
		struct ferry_rq *rq = s->rq;

		bytes += s->len;
		if (rq->nslices == 1) { /* its one slice: nothing to sum (see rq_account) */
			WRITE_ONCE(rq->ok_bytes, s->len); /* published by rq_ends_flush's release of state */
			if (unlikely(ended == full)) {
				c->ends.n = RQ_ENDS;
				core_ends_full(c);
				ended = c->ends.rq + c->ends.n;
			}
			*ended++ = rq;
		} else if (rq == c->acct_rq) {
			c->acct_len += s->len;
		} else {
			c->ends.n = (uint32_t)(ended - c->ends.rq); /* the switch may end the request summed before */
			core_acct_switch(c, rq, s->len);
			ended = c->ends.rq + c->ends.n;
		}
		s->next = free;
		free = s;
	}
	c->ends.n = (uint32_t)(ended - c->ends.rq);
	c->pool.free = free;
	c->pool.avail += n;
	stat_add(&c->ctr, bytes, bytes);
	c->slices_out -= n;
}
