/* SPDX-License-Identifier: MIT */
#include "slice/cut.h"

static void slice_fill(struct slice *s, const struct cut_tmpl *t, uint64_t i)
{
	const struct ferry_rq *rq = t->rq;
	uint64_t off;

	slice_bounds(rq->len, t->slice_size, rq->nslices, i, &off, &s->len);
	s->rq = t->rq;
	s->ep = t->ep;
	s->tries = 0;
	s->local = rq->local + off;
	s->remote = rq->remote + off;
	s->lkey = t->lkey;
	s->rkey = t->rkey;
	s->op = rq->op;
}

uint32_t cut_part_slices(struct slice_pool *pool, const struct cut_tmpl *t, struct cut_part *pt,
			 uint32_t budget, struct slice_list *out, bool *dry)
{
	uint32_t cut = 0;

	while (pt->next < pt->end && cut < budget) {
		struct slice *s = slice_get(pool);

		if (!s) {
			*dry = true;
			break;
		}
		slice_fill(s, t, pt->next++);
		slice_list_push(out, s);
		cut++;
	}
	return cut;
}
