/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the control plane's streams (`make fuzz`): what
 * fuzz_wire's decoders see only as whole payloads, here as the bytes a
 * socket gives, read by the code that reads them.  The input's first byte
 * (mode) steers; the rest is the peer's side of a connection.
 *
 *   1. The client.  The rest is what a server answered, put in a socket
 *      pair and read with ctl_read_answer as the replies to a call
 *      (fetch, connect, disconnect, keepalive, notify: mode bits 2..4),
 *      one after the other while the connection stays in step.  With mode
 *      bit 0 the client has a key: the input starts with the server's
 *      AUTH_HELLO and AUTH_PROOF frames for ctl_auth_finish (mode bit 1:
 *      the harness writes the real proof over the input's); with bit 5
 *      every reply frame after it that parses is sealed by the harness (a
 *      peer that holds the key), else sent bare (one that does not).  A
 *      call in step returns 0 or a peer errno that keeps it in step, the
 *      output of one that fails is empty, and nothing waits for a byte
 *      that is not coming (every byte is in the socket, then its end).
 *
 *   2. The server.  A live ctl server (mode bit 0: one with a key) gets
 *      the rest as a client's stream over loopback (with a key and mode
 *      bit 1, after a real handshake, each frame sealed as bit 5 says),
 *      then the client's half close.  The server must answer only with
 *      frames that parse (and open, sealed), no more answers than
 *      requests, and close the connection at once: everything it needed
 *      was there, or never will be.
 *
 * With FERRY_FUZZ_SEEDS=<dir> the target writes a few valid streams into
 * <dir> and exits: the seeds follow the encoders.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/ctl/call.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/sock.h"
#include "runtime/ctl/wire.h"

#include "tests/fuzz/fuzz.h"

#define M_KEY 0x01      /* the client (or the server) has a key */
#define M_PROOF 0x02    /* the harness makes the handshake succeed */
#define M_SEAL 0x20     /* frames after the handshake sealed with the session */
#define MAX_ANSWERS 16
#define STREAM_MAX 65536 /* bytes the harness sends: inputs are smaller */
#define SERVER_CLOSE_MS 5000 /* the server closes a half-closed connection at once: slack */

static struct auth_key key;
static const uint8_t nonce_c[WIRE_AUTH_NONCE_LEN] = { 0x11, 0x22, 0x33 };

static void hello_bytes(const uint8_t nonce[WIRE_AUTH_NONCE_LEN], uint8_t b[WIRE_AUTH_HELLO_LEN])
{
	struct wire_auth_hello h = { .alg = WIRE_AUTH_ALG };

	memcpy(h.nonce, nonce, WIRE_AUTH_NONCE_LEN);
	CHECK(wire_auth_hello_encode(&h, b, WIRE_AUTH_HELLO_LEN) == 0);
}

/*
 * in as a sender with session s (NULL: bare) puts it on the wire, into
 * out (cap bytes): the frames that parse, one after the other, sealed;
 * from the first that does not, the bytes as they are.  Its length.
 */
static size_t seal_stream(struct auth_sess *s, const uint8_t *in, size_t len, uint8_t *out,
			  size_t cap, unsigned *frames)
{
	size_t off = 0, o = 0;
	struct wire_hdr h;

	*frames = 0;
	while (s && len - off >= WIRE_HDR_LEN && wire_hdr_decode(in + off, WIRE_HDR_LEN, &h) == 0 &&
	       h.payload_len <= len - off - WIRE_HDR_LEN &&
	       o + WIRE_HDR_LEN + h.payload_len + WIRE_TAG_LEN <= cap) {
		memcpy(out + o, in + off, WIRE_HDR_LEN + h.payload_len);
		auth_seal(s, out + o, WIRE_HDR_LEN, out + o + WIRE_HDR_LEN, h.payload_len,
			  out + o + WIRE_HDR_LEN + h.payload_len);
		off += WIRE_HDR_LEN + h.payload_len;
		o += WIRE_HDR_LEN + h.payload_len + WIRE_TAG_LEN;
		(*frames)++;
	}
	if (len - off > cap - o)
		len = off + (cap - o);
	memcpy(out + o, in + off, len - off);
	return o + len - off;
}

/* ---- 1. the client ---------------------------------------------------- */

static int decode_desc(const uint8_t *buf, size_t len, void *out)
{
	return wire_desc_decode(buf, len, out);
}

union answer {
	struct seg_desc desc;
	struct wire_connect_rep rep;
};

/* The call whose replies the input is (mode bits 2..4). */
static void call_of(uint8_t mode, struct ctl_call *call, union answer *out, uint8_t *frame)
{
	static const struct ctl_call ka = CTL_KEEPALIVE_CALL(NULL), disc = CTL_DISCONNECT_CALL(NULL);

	switch ((mode >> 2) & 7) {
	case 0:
	case 5:
		*call = (struct ctl_call){ .what = "fetch", .req_type = WIRE_GET_DESC,
					   .rep_type = WIRE_DESC, .rep_max = WIRE_DESC_MAX_LEN,
					   .decode = decode_desc, .out = &out->desc };
		break;
	case 1:
	case 6:
		ctl_connect_call_init(call, &out->rep, 0);
		break;
	case 2:
		*call = ka;
		break;
	case 3:
		*call = disc;
		break;
	default:
		*call = (struct ctl_call){ .what = "notify", .req_type = WIRE_NOTIFY_TO,
					   .rep_type = WIRE_NOTIFY_REP, .rep_max = 0 };
		break;
	}
	call->frame = frame;
}

/* One reply read: what it returned must fit how it left the connection. */
static void check_answer(const struct ctl_call *call, const union answer *out, int rc,
			 enum ex_state st)
{
	CHECK(rc <= 0 && rc >= -CTL_ERRNO_MAX);
	/* Everything is in the socket, then its end: nothing to wait for. */
	CHECK(rc != -ETIMEDOUT && rc != -ECANCELED);
	if (st == EX_SYNCED)
		CHECK(rc != -EPROTO && !ctl_closing_errno(rc));
	if (rc && call->out)
		CHECK(fuzz_all_zero(out, sizeof(*out)));
	if (rc == 0 && call->decode == decode_desc)
		CHECK(out->desc.n_nics >= 1 && out->desc.n_nics <= WIRE_MAX_NICS &&
		      out->desc.n_regions <= WIRE_MAX_REGIONS);
	if (rc == 0 && call->out && call->decode != decode_desc)
		CHECK(out->rep.n_qps >= 1 && out->rep.n_qps <= WIRE_MAX_EP_QPS);
}

/* The server's handshake as the input has it (the real proof with
 * M_PROOF), and the session a server with our key would then hold. */
static size_t client_handshake(uint8_t mode, const uint8_t *in, size_t len, uint8_t *out,
			       struct auth_sess *srv)
{
	const size_t hs_len = 2 * WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN + WIRE_AUTH_PROOF_LEN;
	uint8_t hc[WIRE_AUTH_HELLO_LEN];
	const uint8_t *hs = in + WIRE_HDR_LEN;

	memset(srv, 0, sizeof(*srv));
	if (len < hs_len)
		return 0;
	memcpy(out, in, hs_len);
	hello_bytes(nonce_c, hc);
	if (mode & M_PROOF)
		auth_proof2(&key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN,
			    out + hs_len - WIRE_AUTH_PROOF_LEN);
	if (mode & M_SEAL)
		auth_sess_init(srv, &key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN);
	return hs_len;
}

static void fuzz_client(uint8_t mode, const uint8_t *in, size_t len)
{
	static uint8_t wire[STREAM_MAX + 4096];
	uint8_t frame[WIRE_HDR_LEN + WIRE_NOTIFY_TO_MAX_LEN];
	struct auth_sess cs = { .on = false }, ss = { .on = false };
	struct ctl_call call;
	union answer out;
	uint64_t forged = 0;
	size_t n = 0, hs = 0;
	unsigned frames;
	int sv[2], rc = 0;

	if (len > STREAM_MAX)
		return;
	if (mode & M_KEY)
		hs = client_handshake(mode, in, len, wire, &ss);
	n = hs + seal_stream(ss.on ? &ss : NULL, in + hs, len - hs, wire + hs,
			     sizeof(wire) - hs, &frames);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(send(sv[1], wire, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n);
	CHECK(shutdown(sv[1], SHUT_WR) == 0);
	if (mode & M_KEY) {
		rc = ctl_auth_finish(sv[0], &key, nonce_c, sock_now_ms() + 1000, -1, "fuzz", &cs);
		CHECK(rc <= 0 && rc != -ETIMEDOUT);
		CHECK(rc == 0 ? cs.on : !cs.on);
		/* A proof the harness did not make cannot verify. */
		CHECK(rc != 0 || (mode & M_PROOF));
	}
	call_of(mode, &call, &out, frame);
	for (unsigned k = 0; !rc && k < MAX_ANSWERS; k++) {
		enum ex_state st;

		memset(&out, 0, sizeof(out));
		rc = ctl_read_answer(sv[0], &cs, sock_now_ms() + 1000, -1, &call, &st, &forged);
		check_answer(&call, &out, rc, st);
		if (rc == 0 && call.decode == decode_desc)
			seg_desc_free(&out.desc);
		if (st != EX_SYNCED)
			break;
		rc = 0;
	}
	/* Bare frames on a session never open; sealed ones all do. */
	if (cs.on && !ss.on)
		CHECK(cs.rx_seq == 0);
	close(sv[0]);
	close(sv[1]);
}

/* ---- 2. the server ---------------------------------------------------- */

struct srv {
	struct ctl c;
	bool started;
};

static struct srv servers[2]; /* [0] without a key, [1] with one */

static int on_describe(void *arg, struct seg_desc *d)
{
	(void)arg;
	d->incarnation = 7;
	d->n_nics = 1;
	snprintf(d->nics[0].provider, WIRE_PROVIDER_LEN, "tcp");
	d->n_regions = 1;
	d->regions = calloc(1, sizeof(*d->regions));
	if (!d->regions)
		return -ENOMEM;
	d->regions[0].addr = 0x10000;
	d->regions[0].len = 0x1000;
	return 0;
}

static int on_connect(void *arg, const struct wire_connect_req *req, struct wire_connect_rep *rep)
{
	(void)arg;
	if (req->target_nic)
		return -EINVAL;
	rep->token = req->token;
	rep->n_qps = req->n_qps;
	for (uint16_t i = 0; i < req->n_qps; i++)
		rep->qps[i].qpn = req->qps[i].qpn + 1;
	return 0;
}

static int on_disconnect(void *arg, const struct wire_disconnect *d)
{
	(void)arg;
	return d->token & 1 ? -ENOENT : 0;
}

static int on_keepalive(void *arg, uint64_t incarnation)
{
	(void)arg;
	return incarnation & 1 ? -ENOENT : 0;
}

static int on_notify(void *arg, const struct wire_notify *n)
{
	(void)arg;
	CHECK(n->len <= WIRE_NOTIFY_MAX && n->from[0]);
	return n->len & 1 ? -EAGAIN : 0;
}

static struct ctl *server(bool keyed)
{
	struct srv *s = &servers[keyed];

	if (!s->started) {
		ctl_set_ep_ops(&s->c, on_connect, on_disconnect);
		ctl_set_keepalive(&s->c, on_keepalive);
		ctl_set_notify(&s->c, on_notify);
		if (keyed)
			ctl_set_auth(&s->c, &key);
		CHECK(ctl_start(&s->c, "127.0.0.1:0", on_describe, NULL) == 0);
		s->started = true;
	}
	return &s->c;
}

static int dial(const struct ctl *c)
{
	struct sockaddr_in sin;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0 && sock_resolve_peer(c->address, &sin) == 0);
	CHECK(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	return fd;
}

static bool reply_type(uint16_t t)
{
	return t == WIRE_DESC || t == WIRE_ERROR || t == WIRE_CONNECT_REP ||
	       t == WIRE_DISCONNECT_REP || t == WIRE_KEEPALIVE_REP || t == WIRE_NOTIFY_REP ||
	       t == WIRE_AUTH_HELLO || t == WIRE_AUTH_PROOF;
}

/*
 * The server's answers: frames that parse (and open), up to EOF; after a
 * reset (cut) the last may be cut short.  A keyed server's refusal after
 * its proof is sealed with a session the harness does not have (the
 * input's own handshake): its last frame, an ERROR of 4 bytes and a tag.
 */
static unsigned check_replies(uint8_t *b, size_t n, struct auth_sess *cs, bool cut)
{
	size_t off = 0, tag = cs->on ? WIRE_TAG_LEN : 0;
	bool proof = false;
	unsigned count = 0;
	struct wire_hdr h;

	while (off < n) {
		if (cut && n - off < WIRE_HDR_LEN)
			return count;
		if (cut && wire_hdr_decode(b + off, WIRE_HDR_LEN, &h) == 0 &&
		    h.payload_len + tag > n - off - WIRE_HDR_LEN)
			return count;
		CHECK(n - off >= WIRE_HDR_LEN && wire_hdr_decode(b + off, WIRE_HDR_LEN, &h) == 0);
		if (proof && !cs->on && h.type == WIRE_ERROR &&
		    n - off == WIRE_HDR_LEN + 4 + WIRE_TAG_LEN)
			return count + 1;
		proof |= h.type == WIRE_AUTH_PROOF;
		CHECK(reply_type(h.type) && h.payload_len + tag <= n - off - WIRE_HDR_LEN);
		if (cs->on)
			CHECK(auth_open(cs, b + off, WIRE_HDR_LEN, b + off + WIRE_HDR_LEN,
					h.payload_len, b + off + WIRE_HDR_LEN + h.payload_len));
		if (h.type == WIRE_ERROR) {
			int32_t err = (int32_t)sock_get_le32(b + off + WIRE_HDR_LEN);

			CHECK(h.payload_len == 4 && err < 0 && err >= -CTL_ERRNO_MAX);
		}
		off += WIRE_HDR_LEN + h.payload_len + tag;
		count++;
	}
	return count;
}

/* Read to the server's EOF (it must come): how many bytes; *cut if it
 * came as a reset. */
static size_t drain(int fd, uint8_t *b, size_t cap, bool *cut)
{
	int64_t until = sock_now_ms() + SERVER_CLOSE_MS;
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = (int)(until - sock_now_ms());
		ssize_t r;

		CHECK(left > 0 && poll(&p, 1, left) == 1); /* else the server holds on */
		r = recv(fd, b + n, cap - n, 0);
		*cut = r < 0 && errno == ECONNRESET;
		if (r == 0 || *cut)
			return n;
		CHECK(r > 0 && n + (size_t)r < cap);
		n += (size_t)r;
	}
}

static void fuzz_server(uint8_t mode, const uint8_t *in, size_t len)
{
	static uint8_t wire[STREAM_MAX + 4096], back[1 << 20];
	bool keyed = mode & M_KEY, proven = keyed && (mode & M_PROOF);
	struct auth_sess cs = { .on = false };
	unsigned frames, answers;
	size_t n, got;
	bool cut = false;
	int fd;

	if (len > STREAM_MAX)
		return;
	fd = dial(server(keyed));
	if (proven)
		CHECK(ctl_auth_connect(fd, &key, sock_now_ms() + SERVER_CLOSE_MS, -1, "fuzz", &cs) == 0);
	n = seal_stream(cs.on && (mode & M_SEAL) ? &cs : NULL, in, len, wire, sizeof(wire),
			&frames);
	/* The server reads while we write: a refusal may close it early. */
	(void)sock_send_full(fd, -1, wire, n, sock_now_ms() + SERVER_CLOSE_MS);
	shutdown(fd, SHUT_WR);
	got = drain(fd, back, sizeof(back), &cut);
	answers = check_replies(back, got, &cs, cut);
	/* One answer a request at most (a refusal may come unasked). */
	CHECK(answers <= 1 + (len / WIRE_HDR_LEN));
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	fuzz_client(data[0], data + 1, size - 1);
	fuzz_server(data[0], data + 1, size - 1);
	return 0;
}

/* ---- seeds ------------------------------------------------------------ */

static void seed(const char *dir, const char *name, uint8_t mode, const uint8_t *b, size_t n)
{
	char file[256];

	snprintf(file, sizeof(file), "seed-%s", name);
	fuzz_seed_write(dir, file, &mode, 1, b, n);
}

/* A frame of type with payload p (len bytes) at b; its length. */
static size_t frame(uint8_t *b, uint16_t type, const void *p, size_t len)
{
	wire_hdr_encode(b, type, (uint32_t)len);
	if (len)
		memcpy(b + WIRE_HDR_LEN, p, len);
	return WIRE_HDR_LEN + len;
}

/* The server's handshake (its proof left zero: M_PROOF writes it). */
static size_t server_hello(uint8_t *b)
{
	uint8_t hs[WIRE_AUTH_HELLO_LEN], mac[WIRE_AUTH_PROOF_LEN] = { 0 }, nonce[32] = { 0x5a };
	size_t n;

	hello_bytes(nonce, hs);
	n = frame(b, WIRE_AUTH_HELLO, hs, sizeof(hs));
	return n + frame(b + n, WIRE_AUTH_PROOF, mac, sizeof(mac));
}

static void write_seeds(const char *dir)
{
	static uint8_t b[8192], p[4096];
	struct wire_connect_rep rep = { .token = 5, .n_qps = 2 };
	struct wire_connect_req req = { .token = 5, .n_qps = 2, .nic.provider = "tcp" };
	struct wire_notify nt = { .to_incarnation = 7, .from = "fuzz", .len = 2, .msg = "hi" };
	struct wire_disconnect d = { 7, 5 };
	struct seg_desc desc;
	size_t n, h;

	memset(&desc, 0, sizeof(desc));
	CHECK(on_describe(NULL, &desc) == 0);
	CHECK(wire_desc_encode(&desc, p, sizeof(p)) == 0);
	n = frame(b, WIRE_DESC, p, wire_desc_size(&desc));
	seed(dir, "desc", 0, b, n);
	h = server_hello(b);
	n = frame(b + h, WIRE_DESC, p, wire_desc_size(&desc));
	seed(dir, "desc-keyed", M_KEY | M_PROOF | M_SEAL, b, h + n);
	seg_desc_free(&desc);
	CHECK(wire_connect_rep_encode(&rep, p, sizeof(p)) == 0);
	n = frame(b, WIRE_CONNECT_REP, p, wire_connect_rep_size(&rep));
	seed(dir, "connect-rep", 1 << 2, b, n);
	n = frame(b, WIRE_KEEPALIVE_REP, NULL, 0);
	n += frame(b + n, WIRE_KEEPALIVE_REP, NULL, 0);
	seed(dir, "keepalive-reps", 2 << 2, b, n);
	p[0] = (uint8_t)-ENOENT;
	p[1] = p[2] = p[3] = 0xff;
	n = frame(b, WIRE_ERROR, p, 4);
	seed(dir, "error", 3 << 2, b, n);
	/* The server's side: requests. */
	n = frame(b, WIRE_GET_DESC, NULL, 0);
	CHECK(wire_connect_req_encode(&req, p, sizeof(p)) == 0);
	n += frame(b + n, WIRE_CONNECT_REQ, p, wire_connect_req_size(&req));
	CHECK(wire_disconnect_encode(&d, p, sizeof(p)) == 0);
	n += frame(b + n, WIRE_DISCONNECT, p, WIRE_DISCONNECT_LEN);
	d.token = 0;
	CHECK(wire_disconnect_encode(&d, p, sizeof(p)) == 0);
	n += frame(b + n, WIRE_KEEPALIVE, p, WIRE_KEEPALIVE_LEN);
	CHECK(wire_notify_to_encode(&nt, p, sizeof(p)) == 0);
	n += frame(b + n, WIRE_NOTIFY_TO, p, wire_notify_to_size(&nt));
	seed(dir, "requests", 4 << 2, b, n);
	seed(dir, "requests-keyed", M_KEY | M_PROOF | M_SEAL | 4 << 2, b, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FERRY_FUZZ_SEEDS");
	static const char secret[] = "fuzz-ctl-secret-of-at-least-32-bytes!";

	(void)argc;
	(void)argv;
	CHECK(auth_init() == 0);
	CHECK(auth_key_derive(secret, sizeof(secret) - 1, &key) == 0);
	if (dir) {
		write_seeds(dir);
		exit(0);
	}
	return 0;
}
