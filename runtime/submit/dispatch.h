/* SPDX-License-Identifier: MIT */
/*
 * Dispatch: a validated request's parts staged on its rails' cores' rings
 * (a port's runs, ring/ring.h), and published -- the cores shown them and
 * kicked -- every SUBMIT_PUBLISH parts of a core, before a wait for room,
 * and at the end of every submit call.  The port's thread only.  Inline:
 * the submit loops' per-request path (submit.c, prep.c).
 */
#ifndef FERRY_RUNTIME_DISPATCH_H
#define FERRY_RUNTIME_DISPATCH_H

#include "runtime/engine/engine.h"

#define SUBMIT_PUBLISH 32 /* parts staged on a core before it is shown them */

/* Room on every ring rq's parts go to, its staged parts counted. */
struct dispatch;
/* The rings rq's parts would be staged on have room (ferry_try_submit). */
bool rq_fits(const struct dispatch *d, const struct ferry_rq *rq);
/* Core `core`'s staged parts, shown to it. */
void port_publish_core(struct ferry_port *p, unsigned core);
/* Every staged part, shown to its core: before the submit call returns. */
void port_publish(struct ferry_port *p);
/* A full ring: publish, then wait for room and stage; true if it waited. */
bool part_wait(struct ferry_port *p, unsigned core, void *tagged);
/* rq_dispatch for a request of several parts. */
bool rq_dispatch_parts(const struct dispatch *d, struct ferry_rq *rq, unsigned core);

/*
 * A submit loop's view of its port's dispatch state, in locals (the stores
 * into the requests' slots would make the compiler reload the port's
 * fields for every request): dispatch_begin, rq_dispatch per request,
 * dispatch_end.
 */
struct dispatch {
	struct ferry_port *p;
	struct ferry_ring *rings;
	struct ferry_ring_run *runs;
	unsigned ncores;
	unsigned rr;                   /* p->rr, stored back by dispatch_end */
};

static inline void dispatch_begin(struct dispatch *d, struct ferry_port *p)
{
	d->p = p;
	d->rings = p->rings;
	d->runs = p->runs;
	d->ncores = p->e->ncores;
	d->rr = p->rr;
}

static inline void dispatch_end(const struct dispatch *d)
{
	d->p->rr = d->rr;
}

/* Stage tagged (a request's part) on core `core`, whose ring and run
 * those are: with SUBMIT_PUBLISH staged there, the core is shown them (it
 * starts on them while the rest is validated).  True when it had to wait
 * for room. */
static inline bool part_stage(const struct dispatch *d, unsigned core, struct ferry_ring *ring,
			      struct ferry_ring_run *run, void *tagged)
{
	bool waited = false;

	if (unlikely(!ferry_ring_stage(ring, run, tagged)))
		waited = part_wait(d->p, core, tagged);
	if (run->n == 1)
		d->p->staged |= 1ull << core;
	else if (unlikely(run->n >= SUBMIT_PUBLISH))
		port_publish_core(d->p, core);
	return waited;
}

/* part_stage for a run of parts to one core that was marked in staged
 * before the run (no test per part): a wait for room publishes and clears
 * the marks, so it marks the core again. */
static inline bool part_stage_marked(const struct dispatch *d, unsigned core,
				     struct ferry_ring *ring, struct ferry_ring_run *run,
				     void *tagged)
{
	if (unlikely(!ferry_ring_stage(ring, run, tagged))) {
		bool waited = part_wait(d->p, core, tagged);

		d->p->staged |= 1ull << core;
		return waited;
	}
	if (unlikely(run->n >= SUBMIT_PUBLISH))
		port_publish_core(d->p, core);
	return false;
}

/* Stage part `part` of rq on core `core`; true when it waited for room. */
static inline bool part_enqueue(const struct dispatch *d, unsigned core, struct ferry_rq *rq,
				unsigned part)
{
	return part_stage(d, core, &d->rings[core], &d->runs[core], rq_part_tag(rq, part));
}

/* Stage rq's parts: they go to the rails in turn, starting at a core that
 * moves on with every request (no division: this runs per request).
 * True when it waited for room on a ring (the rails may have changed). */
static inline __attribute__((always_inline)) bool rq_dispatch(struct dispatch *d,
							    struct ferry_rq *rq)
{
	unsigned core = d->rr;

	if (++d->rr >= d->ncores)
		d->rr = 0;
	if (rq->nparts != 1)
		return rq_dispatch_parts(d, rq, core);
	while (!(rq->rails & (1ull << core))) /* one part: the first rail from core on */
		if (++core == d->ncores)
			core = 0;
	return part_enqueue(d, core, rq, 0);
}

/* k requests dispatched without rq_dispatch (their one rail decided the
 * core): the round-robin start moves on as k calls would have moved it. */
static inline void dispatch_skip(struct dispatch *d, uint32_t k)
{
	d->rr = (d->rr + k) % d->ncores; /* once per run: a division is fine */
}

/*
 * Fill a run's slot q, its request i, from t, the run's first (same
 * batch, segment and rails; at most nrails parts); false to end the run
 * before it.  Passed to dispatch_run as a constant, so it is inlined
 * there.
 */
typedef bool run_fill_fn(const void *ctx, struct ferry_rq *q, const struct ferry_rq *t,
			 uint32_t i, uint32_t nrails);

/*
 * The loop of a run: requests i..end of a submit call that share the
 * rails (nrails of them) picked for t, the run's first, each filled into
 * its slot rqs[i] by fill and staged.  one (a constant where it is hot):
 * the rails are one core, so each request is one part staged straight on
 * that core's ring (the core marked staged once: no rail scan or part
 * count per request; the caller moves the round-robin start on with
 * dispatch_skip).  wait: else stop before a request
 * whose rings have no room.  Returns where it stopped; *waited when a
 * wait for ring room ended it (the rails may have changed).  ferry_submit
 * (submit.c) and ferry_prep_submit (prep.c) run their runs through it.
 */
static inline __attribute__((always_inline)) uint32_t
dispatch_run(struct dispatch *d, uint64_t rails, uint32_t nrails, bool one, bool wait,
	     const struct ferry_rq *t, struct ferry_rq *rqs, uint32_t i, uint32_t end,
	     run_fill_fn *fill, const void *ctx, bool *waited)
{
	unsigned core = one ? (unsigned)__builtin_ctzll(rails) : 0;
	struct ferry_ring *ring = &d->rings[core];
	struct ferry_ring_run *run = &d->runs[core];

	if (one) { /* whatever the run stages goes to core: marked once */
		d->p->staged |= 1ull << core;
		nrails = 1; /* a constant in the fills */
	}
	for (; i < end; i++) {
		struct ferry_rq *q = &rqs[i];

		if (!fill(ctx, q, t, i, nrails) || (!wait && !rq_fits(d, q)))
			break;
		if (one ? part_stage_marked(d, core, ring, run, q) : rq_dispatch(d, q)) {
			*waited = true;
			return i + 1;
		}
	}
	return i;
}

/*
 * dispatch_run for rails that are one core, waiting for room (dispatch_run's
 * one and wait), the parts staged through a window on that core's ring
 * (ring/ring.h) while no publish is due and the room last seen allows, the
 * rest by part_stage_marked (a look for room, a wait, a publish every
 * SUBMIT_PUBLISH).  The window holds three more values in registers: for
 * ferry_prep_submit's loop, which checks nothing, 5 instructions fewer per
 * request; ferry_submit's, which keeps the run's bounds live for its
 * checks, spills and loses ~1 (make callgrind), so it stages with
 * dispatch_run.  The caller moves the round-robin start on (dispatch_skip).
 */
static inline __attribute__((always_inline)) uint32_t
dispatch_run_window(struct dispatch *d, uint64_t rails, const struct ferry_rq *t,
		    struct ferry_rq *rqs, uint32_t i, uint32_t end, run_fill_fn *fill,
		    const void *ctx, bool *waited)
{
	unsigned core = (unsigned)__builtin_ctzll(rails);
	struct ferry_ring *ring = &d->rings[core];
	struct ferry_ring_run *run = &d->runs[core];
	struct ferry_ring_window w;

	d->p->staged |= 1ull << core; /* whatever the run stages goes to core */
	/* below SUBMIT_PUBLISH - 1 staged, one more needs no publish */
	ferry_ring_window_open(ring, run, &w, SUBMIT_PUBLISH - 1);
	for (; i < end; i++) {
		struct ferry_rq *q = &rqs[i];

		if (!fill(ctx, q, t, i, 1))
			break;
		if (likely(ferry_ring_window_put(&w, q)))
			continue;
		ferry_ring_window_close(ring, run, &w);
		if (part_stage_marked(d, core, ring, run, q)) {
			*waited = true;
			return i + 1;
		}
		ferry_ring_window_open(ring, run, &w, SUBMIT_PUBLISH - 1);
	}
	ferry_ring_window_close(ring, run, &w);
	return i;
}

#endif /* FERRY_RUNTIME_DISPATCH_H */
