/* SPDX-License-Identifier: MIT */
/*
 * cma: the execution engine, i.e. the poll path.  post only queues WRs on
 * the QP's send queue (exact capacity, like loop); a poll of the CQ the QP
 * reports to runs the active QPs round robin on the polling core:
 *
 *   - each WR's lkey is checked against this context's table, its rkey
 *     against the peer's (rkey.c: a cached slot, one system call per key
 *     per lease);
 *   - one turn of a QP gathers its next WRs of one direction, up to CMA_IOV
 *     of them, into one process_vm_writev (WRITE) or process_vm_readv
 *     (READ): an 8-byte WRITE is one system call, and a run of 64 KiB
 *     slices shares one.  Slices contiguous on one side share an iovec on
 *     that side (the two sides' iovec arrays need not match: the kernel
 *     copies one byte stream into the other), because the kernel pins and
 *     walks each remote iovec on its own;
 *   - a poll copies for about CMA_POLL_US (100 us), so that the core gets
 *     back to its rings and its other transports: its byte budget is what
 *     the last polls copied in that time, in [CMA_POLL_BYTES_MIN,
 *     CMA_POLL_BYTES_MAX] (objects.h tells why large calls matter), in at
 *     most CMA_POLL_CALLS calls; a WR larger than that (or cut short by the
 *     kernel) keeps its progress and goes on at the next turn;
 *   - completions follow RC: in order per QP, a CQE for each signalled WR;
 *     the first failed WR moves the QP to error and completes with its
 *     status, every WR behind it (and every one posted later) with
 *     FLUSH_ERR.
 *
 * Errors of the copy: EFAULT is REM_ACCESS_ERR, or LOC_PROT_ERR when our
 * own side of the WR is the unmapped one (probed after the fact: a failed
 * call copied nothing, so the fault is at the WR's next byte on one of the
 * two sides); ESRCH (the peer exited) RETRY_EXC_ERR; EPERM REM_PERM_ERR.
 *
 * Nothing here locks or allocates; dereg_mr waits for a poll that may be
 * copying from a local region through the CQ's poll sequence (cma.c).
 */
#include "qp/cma/objects.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "ring/base/atomics.h"
#include "ring/base/clock.h"
#include "ring/base/compiler.h"

struct budget {
	uint64_t now;   /* TSC at the poll's start: the rkey leases' clock */
	uint32_t bytes; /* left to copy in this poll */
	uint32_t calls; /* system calls left: copies and key lookups */
};

static inline void cma_cqe(struct cma_cq *cq, const struct cma_qp *qp, const struct cma_wqe *w,
			   enum nic_wc_status st)
{
	/* A real CQ would overflow too: the caller broke its CQ quota. */
	if (unlikely(!soft_cq_push(&cq->wcq, w->wr.wr_id, qp->qp_num, w->wr.op, st)))
		cq->cnt[CMA_CNT_CQ_OVF]++;
}

static inline struct cma_wqe *sq_at(struct cma_qp *qp, uint32_t k)
{
	uint32_t i = qp->sq_head + k;

	return &qp->sq[i >= qp->sq_size ? i - qp->sq_size : i];
}

/* Retire the WR at the head of the send queue with status st. */
static inline void sq_retire(struct cma_cq *cq, struct cma_qp *qp, enum nic_wc_status st)
{
	struct cma_wqe *w = &qp->sq[qp->sq_head];

	if (st != NIC_WC_SUCCESS || w->wr.signaled)
		cma_cqe(cq, qp, w, st);
	if (++qp->sq_head == qp->sq_size)
		qp->sq_head = 0;
	qp->sq_count--;
}

/* An error: the head WR completes with st, the QP goes to error, the rest flushes. */
static void qp_fail(struct cma_cq *cq, struct cma_qp *qp, enum nic_wc_status st)
{
	if (st != NIC_WC_FLUSH_ERR)
		cq->cnt[CMA_CNT_ERRS]++;
	qp->error = true;
	sq_retire(cq, qp, st);
	while (qp->sq_count)
		sq_retire(cq, qp, NIC_WC_FLUSH_ERR);
}

/* Is [addr, addr + len) inside our live region lkey?  seq_cst: see cma_dereg_mr. */
static inline bool local_ok(const struct cma_ctx *ctx, uint32_t lkey, uint64_t addr, uint32_t len)
{
	const struct cma_mr_slot *s = &ctx->tab->mr[CMA_IDX(lkey)];
	uint64_t off;

	if (unlikely(!lkey || load_sc(s->key) != lkey))
		return false;
	off = addr - s->base; /* wraps to huge when addr < base */
	return off <= s->len && len <= s->len - off;
}

static inline enum nic_wc_status wqe_check(struct cma_cq *cq, struct cma_qp *qp,
					   const struct cma_wqe *w, uint64_t now)
{
	const struct cma_rkey *rk;
	enum nic_wc_status st;
	uint32_t need;
	uint64_t off;

	if (unlikely(!local_ok(qp->ctx, w->wr.lkey, w->wr.local, w->wr.len)))
		return NIC_WC_LOC_PROT_ERR;
	st = cma_rkey_get(cq, qp, w->wr.rkey, now, &rk);
	if (unlikely(st != NIC_WC_SUCCESS))
		return st;
	need = w->wr.op == NIC_OP_WRITE ? NIC_ACCESS_REMOTE_WRITE : NIC_ACCESS_REMOTE_READ;
	off = w->wr.remote - rk->base;
	if (unlikely(!(rk->access & need) || off > rk->len || w->wr.len > rk->len - off))
		return NIC_WC_REM_ACCESS_ERR;
	return NIC_WC_SUCCESS;
}

/*
 * A failed call copied nothing: the fault is at w's next byte, ours or the
 * peer's.  Ours is probed with the same system calls on ourselves: readable
 * (the source of a WRITE), and for a READ writable too (the byte is put
 * back as it was; the READ was about to overwrite it anyway).
 */
static enum nic_wc_status efault_side(const struct cma_qp *qp, const struct cma_wqe *w)
{
	uint8_t b;
	struct iovec l = { &b, 1 }, r = { (void *)(uintptr_t)(w->wr.local + w->done), 1 };
	pid_t self = (pid_t)qp->ctx->self.pid;

	if (process_vm_readv(self, &l, 1, &r, 1, 0) != 1)
		return NIC_WC_LOC_PROT_ERR;
	if (w->wr.op == NIC_OP_READ && process_vm_writev(self, &l, 1, &r, 1, 0) != 1)
		return NIC_WC_LOC_PROT_ERR;
	return NIC_WC_REM_ACCESS_ERR;
}

/* Zero-length WRs (drain markers) need no memory and no key. */
static inline bool wqe_empty(const struct cma_wqe *w)
{
	return w->wr.len == 0;
}

/* Append [base, base + len) to v[0, *n), in v's last entry when it ends at base. */
static inline void iov_add(struct iovec *v, uint32_t *n, uint64_t base, uint64_t len)
{
	if (*n && (uint64_t)(uintptr_t)v[*n - 1].iov_base + v[*n - 1].iov_len == base) {
		v[*n - 1].iov_len += len;
		return;
	}
	v[*n].iov_base = (void *)(uintptr_t)base;
	v[*n].iov_len = len;
	(*n)++;
}

/*
 * One turn of qp: check its next WRs of one direction, copy them with one
 * system call, retire what was copied.  Returns false when the QP cannot go
 * on in this poll (error, or nothing left).
 */
static bool qp_turn(struct cma_cq *cq, struct cma_qp *qp, struct budget *b)
{
	struct iovec liov[CMA_IOV], riov[CMA_IOV];
	uint8_t op = qp->sq[qp->sq_head].wr.op;
	uint32_t k, n = 0, nl = 0, nr = 0;
	uint64_t want = 0;
	ssize_t got;

	/* Key lookups are system calls too: they count against the poll's
	 * calls; near the end of those, a WR whose key is not cached waits
	 * for the next turn, and what is gathered is copied. */
	for (k = 0; k < qp->sq_count && n < CMA_IOV && want < b->bytes; k++) {
		struct cma_wqe *w = sq_at(qp, k);
		uint64_t fetches = cq->cnt[CMA_CNT_FETCHES];
		enum nic_wc_status st;
		uint64_t take;

		if (wqe_empty(w))
			continue; /* retired in order below, whatever its op */
		if (w->wr.op != op)
			break;
		/* A lookup may cost up to CMA_KEY_CALLS_MAX; one call stays for the copy. */
		if (n && b->calls <= CMA_KEY_CALLS_MAX && !cma_rkey_cached(qp, w->wr.rkey, b->now))
			break;
		st = wqe_check(cq, qp, w, b->now);
		fetches = cq->cnt[CMA_CNT_FETCHES] - fetches;
		b->calls -= fetches < b->calls ? (uint32_t)fetches : b->calls - 1; /* one for the copy */
		if (unlikely(st != NIC_WC_SUCCESS)) {
			if (k == 0) {
				qp_fail(cq, qp, st);
				return false;
			}
			break; /* copy what is before it; it fails at the head next turn */
		}
		take = w->wr.len - w->done;
		if (take > b->bytes - want)
			take = b->bytes - want;
		iov_add(liov, &nl, w->wr.local + w->done, take);
		iov_add(riov, &nr, w->wr.remote + w->done, take);
		n++;
		want += take;
		if (take < w->wr.len - w->done) {
			k++;
			break; /* the budget ends inside w: it goes on next turn */
		}
	}
	got = 0;
	if (n) {
		got = op == NIC_OP_WRITE
			      ? process_vm_writev((pid_t)qp->peer_pid, liov, nl, riov, nr, 0)
			      : process_vm_readv((pid_t)qp->peer_pid, liov, nl, riov, nr, 0);
		b->calls--;
		cq->cnt[CMA_CNT_CALLS]++;
		if (unlikely(got <= 0)) {
			int err = got < 0 ? errno : EIO;
			enum nic_wc_status st = cma_errno_status(err);

			/* The head WR is the one that failed (its lkey was good). */
			while (wqe_empty(&qp->sq[qp->sq_head]))
				sq_retire(cq, qp, NIC_WC_SUCCESS);
			if (err == EFAULT)
				st = efault_side(qp, &qp->sq[qp->sq_head]);
			qp_fail(cq, qp, st);
			return false;
		}
		b->bytes -= (uint32_t)got;
		cq->cnt[CMA_CNT_BYTES] += (uint64_t)got;
	}
	/* Retire the first k WRs as far as the copy got (it copies in order). */
	for (uint32_t i = 0; i < k; i++) {
		struct cma_wqe *w = &qp->sq[qp->sq_head];
		uint64_t left = w->wr.len - w->done;

		if ((uint64_t)got < left) {
			w->done += (uint32_t)got;
			return qp->sq_count != 0; /* the rest next turn; a short count is
						   * followed by the error, or progress */
		}
		got -= (ssize_t)left;
		w->done = 0;
		cq->cnt[CMA_CNT_WRS]++;
		sq_retire(cq, qp, NIC_WC_SUCCESS);
	}
	return qp->sq_count != 0;
}

/*
 * The next poll's budget: what this one copied, scaled to CMA_POLL_US,
 * averaged with the last (so that one slow poll, preempted or faulting
 * pages in, at most halves it).  copied bytes took ticks.
 */
static void cma_budget_learn(struct cma_cq *cq, uint64_t copied, uint64_t ticks)
{
	uint64_t want;

	if (copied < CMA_POLL_LEARN || !ticks)
		return;
	want = copied * cq->ctx->poll_ticks / ticks;
	want = (want + cq->poll_bytes) / 2;
	if (want < CMA_POLL_BYTES_MIN)
		want = CMA_POLL_BYTES_MIN;
	if (want > CMA_POLL_BYTES_MAX)
		want = CMA_POLL_BYTES_MAX;
	cq->poll_bytes = (uint32_t)want;
}

/* Run the active QPs round robin until the budget or the work runs out. */
static void cma_cq_run(struct cma_cq *cq)
{
	struct budget b = { .bytes = cq->poll_bytes, .calls = CMA_POLL_CALLS };
	uint64_t seq;

	/* Enter: odd.  seq_cst pairs with dereg_mr (see local_ok). */
	seq = soft_busy_enter(&cq->poll_seq);
	b.now = ferry_tsc();
	while (b.bytes && b.calls && !cds_list_empty(&cq->active)) {
		struct cma_qp *qp = cds_list_first_entry(&cq->active, struct cma_qp, act);

		if (unlikely(qp->error))
			qp_fail(cq, qp, NIC_WC_FLUSH_ERR);
		else
			qp_turn(cq, qp, &b);
		/* Leave the list when drained, else go to the back: round robin. */
		cds_list_del_init(&qp->act);
		if (qp->sq_count)
			cds_list_add_tail(&qp->act, &cq->active);
	}
	/* Leave: even.  dereg_mr may free the memory we just copied. */
	soft_busy_leave(&cq->poll_seq, seq);
	cma_budget_learn(cq, cq->poll_bytes - b.bytes, ferry_tsc() - b.now);
	soft_cnt_publish(cq->pub, cq->cnt, CMA_CNT_NR);
}

int cma_poll(struct nic_cq *ncq, int n, struct nic_wc *wc)
{
	struct cma_cq *cq = cma_cq_of(ncq);

	if (unlikely(n <= 0))
		return n < 0 ? -EINVAL : 0;
	if (!cds_list_empty(&cq->active) && cq->wcq.count < (uint32_t)n)
		cma_cq_run(cq);
	return soft_cq_poll(&cq->wcq, (uint32_t)n, wc);
}

static inline void sq_push(struct cma_qp *qp, const struct nic_wr *wr)
{
	struct cma_wqe *w = &qp->sq[qp->sq_tail];

	soft_wqe_set(&w->wr, wr);
	w->done = 0;
	if (++qp->sq_tail == qp->sq_size)
		qp->sq_tail = 0;
	qp->sq_count++;
}

int cma_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad)
{
	struct cma_qp *qp = cma_qp_of(nqp);
	struct cma_cq *cq = qp->cq;
	int rc = 0;

	/* Acquire: the peer fields qp_connect wrote (maybe on the control thread). */
	if (unlikely(!load_acquire(qp->connected))) { /* pairs with: store_release in cma_qp_connect */
		rc = -ENOTCONN;
		goto out;
	}
	/* In the error state WRs are still queued: the next poll flushes them. */
	for (; wr; wr = wr->next) {
		if (unlikely(wr->op != NIC_OP_WRITE && wr->op != NIC_OP_READ)) {
			rc = -EINVAL;
			break;
		}
		if (unlikely(qp->sq_count == qp->sq_size)) {
			/* The caller's QP depth accounting is wrong. */
			cq->cnt[CMA_CNT_SQ_OVF]++;
			WRITE_ONCE(cq->pub[CMA_CNT_SQ_OVF], cq->cnt[CMA_CNT_SQ_OVF]);
			rc = -ENOMEM;
			break;
		}
		sq_push(qp, wr);
	}
	if (qp->sq_count && cds_list_empty(&qp->act))
		cds_list_add_tail(&qp->act, &cq->active);
out:
	if (rc && bad)
		*bad = wr;
	return rc;
}

int cma_qp_set_error(struct nic_qp *nqp)
{
	/* Queued WRs are on cq->active already; the next poll flushes them. */
	cma_qp_of(nqp)->error = true;
	return 0;
}

uint32_t cma_qp_num(const struct nic_qp *nqp)
{
	return ((const struct cma_qp *)(const void *)nqp)->qp_num;
}
