/* SPDX-License-Identifier: MIT */
/*
 * tcp: one-sided READ/WRITE over TCP behind the provider interface
 * (qp/nic.h), for peers without RDMA.  This file: the context (its data
 * listener), registered memory, CQs, and the provider table.
 *
 * The model.  A QP is one TCP connection, owned by the core that polls
 * its CQ: its socket is non-blocking, in the CQ's epoll set, and served
 * only inside that core's post and poll calls (no thread of its own).
 * The initiator's WRITE is a header and the payload, gathered straight
 * from registered memory by sendmsg; the target checks the header against
 * its MRs and receives the bytes straight into place, then acknowledges:
 * the initiator's completion means the bytes are in the peer's memory.
 * READ is a request header; the target sends the bytes from the region and
 * the initiator receives them straight into the local buffer.  RC rules
 * hold: a QP's WRs complete in order, an error moves the QP to the error
 * state and flushes every WR behind it.  The frame format is in frame.h,
 * the connections in conn.c, the initiator in init.c, the target in
 * serve.c, the QPs' control path (handshake, dial, destroy) in qp.c.
 *
 * The handshake (runtime/ctl/passive.c): the target's QP is connected
 * first (qp_connect with the initiator's qp_info) and only records what
 * it expects; its qp_info then says "dial me" (TCP_PSN_LISTEN) and
 * carries a random 16-byte secret.  The initiator's qp_connect dials the
 * target context's listener (its nic_addr) and sends a HELLO with the
 * target QP's qpn and secret; the target's core accepts, checks the HELLO
 * (secret compared in constant time) and binds the connection to that QP;
 * its own HELLO back carries the initiator QP's qpn and secret.  Only a
 * QP whose qp_info was taken before its qp_connect (the initiator's)
 * dials: a target never connects out, whatever a request says.
 *
 * epoll, not io_uring, by measurement.  A 2-CPU AMD EPYC VM shared with
 * other jobs (noisy: +-40 % between runs), loopback, target and initiator
 * in two processes on CPUs 1 and 0, 2 connections (qps_per_ep):
 *
 *   ferry_bench --target --nics tcp --cores 1 --listen 127.0.0.1:18600 &
 *   ferry_bench --connect 127.0.0.1:18600 --nics tcp --cores 0 --size 1M --duration 3
 *
 * WRITE, median of 7 interleaved runs: 64 KiB 4.3 GB/s (3.0-5.5), 1 MiB
 * 2.8 GB/s (1.8-3.8); iperf3 -c 127.0.0.1 -t 3 single stream 2.7 GB/s
 * (2.0-3.8), with -l 1M 3.1 GB/s.  perf record -e cpu-clock of both cores
 * at 1 MiB: the receive copy (_copy_to_iter) is 54 % of the target core's
 * samples, the send copy (_copy_from_iter) 43 % of the initiator's;
 * syscall entry/exit and epoll_wait together stay under 5 %, and both cores
 * run at ~87 % of a CPU.  io_uring would keep both copies and save a part
 * of those 5 %: not tried.
 *
 * Locking.  ctx->lock serialises the control path (CQ and QP lists, the QP
 * and MR tables' allocation).  post/poll never lock or allocate; what they
 * share with the control path goes through ring/base/atomics.h, and what
 * the control path takes away it takes only after soft_busy_wait.
 */
#include "qp/tcp/objects.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/clock.h"
#include "ring/base/fd.h"
#include "ring/base/log.h"

#define TCP_LOG_BURST 10u   /* connection messages per second, per context */
#define USER_TIMEOUT_MS 20000
#define KEEPALIVE_IDLE_S 10
#define KEEPALIVE_INTVL_S 5
#define KEEPALIVE_CNT 3

static const uint8_t tcp_magic[4] = { 'T', 'C', 'P', '1' };

/* ---------------------------------------------------------------- helpers */

/* Messages about connections, at most TCP_LOG_BURST a second per context:
 * a peer that misbehaves in a loop must not flood the application's log. */
void tcp_log(struct tcp_ctx *ctx, int level, const char *fmt, ...)
{
	uint64_t now = ferry_now_ms();
	char msg[320];
	va_list ap;

	if (now - READ_ONCE(ctx->log_window_ms) >= 1000) {
		uint32_t dropped = xchg_relaxed(ctx->log_dropped, 0);

		WRITE_ONCE(ctx->log_window_ms, now);
		WRITE_ONCE(ctx->log_count, 0);
		if (dropped)
			flog(LOG_WARN, "tcp %s: %u messages suppressed", ctx->name, dropped);
	}
	if (fetch_add_relaxed(ctx->log_count, 1) >= TCP_LOG_BURST) {
		fetch_add_relaxed(ctx->log_dropped, 1);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	flog(level, "tcp %s: %s", ctx->name, msg);
}

/*
 * Every data connection, both ends: no Nagle (acks and READ requests are
 * small and wanted now), and a peer that stops answering ends the
 * connection (TCP_USER_TIMEOUT while data is unacknowledged, keepalives
 * while idle) instead of leaving its WRs outstanding for ever.
 */
int tcp_sock_opts(int fd)
{
	int one = 1, uto = USER_TIMEOUT_MS, idle = KEEPALIVE_IDLE_S;
	int intvl = KEEPALIVE_INTVL_S, cnt = KEEPALIVE_CNT;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto)) ||
	    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)))
		return -errno;
	return 0;
}

/* ------------------------------------------------------------ the context */

/* "tcp", "tcp@a.b.c.d" or "tcp@a.b.c.d:port": where the listener binds. */
static int tcp_parse_dev(const char *dev, struct sockaddr_in *sa)
{
	char host[64];
	const char *at = strchr(dev, '@'), *colon;
	unsigned long port = 0;
	size_t n;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!at)
		return strcmp(dev, "tcp") == 0 ? 0 : -EINVAL;
	colon = strchr(at + 1, ':');
	n = colon ? (size_t)(colon - at - 1) : strlen(at + 1);
	if (n == 0 || n >= sizeof(host))
		return -EINVAL;
	memcpy(host, at + 1, n);
	host[n] = 0;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	if (colon) {
		char *end;

		/* strtoul alone would take " 80", "+80" and "-0": digits only. */
		if (!isdigit((unsigned char)colon[1]))
			return -EINVAL;
		port = strtoul(colon + 1, &end, 10);
		if (*end || port > 65535)
			return -EINVAL;
	}
	sa->sin_port = htons((uint16_t)port);
	return 0;
}

static int tcp_listen(struct tcp_ctx *ctx)
{
	socklen_t sl = sizeof(ctx->sa);
	int one = 1;

	ctx->lfd = fd_track(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (ctx->lfd < 0)
		return -errno;
	ctx->spare_fd = tcp_spare_open();
	if (setsockopt(ctx->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(ctx->lfd, (struct sockaddr *)&ctx->sa, sizeof(ctx->sa)) ||
	    listen(ctx->lfd, 1024) ||
	    getsockname(ctx->lfd, (struct sockaddr *)&ctx->sa, &sl))
		return -errno;
	return 0;
}

static void tcp_close(struct nic *n);

static int tcp_open(const char *dev, struct nic **out)
{
	struct tcp_ctx *ctx;
	char ip[INET_ADDRSTRLEN];
	int rc;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	pthread_mutex_init(&ctx->lock, NULL);
	CDS_INIT_LIST_HEAD(&ctx->cqs);
	ctx->lfd = -1;
	ctx->spare_fd = -1;
	ctx->hello_ms = TCP_HELLO_MS;
	rc = tcp_parse_dev(dev ? dev : "tcp", &ctx->sa);
	if (rc) {
		log_err("tcp: '%s': expected tcp@<IPv4 address>[:port]", dev ? dev : "");
		free(ctx);
		return rc;
	}
	inet_ntop(AF_INET, &ctx->sa.sin_addr, ip, sizeof(ip));
	rc = tcp_listen(ctx);
	if (rc) {
		log_err("tcp: cannot listen on %s:%u: %s", ip, ntohs(ctx->sa.sin_port), strerror(-rc));
		tcp_close((struct nic *)(void *)ctx);
		return rc;
	}
	snprintf(ctx->name, sizeof(ctx->name), "%s:%u", ip, ntohs(ctx->sa.sin_port));
	*out = (struct nic *)(void *)ctx;
	return 0;
}

static void tcp_cq_free_locked(struct tcp_cq *cq);

static void tcp_close(struct nic *n)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);

	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->lock);
	while (!cds_list_empty(&ctx->cqs))
		tcp_cq_free_locked(cds_list_first_entry(&ctx->cqs, struct tcp_cq, link));
	pthread_mutex_unlock(&ctx->lock);
	if (ctx->lfd >= 0)
		sock_close(ctx->lfd);
	fd_close(ctx->spare_fd);
	for (unsigned i = 0; i < TCP_MR_CHUNKS; i++)
		free(ctx->mr[i]);
	pthread_mutex_destroy(&ctx->lock);
	auth_wipe(&ctx->key, sizeof(ctx->key));
	free(ctx);
}

static void tcp_caps(const struct nic *n, struct nic_caps *out)
{
	(void)n;
	out->max_qp_wr = TCP_MAX_QP_WR;
	out->max_cqe = TCP_MAX_CQE;
	out->max_inline = 0;
	/* No responder resources to run out of: a READ is a request frame. */
	out->max_rd_atomic = TCP_MAX_QP_WR;
	out->flags = NIC_CAP_SERVES;
}

/* "TCP1", the listener's IPv4 address and port (network order); the rest
 * zero.  A listener on 0.0.0.0 says 127.0.0.1: the wildcard is no address
 * to dial (tcp_addr_decode refuses it), and what a dial of it reached is
 * this host's loopback, so peers on this host reach us as before. */
static void tcp_addr(const struct nic *n, struct nic_addr *out)
{
	const struct tcp_ctx *ctx = (const struct tcp_ctx *)(const void *)n;
	uint32_t ip = ctx->sa.sin_addr.s_addr;

	if (ip == htonl(INADDR_ANY))
		ip = htonl(INADDR_LOOPBACK);
	memset(out, 0, sizeof(*out));
	memcpy(out->bytes, tcp_magic, sizeof(tcp_magic));
	memcpy(out->bytes + 4, &ip, 4);
	memcpy(out->bytes + 8, &ctx->sa.sin_port, 2);
}

/* An address a peer may have us dial: none of 0.0.0.0/8 (0.0.0.0 itself
 * reaches our own loopback, whatever host the peer is on), multicast
 * (224/4), reserved and broadcast (240/4); no connection goes there. */
static bool tcp_dialable(uint32_t ip_host_order)
{
	uint32_t top = ip_host_order >> 24;

	return top != 0 && top < 224;
}

int tcp_addr_decode(const struct nic_addr *a, struct sockaddr_in *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };

	/* A refusal leaves *out zeroed: nothing half decoded to use by mistake. */
	memset(out, 0, sizeof(*out));
	if (memcmp(a->bytes, tcp_magic, sizeof(tcp_magic)) != 0)
		return -EINVAL;
	for (unsigned i = 10; i < NIC_ADDR_LEN; i++)
		if (a->bytes[i])
			return -EINVAL;
	memcpy(&sa.sin_addr.s_addr, a->bytes + 4, 4);
	memcpy(&sa.sin_port, a->bytes + 8, 2);
	if (!sa.sin_port || !tcp_dialable(ntohl(sa.sin_addr.s_addr)))
		return -EINVAL;
	*out = sa;
	return 0;
}

uint16_t tcp_port(const struct nic *n)
{
	return ntohs(((const struct tcp_ctx *)(const void *)n)->sa.sin_port);
}

/* Control path, before any QP (the engine, right after open). */
static int tcp_set_key(struct nic *n, const uint8_t *key, size_t len)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);

	if (!key || len != sizeof(ctx->key.k))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	memcpy(ctx->key.k, key, len);
	ctx->has_key = true;
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static void tcp_describe(const struct nic *n, char *buf, size_t len)
{
	snprintf(buf, len, "tcp %s", ((const struct tcp_ctx *)(const void *)n)->name);
}

static int tcp_numa_node(const struct nic *n)
{
	(void)n;
	return -1;
}

/* ------------------------------------------------------------------- MRs */

/* A free slot, allocating a chunk when the ones we have are full. */
static struct tcp_mr_slot *tcp_mr_alloc_locked(struct tcp_ctx *ctx, uint32_t *idx)
{
	for (uint32_t k = 0; k < TCP_MR_MAX; k++) {
		uint32_t i = (ctx->mr_cursor + k) % TCP_MR_MAX;
		struct tcp_mr_slot *chunk = ctx->mr[i >> TCP_MR_CHUNK_BITS];

		if (!chunk) {
			chunk = calloc(TCP_MR_CHUNK, sizeof(*chunk));
			if (!chunk)
				return NULL;
			/* Release: the core sees a zeroed chunk.
			 * pairs with: load_acquire in tcp_mr_ok */
			store_release(ctx->mr[i >> TCP_MR_CHUNK_BITS], chunk);
		}
		if (!chunk[i & (TCP_MR_CHUNK - 1)].key) {
			/* Reuse as late as possible: stale keys stay stale longer. */
			ctx->mr_cursor = i + 1;
			*idx = i;
			return &chunk[i & (TCP_MR_CHUNK - 1)];
		}
	}
	return NULL;
}

static int tcp_reg_mr(struct nic *n, void *addr, size_t len, unsigned access,
		      struct nic_mr *out)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);
	struct tcp_mr_slot *s;
	uint32_t idx, key;

	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr || (access & ~NIC_ACCESS_ALL))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	s = tcp_mr_alloc_locked(ctx, &idx);
	if (!s) {
		pthread_mutex_unlock(&ctx->lock);
		return -ENOMEM;
	}
	if (++s->gen == 0)
		s->gen = 1;
	s->base = (uintptr_t)addr;
	s->len = len;
	WRITE_ONCE(s->access, access);
	key = (uint32_t)s->gen << 16 | idx;
	/* Release: a core that loads the key sees base, len and access. */
	store_release(s->key, key); /* pairs with: load_sc of the key in tcp_mr_ok */
	ctx->nmr++;
	pthread_mutex_unlock(&ctx->lock);
	out->lkey = key;
	out->rkey = key;
	out->priv = NULL;
	return 0;
}

static struct tcp_mr_slot *tcp_mr_find_locked(struct tcp_ctx *ctx, uint32_t key)
{
	uint32_t idx = key & (TCP_MR_MAX - 1);
	struct tcp_mr_slot *chunk = ctx->mr[idx >> TCP_MR_CHUNK_BITS];

	if (!key || !chunk || chunk[idx & (TCP_MR_CHUNK - 1)].key != key)
		return NULL;
	return &chunk[idx & (TCP_MR_CHUNK - 1)];
}

static void tcp_wait_all_locked(struct tcp_ctx *ctx)
{
	struct cds_list_head *q;

	cds_list_for_each(q, &ctx->cqs) /* not _entry: see soft.h */
		soft_busy_wait(&cds_list_entry(q, struct tcp_cq, link)->busy_seq);
}

/*
 * A core may be receiving into or sending from the region right now, and
 * the caller frees it once we return: clear the key (every post and poll
 * checks it again before each recv or send that touches the region), then
 * wait out the calls that may have checked it before.
 */
static int tcp_dereg_mr(struct nic *n, struct nic_mr *mr)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);
	struct tcp_mr_slot *s;

	pthread_mutex_lock(&ctx->lock);
	s = tcp_mr_find_locked(ctx, mr->lkey);
	if (!s) {
		pthread_mutex_unlock(&ctx->lock);
		return -EINVAL;
	}
	store_sc(s->key, 0);
	tcp_wait_all_locked(ctx);
	s->base = 0;
	s->len = 0;
	ctx->nmr--;
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

int tcp_set_mr_access(struct nic *n, const struct nic_mr *mr, unsigned access)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);
	struct tcp_mr_slot *s;

	if (access & ~(TCP_ACCESS_REMOTE_READ | TCP_ACCESS_REMOTE_WRITE))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	s = tcp_mr_find_locked(ctx, mr->lkey);
	if (s) {
		/* Before the look at the cores' busy_seq (seq_cst both, as
		 * dereg's key): a core that entered after it sees the change. */
		store_sc(s->access, access);
		/* A WRITE already checked may still land: wait it out. */
		tcp_wait_all_locked(ctx);
	}
	pthread_mutex_unlock(&ctx->lock);
	return s ? 0 : -EINVAL;
}

void tcp_set_hello_ms(struct nic *n, unsigned ms)
{
	WRITE_ONCE(tcp_ctx_of(n)->hello_ms, ms);
}

/* ------------------------------------------------------------------- CQs */

static int tcp_cq_create(struct nic *n, uint32_t cqe, struct nic_cq **out)
{
	struct tcp_ctx *ctx = tcp_ctx_of(n);
	struct tcp_cq *cq;
	int rc = 0;

	if (!cqe || cqe > TCP_MAX_CQE)
		return -EINVAL;
	cq = ferry_zalloc_lines(sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	rc = soft_cq_init(&cq->wcq, cqe);
	cq->epfd = fd_track(epoll_create1(EPOLL_CLOEXEC));
	if (rc || cq->epfd < 0) {
		rc = rc ? rc : -errno;
		goto fail;
	}
	cq->ctx = ctx;
	for (unsigned i = 0; i < TCP_PENDING; i++)
		cq->pend[i].fd = -1;
	CDS_INIT_LIST_HEAD(&cq->qps);

	pthread_mutex_lock(&ctx->lock);
	if (!ctx->serving) {
		/* The first CQ serves the context's peers: the listener is its. */
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tcp_tag(TCP_TAG_LISTEN, 0) };

		if (epoll_ctl(cq->epfd, EPOLL_CTL_ADD, ctx->lfd, &ev)) {
			rc = -errno;
			pthread_mutex_unlock(&ctx->lock);
			goto fail;
		}
		ctx->serving = cq;
	}
	cds_list_add_tail(&cq->link, &ctx->cqs);
	pthread_mutex_unlock(&ctx->lock);
	*out = (struct nic_cq *)(void *)cq;
	return 0;
fail:
	if (cq->epfd >= 0)
		fd_close(cq->epfd);
	soft_cq_fini(&cq->wcq);
	free(cq);
	return rc;
}

static void tcp_cq_free_locked(struct tcp_cq *cq)
{
	struct tcp_ctx *ctx = cq->ctx;

	while (!cds_list_empty(&cq->qps)) {
		struct tcp_qp *qp = cds_list_first_entry(&cq->qps, struct tcp_qp, link);

		WRITE_ONCE(ctx->qps[qp->qpn & TCP_QP_MASK], NULL);
		cds_list_del(&qp->link);
		tcp_qp_free(qp);
	}
	for (unsigned i = 0; i < TCP_PENDING; i++)
		if (cq->pend[i].fd >= 0)
			sock_close(cq->pend[i].fd);
	soft_cnt_add(ctx->retired, cq->pub, TC_NR);
	if (ctx->serving == cq)
		ctx->serving = NULL; /* the next CQ created serves */
	cds_list_del(&cq->link);
	fd_close(cq->epfd);
	soft_cq_fini(&cq->wcq);
	free(cq);
}

/* Nothing may be polled or posted on cq or its QPs any more. */
static void tcp_cq_destroy(struct nic_cq *ncq)
{
	struct tcp_cq *cq = tcp_cq_of(ncq);
	struct tcp_ctx *ctx;

	if (!cq)
		return;
	ctx = cq->ctx;
	pthread_mutex_lock(&ctx->lock);
	tcp_cq_free_locked(cq);
	pthread_mutex_unlock(&ctx->lock);
}

/* The CQ's epoll set: readable whenever a socket of it has something to
 * do (level-triggered), so arming is nothing and there is nothing to ack. */
static int tcp_cq_fd(const struct nic_cq *ncq)
{
	return ((const struct tcp_cq *)(const void *)ncq)->epfd;
}

static int tcp_cq_arm(struct nic_cq *ncq)
{
	(void)ncq;
	return 0;
}

static void tcp_cq_ack(struct nic_cq *ncq)
{
	(void)ncq;
}

void tcp_get_counters(const struct nic *n, struct tcp_counters *out)
{
	struct tcp_ctx *ctx = (struct tcp_ctx *)(uintptr_t)(const void *)n;
	uint64_t sum[TC_NR];
	struct cds_list_head *q;

	pthread_mutex_lock(&ctx->lock);
	memcpy(sum, ctx->retired, sizeof(sum));
	cds_list_for_each(q, &ctx->cqs)
		soft_cnt_add(sum, cds_list_entry(q, struct tcp_cq, link)->pub, TC_NR);
	pthread_mutex_unlock(&ctx->lock);
	out->frames_tx = sum[TC_FRAMES_TX];
	out->frames_rx = sum[TC_FRAMES_RX];
	out->payload_tx = sum[TC_PAYLOAD_TX];
	out->payload_rx = sum[TC_PAYLOAD_RX];
	out->accepted = sum[TC_ACCEPTED];
	out->refused = sum[TC_REFUSED];
	out->violations = sum[TC_VIOLATIONS];
	out->broken = sum[TC_BROKEN];
	out->sq_overflows = sum[TC_SQ_OVF];
	out->cq_overflows = sum[TC_CQ_OVF];
}

const struct nic_provider nic_tcp_provider = {
	.name = "tcp",
	.open = tcp_open,
	.close = tcp_close,
	.caps = tcp_caps,
	.set_key = tcp_set_key,
	.addr = tcp_addr,
	.reg_mr = tcp_reg_mr,
	.dereg_mr = tcp_dereg_mr,
	.cq_create = tcp_cq_create,
	.cq_destroy = tcp_cq_destroy,
	.qp_create = tcp_qp_create,
	.qp_info = tcp_qp_info,
	.qp_connect = tcp_qp_connect,
	.qp_num = tcp_qp_num,
	.qp_set_error = tcp_qp_set_error,
	.qp_destroy = tcp_qp_destroy,
	.post = tcp_post,
	.poll = tcp_poll,
	.cq_arm = tcp_cq_arm,
	.cq_fd = tcp_cq_fd,
	.cq_ack = tcp_cq_ack,
	.describe = tcp_describe,
	.numa_node = tcp_numa_node,
};
