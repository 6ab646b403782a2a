/* SPDX-License-Identifier: MIT */
/*
 * Ports and batches: the application side of the data plane.  A port
 * belongs to one application thread; it produces into one SPSC ring per
 * core.  A batch is a port's array of request slots.
 */
#ifndef FERRY_RUNTIME_SUBMIT_H
#define FERRY_RUNTIME_SUBMIT_H

#include <stdint.h>

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
	struct ferry_ring *rings;      /* one per core, port -> core */
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

/* submit.c, for prep.c: a slot made ready for a request of batch b, and
 * the parts of a validated request queued on its rails' cores. */
void rq_clear(struct ferry_rq *rq, struct rq_batch *b);
void rq_dispatch(struct ferry_port *p, struct ferry_rq *rq);
/* The rails (and parts) of rq, whose seg is referenced. */
void rq_rails(struct ferry_engine *e, struct ferry_rq *rq);

#endif /* FERRY_RUNTIME_SUBMIT_H */
