/* SPDX-License-Identifier: MIT */
/*
 * Endpoints: one per (local core/NIC, opened segment): the set of QPs from
 * this core's NIC to one NIC of the peer, and the slices waiting for room on
 * them.  An endpoint belongs to exactly one core.  The control path creates
 * and connects it, has the core attach its QPs (command ring), then
 * publishes it in the core's endpoint table (an RCU-published array indexed
 * by segment slot: the core reads it with no lock).  Teardown is two-phase:
 * the core stops posting, moves the QPs to the error state, consumes the
 * flushes (each in-flight slice is retried elsewhere or failed) until the
 * depth counters are zero, and destroys the QPs; then the control path
 * unpublishes it and frees its memory after a grace period (call_rcu, see
 * ep/teardown.c) -- a core may still hold the pointer from its last pass.
 */
#ifndef FERRY_EP_H
#define FERRY_EP_H

#include <stdbool.h>
#include <stdint.h>
#include <urcu/urcu-qsbr.h>

#include "ep/rail.h"
#include "qp/post/post.h"
#include "ring/base/atomics.h"
#include "slice/slice.h"

#define EP_MAX_QPS 16

struct ep_reaper;

struct ferry_ep {
	struct slice_list pending;   /* cut, waiting for QP/CQ room */
	struct ferry_ep *next_active; /* on the core's list of eps with pending work */
	uint8_t active;
	uint8_t closing;             /* teardown started: post nothing more */
	uint8_t down;                /* the peer cannot be reached: fail fast */
	uint8_t qps_gone;            /* the owner destroyed the QPs (teardown done) */
	uint8_t tx;                  /* which of its core's contexts (transports) it uses */
	struct rail rail;            /* health: errors, pauses (ep/rail.h) */
	uint64_t all_broken_since;   /* ticks: every QP broken with slices waiting; 0: not */
	const uint8_t *cut_off;      /* the control path's "this rail cannot reach the
	                              * peer" flag (NULL: none): its slices move */
	uint32_t seg_slot;
	uint32_t seg_gen;
	uint32_t cache_idx;          /* its entry in the core's table (ep/table.h) */
	uint32_t remote_nic;         /* index of the peer's NIC these QPs reach */
	uint32_t lkey_off;           /* where its core's lkey for tx lies in a local
	                              * region: set by the owner (runtime) */
	uint32_t nqps;
	uint32_t rr;                 /* next QP to try first */
	struct qpx *qps[EP_MAX_QPS];
	uint64_t peer_tokens[EP_MAX_QPS]; /* the peer's half of each QP (control path) */
	/* SIEVE: used since the hand passed (the core sets it, the control
	 * path reads and clears it).  A word of its own, away from the bytes
	 * only the core touches: a compiler may read neighbouring bytes as one. */
	uint32_t visited;
	struct rcu_head rcu;         /* freed after a grace period */
	struct ferry_ep *next_retired; /* unpublished, waiting for call_rcu */
	struct ep_reaper *reaper;    /* who frees it (ep/teardown.c) */
};

/* Create an endpoint with nqps unconnected QPs of max_wr each on ctx (control path). */
int ep_create(struct qctx *ctx, uint32_t nqps, uint32_t max_wr, struct ferry_ep **out);

/* The endpoint's half of the handshake: one entry per QP. */
void ep_qp_infos(const struct qctx *ctx, const struct ferry_ep *ep, struct nic_qp_info *out);

/* Connect QP i to the peer's QP rqps[i] on the NIC at remote (control path). */
int ep_connect(struct qctx *ctx, struct ferry_ep *ep, const struct nic_addr *remote,
	       const struct nic_qp_info *rqps);

/* Attach ep's QPs to the core's table: the owning core. */
int ep_attach(struct qctx *ctx, struct ferry_ep *ep);

/* Destroy the QPs of a drained endpoint (depth 0); the owning core.  Idempotent. */
void ep_destroy_qps(struct qctx *ctx, struct ferry_ep *ep);

/* Free an endpoint's memory (its QPs are gone); nobody may hold it any more. */
void ep_free(struct ferry_ep *ep);

/* Both: an endpoint that was never published, or once every core stopped. */
void ep_destroy(struct qctx *ctx, struct ferry_ep *ep);

/* Mark ep used (SIEVE's visited bit): the core, on each request part. */
static inline void ep_touch(struct ferry_ep *ep)
{
	/* A hint for the control path's SIEVE hand: no order needed. */
	if (!READ_ONCE(ep->visited))
		WRITE_ONCE(ep->visited, 1);
}

/* Post pending slices over the healthy QPs, one doorbell per QP; returns WRs posted. */
uint32_t ep_post(struct qctx *ctx, struct ferry_ep *ep);

/* True when no QP of ep can take work any more. */
bool ep_all_broken(const struct ferry_ep *ep);

/* WRs outstanding on all QPs of ep. */
uint32_t ep_depth(const struct ferry_ep *ep);
/* Its QPs' WRs will never come back (the device died): end them with err. */
void ep_abandon(struct qctx *ctx, struct ferry_ep *ep, int err);

/* Move every QP of ep to the error state (their WRs flush). */
void ep_set_error(struct qctx *ctx, struct ferry_ep *ep);

#endif /* FERRY_EP_H */
