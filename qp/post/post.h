/* SPDX-License-Identifier: MIT */
/*
 * Posting and polling for one core: a core owns one NIC context, one CQ and
 * the QPs of its endpoints.  Posted slices are kept per QP in a FIFO in post
 * order; wr_id names (QP index, sequence number), so a signalled completion
 * retires every earlier unsignalled WR of that QP too (RC completes in
 * order), and flush completions after an error retire WRs one by one.
 * Depth counters are decremented once per QP per poll burst.
 */
#ifndef FERRY_QP_POST_H
#define FERRY_QP_POST_H

#include <stdint.h>

#include "qp/nic.h"
#include "qp/post/depth.h"
#include "slice/slice.h"

#define QP_MAX_PER_CORE 1024
#define POLL_BURST 64
#define POST_MAX_CHAIN 256

/*
 * wr_id = (generation << QPX_INDEX_BITS | QP index) << 32 | sequence.  The
 * generation counts the QPs that held the index before: a completion that
 * comes after its QP was given up (qpx_abandon) and the index reused can
 * never retire the new QP's slices.
 */
#define QPX_INDEX_BITS 10
#define QPX_GEN_MASK ((1u << (32 - QPX_INDEX_BITS)) - 1)
_Static_assert(QP_MAX_PER_CORE == 1u << QPX_INDEX_BITS, "a QP index is QPX_INDEX_BITS wide");

/*
 * What the posting context reports upward, to its owner (a core): calls,
 * not includes, so that qp/ knows nothing of the runtime above it.
 */
struct qp_events {
	/* A slice's WR completed (err 0) or failed (negative errno); the owner
	 * retries it or ends it.  Once per slice. */
	void (*slice_done)(void *owner, struct slice *s, int err);
	/* A run of a QP's WRs completed without error, in post order: the
	 * slices fifo[(from + i) & mask] for i < n (the QP's posted slices).
	 * One call per completion instead of slice_done per slice; NULL:
	 * slice_done for each. */
	void (*slices_ok)(void *owner, struct slice *const *fifo, uint32_t mask, uint32_t from,
			  uint32_t n);
	/* n WRs retired by one completion took ticks from post to poll (the
	 * latency histogram); NULL when the owner does not count. */
	void (*latency)(void *owner, uint64_t ticks, uint32_t n);
	/* A poll retired WRs and called slice_done or slices_ok: whatever the
	 * owner set aside in those calls is due now (NULL: nothing). */
	void (*burst_done)(void *owner);
};

/* Posting and polling counters: single writer (the owning core), read anywhere. */
struct qp_counters {
	uint64_t wrs_posted;      /* WRs handed to the NIC */
	uint64_t completions;     /* WRs retired, signalled or not */
	uint64_t cqes;            /* completion entries polled */
	uint64_t doorbells;       /* post calls */
	uint64_t polls;           /* CQ polls */
	uint64_t empty_polls;     /* CQ polls that returned nothing */
	uint64_t qp_full;         /* a QP had no room for pending work (depth or READ credits) */
	uint64_t cq_full;         /* the CQ quota had no room */
	uint64_t wr_errors;       /* completions with an error status */
	uint64_t provider_errors; /* post/poll failures: always a bug */
};

/* One QP as a core sees it. */
struct qpx {
	struct WrDepthBlock depth;  /* own cache line */
	struct nic_qp *nqp;
	struct slice **fifo;        /* posted, not retired, in post order */
	uint32_t fifo_mask;
	uint32_t head;              /* sequence of the oldest unretired WR */
	uint32_t tail;              /* sequence of the next WR to post */
	uint32_t burst_retired;     /* retired in the current poll burst */
	uint32_t reads;             /* RDMA READs outstanding: bounded by max_rd_atomic */
	uint64_t oldest_tsc;        /* when the WR at head was posted (approx.) */
	uint16_t index;             /* in the core's QP table */
	uint64_t wr_hi;             /* its wr_ids' upper half (generation, index) */
	uint32_t stuck_head;        /* broken: head when the sweep last saw it move */
	uint64_t stuck_since;       /* ... and when (ticks; 0: not watched yet) */
	uint8_t broken;             /* saw an error: no more posting */
	uint8_t in_burst;
	uint8_t timed_out;           /* set in error by the timeout check */
	uint8_t repair_asked;        /* broken and drained: replacement requested */
	uint64_t repair_asked_at;    /* when (ticks): asked again if nothing came of it */
	void *owner;                /* the endpoint */
};

/* The per-core posting context. */
struct qctx {
	CqQuotaBlock cq_quota;      /* own cache line */
	const struct nic_provider *prov;
	struct nic *nic;
	struct nic_cq *cq;
	const struct qp_events *ev; /* completions go up through these */
	void *owner;                /* their first argument */
	struct qp_counters ctr;
	uint32_t signal_every;
	uint32_t max_reads;         /* READs in flight per QP (the NIC's max_rd_atomic) */
	uint8_t serves;             /* NIC_CAP_SERVES: poll every pass, sleep on cq_fd */
	uint64_t now;               /* the core's clock for this loop pass */
	uint32_t n_qps;             /* high-water mark of qps[] */
	struct qpx *qps[QP_MAX_PER_CORE];
	uint32_t qp_gen[QP_MAX_PER_CORE]; /* QPs that held each index before (wr_id) */
	uint32_t cq_lent;           /* CQ room qpx_abandon set aside for late completions */
};

#define QPX_UNATTACHED 0xffff

/*
 * The device does not give q's WRs back (it died: no completion, not even
 * the flushes of q set to error): end every outstanding slice with err and
 * give back q's depth.  Their CQ credits are given back too, and the CQ's
 * room shrinks by as many until completions that retire nothing (retired
 * sequence, or an older generation of the index) have come for them: a
 * device slower than we waited for has an entry for each of its late
 * completions, and one that recovers gets its room back.
 */
void qpx_abandon(struct qctx *ctx, struct qpx *q, int err);

/* Create a QP on ctx's NIC and CQ, not yet connected (control path: it
 * reads only ctx's immutable fields and does not touch the QP table). */
int qpx_create(struct qctx *ctx, uint32_t max_wr, void *owner, struct qpx **out);
/* Give q an index in the core's QP table: the owning core only. */
int qctx_attach(struct qctx *ctx, struct qpx *q);
/* Destroy a QP whose depth is 0: the owning core (or before it runs / after it stopped). */
void qpx_destroy(struct qctx *ctx, struct qpx *q);

/* Post up to max slices from *list on q in one doorbell; returns the count. */
uint32_t qpx_post(struct qctx *ctx, struct qpx *q, struct slice_list *list, uint32_t max,
		  uint64_t now);

/* Poll one burst; each retired slice goes to ctx->ev->slice_done or
 * slices_ok.  Returns
 * CQEs seen (<0 on provider error). */
int qctx_poll(struct qctx *ctx);

/* Map a completion status to a negative errno. */
int wc_status_errno(uint16_t status);

#endif /* FERRY_QP_POST_H */
