/* SPDX-License-Identifier: MIT */
/*
 * Socket helpers of the control plane: "host:port" parsing, and blocking-
 * looking I/O built from non-blocking calls around poll() with a deadline,
 * so that no peer can hold a control thread past its timeout.
 */
#include "runtime/ctl/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ring/base/log.h"

int64_t sock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- addresses -------------------------------------------------------- */

/* Digits by hand: strtoul would accept " +80". */
int sock_parse_port(const char *s, uint16_t *port)
{
	unsigned long p = 0;

	if (*s == '\0' || strlen(s) > 5)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		p = p * 10 + (unsigned long)(*s - '0');
	}
	if (p > 65535)
		return -EINVAL;
	*port = (uint16_t)p;
	return 0;
}

/* Split "host:port" at the last colon. */
int sock_split_addr(const char *s, char *host, uint16_t *port)
{
	const char *colon;
	size_t hl;

	if (!s)
		return -EINVAL;
	colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= SOCK_HOST_MAX || sock_parse_port(colon + 1, port))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	return 0;
}

/* "a.b.c.d:port" for bind(); port 0 asks the kernel for one. */
int sock_parse_listen(const char *s, struct sockaddr_in *sin)
{
	char host[SOCK_HOST_MAX];
	uint16_t port;

	memset(sin, 0, sizeof(*sin));
	if (sock_split_addr(s, host, &port) || inet_pton(AF_INET, host, &sin->sin_addr) != 1)
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
int sock_resolve_peer(const char *s, struct sockaddr_in *sin)
{
	struct addrinfo hints, *res = NULL;
	char host[SOCK_HOST_MAX];
	uint16_t port;
	int rc;

	memset(sin, 0, sizeof(*sin));
	if (sock_split_addr(s, host, &port) || port == 0)
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
		log_err("ctl: cannot resolve \"%s\": %s", s, rc ? gai_strerror(rc) : "no IPv4 address");
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
int sock_wait_fd(int fd, short events, int stop_fd, int64_t deadline)
{
	struct pollfd p[2] = {
		{ .fd = fd, .events = events },
		{ .fd = stop_fd, .events = POLLIN },
	};
	int64_t left;
	int n;

	for (;;) {
		left = deadline - sock_now_ms();
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
int sock_recv_full(int fd, int stop_fd, void *buf, size_t len, int64_t deadline, size_t *got)
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
		rc = sock_wait_fd(fd, POLLIN, stop_fd, deadline);
		if (rc)
			break;
	}
	if (got)
		*got = done;
	return rc;
}

/* Write exactly len bytes; MSG_NOSIGNAL so a closed peer is -EPIPE, not SIGPIPE. */
int sock_send_full(int fd, int stop_fd, const void *buf, size_t len, int64_t deadline)
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
		rc = sock_wait_fd(fd, POLLOUT, stop_fd, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

void sock_set_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	/* Best effort: every I/O path already polls with a deadline. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void sock_set_nodelay(int fd)
{
	int one = 1;

	/* Small request/reply frames: do not let Nagle hold them back. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void sock_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

uint32_t sock_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

