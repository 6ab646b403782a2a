/* SPDX-License-Identifier: MIT */
/*
 * The core's intake: request parts from the ports' rings into the cut
 * FIFO, and from there cut into slices on their endpoints' pending lists
 * (slice/cut.h).  The core's thread only.
 */
#include <errno.h>
#include <string.h>

#include "runtime/engine/engine.h"

#define PORT_BURST 32
#define CUT_BUDGET 512          /* slices cut per pass: keeps polls frequent */

/* ---- request parts from the ports ---- */

/* Why a part cannot be served (negative errno), or 0. */
static int cut_refusal(const struct ferry_rq *rq, const struct ferry_ep *ep)
{
	if (!ep) /* no endpoint and no room to wait for one, or closing (core_park) */
		return load_acquire(rq->seg->state) != SEG_OPEN ? /* pairs with: store_sc in segment.c */
			       -ECANCELED : -EBUSY;
	if (ep->seg_gen != rq->seg_gen)
		return -EBADF;
	if (ep->closing)
		return -ECANCELED;
	if (ep->down)
		return -EHOSTDOWN; /* fail fast: the repair thread probes the peer */
	return READ_ONCE(rq->error); /* the request failed already: move no more bytes */
}

/* Any reason a part cannot be cut at once (cut_refusal's, as a bool: the
 * cut FIFO's path finds which).  closing and down in one load. */
static inline bool cut_blocked(const struct ferry_rq *rq, const struct ferry_ep *ep)
{
	uint16_t closing_down;

	_Static_assert(offsetof(struct ferry_ep, down) == offsetof(struct ferry_ep, closing) + 1,
		       "closing and down side by side");
	if (!ep)
		return true;
	memcpy(&closing_down, &ep->closing, sizeof(closing_down));
	return ep->seg_gen != rq->seg_gen || closing_down || READ_ONCE(rq->error);
}

/*
 * The slice of a one-slice request, cut as it comes: when nothing is in
 * its way -- an endpoint that serves it, a slice in the pool (its free
 * list in *free: port_take keeps it in a local).  False: the cut FIFO's
 * path takes it (parking, refusals, a dry pool).  The caller counts the
 * slice in slices_out, the pool's avail and the request in reqs_done.
 */
static inline __attribute__((always_inline)) bool cut_whole(struct ferry_core *c,
							     struct ferry_rq *rq,
							     struct slice **free,
							     struct ferry_ep **last, size_t ep_off)
{
	struct ferry_ep *ep = rq_ep_at(rq, ep_off);
	struct slice *s = *free;

	if (unlikely(cut_blocked(rq, ep) || !s))
		return false;
	*free = s->next;
	if (ep != *last) { /* touched and active already when it was the last one's */
		ep_touch(ep);
		core_ep_activate(c, ep);
		*last = ep;
	}
	slice_fill_whole(s, rq, ep, region_lkey(rq->lreg, ep), rq->rreg->rkey[ep->remote_nic]);
	slice_list_push(&ep->pending, s);
	return true;
}

/* A burst of ring r's parts (room > 0), read in place: cut at once, or
 * into the cut FIFO; how many.  Apart from the scan, which idle passes
 * run too. */
static __attribute__((noinline)) uint32_t port_take(struct ferry_core *c, struct ferry_ring *r,
						    uint32_t room)
{
	struct ferry_ring_view v;
	unsigned n = ferry_ring_look(r, &v, room < PORT_BURST ? room : PORT_BURST);
	struct slice *free = c->pool.free; /* in a local: see cut_whole */
	struct ferry_ep *last = NULL;
	size_t ep_off = c->seg_ep_off;
	unsigned k = 0, cut;

	/* Cut at once what needs no FIFO, unless parts wait there (they go
	 * first): once one part went there, the rest of the burst follows. */
	if (!cut_fifo_count(&c->cut))
		for (; k < n; k++) {
			unsigned part;
			struct ferry_rq *rq = rq_part_untag(ferry_ring_at(&v, k), &part);

			if (unlikely(rq->nslices != 1) || unlikely(!cut_whole(c, rq, &free, &last, ep_off)))
				break;
		}
	cut = k;
	for (; k < n; k++) {
		unsigned part;
		struct ferry_rq *rq = rq_part_untag(ferry_ring_at(&v, k), &part);

		cut_part_init(cut_fifo_push(&c->cut), rq, part);
	}
	ferry_ring_done(r, &v);
	c->pool.free = free;
	c->pool.avail -= cut;
	c->slices_out += cut;
	stat_add(&c->ctr, reqs_done, cut);
	return n;
}

/* One burst from each port's ring, in turn; how many parts. */
static uint32_t drain_round(struct ferry_core *c, struct ferry_engine *e, unsigned hw)
{
	uint32_t got = 0;

	for (unsigned i = 0; i < hw; i++) {
		struct ferry_port *p = rcu_dereference(e->ports[i]); /* pairs with: ferry_port_create */
		uint32_t room = cut_fifo_room(&c->cut);

		if (!p || !ferry_ring_peek(&p->rings[c->index]))
			continue;
		if (room == 0)
			break;
		got += port_take(c, &p->rings[c->index], room);
	}
	return got;
}

/*
 * Rounds of a burst per port (fair between ports) while they bring
 * something, up to CUT_BUDGET parts a pass: a batch larger than a burst
 * is taken -- mostly cut -- in one pass, posted with one doorbell per QP
 * and polled once, instead of a pass per burst.
 */
uint32_t core_drain_ports(struct ferry_core *c)
{
	struct ferry_engine *e = c->e;
	unsigned hw = load_acquire(e->n_ports_hw); /* pairs with: store_release in ferry_port_create */
	uint32_t got = 0, round;

	/* Another round only after one that may have left parts: in a round
	 * that took less than one burst no ring gave a whole burst, so each
	 * was empty (or short of FIFO room, or given parts since: all taken
	 * next pass).  A lone request is then not followed by a round that
	 * finds nothing (~30 instructions a request, bench/lat-instr.sh). */
	do {
		round = drain_round(c, e, hw);
		got += round;
	} while (round >= PORT_BURST && got < CUT_BUDGET);
	return got;
}

/* ---- cutting ---- */

static void cut_tmpl_init(struct cut_tmpl *t, const struct ferry_core *c, struct ferry_rq *rq,
			  struct ferry_ep *ep)
{
	t->rq = rq;
	t->ep = ep;
	t->lkey = region_lkey(rq->lreg, ep);
	t->rkey = rq->rreg->rkey[ep->remote_nic];
	t->slice_size = c->slice_size;
}

uint32_t core_cut(struct ferry_core *c)
{
	struct cut_tmpl t;
	uint32_t cut = 0, whole = 0;
	bool dry = false;

	while (cut_fifo_count(&c->cut) && cut < CUT_BUDGET && !dry) {
		struct cut_part *pt = cut_fifo_head(&c->cut);
		struct ferry_rq *rq = pt->rq;
		struct ferry_ep *ep;
		int err;

		struct ferry_ep *none = NULL;

		if (rq->nslices == 1 && cut_whole(c, rq, &c->pool.free, &none, c->seg_ep_off)) { /* no template, no loop */
			c->pool.avail--;
			cut++;
			whole++;
			c->cut.head++;
			continue;
		}
		ep = core_rq_ep(c, rq);

		/* An endpoint being evicted is a miss too: when every rail was
		 * gone, rq_rails sent the part here to wait for a reconnect. */
		if (unlikely(!ep || ep->closing) && core_park(c, pt)) {
			c->cut.head++;
			continue;
		}
		err = cut_refusal(rq, ep);
		if (err) {
			core_part_fail(c, rq, pt->next, pt->end, err);
			c->cut.head++;
			continue;
		}
		ep_touch(ep);
		core_ep_activate(c, ep);
		cut_tmpl_init(&t, c, rq, ep);
		cut += cut_part_slices(&c->pool, &t, pt, CUT_BUDGET - cut, &ep->pending, &dry);
		if (pt->next == pt->end) {
			stat_add(&c->ctr, reqs_done, 1);
			c->cut.head++;
		}
	}
	if (dry)
		stat_add(&c->ctr, pool_empty, 1);
	c->slices_out += cut;
	stat_add(&c->ctr, reqs_done, whole);
	return cut;
}
