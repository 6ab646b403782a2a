/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the tcp provider's wire format (`make fuzz`).
 *
 * Every input is used twice:
 *
 *   1. The codec.  The input read as a stream of frames: tcp_frame_decode
 *      at each frame boundary (and tcp_hello_decode on every HELLO body and
 *      on the input's first bytes).  What decodes must hold the format's
 *      invariants and re-encode to the very same bytes (the encoding is
 *      canonical); what is refused must leave its output zeroed.
 *
 *   2. A live target.  A fresh QP of a real tcp context waits for its
 *      initiator; the harness dials it over loopback, sends a valid HELLO,
 *      then the input as the initiator's frames, and polls the target until
 *      it closes the connection.  So that the fuzzer reaches past the
 *      checks, the harness aims requests at a registered buffer: a request
 *      whose rkey has bit 0 set gets the buffer's real key and an address
 *      inside it or just past its end (addr modulo buffer + 64), and its
 *      seq the next expected one unless seq has bit 31 set.  The bytes
 *      around the buffer must never change, nothing may crash, and the
 *      target must let go of the connection in bounded time.  An input
 *      that starts with a HELLO is the connection's own first frame (no
 *      harness HELLO before it): the accept path's parser sees it, and
 *      with bit 0 of its flags set the harness writes the QP's real qpn
 *      and secret (and a zero MAC) into it, then clears the bit.
 *
 *   3. A live initiator.  A fresh QP of a second context dials a socket
 *      the harness plays the target on; it posts IWRS WRs (READs and
 *      WRITEs of fixed sizes into a guarded buffer), and the input is the
 *      target's side of the stream: after a valid HELLO (again unless
 *      the input starts with its own), the responses.  A response header
 *      with bit 0 of its flags set gets the seq of one of the posted WRs
 *      (seq modulo IWRS), with bit 1 (a READ_RESP with status OK) that
 *      WR's len; then both bits are cleared.  Every WR must complete exactly
 *      once and in order, a WR posted after the connection ended must
 *      flush at once, and no byte of the buffer outside the READs' ranges
 *      may change.
 *
 * With FERRY_FUZZ_SEEDS=<dir> the target writes a few valid streams into
 * <dir> and exits: the seeds follow the encoders.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qp/nic.h"
#include "qp/tcp/frame.h"
#include "qp/tcp/objects.h"
#include "qp/tcp/tcp.h"

#include "tests/fuzz/fuzz.h"

#define BUF 65536u
#define GUARD 4096u
#define MAX_POLLS 200000

/* ---- 1. the codec ------------------------------------------------------ */

static void check_frame(const struct tcp_frame *f, const uint8_t *in)
{
	uint8_t again[TCP_HDR_LEN];

	CHECK(f->type >= TCP_F_HELLO && f->type <= TCP_F_ACK);
	CHECK(f->len <= TCP_MAX_FRAME && f->status <= TCP_ST_MAX);
	if (f->type == TCP_F_WRITE || f->type == TCP_F_READ_REQ)
		CHECK(f->status == TCP_ST_OK && f->addr <= UINT64_MAX - f->len);
	else
		CHECK(f->rkey == 0 && f->addr == 0);
	if (f->type == TCP_F_HELLO)
		CHECK(f->len == TCP_HELLO_LEN && f->seq == 0);
	if (f->type == TCP_F_ACK || f->status)
		CHECK(f->len == 0);
	tcp_frame_encode(f, again);
	CHECK(memcmp(again, in, TCP_HDR_LEN) == 0);
}

static void fuzz_hello(const uint8_t *in, size_t len)
{
	struct tcp_hello h;
	uint8_t again[TCP_HELLO_LEN];

	if (tcp_hello_decode(in, len, &h)) {
		CHECK(fuzz_all_zero(&h, sizeof(h)));
		return;
	}
	CHECK(len == TCP_HELLO_LEN && h.qpn);
	CHECK(h.max_frame >= TCP_MIN_FRAME && h.max_frame <= TCP_MAX_FRAME);
	tcp_hello_encode(&h, again);
	CHECK(memcmp(again, in, TCP_HELLO_LEN) == 0);
}

/* A peer's NIC address (from its descriptor or CONNECT_REQ): "TCP1", an
 * IPv4 address one can dial and a port, the rest zero; what decodes is
 * those bytes, and a refusal leaves nothing decoded. */
static void fuzz_addr(const uint8_t *in, size_t len)
{
	struct nic_addr a;
	struct sockaddr_in sin;

	if (len < NIC_ADDR_LEN)
		return;
	memcpy(a.bytes, in, NIC_ADDR_LEN);
	if (tcp_addr_decode(&a, &sin)) {
		CHECK(fuzz_all_zero(&sin, sizeof(sin))); /* nothing half decoded */
		return;
	}
	/* One we may dial: not 0.0.0.0/8 (our own loopback), multicast, 240/4. */
	CHECK(sin.sin_family == AF_INET && sin.sin_port != 0);
	CHECK(in[4] != 0 && in[4] < 224);
	CHECK(!memcmp(in, "TCP1", 4) && !memcmp(in + 4, &sin.sin_addr.s_addr, 4) &&
	      !memcmp(in + 8, &sin.sin_port, 2) && fuzz_all_zero(in + 10, NIC_ADDR_LEN - 10));
}

static void fuzz_codec(const uint8_t *in, size_t len)
{
	size_t off = 0;

	fuzz_addr(in, len);
	fuzz_hello(in, len < TCP_HELLO_LEN ? len : TCP_HELLO_LEN);
	while (off < len) {
		struct tcp_frame f;
		uint32_t pay;

		if (tcp_frame_decode(in + off, len - off, &f)) {
			CHECK(fuzz_all_zero(&f, sizeof(f)));
			return;
		}
		check_frame(&f, in + off);
		off += TCP_HDR_LEN;
		pay = tcp_frame_payload(&f);
		if (f.type == TCP_F_HELLO && len - off >= TCP_HELLO_LEN)
			fuzz_hello(in + off, TCP_HELLO_LEN);
		if (pay > len - off)
			return;
		off += pay;
	}
}

/* ---- 2. a live target -------------------------------------------------- */

static const struct nic_provider *P = &nic_tcp_provider;
static struct nic *ctx;
static struct nic_cq *cq;
static struct nic_mr mr;
static uint8_t *mem;     /* GUARD, BUF registered, GUARD */
static uint8_t *out;     /* the stream we send: HELLO, then the input, aimed */

static void target_init(void)
{
	if (ctx)
		return;
	CHECK(P->open("tcp@127.0.0.1", &ctx) == 0);
	CHECK(P->cq_create(ctx, 64, &cq) == 0);
	mem = malloc(BUF + 2 * GUARD);
	out = malloc(TCP_HDR_LEN + TCP_HELLO_LEN + (1u << 20));
	CHECK(mem && out);
	memset(mem, 0x5c, BUF + 2 * GUARD);
	CHECK(P->reg_mr(ctx, mem + GUARD, BUF, NIC_ACCESS_ALL, &mr) == 0);
}

/* Point the input's requests at the buffer (see the top); returns its length. */
static size_t aim(const uint8_t *in, size_t len, uint8_t *dst, uint32_t psn)
{
	uint32_t n = 0;
	size_t off = 0;

	memmove(dst, in, len);
	while (off + TCP_HDR_LEN <= len) {
		struct tcp_frame f;

		if (tcp_frame_decode(dst + off, len - off, &f))
			break;
		if (f.type == TCP_F_WRITE || f.type == TCP_F_READ_REQ) {
			if (f.rkey & 1) {
				f.rkey = mr.rkey;
				f.addr = (uintptr_t)(mem + GUARD) + f.addr % (BUF + 64);
			}
			if (!(f.seq & 0x80000000u))
				f.seq = psn + n;
			n++;
			tcp_frame_encode(&f, dst + off);
		}
		off += TCP_HDR_LEN + tcp_frame_payload(&f);
	}
	return len;
}

static int dial(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(tcp_port(ctx)) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;

	CHECK(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EINPROGRESS);
	return fd;
}

/* Send the stream, poll the target, drop its answers, until it hangs up. */
static void converse(int fd, const uint8_t *buf, size_t len)
{
	struct nic_wc wc[8];
	size_t sent = 0;
	int shut = 0;

	for (int i = 0; i < MAX_POLLS; i++) {
		uint8_t sink[4096];
		ssize_t r;

		if (sent < len) {
			r = send(fd, buf + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (r > 0)
				sent += (size_t)r;
			else if (r < 0 && errno != EAGAIN && errno != ENOTCONN)
				sent = len; /* the target hung up already */
		} else if (!shut) {
			shutdown(fd, SHUT_WR);
			shut = 1;
		}
		CHECK(P->poll(cq, 8, wc) == 0);
		r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN))
			return;
	}
	abort(); /* the target held on to a finished conversation */
}

/* An input that starts with a HELLO brings its own (see the top): with
 * bit 0 of its flags set, it is made to name qpn and secret, with no MAC. */
static bool own_hello(uint8_t *buf, size_t len, uint32_t qpn, const uint8_t *secret)
{
	struct tcp_hello h;

	if (len < TCP_HDR_LEN + TCP_HELLO_LEN || buf[0] != TCP_F_HELLO)
		return false;
	if (!(buf[2] & 1))
		return true;
	buf[2] &= (uint8_t)~1u;
	if (tcp_hello_decode(buf + TCP_HDR_LEN, TCP_HELLO_LEN, &h) == 0) {
		h.qpn = qpn;
		memcpy(h.secret, secret, TCP_SECRET_LEN);
		memset(h.mac, 0, TCP_MAC_LEN);
		tcp_hello_encode(&h, buf + TCP_HDR_LEN);
	}
	return true;
}

static void fuzz_target(const uint8_t *in, size_t len)
{
	struct nic_qp_info me = { .qpn = 4242, .psn = 100 }, it;
	struct tcp_frame hf = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
	struct tcp_hello h = { .max_frame = TCP_MAX_FRAME };
	struct nic_addr peer;
	struct nic_qp *qp;
	size_t n;
	int fd;

	if (len > (1u << 20))
		return;
	target_init();
	memset(me.secret, 0x33, sizeof(me.secret));
	P->addr(ctx, &peer); /* where the initiator would be: any tcp address */
	CHECK(P->qp_create(ctx, cq, 1, &qp) == 0);
	CHECK(P->qp_connect(qp, &peer, &me) == 0);
	P->qp_info(qp, &it);
	h.qpn = it.qpn;
	memcpy(h.secret, it.secret, sizeof(h.secret));
	tcp_frame_encode(&hf, out);
	tcp_hello_encode(&h, out + TCP_HDR_LEN);
	memcpy(out + TCP_HDR_LEN + TCP_HELLO_LEN, in, len);
	if (own_hello(out + TCP_HDR_LEN + TCP_HELLO_LEN, len, it.qpn, it.secret))
		n = aim(out + TCP_HDR_LEN + TCP_HELLO_LEN, len, out, me.psn);
	else
		n = TCP_HDR_LEN + TCP_HELLO_LEN +
		    aim(out + TCP_HDR_LEN + TCP_HELLO_LEN, len, out + TCP_HDR_LEN + TCP_HELLO_LEN, me.psn);
	fd = dial();
	converse(fd, out, n);
	close(fd);
	P->qp_destroy(qp);
	for (unsigned i = 0; i < GUARD; i++)
		CHECK(mem[i] == 0x5c && mem[GUARD + BUF + i] == 0x5c);
}

/* ---- 3. a live initiator ----------------------------------------------- */

#define IWRS 8
#define PSN_LISTEN 0x80000000u /* qp_info's "dial me" bit (qp/tcp/objects.h) */
static const uint8_t iop[IWRS] = { NIC_OP_WRITE, NIC_OP_READ, NIC_OP_WRITE, NIC_OP_READ,
				   NIC_OP_READ, NIC_OP_WRITE, NIC_OP_WRITE, NIC_OP_READ };
static const uint32_t ilen[IWRS] = { 64, 100, 0, 0, 4096, 300, 4096, 8 };
static struct nic *ictx;
static struct nic_cq *icq;
static struct nic_mr imr;
static uint8_t *imem;    /* GUARD, BUF registered (the WRs' buffers), GUARD */
static int lfd = -1;     /* where the initiator dials: the harness's target */
static struct nic_addr laddr;

static void initiator_init(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);

	if (ictx)
		return;
	CHECK(P->open("tcp@127.0.0.1", &ictx) == 0);
	CHECK(P->cq_create(ictx, 64, &icq) == 0);
	imem = malloc(BUF + 2 * GUARD);
	CHECK(imem);
	memset(imem, 0x5c, BUF + 2 * GUARD);
	CHECK(P->reg_mr(ictx, imem + GUARD, BUF, NIC_ACCESS_ALL, &imr) == 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0);
	CHECK(getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
	memcpy(laddr.bytes, "TCP1", 4); /* qp/tcp's nic_addr: magic, IPv4, port */
	memcpy(laddr.bytes + 4, &sa.sin_addr.s_addr, 4);
	memcpy(laddr.bytes + 8, &sa.sin_port, 2);
}

/* WR k's bytes: its own slot of the buffer, so that a READ_RESP that
 * overruns its WR lands where no WR may write. */
static uint32_t wr_off(unsigned k)
{
	return k * (BUF / IWRS);
}

/* Is byte off of the buffer a READ's (the target's to fill)? */
static bool in_read(uint32_t off)
{
	unsigned k = off / (BUF / IWRS);

	return iop[k] == NIC_OP_READ && off - wr_off(k) < ilen[k];
}

/* Aim the input's responses (see the top) at the WRs, seq from psn. */
static void aim_responses(uint8_t *buf, size_t len, uint32_t psn)
{
	size_t off = 0;

	while (off + TCP_HDR_LEN <= len) {
		struct tcp_frame f;
		uint8_t aim = buf[off + 2] & 3;

		buf[off + 2] &= (uint8_t)~3u;
		if (tcp_frame_decode(buf + off, len - off, &f))
			return;
		if (aim && (f.type == TCP_F_ACK || f.type == TCP_F_READ_RESP)) {
			unsigned k = f.seq % IWRS;

			if (aim & 1)
				f.seq = psn + k;
			if ((aim & 2) && f.type == TCP_F_READ_RESP && f.status == TCP_ST_OK)
				f.len = ilen[k];
			tcp_frame_encode(&f, buf + off);
		}
		off += TCP_HDR_LEN + tcp_frame_payload(&f);
	}
}

/* Play the target: send the stream, drop the initiator's frames, poll its
 * CQ; every WR completes once, in order, before the initiator hangs up. */
static void converse_init(int fd, const uint8_t *buf, size_t len, uint32_t qpn)
{
	unsigned done = 0;
	size_t sent = 0;
	int shut = 0, eof = 0;

	for (int i = 0; i < MAX_POLLS; i++) {
		struct nic_wc wc[8];
		uint8_t sink[8192];
		ssize_t r;
		int m;

		if (sent < len) {
			r = send(fd, buf + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (r > 0)
				sent += (size_t)r;
			else if (r < 0 && errno != EAGAIN)
				sent = len; /* the initiator hung up already */
		} else if (!shut) {
			shutdown(fd, SHUT_WR);
			shut = 1;
		}
		m = P->poll(icq, 8, wc);
		CHECK(m >= 0);
		for (int k = 0; k < m; k++) {
			CHECK(wc[k].wr_id == done && wc[k].qp_num == qpn); /* once, in order */
			CHECK(wc[k].status <= NIC_WC_REM_PERM_ERR);
			done++;
		}
		r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN))
			eof = 1;
		if (eof && done == IWRS)
			return;
	}
	abort(); /* a WR never completed, or the initiator held on */
}

static void fuzz_initiator(const uint8_t *in, size_t len)
{
	struct nic_qp_info rqp = { .qpn = 4243, .psn = PSN_LISTEN }, me;
	struct tcp_frame hf = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
	struct tcp_hello h = { .max_frame = TCP_MAX_FRAME };
	struct nic_wr wr[IWRS + 1], *bad;
	struct nic_wc wc;
	struct nic_qp *qp;
	uint8_t *s = out;
	size_t n = len;
	int fd;

	if (len > (1u << 20))
		return;
	initiator_init();
	memset(rqp.secret, 0x44, sizeof(rqp.secret));
	CHECK(P->qp_create(ictx, icq, IWRS + 1, &qp) == 0);
	/* As the engine does: our info goes out (to the target) first; a QP
	 * whose info nobody had is a target's and does not dial. */
	P->qp_info(qp, &me);
	CHECK(P->qp_connect(qp, &laddr, &rqp) == 0); /* dials, says HELLO */
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0);
	for (unsigned k = 0; k < IWRS; k++)
		wr[k] = (struct nic_wr){ .next = k + 1 < IWRS ? &wr[k + 1] : NULL, .wr_id = k,
					 .local = (uintptr_t)imem + GUARD + wr_off(k),
					 .remote = 0x10000 + wr_off(k), .len = ilen[k],
					 .lkey = imr.lkey, .rkey = 1, .op = iop[k], .signaled = 1 };
	CHECK(P->post(qp, wr, &bad) == 0);
	/* The stream: a valid HELLO unless the input has its own, then the input. */
	memcpy(out + TCP_HDR_LEN + TCP_HELLO_LEN, in, len);
	if (own_hello(out + TCP_HDR_LEN + TCP_HELLO_LEN, len, me.qpn, me.secret)) {
		s = out + TCP_HDR_LEN + TCP_HELLO_LEN;
	} else {
		h.qpn = me.qpn;
		memcpy(h.secret, me.secret, sizeof(h.secret));
		tcp_frame_encode(&hf, out);
		tcp_hello_encode(&h, out + TCP_HDR_LEN);
		n += TCP_HDR_LEN + TCP_HELLO_LEN;
	}
	aim_responses(s, n, me.psn);
	converse_init(fd, s, n, me.qpn);
	/* The connection is over: the QP is in the error state. */
	wr[IWRS] = (struct nic_wr){ .wr_id = 99, .op = NIC_OP_WRITE, .signaled = 0 };
	CHECK(P->post(qp, &wr[IWRS], &bad) == 0);
	CHECK(P->poll(icq, 1, &wc) == 1 && wc.wr_id == 99 && wc.status == NIC_WC_FLUSH_ERR);
	close(fd);
	P->qp_destroy(qp);
	for (uint32_t i = 0; i < BUF + 2 * GUARD; i++) {
		if (i >= GUARD && i < GUARD + BUF && in_read(i - GUARD))
			imem[i] = 0x5c; /* the target's bytes: back to the pattern */
		CHECK(imem[i] == 0x5c);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_codec(data, size);
	fuzz_target(data, size);
	fuzz_initiator(data, size);
	return 0;
}

/* ---- seeds ------------------------------------------------------------- */

static size_t put(uint8_t *buf, uint8_t type, uint32_t len, uint32_t seq, uint32_t rkey,
		  uint64_t addr)
{
	struct tcp_frame f = { .type = type, .len = len, .seq = seq, .rkey = rkey, .addr = addr };

	tcp_frame_encode(&f, buf);
	memset(buf + TCP_HDR_LEN, 0xa5, tcp_frame_payload(&f));
	return TCP_HDR_LEN + tcp_frame_payload(&f);
}

static void seed(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
	char file[256];

	snprintf(file, sizeof(file), "seed-tcp-%s", name);
	fuzz_seed_write(dir, file, NULL, 0, buf, len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FERRY_FUZZ_SEEDS");
	static uint8_t b[8192];
	size_t n;

	(void)argc;
	(void)argv;
	if (!dir)
		return 0;
	n = put(b, TCP_F_WRITE, 100, 0, 1, 64);
	seed(dir, "write", b, n);
	n = put(b, TCP_F_READ_REQ, 4096, 0, 1, 0);
	seed(dir, "read", b, n);
	n = put(b, TCP_F_WRITE, 0, 0, 0, 0);
	n += put(b + n, TCP_F_READ_REQ, 200, 0, 1, 1000);
	n += put(b + n, TCP_F_WRITE, 300, 0, 1, 1100);
	n += put(b + n, TCP_F_READ_REQ, 64, 0, 1, BUF - 32);
	seed(dir, "mixed", b, n);
	n = put(b, TCP_F_WRITE, 64, 0, 2, 0); /* a key that is not the buffer's */
	seed(dir, "badkey", b, n);
	n = put(b, TCP_F_READ_RESP, 0, 0, 0, 0); /* a response where requests go */
	seed(dir, "response", b, n);
	{
		struct tcp_frame f = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
		struct tcp_hello h = { .qpn = 1, .max_frame = TCP_MAX_FRAME };

		tcp_frame_encode(&f, b);
		tcp_hello_encode(&h, b + TCP_HDR_LEN);
		seed(dir, "hello", b, TCP_HDR_LEN + TCP_HELLO_LEN);
		b[2] |= 1; /* made the QP's own, then a WRITE */
		n = TCP_HDR_LEN + TCP_HELLO_LEN;
		n += put(b + n, TCP_F_WRITE, 100, 0, 1, 64);
		seed(dir, "own-hello", b, n);
	}
	/* The initiator's side: every WR answered, the responses aimed. */
	n = 0;
	for (unsigned k = 0; k < IWRS; k++) {
		bool read = iop[k] == NIC_OP_READ;

		if (!read && k + 1 < IWRS && iop[k + 1] == NIC_OP_WRITE)
			continue; /* one ACK answers a run of WRITEs */
		put(b + n, read ? TCP_F_READ_RESP : TCP_F_ACK, read ? ilen[k] : 0, k, 0, 0);
		b[n + 2] |= 3; /* aimed: seq and len */
		n += TCP_HDR_LEN + (read ? ilen[k] : 0);
	}
	seed(dir, "responses", b, n);
	memset(b, 0, NIC_ADDR_LEN);
	memcpy(b, "TCP1\x7f\0\0\x01\x1b\x58", 10); /* 127.0.0.1:7000 */
	seed(dir, "addr", b, NIC_ADDR_LEN);
	/* Refused: port 0; the wildcard (a dial of it reaches our own host). */
	memcpy(b, "TCP1\x7f\0\0\x01\0\0", 10);
	seed(dir, "addr-port0", b, NIC_ADDR_LEN);
	memcpy(b, "TCP1\0\0\0\0\x1b\x58", 10);
	seed(dir, "addr-wildcard", b, NIC_ADDR_LEN);
	/* A READ_RESP longer than its READ (the WR's seq, not its len). */
	n = put(b, TCP_F_ACK, 0, 0, 0, 0);
	b[2] |= 1;
	n += put(b + n, TCP_F_READ_RESP, 200, 1, 0, 0);
	b[TCP_HDR_LEN + 2] |= 1;
	seed(dir, "read-overrun", b, n);
	exit(0);
}
