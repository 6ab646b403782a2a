/* SPDX-License-Identifier: MIT */
/*
 * Control thread: fetch a descriptor over loopback TCP, connect and
 * disconnect endpoints through the engine's callbacks, refused and
 * malformed requests, timeouts, bad addresses, start/stop edge cases.
 * Runs under TSan too: the callbacks read their modes with atomics and
 * record what they saw under a mutex, because sockets are not a
 * happens-before edge TSan can see.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/ctl/ctl.h"
#include "tests/harness/wait.h"

#define FETCH_MS 3000

enum mode { MODE_OK, MODE_FAIL, MODE_INVALID, MODE_HUGE };

/* What the endpoint callbacks do. */
enum ep_mode {
	EP_OK,
	EP_FAIL,      /* connect -ESTALE, disconnect -ENOENT */
	EP_BAD_ERRNO, /* a positive return: sent as -EIO */
	EP_BAD_REP,   /* a reply with no QP: the server cannot encode it */
	EP_WRONG_TOKEN,
	EP_WRONG_N_QPS,
};

struct ctx {
	int mode;        /* enum mode; atomic */
	uint16_t n_nics; /* fixed before ctl_start */
	uint32_t n_regions;
	int calls;       /* atomic */
	int ep_mode;     /* enum ep_mode; atomic */
	pthread_mutex_t lock; /* guards the rest */
	int connects, disconnects;
	struct wire_connect_req seen_req;
	struct wire_disconnect seen_disc;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fill_desc(struct seg_desc *d, uint16_t n_nics, uint32_t n_regions)
{
	uint32_t i, k;

	d->incarnation = 0xfeed0000ull + n_regions;
	d->n_nics = n_nics;
	d->n_regions = n_regions;
	for (k = 0; k < n_nics && k < WIRE_MAX_NICS; k++) {
		snprintf(d->nics[k].provider, WIRE_PROVIDER_LEN, k % 2 ? "verbs" : "loop");
		memset(d->nics[k].addr.bytes, (int)k + 1, NIC_ADDR_LEN);
	}
	d->regions = n_regions ? calloc(n_regions, sizeof(*d->regions)) : NULL;
	for (i = 0; i < n_regions; i++) {
		d->regions[i].addr = 0x7f0000000000ull + 0x200000ull * i;
		d->regions[i].len = 0x100000ull + i;
		for (k = 0; k < n_nics && k < WIRE_MAX_NICS; k++)
			d->regions[i].rkey[k] = 0x1000 * k + i;
	}
}

static int describe(void *arg, struct seg_desc *out)
{
	struct ctx *x = arg;

	__atomic_fetch_add(&x->calls, 1, __ATOMIC_RELAXED);
	switch (__atomic_load_n(&x->mode, __ATOMIC_RELAXED)) {
	case MODE_FAIL:
		return -EAGAIN;
	case MODE_INVALID:
		fill_desc(out, 1, 2);
		out->regions[1].addr = out->regions[0].addr; /* overlapping */
		return 0;
	case MODE_HUGE:
		fill_desc(out, WIRE_MAX_NICS, WIRE_MAX_REGIONS);
		return 0;
	default:
		fill_desc(out, x->n_nics, x->n_regions);
		return 0;
	}
}

/* The target's QP i answers the initiator's QP i: derived, so it can be checked. */
static void fill_rep(const struct wire_connect_req *req, struct wire_connect_rep *rep)
{
	uint16_t i;

	rep->token = req->token;
	rep->n_qps = req->n_qps;
	for (i = 0; i < req->n_qps; i++) {
		rep->qps[i].qpn = req->qps[i].qpn + 0x10000;
		rep->qps[i].psn = req->qps[i].psn ^ 0xabcdef;
	}
}

static int on_connect(void *arg, const struct wire_connect_req *req, struct wire_connect_rep *rep)
{
	struct ctx *x = arg;

	pthread_mutex_lock(&x->lock);
	x->connects++;
	x->seen_req = *req;
	pthread_mutex_unlock(&x->lock);
	switch (__atomic_load_n(&x->ep_mode, __ATOMIC_RELAXED)) {
	case EP_FAIL:
		return -ESTALE;
	case EP_BAD_ERRNO:
		return 7;
	case EP_BAD_REP:
		return 0; /* rep left zeroed: n_qps 0 */
	case EP_WRONG_TOKEN:
		fill_rep(req, rep);
		rep->token++;
		return 0;
	case EP_WRONG_N_QPS:
		fill_rep(req, rep);
		rep->n_qps = req->n_qps == 1 ? 2 : 1;
		return 0;
	default:
		fill_rep(req, rep);
		return 0;
	}
}

static int on_disconnect(void *arg, const struct wire_disconnect *d)
{
	struct ctx *x = arg;

	pthread_mutex_lock(&x->lock);
	x->disconnects++;
	x->seen_disc = *d;
	pthread_mutex_unlock(&x->lock);
	switch (__atomic_load_n(&x->ep_mode, __ATOMIC_RELAXED)) {
	case EP_FAIL:
		return -ENOENT;
	case EP_BAD_ERRNO:
		return 7;
	default:
		return 0;
	}
}

static void set_ep_mode(struct ctx *x, enum ep_mode m)
{
	__atomic_store_n(&x->ep_mode, (int)m, __ATOMIC_RELAXED);
}

static void set_mode(struct ctx *x, enum mode m)
{
	__atomic_store_n(&x->mode, (int)m, __ATOMIC_RELAXED);
}

static uint64_t counter(uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* The server counts after it has sent or closed: give it a moment. */
static void wait_counter(uint64_t *p, uint64_t want, const char *name)
{
	WAIT_UNTIL(counter(p) >= want, WAIT_DEADLINE_MS, "the server's %s count to reach %llu",
		   name, (unsigned long long)want);
	assert_int_equal(counter(p), want);
}

static void wait_served(struct ctl *c, uint64_t want)
{
	wait_counter(&c->served, want, "served");
}

static void wait_refused(struct ctl *c, uint64_t want)
{
	wait_counter(&c->refused, want, "refused");
}

static void expect_desc(const struct seg_desc *d, uint16_t n_nics, uint32_t n_regions)
{
	struct seg_desc want;
	uint32_t i;

	memset(&want, 0, sizeof(want));
	fill_desc(&want, n_nics, n_regions);
	assert_int_equal(d->incarnation, want.incarnation);
	assert_int_equal(d->n_nics, n_nics);
	assert_int_equal(d->n_regions, n_regions);
	for (i = 0; i < n_nics; i++) {
		assert_string_equal(d->nics[i].provider, want.nics[i].provider);
		assert_memory_equal(d->nics[i].addr.bytes, want.nics[i].addr.bytes, NIC_ADDR_LEN);
	}
	for (i = 0; i < n_regions; i++) {
		assert_int_equal(d->regions[i].addr, want.regions[i].addr);
		assert_int_equal(d->regions[i].len, want.regions[i].len);
		assert_memory_equal(d->regions[i].rkey, want.regions[i].rkey,
				    n_nics * sizeof(uint32_t));
	}
	seg_desc_free(&want);
}

/* Start c the way the engine does: zeroed, handlers set, then ctl_start. */
static void start_ops(struct ctl *c, struct ctx *x, uint16_t n_nics, uint32_t n_regions,
		      ctl_connect_fn on_conn, ctl_disconnect_fn on_disc)
{
	memset(x, 0, sizeof(*x));
	assert_int_equal(pthread_mutex_init(&x->lock, NULL), 0);
	x->n_nics = n_nics;
	x->n_regions = n_regions;
	memset(c, 0, sizeof(*c));
	ctl_set_ep_ops(c, on_conn, on_disc);
	assert_int_equal(ctl_start(c, NULL, describe, x), 0);
	assert_int_equal(strncmp(c->address, "127.0.0.1:", 10), 0);
	assert_true(atoi(c->address + 10) > 0);
}

static void start(struct ctl *c, struct ctx *x, uint16_t n_nics, uint32_t n_regions)
{
	start_ops(c, x, n_nics, n_regions, NULL, NULL);
}

/* A plain blocking TCP client for hand-made requests. */
static int raw_connect(const char *address)
{
	struct sockaddr_in sin;
	struct timeval tv = { .tv_sec = 5 };
	const char *colon = strrchr(address, ':');
	char host[32];
	int fd;

	assert_non_null(colon);
	memset(&sin, 0, sizeof(sin));
	snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	assert_int_equal(inet_pton(AF_INET, host, &sin.sin_addr), 1);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	/* A test that waits for a reply that never comes fails, not hangs. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

static void raw_recv(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = recv(fd, p + done, len - done, 0);
		assert_true(n > 0);
		done += (size_t)n;
	}
}

/* The server must close the connection (EOF, or a reset) without a reply. */
static void expect_closed(int fd)
{
	char b[64];
	ssize_t n = recv(fd, b, sizeof(b), 0);

	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
}

static void send_hdr(int fd, uint16_t version, uint16_t type, uint32_t payload_len)
{
	uint8_t b[WIRE_HDR_LEN];

	wire_hdr_encode(b, type, payload_len);
	b[4] = (uint8_t)version;
	b[5] = (uint8_t)(version >> 8);
	raw_send(fd, b, sizeof(b));
}

/* ---- tests ------------------------------------------------------------ */

static void test_fetch(void **state)
{
	struct ctl c;
	struct ctx x;
	struct seg_desc d;
	char local[80];

	(void)state;
	start(&c, &x, 3, 7);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	expect_desc(&d, 3, 7);
	seg_desc_free(&d);
	wait_served(&c, 1);

	/* "localhost" resolves too. */
	snprintf(local, sizeof(local), "localhost:%s", strrchr(c.address, ':') + 1);
	assert_int_equal(ctl_fetch_desc(local, FETCH_MS, &d), 0);
	expect_desc(&d, 3, 7);
	seg_desc_free(&d);
	wait_served(&c, 2);
	assert_int_equal(counter(&c.refused), 0);
	assert_int_equal(__atomic_load_n(&x.calls, __ATOMIC_RELAXED), 2);
	ctl_stop(&c);
}

/* Nearly 1 MiB: many short reads and writes on loopback. */
static void test_fetch_large(void **state)
{
	struct ctl c;
	struct ctx x;
	struct seg_desc d;

	(void)state;
	start(&c, &x, 8, WIRE_MAX_REGIONS);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS * 3, &d), 0);
	expect_desc(&d, 8, WIRE_MAX_REGIONS);
	assert_non_null(seg_desc_find(&d, d.regions[12345].addr + 10, 100));
	seg_desc_free(&d);

	/* No regions at all is a valid descriptor. */
	ctl_stop(&c);
	start(&c, &x, 1, 0);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	expect_desc(&d, 1, 0);
	assert_null(d.regions);
	ctl_stop(&c);
}

static void test_fetch_errors_from_describe(void **state)
{
	struct ctl c;
	struct ctx x;
	struct seg_desc d;

	(void)state;
	start(&c, &x, 2, 2);
	set_mode(&x, MODE_FAIL);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), -EAGAIN);
	assert_null(d.regions);
	/* The server refuses to send what the client would refuse. */
	set_mode(&x, MODE_INVALID);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), -EINVAL);
	/* The largest descriptor the limits allow still fits one frame. */
	set_mode(&x, MODE_HUGE);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS * 10, &d), 0);
	expect_desc(&d, WIRE_MAX_NICS, WIRE_MAX_REGIONS);
	seg_desc_free(&d);
	set_mode(&x, MODE_OK);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	expect_desc(&d, 2, 2);
	seg_desc_free(&d);
	wait_served(&c, 4);
	assert_int_equal(counter(&c.refused), 0);
	ctl_stop(&c);
}

static void test_fetch_closed_port(void **state)
{
	struct ctl c;
	struct ctx x;
	struct seg_desc d;
	char addr[64];

	(void)state;
	start(&c, &x, 1, 1);
	memcpy(addr, c.address, sizeof(addr));
	ctl_stop(&c);
	assert_int_equal(ctl_fetch_desc(addr, FETCH_MS, &d), -ECONNREFUSED);
	assert_null(d.regions);
}

/* A peer that accepts (the kernel's backlog does) but never answers. */
static void test_fetch_timeout(void **state)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	struct seg_desc d;
	char addr[64];
	int64_t t0, dt;
	int fd;

	(void)state;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));

	t0 = now_ms();
	assert_int_equal(ctl_fetch_desc(addr, 200, &d), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
	close(fd);
}

static void test_garbage(void **state)
{
	static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	struct ctl c;
	struct ctx x;
	struct seg_desc d;
	int fd;

	(void)state;
	start(&c, &x, 2, 3);

	fd = raw_connect(c.address);
	raw_send(fd, junk, sizeof(junk) - 1);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 1);

	/* The listener survives and still answers properly. */
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	expect_desc(&d, 2, 3);
	seg_desc_free(&d);
	wait_served(&c, 1);
	assert_int_equal(__atomic_load_n(&x.calls, __ATOMIC_RELAXED), 1);
	ctl_stop(&c);
}

static void test_malformed_requests(void **state)
{
	static const uint8_t partial[5] = { 'F', 'R', 'Y', '1', 1 };
	struct ctl c;
	struct ctx x;
	uint8_t b[WIRE_HDR_LEN + 4];
	struct wire_hdr h;
	int32_t err;
	int fd;

	(void)state;
	start(&c, &x, 1, 1);

	/* A truncated header, then the client goes away. */
	fd = raw_connect(c.address);
	raw_send(fd, partial, sizeof(partial));
	shutdown(fd, SHUT_WR);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 1);

	/* A well-formed frame of a type the server does not take. */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_DESC, 0);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 2);

	/* GET_DESC with a payload (not read: the connection is dropped). */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_GET_DESC, 4);
	raw_send(fd, "abcd", 4);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 3);

	/* A newer peer is told why before the close. */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION + 1, WIRE_GET_DESC, 0);
	raw_recv(fd, b, sizeof(b));
	assert_int_equal(wire_hdr_decode(b, WIRE_HDR_LEN, &h), 0);
	assert_int_equal(h.type, WIRE_ERROR);
	assert_int_equal(h.payload_len, 4);
	err = (int32_t)((uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 |
			(uint32_t)b[15] << 24);
	assert_int_equal(err, -EPROTONOSUPPORT);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 4);

	/* A client that connects and leaves without a word is not malformed. */
	fd = raw_connect(c.address);
	close(fd);
	fd = raw_connect(c.address);
	close(fd);
	assert_int_equal(counter(&c.served), 0);

	assert_int_equal(counter(&c.refused), 4);
	ctl_stop(&c);
}

/* Several requests on one connection, answered in order. */
static void test_several_requests(void **state)
{
	struct ctl c;
	struct ctx x;
	uint8_t hb[WIRE_HDR_LEN], *payload;
	struct wire_hdr h;
	struct seg_desc d;
	int fd, i;

	(void)state;
	start(&c, &x, 2, 5);
	fd = raw_connect(c.address);
	/* Both requests at once: the server must not over-read the first. */
	send_hdr(fd, WIRE_VERSION, WIRE_GET_DESC, 0);
	send_hdr(fd, WIRE_VERSION, WIRE_GET_DESC, 0);
	for (i = 0; i < 3; i++) {
		if (i == 2)
			send_hdr(fd, WIRE_VERSION, WIRE_GET_DESC, 0);
		raw_recv(fd, hb, sizeof(hb));
		assert_int_equal(wire_hdr_decode(hb, sizeof(hb), &h), 0);
		assert_int_equal(h.type, WIRE_DESC);
		payload = malloc(h.payload_len);
		assert_non_null(payload);
		raw_recv(fd, payload, h.payload_len);
		assert_int_equal(wire_desc_decode(payload, h.payload_len, &d), 0);
		expect_desc(&d, 2, 5);
		seg_desc_free(&d);
		free(payload);
	}
	close(fd);
	wait_served(&c, 3);
	assert_int_equal(counter(&c.refused), 0);
	ctl_stop(&c);
}

/* A client that trickles a header is cut off at the per-request deadline. */
static void test_slow_client(void **state)
{
	struct ctl c;
	struct ctx x;
	struct seg_desc d;
	int64_t t0;
	int fd;

	(void)state;
	start(&c, &x, 1, 1);
	fd = raw_connect(c.address);
	t0 = now_ms();
	raw_send(fd, "FRY", 3);
	expect_closed(fd);
	assert_true(now_ms() - t0 < 4500);
	close(fd);
	wait_refused(&c, 1);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	seg_desc_free(&d);
	ctl_stop(&c);
}

static unsigned local_port(int fd, bool peer)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);

	if (peer)
		assert_int_equal(getpeername(fd, (struct sockaddr *)&sin, &len), 0);
	else
		assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	return ntohs(sin.sin_port);
}

/*
 * Bytes the server has not read yet on its end of the loopback connection
 * whose client end is fd, from /proc/net/tcp (its rx_queue); -1 while the
 * kernel lists no such connection.
 */
static long server_unread(int fd)
{
	unsigned server = local_port(fd, true), client = local_port(fd, false);
	unsigned lport, rport, st;
	unsigned long txq, rxq;
	long unread = -1;
	char line[256];
	FILE *f = fopen("/proc/net/tcp", "r");

	assert_non_null(f);
	while (unread < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, " %*u: %*x:%x %*x:%x %x %lx:%lx", &lport, &rport, &st, &txq,
			   &rxq) == 5 && lport == server && rport == client && st == 1)
			unread = (long)rxq; /* 1: TCP_ESTABLISHED */
	fclose(f);
	return unread;
}

/*
 * The server has read all the client sent on fd: its kernel acknowledged
 * every byte (nothing left in the client's send queue; a byte sent on
 * loopback may sit in a backlog before it is received) and no byte is
 * left unread on its end.
 */
static bool server_read_all(int fd)
{
	int unacked;

	assert_int_equal(ioctl(fd, SIOCOUTQ, &unacked), 0);
	return unacked == 0 && server_unread(fd) == 0;
}

/*
 * ctl_stop must not wait for a client that holds its connection open: the
 * server, blocked on the rest of a header, drops it without counting it
 * as refused (which it would at the request deadline).
 */
static void test_stop_with_idle_client(void **state)
{
	struct ctl c;
	struct ctx x;
	int fd;

	(void)state;
	start(&c, &x, 1, 1);
	fd = raw_connect(c.address);
	raw_send(fd, "FR", 2);
	/* It read what there was: it has accepted and waits for the rest. */
	WAIT_UNTIL(server_read_all(fd), WAIT_DEADLINE_MS,
		   "the server to read the first 2 bytes of a header");
	ctl_stop(&c);
	assert_int_equal(counter(&c.refused), 0);
	assert_int_equal(counter(&c.served), 0);
	close(fd);
}

/* ---- a fake server for the client's side of malformed replies -------- */

struct fake {
	int lfd;
	char address[64];
	uint8_t reply[256];
	size_t len;
	uint8_t req[512];  /* the request frame as received */
	size_t req_len;
	pthread_t thread;
};

/* Read up to want bytes of the request into f->req; false if the client left. */
static bool fake_read(struct fake *f, int fd, size_t want)
{
	ssize_t n;

	while (f->req_len < want) {
		n = recv(fd, f->req + f->req_len, want - f->req_len, 0);
		if (n <= 0)
			return false;
		f->req_len += (size_t)n;
	}
	return true;
}

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	uint32_t plen;
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	/* The whole request, so the close below does not reset the connection
	 * over unread bytes before the client has read the reply. */
	if (fake_read(f, fd, WIRE_HDR_LEN)) {
		plen = (uint32_t)f->req[8] | (uint32_t)f->req[9] << 8 |
		       (uint32_t)f->req[10] << 16 | (uint32_t)f->req[11] << 24;
		if (plen <= sizeof(f->req) - WIRE_HDR_LEN)
			(void)fake_read(f, fd, WIRE_HDR_LEN + plen);
	}
	if (f->len)
		(void)send(fd, f->reply, f->len, MSG_NOSIGNAL);
	close(fd);
	return NULL;
}

/* Serve one connection with the canned reply, then close it. */
static void fake_start(struct fake *f, const void *reply, size_t len)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	assert_true(len <= sizeof(f->reply));
	if (len)
		memcpy(f->reply, reply, len);
	f->len = len;
	f->req_len = 0;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&sin, &sl), 0);
	snprintf(f->address, sizeof(f->address), "127.0.0.1:%u", ntohs(sin.sin_port));
	assert_int_equal(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

static int fake_fetch(const void *reply, size_t len)
{
	struct fake f;
	struct seg_desc d;
	int rc;

	fake_start(&f, reply, len);
	rc = ctl_fetch_desc(f.address, FETCH_MS, &d);
	pthread_join(f.thread, NULL);
	close(f.lfd);
	assert_null(d.regions);
	return rc;
}

static size_t frame(uint8_t *b, uint16_t version, uint16_t type, uint32_t payload_len,
		    const void *payload, size_t n)
{
	wire_hdr_encode(b, type, payload_len);
	b[4] = (uint8_t)version;
	b[5] = (uint8_t)(version >> 8);
	if (n)
		memcpy(b + WIRE_HDR_LEN, payload, n);
	return WIRE_HDR_LEN + n;
}

static void test_bad_replies(void **state)
{
	static const uint8_t enoent[4] = { (uint8_t)-ENOENT, 0xff, 0xff, 0xff };
	static const uint8_t plus5[4] = { 5, 0, 0, 0 };
	static const uint8_t huge_errno[4] = { 0, 0, 0, 0x80 };
	uint8_t b[64], desc[20];

	(void)state;
	memset(desc, 0, sizeof(desc));
	assert_int_equal(fake_fetch(NULL, 0), -ECONNRESET); /* closed, no reply */
	assert_int_equal(fake_fetch("garbage garbage!", 16), -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, enoent, 4)),
			 -ENOENT);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, plus5, 4)),
			 -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, huge_errno, 4)),
			 -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_ERROR, 3, enoent, 3)),
			 -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, enoent, 2)),
			 -ECONNRESET); /* closed mid-payload */
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_GET_DESC, 0, NULL, 0)),
			 -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION + 1, WIRE_DESC, 0, NULL, 0)),
			 -EPROTONOSUPPORT);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_DESC, WIRE_MAX_PAYLOAD + 1,
					     NULL, 0)), -EPROTO);
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_DESC, 1000, desc, 20)),
			 -ECONNRESET); /* promised 1000 bytes, sent 20 */
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_DESC, 20, desc, 20)),
			 -EPROTO); /* n_nics 0 */
	assert_int_equal(fake_fetch(b, frame(b, WIRE_VERSION, WIRE_DESC, 0, NULL, 0)), -EPROTO);
	b[0] = 'F';
	assert_int_equal(fake_fetch(b, 5), -ECONNRESET); /* half a header */
}

/* ---- endpoint handshake ----------------------------------------------- */

static void make_req(struct wire_connect_req *r, uint16_t n_qps, uint64_t token)
{
	uint16_t i;

	memset(r, 0, sizeof(*r));
	r->incarnation = 0x1111222233334444ull;
	r->token = token;
	r->target_incarnation = 0x5555666677778888ull;
	r->target_nic = 1;
	r->n_qps = n_qps;
	strcpy(r->nic.provider, "loop");
	memset(r->nic.addr.bytes, 0x42, NIC_ADDR_LEN);
	for (i = 0; i < n_qps && i < WIRE_MAX_EP_QPS; i++) {
		r->qps[i].qpn = 0x100u + i;
		r->qps[i].psn = 0x200000u + 7u * i;
	}
}

static void assert_req_equal(const struct wire_connect_req *a, const struct wire_connect_req *b)
{
	assert_int_equal(a->incarnation, b->incarnation);
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->target_incarnation, b->target_incarnation);
	assert_int_equal(a->target_nic, b->target_nic);
	assert_int_equal(a->n_qps, b->n_qps);
	assert_string_equal(a->nic.provider, b->nic.provider);
	assert_memory_equal(a->nic.addr.bytes, b->nic.addr.bytes, NIC_ADDR_LEN);
	assert_memory_equal(a->qps, b->qps, a->n_qps * sizeof(a->qps[0]));
}

static void expect_rep_for(const struct wire_connect_rep *rep, const struct wire_connect_req *req)
{
	struct wire_connect_rep want;

	memset(&want, 0, sizeof(want));
	fill_rep(req, &want);
	assert_int_equal(rep->token, want.token);
	assert_int_equal(rep->n_qps, want.n_qps);
	assert_memory_equal(rep->qps, want.qps, want.n_qps * sizeof(want.qps[0]));
}

static void assert_rep_zero(const struct wire_connect_rep *rep)
{
	static const struct wire_connect_rep zero;

	assert_memory_equal(rep, &zero, sizeof(*rep));
}

/* The last request each callback saw, read under the callbacks' lock. */
static struct wire_connect_req seen_req(struct ctx *x, int *connects)
{
	struct wire_connect_req r;

	pthread_mutex_lock(&x->lock);
	r = x->seen_req;
	*connects = x->connects;
	pthread_mutex_unlock(&x->lock);
	return r;
}

static struct wire_disconnect seen_disc(struct ctx *x, int *disconnects)
{
	struct wire_disconnect d;

	pthread_mutex_lock(&x->lock);
	d = x->seen_disc;
	*disconnects = x->disconnects;
	pthread_mutex_unlock(&x->lock);
	return d;
}

static int connects(struct ctx *x)
{
	int n;

	(void)seen_req(x, &n);
	return n;
}

static void test_connect(void **state)
{
	static const uint16_t sizes[] = { 1, 3, WIRE_MAX_EP_QPS };
	struct wire_disconnect d = { 0x1111222233334444ull, 1003 }, sd;
	struct wire_connect_req req, sr;
	struct wire_connect_rep rep;
	struct seg_desc desc;
	struct ctl c;
	struct ctx x;
	int i, n;

	(void)state;
	start_ops(&c, &x, 2, 3, on_connect, on_disconnect);
	for (i = 0; i < 3; i++) {
		make_req(&req, sizes[i], 1000u + sizes[i]);
		assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), 0);
		expect_rep_for(&rep, &req);
		sr = seen_req(&x, &n);
		assert_int_equal(n, i + 1);
		assert_req_equal(&sr, &req); /* exactly what the initiator sent */
	}
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), 0);
	sd = seen_disc(&x, &n);
	assert_int_equal(n, 1);
	assert_int_equal(sd.incarnation, d.incarnation);
	assert_int_equal(sd.token, d.token);
	/* GET_DESC is still served beside them. */
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &desc), 0);
	expect_desc(&desc, 2, 3);
	seg_desc_free(&desc);
	wait_served(&c, 5);
	assert_int_equal(counter(&c.refused), 0);

	/* A restart keeps the handlers ctl_set_ep_ops installed. */
	ctl_stop(&c);
	assert_int_equal(ctl_start(&c, NULL, describe, &x), 0);
	make_req(&req, 2, 77);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), 0);
	expect_rep_for(&rep, &req);
	assert_int_equal(connects(&x), 4);
	ctl_stop(&c);
}

/* The callbacks' errors reach the initiator as their negative errno. */
static void test_connect_errors(void **state)
{
	struct wire_disconnect d = { 1, 2 };
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct ctl c;
	struct ctx x;

	(void)state;
	start_ops(&c, &x, 1, 1, on_connect, on_disconnect);
	make_req(&req, 2, 42);

	set_ep_mode(&x, EP_FAIL);
	memset(&rep, 0xaa, sizeof(rep));
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -ESTALE);
	assert_rep_zero(&rep);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), -ENOENT);

	set_ep_mode(&x, EP_BAD_ERRNO);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EIO);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), -EIO);

	/* The server does not send a reply the initiator would refuse. */
	set_ep_mode(&x, EP_BAD_REP);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EINVAL);

	/* A reply for another endpoint, or with other QPs, is not ours. */
	set_ep_mode(&x, EP_WRONG_TOKEN);
	memset(&rep, 0xaa, sizeof(rep));
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EPROTO);
	assert_rep_zero(&rep);
	set_ep_mode(&x, EP_WRONG_N_QPS);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EPROTO);
	assert_rep_zero(&rep);
	wait_served(&c, 7);
	assert_int_equal(connects(&x), 5);

	/* What the target would refuse is not sent at all. */
	set_ep_mode(&x, EP_OK);
	req.n_qps = 0;
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EINVAL);
	req.n_qps = WIRE_MAX_EP_QPS + 1;
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EINVAL);
	req.n_qps = 2;
	req.nic.provider[0] = '\0';
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EINVAL);
	make_req(&req, 2, 42);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, NULL, &rep), -EINVAL);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, NULL), -EINVAL);
	assert_int_equal(ctl_connect(c.address, 0, &req, &rep), -EINVAL);
	assert_int_equal(ctl_connect("1.2.3:80", FETCH_MS, &req, &rep), -EINVAL);
	assert_int_equal(ctl_connect(NULL, FETCH_MS, &req, &rep), -EINVAL);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, NULL), -EINVAL);
	assert_int_equal(ctl_disconnect(c.address, -1, &d), -EINVAL);
	assert_int_equal(ctl_disconnect("localhost:0", FETCH_MS, &d), -EINVAL);
	assert_int_equal(connects(&x), 5);
	assert_int_equal(counter(&c.served), 7);
	assert_int_equal(counter(&c.refused), 0);
	ctl_stop(&c);
}

/* An engine without endpoint handlers says so instead of hanging up. */
static void test_ep_unsupported(void **state)
{
	struct wire_disconnect d = { 1, 2 };
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct ctl c;
	struct ctx x;

	(void)state;
	make_req(&req, 1, 9);
	start(&c, &x, 1, 1);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EOPNOTSUPP);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), -EOPNOTSUPP);
	wait_served(&c, 2);
	assert_int_equal(counter(&c.refused), 0);
	ctl_stop(&c);

	/* Each handler on its own. */
	start_ops(&c, &x, 1, 1, on_connect, NULL);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), 0);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), -EOPNOTSUPP);
	ctl_stop(&c);
	start_ops(&c, &x, 1, 1, NULL, on_disconnect);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), -EOPNOTSUPP);
	assert_int_equal(ctl_disconnect(c.address, FETCH_MS, &d), 0);
	ctl_stop(&c);
}

static uint64_t ka_seen;

static int on_keepalive(void *arg, uint64_t incarnation)
{
	(void)arg;
	__atomic_store_n(&ka_seen, incarnation, __ATOMIC_RELAXED);
	return incarnation == 7 ? -ENOENT : 0;
}

/* KEEPALIVE: the handler sees the incarnation and its errno comes back; no
 * handler is -EOPNOTSUPP; a nonzero reserved word is refused; nobody
 * listening is ECONNREFUSED (quietly: a dead peer is expected news). */
static void test_keepalive(void **state)
{
	uint8_t frame[WIRE_HDR_LEN + WIRE_KEEPALIVE_LEN], rep[WIRE_HDR_LEN];
	struct wire_disconnect bad = { 5, 1 };
	char gone[64];
	struct ctl c;
	struct ctx x;
	int fd;

	(void)state;
	start(&c, &x, 1, 1);
	assert_int_equal(ctl_keepalive(c.address, FETCH_MS, 5), -EOPNOTSUPP);
	ctl_stop(&c);
	memset(&c, 0, sizeof(c));
	ctl_set_keepalive(&c, on_keepalive);
	assert_int_equal(ctl_start(&c, NULL, describe, &x), 0);
	assert_int_equal(ctl_keepalive(c.address, FETCH_MS, 0x123456789abcdefull), 0);
	assert_int_equal(__atomic_load_n(&ka_seen, __ATOMIC_RELAXED), 0x123456789abcdefull);
	assert_int_equal(ctl_keepalive(c.address, FETCH_MS, 7), -ENOENT);
	/* The reserved word must be zero. */
	fd = raw_connect(c.address);
	wire_hdr_encode(frame, WIRE_KEEPALIVE, WIRE_KEEPALIVE_LEN);
	wire_disconnect_encode(&bad, frame + WIRE_HDR_LEN, WIRE_KEEPALIVE_LEN);
	raw_send(fd, frame, sizeof(frame));
	assert_true(recv(fd, rep, sizeof(rep), 0) <= 0); /* refused: hung up */
	close(fd);
	wait_refused(&c, 1);
	snprintf(gone, sizeof(gone), "%s", c.address);
	ctl_stop(&c);
	assert_int_equal(ctl_keepalive(gone, FETCH_MS, 5), -ECONNREFUSED);
}

/* No engine at the address, or one that never answers. */
static void test_ep_transport(void **state)
{
	struct wire_disconnect d = { 1, 2 };
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	struct ctl c;
	struct ctx x;
	char addr[64];
	int64_t t0;
	int fd;

	(void)state;
	make_req(&req, 1, 9);
	start_ops(&c, &x, 1, 1, on_connect, on_disconnect);
	memcpy(addr, c.address, sizeof(addr));
	ctl_stop(&c);
	assert_int_equal(ctl_connect(addr, FETCH_MS, &req, &rep), -ECONNREFUSED);
	assert_int_equal(ctl_disconnect(addr, FETCH_MS, &d), -ECONNREFUSED);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));
	t0 = now_ms();
	assert_int_equal(ctl_connect(addr, 200, &req, &rep), -ETIMEDOUT);
	assert_int_equal(ctl_disconnect(addr, 200, &d), -ETIMEDOUT);
	assert_true(now_ms() - t0 < 3000);
	close(fd);
}

static void send_frame(int fd, uint16_t type, const void *payload, uint32_t len)
{
	send_hdr(fd, WIRE_VERSION, type, len);
	if (len)
		raw_send(fd, payload, len);
}

/* Malformed handshake requests: refused, connection closed, no callback. */
static void test_ep_malformed(void **state)
{
	static const struct wire_connect_req full = { .n_qps = WIRE_MAX_EP_QPS };
	uint8_t p[256];
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	size_t max = wire_connect_req_size(&full), n;
	struct ctl c;
	struct ctx x;
	int64_t t0;
	int fd;

	(void)state;
	start_ops(&c, &x, 1, 1, on_connect, on_disconnect);

	/* One byte over the largest CONNECT_REQ: refused unread, at once
	 * (waiting for the payload would take the 2 s request deadline). */
	fd = raw_connect(c.address);
	t0 = now_ms();
	send_hdr(fd, WIRE_VERSION, WIRE_CONNECT_REQ, (uint32_t)max + 1);
	expect_closed(fd);
	assert_true(now_ms() - t0 < 1000);
	close(fd);
	wait_refused(&c, 1);
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_CONNECT_REQ, WIRE_MAX_PAYLOAD);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 2);

	/* The right size, but no QP. */
	make_req(&req, 1, 5);
	n = wire_connect_req_size(&req);
	assert_int_equal(wire_connect_req_encode(&req, p, sizeof(p)), 0);
	p[26] = 0;
	fd = raw_connect(c.address);
	send_frame(fd, WIRE_CONNECT_REQ, p, (uint32_t)n);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 3);

	/* A payload promised and cut short. */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_CONNECT_REQ, (uint32_t)n);
	raw_send(fd, p, 40);
	shutdown(fd, SHUT_WR);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 4);

	/* DISCONNECT one byte short (read, then refused) and one over (unread). */
	memset(p, 0, sizeof(p));
	fd = raw_connect(c.address);
	send_frame(fd, WIRE_DISCONNECT, p, WIRE_DISCONNECT_LEN - 1);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 5);
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_DISCONNECT, WIRE_DISCONNECT_LEN + 1);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 6);

	/* Replies are not requests. */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_CONNECT_REP, 0);
	expect_closed(fd);
	close(fd);
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_DISCONNECT_REP, 0);
	expect_closed(fd);
	close(fd);
	wait_refused(&c, 8);

	/* None reached a callback, and the server still answers. */
	assert_int_equal(connects(&x), 0);
	make_req(&req, WIRE_MAX_EP_QPS, 6);
	assert_int_equal(ctl_connect(c.address, FETCH_MS, &req, &rep), 0);
	expect_rep_for(&rep, &req);
	assert_int_equal(connects(&x), 1);
	assert_int_equal(counter(&c.refused), 8);
	ctl_stop(&c);
}

/* GET_DESC, CONNECT_REQ and DISCONNECT on one connection, sent at once. */
static void test_ep_one_connection(void **state)
{
	struct wire_disconnect d = { 3, 4 };
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	uint8_t out[512], hb[WIRE_HDR_LEN], p[256];
	struct seg_desc desc;
	struct wire_hdr h;
	size_t n = 0, rl;
	struct ctl c;
	struct ctx x;
	int fd;

	(void)state;
	start_ops(&c, &x, 1, 2, on_connect, on_disconnect);
	make_req(&req, 4, 11);
	rl = wire_connect_req_size(&req);
	wire_hdr_encode(out, WIRE_GET_DESC, 0);
	n += WIRE_HDR_LEN;
	wire_hdr_encode(out + n, WIRE_CONNECT_REQ, (uint32_t)rl);
	assert_int_equal(wire_connect_req_encode(&req, out + n + WIRE_HDR_LEN, rl), 0);
	n += WIRE_HDR_LEN + rl;
	wire_hdr_encode(out + n, WIRE_DISCONNECT, WIRE_DISCONNECT_LEN);
	assert_int_equal(wire_disconnect_encode(&d, out + n + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN), 0);
	n += WIRE_HDR_LEN + WIRE_DISCONNECT_LEN;

	fd = raw_connect(c.address);
	raw_send(fd, out, n);

	raw_recv(fd, hb, sizeof(hb));
	assert_int_equal(wire_hdr_decode(hb, sizeof(hb), &h), 0);
	assert_int_equal(h.type, WIRE_DESC);
	assert_true(h.payload_len <= sizeof(p));
	raw_recv(fd, p, h.payload_len);
	assert_int_equal(wire_desc_decode(p, h.payload_len, &desc), 0);
	expect_desc(&desc, 1, 2);
	seg_desc_free(&desc);

	raw_recv(fd, hb, sizeof(hb));
	assert_int_equal(wire_hdr_decode(hb, sizeof(hb), &h), 0);
	assert_int_equal(h.type, WIRE_CONNECT_REP);
	assert_true(h.payload_len <= sizeof(p));
	raw_recv(fd, p, h.payload_len);
	assert_int_equal(wire_connect_rep_decode(p, h.payload_len, &rep), 0);
	expect_rep_for(&rep, &req);

	raw_recv(fd, hb, sizeof(hb));
	assert_int_equal(wire_hdr_decode(hb, sizeof(hb), &h), 0);
	assert_int_equal(h.type, WIRE_DISCONNECT_REP);
	assert_int_equal(h.payload_len, 0);
	close(fd);
	wait_served(&c, 3);
	assert_int_equal(counter(&c.refused), 0);
	ctl_stop(&c);
}

/* ctl_connect against the fake server; the request it sent lands in f. */
static int fake_connect(struct fake *f, const void *reply, size_t len, uint16_t n_qps)
{
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	int rc;

	make_req(&req, n_qps, 0x7777);
	fake_start(f, reply, len);
	memset(&rep, 0xaa, sizeof(rep));
	rc = ctl_connect(f->address, FETCH_MS, &req, &rep);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	if (rc)
		assert_rep_zero(&rep);
	else
		expect_rep_for(&rep, &req);
	return rc;
}

/* A CONNECT_REP frame answering make_req(n_qps, 0x7777), then tweaked. */
static size_t rep_frame(uint8_t *b, uint64_t token, uint16_t n_qps)
{
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	size_t n;

	make_req(&req, n_qps, 0x7777);
	memset(&rep, 0, sizeof(rep));
	fill_rep(&req, &rep);
	rep.token = token;
	n = wire_connect_rep_size(&rep);
	wire_hdr_encode(b, WIRE_CONNECT_REP, (uint32_t)n);
	assert_int_equal(wire_connect_rep_encode(&rep, b + WIRE_HDR_LEN, n), 0);
	return WIRE_HDR_LEN + n;
}

static void test_connect_bad_replies(void **state)
{
	static const uint8_t estale[4] = { (uint8_t)-ESTALE, 0xff, 0xff, 0xff };
	struct wire_connect_req req;
	uint8_t b[256], want[256];
	struct fake f;
	size_t n;

	(void)state;
	/* The fake works, and the client sent exactly one encoded request. */
	assert_int_equal(fake_connect(&f, b, rep_frame(b, 0x7777, 3), 3), 0);
	make_req(&req, 3, 0x7777);
	n = wire_connect_req_size(&req);
	wire_hdr_encode(want, WIRE_CONNECT_REQ, (uint32_t)n);
	assert_int_equal(wire_connect_req_encode(&req, want + WIRE_HDR_LEN, n), 0);
	assert_int_equal(f.req_len, WIRE_HDR_LEN + n);
	assert_memory_equal(f.req, want, WIRE_HDR_LEN + n);

	assert_int_equal(fake_connect(&f, b, rep_frame(b, 0x7778, 3), 3), -EPROTO); /* token */
	/* n_qps: the reply is well-formed, but for another request. */
	n = rep_frame(b, 0x7777, 3);
	assert_int_equal(fake_connect(&f, b, n, 2), -EPROTO);
	assert_int_equal(fake_connect(&f, b, n, 4), -EPROTO);
	b[WIRE_HDR_LEN + 12] = 1; /* reserved */
	assert_int_equal(fake_connect(&f, b, n, 3), -EPROTO);

	assert_int_equal(fake_connect(&f, b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, estale, 4), 1),
			 -ESTALE);
	assert_int_equal(fake_connect(&f, b, frame(b, WIRE_VERSION, WIRE_DESC, 0, NULL, 0), 1),
			 -EPROTO);
	assert_int_equal(fake_connect(&f, b, frame(b, WIRE_VERSION, WIRE_DISCONNECT_REP, 0,
						   NULL, 0), 1), -EPROTO);
	/* Larger than any CONNECT_REP: refused before reading it. */
	assert_int_equal(fake_connect(&f, b, frame(b, WIRE_VERSION, WIRE_CONNECT_REP,
						   16 + (8 + NIC_QP_SECRET_LEN) * WIRE_MAX_EP_QPS + 1, NULL, 0), 1),
			 -EPROTO);
	n = rep_frame(b, 0x7777, 2);
	assert_int_equal(fake_connect(&f, b, n - 1, 2), -ECONNRESET); /* cut short */
	assert_int_equal(fake_connect(&f, NULL, 0, 2), -ECONNRESET);
}

static int fake_disconnect(struct fake *f, const void *reply, size_t len)
{
	struct wire_disconnect d = { 0x0102030405060708ull, 99 };
	int rc;

	fake_start(f, reply, len);
	rc = ctl_disconnect(f->address, FETCH_MS, &d);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	return rc;
}

static void test_disconnect_bad_replies(void **state)
{
	static const uint8_t enoent[4] = { (uint8_t)-ENOENT, 0xff, 0xff, 0xff };
	static const uint8_t want[WIRE_HDR_LEN + WIRE_DISCONNECT_LEN] = {
		'F', 'R', 'Y', '1', WIRE_VERSION, 0, WIRE_DISCONNECT, 0, WIRE_DISCONNECT_LEN, 0, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1, 99, 0, 0, 0, 0, 0, 0, 0,
	};
	uint8_t b[64];
	struct fake f;

	(void)state;
	assert_int_equal(fake_disconnect(&f, b, frame(b, WIRE_VERSION, WIRE_DISCONNECT_REP, 0,
						      NULL, 0)), 0);
	assert_int_equal(f.req_len, sizeof(want));
	assert_memory_equal(f.req, want, sizeof(want));
	assert_int_equal(fake_disconnect(&f, b, frame(b, WIRE_VERSION, WIRE_DISCONNECT_REP, 4,
						      "abcd", 4)), -EPROTO);
	assert_int_equal(fake_disconnect(&f, b, frame(b, WIRE_VERSION, WIRE_ERROR, 4, enoent, 4)),
			 -ENOENT);
	assert_int_equal(fake_disconnect(&f, b, frame(b, WIRE_VERSION, WIRE_CONNECT_REP, 0,
						      NULL, 0)), -EPROTO);
	assert_int_equal(fake_disconnect(&f, NULL, 0), -ECONNRESET);
}

static void test_bad_address(void **state)
{
	static const char *const bad[] = {
		"", "1.2.3.4", "1.2.3.4:", ":80", "1.2.3.4:0", "1.2.3.4:65536",
		"1.2.3.4:123456", "1.2.3.4:80x", "1.2.3.4: 80", "1.2.3.4:+80",
		"1.2.3.4:-1", "1.2.3:80", "256.0.0.1:80", "1.2.3.4.5:80",
		"no-such-host.invalid:80", "[::1]:80", "::1:80", " 1.2.3.4:80",
		"127.0.0.1:80:80",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:80",
	};
	struct seg_desc d;
	struct ctl c;
	struct ctx x;
	size_t i;

	(void)state;
	memset(&x, 0, sizeof(x));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&d, 0xaa, sizeof(d));
		assert_int_equal(ctl_fetch_desc(bad[i], FETCH_MS, &d), -EINVAL);
		assert_null(d.regions);
	}
	assert_int_equal(ctl_fetch_desc(NULL, FETCH_MS, &d), -EINVAL);
	assert_int_equal(ctl_fetch_desc("127.0.0.1:1", 0, &d), -EINVAL);
	assert_int_equal(ctl_fetch_desc("127.0.0.1:1", -5, &d), -EINVAL);
	assert_int_equal(ctl_fetch_desc("127.0.0.1:1", FETCH_MS, NULL), -EINVAL);

	/* The listen side wants a dotted IPv4 address; port 0 is fine there.
	 * (ctl_start keeps the endpoint handlers, so c starts zeroed.) */
	memset(&c, 0, sizeof(c));
	assert_int_equal(ctl_start(&c, "localhost:0", describe, &x), -EINVAL);
	ctl_stop(&c);
	assert_int_equal(ctl_start(&c, "127.0.0.1", describe, &x), -EINVAL);
	assert_int_equal(ctl_start(&c, "127.0.0.1:99999", describe, &x), -EINVAL);
	assert_int_equal(ctl_start(&c, "127.0.0.1:0", NULL, &x), -EINVAL);
	assert_int_equal(ctl_start(NULL, "127.0.0.1:0", describe, &x), -EINVAL);
	ctl_stop(&c);
}

static void test_start_stop(void **state)
{
	struct ctl c, c2;
	struct ctx x;
	char addr[64];

	(void)state;
	memset(&c, 0, sizeof(c));
	ctl_stop(&c); /* never started */
	ctl_stop(NULL);

	start(&c, &x, 1, 1);
	ctl_stop(&c);
	ctl_stop(&c); /* twice */
	assert_int_equal(c.listen_fd, -1);
	assert_int_equal(c.stop_fd, -1);

	/* An explicit port: taken while in use, free again after stop. */
	start(&c, &x, 1, 1);
	memcpy(addr, c.address, sizeof(addr));
	memset(&c2, 0, sizeof(c2));
	assert_int_equal(ctl_start(&c2, addr, describe, &x), -EADDRINUSE);
	ctl_stop(&c2);
	ctl_stop(&c);
	assert_int_equal(ctl_start(&c2, addr, describe, &x), 0);
	assert_string_equal(c2.address, addr);
	ctl_stop(&c2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fetch),
		cmocka_unit_test(test_fetch_large),
		cmocka_unit_test(test_fetch_errors_from_describe),
		cmocka_unit_test(test_fetch_closed_port),
		cmocka_unit_test(test_fetch_timeout),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_malformed_requests),
		cmocka_unit_test(test_several_requests),
		cmocka_unit_test(test_slow_client),
		cmocka_unit_test(test_stop_with_idle_client),
		cmocka_unit_test(test_bad_replies),
		cmocka_unit_test(test_connect),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_ep_unsupported),
		cmocka_unit_test(test_ep_transport),
		cmocka_unit_test(test_ep_malformed),
		cmocka_unit_test(test_ep_one_connection),
		cmocka_unit_test(test_connect_bad_replies),
		cmocka_unit_test(test_disconnect_bad_replies),
		cmocka_unit_test(test_bad_address),
		cmocka_unit_test(test_keepalive),
		cmocka_unit_test(test_start_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
