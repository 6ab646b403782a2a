/* SPDX-License-Identifier: MIT */
/*
 * Hand-over of failed slices to another rail.  When a slice's own rail (its
 * core's endpoint to the segment) is broken, down or paused, its core passes
 * it to a core whose rail is healthy through a core-to-core SPSC ring: no
 * shared queue, no lock.  Slices belong to their core's pool, so the
 * receiver serves a copy from its own pool and sends the original back on
 * the ring the other way (tagged), where its owner frees it.  A receiver
 * whose pool is dry keeps the slice in xfer_wait until a slice of its own
 * comes back -- or refuses it (xfer_refuse) when every slice of its pool
 * is lent out itself, so none can come back by its own doing.
 */
#include <errno.h>
#include <stdlib.h>

#include "ring/base/counters.h"
#include "runtime/engine/engine.h"

#define XFER_BURST 32
#define TAG_RETURN 1u  /* our slice, served by the other core: free it */
#define TAG_REFUSED 2u /* our slice, not served (xfer_refuse): queue it again */
#define TAG_MASK (TAG_RETURN | TAG_REFUSED) /* a slice is a cache line: low bits free */

int handover_init(struct ferry_engine *e)
{
	/* One core has no other rail to hand over to: no rings, nothing to drain. */
	if (e->ncores < 2)
		return 0;
	for (unsigned i = 0; i < e->ncores; i++) {
		struct ferry_core *c = e->cores[i];

		c->xfer_in = ferry_zalloc_lines(e->ncores * sizeof(*c->xfer_in));
		if (!c->xfer_in)
			return -ENOMEM;
		for (unsigned src = 0; src < e->ncores; src++) {
			int rc = src == i ? 0 : ferry_ring_init(&c->xfer_in[src], XFER_RING);

			if (rc)
				return rc;
		}
	}
	return 0;
}

void handover_fini(struct ferry_core *c)
{
	if (!c->xfer_in)
		return;
	for (unsigned src = 0; src < c->e->ncores; src++)
		ferry_ring_fini(&c->xfer_in[src]);
	free(c->xfer_in);
	c->xfer_in = NULL;
}

bool slice_handover(struct ferry_core *c, struct slice *s)
{
	struct ferry_engine *e = c->e;
	const struct ferry_seg *seg = s->rq->seg;

	/* Every other core once, starting at a rotating one. */
	for (unsigned k = 0; k + 1 < e->ncores; k++) {
		unsigned b = (c->index + 1 + (c->xfer_rr + k) % (e->ncores - 1)) % e->ncores;
		struct ferry_core *to = e->cores[b];

		if (rail_unusable(seg, b))
			continue;
		if (!ferry_ring_put(&to->xfer_in[c->index], s))
			continue;
		c->xfer_rr++;
		c->slices_lent++;
		stat_add(&c->ctr, handovers, 1);
		core_kick(to);
		return true;
	}
	return false;
}

/*
 * A slice that waited the slice timeout on a stuck rail: to another rail
 * as a retry (tries counted first: once handed over it is not ours), or
 * ended (core.c core_sweep_stuck).  Counted, because the other rail may
 * be stuck as well without being marked down (nothing marks a rail whose
 * CQ room is all lent): two such rails handed their slices back and forth
 * for good, every request on them PENDING (test_stuck_rails's
 * test_stuck_slices_do_not_bounce).
 */
void slice_stuck_move(struct ferry_core *c, struct slice *s)
{
	int err = READ_ONCE(s->rq->error); /* failed already: move no more bytes */

	if (!err && s->tries < c->retries) {
		s->tries++;
		if (slice_handover(c, s))
			return;
	}
	core_slice_finish(c, s, err ? err : -ETIMEDOUT);
}

/* Send a foreign slice back to its owner; keep it if that ring is full. */
static void xfer_return(struct ferry_core *c, struct slice *f)
{
	struct ferry_core *home = c->e->cores[f->home];

	if (!ferry_ring_put(&home->xfer_in[c->index], (void *)((uintptr_t)f | TAG_RETURN)))
		slice_list_push(&c->xfer_back, f);
}

/* Queue slice n of our pool on our rail to its segment, or end it there
 * when that rail cannot take it. */
static void xfer_queue(struct ferry_core *c, struct slice *n)
{
	struct ferry_rq *rq = n->rq;
	struct ferry_ep *ep = core_rq_ep(c, rq);

	n->ep = ep;
	if (!ep || ep->seg_gen != rq->seg_gen || ep->closing || ep->down) {
		core_slice_finish(c, n, ep && ep->closing ? -ECANCELED : -EHOSTDOWN);
		return;
	}
	if (unlikely(READ_ONCE(rq->error))) { /* failed or cancelled meanwhile */
		core_slice_finish(c, n, READ_ONCE(rq->error));
		return;
	}
	n->lkey = region_lkey(rq->lreg, ep);
	n->rkey = rq->rreg->rkey[ep->remote_nic];
	slice_list_push_front(&ep->pending, n);
	core_ep_activate(c, ep);
}

/* Serve a copy of foreign slice f on our rail; false when our pool is dry. */
static bool xfer_take(struct ferry_core *c, struct slice *f)
{
	struct slice *n = slice_get(&c->pool);

	if (!n)
		return false;
	*n = *f;
	n->home = (uint8_t)c->index;
	c->slices_out++;
	xfer_return(c, f);
	xfer_queue(c, n);
	return true;
}

/*
 * Waiting in xfer_wait is for a slice of our pool to come back.  Each of
 * ours is free, or ours to move (posted, pending or retried on our rail:
 * it ends, freed, or is handed over), or lent to another core.  With
 * timeouts off nothing else ends a wait: two cores that each lent their
 * whole pool to the other (both rails failing their WRs) waited for each
 * other for good, the request PENDING (test_stuck_rails's
 * test_pools_lent_without_timeouts).  So a core with every slice lent
 * refuses what waits: it goes home unserved (TAG_REFUSED) and its owner
 * queues it on its own rail again (xfer_refused).  No wait lasts for ever:
 * a core not all lent has a slice of its own that comes back or is lent
 * in turn (a dead device's WRs aside: documented), and one all lent waits
 * for nothing.  Nor does a slice bounce for ever: a hand-over after a
 * failure counted a try (slice_retry, slice_stuck_move), and a refusal
 * of one evacuated off a cut-off rail counts one (xfer_refused: the
 * evacuation counts none).  A reserve kept from the core's own work
 * would have cost the cut a check per slice; this is off the hot paths.
 */
static bool pool_all_lent(const struct ferry_core *c)
{
	return !c->pool.avail && c->slices_lent == c->pool.size;
}

static uint32_t xfer_refuse(struct ferry_core *c)
{
	uint32_t n = 0;
	struct slice *f;

	/* Off the list first: the owner takes f as soon as the ring has it. */
	while ((f = slice_list_pop(&c->xfer_wait))) {
		struct ferry_core *home = c->e->cores[f->home];

		if (!ferry_ring_put(&home->xfer_in[c->index],
				    (void *)((uintptr_t)f | TAG_REFUSED))) {
			slice_list_push_front(&c->xfer_wait, f); /* the next pass */
			break;
		}
		core_kick(home);
		n++;
	}
	return n;
}

/* The repair thread's verdict on the rail (a hint: the next sweep re-reads it). */
static bool rail_cut_off(const struct ferry_ep *ep)
{
	return ep->cut_off && READ_ONCE(*ep->cut_off);
}

/*
 * Our slice, refused by the core it was handed to: on our rail again.  If
 * that rail is cut off, as a try: an evacuation (xfer_evacuate) counts
 * none, so the next pass would hand it back to the core that is all lent,
 * and two cores in step could trade it for good.  Out of tries it ends
 * -ENOTCONN: no rail had a QP for it.
 */
static void xfer_refused(struct ferry_core *c, struct slice *s)
{
	struct ferry_ep *ep = core_rq_ep(c, s->rq);

	c->slices_lent--;
	if (ep && rail_cut_off(ep) && !READ_ONCE(s->rq->error)) {
		if (s->tries >= c->retries) {
			core_slice_finish(c, s, -ENOTCONN);
			return;
		}
		s->tries++;
	}
	xfer_queue(c, s);
}

static uint32_t xfer_backlogs(struct ferry_core *c)
{
	uint32_t n = 0, back = c->xfer_back.count;
	struct slice *f;

	while (back-- && (f = slice_list_pop(&c->xfer_back))) {
		xfer_return(c, f);
		n++;
	}
	if (pool_all_lent(c))
		return n + xfer_refuse(c);
	/* Off the list before xfer_take: its return may link f into xfer_back. */
	while ((f = slice_list_pop(&c->xfer_wait))) {
		if (!xfer_take(c, f)) {
			slice_list_push_front(&c->xfer_wait, f);
			break;
		}
		n++;
	}
	return n;
}

/*
 * Slices waiting on a rail the repair thread found cut off from the peer
 * (rail_down: its QPs broke and cannot be replaced, a link being down)
 * move to a rail that reaches it: a rail that lost its link must neither
 * hold up nor fail work another rail can do.  Only a marked rail gives its
 * slices away, and only to an unmarked one, so nothing bounces between
 * broken rails; with no rail left the cores are told to fail fast
 * (runtime/ctl/repair.c).
 */
static uint32_t xfer_evacuate(struct ferry_core *c, struct ferry_ep *ep)
{
	uint32_t n = 0, k = ep->pending.count;
	struct slice *s;

	while (k-- && (s = slice_list_pop(&ep->pending))) {
		int err = READ_ONCE(s->rq->error);

		if (err) { /* its request failed already: move no more bytes */
			core_slice_finish(c, s, err);
			continue;
		}
		if (!slice_handover(c, s)) {
			slice_list_push_front(&ep->pending, s);
			break; /* no usable rail: nor for the others */
		}
		n++;
	}
	return n;
}

uint32_t core_drain_xfer(struct ferry_core *c)
{
	uint32_t n = c->xfer_back.count | c->xfer_wait.count ? xfer_backlogs(c) : 0;
	void *objs[XFER_BURST];

	for (struct ferry_ep *ep = c->active; ep; ep = ep->next_active) {
		if (ep->pending.count && !ep->closing && !ep->down && rail_cut_off(ep))
			n += xfer_evacuate(c, ep);
	}

	for (unsigned src = 0; src < c->e->ncores; src++) {
		unsigned got;

		if (src == c->index || !ferry_ring_peek(&c->xfer_in[src]))
			continue;
		got = ferry_ring_get_burst(&c->xfer_in[src], objs, XFER_BURST);
		for (unsigned k = 0; k < got; k++) {
			uintptr_t tag = (uintptr_t)objs[k] & TAG_MASK;
			struct slice *s = (struct slice *)((uintptr_t)objs[k] & ~(uintptr_t)TAG_MASK);

			if (tag == TAG_RETURN) {
				slice_put(&c->pool, s); /* ours, back from a helper */
				c->slices_out--;
				c->slices_lent--;
			} else if (tag == TAG_REFUSED) {
				xfer_refused(c, s);
			} else if (c->xfer_wait.count || !xfer_take(c, s)) {
				s->post_tsc = c->now; /* waiting since (core_sweep_xfer_wait) */
				slice_list_push(&c->xfer_wait, s);
			}
		}
		n += got;
	}
	return n;
}

/*
 * Foreign slices wait in xfer_wait for a slice of our pool -- but not for
 * longer than the slice timeout: a slice of ours can stay out that long
 * and more (on a stuck rail, or lent to a core whose own are).  A slice
 * that waited the slice timeout ends -ETIMEDOUT (one whose request failed
 * meanwhile, with its error, at once), and its original goes home (its
 * owner's pool refills).  The list is in arrival order: the expired are at
 * its head.  With timeouts off only xfer_refuse cuts a wait short.
 */
void core_sweep_xfer_wait(struct ferry_core *c)
{
	struct slice *f;

	while ((f = c->xfer_wait.head)) {
		int err = READ_ONCE(f->rq->error);

		if (!err && (!c->timeout_ticks || c->now - f->post_tsc <= c->timeout_ticks))
			break;
		slice_list_pop(&c->xfer_wait);
		if (rq_account(f->rq, f->len, err ? err : -ETIMEDOUT))
			stat_add(&c->ctr, wakeups, 1);
		xfer_return(c, f);
	}
}

/* Stopping: foreign slices end here (their owners may be gone already). */
void core_drain_xfer_at_stop(struct ferry_core *c)
{
	void *obj;
	struct slice *f;

	while ((f = slice_list_pop(&c->xfer_wait)))
		rq_account(f->rq, f->len, -ECANCELED);
	for (unsigned src = 0; src < c->e->ncores; src++) {
		if (src == c->index)
			continue;
		while ((obj = ferry_ring_get(&c->xfer_in[src]))) {
			/* Foreign, or ours refused: not served, its bytes end here. */
			struct slice *s = (struct slice *)((uintptr_t)obj & ~(uintptr_t)TAG_MASK);

			if (!((uintptr_t)obj & TAG_RETURN))
				rq_account(s->rq, s->len, -ECANCELED);
		}
	}
}
