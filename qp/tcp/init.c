/* SPDX-License-Identifier: MIT */
/*
 * tcp: the initiator's data path.  post queues WRs on the QP's send queue
 * and sends what the socket takes (one sendmsg gathers many frames: their
 * headers and, for WRITEs, the payloads straight from registered memory);
 * poll sends the rest when the socket has room and takes the target's
 * responses, which complete the WRs in order:
 *
 *   ACK n        every WR up to n, all WRITEs, is done
 *   READ_RESP n  every WR before n is done (WRITEs); n's bytes follow and
 *                go straight into its local buffer, then n is done
 *
 * A response with an error status fails its WR (REM_ACCESS_ERR); a broken
 * connection fails the oldest outstanding WR (RETRY_EXC_ERR); either way
 * the QP enters the error state, its connection is closed and every WR
 * behind flushes (FLUSH_ERR, signalled or not), as RC does.
 */
#include "qp/tcp/objects.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "ring/base/log.h"
#include "slice/slice.h"

static inline struct tcp_wqe *sq_at(struct tcp_qp *qp, uint32_t i)
{
	return &qp->sq[i & qp->sq_mask];
}

static inline uint32_t wqe_bytes(const struct tcp_wqe *w)
{
	return TCP_HDR_LEN + (w->op == NIC_OP_WRITE ? w->len : 0);
}

/* Complete WRs [head, upto) successfully: CQEs for the signalled ones. */
static void sq_complete(struct tcp_qp *qp, uint32_t upto)
{
	for (; qp->head != upto; qp->head++) {
		const struct tcp_wqe *w = sq_at(qp, qp->head);

		if (w->signaled)
			tcp_cqe(qp->cq, qp, w->wr_id, w->op, NIC_WC_SUCCESS);
	}
}

/*
 * The error state: the oldest outstanding WR completes with st, the rest
 * flush, the connection closes.  why (may be NULL) goes to the log.
 */
static void init_fail(struct tcp_qp *qp, enum nic_wc_status st, const char *why, int err)
{
	if (qp->error)
		return;
	qp->error = true;
	if (why)
		tcp_log(qp->ctx, LOG_WARN, "QP %u (to QP %u): %s%s%s; %u WRs fail", qp->qpn,
			qp->peer_qpn, why, err ? ": " : "", err ? log_errstr(-err) : "",
			qp->tail - qp->head);
	if (qp->head != qp->tail) {
		const struct tcp_wqe *w = sq_at(qp, qp->head++);

		tcp_cqe(qp->cq, qp, w->wr_id, w->op, st);
	}
	for (; qp->head != qp->tail; qp->head++) {
		const struct tcp_wqe *w = sq_at(qp, qp->head);

		tcp_cqe(qp->cq, qp, w->wr_id, w->op, NIC_WC_FLUSH_ERR);
	}
	qp->sent = qp->tail;
	qp->tx_off = 0;
	tcp_conn_close(qp);
}

/* A WR refused at post fails in its turn: once every WR before it is done. */
static bool init_check_bad(struct tcp_qp *qp)
{
	const struct tcp_wqe *w;

	if (qp->head == qp->tail || qp->head != qp->sent)
		return false;
	w = sq_at(qp, qp->head);
	if (!w->bad)
		return false;
	init_fail(qp, (enum nic_wc_status)w->bad, NULL, 0);
	return true;
}

/* ---- sending ---------------------------------------------------------- */

/* iovecs for frames from qp->sent on; returns how many, 0 if none may go. */
static int tx_gather(struct tcp_qp *qp, struct iovec *iov)
{
	uint32_t off = qp->tx_off, bytes = 0;
	int n = 0;

	for (uint32_t i = qp->sent; i != qp->tail && n + 2 <= TCP_IOV && bytes < TCP_IO_BYTES;
	     i++, off = 0) {
		struct tcp_wqe *w = sq_at(qp, i);

		if (w->bad)
			break;
		if (w->op == NIC_OP_WRITE && w->len > qp->peer_max && off == 0) {
			w->bad = NIC_WC_GENERAL_ERR; /* more than the target takes */
			break;
		}
		/* dereg_mr may have taken the buffer since post: look again. */
		if (w->op == NIC_OP_WRITE && w->len &&
		    !tcp_mr_ok(qp->ctx, w->lkey, w->local, w->len, 0)) {
			if (i != qp->sent || off == 0) {
				w->bad = NIC_WC_LOC_PROT_ERR; /* fails in its turn */
				break;
			}
			return -EFAULT; /* half sent: the frame cannot be finished */
		}
		/* A READ request is its header alone. */
		n = tcp_frame_iov(iov, n, &bytes, w->hdr, off, (uintptr_t)w->local,
				  w->op == NIC_OP_WRITE ? w->len : 0);
	}
	return n;
}

/* r bytes went out: move sent and tx_off over them. */
static void tx_advance(struct tcp_qp *qp, size_t r)
{
	while (r) {
		const struct tcp_wqe *w = sq_at(qp, qp->sent);
		uint32_t rest = wqe_bytes(w) - qp->tx_off;

		if (r < rest) {
			qp->tx_off += (uint32_t)r;
			return;
		}
		r -= rest;
		qp->tx_off = 0;
		qp->sent++;
		qp->cq->cnt[TC_FRAMES_TX]++;
		if (w->op == NIC_OP_WRITE)
			qp->cq->cnt[TC_PAYLOAD_TX] += w->len;
	}
}

/*
 * Send what the socket takes, at most TCP_IO_CALLS calls.  Not before the
 * target's HELLO is verified: a WRITE's bytes go only to the peer that
 * proved it holds our QP's secret (one round trip, once per connection).
 */
static void init_tx(struct tcp_qp *qp)
{
	struct iovec iov[TCP_IOV];

	if (!qp->hello_ok)
		return;
	for (unsigned calls = 0; qp->sent != qp->tail && calls < TCP_IO_CALLS; calls++) {
		struct msghdr m = { .msg_iov = iov };
		int n = tx_gather(qp, iov);
		ssize_t r;

		if (n < 0) {
			init_fail(qp, NIC_WC_LOC_PROT_ERR, "a WRITE's buffer was deregistered", 0);
			return;
		}
		if (n == 0)
			break;
		m.msg_iovlen = (size_t)n;
		tcp_tsan_send_begin();
		r = sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		tcp_tsan_send_end();
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				qp->cq->cnt[TC_BROKEN]++;
				init_fail(qp, NIC_WC_RETRY_EXC_ERR, "send", -errno);
			}
			return;
		}
		tx_advance(qp, (size_t)r);
	}
	init_check_bad(qp);
}

static void init_want(struct tcp_qp *qp)
{
	uint32_t ev = EPOLLIN;

	if (qp->hello_ok && qp->sent != qp->tail && !sq_at(qp, qp->sent)->bad)
		ev |= EPOLLOUT;
	tcp_want(qp, ev);
}

/* ---- responses -------------------------------------------------------- */

static enum nic_wc_status status_wc(uint8_t st)
{
	return st == TCP_ST_ACCESS ? NIC_WC_REM_ACCESS_ERR : NIC_WC_GENERAL_ERR;
}

/*
 * Which WR does a response with seq answer (*i)?  It must have been sent
 * whole and not completed, and every WR before it must be a WRITE (a READ
 * before it would have had its own response first).  The counters wrap.
 */
static bool resp_index(struct tcp_qp *qp, uint32_t seq, uint32_t *i)
{
	*i = seq - qp->psn;
	if (*i - qp->head >= qp->sent - qp->head)
		return false;
	for (uint32_t k = qp->head; k != *i; k++)
		if (sq_at(qp, k)->op != NIC_OP_WRITE)
			return false;
	return true;
}

/*
 * A refusal of the WRITE still going out (*i): the target refuses a WRITE
 * on its header, and its answer may come while we are still sending the
 * payload (a large WR, a full socket).  Before it, all WRITEs, answered by
 * the same ACK.
 */
static bool resp_refuses_sending(struct tcp_qp *qp, const struct tcp_frame *f, uint32_t *i)
{
	*i = f->seq - qp->psn;
	if (f->type != TCP_F_ACK || f->status == TCP_ST_OK || *i != qp->sent ||
	    qp->sent == qp->tail || qp->tx_off < TCP_HDR_LEN ||
	    sq_at(qp, *i)->op != NIC_OP_WRITE)
		return false;
	for (uint32_t k = qp->head; k != *i; k++)
		if (sq_at(qp, k)->op != NIC_OP_WRITE)
			return false;
	return true;
}

/* The target's HELLO: our own qpn and secret, as we gave them, and its
 * proof of the cluster key. */
static int init_hello(struct tcp_qp *qp)
{
	struct tcp_hello h;

	if (tcp_hello_decode(qp->hello_rx, TCP_HELLO_LEN, &h))
		return -EPROTO;
	if (h.qpn != qp->qpn || !tcp_secret_equal(h.secret, qp->secret) ||
	    !tcp_mac_equal(h.mac, qp->mac_expect))
		return -EACCES;
	qp->peer_max = h.max_frame;
	qp->hello_ok = true;
	return 0;
}

/* A response header; 0, or -EPROTO for one that does not fit the WRs. */
static int init_frame(struct tcp_qp *qp)
{
	const struct tcp_frame *f = &qp->cur;
	struct tcp_wqe *w;
	uint32_t i;

	if (!qp->hello_ok) {
		if (f->type != TCP_F_HELLO)
			return -EPROTO;
		tcp_rx_expect(qp, qp->hello_rx, TCP_HELLO_LEN, 0, 0);
		return 0;
	}
	if (f->type != TCP_F_ACK && f->type != TCP_F_READ_RESP)
		return -EPROTO;
	if (!resp_index(qp, f->seq, &i) && !resp_refuses_sending(qp, f, &i))
		return -EPROTO;
	w = sq_at(qp, i);
	if (f->type == TCP_F_ACK ? w->op != NIC_OP_WRITE : w->op != NIC_OP_READ)
		return -EPROTO;
	if (f->status != TCP_ST_OK) {
		sq_complete(qp, i);
		init_fail(qp, status_wc(f->status), NULL, 0);
		return 0;
	}
	if (f->type == TCP_F_ACK) {
		sq_complete(qp, i + 1);
		qp->bulk = true;
		return 0;
	}
	if (f->len != w->len)
		return -EPROTO;
	sq_complete(qp, i);
	tcp_rx_expect(qp, (uint8_t *)(uintptr_t)w->local, w->len, w->lkey, 0);
	return 0;
}

/* A payload is in place: the HELLO's, or the READ at head's. */
static int init_payload_done(struct tcp_qp *qp)
{
	if (!qp->hello_ok) {
		int rc = init_hello(qp);

		if (rc == 0)
			init_tx(qp); /* what was posted meanwhile */
		return rc;
	}
	sq_complete(qp, qp->head + 1);
	return 0;
}

/* Why the connection ended, for the log; the WR at head takes the blame. */
static void init_rx_fail(struct tcp_qp *qp, int rc)
{
	switch (rc) {
	case -EFAULT:
		init_fail(qp, NIC_WC_LOC_PROT_ERR, "a READ's buffer was deregistered", 0);
		break;
	case -EACCES:
		qp->cq->cnt[TC_VIOLATIONS]++;
		init_fail(qp, NIC_WC_RETRY_EXC_ERR, "the peer's HELLO names another QP or secret, or lacks the "
			  "cluster key's proof", 0);
		break;
	case -EPROTO:
	case -EPROTONOSUPPORT:
	case -EMSGSIZE:
		qp->cq->cnt[TC_VIOLATIONS]++;
		init_fail(qp, NIC_WC_RETRY_EXC_ERR, "malformed or unexpected response", 0);
		break;
	case -ESHUTDOWN:
		qp->cq->cnt[TC_BROKEN]++;
		init_fail(qp, NIC_WC_RETRY_EXC_ERR,
			  qp->tail != qp->head ? "the peer closed the connection" : NULL, 0);
		break;
	default:
		/* An idle QP whose peer went away fails nothing: no message. */
		qp->cq->cnt[TC_BROKEN]++;
		init_fail(qp, NIC_WC_RETRY_EXC_ERR,
			  qp->tail != qp->head ? "connection lost" : NULL, rc);
		break;
	}
}

/* Responses until the socket has nothing more or our turn is over (rc 0). */
static void init_rx(struct tcp_qp *qp)
{
	unsigned calls = 0;
	int rc = 1;

	while (rc == 1 && !qp->error) {
		if (qp->rx_phase == RX_PAYLOAD) {
			rc = tcp_rx_payload(qp, &calls);
			if (rc == 1)
				rc = init_payload_done(qp) ?: 1;
		} else {
			rc = tcp_rx_hdr(qp, &calls);
			if (rc == 1)
				rc = init_frame(qp) ?: 1;
		}
	}
	if (rc < 0 && !qp->error)
		init_rx_fail(qp, rc);
}

void tcp_init_io(struct tcp_qp *qp, uint32_t events)
{
	if (qp->error || qp->fd < 0)
		return;
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		init_rx(qp);
	if (!qp->error && (events & EPOLLOUT))
		init_tx(qp);
	if (!qp->error)
		init_check_bad(qp);
	if (!qp->error)
		init_want(qp);
}

/* ---- post and set_error (the owning core) ------------------------------ */

/* The engine cuts no slice longer than this provider's frame (slice_count_long). */
_Static_assert(SLICE_MAX_LEN <= TCP_MAX_FRAME, "a slice fits one frame");

static void sq_push(struct tcp_qp *qp, const struct nic_wr *wr)
{
	struct tcp_wqe *w = sq_at(qp, qp->tail);
	struct tcp_frame f = {
		.type = wr->op == NIC_OP_WRITE ? TCP_F_WRITE : TCP_F_READ_REQ,
		.len = wr->len,
		.seq = qp->psn + qp->tail,
		.rkey = wr->rkey,
		.addr = wr->remote,
	};

	w->wr_id = wr->wr_id;
	w->local = wr->local;
	w->len = wr->len;
	w->lkey = wr->lkey;
	w->op = wr->op;
	w->signaled = wr->signaled;
	w->bad = 0;
	/* As verbs: a zero-length WR names no memory, so no key is checked. */
	if (wr->len > TCP_MAX_FRAME || wr->remote > UINT64_MAX - wr->len)
		w->bad = NIC_WC_GENERAL_ERR;
	else if (wr->len && !tcp_mr_ok(qp->ctx, wr->lkey, wr->local, wr->len, 0))
		w->bad = NIC_WC_LOC_PROT_ERR;
	else
		tcp_frame_encode(&f, w->hdr);
	qp->tail++;
}

int tcp_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad)
{
	struct tcp_qp *qp = tcp_qp_of(nqp);
	struct tcp_cq *cq = qp->cq;
	uint64_t seq;
	int rc = 0;

	/* pairs with: store_release in tcp_dial */
	if (unlikely(load_acquire(qp->state) != TCP_QS_DIALED)) {
		if (bad)
			*bad = wr;
		return -ENOTCONN;
	}
	seq = soft_busy_enter(&cq->busy_seq);
	for (; wr; wr = wr->next) {
		if (unlikely(wr->op != NIC_OP_WRITE && wr->op != NIC_OP_READ)) {
			rc = -EINVAL;
			break;
		}
		if (unlikely(qp->error)) {
			/* The error state: it flushes at once, signalled or not. */
			tcp_cqe(cq, qp, wr->wr_id, wr->op, NIC_WC_FLUSH_ERR);
			continue;
		}
		if (unlikely(qp->tail - qp->head == qp->max_wr)) {
			/* The caller's QP depth accounting is wrong. */
			cq->cnt[TC_SQ_OVF]++;
			rc = -ENOMEM;
			break;
		}
		sq_push(qp, wr);
	}
	if (!qp->error) {
		init_tx(qp);
		if (!qp->error)
			init_want(qp);
	}
	soft_busy_leave(&cq->busy_seq, seq);
	WRITE_ONCE(cq->pub[TC_SQ_OVF], cq->cnt[TC_SQ_OVF]);
	if (rc && bad)
		*bad = wr;
	return rc;
}

/* The owning core: flush everything outstanding and close the connection. */
int tcp_qp_set_error(struct nic_qp *nqp)
{
	struct tcp_qp *qp = tcp_qp_of(nqp);
	uint64_t seq = soft_busy_enter(&qp->cq->busy_seq);

	if (qp->passive) {
		/* A target QP has no WRs of its own; in the error state it
		 * takes no connection either (bind_refusal), even one not
		 * dialled yet. */
		qp->error = true;
		tcp_conn_close(qp);
	} else {
		init_fail(qp, NIC_WC_FLUSH_ERR, NULL, 0);
		qp->error = true;
	}
	soft_busy_leave(&qp->cq->busy_seq, seq);
	return 0;
}
