/* SPDX-License-Identifier: MIT */
/*
 * The control server's event loop (see ctl.h): one thread (ferry-ctl), one
 * epoll set, many connections at once.  Each connection moves through its
 * own small state machine (conn.h): read a header, check it (type, size,
 * authentication) before reading a payload, read the payload, answer it
 * (serve.c), send the answer, and again.  Nothing here waits on one peer:
 * sockets are non-blocking and every step goes as far as the bytes at hand
 * allow, so a client that trickles one byte per second holds only its own
 * connection.  Handlers run on this thread (creating responder QPs takes
 * a moment, never a round trip).
 *
 * Limits: per-connection deadlines (conn.h); a request's payload larger
 * than its type allows is refused before it is read; at most max_conns
 * connections -- the next ones get a WIRE_ERROR -EBUSY and are closed
 * (with a key, the oldest connection not yet authenticated gives way first),
 * logged at most once a second.  A connection serves at most CTL_BURST
 * messages per wake-up, so a client that pipelines many cannot starve the
 * others.  The thread logs at most CTL_LOG_PER_SEC lines a second (peers
 * decide what it logs), then counts what it drops.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/fd.h"
#include "runtime/ctl/conn.h"
#include "runtime/ctl/sock.h"

#define CTL_BACKLOG 512
#define CTL_DEFAULT_LISTEN "127.0.0.1:0"
#define CTL_BURST 8          /* messages per connection per wake-up */
#define CTL_ACCEPT_BURST 64  /* connections accepted per wake-up */
#define CTL_EVENTS 64
#define CTL_PAUSE_MS 100     /* accept paused when out of fds or memory */
#define CTL_SLOW_PASS_MS 10  /* a pass this long is followed by a catch-up (ctl_thread) */
#define CTL_CATCHUP_MAX 32   /* catch-up passes in a row at most (2048 events) */
#define CTL_DRAIN_MAX 65536  /* unread bytes discarded before a close, so it is no reset */
#define CTL_LOG_PER_SEC 20   /* lines this thread logs a second at most (then counted) */

static void vlog_peer(const struct ctl_conn *cn, const char *what, const char *fmt, va_list ap)
{
	char msg[192];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	ctl_log("%s %s: %s", what, cn->peer, msg);
}

int ctl_conn_refuse(struct ctl *c, struct ctl_conn *cn, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_peer(cn, "refused a request from", fmt, ap);
	va_end(ap);
	ctl_count(&c->refused);
	cn->closing = true;
	return -EPROTO;
}

int ctl_conn_deny(struct ctl *c, struct ctl_conn *cn, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_peer(cn, "authentication refused to", fmt, ap);
	va_end(ap);
	ctl_count(&c->denied);
	if (!cn->tx)
		ctl_conn_error(cn, -EACCES);
	cn->closing = true;
	return -EACCES;
}

/* A frame of ours on a sealed connection: its payload encrypted in place,
 * its tag after it (len + tag). */
static uint8_t *conn_seal(struct ctl_conn *cn, uint8_t *frame, size_t len)
{
	uint8_t *f = realloc(frame, len + WIRE_TAG_LEN);

	if (!f) {
		free(frame);
		return NULL;
	}
	auth_seal(&cn->sess, f, WIRE_HDR_LEN, f + WIRE_HDR_LEN, len - WIRE_HDR_LEN, f + len);
	return f;
}

void ctl_conn_send(struct ctl_conn *cn, uint8_t *frame, size_t len, bool counts)
{
	if (cn->sealed) {
		frame = conn_seal(cn, frame, len);
		len += WIRE_TAG_LEN;
		if (!frame) {
			cn->closing = true; /* no memory for a tag: hang up instead */
			return;
		}
	}
	/* One reply at a time: the next request is read after this one is sent. */
	free(cn->tx);
	cn->tx = frame;
	cn->tx_len = len;
	cn->tx_off = 0;
	cn->tx_counts = counts;
	cn->tx_deadline = sock_now_ms() + CTL_IO_TIMEOUT_MS;
}

static uint8_t *error_frame(int err)
{
	uint8_t *f = malloc(WIRE_HDR_LEN + 4);

	/* A callback that broke the negative-errno rule still gets a valid reply. */
	if (err >= 0 || err < -CTL_ERRNO_MAX)
		err = -EIO;
	if (f) {
		wire_hdr_encode(f, WIRE_ERROR, 4);
		sock_put_le32(f + WIRE_HDR_LEN, (uint32_t)(int32_t)err);
	}
	return f;
}

void ctl_conn_error(struct ctl_conn *cn, int err)
{
	uint8_t *f = error_frame(err);

	if (f)
		ctl_conn_send(cn, f, WIRE_HDR_LEN + 4, false);
	else
		cn->closing = true; /* no memory for 16 bytes: hang up instead */
}

void ctl_conn_reply(struct ctl_conn *cn, int rc, uint16_t type, uint8_t *frame,
		    size_t payload_len)
{
	if (!rc && !frame)
		rc = -ENOMEM;
	if (rc) {
		free(frame);
		frame = error_frame(rc);
		payload_len = 4;
		type = WIRE_ERROR;
		if (!frame) {
			cn->closing = true;
			return;
		}
	} else {
		wire_hdr_encode(frame, type, (uint32_t)payload_len);
	}
	ctl_conn_send(cn, frame, WIRE_HDR_LEN + payload_len, true);
}

/* ---- connections ------------------------------------------------------ */

static void conn_watch(struct ctl *c, struct ctl_conn *cn, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = cn };

	if (cn->events == events)
		return;
	cn->events = events;
	/* Cannot fail for a registered fd short of ENOMEM; the deadlines still
	 * close a connection that then hears nothing. */
	(void)epoll_ctl(c->epoll_fd, EPOLL_CTL_MOD, cn->fd, &ev);
}

/*
 * Close a connection.  After a refusal the peer may have sent bytes we never
 * read: closing over them would reset the connection and could destroy the
 * WIRE_ERROR we just sent, so read (and drop) what is there, say we are
 * done (FIN), then close.
 */
void ctl_conn_close(struct ctl *c, struct ctl_conn *cn, bool drain)
{
	uint8_t sink[4096];
	size_t dropped = 0;
	ssize_t n;

	if (drain) {
		(void)shutdown(cn->fd, SHUT_WR);
		while (dropped < CTL_DRAIN_MAX &&
		       (n = recv(cn->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
			dropped += (size_t)n;
	}
	/* Out of the epoll set explicitly: a close leaves it only with the
	 * last copy of the fd, and a forked child may hold one (its events
	 * would come back with cn freed). */
	(void)epoll_ctl(c->epoll_fd, EPOLL_CTL_DEL, cn->fd, NULL);
	sock_close(cn->fd);
	c->conns[cn->idx] = c->conns[c->n_conns - 1];
	c->conns[cn->idx]->idx = cn->idx;
	WRITE_ONCE(c->n_conns, c->n_conns - 1); /* read by tests: a statistic */
	free(cn->payload);
	free(cn->tx);
	auth_wipe(&cn->sess, sizeof(cn->sess));
	free(cn);
}

/* Begin the next message: nothing read of it yet. */
static void conn_next(struct ctl *c, struct ctl_conn *cn)
{
	free(cn->payload);
	cn->payload = NULL;
	cn->have_hdr = false;
	cn->got = 0;
	cn->rx_deadline = 0;
	cn->idle_deadline = sock_now_ms() + c->cfg.idle_ms;
}

/*
 * Send what is queued.  Returns false when the connection is gone (closed
 * after its last frame, or broken).  While a reply waits for room, the
 * connection is watched for output only: its next request stays unread.
 */
static bool conn_flush(struct ctl *c, struct ctl_conn *cn)
{
	ssize_t n;

	while (cn->tx && cn->tx_off < cn->tx_len) {
		n = send(cn->fd, cn->tx + cn->tx_off, cn->tx_len - cn->tx_off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			cn->tx_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			conn_watch(c, cn, EPOLLOUT);
			return true;
		}
		ctl_conn_close(c, cn, false); /* the peer went away */
		return false;
	}
	if (cn->tx) {
		if (cn->tx_counts)
			ctl_count(&c->served);
		free(cn->tx);
		cn->tx = NULL;
		cn->tx_deadline = 0;
	}
	if (cn->closing) {
		ctl_conn_close(c, cn, true);
		return false;
	}
	conn_watch(c, cn, EPOLLIN);
	return true;
}

/* Bytes of tag after a message's payload on this connection. */
static size_t conn_tag_len(const struct ctl_conn *cn)
{
	return cn->sealed ? WIRE_TAG_LEN : 0;
}

/* The header is whole: check it before reading a byte of payload. */
static int conn_header(struct ctl *c, struct ctl_conn *cn)
{
	long max;
	int rc = wire_hdr_decode(cn->hdr, WIRE_HDR_LEN, &cn->h);

	if (rc == -EPROTONOSUPPORT) {
		/* Tell a newer peer why, in a frame it can still parse. */
		ctl_conn_error(cn, rc);
		return ctl_conn_refuse(c, cn, "unsupported protocol version");
	}
	if (rc)
		return ctl_conn_refuse(c, cn, "bad header");
	max = ctl_req_max(cn->h.type);
	if (max < 0)
		return ctl_conn_refuse(c, cn, "unexpected message type %u", cn->h.type);
	rc = ctl_gate(c, cn, cn->h.type);
	if (rc)
		return rc;
	if (cn->h.payload_len > (unsigned long)max)
		return ctl_conn_refuse(c, cn, "type %u with a %u byte payload (at most %ld)",
				       cn->h.type, cn->h.payload_len, max);
	/* At most the largest request and its tag: the limits above bound this. */
	cn->payload = malloc(cn->h.payload_len + conn_tag_len(cn) + 1);
	if (!cn->payload) {
		ctl_log("no memory for a %u byte request", cn->h.payload_len);
		cn->closing = true;
		return -ENOMEM;
	}
	cn->have_hdr = true;
	cn->got = 0;
	return 0;
}

/* The peer closed (n == 0) or broke: between messages that is no fault. */
static int conn_eof(struct ctl *c, struct ctl_conn *cn, int err)
{
	if (!cn->have_hdr && cn->got == 0) {
		cn->closing = true;
		return -ECONNRESET;
	}
	if (cn->have_hdr)
		return ctl_conn_refuse(c, cn, "type %u payload truncated at %zu of %u bytes (%s)",
				       cn->h.type, cn->got, cn->h.payload_len, strerror(err));
	return ctl_conn_refuse(c, cn, "header truncated at %zu of %d bytes (%s)", cn->got,
			       WIRE_HDR_LEN, strerror(err));
}

/*
 * Read what the current message still needs, never more (the next one
 * stays in the socket).  1: the message is whole; 0: wait for more bytes;
 * <0: the connection is to be closed (cn->closing).
 */
static int conn_fill(struct ctl *c, struct ctl_conn *cn)
{
	uint8_t *dst;
	size_t want;
	ssize_t n;
	int rc;

	for (;;) {
		dst = cn->have_hdr ? cn->payload + cn->got : cn->hdr + cn->got;
		want = (cn->have_hdr ? cn->h.payload_len + conn_tag_len(cn) : WIRE_HDR_LEN) -
		       cn->got;
		if (want == 0 && cn->have_hdr)
			return 1;
		if (want == 0) {
			rc = conn_header(c, cn);
			if (rc)
				return rc;
			continue;
		}
		n = recv(cn->fd, dst, want, MSG_DONTWAIT);
		if (n > 0) {
			if (!cn->have_hdr && cn->got == 0) /* a request's first byte */
				cn->rx_deadline = sock_now_ms() + CTL_IO_TIMEOUT_MS;
			cn->got += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return conn_eof(c, cn, n == 0 ? ECONNRESET : errno);
	}
}

/*
 * A whole message on a sealed connection: its tag must be the next one of
 * the peer's session before anything is made of it.  One that is not was
 * not made by the peer that authenticated (a relay that passed the
 * handshake through, a frame injected on the path, or one replayed): the
 * connection closes, unanswered.
 */
static bool conn_verify(struct ctl *c, struct ctl_conn *cn)
{
	if (!cn->sealed || auth_open(&cn->sess, cn->hdr, WIRE_HDR_LEN, cn->payload,
				     cn->h.payload_len, cn->payload + cn->h.payload_len))
		return true;
	ctl_count(&c->forged);
	ctl_log("refused a message from %s: type %u whose tag does not verify: not from the "
		"peer that authenticated (a relay, or the path altered it); closing", cn->peer,
		cn->h.type);
	cn->closing = true;
	return false;
}

/* Serve what the connection has for us, up to CTL_BURST messages. */
static void conn_readable(struct ctl *c, struct ctl_conn *cn)
{
	for (int k = 0; k < CTL_BURST; k++) {
		int rc = conn_fill(c, cn);

		if (rc == 0)
			return;
		if (rc == 1) {
			if (conn_verify(c, cn))
				ctl_handle(c, cn);
			conn_next(c, cn);
		}
		if (!conn_flush(c, cn) || cn->tx)
			return; /* gone, or waits until its reply is taken */
	}
}

static void conn_new(struct ctl *c, int fd, const struct sockaddr_in *sin)
{
	struct ctl_conn *cn = calloc(1, sizeof(*cn));
	struct epoll_event ev = { .events = EPOLLIN };
	char ip[INET_ADDRSTRLEN] = "?";
	int64_t now = sock_now_ms();

	if (!cn) {
		sock_close(fd);
		return;
	}
	cn->fd = fd;
	cn->events = EPOLLIN;
	ev.data.ptr = cn;
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	snprintf(cn->peer, sizeof(cn->peer), "%s:%u", ip, ntohs(sin->sin_port));
	cn->idle_deadline = now + c->cfg.idle_ms;
	if (c->cfg.has_key) {
		cn->auth = CONN_WANT_HELLO;
		cn->auth_deadline = now + CTL_IO_TIMEOUT_MS;
	}
	if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, fd, &ev)) {
		sock_close(fd);
		free(cn);
		return;
	}
	sock_set_nodelay(fd);
	cn->idx = c->n_conns;
	c->conns[cn->idx] = cn;
	WRITE_ONCE(c->n_conns, c->n_conns + 1); /* read by tests: a statistic */
}

/* Out of fds or memory: poll would report the listener ready at once
 * again, so stop watching it for a moment instead of spinning. */
static void ctl_pause_accept(struct ctl *c, int err)
{
	struct epoll_event ev = { .events = 0, .data.ptr = NULL };
	int64_t now = sock_now_ms();

	if (now - c->cap_log_ms >= 1000) {
		ctl_log("accept: %s (%u connections open): pausing %d ms", strerror(err),
			c->n_conns, CTL_PAUSE_MS);
		c->cap_log_ms = now;
	}
	(void)epoll_ctl(c->epoll_fd, EPOLL_CTL_MOD, c->listen_fd, &ev);
	c->listen_resume_ms = now + CTL_PAUSE_MS;
}

static void ctl_accept(struct ctl *c)
{
	for (int k = 0; k < CTL_ACCEPT_BURST; k++) {
		struct sockaddr_in sin;
		socklen_t sl = sizeof(sin);
		int fd = fd_track(accept4(c->listen_fd, (struct sockaddr *)&sin, &sl,
					  SOCK_CLOEXEC | SOCK_NONBLOCK));

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				ctl_pause_accept(c, errno);
			return;
		}
		if (c->n_conns >= c->cfg.max_conns && !ctl_cap_make_room(c))
			ctl_cap_refuse(c, fd);
		else
			conn_new(c, fd, &sin);
	}
}

/* ---- deadlines -------------------------------------------------------- */

static int64_t min_deadline(int64_t a, int64_t b)
{
	return !a || (b && b < a) ? b : a;
}

static int64_t conn_deadline(const struct ctl_conn *cn)
{
	int64_t d = cn->tx ? cn->tx_deadline : cn->rx_deadline;

	d = min_deadline(d, cn->auth_deadline);
	if (!cn->tx && !cn->have_hdr && cn->got == 0)
		d = min_deadline(d, cn->idle_deadline);
	return d;
}

/*
 * Bytes of a next request already wait in conn's socket.  Looked at before
 * an idle close: after this thread was held up (a handler that took longer
 * than idle_ms) the timers run before the events, and closing over a
 * request that came meanwhile drops it unread -- the client sees a reset,
 * and a pipelined batch (DISCONNECTs) loses every request behind it.
 */
static bool conn_has_input(const struct ctl_conn *cn)
{
	uint8_t b;

	return recv(cn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Close conn if one of its deadlines passed; true if it did. */
static bool conn_expire(struct ctl *c, struct ctl_conn *cn, int64_t now)
{
	if (cn->tx && cn->tx_deadline <= now) {
		ctl_log("peer %s did not take its reply within %d ms: closed", cn->peer,
			CTL_IO_TIMEOUT_MS);
	} else if (cn->auth_deadline && cn->auth_deadline <= now) {
		ctl_conn_seal_early(c, cn); /* a late proof's sender reads it sealed */
		(void)ctl_conn_deny(c, cn, "did not authenticate within %d ms", CTL_IO_TIMEOUT_MS);
		cn->auth_deadline = 0;
		return !conn_flush(c, cn); /* the EACCES frame if it fits, then the close */
	} else if (!cn->tx && cn->rx_deadline && cn->rx_deadline <= now) {
		(void)ctl_conn_refuse(c, cn, "request not whole %d ms after its first byte "
				      "(%zu of %u bytes)", CTL_IO_TIMEOUT_MS, cn->got,
				      cn->have_hdr ? cn->h.payload_len : WIRE_HDR_LEN);
	} else if (!cn->tx && !cn->have_hdr && cn->got == 0 && cn->idle_deadline <= now) {
		if (conn_has_input(cn)) { /* not idle: read by the next epoll_wait */
			cn->idle_deadline = now + c->cfg.idle_ms;
			return false;
		}
		/* Idle: nothing to say, the client redials when it needs us. */
	} else {
		return false;
	}
	ctl_conn_close(c, cn, false);
	return true;
}

/* Expire what is due; the time until the next deadline in ms (-1: none). */
static int ctl_timers(struct ctl *c)
{
	int64_t now = sock_now_ms(), next = 0, d;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	if (c->listen_resume_ms && c->listen_resume_ms <= now) {
		c->listen_resume_ms = 0;
		(void)epoll_ctl(c->epoll_fd, EPOLL_CTL_MOD, c->listen_fd, &ev);
	}
	next = c->listen_resume_ms;
	for (unsigned i = 0; i < c->n_conns;) {
		struct ctl_conn *cn = c->conns[i];

		if (conn_expire(c, cn, now))
			continue; /* the last one moved into slot i */
		d = conn_deadline(cn);
		next = min_deadline(next, d);
		i++;
	}
	if (!next)
		return -1;
	return next - now > INT_MAX ? INT_MAX : (int)(next - now + 1);
}

/* ---- the thread ------------------------------------------------------- */

static void ctl_event(struct ctl *c, const struct epoll_event *ev)
{
	struct ctl_conn *cn = ev->data.ptr;

	if (cn->tx) {
		/* Writable, or broken (EPOLLERR/HUP): the send says which. */
		if (!conn_flush(c, cn) || cn->tx)
			return;
	}
	conn_readable(c, cn);
}

/* Wait up to timeout ms for events and handle them: 1 once the stop
 * eventfd is seen, -1 when epoll_wait fails, else 0; *behind: handling
 * them took longer than CTL_SLOW_PASS_MS, or more may be ready than one
 * pass takes (CTL_EVENTS of them). */
static int ctl_pass(struct ctl *c, int timeout, bool *behind)
{
	struct epoll_event evs[CTL_EVENTS];
	int n = epoll_wait(c->epoll_fd, evs, CTL_EVENTS, timeout);
	int64_t t0 = sock_now_ms();
	bool accept_ready = false;

	*behind = false;
	if (n < 0 && errno != EINTR) {
		ctl_log("epoll_wait: %s", strerror(errno));
		return -1;
	}
	for (int k = 0; k < n; k++) {
		if (evs[k].data.ptr == c) /* the stop eventfd */
			return 1;
		accept_ready |= !evs[k].data.ptr;
	}
	for (int k = 0; k < n; k++)
		if (evs[k].data.ptr)
			ctl_event(c, &evs[k]);
	/* Last: making room closes a connection an event above may name. */
	if (accept_ready)
		ctl_accept(c);
	*behind = sock_now_ms() - t0 > CTL_SLOW_PASS_MS || n == CTL_EVENTS;
	return 0;
}

/*
 * The loop: deadlines, then events.  After a slow pass (a handler held
 * this thread: a lock, a slow callback) what came in meanwhile is handled
 * -- pass after pass while each is slow or full -- before any deadline is
 * judged -- a request that went whole, a reply
 * taken, an authentication in time, a next request on an idle connection
 * all arrived while nobody read, and the timers alone would close them.
 */
static void *ctl_thread(void *arg)
{
	struct ctl *c = arg;
	bool behind;
	int rc = 0;

	/* What it logs, peers make it log: a flood of refusals must neither
	 * fill the logs nor hold this thread in a slow sink. */
	log_thread_limit(CTL_LOG_PER_SEC);
	while (!rc) {
		rc = ctl_pass(c, ctl_timers(c), &behind);
		for (int k = 0; !rc && behind && k < CTL_CATCHUP_MAX; k++)
			rc = ctl_pass(c, 0, &behind);
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

	fd = fd_track(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -errno;
	/* Restarting an engine must not wait for TIME_WAIT on its port. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) ||
	    listen(fd, CTL_BACKLOG) ||
	    getsockname(fd, (struct sockaddr *)&bound, &blen) ||
	    !inet_ntop(AF_INET, &bound.sin_addr, ip, sizeof(ip))) {
		int rc = -errno;

		sock_close(fd);
		return rc;
	}
	snprintf(c->address, sizeof(c->address), "%s:%u", ip, ntohs(bound.sin_port));
	c->listen_fd = fd;
	return 0;
}

static void ctl_close_fds(struct ctl *c)
{
	if (c->listen_fd >= 0)
		sock_close(c->listen_fd);
	if (c->stop_fd >= 0)
		fd_close(c->stop_fd);
	if (c->epoll_fd >= 0)
		fd_close(c->epoll_fd);
	c->listen_fd = -1;
	c->stop_fd = -1;
	c->epoll_fd = -1;
}

/* Zero everything but the configuration the ctl_set_* calls made. */
static void ctl_reset(struct ctl *c)
{
	struct ctl_cfg cfg = c->cfg;

	memset(c, 0, sizeof(*c));
	c->cfg = cfg;
	if (!c->cfg.max_conns)
		c->cfg.max_conns = ctl_cap_default();
	if (c->cfg.idle_ms <= 0)
		c->cfg.idle_ms = CTL_IDLE_TIMEOUT_MS;
	c->listen_fd = -1;
	c->stop_fd = -1;
	c->epoll_fd = -1;
}

void ctl_set_ep_ops(struct ctl *c, ctl_connect_fn on_connect, ctl_disconnect_fn on_disconnect)
{
	/* Read by the control thread only after pthread_create: no race. */
	c->cfg.connect = on_connect;
	c->cfg.disconnect = on_disconnect;
}

void ctl_set_keepalive(struct ctl *c, ctl_keepalive_fn keepalive)
{
	c->cfg.keepalive = keepalive;
}

void ctl_set_notify(struct ctl *c, ctl_notify_fn notify)
{
	c->cfg.notify = notify;
}

void ctl_set_auth(struct ctl *c, const struct auth_key *key)
{
	c->cfg.has_key = key != NULL;
	if (key)
		c->cfg.key = *key;
	else
		auth_wipe(&c->cfg.key, sizeof(c->cfg.key));
}

void ctl_set_limits(struct ctl *c, unsigned max_conns, int idle_ms)
{
	c->cfg.max_conns = max_conns;
	c->cfg.idle_ms = idle_ms;
}

/* The epoll set: the listener (data NULL), the stop eventfd (data c). */
static int ctl_epoll(struct ctl *c)
{
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	struct epoll_event sev = { .events = EPOLLIN, .data.ptr = c };

	c->conns = calloc(c->cfg.max_conns, sizeof(*c->conns));
	if (!c->conns)
		return -ENOMEM;
	c->stop_fd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	c->epoll_fd = fd_track(epoll_create1(EPOLL_CLOEXEC));
	if (c->stop_fd < 0 || c->epoll_fd < 0 ||
	    epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->listen_fd, &lev) ||
	    epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->stop_fd, &sev))
		return -errno;
	return 0;
}

static void ctl_fail_start(struct ctl *c)
{
	ctl_close_fds(c);
	free(c->conns);
	c->conns = NULL;
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
	rc = ctl_epoll(c);
	if (rc)
		ctl_log("control server: no epoll/eventfd: %s", strerror(-rc));
	if (!rc) {
		rc = -pthread_create(&c->thread, NULL, ctl_thread, c);
		if (rc)
			ctl_log("control server: no thread: %s", strerror(-rc));
	}
	if (rc) {
		ctl_fail_start(c);
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
	/* The thread is gone: its connections are ours to close, uncounted. */
	while (c->n_conns)
		ctl_conn_close(c, c->conns[c->n_conns - 1], false);
	ctl_fail_start(c);
	c->running = 0;
}
