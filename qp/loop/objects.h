/* SPDX-License-Identifier: MIT */
/*
 * loop: the software NIC's objects, shared by its control path (loop.c)
 * and its execution engine (exec.c): contexts, CQs, QPs, the WRs queued
 * on a QP, and the slots of the process-global MR table.  The fields say
 * who owns them: the posting/polling core, or the control path under
 * loop_lock.
 */
#ifndef FERRY_QP_LOOP_OBJECTS_H
#define FERRY_QP_LOOP_OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/list.h>

#include "qp/nic.h"
#include "qp/soft/soft.h"
#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

/* Keys: generation (16 bits, never 0) << 16 | slot index (16 bits). */
#define LOOP_MR_BITS 16
#define LOOP_MR_SLOTS (1u << LOOP_MR_BITS)
#define LOOP_MR_MASK (LOOP_MR_SLOTS - 1)

/* Counter indices; the poll thread is the only writer of a CQ's counters. */
enum {
	CNT_WRS,
	CNT_BYTES,
	CNT_ERRS,
	CNT_LOST,
	CNT_FATAL,
	CNT_SQ_OVF,
	CNT_CQ_OVF,
	CNT_NR,
};

#define LOOP_EVENTS 16

struct loop_ctx {
	uint32_t id;
	struct cds_list_head link;	/* in loop_ctxs (loop_lock) */
	struct cds_list_head cqs;	/* struct loop_cq.link (loop_lock) */
	uint32_t ncq_created;	/* ordinal of the next CQ: seeds its PRNG */
	uint32_t nmr;		/* live MRs: close scans the table only if > 0 */
	uint64_t retired[CNT_NR]; /* counters of destroyed CQs (loop_lock) */

	/* Fault plan: written by loop_set_faults, read by polls. */
	uint64_t thr_err;
	uint64_t thr_lost;
	uint64_t thr_fatal;
	uint64_t seed;
	uint32_t fault_epoch; /* bumped after each change */
	int nocopy;
	uint32_t no_new_qps;         /* loop_faults.no_new_qps (READ_ONCE) */
	uint32_t silent_peer;        /* loop_faults.silent_peer */
	uint32_t dead;               /* loop_faults.dead (READ_ONCE) */

	/* Device events injected by tests (loop_lock), announced on event_fd. */
	int event_fd;
	struct nic_event events[LOOP_EVENTS];
	uint32_t nevents;
};

struct loop_cq {
	/* Owned by the polling core. */
	struct loop_ctx *ctx;
	struct soft_cq wcq;
	struct cds_list_head active; /* QPs with a non-empty SQ */
	uint64_t rng;
	uint64_t thr_err;	/* thresholds on a 32-bit draw; 0 = off */
	uint64_t thr_lost;
	uint64_t thr_fatal;
	uint32_t silent_peer;
	uint32_t fault_epoch;	/* ctx->fault_epoch the fields above reflect */
	uint32_t ordinal;
	uint64_t cnt[CNT_NR];

	/* Control path, under loop_lock. */
	struct cds_list_head link;	/* in ctx->cqs */
	struct cds_list_head qps;	/* struct loop_qp.link */

	/* Written by the core, read by dereg_mr and loop_get_counters. */
	uint64_t poll_seq ferry_cache_aligned; /* odd while executing (soft.h) */
	uint64_t pub[CNT_NR];
};

struct loop_qp {
	/* Owned by the posting/polling core. */
	struct cds_list_head act;	/* in cq->active while the SQ is not empty */
	struct soft_wqe *sq;
	uint32_t sq_size;
	uint32_t sq_head;
	uint32_t sq_tail;
	uint32_t sq_count;
	uint32_t qp_num;
	uint32_t local_id;	/* our context's id: lkeys must belong to it */
	uint32_t peer;		/* copy of remote_id taken by post */
	bool error;
	bool stalled;		/* a lost completion: nothing moves until error */
	struct loop_cq *cq;

	uint32_t remote_id; /* set once by qp_connect; 0 = not connected */
	struct cds_list_head link;	/* in cq->qps (loop_lock) */
};

/*
 * One MR slot.  key is 0 while the slot is free or being invalidated;
 * owner/base/len are written under loop_lock before key is published and
 * read by polls only after they loaded a matching key.
 */
struct loop_mr_slot {
	uint32_t key;
	uint32_t owner;
	uint64_t base;
	uint64_t len;
	uint16_t gen;
	uint8_t access;               /* NIC_ACCESS_* a peer has */
};

/* The MR table, indexed by key & LOOP_MR_MASK (loop.c). */
extern struct loop_mr_slot loop_mrs[LOOP_MR_SLOTS];

/* The poll path (exec.c): members of nic_loop_provider (see qp/nic.h). */
int loop_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad);
int loop_poll(struct nic_cq *ncq, int n, struct nic_wc *wc);
int loop_qp_set_error(struct nic_qp *nqp);
uint32_t loop_qp_num(const struct nic_qp *nqp);

static inline struct loop_ctx *ctx_of(struct nic *n)
{
	return (struct loop_ctx *)(void *)n;
}

static inline struct loop_cq *cq_of(struct nic_cq *c)
{
	return (struct loop_cq *)(void *)c;
}

static inline struct loop_qp *qp_of(struct nic_qp *q)
{
	return (struct loop_qp *)(void *)q;
}

#endif /* FERRY_QP_LOOP_OBJECTS_H */
