/* SPDX-License-Identifier: MIT */
/*
 * Ports and batches: the application side of the data plane.  A port
 * belongs to one application thread; it produces into one SPSC ring per
 * core.  A batch is a port's array of request slots.
 */
#ifndef FERRY_RUNTIME_SUBMIT_H
#define FERRY_RUNTIME_SUBMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/base/compiler.h"
#include "ring/ring.h"
#include "slice/request.h"

#define FERRY_MAX_PORTS 64

struct ferry_engine;

struct ferry_batch {
	struct ferry_port *port;
	struct ferry_rq *rqs;
	uint32_t capacity;
	uint32_t n;                    /* submitted since creation/reset */
	struct rq_batch acct;          /* pending (the futex word) and failed */
};

struct mem_region;
struct seg_desc;
struct seg_region;

struct ferry_port {
	struct ferry_engine *e;
	unsigned slot;
	uint32_t rr;                   /* next core for a one-part request */
	uint32_t batches;              /* live batches */
	uint32_t preps;                /* live prepared sets: they point at the port */
	struct ferry_ring *rings;      /* one per core, port -> core */
	/* Parts staged on the rings, published (and their cores kicked) at
	 * the end of a submit call, every SUBMIT_PUBLISH parts of a core, and
	 * before a wait for room: the port's thread only. */
	struct ferry_ring_run *runs;   /* one per core */
	uint64_t staged;               /* cores that may have parts staged */
	/* The regions its last request used: consecutive requests mostly hit
	 * the same ones, so the lookups (a lock, two binary searches) are
	 * skipped.  The port's thread only. */
	struct mem_region *lcache;     /* valid while e->regions_gen == lcache_gen */
	uint64_t lcache_gen;
	uint64_t rcache_seg;           /* the handle, */
	const struct seg_desc *rcache_desc; /* the descriptor it had, */
	const struct seg_region *rcache; /* and a region of it */
};

/* Free a port's rings and memory (engine destroy: no core reads them any more). */
void port_free(struct ferry_port *p);

/* submit.c, for prep.c: a slot made ready for a request of batch b (its
 * parts are queued by rq_dispatch, runtime/submit/dispatch.h). */
void rq_clear(struct ferry_rq *rq, struct rq_batch *b);

/* A segment's rails as one submit call picked them, for its next `left`
 * requests to it: the flags are hints (a rail that goes down meanwhile
 * fails its parts fast, or moves them), read again after RAILS_REUSE
 * requests or a wait for ring room. */
#define RAILS_REUSE 64
struct rails_snap {
	uint64_t rails;
	uint32_t n;
	uint32_t left;
};
/* rq_rails's slow path: pick (or, with no rail, ask for a reconnect). */
void rq_rails_pick(struct ferry_engine *e, struct ferry_rq *rq, struct rails_snap *snap);
/* The rails (and parts) of rq, whose seg is referenced since before snap
 * was last picked (left = 0: pick now). */
static inline void rq_rails(struct ferry_engine *e, struct ferry_rq *rq, struct rails_snap *snap)
{
	if (likely(snap->left && snap->rails)) {
		snap->left--;
		rq->rails = snap->rails;
		rq->nparts = snap->n;
	} else {
		rq_rails_pick(e, rq, snap);
	}
}

#endif /* FERRY_RUNTIME_SUBMIT_H */
