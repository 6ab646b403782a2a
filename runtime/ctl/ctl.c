/* SPDX-License-Identifier: MIT */
/*
 * Control thread (see ctl.h).  One listener thread serves one connection at
 * a time; a connection may carry several requests (GET_DESC, CONNECT_REQ,
 * DISCONNECT) until the client closes it.  Each request (header and payload)
 * must arrive within CTL_IO_TIMEOUT_MS of the server starting to wait for
 * it, so a slow client (one byte per second) cannot hold the thread longer
 * than an idle one; a payload larger than its type allows is refused before
 * it is read.
 *
 * All socket I/O is non-blocking (MSG_DONTWAIT) around poll() with a
 * deadline.  The server also polls the stop eventfd, so ctl_stop() returns
 * at once even while a client holds a connection open.  SO_RCVTIMEO and
 * SO_SNDTIMEO are set as a second line of defence.
 *
 * The client side opens one connection per call (fetch, connect, disconnect)
 * and shares everything but the payload codecs (ctl_call).
 *
 * WIRE_ERROR carries a negative errno (ferry's convention) as an i32.
 */
#include "runtime/ctl/ctl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CTL_IO_TIMEOUT_MS 2000
#define CTL_BACKLOG 64
#define CTL_DEFAULT_LISTEN "127.0.0.1:0"
#define CTL_HOST_MAX 64
#define CTL_ERRNO_MAX 4095 /* largest errno a WIRE_ERROR may carry */

static void __attribute__((format(printf, 1, 2))) ctl_log(const char *fmt, ...)
{
	char msg[192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ferry: ctl: %s\n", msg);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- addresses -------------------------------------------------------- */

/*
 * Split "host:port" at the last colon.  The port must be plain decimal
 * digits (strtoul would accept " +80"), at most 65535.
 */
static int split_addr(const char *s, char *host, uint16_t *port)
{
	const char *colon, *q;
	unsigned long p = 0;
	size_t hl;

	if (!s)
		return -EINVAL;
	colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= CTL_HOST_MAX)
		return -EINVAL;
	q = colon + 1;
	if (*q == '\0' || strlen(q) > 5)
		return -EINVAL;
	for (; *q; q++) {
		if (*q < '0' || *q > '9')
			return -EINVAL;
		p = p * 10 + (unsigned long)(*q - '0');
	}
	if (p > 65535)
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* "a.b.c.d:port" for bind(); port 0 asks the kernel for one. */
static int parse_listen(const char *s, struct sockaddr_in *sin)
{
	char host[CTL_HOST_MAX];
	uint16_t port;

	memset(sin, 0, sizeof(*sin));
	if (split_addr(s, host, &port) || inet_pton(AF_INET, host, &sin->sin_addr) != 1)
		return -EINVAL;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	return 0;
}

/*
 * "a.b.c.d:port" or "localhost:port" for connect().  Other names are refused:
 * a DNS lookup would block past the caller's timeout.  Dotted addresses go
 * through inet_pton, not getaddrinfo, which would take inet_aton's forms
 * ("1.2.3" is 1.2.0.3) and so connect to a host nobody named.
 */
static int resolve_peer(const char *s, struct sockaddr_in *sin)
{
	struct addrinfo hints, *res = NULL;
	char host[CTL_HOST_MAX];
	uint16_t port;
	int rc;

	memset(sin, 0, sizeof(*sin));
	if (split_addr(s, host, &port) || port == 0)
		return -EINVAL;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (strcmp(host, "localhost") != 0)
		return inet_pton(AF_INET, host, &sin->sin_addr) == 1 ? 0 : -EINVAL;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc || !res || res->ai_addrlen < sizeof(*sin)) {
		ctl_log("cannot resolve \"%s\": %s", s, rc ? gai_strerror(rc) : "no IPv4 address");
		if (res)
			freeaddrinfo(res);
		return -EINVAL;
	}
	sin->sin_addr = ((const struct sockaddr_in *)res->ai_addr)->sin_addr;
	freeaddrinfo(res);
	return 0;
}

/* ---- socket I/O with a deadline --------------------------------------- */

/*
 * Wait until fd is ready for events: 0, -ETIMEDOUT at the deadline, or
 * -ECANCELED when stop_fd (if >= 0) becomes readable.
 */
static int wait_fd(int fd, short events, int stop_fd, int64_t deadline)
{
	struct pollfd p[2] = {
		{ .fd = fd, .events = events },
		{ .fd = stop_fd, .events = POLLIN },
	};
	int64_t left;
	int n;

	for (;;) {
		left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(p, stop_fd >= 0 ? 2 : 1, left > INT_MAX ? INT_MAX : (int)left);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		if (stop_fd >= 0 && p[1].revents)
			return -ECANCELED;
		/* POLLERR/POLLHUP too: the next recv/send reports the error. */
		if (p[0].revents)
			return 0;
	}
}

/*
 * Read exactly len bytes.  *got says how many arrived, so the server can
 * tell a client that closed between requests (0) from a truncated message.
 * End of stream is -ECONNRESET.
 */
static int recv_full(int fd, int stop_fd, void *buf, size_t len, int64_t deadline, size_t *got)
{
	uint8_t *p = buf;
	size_t done = 0;
	ssize_t n;
	int rc = 0;

	while (done < len) {
		n = recv(fd, p + done, len - done, MSG_DONTWAIT);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0) {
			rc = -ECONNRESET;
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			rc = -errno;
			break;
		}
		rc = wait_fd(fd, POLLIN, stop_fd, deadline);
		if (rc)
			break;
	}
	if (got)
		*got = done;
	return rc;
}

/* Write exactly len bytes; MSG_NOSIGNAL so a closed peer is -EPIPE, not SIGPIPE. */
static int send_full(int fd, int stop_fd, const void *buf, size_t len, int64_t deadline)
{
	const uint8_t *p = buf;
	size_t done = 0;
	ssize_t n;
	int rc;

	while (done < len) {
		n = send(fd, p + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = wait_fd(fd, POLLOUT, stop_fd, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

static void set_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	/* Best effort: every I/O path already polls with a deadline. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void set_nodelay(int fd)
{
	int one = 1;

	/* Small request/reply frames: do not let Nagle hold them back. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- server ----------------------------------------------------------- */

static void ctl_count(uint64_t *counter)
{
	__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
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
	put_le32(frame + WIRE_HDR_LEN, (uint32_t)(int32_t)err);
	return send_full(fd, c->stop_fd, frame, sizeof(frame), deadline);
}

/*
 * Send the answer to one request: the frame (payload at frame + WIRE_HDR_LEN)
 * if rc is 0, else a WIRE_ERROR carrying rc.  The deadline starts here, after
 * the engine's callback: it bounds the client, not our own work.
 */
static int ctl_reply(struct ctl *c, int fd, int rc, uint16_t type, uint8_t *frame,
		     size_t payload_len)
{
	int64_t deadline = now_ms() + CTL_IO_TIMEOUT_MS;

	if (rc) {
		rc = ctl_send_error(c, fd, rc, deadline);
	} else {
		wire_hdr_encode(frame, type, (uint32_t)payload_len);
		rc = send_full(fd, c->stop_fd, frame, WIRE_HDR_LEN + payload_len, deadline);
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
	rc = recv_full(fd, c->stop_fd, payload, h->payload_len, deadline, &got);
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
	int64_t deadline = now_ms() + CTL_IO_TIMEOUT_MS;
	uint8_t buf[WIRE_HDR_LEN];
	struct wire_hdr h;
	size_t got;
	long max;
	int rc;

	rc = recv_full(fd, c->stop_fd, buf, sizeof(buf), deadline, &got);
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
	set_timeouts(fd, CTL_IO_TIMEOUT_MS);
	set_nodelay(fd);
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
	rc = parse_listen(listen_addr, &sin);
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

/* ---- client ----------------------------------------------------------- */

/*
 * One request/reply exchange: the client opens one TCP connection per call,
 * so a reply can never be matched to the wrong request.
 */
struct ctl_call {
	const char *what;  /* "fetch", "connect", "disconnect": for the logs */
	int quiet;         /* a dead peer is no news (keepalive): log nothing */
	uint8_t *frame;    /* WIRE_HDR_LEN bytes of room, then the request payload */
	size_t req_len;    /* payload bytes */
	uint16_t req_type;
	uint16_t rep_type; /* the answer expected besides WIRE_ERROR */
	uint32_t rep_max;  /* larger replies are refused unread */
	/* Decode the reply payload into out; NULL when it must be empty. */
	int (*decode)(const uint8_t *buf, size_t len, void *out);
	void *out;
};

/* Connect with a deadline.  Returns the fd or -errno. */
static int ctl_dial(const struct sockaddr_in *sin, int64_t deadline)
{
	socklen_t elen = sizeof(int);
	int fd, rc, err = 0;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	set_nodelay(fd);
	rc = connect(fd, (const struct sockaddr *)sin, sizeof(*sin));
	if (rc && (errno == EINPROGRESS || errno == EINTR)) {
		/* EINTR: the connect goes on in the background, as for EINPROGRESS. */
		rc = wait_fd(fd, POLLOUT, -1, deadline);
		if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
			err = errno;
		if (!rc && err)
			rc = -err;
	} else if (rc) {
		rc = -errno;
	}
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Turn a transport error into what ctl_fetch_desc documents. */
static int ctl_io_error(int rc)
{
	switch (rc) {
	case -ETIMEDOUT:
	case -ENOMEM:
	case -EPROTO:
	case -EPROTONOSUPPORT:
		return rc;
	default:
		/* Closed, reset, broken pipe: the peer hung up on us. */
		return -ECONNRESET;
	}
}

static int ctl_read_error(int fd, const struct wire_hdr *h, int64_t deadline, const char *what)
{
	uint8_t b[4];
	int32_t err;
	int rc;

	if (h->payload_len != sizeof(b)) {
		ctl_log("%s: ERROR reply with a %u byte payload", what, h->payload_len);
		return -EPROTO;
	}
	rc = recv_full(fd, -1, b, sizeof(b), deadline, NULL);
	if (rc)
		return ctl_io_error(rc);
	err = (int32_t)get_le32(b);
	if (err >= 0 || err < -CTL_ERRNO_MAX) {
		ctl_log("%s: ERROR reply with errno %d", what, err);
		return -EPROTO;
	}
	return err;
}

static int ctl_read_reply(int fd, const struct wire_hdr *h, int64_t deadline,
			  const struct ctl_call *call)
{
	uint8_t *buf;
	int rc;

	if (h->payload_len > call->rep_max) {
		ctl_log("%s: reply of type %u with a %u byte payload (at most %u)", call->what,
			h->type, h->payload_len, call->rep_max);
		return -EPROTO;
	}
	if (!call->decode)
		return 0;
	/* At most rep_max <= WIRE_MAX_PAYLOAD bytes: wire_hdr_decode checked it. */
	buf = malloc(h->payload_len ? h->payload_len : 1);
	if (!buf)
		return -ENOMEM;
	rc = recv_full(fd, -1, buf, h->payload_len, deadline, NULL);
	if (rc)
		rc = ctl_io_error(rc);
	else
		rc = call->decode(buf, h->payload_len, call->out);
	free(buf);
	return rc;
}

/* Send the request on a connected fd and read the reply. */
static int ctl_exchange(int fd, int64_t deadline, const struct ctl_call *call)
{
	uint8_t b[WIRE_HDR_LEN];
	struct wire_hdr h;
	int rc;

	wire_hdr_encode(call->frame, call->req_type, (uint32_t)call->req_len);
	rc = send_full(fd, -1, call->frame, WIRE_HDR_LEN + call->req_len, deadline);
	if (!rc)
		rc = recv_full(fd, -1, b, sizeof(b), deadline, NULL);
	if (rc)
		return ctl_io_error(rc);
	rc = wire_hdr_decode(b, sizeof(b), &h);
	if (rc)
		return rc;
	if (h.type == call->rep_type)
		return ctl_read_reply(fd, &h, deadline, call);
	if (h.type == WIRE_ERROR)
		return ctl_read_error(fd, &h, deadline, call->what);
	ctl_log("%s: unexpected reply type %u", call->what, h.type);
	return -EPROTO;
}

/* Resolve, connect, exchange, close: what every client call shares. */
static int ctl_call(const char *address, int timeout_ms, const struct ctl_call *call)
{
	struct sockaddr_in sin;
	int64_t deadline;
	int fd, rc;

	if (timeout_ms <= 0)
		return -EINVAL;
	if (resolve_peer(address, &sin)) {
		ctl_log("%s: bad address \"%s\" (want a.b.c.d:port or localhost:port)",
			call->what, address ? address : "(null)");
		return -EINVAL;
	}
	deadline = now_ms() + timeout_ms;

	fd = ctl_dial(&sin, deadline);
	if (fd < 0) {
		if (!call->quiet)
			ctl_log("%s: cannot connect to %s: %s", call->what, address,
				strerror(-fd));
		/* Unreachable, refused, reset: all mean "no engine there". */
		if (fd == -ETIMEDOUT || fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM)
			return fd;
		return -ECONNREFUSED;
	}
	rc = ctl_exchange(fd, deadline, call);
	close(fd);
	if (rc && rc != -EPROTO && !call->quiet)
		ctl_log("%s: %s: %s", call->what, address, strerror(-rc));
	return rc;
}

/* Adapters: calling a decoder through a pointer of another type is undefined. */
static int decode_desc(const uint8_t *buf, size_t len, void *out)
{
	return wire_desc_decode(buf, len, out);
}

static int decode_connect_rep(const uint8_t *buf, size_t len, void *out)
{
	return wire_connect_rep_decode(buf, len, out);
}

int ctl_fetch_desc(const char *address, int timeout_ms, struct seg_desc *out)
{
	uint8_t frame[WIRE_HDR_LEN];
	struct ctl_call call = {
		.what = "fetch", .frame = frame, .req_type = WIRE_GET_DESC,
		.rep_type = WIRE_DESC, .rep_max = WIRE_MAX_PAYLOAD,
		.decode = decode_desc, .out = out,
	};

	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	return ctl_call(address, timeout_ms, &call);
}

/* The reply must be for this endpoint and carry one peer QP per QP of ours. */
static int ctl_check_rep(const struct wire_connect_req *req, const struct wire_connect_rep *rep)
{
	if (rep->token == req->token && rep->n_qps == req->n_qps)
		return 0;
	ctl_log("connect: reply for token %llu with %u QPs, asked for token %llu with %u",
		(unsigned long long)rep->token, rep->n_qps, (unsigned long long)req->token,
		req->n_qps);
	return -EPROTO;
}

int ctl_connect(const char *address, int timeout_ms, const struct wire_connect_req *req,
		struct wire_connect_rep *rep)
{
	static const struct wire_connect_rep full = { .n_qps = WIRE_MAX_EP_QPS };
	struct ctl_call call = {
		.what = "connect", .req_type = WIRE_CONNECT_REQ,
		.rep_type = WIRE_CONNECT_REP, .rep_max = (uint32_t)wire_connect_rep_size(&full),
		.decode = decode_connect_rep, .out = rep,
	};
	int rc;

	if (!rep)
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	if (!req)
		return -EINVAL;
	call.req_len = wire_connect_req_size(req);
	call.frame = malloc(WIRE_HDR_LEN + call.req_len);
	if (!call.frame)
		return -ENOMEM;
	/* Refuses (-EINVAL) what the target would refuse, before any connection. */
	rc = wire_connect_req_encode(req, call.frame + WIRE_HDR_LEN, call.req_len);
	if (!rc)
		rc = ctl_call(address, timeout_ms, &call);
	if (!rc)
		rc = ctl_check_rep(req, rep);
	if (rc)
		memset(rep, 0, sizeof(*rep));
	free(call.frame);
	return rc;
}

int ctl_disconnect(const char *address, int timeout_ms, const struct wire_disconnect *d)
{
	uint8_t frame[WIRE_HDR_LEN + WIRE_DISCONNECT_LEN];
	struct ctl_call call = {
		.what = "disconnect", .frame = frame, .req_len = WIRE_DISCONNECT_LEN,
		.req_type = WIRE_DISCONNECT, .rep_type = WIRE_DISCONNECT_REP, .rep_max = 0,
	};

	if (!d)
		return -EINVAL;
	(void)wire_disconnect_encode(d, frame + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN);
	return ctl_call(address, timeout_ms, &call);
}

int ctl_keepalive(const char *address, int timeout_ms, uint64_t incarnation)
{
	struct wire_disconnect d = { .incarnation = incarnation };
	uint8_t frame[WIRE_HDR_LEN + WIRE_KEEPALIVE_LEN];
	struct ctl_call call = {
		.what = "keepalive", .quiet = 1, .frame = frame, .req_len = WIRE_KEEPALIVE_LEN,
		.req_type = WIRE_KEEPALIVE, .rep_type = WIRE_KEEPALIVE_REP, .rep_max = 0,
	};

	(void)wire_disconnect_encode(&d, frame + WIRE_HDR_LEN, WIRE_KEEPALIVE_LEN);
	return ctl_call(address, timeout_ms, &call);
}
