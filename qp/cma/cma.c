/* SPDX-License-Identifier: MIT */
/*
 * cma: the same-host NIC.  Two processes on one host move bytes with
 * process_vm_writev (WRITE) and process_vm_readv (READ), straight between
 * their address spaces: one copy, by the kernel, on the initiator's polling
 * core.  The target's CPU does nothing on the data path; its responder QPs
 * exist only to be named in the handshake.
 *
 * Shape.  Like loop, which it follows: post queues WRs on the QP's send
 * queue (exact capacities), the copy happens when the CQ is polled
 * (exec.c), with RC semantics (in-order completion, an error moves the QP
 * to error and flushes the rest).  No completion channel: the work happens
 * inside poll, so the owner polls while work is in flight (cq_arm NULL).
 *
 * Address (64 bytes, host.c): "CMA1", pid, PID namespace (inode, device),
 * uid, boot id, the address of a probe byte, the address of the context's
 * published table, the process's start time.  Same host = same boot id and
 * same PID namespace.
 *
 * Keys (rkey.c tells why and how): each context publishes a table in its
 * own memory with a slot per registered region (key = gen << 16 | index,
 * base, len, access) and per QP (qpn, a random 16-byte secret that
 * qp_info hands to the peer).  The initiator reads the slot a WR's rkey
 * names, together with its responder QP's slot, caches it for a 2 ms lease
 * and refuses (REM_ACCESS_ERR) a WR whose key, range or access does not
 * match; invalidating a key that a peer cached waits out the lease (10 ms)
 * before dereg_mr returns.  lkeys are checked against our own table.  The
 * runtime's check of each request against the peer's descriptor comes
 * first; this is the NIC's check behind it.  Not a security boundary: an
 * initiator the kernel lets at our memory can write anywhere without us.
 *
 * What the target must allow (the kernel checks the initiator's access to
 * the target as for ptrace attach, PTRACE_MODE_ATTACH_REALCREDS):
 *   - the same user: the initiator's real uid and gid equal to the target's
 *     real, effective and saved ones, or CAP_SYS_PTRACE in the initiator;
 *   - the target dumpable (not set-uid, no prctl(PR_SET_DUMPABLE, 0));
 *   - Yama (/proc/sys/kernel/yama/ptrace_scope): 0 allows; 1 allows only an
 *     ancestor of the target or a process the target named with
 *     prctl(PR_SET_PTRACER, pid or PR_SET_PTRACER_ANY); 2 needs
 *     CAP_SYS_PTRACE; 3 never;
 *   - no seccomp filter or LSM refusing process_vm_readv/writev (container
 *     runtimes' default seccomp profiles allow them only with
 *     CAP_SYS_PTRACE).
 * A target started with FERRY_CMA_ALLOW_ANY=1 calls prctl(PR_SET_PTRACER,
 * PR_SET_PTRACER_ANY) when it opens its first cma context (host.c): under
 * Yama scope 1 that lets every process of its uid attach to it (read and
 * write all its memory, not only through ferry), which is what scope 0 means
 * for the whole host.  ferry never does it unasked.  reachable() probes
 * with a one-byte process_vm_readv and says which of these refused.
 *
 * Locking: one mutex per context serialises its control path (tables' free
 * lists, CQ and QP lists); post/poll/qp_set_error never lock or allocate.
 * dereg_mr waits for a poll that may be copying from the region through
 * each CQ's poll sequence (odd while executing), as loop does.
 *
 * Teardown: destroying a parent frees its children (close: CQs, QPs, MRs;
 * cq_destroy: its QPs).  Nothing may be polled or posted while it goes.
 */
#include "qp/cma/cma.h"
#include "qp/cma/objects.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "ring/base/atomics.h"
#include "ring/base/clock.h"
#include "ring/base/log.h"

/* ------------------------------------------------------------------- slots */

static int slots_init(struct cma_slots *s, uint32_t size)
{
	s->fifo = calloc(size, sizeof(*s->fifo));
	s->gen = calloc(size, sizeof(*s->gen));
	if (!s->fifo || !s->gen)
		return -ENOMEM;
	for (uint32_t i = 0; i < size; i++)
		s->fifo[i] = (uint16_t)i;
	s->size = size;
	s->head = 0;
	s->count = size;
	return 0;
}

static void slots_free(struct cma_slots *s)
{
	free(s->fifo);
	free(s->gen);
}

/* A free slot's key (gen << 16 | index, never 0), or 0 when none is left. */
static uint32_t slots_get(struct cma_slots *s)
{
	uint32_t idx;

	if (!s->count)
		return 0;
	idx = s->fifo[s->head];
	s->head = (s->head + 1) % s->size;
	s->count--;
	if (++s->gen[idx] == 0)
		s->gen[idx] = 1;
	return (uint32_t)s->gen[idx] << 16 | idx;
}

static void slots_put(struct cma_slots *s, uint32_t idx)
{
	s->fifo[(s->head + s->count) % s->size] = (uint16_t)idx;
	s->count++;
}

/* -------------------------------------------------------------- MR table */

/*
 * Wait until every poll that may have loaded a key before it was cleared
 * has finished (soft_busy_wait; the key's seq_cst load: see local_ok in
 * exec.c): what it copied happens before our caller frees the memory.
 */
static void wait_pollers_locked(struct cma_ctx *ctx)
{
	struct cds_list_head *q;

	cds_list_for_each(q, &ctx->cqs) /* not _entry: see soft.h */
		soft_busy_wait(&cds_list_entry(q, struct cma_cq, link)->poll_seq);
}

/*
 * Clear a live key: our polls see it at once (and we wait for one that may
 * be copying); peers' cached copies last a lease, so when a peer cached it
 * the caller must sleep CMA_GRACE_MS before the memory may go.  Returns
 * whether it must.  The store and the load of shared are the target's side
 * of the Dekker pair with rkey_mark (rkey.c).
 */
static bool mr_clear_locked(struct cma_ctx *ctx, uint32_t idx)
{
	struct cma_mr_slot *s = &ctx->tab->mr[idx];

	store_sc(s->key, 0);
	return load_sc(s->shared) != 0;
}

static void mr_free_locked(struct cma_ctx *ctx, uint32_t idx)
{
	struct cma_mr_slot *s = &ctx->tab->mr[idx];

	s->base = 0;
	s->len = 0;
	s->access = 0;
	WRITE_ONCE(s->shared, 0);
	slots_put(&ctx->mrs, idx);
	ctx->nmr--;
}

static void grace(void)
{
	ferry_sleep_us(CMA_GRACE_MS * 1000);
}

static int cma_reg_mr(struct nic *n, void *addr, size_t len, unsigned access, struct nic_mr *out)
{
	struct cma_ctx *ctx = cma_ctx_of(n);
	struct cma_mr_slot *s;
	uint32_t key;

	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	key = slots_get(&ctx->mrs);
	if (!key) {
		pthread_mutex_unlock(&ctx->lock);
		return -ENOMEM;
	}
	s = &ctx->tab->mr[CMA_IDX(key)];
	s->base = (uintptr_t)addr;
	s->len = len;
	s->access = access & NIC_ACCESS_ALL;
	WRITE_ONCE(s->shared, 0);
	/* Release: a poll that loads the key sees base/len. */
	store_release(s->key, key); /* pairs with: load_sc of the key in local_ok */
	ctx->nmr++;
	pthread_mutex_unlock(&ctx->lock);
	out->lkey = key;
	out->rkey = key;
	out->priv = NULL;
	return 0;
}

static bool mr_live_locked(struct cma_ctx *ctx, const struct nic_mr *mr)
{
	return mr->lkey && READ_ONCE(ctx->tab->mr[CMA_IDX(mr->lkey)].key) == mr->lkey;
}

/* The key goes; a peer that cached it may use it until *until_ns (0: no
 * peer did).  The slot stays out of the free list until the end half. */
static int cma_dereg_mr_begin(struct nic *n, struct nic_mr *mr, uint64_t *until_ns)
{
	struct cma_ctx *ctx = cma_ctx_of(n);
	bool shared;

	pthread_mutex_lock(&ctx->lock);
	if (!mr_live_locked(ctx, mr)) {
		pthread_mutex_unlock(&ctx->lock);
		return -EINVAL;
	}
	shared = mr_clear_locked(ctx, CMA_IDX(mr->lkey));
	wait_pollers_locked(ctx);
	pthread_mutex_unlock(&ctx->lock);
	*until_ns = shared ? ferry_now_ns() + (uint64_t)CMA_GRACE_MS * 1000000u : 0;
	return 0;
}

static void cma_dereg_mr_end(struct nic *n, struct nic_mr *mr)
{
	struct cma_ctx *ctx = cma_ctx_of(n);

	pthread_mutex_lock(&ctx->lock);
	mr_free_locked(ctx, CMA_IDX(mr->lkey));
	pthread_mutex_unlock(&ctx->lock);
}

static int cma_dereg_mr(struct nic *n, struct nic_mr *mr)
{
	uint64_t until;
	int rc = cma_dereg_mr_begin(n, mr, &until);

	if (rc)
		return rc;
	if (until)
		grace(); /* unlocked: the slot stays out of the free list meanwhile */
	cma_dereg_mr_end(n, mr);
	return 0;
}

/* ----------------------------------------------------------------- context */

static void ctx_free(struct cma_ctx *ctx)
{
	if (ctx->tab)
		munmap(ctx->tab, sizeof(*ctx->tab));
	slots_free(&ctx->mrs);
	slots_free(&ctx->qps);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

static int cma_open(const char *dev, struct nic **out)
{
	struct cma_ctx *ctx;
	void *tab;
	int rc;

	(void)dev; /* every cma context is alike: the name only picked the provider */
	cma_allow_any();
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	pthread_mutex_init(&ctx->lock, NULL);
	CDS_INIT_LIST_HEAD(&ctx->cqs);
	/* Its own mapping: peers read it; once unmapped, their reads fail. */
	tab = mmap(NULL, sizeof(*ctx->tab), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (tab == MAP_FAILED) {
		rc = -errno;
		ctx_free(ctx);
		return rc;
	}
	ctx->tab = tab;
	rc = slots_init(&ctx->mrs, CMA_MR_SLOTS);
	if (rc == 0)
		rc = slots_init(&ctx->qps, CMA_QP_SLOTS);
	if (rc == 0)
		rc = cma_id_self(&ctx->self, (uint64_t)(uintptr_t)tab);
	if (rc) {
		ctx_free(ctx);
		return rc;
	}
	ctx->lease_ticks = ferry_ms_to_tsc(CMA_LEASE_MS);
	ctx->poll_ticks = ferry_tsc_hz() * CMA_POLL_US / 1000000u;
	*out = (struct nic *)(void *)ctx;
	return 0;
}

static void qp_free_locked(struct cma_qp *qp)
{
	struct cma_ctx *ctx = qp->ctx;
	struct cma_qp_slot *s = &ctx->tab->qp[CMA_IDX(qp->qp_num)];

	/* Peers connected to it fail their next key fetch (RETRY_EXC_ERR). */
	WRITE_ONCE(s->qpn, 0);
	memset(s->secret, 0, sizeof(s->secret));
	slots_put(&ctx->qps, CMA_IDX(qp->qp_num));
	/* Unlink from cq->active: the caller is the owning core or it is stopped. */
	cds_list_del(&qp->act);
	cds_list_del(&qp->link);
	free(qp->sq);
	free(qp);
}

static void cq_free_locked(struct cma_cq *cq)
{
	while (!cds_list_empty(&cq->qps))
		qp_free_locked(cds_list_first_entry(&cq->qps, struct cma_qp, link));
	soft_cnt_add(cq->ctx->retired, cq->pub, CMA_CNT_NR);
	cds_list_del(&cq->link);
	soft_cq_fini(&cq->wcq);
	free(cq);
}

static void cma_close(struct nic *n)
{
	struct cma_ctx *ctx = cma_ctx_of(n);
	bool shared = false;

	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->lock);
	while (!cds_list_empty(&ctx->cqs))
		cq_free_locked(cds_list_first_entry(&ctx->cqs, struct cma_cq, link));
	for (uint32_t i = 0; ctx->nmr && i < CMA_MR_SLOTS; i++)
		if (READ_ONCE(ctx->tab->mr[i].key))
			shared |= mr_clear_locked(ctx, i);
	pthread_mutex_unlock(&ctx->lock);
	if (shared)
		grace(); /* peers' leases on our regions run out before the memory may go */
	ctx_free(ctx);
}

static void cma_caps(const struct nic *n, struct nic_caps *out)
{
	(void)n;
	out->max_qp_wr = CMA_MAX_QP_WR;
	out->max_cqe = CMA_MAX_CQE;
	out->max_inline = 0;
	out->max_rd_atomic = CMA_MAX_QP_WR; /* READs need no responder resources */
	out->flags = NIC_CAP_SAME_HOST;
}

static void cma_addr(const struct nic *n, struct nic_addr *out)
{
	memset(out, 0, sizeof(*out));
	cma_addr_encode(&cma_cctx_of(n)->self, out);
}

/* --------------------------------------------------------------- CQs, QPs */

static int cma_cq_create(struct nic *n, uint32_t cqe, struct nic_cq **out)
{
	struct cma_ctx *ctx = cma_ctx_of(n);
	struct cma_cq *cq;

	if (!cqe || cqe > CMA_MAX_CQE)
		return -EINVAL;
	cq = ferry_zalloc_lines(sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	if (soft_cq_init(&cq->wcq, cqe)) {
		free(cq);
		return -ENOMEM;
	}
	cq->ctx = ctx;
	cq->poll_bytes = CMA_POLL_BYTES_MIN;
	CDS_INIT_LIST_HEAD(&cq->active);
	CDS_INIT_LIST_HEAD(&cq->qps);
	pthread_mutex_lock(&ctx->lock);
	cds_list_add_tail(&cq->link, &ctx->cqs);
	pthread_mutex_unlock(&ctx->lock);
	*out = (struct nic_cq *)(void *)cq;
	return 0;
}

static void cma_cq_destroy(struct nic_cq *ncq)
{
	struct cma_cq *cq = cma_cq_of(ncq);
	struct cma_ctx *ctx;

	if (!cq)
		return;
	ctx = cq->ctx;
	pthread_mutex_lock(&ctx->lock);
	cq_free_locked(cq);
	pthread_mutex_unlock(&ctx->lock);
}

static int cma_qp_create(struct nic *n, struct nic_cq *ncq, uint32_t max_wr, struct nic_qp **out)
{
	struct cma_ctx *ctx = cma_ctx_of(n);
	struct cma_cq *cq = cma_cq_of(ncq);
	struct cma_qp_slot *s;
	struct cma_qp *qp;
	uint8_t secret[NIC_QP_SECRET_LEN];

	if (!max_wr || max_wr > CMA_MAX_QP_WR || !cq || cq->ctx != ctx)
		return -EINVAL;
	if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret))
		return errno ? -errno : -EIO;
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->sq = calloc(max_wr, sizeof(*qp->sq));
	if (!qp->sq) {
		free(qp);
		return -ENOMEM;
	}
	qp->sq_size = max_wr;
	qp->cq = cq;
	qp->ctx = ctx;
	/* Not on cq->active until post: the core may already be polling cq. */
	CDS_INIT_LIST_HEAD(&qp->act);

	pthread_mutex_lock(&ctx->lock);
	qp->qp_num = slots_get(&ctx->qps);
	if (!qp->qp_num) {
		pthread_mutex_unlock(&ctx->lock);
		free(qp->sq);
		free(qp);
		return -ENOSPC;
	}
	s = &ctx->tab->qp[CMA_IDX(qp->qp_num)];
	memcpy(s->secret, secret, sizeof(secret));
	WRITE_ONCE(s->qpn, qp->qp_num); /* peers learn it from qp_info, after this */
	cds_list_add_tail(&qp->link, &cq->qps);
	pthread_mutex_unlock(&ctx->lock);
	*out = (struct nic_qp *)(void *)qp;
	return 0;
}

static void cma_qp_destroy(struct nic_qp *nqp)
{
	struct cma_qp *qp = cma_qp_of(nqp);
	struct cma_ctx *ctx;

	if (!qp)
		return;
	ctx = qp->ctx;
	pthread_mutex_lock(&ctx->lock);
	qp_free_locked(qp);
	pthread_mutex_unlock(&ctx->lock);
}

static void cma_qp_info(const struct nic_qp *nqp, struct nic_qp_info *out)
{
	const struct cma_qp *qp = (const struct cma_qp *)(const void *)nqp;

	memset(out, 0, sizeof(*out));
	out->qpn = qp->qp_num;
	out->psn = 0;
	memcpy(out->secret, qp->ctx->tab->qp[CMA_IDX(qp->qp_num)].secret, sizeof(out->secret));
}

/*
 * The remote must be a cma address on this host (same boot id, same PID
 * namespace), and rqp the peer QP's qp_info: its number and secret are
 * what the initiator presents on every key fetch.  A QP connects once.
 * No system call on the peer here: the responder's side of a connection
 * may lack the permission the initiator has (Yama scope 1 is one-way).
 */
static int cma_qp_connect(struct nic_qp *nqp, const struct nic_addr *remote,
			  const struct nic_qp_info *rqp)
{
	struct cma_qp *qp = cma_qp_of(nqp);
	struct cma_id peer;
	char why[256];
	int rc;

	if (!remote || cma_addr_decode(remote, &peer) != 0) {
		log_err("cma: connect: the peer's address is not a cma address");
		return -EINVAL;
	}
	if (!rqp || !rqp->qpn || CMA_IDX(rqp->qpn) >= CMA_QP_SLOTS) {
		log_err("cma: connect to pid %u: no valid peer QP (number %u)", peer.pid,
			rqp ? rqp->qpn : 0);
		return -EINVAL;
	}
	rc = cma_same_host(&qp->ctx->self, &peer, why, sizeof(why));
	if (rc) {
		log_err("cma: connect to pid %u: %s", peer.pid, why);
		return rc;
	}
	if (READ_ONCE(qp->connected))
		return -EISCONN;
	qp->peer_pid = peer.pid;
	qp->peer_table = peer.table;
	qp->peer_qpn = rqp->qpn;
	memcpy(qp->peer_secret, rqp->secret, sizeof(qp->peer_secret));
	store_release(qp->connected, 1); /* pairs with: load_acquire in cma_post */
	return 0;
}

/* ------------------------------------------------------------------ misc */

static void cma_describe(const struct nic *n, char *buf, size_t len)
{
	snprintf(buf, len, "cma pid %u", cma_cctx_of(n)->self.pid);
}

static int cma_numa_node(const struct nic *n)
{
	(void)n;
	return -1;
}

void cma_get_counters(const struct nic *n, struct cma_counters *out)
{
	struct cma_ctx *ctx = cma_ctx_of((struct nic *)(uintptr_t)n);
	uint64_t sum[CMA_CNT_NR];
	struct cds_list_head *q;

	pthread_mutex_lock(&ctx->lock);
	memcpy(sum, ctx->retired, sizeof(sum));
	cds_list_for_each(q, &ctx->cqs)
		soft_cnt_add(sum, cds_list_entry(q, struct cma_cq, link)->pub, CMA_CNT_NR);
	pthread_mutex_unlock(&ctx->lock);
	out->wrs_executed = sum[CMA_CNT_WRS];
	out->bytes_copied = sum[CMA_CNT_BYTES];
	out->copy_calls = sum[CMA_CNT_CALLS];
	out->key_fetches = sum[CMA_CNT_FETCHES];
	out->wr_errors = sum[CMA_CNT_ERRS];
	out->sq_overflows = sum[CMA_CNT_SQ_OVF];
	out->cq_overflows = sum[CMA_CNT_CQ_OVF];
}

const struct nic_provider nic_cma_provider = {
	.name = "cma",
	.open = cma_open,
	.close = cma_close,
	.caps = cma_caps,
	.addr = cma_addr,
	.reg_mr = cma_reg_mr,
	.dereg_mr = cma_dereg_mr,
	.dereg_mr_begin = cma_dereg_mr_begin,
	.dereg_mr_end = cma_dereg_mr_end,
	.cq_create = cma_cq_create,
	.cq_destroy = cma_cq_destroy,
	.qp_create = cma_qp_create,
	.qp_info = cma_qp_info,
	.qp_connect = cma_qp_connect,
	.qp_num = cma_qp_num,
	.qp_set_error = cma_qp_set_error,
	.qp_destroy = cma_qp_destroy,
	.post = cma_post,
	.poll = cma_poll,
	.describe = cma_describe,
	.numa_node = cma_numa_node,
	.reachable = cma_reachable,
};
