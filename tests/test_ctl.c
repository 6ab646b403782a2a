/* SPDX-License-Identifier: MIT */
/*
 * Control thread: fetch a descriptor over loopback TCP, refused and
 * malformed requests, timeouts, bad addresses, start/stop edge cases.
 * Runs under TSan too: the describe callback reads its mode with atomics
 * because sockets are not a happens-before edge TSan can see.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/ctl.h"

#define FETCH_MS 3000

enum mode { MODE_OK, MODE_FAIL, MODE_INVALID, MODE_HUGE };

struct ctx {
	int mode;        /* enum mode; atomic */
	uint16_t n_nics; /* fixed before ctl_start */
	uint32_t n_regions;
	int calls;       /* atomic */
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

static void set_mode(struct ctx *x, enum mode m)
{
	__atomic_store_n(&x->mode, (int)m, __ATOMIC_RELAXED);
}

static uint64_t counter(uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* The server counts after it has sent or closed: give it a moment. */
static void wait_counter(uint64_t *p, uint64_t want)
{
	int64_t end = now_ms() + 3000;

	while (counter(p) < want && now_ms() < end)
		usleep(1000);
	assert_int_equal(counter(p), want);
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

static void start(struct ctl *c, struct ctx *x, uint16_t n_nics, uint32_t n_regions)
{
	memset(x, 0, sizeof(*x));
	x->n_nics = n_nics;
	x->n_regions = n_regions;
	assert_int_equal(ctl_start(c, NULL, describe, x), 0);
	assert_int_equal(strncmp(c->address, "127.0.0.1:", 10), 0);
	assert_true(atoi(c->address + 10) > 0);
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
	wait_counter(&c.served, 1);

	/* "localhost" resolves too. */
	snprintf(local, sizeof(local), "localhost:%s", strrchr(c.address, ':') + 1);
	assert_int_equal(ctl_fetch_desc(local, FETCH_MS, &d), 0);
	expect_desc(&d, 3, 7);
	seg_desc_free(&d);
	wait_counter(&c.served, 2);
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
	start(&c, &x, 8, 20000);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS * 3, &d), 0);
	expect_desc(&d, 8, 20000);
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
	wait_counter(&c.served, 4);
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
	wait_counter(&c.refused, 1);

	/* The listener survives and still answers properly. */
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	expect_desc(&d, 2, 3);
	seg_desc_free(&d);
	wait_counter(&c.served, 1);
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
	wait_counter(&c.refused, 1);

	/* A well-formed frame of a type the server does not take. */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_DESC, 0);
	expect_closed(fd);
	close(fd);
	wait_counter(&c.refused, 2);

	/* GET_DESC with a payload (not read: the connection is dropped). */
	fd = raw_connect(c.address);
	send_hdr(fd, WIRE_VERSION, WIRE_GET_DESC, 4);
	raw_send(fd, "abcd", 4);
	expect_closed(fd);
	close(fd);
	wait_counter(&c.refused, 3);

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
	wait_counter(&c.refused, 4);

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
	wait_counter(&c.served, 3);
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
	wait_counter(&c.refused, 1);
	assert_int_equal(ctl_fetch_desc(c.address, FETCH_MS, &d), 0);
	seg_desc_free(&d);
	ctl_stop(&c);
}

/* ctl_stop must not wait for a client that holds its connection open. */
static void test_stop_with_idle_client(void **state)
{
	struct ctl c;
	struct ctx x;
	int64_t t0;
	int fd;

	(void)state;
	start(&c, &x, 1, 1);
	fd = raw_connect(c.address);
	raw_send(fd, "FR", 2);
	usleep(50000); /* let the server pick it up and block on it */
	t0 = now_ms();
	ctl_stop(&c);
	assert_true(now_ms() - t0 < 1000);
	close(fd);
}

/* ---- a fake server for the client's side of malformed replies -------- */

struct fake {
	int lfd;
	char address[64];
	uint8_t reply[64];
	size_t len;
	pthread_t thread;
};

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	uint8_t req[WIRE_HDR_LEN];
	size_t done = 0;
	ssize_t n;
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	while (done < sizeof(req)) {
		n = recv(fd, req + done, sizeof(req) - done, 0);
		if (n <= 0)
			break;
		done += (size_t)n;
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

	/* The listen side wants a dotted IPv4 address; port 0 is fine there. */
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
		cmocka_unit_test(test_bad_address),
		cmocka_unit_test(test_start_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
