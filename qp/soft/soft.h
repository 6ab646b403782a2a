/* SPDX-License-Identifier: MIT */
/*
 * soft: what every software NIC (loop, cma, tcp) shares.  Their work
 * happens on the core that polls the CQ, inside its post and poll calls,
 * so each keeps the same four things:
 *
 *   - the completion queue: a ring of struct nic_wc with exactly the
 *     configured capacity.  A CQE with no room is lost, counted by the
 *     provider, and reported once as -EOVERFLOW (the caller broke its CQ
 *     quota, as on a real NIC);
 *   - the busy sequence: a counter on the CQ, odd while the core is inside
 *     a post or poll of it.  A control path that takes something away the
 *     core may be using (a key, a QP) unpublishes it with a seq_cst store,
 *     then waits until every CQ that was busy has moved on
 *     (soft_busy_wait); a call that starts later sees it gone;
 *   - the counters: the core counts in cnt[] (its own), copies them to
 *     pub[] (beside the busy sequence, read by the control path) at the
 *     end of a poll, and a destroyed CQ adds its pub[] to its context's
 *     retired[], so that a context's totals never go back;
 *   - the queued WR (loop, cma): struct nic_wr without its chain pointer,
 *     copied whole by post.
 *
 * What the hot path calls is static inline here; the control path's side
 * is in soft.c.  Their lists are liburcu's cds_list; a list of CQs (which
 * are cache-aligned) is walked with cds_list_for_each and cds_list_entry,
 * not cds_list_for_each_entry, whose end test forms a CQ pointer from the
 * list head itself: misaligned for the type, which UBSan reports.
 */
#ifndef FERRY_QP_SOFT_SOFT_H
#define FERRY_QP_SOFT_SOFT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qp/nic.h"
#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

/* ------------------------------------------------------ the completion queue */

/* Owned by the polling core. */
struct soft_cq {
	struct nic_wc *ring;
	uint32_t size;
	uint32_t head;
	uint32_t tail;
	uint32_t count;
	bool overflow; /* a CQE was lost: the next poll says -EOVERFLOW */
};

/* Allocate the ring of q for cqe completions; 0 or -ENOMEM. */
int soft_cq_init(struct soft_cq *q, uint32_t cqe);
/* Free the ring of q (one soft_cq_init made, or one left zeroed). */
void soft_cq_fini(struct soft_cq *q);

/* Queue a completion; false when q is full (the CQE is lost, and the
 * next soft_cq_poll reports it: the caller counts its overflow). */
static inline bool soft_cq_push(struct soft_cq *q, uint64_t wr_id, uint32_t qp_num, uint8_t op,
				enum nic_wc_status st)
{
	struct nic_wc *c;

	if (unlikely(q->count == q->size)) {
		q->overflow = true;
		return false;
	}
	c = &q->ring[q->tail];
	c->wr_id = wr_id;
	c->qp_num = qp_num;
	c->status = (uint16_t)st;
	c->op = op;
	if (++q->tail == q->size)
		q->tail = 0;
	q->count++;
	return true;
}

/* A poll's result: -EOVERFLOW once after a lost CQE, else how many of
 * the queued completions (at most n) it moved to wc. */
static inline int soft_cq_poll(struct soft_cq *q, uint32_t n, struct nic_wc *wc)
{
	if (unlikely(q->overflow)) {
		/* Reported once; the CQEs that did fit are returned by later polls. */
		q->overflow = false;
		return -EOVERFLOW;
	}
	if (n > q->count)
		n = q->count;
	for (uint32_t i = 0; i < n; i++) {
		wc[i] = q->ring[q->head];
		if (++q->head == q->size)
			q->head = 0;
	}
	q->count -= n;
	return (int)n;
}

/* ---------------------------------------------------------- the busy sequence */

/* The core enters a post or poll of the CQ whose sequence is seq (now odd);
 * returns what soft_busy_leave takes. */
static inline uint64_t soft_busy_enter(uint64_t *seq)
{
	/* seq_cst: a Dekker pair with the control path's seq_cst store that
	 * unpublishes a key or a QP, then its load_sc in soft_busy_wait:
	 * either it sees us inside, or we see what it cleared. */
	return fetch_add_sc(*seq, 1);
}

/* The core leaves (even again).  Release: what the call did with memory
 * or QPs happens before a control path frees or closes them. */
static inline void soft_busy_leave(uint64_t *seq, uint64_t entered)
{
	store_release(*seq, entered + 2); /* pairs with: load_acquire in soft_busy_wait */
}

/* Control path: wait until a post or poll that was inside when the caller
 * unpublished something has left (returns at once when none was). */
void soft_busy_wait(uint64_t *seq);

/* --------------------------------------------------------------- the counters */

/* The core: its counters, for the control path to read. */
static inline void soft_cnt_publish(uint64_t *pub, const uint64_t *cnt, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		WRITE_ONCE(pub[i], cnt[i]);
}

/* Control path: sum[i] += pub[i] for i < n (a CQ's published counters,
 * into a total or into its context's retired ones). */
void soft_cnt_add(uint64_t *sum, const uint64_t *pub, unsigned n);

/* ------------------------------------------------------------- the queued WR */

/* A WR on a software send queue: struct nic_wr from wr_id on. */
struct soft_wqe {
	uint64_t wr_id;
	uint64_t local;
	uint64_t remote;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
	uint8_t op;
	uint8_t signaled;
};

_Static_assert(offsetof(struct nic_wr, signaled) - offsetof(struct nic_wr, wr_id) ==
		       offsetof(struct soft_wqe, signaled) &&
	       offsetof(struct nic_wr, lkey) - offsetof(struct nic_wr, wr_id) ==
		       offsetof(struct soft_wqe, lkey) &&
	       offsetof(struct nic_wr, op) - offsetof(struct nic_wr, wr_id) ==
		       offsetof(struct soft_wqe, op) &&
	       sizeof(struct nic_wr) - offsetof(struct nic_wr, wr_id) == sizeof(struct soft_wqe),
	       "struct soft_wqe is the tail of struct nic_wr");

/* Queue wr: one copy of its fields. */
static inline void soft_wqe_set(struct soft_wqe *w, const struct nic_wr *wr)
{
	memcpy(w, &wr->wr_id, sizeof(*w));
}

#endif /* FERRY_QP_SOFT_SOFT_H */
