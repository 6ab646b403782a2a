/* SPDX-License-Identifier: MIT */
/*
 * Cutting: a request part (slices [next, end) of one request) becomes
 * slices from the core's pool, each filled from a template that the core
 * looks up once per part and pass (keys, endpoint, addresses).  Parts wait
 * in a small FIFO per core between the port rings and the cutter.
 */
#ifndef FERRY_SLICE_CUT_H
#define FERRY_SLICE_CUT_H

#include <stdbool.h>
#include <stdint.h>

#include "slice/request.h"
#include "slice/slice.h"

#define CUT_FIFO 256      /* request parts a core is cutting (power of 2) */

/* A request part being cut: slices [next, end) of rq. */
struct cut_part {
	struct ferry_rq *rq;
	uint64_t next;
	uint64_t end;
};

/* Parts queued on one core: a ring of CUT_FIFO, the core's alone. */
struct cut_fifo {
	struct cut_part part[CUT_FIFO];
	uint32_t head, tail;
};

static inline uint32_t cut_fifo_count(const struct cut_fifo *f)
{
	return f->tail - f->head;
}

static inline uint32_t cut_fifo_room(const struct cut_fifo *f)
{
	return CUT_FIFO - cut_fifo_count(f);
}

static inline struct cut_part *cut_fifo_head(struct cut_fifo *f)
{
	return &f->part[f->head & (CUT_FIFO - 1)];
}

static inline struct cut_part *cut_fifo_push(struct cut_fifo *f)
{
	return &f->part[f->tail++ & (CUT_FIFO - 1)];
}

/* Part `part` of rq (of rq->nparts), from a ring entry: its slice range. */
static inline void cut_part_init(struct cut_part *pt, struct ferry_rq *rq, unsigned part)
{
	pt->rq = rq;
	pt->next = slice_part_start(rq->nslices, rq->nparts, part);
	pt->end = slice_part_start(rq->nslices, rq->nparts, part + 1);
}

/* What every slice of one part shares. */
struct cut_tmpl {
	struct ferry_rq *rq;
	struct ferry_ep *ep;
	uint32_t lkey, rkey;
	uint32_t slice_size;
};

/* The one slice of a request of one slice (slice_fill without the bounds). */
static inline void slice_fill_whole(struct slice *s, struct ferry_rq *rq, struct ferry_ep *ep,
				    uint32_t lkey, uint32_t rkey)
{
	s->rq = rq;
	s->ep = ep;
	s->tries = 0;
	s->local = rq->local;
	s->remote = rq->remote;
	s->len = (uint32_t)rq->len;
	s->lkey = lkey;
	s->rkey = rkey;
	s->op = rq->op;
}

/*
 * Cut up to budget slices of pt onto out (pt->next advances).  Stops early
 * when the pool runs dry (*dry set: back-pressure, nothing lost).  Returns
 * the slices cut.  Inline: the core's per-slice loop, which keeps the
 * request's fields, the pool's free list and out's tail in locals (the
 * stores into the slices would otherwise reload them every time):
 * slice_get, slice_bounds and slice_list_push for each slice.
 */
static inline uint32_t cut_part_slices(struct slice_pool *pool, const struct cut_tmpl *t,
				       struct cut_part *pt, uint32_t budget,
				       struct slice_list *out, bool *dry)
{
	struct ferry_rq *rq = t->rq;
	const uint64_t local = rq->local, remote = rq->remote, len = rq->len, n = rq->nslices;
	const uint32_t size = t->slice_size, lkey = t->lkey, rkey = t->rkey;
	const uint8_t op = rq->op;
	uint64_t next = pt->next, end = pt->end;
	struct slice *free = pool->free, **tailp = out->tailp;
	uint32_t cut;

	if (end - next > budget)
		end = next + budget;
	for (; next < end; next++) {
		struct slice *s = free;
		uint64_t off = next * size;

		if (!s) {
			*dry = true;
			break;
		}
		free = s->next;
		s->rq = rq;
		s->ep = t->ep;
		s->tries = 0;
		s->local = local + off;
		s->remote = remote + off;
		s->len = next + 1 < n ? size : (uint32_t)(len - off); /* the tail: the rest */
		s->lkey = lkey;
		s->rkey = rkey;
		s->op = op;
		*tailp = s;
		tailp = &s->next;
	}
	*tailp = NULL;
	cut = (uint32_t)(next - pt->next);
	pool->free = free;
	pool->avail -= cut;
	out->tailp = tailp;
	out->count += cut;
	pt->next = next;
	return cut;
}

#endif /* FERRY_SLICE_CUT_H */
