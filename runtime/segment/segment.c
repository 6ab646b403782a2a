/* SPDX-License-Identifier: MIT */
/*
 * Segments: a peer engine's registered memory as seen from here, and the
 * endpoints every local core holds to it.  Submitters take a reference
 * (inflight) before they look at a segment and the closer waits for
 * references to drain after marking it closing: a Dekker pair of seq_cst
 * operations, so neither can miss the other and no lock is needed on the
 * submit path.
 */
#include "runtime/segment/segment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/ctl/ctl.h"
#include "runtime/engine/engine.h"

struct ferry_seg *seg_lookup(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	uint32_t n = (uint32_t)h - 1; /* handle 0 wraps: out of range */
	struct ferry_seg *s;

	if (n >= FERRY_MAX_SEGMENTS)
		return NULL;
	s = &e->segs.slots[n]; /* mapped for the engine's life; never taken: generation 0 */
	if (load_sc(s->gen) != (uint32_t)(h >> 32))
		return NULL;
	*slot = n;
	return s;
}

int seg_table_init(struct seg_table *t)
{
	void *p = mmap(NULL, FERRY_MAX_SEGMENTS * sizeof(struct ferry_seg), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return -ENOMEM;
	t->slots = p;
	t->n_slots = 0;
	return 0;
}

int seg_table_grow(struct seg_table *t)
{
	if (t->n_slots >= FERRY_MAX_SEGMENTS)
		return -ENOSPC;
	/* The new slots are zeros (the mapping's): SEG_FREE, generation 0. */
	store_release(t->n_slots, t->n_slots + SEG_CHUNK); /* pairs with: load_acquire in seg_slots */
	return 0;
}

void seg_table_free(struct seg_table *t)
{
	if (t->slots)
		munmap(t->slots, FERRY_MAX_SEGMENTS * sizeof(struct ferry_seg));
	t->slots = NULL;
	t->n_slots = 0;
}

bool seg_refs_take(struct ferry_seg *s, ferry_seg_t h, uint32_t n)
{
	/* Dekker pair with ferry_segment_close (state, then inflight) and
	 * ep_keep (rail_gone, then inflight): our references, then their flag. */
	fetch_add_sc(s->inflight, n);
	if (load_sc(s->state) != SEG_OPEN || load_sc(s->gen) != (uint32_t)(h >> 32)) {
		seg_release_refs(s, n);
		return false;
	}
	return true;
}

struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot)
{
	struct ferry_seg *s = seg_lookup(e, h, slot);

	return s && seg_refs_take(s, h, 1) ? s : NULL;
}

void seg_release_ref(struct ferry_seg *s)
{
	fetch_sub_sc(s->inflight, 1);
}

void seg_release_refs(struct ferry_seg *s, uint32_t n)
{
	fetch_sub_sc(s->inflight, n);
}

static void ep_disconnect_peer(struct ferry_engine *e, struct ferry_seg *s, struct ferry_ep *ep);

/*
 * Tear down core i's endpoint to s (ctl_lock held).  Phase one on the
 * owner core: stop, flush, drain, destroy the QPs (-EBUSY until then);
 * phase two here: unpublish, free after a grace period.  An eviction
 * (EP_EVICT) leaves an endpoint that work reached meanwhile alone, its
 * rail usable again: -EADDRINUSE.
 */
static int seg_drop_ep(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, unsigned i,
		       enum ep_remove how)
{
	struct ferry_core *c = e->cores[i];
	struct ferry_ep *ep = s->eps[i];
	struct core_cmd cmd = { .type = CMD_EP_REMOVE, .slot = slot, .ep = ep };
	int rc;

	store_sc(s->rail_gone[i], 1); /* submitters stop picking the rail (rails_pick) */
	if (!ep)
		return 0;
	for (;;) {
		cmd.rc = how; /* the core writes its result there */
		rc = core_command(c, &cmd);
		if (rc != -EBUSY)
			break;
		ferry_sleep_us(100);
	}
	if (rc == -EADDRINUSE) {
		store_sc(s->rail_gone[i], 0);
		return rc;
	}
	ep_table_del(&c->eps, ep);
	seg_ep_set(s, i, NULL);
	ep_disconnect_peer(e, s, ep);
	ep_retire(&e->reaper, ep);
	repair_kick(e); /* it queues the free for after a grace period */
	return 0;
}

/* Remove slot's endpoint from every core; ctl_lock held. */
void seg_remove_eps(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	for (unsigned i = 0; i < e->ncores; i++)
		(void)seg_drop_ep(e, s, slot, i, EP_REMOVE);
}

struct evict_arg {
	struct ferry_engine *e;
	unsigned core;
};

/*
 * SIEVE's second chance: the endpoint was used since the hand passed, or
 * its segment has requests in flight.  The busy test is a Dekker pair with
 * seg_acquire + rails_pick: we mark the rail gone, then look for
 * references; a submitter takes its reference, then looks at the rail.
 * Either we see its reference (and put the rail back) or it sees the rail
 * gone (and stripes over the others): never a part sent to a rail we free.
 */
static bool ep_keep(void *arg, uint32_t idx)
{
	struct evict_arg *x = arg;
	struct ferry_ep *ep = x->e->cores[x->core]->eps.eps[idx]; /* ours: ctl_lock */
	struct ferry_seg *s = seg_at(&x->e->segs, ep->seg_slot);

	if (xchg_relaxed(ep->visited, 0))
		return true;
	store_sc(s->rail_gone[x->core], 1); /* Dekker pair with seg_acquire + rails_pick */
	if (load_sc(s->inflight) == 0)
		return false;
	store_sc(s->rail_gone[x->core], 0);
	return true;
}

/* Room in core i's endpoint cache, evicting with SIEVE if it is full;
 * -EBUSY when every cached endpoint is in use.  ctl_lock held. */
int seg_make_room(struct ferry_engine *e, unsigned i)
{
	struct ferry_core *c = e->cores[i];
	struct evict_arg x = { e, i };
	uint32_t idx, slot;
	int rc;

	for (uint32_t tries = 0; sieve_full(&c->eps.cache); tries++) {
		if (tries == c->eps.cap)
			return -EBUSY;
		rc = sieve_evict(&c->eps.cache, ep_keep, &x, &idx);
		if (rc)
			return rc;
		/* Out of SIEVE's list already; seg_drop_ep unpublishes the index. */
		slot = c->eps.eps[idx]->seg_slot;
		rc = seg_drop_ep(e, seg_at(&e->segs, slot), slot, i, EP_EVICT);
		if (rc == 0) {
			WRITE_ONCE(c->eps.evictions, c->eps.evictions + 1); /* one writer: ctl_lock */
			return 0;
		}
		/* In use after all (seg_drop_ep): back in, as new; try another. */
		(void)sieve_insert(&c->eps.cache, idx);
	}
	return 0;
}

/* The peer's halves of endpoint ep to s are to be freed: queued, sent
 * by seg_disconnect_flush once ctl_lock is released. */
static void ep_disconnect_peer(struct ferry_engine *e, struct ferry_seg *s, struct ferry_ep *ep)
{
	for (unsigned k = 0; k < EP_MAX_QPS; k++) {
		seg_disconnect_later(e, s->address, ep->peer_tokens[k], 1);
		ep->peer_tokens[k] = 0;
	}
}

void seg_rail_set_down(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot,
		       int down)
{
	struct core_cmd cmd = { .type = CMD_EP_DOWN, .slot = slot, .rc = down };

	WRITE_ONCE(s->rail_down[i], (uint8_t)down); /* a hint; the command below is the order */
	if ((cmd.ep = s->eps[i]))
		core_command(e->cores[i], &cmd);
}

bool seg_mark_stale_quiet(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	if (xchg_relaxed(s->stale, 1))
		return false;
	for (unsigned i = 0; i < e->ncores; i++)
		seg_rail_set_down(e, s, i, slot, EP_STALE); /* the old incarnation's QPs are gone */
	return true;
}

void seg_mark_stale(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	if (seg_mark_stale_quiet(e, s, slot))
		log_warn("segment %s: the peer restarted (new incarnation): requests to the old "
			 "one fail with ESTALE; open the address (or name) again", s->address);
}

int ferry_segment_close(struct ferry_engine *e, ferry_seg_t seg)
{
	struct ferry_seg *s;
	uint32_t slot;

	if (!e)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (!s || s->state != SEG_OPEN) {
		pthread_mutex_unlock(&e->ctl_lock);
		return -ENOENT;
	}
	/* Another open of it is not closed yet: its owner may still use it. */
	if (s->opens > 1) {
		s->opens--;
		pthread_mutex_unlock(&e->ctl_lock);
		return 0;
	}
	s->opens = 0;
	store_sc(s->state, SEG_CLOSING); /* Dekker pair with seg_acquire: see there */
	/* Requests in flight end on their own: every slice completes, fails,
	 * times out or is retried (possibly on a QP the repair thread must
	 * replace, which needs ctl_lock: wait without it).  New submissions
	 * already see CLOSING, and nobody else touches a CLOSING slot. */
	pthread_mutex_unlock(&e->ctl_lock);
	while (load_sc(s->inflight))
		ferry_sleep_us(50);
	pthread_mutex_lock(&e->ctl_lock);
	seg_remove_eps(e, s, slot);
	seg_desc_free(s->desc);
	free(s->desc);
	s->desc = NULL;
	for (unsigned i = 0; i < s->n_old; i++) {
		seg_desc_free(s->old_descs[i]);
		free(s->old_descs[i]);
	}
	s->n_old = 0;
	s->address[0] = 0;
	s->name[0] = 0;
	store_sc(s->state, SEG_FREE);
	pthread_mutex_unlock(&e->ctl_lock);
	seg_disconnect_flush(e); /* the peer frees its halves before we return */
	return 0;
}

void seg_disconnect_all(struct ferry_engine *e)
{
	for (uint32_t slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		if (s->state != SEG_OPEN)
			continue;
		for (unsigned i = 0; i < e->ncores; i++)
			if (s->eps[i])
				ep_disconnect_peer(e, s, s->eps[i]);
	}
	seg_disconnect_flush_all(e);
}

void seg_release(struct ferry_seg *s)
{
	if (s->desc) {
		seg_desc_free(s->desc);
		free(s->desc);
	}
	for (unsigned i = 0; i < s->n_old; i++) {
		seg_desc_free(s->old_descs[i]);
		free(s->old_descs[i]);
	}
	s->desc = NULL;
	s->n_old = 0;
	memset(s->eps, 0, sizeof(s->eps));
}
