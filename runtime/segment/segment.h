/* SPDX-License-Identifier: MIT */
/*
 * Segments: a peer engine's registered memory as seen from here, and the
 * endpoints every local core holds to it (one rail per core).  The control
 * path opens, refreshes and closes them under the engine's ctl_lock;
 * submitters take a reference (inflight) with no lock, and the cores and
 * submitters read the per-rail flags.
 */
#ifndef FERRY_RUNTIME_SEGMENT_H
#define FERRY_RUNTIME_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "ep/ep.h"
#include "ring/base/atomics.h"
#include "runtime/engine/opts.h"
#include "runtime/ctl/wire.h"
#include "runtime/ferry.h"

struct ferry_engine;
struct qpx;

enum seg_state { SEG_FREE = 0, SEG_OPENING, SEG_OPEN, SEG_CLOSING };

struct ferry_seg {
	uint32_t gen;                  /* store_sc by the control path; load_sc by submitters */
	uint32_t state;                /* enum seg_state: likewise */
	uint64_t inflight;             /* requests using the segment: Dekker pair, see segment.c */
	uint32_t stale;                /* the peer restarted: refuse with -ESTALE */
	char address[64];
	char transport[16];            /* the provider the segment goes over (route.c) */
	uint8_t tx;                    /* its context in every local core */
	uint16_t n_peer_nics;          /* the peer's contexts of that transport: */
	uint16_t peer_nics[WIRE_MAX_NICS]; /* their descriptor entries */
	struct seg_desc *desc;         /* current descriptor (rcu-style: store_release) */
	struct seg_desc *old_descs[8]; /* replaced by refresh, kept until close */
	unsigned n_old;
	struct ferry_ep *eps[FERRY_MAX_CORES]; /* the control path's view (ctl_lock) */
	uint64_t qp_tokens[FERRY_MAX_CORES][EP_MAX_QPS]; /* the peer's half of each QP */
	uint8_t rail_down[FERRY_MAX_CORES]; /* the core's rail cannot reach the peer */
	uint8_t rail_paused[FERRY_MAX_CORES]; /* written by the core: rail health */
	uint8_t rail_gone[FERRY_MAX_CORES]; /* no endpoint (evicted, no room): load_sc/store_sc */
	uint32_t want_eps;             /* a request waits for evicted endpoints */
	uint32_t connect_round;        /* reconnects the repair thread finished */
	int32_t connect_err;           /* the last one's result (0 or -errno) */
};

/* The segment of handle h (NULL: unknown handle or slot), its slot in *slot. */
struct ferry_seg *seg_lookup(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot);

/* route.c: the transports in ferry's order of preference. */
#define ROUTE_N 4
extern const char *const route_order[ROUTE_N];

/* route.c: the next transport (from *next on, in ferry's order) that both
 * engines have and that reaches the peer of descriptor d: fills transport,
 * tx and peer_nics.  -EPROTONOSUPPORT when none is left. */
int seg_route_next(struct ferry_engine *e, struct ferry_seg *s, const struct seg_desc *d,
		   unsigned *next);

/* A reference on an open segment for a request (NULL: closed or unknown). */
struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot);
void seg_release_ref(struct ferry_seg *s);

/* Mark core i's rail to s down (or up) and tell its core (fail fast); ctl_lock held. */
void seg_rail_set_down(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot,
		       int down);
/* The peer restarted: fail the segment's requests fast (-ESTALE); ctl_lock held. */
void seg_mark_stale(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot);
/* Connect the rails of segment slot (generation gen) that have no endpoint
 * (evicted); takes ctl_lock, does nothing unless the segment is still open
 * in that generation (the repair thread, for parked requests).  Rails
 * added, or -errno. */
int seg_reconnect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, uint32_t gen);
/* Engine destroy: tell every peer to free its half of our endpoints (best effort). */
void seg_disconnect_all(struct ferry_engine *e);
/* Connect q (of core i) to a new responder QP on the peer; ctl_lock held. */
int seg_qp_handshake(struct ferry_engine *e, unsigned i, struct ferry_seg *s,
		     uint32_t remote_nic, struct qpx *q, uint64_t *token);
/* Tell the peer to free the responder QP named by token (0: nothing). */
void seg_disconnect_token(struct ferry_engine *e, struct ferry_seg *s, uint64_t token);
/* Free a slot's descriptors (engine destroy). */
void seg_release(struct ferry_seg *s);

/* The core has no endpoint to the segment (see ep_keep's Dekker pair). */
static inline bool rail_gone(const struct ferry_seg *s, unsigned core)
{
	return load_sc(s->rail_gone[core]);
}

/* A rail (core's endpoint to a segment) new work should avoid. */
static inline bool rail_unusable(const struct ferry_seg *s, unsigned core)
{
	/* down and paused are hints: a request sent to a rail that just went
	 * down fails fast or moves, it is never lost. */
	return rail_gone(s, core) || READ_ONCE(s->rail_down[core]) ||
	       READ_ONCE(s->rail_paused[core]);
}

#endif /* FERRY_RUNTIME_SEGMENT_H */
