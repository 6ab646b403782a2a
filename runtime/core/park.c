/* SPDX-License-Identifier: MIT */
/*
 * Parked parts.  A request part whose segment has no endpoint on this core,
 * or one being torn down (evicted from the endpoint cache: a cache miss),
 * waits here, without
 * blocking anything, while the repair thread reconnects; every sweep asks
 * again, and the part goes back to cutting or ends with the reconnect's
 * error, -EBUSY (reconnected, but no room on this core) or -ETIMEDOUT; a
 * reconnect that did not try its core (park_again) is not its verdict.
 */
#include <errno.h>

#include "runtime/engine/engine.h"

/* False when the part cannot wait (full, or segment gone). */
bool core_park(struct ferry_core *c, const struct cut_part *pt)
{
	struct ferry_seg *s = pt->rq->seg;
	struct parked_part *p;

	if (c->n_parked == PARK_MAX ||
	    load_acquire(s->state) != SEG_OPEN || /* pairs with: store_sc in open_slot */
	    READ_ONCE(s->gen) != pt->rq->seg_gen)
		return false;
	p = &c->parked[c->n_parked++];
	p->pt = *pt;
	p->round = load_acquire(s->connect_round); /* pairs with: fetch_add_release in reconnect_done */
	p->since = c->now;
	store_release(s->want_eps, 1); /* pairs with: load_acquire in repair_reconnects */
	repair_kick(c->e);
	return true;
}

/*
 * A reconnect ended that did not try this core: it had an endpoint when
 * that reconnect began, evicted since (the segment idle meanwhile).  Its
 * result says nothing about this core: wait for the next one, asked for
 * here, instead of failing -EBUSY for a reconnect nobody made.
 */
static int park_again(struct ferry_core *c, struct parked_part *p, uint32_t round)
{
	struct ferry_seg *s = p->pt.rq->seg;

	p->round = round;
	store_release(s->want_eps, 1); /* pairs with: load_acquire in repair_reconnects */
	repair_kick(c->e);
	return 1;
}

/*
 * Parked part p: 0 to go back to cutting, 1 to keep waiting, or -errno.
 * The round is read before the endpoint: a reconnect publishes the
 * endpoint, then ends the round, so one read after a new round is seen is
 * that reconnect's.  Read the other way round, an endpoint published
 * between the two reads looked missing, and a reconnect that worked
 * failed the part -EBUSY (test_many_segments, once in a CI run).
 */
static int park_state(struct ferry_core *c, struct parked_part *p)
{
	struct ferry_rq *rq = p->pt.rq;
	struct ferry_seg *s = rq->seg;
	/* pairs with: fetch_add_release of connect_round in reconnect_done */
	uint32_t round = load_acquire(s->connect_round);
	struct ferry_ep *ep = core_rq_ep(c, rq);
	int err = READ_ONCE(rq->error);

	if (err) /* failed elsewhere, or cancelled: it waits for nothing */
		return err;
	if (ep && !ep->closing) /* a closing one is on its way out (evicted) */
		return ep->seg_gen == rq->seg_gen ? 0 : -EBADF;
	/* Closing: the close ends what is in flight on it -ECANCELED (ferry.h;
	 * -EBADF is for submissions after it).  pairs with: store_sc in segment.c */
	if (load_acquire(s->state) != SEG_OPEN)
		return -ECANCELED;
	if (round != p->round) {
		/* pairs with: store_release of connect_cores in reconnect_done */
		uint64_t cores = load_acquire(s->connect_cores);

		err = READ_ONCE(s->connect_errs[c->index]); /* this core's own */

		if (!(cores & (1ull << c->index)))
			return park_again(c, p, round);
		/* A later round than the one read above may have tried this
		 * core meanwhile: its endpoint is seen now if it made one. */
		ep = core_rq_ep(c, rq);
		if (ep && !ep->closing)
			return ep->seg_gen == rq->seg_gen ? 0 : -EBADF;
		return err ? err : -EBUSY; /* reconnected, but no room on this core */
	}
	if (c->timeout_ticks && c->now - p->since > c->timeout_ticks)
		return -ETIMEDOUT;
	return 1;
}

void core_sweep_parked(struct ferry_core *c)
{
	for (uint32_t i = 0; i < c->n_parked;) {
		struct parked_part *p = &c->parked[i];
		int st = park_state(c, p);

		if (st == 1 || (st == 0 && cut_fifo_room(&c->cut) == 0)) {
			i++;
			continue;
		}
		if (st == 0)
			*cut_fifo_push(&c->cut) = p->pt;
		else
			core_part_fail(c, p->pt.rq, p->pt.next, p->pt.end, st);
		*p = c->parked[--c->n_parked];
	}
}
