/* SPDX-License-Identifier: MIT */
/*
 * tcp: a connection's I/O, shared by the initiator (init.c) and the
 * target (serve.c), and the poll loop that drives both.
 *
 * Receiving.  A frame is a header, then maybe a payload that goes
 * straight to its place (the target's region for a WRITE, the initiator's
 * buffer for a READ_RESP).  Headers are read exactly (24 bytes) after a
 * frame with a payload over TCP_SMALL -- better: the payload's last recvmsg
 * carries a second iovec for the next header -- and in bulk (up to
 * TCP_STAGE bytes) after a frame without one or with a small one, where
 * small frames come in runs (ACKs, READ requests, small WRITEs).  Bytes of a payload that a bulk read took along are copied
 * from the stage, at most TCP_STAGE - TCP_HDR_LEN per switch from small to
 * big frames.
 *
 * Work per call is bounded: epoll_wait takes TCP_EVENTS events, each
 * connection makes at most TCP_IO_CALLS recv calls per turn and twice as
 * many sends (the target sends before and after it reads; the initiator
 * again once the peer's HELLO is in), each of at most TCP_IO_BYTES; the
 * epoll set is level-triggered, so whatever is left is reported again by
 * the next poll.  Interest follows need (tcp_want): EPOLLOUT only while
 * something waits to be sent, EPOLLIN off while the target cannot take
 * another request.
 */
#include "qp/tcp/objects.h"
#include "ring/base/fd.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

char tcp_tsan_wire;

/* Queue a completion; the core's CQ quota leaves room for each WR's. */
void tcp_cqe(struct tcp_cq *cq, const struct tcp_qp *qp, uint64_t wr_id, uint8_t op,
	     enum nic_wc_status st)
{
	/* A real CQ would overflow too: the caller broke its CQ quota. */
	if (unlikely(!soft_cq_push(&cq->wcq, wr_id, qp->qpn, op, st)))
		cq->cnt[TC_CQ_OVF]++;
}

/* Set the connection's epoll interest (a system call only on a change). */
void tcp_want(struct tcp_qp *qp, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = tcp_tag(TCP_TAG_QP, qp->qpn) };

	if (qp->fd < 0 || events == qp->events)
		return;
	if (epoll_ctl(qp->cq->epfd, EPOLL_CTL_MOD, qp->fd, &ev) == 0)
		qp->events = events;
}

/* The connection is over: out of the epoll set, closed. */
void tcp_conn_close(struct tcp_qp *qp)
{
	if (qp->fd < 0)
		return;
	epoll_ctl(qp->cq->epfd, EPOLL_CTL_DEL, qp->fd, NULL);
	sock_close(qp->fd);
	qp->fd = -1;
	qp->events = 0;
	qp->st_off = qp->st_len = 0;
	qp->hdr_got = 0;
	qp->left = 0;
}

/*
 * recv's result as 1 (bytes), 0 (nothing now) or -errno (EOF: -ESHUTDOWN).
 * Fewer bytes than asked mean the socket had no more just then: the next
 * recv of this turn would only say EAGAIN (a system call per frame, about
 * a microsecond here), so the turn stops reading; the level-triggered
 * epoll set reports what arrives meanwhile at the next poll.
 */
static int rx_result(ssize_t r);

static int rx_result_of(struct tcp_qp *qp, ssize_t r, size_t asked)
{
	if (r > 0 && (size_t)r < asked)
		qp->rx_dry = true;
	return rx_result(r);
}

static int rx_result(ssize_t r)
{
	if (r > 0) {
		tcp_tsan_received();
		return 1;
	}
	if (r == 0)
		return -ESHUTDOWN;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return -errno;
}

/* Header bytes from the stage, then from the socket.  1: qp->hdr is whole. */
static int rx_fill_hdr(struct tcp_qp *qp, unsigned *calls)
{
	while (qp->hdr_got < TCP_HDR_LEN) {
		uint32_t need = TCP_HDR_LEN - qp->hdr_got;
		uint32_t have = qp->st_len - qp->st_off;
		ssize_t r;
		int rc;

		if (have) {
			uint32_t n = have < need ? have : need;

			memcpy(qp->hdr + qp->hdr_got, qp->stage + qp->st_off, n);
			qp->st_off += n;
			qp->hdr_got += n;
			continue;
		}
		if (*calls >= TCP_IO_CALLS || qp->rx_dry)
			return 0;
		(*calls)++;
		if (qp->bulk) {
			qp->st_off = qp->st_len = 0;
			r = recv(qp->fd, qp->stage, TCP_STAGE, MSG_DONTWAIT);
			rc = rx_result_of(qp, r, TCP_STAGE);
			if (rc <= 0)
				return rc;
			qp->st_len = (uint32_t)r;
		} else {
			r = recv(qp->fd, qp->hdr + qp->hdr_got, need, MSG_DONTWAIT);
			rc = rx_result_of(qp, r, need);
			if (rc <= 0)
				return rc;
			qp->hdr_got += (uint32_t)r;
		}
	}
	return 1;
}

/*
 * The next frame's header, decoded into qp->cur.  1: a frame (whose
 * fields the decoder checked, not yet what it asks for); 0: not yet;
 * -errno: the connection is over (EOF, error, or a malformed header).
 */
int tcp_rx_hdr(struct tcp_qp *qp, unsigned *calls)
{
	int rc = rx_fill_hdr(qp, calls);

	if (rc <= 0)
		return rc;
	qp->hdr_got = 0;
	rc = tcp_frame_decode(qp->hdr, TCP_HDR_LEN, &qp->cur);
	if (rc)
		return rc;
	qp->cq->cnt[TC_FRAMES_RX]++;
	return 1;
}

/* The current frame's payload goes to dst; key 0 names a buffer of the QP. */
void tcp_rx_expect(struct tcp_qp *qp, uint8_t *dst, uint32_t len, uint32_t key, uint32_t access)
{
	qp->dst = dst;
	qp->left = len;
	qp->dst_key = key;
	qp->dst_access = access;
	qp->rx_small = len <= TCP_SMALL;
	qp->rx_phase = RX_PAYLOAD;
}

/* Is dst still inside the region it was checked against? (dereg_mr) */
static bool rx_dst_ok(struct tcp_qp *qp)
{
	return !qp->dst_key || tcp_mr_ok(qp->ctx, qp->dst_key, (uintptr_t)qp->dst, qp->left,
					  qp->dst_access);
}

/*
 * Receive the payload into place.  1: all of it is there; 0: not yet;
 * -EFAULT: its region went away; -errno: the connection is over.
 */
int tcp_rx_payload(struct tcp_qp *qp, unsigned *calls)
{
	uint32_t have = qp->st_len - qp->st_off;

	if (qp->left && !rx_dst_ok(qp))
		return -EFAULT;
	if (have && qp->left) {
		uint32_t n = have < qp->left ? have : qp->left;

		memcpy(qp->dst, qp->stage + qp->st_off, n);
		qp->st_off += n;
		qp->dst += n;
		qp->left -= n;
		qp->cq->cnt[TC_PAYLOAD_RX] += n;
	}
	while (qp->left) {
		/* The payload, and with its last piece the next frame's header. */
		bool last = qp->left <= TCP_IO_BYTES;
		struct iovec iov[2] = {
			{ .iov_base = qp->dst, .iov_len = last ? qp->left : TCP_IO_BYTES },
			{ .iov_base = qp->hdr, .iov_len = TCP_HDR_LEN },
		};
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = last ? 2 : 1 };
		ssize_t r;
		int rc;

		if (*calls >= TCP_IO_CALLS || qp->rx_dry)
			return 0;
		(*calls)++;
		r = recvmsg(qp->fd, &m, MSG_DONTWAIT);
		rc = rx_result_of(qp, r, iov[0].iov_len + (last ? TCP_HDR_LEN : 0));
		if (rc <= 0)
			return rc;
		if ((size_t)r > qp->left) {
			qp->hdr_got = (uint32_t)((size_t)r - qp->left);
			r = (ssize_t)qp->left;
		}
		qp->dst += r;
		qp->left -= (uint32_t)r;
		qp->cq->cnt[TC_PAYLOAD_RX] += (uint64_t)r;
	}
	/* After a small payload the next frame is likely small too (an 8-byte
	 * ping-pong, KV metadata): one bulk recv takes its header and payload
	 * together, instead of an exact header read and a payload recvmsg. */
	qp->bulk = qp->rx_small;
	qp->rx_phase = RX_HDR;
	return 1;
}

/* One epoll event of a QP: the core serves the QP by its role. */
static void tcp_qp_event(struct tcp_cq *cq, uint32_t qpn, uint32_t events)
{
	struct tcp_qp *qp = tcp_qp_lookup(cq->ctx, qpn);
	uint32_t state;

	if (!qp || qp->cq != cq)
		return; /* destroyed meanwhile: its socket leaves the set with it */
	qp->rx_dry = false; /* epoll says there is something to read (or to send) */
	/* pairs with: store_release in tcp_dial (DIALED), tcp_expect (EXPECT) */
	state = load_acquire(qp->state);
	if (state == TCP_QS_DIALED)
		tcp_init_io(qp, events);
	else if (state == TCP_QS_EXPECT)
		tcp_serve_io(qp, events);
}

/* The sockets' work, bounded: one epoll_wait, each event served once. */
static void tcp_cq_run(struct tcp_cq *cq)
{
	int nev = epoll_wait(cq->epfd, cq->ev, TCP_EVENTS, 0);

	for (int i = 0; i < nev; i++) {
		uint64_t d = cq->ev[i].data.u64;
		uint32_t id = (uint32_t)d;

		switch (d >> 32) {
		case TCP_TAG_LISTEN:
			tcp_accept(cq);
			break;
		case TCP_TAG_PEND:
			tcp_pending_io(cq, id);
			break;
		case TCP_TAG_QP:
			tcp_qp_event(cq, id, cq->ev[i].events);
			break;
		}
	}
	if (cq->npend)
		tcp_pending_sweep(cq);
}

int tcp_poll(struct nic_cq *ncq, int n, struct nic_wc *wc)
{
	struct tcp_cq *cq = tcp_cq_of(ncq);
	uint64_t seq;

	if (unlikely(n <= 0))
		return n < 0 ? -EINVAL : 0;
	seq = soft_busy_enter(&cq->busy_seq);
	tcp_cq_run(cq);
	soft_busy_leave(&cq->busy_seq, seq);
	soft_cnt_publish(cq->pub, cq->cnt, TC_NR);
	return soft_cq_poll(&cq->wcq, (uint32_t)n, wc);
}
