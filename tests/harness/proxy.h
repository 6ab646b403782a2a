/* SPDX-License-Identifier: MIT */
/*
 * A TCP relay on 127.0.0.1 in front of an engine's control address: what
 * an initiator opens is the relay's address, and the test says which
 * engine is behind it (proxy_point: a peer "restarting" on the same
 * address without waiting for its port) and whose replies wait
 * (proxy_hold: a reply read from that engine is kept until released, so
 * a call can be made to end after things it would otherwise precede).
 * One thread, a connection to the current backend per accepted one;
 * loopback only.
 */
#ifndef FERRY_TESTS_PROXY_H
#define FERRY_TESTS_PROXY_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define PROXY_CONNS 16
#define PROXY_BUF (256u << 10)

struct proxy_conn {
	int c, b;          /* client side, backend side (-1: closed) */
	uint16_t bport;    /* the backend it went to */
	size_t n;          /* reply bytes read from b, not yet written to c */
	uint8_t *buf;      /* [PROXY_BUF] */
};

struct proxy {
	int lfd;
	char addr[64];               /* "127.0.0.1:port": open this */
	uint16_t backend;            /* atomic: where new connections go */
	uint16_t hold;               /* atomic: replies from this port wait (0: none) */
	unsigned held;               /* atomic: connections with a reply waiting */
	int stop;                    /* atomic */
	pthread_t thread;
	struct proxy_conn conn[PROXY_CONNS]; /* the relay thread's */
};

/* The port of an engine's "127.0.0.1:port". */
static inline uint16_t proxy_port_of(const char *address)
{
	const char *colon = strrchr(address, ':');

	return colon ? (uint16_t)atoi(colon + 1) : 0;
}

static inline bool proxy_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static inline void proxy_conn_close(struct proxy_conn *k)
{
	if (k->c >= 0)
		close(k->c);
	if (k->b >= 0)
		close(k->b);
	k->c = k->b = -1;
	k->n = 0;
}

static inline int proxy_dial(uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static inline void proxy_accept(struct proxy *px)
{
	int c = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC);
	uint16_t port = __atomic_load_n(&px->backend, __ATOMIC_ACQUIRE);

	if (c < 0)
		return;
	for (unsigned i = 0; i < PROXY_CONNS; i++) {
		struct proxy_conn *k = &px->conn[i];

		if (k->c >= 0)
			continue;
		k->b = proxy_dial(port);
		if (k->b < 0)
			break;
		k->c = c;
		k->bport = port;
		k->n = 0;
		return;
	}
	close(c); /* no backend, or no room: as a refused connection */
}

/* Bytes on k: requests go through, replies wait in k->buf. */
static inline void proxy_move(struct proxy_conn *k, const struct pollfd *pc,
			      const struct pollfd *pb)
{
	uint8_t tmp[4096];
	ssize_t r;

	if (pc->revents) {
		r = read(k->c, tmp, sizeof(tmp));
		if (r <= 0 || k->b < 0 || !proxy_write_all(k->b, tmp, (size_t)r)) {
			proxy_conn_close(k);
			return;
		}
	}
	if (pb && pb->revents) {
		r = k->n < PROXY_BUF ? read(k->b, k->buf + k->n, PROXY_BUF - k->n) : 0;
		if (r <= 0) { /* the backend went: what it said is still delivered */
			close(k->b);
			k->b = -1;
		} else {
			k->n += (size_t)r;
		}
	}
}

/* Deliver what may go now; count the replies that wait. */
static inline unsigned proxy_flush(struct proxy *px)
{
	uint16_t hold = __atomic_load_n(&px->hold, __ATOMIC_ACQUIRE);
	unsigned held = 0;

	for (unsigned i = 0; i < PROXY_CONNS; i++) {
		struct proxy_conn *k = &px->conn[i];

		if (k->c < 0)
			continue;
		if (k->n && hold && k->bport == hold) {
			held++;
			continue;
		}
		if (k->n && !proxy_write_all(k->c, k->buf, k->n))
			proxy_conn_close(k);
		k->n = 0;
		if (k->c >= 0 && k->b < 0)
			proxy_conn_close(k);
	}
	return held;
}

static inline void *proxy_main(void *arg)
{
	struct proxy *px = arg;

	while (!__atomic_load_n(&px->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd[1 + 2 * PROXY_CONNS];
		int slot[PROXY_CONNS];
		unsigned n = 1;

		pfd[0] = (struct pollfd){ .fd = px->lfd, .events = POLLIN };
		for (unsigned i = 0; i < PROXY_CONNS; i++) {
			struct proxy_conn *k = &px->conn[i];

			slot[i] = -1;
			if (k->c < 0)
				continue;
			slot[i] = (int)n;
			pfd[n++] = (struct pollfd){ .fd = k->c, .events = POLLIN };
			pfd[n++] = (struct pollfd){ .fd = k->b, .events = POLLIN }; /* -1: ignored */
		}
		if (poll(pfd, n, 5) > 0) {
			for (unsigned i = 0; i < PROXY_CONNS; i++)
				if (slot[i] >= 0)
					proxy_move(&px->conn[i], &pfd[slot[i]],
						   px->conn[i].b >= 0 ? &pfd[slot[i] + 1] : NULL);
			if (pfd[0].revents)
				proxy_accept(px);
		}
		__atomic_store_n(&px->held, proxy_flush(px), __ATOMIC_RELEASE);
	}
	return NULL;
}

/* A relay to the engine at backend ("127.0.0.1:port"), in px->addr. */
static inline void proxy_start(struct proxy *px, const char *backend)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);

	memset(px, 0, sizeof(*px));
	for (unsigned i = 0; i < PROXY_CONNS; i++) {
		px->conn[i].c = px->conn[i].b = -1;
		px->conn[i].buf = malloc(PROXY_BUF);
		assert_non_null(px->conn[i].buf);
	}
	px->backend = proxy_port_of(backend);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(px->lfd >= 0);
	assert_int_equal(bind(px->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(px->lfd, 64), 0);
	assert_int_equal(getsockname(px->lfd, (struct sockaddr *)&sin, &len), 0);
	snprintf(px->addr, sizeof(px->addr), "127.0.0.1:%u", ntohs(sin.sin_port));
	assert_int_equal(pthread_create(&px->thread, NULL, proxy_main, px), 0);
}

/* New connections go to the engine at backend from now on. */
static inline void proxy_point(struct proxy *px, const char *backend)
{
	__atomic_store_n(&px->backend, proxy_port_of(backend), __ATOMIC_RELEASE);
}

/* Replies of the engine at backend wait (NULL: they all go, those held too). */
static inline void proxy_hold(struct proxy *px, const char *backend)
{
	__atomic_store_n(&px->hold, backend ? proxy_port_of(backend) : 0, __ATOMIC_RELEASE);
}

/* Connections whose reply waits (as of the relay's last pass). */
static inline unsigned proxy_held(struct proxy *px)
{
	return __atomic_load_n(&px->held, __ATOMIC_ACQUIRE);
}

static inline void proxy_stop(struct proxy *px)
{
	__atomic_store_n(&px->stop, 1, __ATOMIC_RELEASE);
	pthread_join(px->thread, NULL);
	for (unsigned i = 0; i < PROXY_CONNS; i++) {
		proxy_conn_close(&px->conn[i]);
		free(px->conn[i].buf);
	}
	close(px->lfd);
}

#endif /* FERRY_TESTS_PROXY_H */
