/* SPDX-License-Identifier: MIT */
/*
 * verbs: the data path, and the provider table.
 *
 * post/poll translate nic_wr/nic_wc to verbs on the stack and call
 * ibv_post_send/ibv_poll_cq through a table (struct fv_ops) so that tests
 * can stub them; they neither lock nor allocate.
 */
#include "qp/verbs/verbs.h"

#include <errno.h>
#include <time.h>

#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

#define VERBS_POLL_CHUNK 64
#define VERBS_ERR_LOG_SEC 10 /* at most one error-completion line per CQ per period */

/* ------------------------------------------------------------ data path */

static inline void fill_send_wr(uint32_t inl, const struct nic_wr *wr, struct ibv_send_wr *iw,
				struct ibv_sge *sg)
{
	bool write = wr->op == NIC_OP_WRITE;
	unsigned int flags = wr->signaled ? IBV_SEND_SIGNALED : 0;

	/* Small WRITEs go inline: no DMA read of the source by the NIC. */
	if (write && wr->len && wr->len <= inl)
		flags |= IBV_SEND_INLINE;
	sg->addr = wr->local;
	sg->length = wr->len;
	sg->lkey = wr->lkey;
	*iw = (struct ibv_send_wr){
		.wr_id = wr->wr_id,
		.sg_list = sg,
		.num_sge = wr->len ? 1 : 0, /* a zero-length drain marker has no SGE */
		.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = flags,
		.wr.rdma = { .remote_addr = wr->remote, .rkey = wr->rkey },
	};
}

/* Translate up to VERBS_POST_MAX WRs; stops before one with a bad op. */
static inline uint32_t build_chain(uint32_t inl, struct nic_wr *wr, struct ibv_send_wr *iw,
				   struct ibv_sge *sg, struct nic_wr **next)
{
	uint32_t n = 0;

	for (; wr && n < VERBS_POST_MAX; wr = wr->next, n++) {
		if (unlikely(wr->op != NIC_OP_WRITE && wr->op != NIC_OP_READ))
			break;
		fill_send_wr(inl, wr, &iw[n], &sg[n]);
		iw[n].next = &iw[n + 1];
	}
	if (n)
		iw[n - 1].next = NULL;
	*next = wr;
	return n;
}

/* The nic_wr that became iw[idx] (idx < the chain's length). */
static struct nic_wr *nth_wr(struct nic_wr *wr, uint32_t idx)
{
	while (idx--)
		wr = wr->next;
	return wr;
}

int fv_post(struct nic_qp *q, struct nic_wr *wr, struct nic_wr **bad)
{
	struct fv_qp *qp = qp_of(q);
	struct ibv_send_wr iw[VERBS_POST_MAX];
	struct ibv_sge sg[VERBS_POST_MAX];
	/* Inline: the QP's size, unless the NIC holds memory the CPU cannot read. */
	uint32_t inl = READ_ONCE(qp->nic->no_inline) ? 0 : qp->max_inline;

	while (wr) {
		struct ibv_send_wr *ibad = NULL;
		struct nic_wr *next;
		uint32_t n = build_chain(inl, wr, iw, sg, &next);
		int rc;

		if (unlikely(!n)) {
			if (bad)
				*bad = wr;
			return -EINVAL;
		}
		rc = fv_calls.post_send(qp->qp, iw, &ibad);
		if (unlikely(rc)) {
			/* A provider that names no bad WR may have queued them all
			 * (librxe: its doorbell failed): they count as posted, so
			 * that the quota covers the flushes they come back as. */
			if (bad)
				*bad = ibad >= iw && ibad < iw + n ? nth_wr(wr, (uint32_t)(ibad - iw))
								 : next;
			return -fv_errno(rc);
		}
		wr = next;
	}
	return 0;
}

static uint16_t wc_status(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return NIC_WC_SUCCESS;
	case IBV_WC_LOC_PROT_ERR:
		return NIC_WC_LOC_PROT_ERR;
	case IBV_WC_REM_ACCESS_ERR:
		return NIC_WC_REM_ACCESS_ERR;
	case IBV_WC_WR_FLUSH_ERR:
		return NIC_WC_FLUSH_ERR;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return NIC_WC_RETRY_EXC_ERR;
	default:
		return NIC_WC_GENERAL_ERR;
	}
}

/*
 * The cause of a QP failure is in its first error completion (the rest are
 * flushes); nic_wc has no vendor_err, so log it here, rate-limited per CQ.
 */
static void log_wc_error(struct fv_cq *cq, const struct ibv_wc *w)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	if (cq->err_logged && ts.tv_sec < cq->err_log_at)
		return;
	cq->err_logged = true;
	cq->err_log_at = ts.tv_sec + VERBS_ERR_LOG_SEC;
	vlog(cq->nic, "completion error on QP 0x%x: %s (status %d, vendor_err 0x%x, wr_id 0x%llx)",
	     w->qp_num, ibv_wc_status_str(w->status), (int)w->status, w->vendor_err,
	     (unsigned long long)w->wr_id);
}

static inline void map_wc(struct fv_cq *cq, const struct ibv_wc *in, struct nic_wc *out)
{
	out->wr_id = in->wr_id;
	out->qp_num = in->qp_num;
	if (likely(in->status == IBV_WC_SUCCESS)) {
		out->status = NIC_WC_SUCCESS;
		out->op = in->opcode == IBV_WC_RDMA_READ ? NIC_OP_READ : NIC_OP_WRITE;
		return;
	}
	/* On error in->opcode is not valid. */
	out->status = wc_status(in->status);
	out->op = NIC_OP_WRITE;
	if (in->status != IBV_WC_WR_FLUSH_ERR)
		log_wc_error(cq, in);
}

int fv_poll(struct nic_cq *c, int n, struct nic_wc *wc)
{
	struct fv_cq *cq = cq_of(c);
	struct ibv_wc iwc[VERBS_POLL_CHUNK];
	int done = 0;

	if (unlikely(n <= 0))
		return n < 0 ? -EINVAL : 0;
	while (done < n) {
		int want = n - done < VERBS_POLL_CHUNK ? n - done : VERBS_POLL_CHUNK;
		int got = fv_calls.poll_cq(cq->cq, want, iwc);

		if (unlikely(got < 0))
			return done ? done : -EIO; /* what we have first; the error again next time */
		for (int i = 0; i < got; i++)
			map_wc(cq, &iwc[i], &wc[done + i]);
		done += got;
		if (got < want)
			break;
	}
	return done;
}

const struct nic_provider nic_verbs_provider = {
	.name = "verbs",
	.open = fv_open,
	.close = fv_close,
	.caps = fv_caps,
	.addr = fv_addr,
	.reg_mr = fv_reg_mr,
	.event_fd = fv_event_fd,
	.event_next = fv_event_next,
	.dereg_mr = fv_dereg_mr,
	.cq_create = fv_cq_create,
	.cq_destroy = fv_cq_destroy,
	.qp_create = fv_qp_create,
	.qp_info = fv_qp_info,
	.qp_connect = fv_qp_connect,
	.qp_num = fv_qp_num,
	.qp_set_error = fv_qp_set_error,
	.qp_destroy = fv_qp_destroy,
	.post = fv_post,
	.poll = fv_poll,
	.cq_arm = fv_cq_arm,
	.cq_fd = fv_cq_fd,
	.cq_ack = fv_cq_ack,
	.describe = fv_describe,
	.numa_node = fv_numa_node,
};
