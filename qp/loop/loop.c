/* SPDX-License-Identifier: MIT */
/*
 * loop: the software NIC (see loop.h for what it promises): the control
 * path of its objects (objects.h), and the provider table.
 *
 * It emulates verbs RC one-sided READ/WRITE: post only queues a WR on the
 * QP's send queue; the copy happens when the CQ the QP reports to is polled,
 * on the polling thread (exec.c).  Keys are checked against a process-global
 * MR table so that two engines in one process can target each other's memory.
 *
 * Locking.  One mutex (loop_lock) serialises the control path: the registry
 * of live contexts, each context's CQ list, each CQ's QP list and the MR
 * table's free queue.  post/poll/qp_set_error never lock or allocate; they
 * touch only state owned by the calling core, plus MR slots that they read
 * with atomics.
 *
 * MR invalidation.  A core may be copying from or to an MR at the moment a
 * control thread deregisters it, after which the application may free the
 * memory.  Each CQ therefore carries a poll sequence counter that is odd
 * while the CQ executes WRs.  dereg_mr clears the slot's key and then waits
 * until every CQ that was executing has left poll (its counter changed);
 * polls that start later see the cleared key.  The counter is per CQ rather
 * than per context because nic.h gives ownership per CQ: two cores may poll
 * two CQs of one context.  For the same reason the fault PRNG and the
 * counters live in the CQ (seeded from the context's seed and the CQ's
 * creation ordinal, so a run stays deterministic) and loop_get_counters
 * sums them.
 *
 * Teardown.  Destroying a parent frees its children: loop_close frees the
 * context's CQs, their QPs and its MRs; cq_destroy frees the QPs reporting
 * to it.  Handles to those children are dangling afterwards.  Nothing may be
 * polled or posted while it is being destroyed.
 */
#include "qp/loop/loop.h"
#include "qp/loop/objects.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/compiler.h"
#include "ring/base/fd.h"

#define LOOP_MAX_QP_WR 32768u
#define LOOP_MAX_CQE (1u << 20)
#define LOOP_MAX_RD_ATOMIC 16u

#define LOOP_PPM 1000000u
#define LOOP_DEFAULT_SEED 0x6c6f6f7066657272ull /* "loopferr" */

static const uint8_t loop_magic[4] = { 'L', 'O', 'O', 'P' };

static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static CDS_LIST_HEAD(loop_ctxs);
static uint32_t loop_next_id = 1;
static uint32_t loop_next_qpn = 1;

struct loop_mr_slot loop_mrs[LOOP_MR_SLOTS];
/* FIFO of free slots: a slot is reused as late as possible, so stale keys stay stale. */
static uint16_t loop_mr_free[LOOP_MR_SLOTS];
static uint32_t loop_mr_free_head;
static uint32_t loop_mr_free_count;
static bool loop_mr_ready;

/* ------------------------------------------------------------- control path */

/*
 * Wait until every poll that may have loaded a key before it was cleared
 * has finished (soft_busy_wait; the key's seq_cst load: see
 * loop_mr_covers): what it copied happens before our caller frees the
 * memory.
 */
static void loop_wait_pollers_locked(void)
{
	struct cds_list_head *q;
	struct loop_ctx *ctx;

	cds_list_for_each_entry(ctx, &loop_ctxs, link)
		cds_list_for_each(q, &ctx->cqs) /* not _entry: see soft.h */
			soft_busy_wait(&cds_list_entry(q, struct loop_cq, link)->poll_seq);
}

static void loop_mr_init_locked(void)
{
	uint32_t i;

	if (loop_mr_ready)
		return;
	for (i = 0; i < LOOP_MR_SLOTS; i++)
		loop_mr_free[i] = (uint16_t)i;
	loop_mr_free_head = 0;
	loop_mr_free_count = LOOP_MR_SLOTS;
	loop_mr_ready = true;
}

/* Return an invalidated slot (key 0, no poll still using it) to the free queue. */
static void loop_mr_free_slot_locked(uint32_t idx)
{
	struct loop_mr_slot *s = &loop_mrs[idx];

	s->owner = 0;
	s->base = 0;
	s->len = 0;
	loop_mr_free[(loop_mr_free_head + loop_mr_free_count) & LOOP_MR_MASK] = (uint16_t)idx;
	loop_mr_free_count++;
}

/* Invalidate every MR of a closing context: one wait for all of them. */
static void loop_mr_release_owner_locked(struct loop_ctx *ctx)
{
	uint32_t i;

	for (i = 0; i < LOOP_MR_SLOTS; i++) {
		struct loop_mr_slot *s = &loop_mrs[i];

		if (s->owner == ctx->id && READ_ONCE(s->key))
			store_sc(s->key, 0);
	}
	loop_wait_pollers_locked();
	for (i = 0; i < LOOP_MR_SLOTS; i++)
		if (loop_mrs[i].owner == ctx->id)
			loop_mr_free_slot_locked(i);
	ctx->nmr = 0;
}

static int loop_reg_mr(struct nic *n, void *addr, size_t len, unsigned access, struct nic_mr *out)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct loop_mr_slot *s;
	uint32_t idx, key;

	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	pthread_mutex_lock(&loop_lock);
	loop_mr_init_locked();
	if (!loop_mr_free_count) {
		pthread_mutex_unlock(&loop_lock);
		return -ENOMEM;
	}
	idx = loop_mr_free[loop_mr_free_head];
	loop_mr_free_head = (loop_mr_free_head + 1) & LOOP_MR_MASK;
	loop_mr_free_count--;

	s = &loop_mrs[idx];
	if (++s->gen == 0)
		s->gen = 1;
	s->owner = ctx->id;
	s->base = (uintptr_t)addr;
	s->len = len;
	s->access = (uint8_t)(access & NIC_ACCESS_ALL);
	key = (uint32_t)s->gen << LOOP_MR_BITS | idx;
	/* Release: a poll that loads the key sees owner/base/len. */
	store_release(s->key, key); /* pairs with: load_sc of the key in exec.c */
	ctx->nmr++;
	pthread_mutex_unlock(&loop_lock);

	out->lkey = key;
	out->rkey = key;
	out->priv = NULL;
	return 0;
}

static int loop_dereg_mr(struct nic *n, struct nic_mr *mr)
{
	struct loop_ctx *ctx = ctx_of(n);
	uint32_t idx = mr->lkey & LOOP_MR_MASK;
	struct loop_mr_slot *s = &loop_mrs[idx];

	pthread_mutex_lock(&loop_lock);
	if (!mr->lkey || READ_ONCE(s->key) != mr->lkey ||
	    s->owner != ctx->id) {
		pthread_mutex_unlock(&loop_lock);
		return -EINVAL;
	}
	store_sc(s->key, 0);
	loop_wait_pollers_locked();
	loop_mr_free_slot_locked(idx);
	ctx->nmr--;
	pthread_mutex_unlock(&loop_lock);
	return 0;
}

static int loop_open(const char *dev, struct nic **out)
{
	struct loop_ctx *ctx;

	(void)dev; /* every loop device is alike; the name only picked the provider */
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	do
		ctx->id = fetch_add_relaxed(loop_next_id, 1);
	while (!ctx->id); /* 0 means "not connected" */
	CDS_INIT_LIST_HEAD(&ctx->cqs);
	ctx->seed = LOOP_DEFAULT_SEED; /* not yet shared */
	ctx->event_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (ctx->event_fd < 0) {
		free(ctx);
		return -errno;
	}

	pthread_mutex_lock(&loop_lock);
	cds_list_add_tail(&ctx->link, &loop_ctxs);
	pthread_mutex_unlock(&loop_lock);
	*out = (struct nic *)(void *)ctx;
	return 0;
}

static void loop_caps(const struct nic *n, struct nic_caps *out)
{
	(void)n;
	out->max_qp_wr = LOOP_MAX_QP_WR;
	out->max_cqe = LOOP_MAX_CQE;
	out->max_inline = 0;
	out->max_rd_atomic = LOOP_MAX_RD_ATOMIC;
	/* Not NIC_CAP_SERVES: its polls do only its own WRs.  Every field is
	 * set: the caps contract (nic.h) is the provider's, whoever clears. */
	out->flags = 0;
}

/* "LOOP" then the context id, little endian; the rest is zero. */
static void loop_addr(const struct nic *n, struct nic_addr *out)
{
	const struct loop_ctx *ctx = (const struct loop_ctx *)(const void *)n;
	uint32_t id = READ_ONCE(ctx->id); /* loop_readdress may change it */
	int i;

	memset(out, 0, sizeof(*out));
	memcpy(out->bytes, loop_magic, sizeof(loop_magic));
	for (i = 0; i < 4; i++)
		out->bytes[4 + i] = (uint8_t)(id >> (8 * i));
}

static void loop_qp_free_locked(struct loop_qp *qp)
{
	/* Unlink from cq->active: the caller is the owning core or it is stopped. */
	cds_list_del(&qp->act);
	cds_list_del(&qp->link);
	free(qp->sq);
	free(qp);
}

static void loop_cq_free_locked(struct loop_cq *cq)
{
	while (!cds_list_empty(&cq->qps))
		loop_qp_free_locked(cds_list_first_entry(&cq->qps, struct loop_qp, link));
	soft_cnt_add(cq->ctx->retired, cq->pub, CNT_NR);
	cds_list_del(&cq->link);
	soft_cq_fini(&cq->wcq);
	free(cq);
}

static void loop_close(struct nic *n)
{
	struct loop_ctx *ctx = ctx_of(n);

	if (!ctx)
		return;
	pthread_mutex_lock(&loop_lock);
	while (!cds_list_empty(&ctx->cqs))
		loop_cq_free_locked(cds_list_first_entry(&ctx->cqs, struct loop_cq, link));
	if (ctx->nmr)
		loop_mr_release_owner_locked(ctx);
	cds_list_del(&ctx->link);
	pthread_mutex_unlock(&loop_lock);
	fd_close(ctx->event_fd);
	free(ctx);
}

static int loop_cq_create(struct nic *n, uint32_t cqe, struct nic_cq **out)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct loop_cq *cq;

	if (!cqe || cqe > LOOP_MAX_CQE)
		return -EINVAL;
	cq = ferry_zalloc_lines(sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	if (soft_cq_init(&cq->wcq, cqe)) {
		free(cq);
		return -ENOMEM;
	}
	cq->ctx = ctx;
	CDS_INIT_LIST_HEAD(&cq->active);
	CDS_INIT_LIST_HEAD(&cq->qps);

	pthread_mutex_lock(&loop_lock);
	cq->ordinal = ctx->ncq_created++;
	/* Differ from the current epoch: the first poll loads the fault plan. */
	cq->fault_epoch = READ_ONCE(ctx->fault_epoch) - 1;
	cds_list_add_tail(&cq->link, &ctx->cqs);
	pthread_mutex_unlock(&loop_lock);
	*out = (struct nic_cq *)(void *)cq;
	return 0;
}

static void loop_cq_destroy(struct nic_cq *ncq)
{
	if (!ncq)
		return;
	pthread_mutex_lock(&loop_lock);
	loop_cq_free_locked(cq_of(ncq));
	pthread_mutex_unlock(&loop_lock);
}

static int loop_qp_create(struct nic *n, struct nic_cq *ncq, uint32_t max_wr, struct nic_qp **out)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct loop_cq *cq = cq_of(ncq);
	struct loop_qp *qp;

	if (!max_wr || max_wr > LOOP_MAX_QP_WR || !cq || cq->ctx != ctx)
		return -EINVAL;
	if (READ_ONCE(ctx->no_new_qps))
		return -EIO; /* fault injection: the device is gone */
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->sq = calloc(max_wr, sizeof(*qp->sq));
	if (!qp->sq) {
		free(qp);
		return -ENOMEM;
	}
	qp->sq_size = max_wr;
	qp->qp_num = fetch_add_relaxed(loop_next_qpn, 1);
	qp->local_id = READ_ONCE(ctx->id);
	qp->cq = cq;
	/* Not on cq->active until post: the core may already be polling cq. */
	CDS_INIT_LIST_HEAD(&qp->act);

	pthread_mutex_lock(&loop_lock);
	cds_list_add_tail(&qp->link, &cq->qps);
	pthread_mutex_unlock(&loop_lock);
	*out = (struct nic_qp *)(void *)qp;
	return 0;
}

static void loop_qp_destroy(struct nic_qp *nqp)
{
	if (!nqp)
		return;
	pthread_mutex_lock(&loop_lock);
	loop_qp_free_locked(qp_of(nqp));
	pthread_mutex_unlock(&loop_lock);
}

/* The remote must be a loop address; like a verbs RC QP, a QP connects once. */
static int loop_qp_connect(struct nic_qp *nqp, const struct nic_addr *remote,
			   const struct nic_qp_info *rqp)
{
	struct loop_qp *qp = qp_of(nqp);
	uint32_t id = 0;
	int i;

	(void)rqp; /* one-sided copies need no peer QP */
	if (!remote || memcmp(remote->bytes, loop_magic, sizeof(loop_magic)) != 0)
		return -EINVAL;
	for (i = 0; i < 4; i++)
		id |= (uint32_t)remote->bytes[4 + i] << (8 * i);
	if (!id)
		return -EINVAL;
	if (READ_ONCE(qp->remote_id))
		return -EISCONN;
	store_release(qp->remote_id, id); /* pairs with: load_acquire in exec.c */
	return 0;
}

static void loop_qp_info(const struct nic_qp *nqp, struct nic_qp_info *out)
{
	/* The secret too (zero for loop, nic.h): it goes on the wire as is. */
	memset(out, 0, sizeof(*out));
	out->qpn = ((const struct loop_qp *)(const void *)nqp)->qp_num;
}

static void loop_describe(const struct nic *n, char *buf, size_t len)
{
	snprintf(buf, len, "loop (software NIC, context %u)",
		 ((const struct loop_ctx *)(const void *)n)->id);
}

static int loop_numa_node(const struct nic *n)
{
	(void)n;
	return -1;
}

static uint64_t loop_ppm_thr(uint32_t ppm)
{
	if (ppm >= LOOP_PPM)
		return 1ull << 32;
	return ((uint64_t)ppm << 32) / LOOP_PPM;
}

int loop_inject_event(struct nic *n, const struct nic_event *ev)
{
	struct loop_ctx *ctx = ctx_of(n);
	int rc = -ENOSPC;

	pthread_mutex_lock(&loop_lock);
	if (ctx->nevents < LOOP_EVENTS) {
		ctx->events[ctx->nevents++] = *ev;
		eventfd_write(ctx->event_fd, 1);
		rc = 0;
	}
	pthread_mutex_unlock(&loop_lock);
	return rc;
}

void loop_readdress(struct nic *n)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct cds_list_head *q, *l;
	uint32_t old = ctx->id, id;

	do
		id = fetch_add_relaxed(loop_next_id, 1);
	while (!id);
	pthread_mutex_lock(&loop_lock);
	for (uint32_t i = 0; i < LOOP_MR_SLOTS; i++)
		if (loop_mrs[i].owner == old)
			WRITE_ONCE(loop_mrs[i].owner, id);
	cds_list_for_each(q, &ctx->cqs) /* not _entry: see soft.h */
		cds_list_for_each(l, &cds_list_entry(q, struct loop_cq, link)->qps)
			cds_list_entry(l, struct loop_qp, link)->local_id = id;
	WRITE_ONCE(ctx->id, id);
	pthread_mutex_unlock(&loop_lock);
}

unsigned loop_qps_connected_to(struct nic *n, uint32_t id)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct cds_list_head *q, *l;
	unsigned count = 0;

	pthread_mutex_lock(&loop_lock);
	cds_list_for_each(q, &ctx->cqs) /* not _entry: see soft.h */
		cds_list_for_each(l, &cds_list_entry(q, struct loop_cq, link)->qps)
			/* pairs with: store_release in loop_qp_connect */
			count += load_acquire(cds_list_entry(l, struct loop_qp, link)->remote_id) == id;
	pthread_mutex_unlock(&loop_lock);
	return count;
}

static int loop_event_fd(const struct nic *n)
{
	return ((const struct loop_ctx *)(const void *)n)->event_fd;
}

static int loop_event_next(struct nic *n, struct nic_event *out)
{
	struct loop_ctx *ctx = ctx_of(n);
	eventfd_t v;
	int got = 0;

	pthread_mutex_lock(&loop_lock);
	if (ctx->nevents) {
		*out = ctx->events[0];
		memmove(&ctx->events[0], &ctx->events[1], --ctx->nevents * sizeof(ctx->events[0]));
		got = 1;
	}
	if (!ctx->nevents)
		(void)eventfd_read(ctx->event_fd, &v); /* drained: not readable any more */
	pthread_mutex_unlock(&loop_lock);
	return got;
}

void loop_set_faults(struct nic *n, const struct loop_faults *f)
{
	struct loop_ctx *ctx = ctx_of(n);
	struct loop_faults none = { 0 };

	if (!f)
		f = &none;
	/* The lock only orders concurrent callers; polls read the atomics. */
	pthread_mutex_lock(&loop_lock);
	WRITE_ONCE(ctx->thr_err, loop_ppm_thr(f->err_ppm));
	WRITE_ONCE(ctx->thr_lost, loop_ppm_thr(f->lost_ppm));
	WRITE_ONCE(ctx->thr_fatal, loop_ppm_thr(f->qp_fatal_ppm));
	WRITE_ONCE(ctx->seed, f->seed ? f->seed : LOOP_DEFAULT_SEED);
	WRITE_ONCE(ctx->no_new_qps, f->no_new_qps);
	WRITE_ONCE(ctx->silent_peer, f->silent_peer);
	WRITE_ONCE(ctx->dead, f->dead);
	/* Release: a poll that sees the new epoch sees the new plan (and reseeds). */
	fetch_add_release(ctx->fault_epoch, 1); /* pairs with: load_acquire in loop_poll */
	pthread_mutex_unlock(&loop_lock);
}

void loop_set_nocopy(struct nic *n, int nocopy)
{
	WRITE_ONCE(ctx_of(n)->nocopy, !!nocopy);
}

void loop_get_counters(const struct nic *n, struct loop_counters *out)
{
	const struct loop_ctx *ctx = (const struct loop_ctx *)(const void *)n;
	uint64_t sum[CNT_NR];
	const struct cds_list_head *q;

	pthread_mutex_lock(&loop_lock);
	memcpy(sum, ctx->retired, sizeof(sum));
	cds_list_for_each(q, &ctx->cqs)
		soft_cnt_add(sum, cds_list_entry(q, struct loop_cq, link)->pub, CNT_NR);
	pthread_mutex_unlock(&loop_lock);

	out->wrs_executed = sum[CNT_WRS];
	out->bytes_copied = sum[CNT_BYTES];
	out->errs_injected = sum[CNT_ERRS];
	out->lost_injected = sum[CNT_LOST];
	out->fatal_injected = sum[CNT_FATAL];
	out->sq_overflows = sum[CNT_SQ_OVF];
	out->cq_overflows = sum[CNT_CQ_OVF];
}

const struct nic_provider nic_loop_provider = {
	.name = "loop",
	.open = loop_open,
	.close = loop_close,
	.caps = loop_caps,
	.addr = loop_addr,
	.reg_mr = loop_reg_mr,
	.event_fd = loop_event_fd,
	.event_next = loop_event_next,
	.dereg_mr = loop_dereg_mr,
	.cq_create = loop_cq_create,
	.cq_destroy = loop_cq_destroy,
	.qp_create = loop_qp_create,
	.qp_info = loop_qp_info,
	.qp_connect = loop_qp_connect,
	.qp_num = loop_qp_num,
	.qp_set_error = loop_qp_set_error,
	.qp_destroy = loop_qp_destroy,
	.post = loop_post,
	.poll = loop_poll,
	.describe = loop_describe,
	.numa_node = loop_numa_node,
};
