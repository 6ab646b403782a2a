/* SPDX-License-Identifier: MIT */
/*
 * tcp: the target's side, served by the core that polls the context's
 * first CQ (the listener is in its epoll set).  A dialled connection waits
 * in a pending slot until its HELLO names a QP connected first (EXPECT)
 * with the right secret; then it is bound to that QP for good.  Requests
 * are checked against our MRs (key, bounds, access) and executed in order:
 * a WRITE's payload is received straight into the region, a READ_REQ
 * queues a READ_RESP that is sent straight from the region.  WRITEs are
 * acknowledged cumulatively once per turn (and implied by any later
 * READ_RESP).  A request that fails the checks gets an error response,
 * after which the connection only drains; a malformed or unexpected frame
 * closes it at once.  Nothing is written before a HELLO is verified.
 */
#include "qp/tcp/objects.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ring/base/clock.h"
#include "ring/base/fd.h"
#include "ring/base/log.h"

#define TCP_ACCEPTS 16  /* connections one poll accepts */

/* ---- connections before their HELLO ------------------------------------- */

void tcp_pending_close(struct tcp_cq *cq, uint32_t slot)
{
	struct tcp_pending *p = &cq->pend[slot];

	epoll_ctl(cq->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	sock_close(p->fd);
	p->fd = -1;
	cq->npend--;
}

static int pending_slot(struct tcp_cq *cq)
{
	for (int i = 0; i < TCP_PENDING; i++)
		if (cq->pend[i].fd < 0)
			return i;
	return -1;
}

/*
 * accept() failed for want of a descriptor: the connection stays in the
 * backlog, the listener stays readable, and the serving core would poll it
 * again at once, for as long as the process is out of fds (a core at
 * 100 %, the peer's dial hanging to its timeout).  The spare fd makes room
 * to take the connection and close it: the peer sees it refused at once
 * and retries later.  Error path only.
 */
static void accept_out_of_fds(struct tcp_ctx *ctx, struct tcp_cq *cq, int err)
{
	int fd;

	tcp_log(ctx, LOG_WARN, "accept: %s: a connection refused", log_errstr(err));
	if (ctx->spare_fd < 0) /* lost to a race for the last fd last time */
		ctx->spare_fd = tcp_spare_open();
	if (ctx->spare_fd < 0)
		return;
	fd_close(ctx->spare_fd);
	fd = accept4(ctx->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		cq->cnt[TC_REFUSED]++;
		close(fd); /* never tracked: closed before any fork could see it */
	}
	ctx->spare_fd = tcp_spare_open();
}

void tcp_accept(struct tcp_cq *cq)
{
	struct tcp_ctx *ctx = cq->ctx;

	for (unsigned n = 0; n < TCP_ACCEPTS; n++) {
		int fd = fd_track(accept4(ctx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
		struct epoll_event ev = { .events = EPOLLIN };
		int slot;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				accept_out_of_fds(ctx, cq, errno);
				continue;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				tcp_log(ctx, LOG_WARN, "accept: %s", log_errstr(errno));
			return;
		}
		cq->cnt[TC_ACCEPTED]++;
		slot = pending_slot(cq);
		if (slot < 0) { /* those past their deadline go first (a core asleep did not sweep) */
			tcp_pending_sweep(cq);
			slot = pending_slot(cq);
		}
		ev.data.u64 = tcp_tag(TCP_TAG_PEND, (uint32_t)slot);
		if (slot < 0 || tcp_sock_opts(fd) || epoll_ctl(cq->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			cq->cnt[TC_REFUSED]++;
			tcp_log(ctx, LOG_WARN, "a connection refused: %s",
				slot < 0 ? "too many waiting for their HELLO" : log_errstr(errno));
			sock_close(fd);
			continue;
		}
		cq->pend[slot] = (struct tcp_pending){
			.fd = fd,
			.deadline_ns = ferry_now_ns() + (uint64_t)READ_ONCE(ctx->hello_ms) * 1000000u,
		};
		cq->npend++;
	}
}

static void pending_refuse(struct tcp_cq *cq, uint32_t slot, uint32_t qpn, const char *why)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	char from[INET_ADDRSTRLEN] = "?";

	cq->cnt[TC_REFUSED]++;
	if (getpeername(cq->pend[slot].fd, (struct sockaddr *)&sa, &sl) == 0)
		inet_ntop(AF_INET, &sa.sin_addr, from, sizeof(from));
	else
		sa.sin_port = 0;
	if (qpn)
		tcp_log(cq->ctx, LOG_WARN, "a connection from %s:%u to QP %u refused: %s", from,
			ntohs(sa.sin_port), qpn, why);
	else
		tcp_log(cq->ctx, LOG_WARN, "a connection from %s:%u refused: %s", from,
			ntohs(sa.sin_port), why);
	tcp_pending_close(cq, slot);
}

/* Queue a response (room checked by the caller). */
static struct tcp_rsp *rsp_push(struct tcp_qp *qp, const struct tcp_frame *f,
				const uint8_t *data, uint32_t len, uint32_t key)
{
	struct tcp_rsp *r = &qp->rsp[qp->rsp_tail++ % TCP_RSP_SLOTS];

	tcp_frame_encode(f, r->hdr);
	r->data = data;
	r->len = len;
	r->key = key;
	return r;
}

/* Why the QP named by a HELLO cannot take this connection; NULL if it can. */
static const char *bind_refusal(struct tcp_cq *cq, struct tcp_qp *qp, const struct tcp_hello *h)
{
	if (!qp)
		return "no such QP";
	if (qp->cq != cq)
		return "the QP is served by another CQ";
	/* pairs with: store_release in tcp_expect */
	if (load_acquire(qp->state) != TCP_QS_EXPECT)
		return "the QP does not wait for a connection";
	if (qp->error)
		return "the QP is in the error state";
	if (qp->fd >= 0 || qp->hello_ok)
		return "the QP is connected already";
	if (!tcp_secret_equal(h->secret, qp->secret))
		return "wrong secret";
	if (!tcp_mac_equal(h->mac, qp->mac_expect))
		return "no proof of our cluster key (a wrong key, or a key on one side only)";
	return NULL;
}

/* The HELLO checked out: the connection is qp's; greet back. */
static void tcp_bind(struct tcp_cq *cq, uint32_t slot, struct tcp_qp *qp, const struct tcp_hello *h)
{
	struct tcp_frame f = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT,
				  .data.u64 = tcp_tag(TCP_TAG_QP, qp->qpn) };
	struct tcp_pending *p = &cq->pend[slot];

	if (epoll_ctl(cq->epfd, EPOLL_CTL_MOD, p->fd, &ev)) {
		pending_refuse(cq, slot, qp->qpn, log_errstr(errno));
		return;
	}
	qp->fd = p->fd;
	qp->events = ev.events;
	qp->hello_ok = true;
	qp->peer_max = h->max_frame;
	qp->rx_phase = RX_HDR;
	p->fd = -1;
	cq->npend--;
	rsp_push(qp, &f, qp->hello_tx, TCP_HELLO_LEN, 0);
}

/* A pending connection's HELLO: header, then body, read exactly. */
void tcp_pending_io(struct tcp_cq *cq, uint32_t slot)
{
	struct tcp_pending *p = &cq->pend[slot];
	struct tcp_frame f;
	struct tcp_hello h;
	struct tcp_qp *qp;
	const char *why;
	ssize_t r;
	int rc;

	if (slot >= TCP_PENDING || p->fd < 0)
		return;
	r = recv(p->fd, p->buf + p->got, sizeof(p->buf) - p->got, MSG_DONTWAIT);
	if (r <= 0) {
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		pending_refuse(cq, slot, 0, r == 0 ? "closed before its HELLO" : log_errstr(errno));
		return;
	}
	p->got += (uint32_t)r;
	if (p->got < TCP_HDR_LEN)
		return;
	rc = tcp_frame_decode(p->buf, TCP_HDR_LEN, &f);
	if (rc || f.type != TCP_F_HELLO) {
		pending_refuse(cq, slot, 0, rc ? tcp_frame_strerror(rc) : "its first frame is not a HELLO");
		return;
	}
	if (p->got < sizeof(p->buf))
		return;
	rc = tcp_hello_decode(p->buf + TCP_HDR_LEN, TCP_HELLO_LEN, &h);
	if (rc) {
		pending_refuse(cq, slot, 0, tcp_frame_strerror(rc));
		return;
	}
	qp = tcp_qp_lookup(cq->ctx, h.qpn);
	why = bind_refusal(cq, qp, &h);
	if (why) {
		pending_refuse(cq, slot, h.qpn, why);
		return;
	}
	tcp_bind(cq, slot, qp, &h);
}

/* Connections that did not say HELLO in time. */
void tcp_pending_sweep(struct tcp_cq *cq)
{
	uint64_t now = ferry_now_ns();

	for (uint32_t i = 0; i < TCP_PENDING; i++)
		if (cq->pend[i].fd >= 0 && now > cq->pend[i].deadline_ns)
			pending_refuse(cq, i, 0, "no HELLO in time");
}

/* ---- requests ------------------------------------------------------------ */

static inline uint32_t rsp_room(const struct tcp_qp *qp)
{
	return TCP_RSP_SLOTS - (qp->rsp_tail - qp->rsp_head);
}

/* The connection ends (EOF, error, violation); the QP stays, unconnected. */
static void serve_close(struct tcp_qp *qp, int counter, const char *why, int err)
{
	if (counter >= 0)
		qp->cq->cnt[counter]++;
	if (why)
		tcp_log(qp->ctx, LOG_WARN, "QP %u (from QP %u): %s%s%s; connection closed", qp->qpn,
			qp->peer_qpn, why, err ? ": " : "", err ? log_errstr(-err) : "");
	tcp_conn_close(qp);
	qp->rsp_head = qp->rsp_tail;
	qp->rsp_off = 0;
	qp->reads_queued = 0;
	qp->ack_pending = false;
}

/* A request the checks refused: say so, then only drain (RC: the QP is in error). */
static void serve_refuse(struct tcp_qp *qp, const struct tcp_frame *req, uint8_t st)
{
	struct tcp_frame f = {
		.type = req->type == TCP_F_WRITE ? TCP_F_ACK : TCP_F_READ_RESP,
		.status = st,
		.seq = req->seq,
	};

	rsp_push(qp, &f, NULL, 0, 0);
	qp->ack_pending = false; /* the error response says everything before was done */
	qp->draining = true;
}

static uint8_t serve_check(struct tcp_qp *qp, const struct tcp_frame *f, uint32_t access)
{
	/* The decoder bounded len by TCP_MAX_FRAME, all we take; a READ's
	 * answer must fit what the initiator takes. */
	if (f->type == TCP_F_READ_REQ && f->len > qp->peer_max)
		return TCP_ST_TOO_BIG;
	/* As verbs: a zero-length request names no memory. */
	if (f->len && !tcp_mr_ok(qp->ctx, f->rkey, f->addr, f->len, access))
		return TCP_ST_ACCESS;
	return TCP_ST_OK;
}

/* A request header: check it, then start it.  -EPROTO closes the connection. */
static int serve_frame(struct tcp_qp *qp)
{
	const struct tcp_frame *f = &qp->cur;
	bool write = f->type == TCP_F_WRITE;
	uint8_t st;

	if (!write && f->type != TCP_F_READ_REQ)
		return -EPROTO;
	if (f->seq != qp->expect)
		return -EPROTO;
	qp->expect++;
	st = serve_check(qp, f, write ? TCP_ACCESS_REMOTE_WRITE : TCP_ACCESS_REMOTE_READ);
	if (st != TCP_ST_OK) {
		serve_refuse(qp, f, st);
		return 0;
	}
	if (write) {
		if (!f->len) {
			qp->ack_seq = f->seq;
			qp->ack_pending = true;
			qp->bulk = true;
			return 0;
		}
		tcp_rx_expect(qp, (uint8_t *)(uintptr_t)f->addr, f->len, f->rkey,
			      TCP_ACCESS_REMOTE_WRITE);
		/* A WRITE waits for READs before it: they send what was there. */
		if (qp->reads_queued)
			qp->rx_phase = RX_FENCE;
		return 0;
	}
	/* A zero-length READ names no memory (as verbs): no key to look at. */
	rsp_push(qp, &(struct tcp_frame){ .type = TCP_F_READ_RESP, .seq = f->seq, .len = f->len },
		 f->len ? (const uint8_t *)(uintptr_t)f->addr : NULL, f->len,
		 f->len ? f->rkey : 0);
	qp->reads_queued++;
	qp->ack_pending = false; /* the READ_RESP acknowledges the WRITEs before it */
	qp->bulk = true;
	return 0;
}

/* After an error response went out: read and drop until the peer closes. */
static int serve_drain(struct tcp_qp *qp, unsigned *calls)
{
	while (*calls < TCP_IO_CALLS) {
		ssize_t r = recv(qp->fd, qp->stage, TCP_STAGE, MSG_DONTWAIT);

		(*calls)++;
		if (r > 0)
			tcp_tsan_received();
		if (r == 0)
			return -ESHUTDOWN;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	}
	return 0;
}

/* One step of the receive side: 1 go on, 0 stop for now, -errno close. */
static int serve_rx_step(struct tcp_qp *qp, unsigned *calls)
{
	int rc;

	switch (qp->rx_phase) {
	case RX_DRAIN:
		return serve_drain(qp, calls);
	case RX_FENCE:
		if (qp->reads_queued)
			return 0;
		qp->rx_phase = RX_PAYLOAD;
		/* fall through */
	case RX_PAYLOAD:
		rc = tcp_rx_payload(qp, calls);
		if (rc == 1) {
			qp->ack_seq = qp->cur.seq;
			qp->ack_pending = true;
		}
		return rc;
	default:
		/* Room for this request's response and the turn's ACK. */
		if (qp->draining || rsp_room(qp) < 2)
			return 0;
		rc = tcp_rx_hdr(qp, calls);
		if (rc == 1)
			rc = serve_frame(qp) ?: 1;
		return rc;
	}
}

/*
 * The WRITE being received lost its region: refuse it as its header would
 * be refused now (an access error), after the responses ahead, then FIN
 * and drain (serve_tx).  A close() now, with the rest of its payload
 * unread, would send a reset, and the reset drops the responses ahead
 * that our socket has not sent yet.  Room: its header was read with two
 * slots free, and only the turn's ACK came after it.
 */
static void serve_write_gone(struct tcp_qp *qp)
{
	qp->cq->cnt[TC_BROKEN]++;
	tcp_log(qp->ctx, LOG_WARN, "QP %u (from QP %u): a WRITE's region was deregistered while it "
		"came in; refused", qp->qpn, qp->peer_qpn);
	qp->rx_phase = RX_HDR;
	qp->left = 0;
	serve_refuse(qp, &qp->cur, TCP_ST_ACCESS);
}

static void serve_rx(struct tcp_qp *qp)
{
	unsigned calls = 0;
	int rc;

	do
		rc = serve_rx_step(qp, &calls);
	while (rc == 1 && qp->fd >= 0);
	if (rc == -EFAULT)
		serve_write_gone(qp);
	else if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EMSGSIZE)
		serve_close(qp, TC_VIOLATIONS, "malformed or unexpected request", 0);
	else if (rc == -ESHUTDOWN && qp->rx_phase == RX_HDR && qp->hdr_got == 0 &&
		 qp->st_off == qp->st_len)
		qp->draining = true; /* done, between frames: answer, then close */
	else if (rc < 0 && qp->rx_phase != RX_DRAIN)
		serve_close(qp, TC_BROKEN, "connection lost", rc);
	else if (rc < 0)
		serve_close(qp, -1, NULL, 0);
}

/* The turn's WRITEs, acknowledged with one ACK (merged into a queued one). */
static void serve_ack(struct tcp_qp *qp)
{
	struct tcp_frame f = { .type = TCP_F_ACK, .seq = qp->ack_seq };
	uint32_t last = qp->rsp_tail - 1;

	if (!qp->ack_pending)
		return;
	qp->ack_pending = false;
	if (qp->rsp_tail != qp->rsp_head && (last != qp->rsp_head || qp->rsp_off == 0) &&
	    qp->rsp[last % TCP_RSP_SLOTS].hdr[0] == TCP_F_ACK &&
	    qp->rsp[last % TCP_RSP_SLOTS].hdr[1] == TCP_ST_OK) {
		tcp_frame_encode(&f, qp->rsp[last % TCP_RSP_SLOTS].hdr);
		return;
	}
	rsp_push(qp, &f, NULL, 0, 0);
}

/* ---- responses ----------------------------------------------------------- */

/*
 * iovecs for the queued responses, up to the first whose READ region went
 * away; -EFAULT when that one is first (nothing left to send before the
 * connection closes).  The responses ahead of it were served while their
 * regions were there: they go first, as a NIC's would.
 */
static int rsp_gather(struct tcp_qp *qp, struct iovec *iov)
{
	uint32_t off = qp->rsp_off, bytes = 0;
	int n = 0;

	for (uint32_t i = qp->rsp_head; i != qp->rsp_tail && n + 2 <= TCP_IOV && bytes < TCP_IO_BYTES;
	     i++, off = 0) {
		struct tcp_rsp *r = &qp->rsp[i % TCP_RSP_SLOTS];

		if (r->key && !tcp_mr_ok(qp->ctx, r->key, (uintptr_t)r->data, r->len,
					 TCP_ACCESS_REMOTE_READ))
			return n ? n : -EFAULT;
		n = tcp_frame_iov(iov, n, &bytes, r->hdr, off, (uintptr_t)r->data, r->len);
	}
	return n;
}

static void rsp_advance(struct tcp_qp *qp, size_t r)
{
	while (r) {
		const struct tcp_rsp *e = &qp->rsp[qp->rsp_head % TCP_RSP_SLOTS];
		uint32_t rest = TCP_HDR_LEN + e->len - qp->rsp_off;

		if (r < rest) {
			qp->rsp_off += (uint32_t)r;
			return;
		}
		r -= rest;
		qp->rsp_off = 0;
		qp->rsp_head++;
		qp->cq->cnt[TC_FRAMES_TX]++;
		if (e->hdr[0] == TCP_F_READ_RESP) {
			qp->cq->cnt[TC_PAYLOAD_TX] += e->len;
			if (e->hdr[1] == TCP_ST_OK)
				qp->reads_queued--;
		}
	}
}

/*
 * The READ at the head lost its region: nothing more goes.  FIN after what
 * went, then read and drop until the peer closes -- a close() now, with
 * requests still unread (those behind it, a WRITE's payload behind the
 * fence), would send a reset, and the reset drops the responses ahead of
 * it that our socket has not sent yet.
 */
static void serve_cut(struct tcp_qp *qp)
{
	qp->cq->cnt[TC_BROKEN]++;
	tcp_log(qp->ctx, LOG_WARN, "QP %u (from QP %u): a READ's region was deregistered while it "
		"went out; connection closed", qp->qpn, qp->peer_qpn);
	qp->rsp_head = qp->rsp_tail;
	qp->rsp_off = 0;
	qp->reads_queued = 0;
	qp->ack_pending = false;
	qp->draining = false;
	if (shutdown(qp->fd, SHUT_WR)) {
		serve_close(qp, -1, NULL, 0);
		return;
	}
	qp->rx_phase = RX_DRAIN;
	qp->st_off = qp->st_len = 0;
}

static void serve_tx(struct tcp_qp *qp)
{
	struct iovec iov[TCP_IOV];

	for (unsigned calls = 0; qp->rsp_head != qp->rsp_tail && calls < TCP_IO_CALLS; calls++) {
		struct msghdr m = { .msg_iov = iov };
		int n = rsp_gather(qp, iov);
		ssize_t r;

		if (n < 0) {
			serve_cut(qp);
			return;
		}
		m.msg_iovlen = (size_t)n;
		tcp_tsan_send_begin();
		r = sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		tcp_tsan_send_end();
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				serve_close(qp, TC_BROKEN, "send", -errno);
			return;
		}
		rsp_advance(qp, (size_t)r);
	}
	if (qp->draining && qp->rsp_head == qp->rsp_tail) {
		/* The error response is out: FIN after it, so that it arrives
		 * (a close with unread bytes would send a reset instead). */
		shutdown(qp->fd, SHUT_WR);
		qp->draining = false;
		qp->rx_phase = RX_DRAIN;
		qp->st_off = qp->st_len = 0;
	}
}

static void serve_want(struct tcp_qp *qp)
{
	uint32_t ev = 0;

	if (qp->rx_phase == RX_DRAIN)
		ev = EPOLLIN;
	else if (!qp->draining && !(qp->rx_phase == RX_FENCE && qp->reads_queued) &&
		 !(qp->rx_phase == RX_HDR && rsp_room(qp) < 2))
		ev = EPOLLIN;
	/* Requests already read into the stage wait for room or for the
	 * fence: the socket may have nothing more to say, so ask to be
	 * called when it can be written to, which it is at once. */
	if (qp->rsp_head != qp->rsp_tail || qp->st_off != qp->st_len)
		ev |= EPOLLOUT;
	tcp_want(qp, ev);
}

void tcp_serve_io(struct tcp_qp *qp, uint32_t events)
{
	if (qp->fd < 0)
		return;
	/* Responses first: they make room for requests. */
	if (qp->rsp_head != qp->rsp_tail)
		serve_tx(qp);
	if (qp->fd >= 0 && (events & (EPOLLIN | EPOLLERR | EPOLLHUP) || qp->st_off != qp->st_len))
		serve_rx(qp);
	if (qp->fd >= 0) {
		serve_ack(qp);
		serve_tx(qp);
	}
	if (qp->fd >= 0)
		serve_want(qp);
}
