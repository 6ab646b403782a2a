/* SPDX-License-Identifier: MIT */
/*
 * The control server (see ctl.h).  One listener thread serves one
 * connection at a time; a connection may carry several requests (GET_DESC,
 * CONNECT_REQ, DISCONNECT, KEEPALIVE) until the client closes it.  Each
 * request (header and payload) must arrive within CTL_IO_TIMEOUT_MS of the
 * server starting to wait for it, so a slow client (one byte per second)
 * cannot hold the thread longer than an idle one; a payload larger than its
 * type allows is refused before it is read.  The server also polls the stop
 * eventfd, so ctl_stop() returns at once even while a client holds a
 * connection open.  WIRE_ERROR carries a negative errno as an i32.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/sock.h"

#define CTL_BACKLOG 64
#define CTL_DEFAULT_LISTEN "127.0.0.1:0"

static void ctl_count(uint64_t *counter)
{
	fetch_add_relaxed(*counter, 1); /* statistics: no order */
}

/* Count and log a malformed request; the caller closes the connection. */
static int __attribute__((format(printf, 2, 3))) ctl_refuse(struct ctl *c, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ctl_count(&c->refused);
	ctl_log("refused request: %s", msg);
	return -EPROTO;
}

static int ctl_send_error(struct ctl *c, int fd, int err, int64_t deadline)
{
	uint8_t frame[WIRE_HDR_LEN + 4];

	/* A callback that broke the negative-errno rule still gets a valid reply. */
	if (err >= 0 || err < -CTL_ERRNO_MAX)
		err = -EIO;
	wire_hdr_encode(frame, WIRE_ERROR, 4);
	sock_put_le32(frame + WIRE_HDR_LEN, (uint32_t)(int32_t)err);
	return sock_send_full(fd, c->stop_fd, frame, sizeof(frame), deadline);
}

/*
 * Send the answer to one request: the frame (payload at frame + WIRE_HDR_LEN)
 * if rc is 0, else a WIRE_ERROR carrying rc.  The deadline starts here, after
 * the engine's callback: it bounds the client, not our own work.
 */
static int ctl_reply(struct ctl *c, int fd, int rc, uint16_t type, uint8_t *frame,
		     size_t payload_len)
{
	int64_t deadline = sock_now_ms() + CTL_IO_TIMEOUT_MS;

	if (rc) {
		rc = ctl_send_error(c, fd, rc, deadline);
	} else {
		wire_hdr_encode(frame, type, (uint32_t)payload_len);
		rc = sock_send_full(fd, c->stop_fd, frame, WIRE_HDR_LEN + payload_len, deadline);
	}
	if (!rc)
		ctl_count(&c->served);
	return rc;
}

/*
 * Build, encode and send the descriptor, or a WIRE_ERROR saying why not.
 * The frame is built in one buffer so it goes out in as few segments as
 * the socket allows.
 */
static int ctl_answer_desc(struct ctl *c, int fd)
{
	struct seg_desc d;
	uint8_t *frame = NULL;
	size_t size = 0;
	int rc;

	memset(&d, 0, sizeof(d));
	rc = c->describe(c->arg, &d);
	if (!rc) {
		size = wire_desc_size(&d);
		rc = size > WIRE_MAX_PAYLOAD ? -EMSGSIZE : 0;
	}
	if (!rc) {
		frame = malloc(WIRE_HDR_LEN + size);
		rc = frame ? wire_desc_encode(&d, frame + WIRE_HDR_LEN, size) : -ENOMEM;
	}
	seg_desc_free(&d);
	if (rc)
		ctl_log("cannot describe the segment: %s", strerror(-rc));
	rc = ctl_reply(c, fd, rc, WIRE_DESC, frame, size);
	free(frame);
	return rc;
}

static int ctl_answer_connect(struct ctl *c, int fd, const uint8_t *payload, size_t len)
{
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	uint8_t *frame = NULL;
	size_t size = 0;
	int rc;

	if (wire_connect_req_decode(payload, len, &req))
		return ctl_refuse(c, "malformed CONNECT_REQ");
	memset(&rep, 0, sizeof(rep));
	rc = c->connect ? c->connect(c->arg, &req, &rep) : -EOPNOTSUPP;
	if (!rc) {
		/* Encoding refuses (-EINVAL) a reply the initiator would refuse. */
		size = wire_connect_rep_size(&rep);
		frame = malloc(WIRE_HDR_LEN + size);
		rc = frame ? wire_connect_rep_encode(&rep, frame + WIRE_HDR_LEN, size) : -ENOMEM;
	}
	if (rc)
		ctl_log("connect request (token %llu): %s", (unsigned long long)req.token,
			strerror(-rc));
	rc = ctl_reply(c, fd, rc, WIRE_CONNECT_REP, frame, size);
	free(frame);
	return rc;
}

static int ctl_answer_disconnect(struct ctl *c, int fd, const uint8_t *payload, size_t len)
{
	struct wire_disconnect d;
	uint8_t frame[WIRE_HDR_LEN];
	int rc;

	if (wire_disconnect_decode(payload, len, &d))
		return ctl_refuse(c, "malformed DISCONNECT");
	rc = c->disconnect ? c->disconnect(c->arg, &d) : -EOPNOTSUPP;
	if (rc)
		ctl_log("disconnect request (token %llu): %s", (unsigned long long)d.token,
			strerror(-rc));
	return ctl_reply(c, fd, rc, WIRE_DISCONNECT_REP, frame, 0);
}

static int ctl_answer_keepalive(struct ctl *c, int fd, const uint8_t *payload, size_t len)
{
	struct wire_disconnect d;
	uint8_t frame[WIRE_HDR_LEN];
	int rc;

	if (wire_disconnect_decode(payload, len, &d) || d.token)
		return ctl_refuse(c, "malformed KEEPALIVE");
	rc = c->keepalive ? c->keepalive(c->arg, d.incarnation) : -EOPNOTSUPP;
	return ctl_reply(c, fd, rc, WIRE_KEEPALIVE_REP, frame, 0);
}

/*
 * The largest payload the server reads for a request type, or -1 for a type
 * that is not a request.  Larger ones are refused unread, so a client cannot
 * make the server buffer more than the biggest valid request.
 */
static long ctl_req_max(uint16_t type)
{
	static const struct wire_connect_req full = { .n_qps = WIRE_MAX_EP_QPS };

	switch (type) {
	case WIRE_GET_DESC:
		return 0; /* no payload in version 1 */
	case WIRE_CONNECT_REQ:
		return (long)wire_connect_req_size(&full);
	case WIRE_DISCONNECT:
		return WIRE_DISCONNECT_LEN;
	case WIRE_KEEPALIVE:
		return WIRE_KEEPALIVE_LEN;
	default:
		return -1;
	}
}

static int ctl_dispatch(struct ctl *c, int fd, uint16_t type, const uint8_t *payload,
			size_t len)
{
	switch (type) {
	case WIRE_GET_DESC:
		return ctl_answer_desc(c, fd);
	case WIRE_CONNECT_REQ:
		return ctl_answer_connect(c, fd, payload, len);
	case WIRE_KEEPALIVE:
		return ctl_answer_keepalive(c, fd, payload, len);
	default:
		return ctl_answer_disconnect(c, fd, payload, len);
	}
}

/* Read the payload of a request whose header passed ctl_req_max, and answer it. */
static int ctl_serve_payload(struct ctl *c, int fd, const struct wire_hdr *h, int64_t deadline)
{
	uint8_t *payload = malloc(h->payload_len ? h->payload_len : 1);
	size_t got;
	int rc;

	if (!payload) {
		ctl_log("no memory for a %u byte request", h->payload_len);
		return -ENOMEM;
	}
	rc = sock_recv_full(fd, c->stop_fd, payload, h->payload_len, deadline, &got);
	if (!rc)
		rc = ctl_dispatch(c, fd, h->type, payload, h->payload_len);
	else if (rc != -ECANCELED) /* stopping is not the client's fault */
		rc = ctl_refuse(c, "type %u payload truncated at %zu of %u bytes (%s)", h->type,
				got, h->payload_len, strerror(-rc));
	free(payload);
	return rc;
}

/* Serve one request: 0 to keep the connection for the next, else close it. */
static int ctl_serve_one(struct ctl *c, int fd)
{
	int64_t deadline = sock_now_ms() + CTL_IO_TIMEOUT_MS;
	uint8_t buf[WIRE_HDR_LEN];
	struct wire_hdr h;
	size_t got;
	long max;
	int rc;

	rc = sock_recv_full(fd, c->stop_fd, buf, sizeof(buf), deadline, &got);
	if (rc && (got == 0 || rc == -ECANCELED))
		return rc; /* closed or idle between requests, or we are stopping */
	if (rc)
		return ctl_refuse(c, "header truncated at %zu of %d bytes (%s)", got,
				  WIRE_HDR_LEN, strerror(-rc));
	rc = wire_hdr_decode(buf, sizeof(buf), &h);
	if (rc == -EPROTONOSUPPORT) {
		/* Tell a newer peer why, in a frame it can still parse. */
		(void)ctl_send_error(c, fd, rc, deadline);
		return ctl_refuse(c, "unsupported protocol version");
	}
	if (rc)
		return ctl_refuse(c, "bad header");
	max = ctl_req_max(h.type);
	if (max < 0)
		return ctl_refuse(c, "unexpected message type %u", h.type);
	if (h.payload_len > (unsigned long)max)
		return ctl_refuse(c, "type %u with a %u byte payload (at most %ld)", h.type,
				  h.payload_len, max);
	return ctl_serve_payload(c, fd, &h, deadline);
}

static void ctl_serve(struct ctl *c, int fd)
{
	sock_set_timeouts(fd, CTL_IO_TIMEOUT_MS);
	sock_set_nodelay(fd);
	while (ctl_serve_one(c, fd) == 0)
		;
	close(fd);
}

/* Sleep up to ms, waking early if stop is signalled. */
static void ctl_backoff(struct ctl *c, int ms)
{
	struct pollfd p = { .fd = c->stop_fd, .events = POLLIN };

	(void)poll(&p, 1, ms);
}

static void ctl_accept(struct ctl *c)
{
	int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd >= 0) {
		ctl_serve(c, fd);
		return;
	}
	/* The listener is non-blocking: a client that left before accept is EAGAIN. */
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
		return;
	/* Out of fds or memory: poll() would report the listener ready at once
	 * again, so back off instead of spinning. */
	ctl_log("accept: %s", strerror(errno));
	ctl_backoff(c, 100);
}

static void *ctl_thread(void *arg)
{
	struct ctl *c = arg;
	struct pollfd p[2] = {
		{ .fd = c->listen_fd, .events = POLLIN },
		{ .fd = c->stop_fd, .events = POLLIN },
	};
	int n;

	for (;;) {
		n = poll(p, 2, -1);
		if (n < 0) {
			if (errno != EINTR) {
				ctl_log("poll: %s", strerror(errno));
				ctl_backoff(c, 100);
			}
			continue;
		}
		if (p[1].revents)
			break;
		if (p[0].revents)
			ctl_accept(c);
	}
	return NULL;
}

/* Bind and listen on addr; fill c->listen_fd and c->address. */
static int ctl_listen(struct ctl *c, const struct sockaddr_in *addr)
{
	struct sockaddr_in bound;
	socklen_t blen = sizeof(bound);
	char ip[INET_ADDRSTRLEN];
	int one = 1;
	int fd;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Restarting an engine must not wait for TIME_WAIT on its port. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) ||
	    listen(fd, CTL_BACKLOG) ||
	    getsockname(fd, (struct sockaddr *)&bound, &blen) ||
	    !inet_ntop(AF_INET, &bound.sin_addr, ip, sizeof(ip))) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	snprintf(c->address, sizeof(c->address), "%s:%u", ip, ntohs(bound.sin_port));
	c->listen_fd = fd;
	return 0;
}

static void ctl_close_fds(struct ctl *c)
{
	if (c->listen_fd >= 0)
		close(c->listen_fd);
	if (c->stop_fd >= 0)
		close(c->stop_fd);
	c->listen_fd = -1;
	c->stop_fd = -1;
}

/* Zero everything but the endpoint handlers, which ctl_set_ep_ops set before. */
static void ctl_reset(struct ctl *c)
{
	ctl_connect_fn on_connect = c->connect;
	ctl_disconnect_fn on_disconnect = c->disconnect;
	ctl_keepalive_fn on_keepalive = c->keepalive;

	memset(c, 0, sizeof(*c));
	c->connect = on_connect;
	c->disconnect = on_disconnect;
	c->keepalive = on_keepalive;
	c->listen_fd = -1;
	c->stop_fd = -1;
}

void ctl_set_ep_ops(struct ctl *c, ctl_connect_fn on_connect, ctl_disconnect_fn on_disconnect)
{
	/* Read by the control thread only after pthread_create: no race. */
	c->connect = on_connect;
	c->disconnect = on_disconnect;
}

void ctl_set_keepalive(struct ctl *c, ctl_keepalive_fn keepalive)
{
	c->keepalive = keepalive;
}

int ctl_start(struct ctl *c, const char *listen_addr, ctl_describe_fn describe, void *arg)
{
	struct sockaddr_in sin;
	int rc;

	if (!c)
		return -EINVAL;
	ctl_reset(c);
	if (!describe)
		return -EINVAL;
	c->describe = describe;
	c->arg = arg;

	if (!listen_addr)
		listen_addr = CTL_DEFAULT_LISTEN;
	rc = sock_parse_listen(listen_addr, &sin);
	if (rc) {
		ctl_log("bad listen address \"%s\" (want a.b.c.d:port)", listen_addr);
		return rc;
	}
	rc = ctl_listen(c, &sin);
	if (rc) {
		ctl_log("cannot listen on %s: %s", listen_addr, strerror(-rc));
		return rc;
	}
	c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->stop_fd < 0) {
		rc = -errno;
		ctl_close_fds(c);
		return rc;
	}
	rc = -pthread_create(&c->thread, NULL, ctl_thread, c);
	if (rc) {
		ctl_close_fds(c);
		return rc;
	}
	(void)pthread_setname_np(c->thread, "ferry-ctl");
	c->running = 1;
	return 0;
}

void ctl_stop(struct ctl *c)
{
	uint64_t one = 1;

	if (!c || !c->running)
		return;
	/* The eventfd counter cannot overflow from one write: only EINTR can fail. */
	while (write(c->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(c->thread, NULL);
	ctl_close_fds(c);
	c->running = 0;
}

