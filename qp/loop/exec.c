/* SPDX-License-Identifier: MIT */
/*
 * loop: the execution engine, i.e. the poll path.  post queues WRs on the
 * QP's send queue; a poll of the CQ the QP reports to runs the active QPs'
 * queues round robin: it checks the keys against the MR table, injects the
 * planned faults, copies, and writes the completions.  Nothing here locks
 * or allocates; how dereg_mr waits for a poll that may still be copying is
 * told in loop.c (MR invalidation).
 */
#include "qp/loop/objects.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

/* WRs a QP executes per round-robin turn inside one poll. */
#define LOOP_QP_BURST 16u

/* ---------------------------------------------------------------- poll path */

/* splitmix64; returns the upper 32 bits, compared against a ppm threshold. */
static inline uint64_t loop_draw(struct loop_cq *cq)
{
	uint64_t z = (cq->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (z ^ (z >> 31)) >> 32;
}

static inline bool loop_roll(struct loop_cq *cq, uint64_t thr)
{
	return thr && loop_draw(cq) < thr;
}

/*
 * Is [addr, addr + len) inside the live MR named by key, owned by owner?
 * The key load is seq_cst so that it is ordered after the poll's seq_cst
 * increment of poll_seq: either dereg_mr sees us executing, or we see its
 * cleared key (see loop_wait_pollers_locked).
 */
static inline bool loop_mr_covers(uint32_t key, uint32_t owner, uint64_t addr, uint32_t len,
				   unsigned need)
{
	const struct loop_mr_slot *s = &loop_mrs[key & LOOP_MR_MASK];
	uint64_t off;

	if (unlikely(load_sc(s->key) != key || !key))
		return false;
	if (unlikely(s->owner != owner || (s->access & need) != need))
		return false;
	off = addr - s->base; /* wraps to huge when addr < base */
	return off <= s->len && len <= s->len - off;
}

/*
 * An MR one run of a CQ found live (loop_cq_run): dereg_mr waits for the
 * run to end before the slot can change (it clears the key, then waits for
 * every executing CQ), so within the run a WR naming the same key and owner
 * needs only the bounds and access checks.  owner 0 (no context has it):
 * nothing remembered.
 */
struct loop_mr_memo {
	uint32_t key;
	uint32_t owner;
	uint64_t base;
	uint64_t len;
	unsigned access;
};

static inline bool loop_mr_covers_memo(struct loop_mr_memo *m, uint32_t key, uint32_t owner,
					uint64_t addr, uint32_t len, unsigned need)
{
	const struct loop_mr_slot *s;
	uint64_t off;

	if (unlikely(key != m->key || owner != m->owner)) {
		if (!loop_mr_covers(key, owner, addr, len, need))
			return false;
		s = &loop_mrs[key & LOOP_MR_MASK];
		m->key = key;
		m->owner = owner;
		m->base = s->base;
		m->len = s->len;
		m->access = s->access;
		return true;
	}
	if (unlikely((m->access & need) != need))
		return false;
	off = addr - m->base; /* wraps to huge when addr < base */
	return off <= m->len && len <= m->len - off;
}

/* The keys one run of a CQ found live: its WRs' local and remote MRs. */
struct loop_run {
	struct loop_mr_memo lmr, rmr;
	uint64_t wrs, bytes;           /* executed: added to the counters at the end */
	bool faults;                   /* a fault plan is set: roll for each WR */
	bool nocopy;
};

static inline void loop_cqe(struct loop_cq *cq, const struct loop_qp *qp,
			    const struct soft_wqe *w, enum nic_wc_status st)
{
	/* A real CQ would overflow too: the caller broke its CQ quota. */
	if (unlikely(!soft_cq_push(&cq->wcq, w->wr_id, qp->qp_num, w->op, st)))
		cq->cnt[CNT_CQ_OVF]++;
}

static inline void loop_copy(const struct soft_wqe *w)
{
	void *local = (void *)(uintptr_t)w->local;
	void *remote = (void *)(uintptr_t)w->remote;

	/* memmove: a QP connected to its own context may overlap source and target. */
	if (w->op == NIC_OP_WRITE)
		memmove(remote, local, w->len);
	else
		memmove(local, remote, w->len);
}

/* The planned faults before a WR executes (a fault plan is set). */
static __attribute__((noinline)) enum nic_wc_status loop_fault_before(struct loop_cq *cq)
{
	if (loop_roll(cq, cq->thr_fatal)) {
		cq->cnt[CNT_FATAL]++;
		return NIC_WC_FLUSH_ERR;
	}
	return NIC_WC_SUCCESS;
}

/*
 * A zero-length WR whose keys did not pass: it names no memory, so as on
 * verbs (rxe, and cma and tcp here) no key is checked and nothing is
 * copied.  Asked only once a key check failed: WRs that pass pay nothing
 * (inline: run's address must not escape, the compiler keeps it in
 * registers).
 */
static inline enum nic_wc_status loop_exec_empty(struct loop_cq *cq, struct loop_run *run)
{
	if (unlikely(run->faults) && loop_roll(cq, cq->thr_err)) {
		cq->cnt[CNT_ERRS]++;
		return NIC_WC_RETRY_EXC_ERR;
	}
	run->wrs++;
	return NIC_WC_SUCCESS;
}

/* Execute one WR of a QP that is not in error; returns its completion status. */
static inline enum nic_wc_status loop_exec(struct loop_cq *cq, struct loop_run *run,
					   struct loop_qp *qp, const struct soft_wqe *w)
{
	if (unlikely(run->faults) && loop_fault_before(cq) != NIC_WC_SUCCESS)
		return NIC_WC_FLUSH_ERR;
	if (unlikely(!loop_mr_covers_memo(&run->lmr, w->lkey, qp->local_id, w->local, w->len, 0)))
		return w->len ? NIC_WC_LOC_PROT_ERR : loop_exec_empty(cq, run);
	/* The peer's region must allow what the WR does to it, as a responder NIC checks. */
	if (unlikely(!loop_mr_covers_memo(&run->rmr, w->rkey, qp->peer, w->remote, w->len,
					  w->op == NIC_OP_READ ? NIC_ACCESS_REMOTE_READ :
								 NIC_ACCESS_REMOTE_WRITE)))
		return w->len ? NIC_WC_REM_ACCESS_ERR : loop_exec_empty(cq, run);
	if (unlikely(run->faults) && loop_roll(cq, cq->thr_err)) {
		cq->cnt[CNT_ERRS]++;
		return NIC_WC_RETRY_EXC_ERR;
	}
	if (likely(!run->nocopy))
		loop_copy(w);
	run->wrs++;
	run->bytes += w->len;
	return NIC_WC_SUCCESS;
}

/*
 * Run the first burst WRs of qp's send queue, in order.  As in verbs, the
 * first failed WR moves the QP to the error state and every WR behind it,
 * signalled or not, completes with FLUSH_ERR.  Returns how many ran (fewer
 * when the QP stalls).
 */
static uint32_t loop_qp_slow(struct loop_cq *cq, struct loop_run *run, struct loop_qp *qp,
			     uint32_t burst)
{
	uint32_t i;

	for (i = 0; i < burst; i++) {
		const struct soft_wqe *w = &qp->sq[qp->sq_head];
		enum nic_wc_status st;

		if (unlikely(qp->stalled && !qp->error))
			break;
		st = qp->error ? NIC_WC_FLUSH_ERR : loop_exec(cq, run, qp, w);
		if (unlikely(st == NIC_WC_REM_ACCESS_ERR && run->faults && cq->silent_peer)) {
			cq->cnt[CNT_LOST]++; /* a dead peer NAKs nothing */
			qp->stalled = true;
			break;
		}
		if (likely(st == NIC_WC_SUCCESS)) {
			if (w->signaled) {
				if (unlikely(run->faults) && unlikely(loop_roll(cq, cq->thr_lost))) {
					/* Like a peer that stopped acknowledging: the
					 * WR stays outstanding and flushes on error. */
					cq->cnt[CNT_LOST]++;
					qp->stalled = true;
					break;
				}
				loop_cqe(cq, qp, w, st);
			}
		} else {
			qp->error = true;
			loop_cqe(cq, qp, w, st);
		}
		if (++qp->sq_head == qp->sq_size)
			qp->sq_head = 0;
	}
	qp->sq_count -= i;
	return i;
}

/* The ops rm lets a peer run, as a bit per enum nic_op (WRITE needs
 * REMOTE_WRITE, READ needs REMOTE_READ): one shift per WR to test. */
static inline unsigned loop_ops_allowed(unsigned access)
{
	return ((access & NIC_ACCESS_REMOTE_WRITE) ? 1u << NIC_OP_WRITE : 0) |
	       ((access & NIC_ACCESS_REMOTE_READ) ? 1u << NIC_OP_READ : 0);
}

/*
 * loop_qp_fast's loop; copy is a constant at each call, so the copy-free
 * run tests nothing per WR for it.  w->op is a valid enum nic_op:
 * loop_post queues no other.
 */
static inline __attribute__((always_inline)) uint32_t
loop_qp_fast_run(struct loop_cq *cq, struct loop_qp *qp, const struct loop_mr_memo *lm,
		 const struct loop_mr_memo *rm, uint32_t burst, uint64_t *bytes_out, bool copy)
{
	const uint64_t lbase = lm->base, llen = lm->len, rbase = rm->base, rlen = rm->len;
	const struct { uint32_t l, r; } kp = { lm->key, rm->key }; /* as lkey, rkey lie */
	const struct soft_wqe *sq = qp->sq, *end = sq + qp->sq_size, *w = sq + qp->sq_head;
	const unsigned ops = loop_ops_allowed(rm->access);
	uint64_t bytes = 0, keys, wkeys;
	uint32_t i;

	_Static_assert(offsetof(struct soft_wqe, rkey) == offsetof(struct soft_wqe, lkey) + 4,
		       "one load for both keys");
	memcpy(&keys, &kp, sizeof(keys));
	for (i = 0; i < burst; i++) {
		uint64_t loff = w->local - lbase, roff = w->remote - rbase; /* wrap: huge */

		memcpy(&wkeys, &w->lkey, sizeof(wkeys));
		if (wkeys != keys || loff > llen || w->len > llen - loff || roff > rlen ||
		    w->len > rlen - roff || !((ops >> w->op) & 1))
			break;
		if (copy)
			loop_copy(w);
		bytes += w->len;
		if (w->signaled)
			loop_cqe(cq, qp, w, NIC_WC_SUCCESS);
		if (++w == end)
			w = sq;
	}
	qp->sq_head = (uint32_t)(w - sq);
	*bytes_out = bytes;
	return i;
}

/*
 * loop_qp_slow's common case, what it would do in fewer steps: a QP
 * neither in error nor stalled, no fault plan, and WRs naming the MRs the
 * run found live last (loop_mr_memo) within their bounds and rights: they
 * succeed.  Runs WRs from the head while that holds; returns how many (the
 * slow loop takes the first that needs more).
 */
static uint32_t loop_qp_fast(struct loop_cq *cq, struct loop_run *run, struct loop_qp *qp,
			     uint32_t burst)
{
	uint64_t bytes;
	uint32_t i;

	/* owner 0: the memo is empty (a context id is never 0) */
	if (qp->error || qp->stalled || run->faults || run->lmr.owner != qp->local_id ||
	    run->rmr.owner != qp->peer)
		return 0;
	if (run->nocopy)
		i = loop_qp_fast_run(cq, qp, &run->lmr, &run->rmr, burst, &bytes, false);
	else
		i = loop_qp_fast_run(cq, qp, &run->lmr, &run->rmr, burst, &bytes, true);
	qp->sq_count -= i;
	run->wrs += i;
	run->bytes += bytes;
	return i;
}

/* Run the first burst WRs of qp's send queue, in order: the fast loop
 * while it can, the slow one for each WR it cannot take. */
static void loop_qp_run(struct loop_cq *cq, struct loop_run *run, struct loop_qp *qp,
			uint32_t burst)
{
	for (;;) {
		burst -= loop_qp_fast(cq, run, qp, burst);
		if (burst == 0 || loop_qp_slow(cq, run, qp, 1) == 0)
			return;
		burst--;
	}
}

static void loop_cq_load_faults(struct loop_cq *cq, uint32_t epoch)
{
	struct loop_ctx *ctx = cq->ctx;
	uint64_t seed = READ_ONCE(ctx->seed);

	cq->thr_err = READ_ONCE(ctx->thr_err);
	cq->thr_lost = READ_ONCE(ctx->thr_lost);
	cq->thr_fatal = READ_ONCE(ctx->thr_fatal);
	cq->silent_peer = READ_ONCE(ctx->silent_peer);
	/* Distinct, reproducible streams for the CQs of one context. */
	cq->rng = seed ^ ((uint64_t)cq->ordinal * 0xd1b54a32d192ed03ull);
	cq->fault_epoch = epoch;
}

/* Execute up to ~budget queued WRs, round-robin over the active QPs. */
static void loop_cq_run(struct loop_cq *cq, uint32_t budget)
{
	struct loop_ctx *ctx = cq->ctx;
	struct loop_run run = { .wrs = 0 };
	uint64_t seq;
	uint32_t epoch;

	/* Enter: odd.  seq_cst pairs with dereg_mr (see loop_mr_covers). */
	seq = soft_busy_enter(&cq->poll_seq);

	epoch = load_acquire(ctx->fault_epoch); /* pairs with: fetch_add_release in loop_set_faults */
	if (unlikely(epoch != cq->fault_epoch))
		loop_cq_load_faults(cq, epoch);
	run.faults = (cq->thr_err | cq->thr_lost | cq->thr_fatal | cq->silent_peer) != 0;
	run.nocopy = READ_ONCE(ctx->nocopy);

	while (budget && !cds_list_empty(&cq->active)) {
		struct loop_qp *qp = cds_list_first_entry(&cq->active, struct loop_qp, act);
		uint32_t burst = qp->sq_count;

		if (burst > LOOP_QP_BURST)
			burst = LOOP_QP_BURST;
		if (burst > budget)
			burst = budget;
		loop_qp_run(cq, &run, qp, burst);
		budget -= burst;
		/* Leave the list when drained, else go to the back: round robin. */
		cds_list_del_init(&qp->act);
		if (qp->sq_count)
			cds_list_add_tail(&qp->act, &cq->active);
	}

	/* Leave: even.  dereg_mr may free the memory we just copied. */
	soft_busy_leave(&cq->poll_seq, seq);
	cq->cnt[CNT_WRS] += run.wrs;
	cq->cnt[CNT_BYTES] += run.bytes;
	soft_cnt_publish(cq->pub, cq->cnt, CNT_NR);
}

int loop_poll(struct nic_cq *ncq, int n, struct nic_wc *wc)
{
	struct loop_cq *cq = cq_of(ncq);

	if (unlikely(n <= 0))
		return n < 0 ? -EINVAL : 0;
	if (unlikely(READ_ONCE(cq->ctx->dead)))
		return 0;
	if (!cds_list_empty(&cq->active))
		loop_cq_run(cq, (uint32_t)n);
	return soft_cq_poll(&cq->wcq, (uint32_t)n, wc);
}

int loop_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad)
{
	struct loop_qp *qp = qp_of(nqp);
	struct loop_cq *cq = qp->cq;
	struct soft_wqe *sq, *end, *w;
	uint32_t peer, room, n = 0;
	int rc = 0;

	/* Acquire: pairs with qp_connect, which may run on the control thread. */
	peer = load_acquire(qp->remote_id); /* pairs with: store_release in loop_qp_connect */
	if (unlikely(!peer)) {
		rc = -ENOTCONN;
		goto out;
	}
	qp->peer = peer;
	/* The send queue's tail and room in locals: the copies into the
	 * queue would make the compiler reload them for every WR. */
	sq = qp->sq;
	end = sq + qp->sq_size;
	w = sq + qp->sq_tail;
	room = qp->sq_size - qp->sq_count;
	/* In the error state WRs are still queued: the next poll flushes them. */
	for (; wr; wr = wr->next) {
		if (unlikely(wr->op != NIC_OP_WRITE && wr->op != NIC_OP_READ)) {
			rc = -EINVAL;
			break;
		}
		if (unlikely(n == room)) {
			/* The caller's QP depth accounting is wrong. */
			cq->cnt[CNT_SQ_OVF]++;
			WRITE_ONCE(cq->pub[CNT_SQ_OVF], cq->cnt[CNT_SQ_OVF]);
			rc = -ENOMEM;
			break;
		}
		soft_wqe_set(w, wr);
		if (++w == end)
			w = sq;
		n++;
	}
	qp->sq_tail = (uint32_t)(w - sq);
	qp->sq_count += n;
	if (qp->sq_count && cds_list_empty(&qp->act))
		cds_list_add_tail(&qp->act, &cq->active);
out:
	if (rc && bad)
		*bad = wr;
	return rc;
}

int loop_qp_set_error(struct nic_qp *nqp)
{
	/* Queued WRs are on cq->active already; the next poll flushes them. */
	qp_of(nqp)->error = true;
	return 0;
}

uint32_t loop_qp_num(const struct nic_qp *nqp)
{
	return ((const struct loop_qp *)(const void *)nqp)->qp_num;
}
