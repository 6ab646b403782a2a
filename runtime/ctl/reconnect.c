/* SPDX-License-Identifier: MIT */
/*
 * Reconnects of evicted endpoints, run by the repair thread: a request
 * parked for a segment whose endpoints the cache evicted (want_eps) gets
 * them made and hand-shaken again, beside the repairs in flight, and the
 * parked requests look again once it lands (reconnect_done).
 */
#include "runtime/ctl/repair.h"

#include <errno.h>
#include <stdlib.h>

#include "runtime/ctl/call.h"
#include "runtime/engine/engine.h"

/* A reconnect of slot ended (rc), having tried the cores in mask cores:
 * the requests parked for it look again. */
static void reconnect_done(struct ferry_engine *e, struct ferry_seg *s, uint32_t gen,
			   uint64_t cores, int rc, const int *errs)
{
	/* Closed (and maybe reopened) meanwhile: none of its requests is
	 * parked any more (the close waited for them); a new generation's
	 * are not told of the old one's result. */
	if (load_sc(s->gen) != gen)
		return;
	/* Each core's own result (errs: seg_reconnect_end's), else rc for all:
	 * published by the releases below. */
	for (unsigned i = 0; i < e->ncores; i++)
		if (cores & (1ull << i))
			WRITE_ONCE(s->connect_errs[i], errs ? errs[i] : rc < 0 ? rc : 0);
	/* After the endpoints it published; pairs with: load_acquire in park_state */
	store_release(s->connect_cores, cores);
	/* pairs with: load_acquire of connect_round in core_park/park_state */
	fetch_add_release(s->connect_round, 1);
	for (unsigned i = 0; i < e->ncores; i++)
		core_kick(e->cores[i]);
}

/* A reconnect whose handshakes are in flight. */
struct reconn_flight {
	struct ferry_engine *e;
	struct seg_reconn *r;
	uint32_t slot, gen;
};

static bool reconnecting(const struct repair *r, uint32_t slot, uint32_t gen)
{
	for (unsigned k = 0; k < r->n_reconn; k++)
		if (r->reconn_slots[k] == slot && r->reconn_gens[k] == gen)
			return true;
	return false;
}

/* The peer's NIC addresses that its handshakes connected to (its answer
 * to their GET_DESC: seg_handshake_start) are the segment's from now on,
 * as a repair's (repair_install): the cache stays right for a handshake
 * whose GET_DESC goes unanswered.  Only an answer: without one, raddr is
 * the copy taken at seg_reconnect_begin, and a repair may have put a
 * newer address in the cache since. */
static void reconnect_keep_addrs(struct ferry_engine *e, const struct reconn_flight *f,
				 const int *rcs)
{
	struct ferry_seg *s = seg_at(&e->segs, f->slot);
	const struct seg_hs *hs;
	unsigned n;

	hs = seg_reconnect_hs(f->r, &n);
	pthread_mutex_lock(&e->ctl_lock);
	/* (A refresh may have swapped s->desc: same incarnation, same NICs.) */
	if (s->state == SEG_OPEN && s->gen == f->gen)
		for (unsigned k = 0; k < n; k++)
			if (!rcs[k] && hs[k].peer->raddr_fresh)
				s->desc->nics[hs[k].peer->remote_nic].addr = hs[k].peer->raddr;
	pthread_mutex_unlock(&e->ctl_lock);
}

static void reconnect_landed(void *arg, const int *rcs)
{
	struct reconn_flight *f = arg;
	struct ferry_engine *e = f->e;
	struct repair *r = &e->repair;
	uint64_t cores = seg_reconnect_cores(f->r);
	int errs[FERRY_MAX_CORES];
	int rc;

	reconnect_keep_addrs(e, f, rcs);
	rc = seg_reconnect_end(e, f->r, rcs, errs);

	for (unsigned k = 0; k < r->n_reconn; k++)
		if (r->reconn_slots[k] == f->slot && r->reconn_gens[k] == f->gen) {
			r->reconn_slots[k] = r->reconn_slots[r->n_reconn - 1];
			r->reconn_gens[k] = r->reconn_gens[r->n_reconn - 1];
			WRITE_ONCE(r->n_reconn, r->n_reconn - 1); /* tests read it */
			break;
		}
	reconnect_done(e, seg_at(&e->segs, f->slot), f->gen, cores, rc, errs);
	r->landed = true; /* the DISCONNECTs of what it made and dropped */
	free(f);
}

/* The endpoints rec made, none connected (rc: why no handshake went),
 * go; nothing of the peer's to free. */
static void reconnect_unmake(struct ferry_engine *e, struct seg_reconn *rec, unsigned n, int rc)
{
	int rcs[FERRY_MAX_CORES];

	for (unsigned k = 0; k < n; k++)
		rcs[k] = rc;
	(void)seg_reconnect_end(e, rec, rcs, NULL);
}

/* No room in flight: the reconnect waits, its requests parked, until a
 * call lands (repair_flights_run). */
static void reconnect_later(struct repair *r, struct ferry_seg *s)
{
	r->reconn_deferred = true;
	/* pairs with: load_acquire in repair_reconnects (seen again then) */
	store_release(s->want_eps, 1);
}

/*
 * Reconnect slot's evicted rails: their handshakes go beside the repairs
 * in flight (a peer that does not answer holds up no other work of this
 * thread).  Without room for them (CTL_CALLS_MAX calls or
 * REPAIR_RECONN_MAX reconnects in flight) it waits for a call to land:
 * one round trip here would stop this thread -- every call in flight,
 * every repair -- for as long as the peer took to answer, 10 s if it did
 * not.
 */
static void reconnect_start(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
			    uint32_t gen)
{
	struct repair *r = &e->repair;
	struct reconn_flight *f;
	struct seg_reconn *rec;
	const struct seg_hs *hs;
	uint64_t cores;
	unsigned n = 0;
	int rc;

	/* Checked first: making the endpoints may evict others' for nothing. */
	if (!ctl_calls_room(r->calls) || r->n_reconn == REPAIR_RECONN_MAX) {
		reconnect_later(r, s);
		return;
	}
	rec = seg_reconnect_begin(e, s, slot, gen);
	if (!rec) {
		reconnect_done(e, s, gen, ~0ull, -ENOMEM, NULL);
		return;
	}
	cores = seg_reconnect_cores(rec);
	r->landed = true; /* making room may have evicted others' endpoints: their DISCONNECTs */
	hs = seg_reconnect_hs(rec, &n);
	if (!n) { /* nothing to send: closed meanwhile, or no endpoint could be made */
		int errs[FERRY_MAX_CORES];

		rc = seg_reconnect_end(e, rec, NULL, errs);
		reconnect_done(e, s, gen, cores, rc, errs);
		return;
	}
	f = malloc(sizeof(*f));
	rc = f ? 0 : -ENOMEM;
	if (f) {
		*f = (struct reconn_flight){ .e = e, .r = rec, .slot = slot, .gen = gen };
		r->reconn_slots[r->n_reconn] = slot;
		r->reconn_gens[r->n_reconn] = gen;
		WRITE_ONCE(r->n_reconn, r->n_reconn + 1); /* tests read it */
		rc = seg_handshake_start(e, r->calls, hs, n, false, reconnect_landed, f);
		if (!rc)
			return;
		WRITE_ONCE(r->n_reconn, r->n_reconn - 1);
		free(f);
	}
	reconnect_unmake(e, rec, n, rc);
	if (rc == -EBUSY) /* more peers than room */
		reconnect_later(r, s);
	else
		reconnect_done(e, s, gen, cores, rc, NULL);
}

/* Segments whose endpoints were evicted and that a request waits for
 * (one reconnect in flight per segment: a request that parks meanwhile
 * leaves want_eps set, seen once it lands). */
unsigned repair_reconnects(struct ferry_engine *e)
{
	unsigned n = 0;

	if (e->repair.reconn_deferred)
		return 0; /* no room in flight: until a call lands */

	for (uint32_t slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);
		uint32_t gen;

		if (!load_acquire(s->want_eps) || /* pairs with: store_release in core_park */
		    reconnecting(&e->repair, slot, load_sc(s->gen)) ||
		    !xchg_acq_rel(s->want_eps, 0)) /* pairs with: store_release in core_park */
			continue;
		/* Read after the flag: the generation of the request that set it
		 * (the slot may have been reopened since the check above). */
		gen = load_sc(s->gen);
		if (reconnecting(&e->repair, slot, gen)) {
			/* Seen once that one lands; pairs with: the load_acquire above. */
			store_release(s->want_eps, 1);
			continue;
		}
		reconnect_start(e, s, slot, gen);
		if (e->repair.reconn_deferred)
			break; /* the others wait too */
		n++;
	}
	return n;
}

/* A segment waits for a reconnect that could start now (the thread's wait). */
bool repair_reconnect_wanted(struct ferry_engine *e)
{
	for (uint32_t slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		if (s && READ_ONCE(s->want_eps) && !e->repair.reconn_deferred &&
		    !reconnecting(&e->repair, slot, load_sc(s->gen)))
			return true;
	}
	return false;
}
