/* SPDX-License-Identifier: MIT */
/*
 * tcp: the QPs' control path.  qp_create allocates everything the QP will
 * ever need (post and poll never allocate) and publishes it by qpn;
 * qp_connect either records what the target QP expects (connected first)
 * or dials the target (connected second); qp_destroy unpublishes, waits
 * out the core, and closes.  Any thread, serialised by the caller.
 */
#include "qp/tcp/objects.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/clock.h"
#include "ring/base/fd.h"
#include "ring/base/log.h"

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static int tcp_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r = getrandom(p, len, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* A free slot and a new generation: the qpn.  ctx->lock held. */
static int tcp_qp_slot_locked(struct tcp_ctx *ctx, uint32_t *qpn)
{
	for (uint32_t k = 0; k < TCP_QP_SLOTS; k++) {
		uint32_t i = (ctx->qp_cursor + k) & TCP_QP_MASK;

		if (!ctx->qps[i]) {
			if (++ctx->qp_gen[i] == 0)
				ctx->qp_gen[i] = 1;
			ctx->qp_cursor = i + 1;
			*qpn = (uint32_t)ctx->qp_gen[i] << TCP_QP_BITS | i;
			return 0;
		}
	}
	return -ENOSPC;
}

static struct tcp_qp *tcp_qp_alloc(struct tcp_cq *cq, uint32_t max_wr)
{
	uint32_t slots = pow2_at_least(max_wr);
	struct tcp_qp *qp = ferry_zalloc_lines(sizeof(*qp));

	if (!qp)
		return NULL;
	qp->sq = calloc(slots, sizeof(*qp->sq));
	if (!qp->sq || tcp_random(qp->secret, sizeof(qp->secret)) ||
	    tcp_random(&qp->psn, sizeof(qp->psn))) {
		free(qp->sq);
		free(qp);
		return NULL;
	}
	qp->psn &= TCP_PSN_MASK;
	qp->sq_mask = slots - 1;
	qp->max_wr = max_wr;
	qp->ctx = cq->ctx;
	qp->cq = cq;
	qp->fd = -1;
	qp->rx_phase = RX_HDR;
	CDS_INIT_LIST_HEAD(&qp->link);
	return qp;
}

int tcp_qp_create(struct nic *n, struct nic_cq *ncq, uint32_t max_wr, struct nic_qp **out)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);
	struct tcp_cq *cq = tcp_cq_of(ncq);
	struct tcp_qp *qp;
	int rc;

	if (!max_wr || max_wr > TCP_MAX_QP_WR || !cq || cq->ctx != ctx)
		return -EINVAL;
	qp = tcp_qp_alloc(cq, max_wr);
	if (!qp)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	rc = tcp_qp_slot_locked(ctx, &qp->qpn);
	if (rc == 0) {
		cds_list_add_tail(&qp->link, &cq->qps);
		/* Release: a core that finds the qpn sees the QP's fields. */
		store_release(ctx->qps[qp->qpn & TCP_QP_MASK], qp); /* pairs with: load_sc in tcp_qp_lookup */
	}
	pthread_mutex_unlock(&ctx->lock);
	if (rc) {
		tcp_qp_free(qp);
		return rc;
	}
	*out = (struct nic_qp *)(void *)qp;
	return 0;
}

/* The QP is unpublished and no core is inside it: close and free. */
void tcp_qp_free(struct tcp_qp *qp)
{
	if (qp->fd >= 0) {
		epoll_ctl(qp->cq->epfd, EPOLL_CTL_DEL, qp->fd, NULL);
		sock_close(qp->fd);
	}
	free(qp->sq);
	free(qp);
}

/*
 * Any thread: the control path destroys QPs the core has not been given
 * yet (a failed handshake) and the target's passive QPs, which its core
 * serves until we unpublish them.  WRs still outstanding produce no CQEs.
 */
void tcp_qp_destroy(struct nic_qp *nqp)
{
	struct tcp_qp *qp = tcp_qp_of(nqp);
	struct tcp_ctx *ctx;

	if (!qp)
		return;
	ctx = qp->ctx;
	pthread_mutex_lock(&ctx->lock);
	store_sc(ctx->qps[qp->qpn & TCP_QP_MASK], NULL); /* Dekker: see soft_busy_enter */
	cds_list_del(&qp->link);
	pthread_mutex_unlock(&ctx->lock);
	soft_busy_wait(&qp->cq->busy_seq);
	tcp_qp_free(qp);
}

/*
 * The interface's qp_info only reads, but tcp also remembers that a new
 * QP's info went out: only such a QP may dial (tcp_qp_connect).  The QP
 * is the provider's own (malloc'd, never const); the caller serialises
 * the control path.
 */
void tcp_qp_info(const struct nic_qp *nqp, struct nic_qp_info *out)
{
	struct tcp_qp *qp = (struct tcp_qp *)(uintptr_t)(const void *)nqp;
	uint32_t state = READ_ONCE(qp->state);

	memset(out, 0, sizeof(*out));
	out->qpn = qp->qpn;
	out->psn = qp->psn;
	/* The control path that connected it asks: no ordering needed. */
	if (state == TCP_QS_EXPECT)
		out->psn |= TCP_PSN_LISTEN;
	else if (state == TCP_QS_NEW)
		qp->offered = true;
	memcpy(out->secret, qp->secret, sizeof(out->secret));
}

uint32_t tcp_qp_num(const struct nic_qp *nqp)
{
	return ((const struct tcp_qp *)(const void *)nqp)->qpn;
}

_Static_assert(TCP_MAC_LEN == AUTH_MAC_LEN, "a HELLO carries one qp/auth proof");

/* A side of a connection as the proofs name it: its QP's secret and number. */
static void hello_nonce(uint8_t out[AUTH_NONCE_LEN], const uint8_t *secret, uint32_t qpn)
{
	memset(out, 0, AUTH_NONCE_LEN);
	memcpy(out, secret, TCP_SECRET_LEN);
	for (unsigned i = 0; i < 4; i++)
		out[TCP_SECRET_LEN + i] = (uint8_t)(qpn >> (8 * i));
}

/*
 * The two proofs of the connection from initiator QP (sec_i, qpn_i) to
 * target QP (sec_t, qpn_t): the initiator's HELLO carries client, the
 * target's server.  Both secrets are fresh random bytes per QP, handed out
 * only over the (authenticated) control plane, so a proof is good for this
 * connection alone.  Zero without a key.  Control path: the cores only
 * compare.
 */
static void hello_macs(const struct tcp_ctx *ctx, const uint8_t *sec_i, uint32_t qpn_i,
		       const uint8_t *sec_t, uint32_t qpn_t, uint8_t client[TCP_MAC_LEN],
		       uint8_t server[TCP_MAC_LEN])
{
	uint8_t nc[AUTH_NONCE_LEN], ns[AUTH_NONCE_LEN];

	memset(client, 0, TCP_MAC_LEN);
	memset(server, 0, TCP_MAC_LEN);
	if (!ctx->has_key)
		return;
	hello_nonce(nc, sec_i, qpn_i);
	hello_nonce(ns, sec_t, qpn_t);
	auth_proof(&ctx->key, AUTH_CLIENT, nc, ns, client);
	auth_proof(&ctx->key, AUTH_SERVER, nc, ns, server);
}

/* Target: remember the initiator's QP (for the HELLO back) and wait for its dial. */
static int tcp_expect(struct tcp_qp *qp, const struct nic_qp_info *rqp)
{
	struct tcp_ctx *ctx = qp->ctx;
	struct tcp_hello h = { .qpn = rqp->qpn, .max_frame = TCP_MAX_FRAME };
	int rc = 0;

	if (!rqp->qpn)
		return -EINVAL;
	memcpy(h.secret, rqp->secret, sizeof(h.secret));
	hello_macs(ctx, rqp->secret, rqp->qpn, qp->secret, qp->qpn, qp->mac_expect, h.mac);
	tcp_hello_encode(&h, qp->hello_tx);
	qp->peer_qpn = rqp->qpn;
	qp->peer_psn = rqp->psn & TCP_PSN_MASK;
	qp->expect = qp->peer_psn;
	qp->passive = true;
	pthread_mutex_lock(&ctx->lock);
	if (qp->cq != ctx->serving) {
		log_err("tcp %s: QP %u is on a CQ that does not serve peers (the context's first CQ does)",
			ctx->name, qp->qpn);
		rc = -EINVAL;
	} else {
		/* Release: the core that binds a connection to us sees the above. */
		store_release(qp->state, TCP_QS_EXPECT); /* pairs with: load_acquire in tcp_bind */
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* Wait for fd to be ready for events, until deadline (control path only). */
static int tcp_wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = ferry_now_ms();
		struct pollfd p = { .fd = fd, .events = events };
		int r;

		if (now >= deadline_ms)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(deadline_ms - now));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int tcp_dial_fd(const struct sockaddr_in *to, uint64_t deadline_ms)
{
	socklen_t sl = sizeof(int);
	int fd, err = 0, rc;

	fd = fd_track(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -errno;
	rc = tcp_sock_opts(fd);
	if (rc == 0 && connect(fd, (const struct sockaddr *)to, sizeof(*to)) < 0) {
		rc = errno == EINPROGRESS ? tcp_wait_fd(fd, POLLOUT, deadline_ms) : -errno;
		if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0 && err)
			rc = -err;
	}
	if (rc) {
		sock_close(fd);
		return rc;
	}
	return fd;
}

/* HELLO: the target QP's qpn and secret, as its qp_info gave them, and
 * our proof of the key; qp->mac_expect is then the target's. */
static int tcp_send_hello(struct tcp_qp *qp, int fd, const struct nic_qp_info *rqp,
			  uint64_t deadline_ms)
{
	uint8_t buf[TCP_HDR_LEN + TCP_HELLO_LEN];
	struct tcp_frame f = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
	struct tcp_hello h = { .qpn = rqp->qpn, .max_frame = TCP_MAX_FRAME };
	size_t off = 0;

	memcpy(h.secret, rqp->secret, sizeof(h.secret));
	hello_macs(qp->ctx, qp->secret, qp->qpn, rqp->secret, rqp->qpn, h.mac, qp->mac_expect);
	tcp_frame_encode(&f, buf);
	tcp_hello_encode(&h, buf + TCP_HDR_LEN);
	while (off < sizeof(buf)) {
		ssize_t r = send(fd, buf + off, sizeof(buf) - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rc;

		if (r > 0) {
			off += (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		rc = tcp_wait_fd(fd, POLLOUT, deadline_ms);
		if (rc)
			return rc;
	}
	return 0;
}

/* Initiator: dial the target's listener, say HELLO, hand the socket to the core. */
static int tcp_dial(struct tcp_qp *qp, const struct sockaddr_in *to, const struct nic_qp_info *rqp)
{
	uint64_t deadline = ferry_now_ms() + TCP_CONNECT_MS;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tcp_tag(TCP_TAG_QP, qp->qpn) };
	int fd, rc;

	if (!rqp->qpn)
		return -EINVAL;
	fd = tcp_dial_fd(to, deadline);
	if (fd < 0)
		return fd;
	rc = tcp_send_hello(qp, fd, rqp, deadline);
	if (rc == 0) {
		qp->fd = fd;
		qp->peer_qpn = rqp->qpn;
		qp->events = EPOLLIN;
		/* An event before state is published is ignored and comes back
		 * (level-triggered). */
		if (epoll_ctl(qp->cq->epfd, EPOLL_CTL_ADD, fd, &ev))
			rc = -errno;
	}
	if (rc) {
		qp->fd = -1;
		sock_close(fd);
		return rc;
	}
	/* Release: post and poll on the core see the connection. */
	store_release(qp->state, TCP_QS_DIALED); /* pairs with: load_acquire in tcp_post, tcp_poll */
	return 0;
}

/*
 * The handshake's order decides the roles: the target's QP is connected
 * first, with the initiator's qp_info (no TCP_PSN_LISTEN), and waits; the
 * initiator's is connected with the target's qp_info, which says
 * TCP_PSN_LISTEN, and dials.  Only the initiator dials, so a QP whose
 * info nobody had before it is connected (the target's, made for a
 * peer's CONNECT_REQ) refuses "dial me" with -EPROTO: a hostile or
 * confused peer would otherwise have the target connect wherever the
 * request says, from its control thread, up to TCP_CONNECT_MS per QP.
 * The caller logs the refusal with the peer it came from.
 */
int tcp_qp_connect(struct nic_qp *nqp, const struct nic_addr *remote,
		   const struct nic_qp_info *rqp)
{
	struct tcp_qp *qp = tcp_qp_of(nqp);
	char here[48], there[INET_ADDRSTRLEN];
	struct sockaddr_in to;
	int rc;

	if (!remote || !rqp || tcp_addr_decode(remote, &to))
		return -EINVAL;
	if (READ_ONCE(qp->state) != TCP_QS_NEW)
		return -EISCONN;
	if (!(rqp->psn & TCP_PSN_LISTEN))
		return tcp_expect(qp, rqp);
	if (!qp->offered)
		return -EPROTO;
	rc = tcp_dial(qp, &to, rqp);
	if (rc) {
		snprintf(here, sizeof(here), "%s", qp->ctx->name);
		inet_ntop(AF_INET, &to.sin_addr, there, sizeof(there));
		log_err("tcp %s: QP %u cannot reach QP %u at %s:%u: %s", here, qp->qpn, rqp->qpn,
			there, ntohs(to.sin_port), strerror(-rc));
	}
	return rc;
}
