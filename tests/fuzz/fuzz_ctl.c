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
 *      With mode bit 6 the same stream also answers ctl_call_many
 *      (many.c): one pipe of 4 requests, of the kinds mode bits 2..4 name
 *      and the next ones after it, written back to back on a loopback
 *      connection to a thread that plays the server (it sends the stream,
 *      the proof and seals made for the client's real hello), and every
 *      answer must come out as the one-at-a-time reader of 1. had it (the
 *      ones never answered: the error that ended the connection).
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
#include <pthread.h>
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
#define M_MANY 0x40     /* also through many.c: MANY_REQS requests pipelined on one connection */
#define MANY_REQS 4
/* many.c gives a frame begun 250 ms to come whole (CTL_FRAME_MS): a stream
 * this short goes in one send, so a descheduled harness thread cannot
 * leave half a frame behind (a timeout the one-at-a-time reader, with
 * every byte in its socket pair, never sees). */
#define MANY_STREAM_MAX 16384
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

/* Which call answer k of the input replies to: mode bits 2..4, the same
 * for every answer, or with M_MANY the next kind for each. */
static unsigned kind_of(uint8_t mode, unsigned k)
{
	return ((unsigned)(mode >> 2) + (mode & M_MANY ? k : 0)) & 7;
}

/* The call of a kind (kind_of). */
static void call_of(unsigned kind, struct ctl_call *call, union answer *out, uint8_t *frame)
{
	static const struct ctl_call ka = CTL_KEEPALIVE_CALL(NULL), disc = CTL_DISCONNECT_CALL(NULL);

	switch (kind) {
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
static size_t client_handshake(uint8_t mode, const uint8_t *hc, const uint8_t *in, size_t len,
			       uint8_t *out, struct auth_sess *srv)
{
	const size_t hs_len = 2 * WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN + WIRE_AUTH_PROOF_LEN;
	const uint8_t *hs = in + WIRE_HDR_LEN;

	memset(srv, 0, sizeof(*srv));
	if (len < hs_len)
		return 0;
	memcpy(out, in, hs_len);
	if (mode & M_PROOF)
		auth_proof2(&key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN,
			    out + hs_len - WIRE_AUTH_PROOF_LEN);
	if (mode & M_SEAL)
		auth_sess_init(srv, &key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN);
	return hs_len;
}

/* The server's side of the stream for a client whose hello is hc (with
 * M_KEY): the input, its handshake's proof made real with M_PROOF, the
 * frames after it sealed with M_SEAL.  Its length, in wire (cap bytes). */
static size_t server_stream(uint8_t mode, const uint8_t *hc, const uint8_t *in, size_t len,
			    uint8_t *wire, size_t cap)
{
	struct auth_sess ss = { .on = false };
	size_t hs = 0;
	unsigned frames;

	if (mode & M_KEY)
		hs = client_handshake(mode, hc, in, len, wire, &ss);
	return hs + seal_stream(ss.on ? &ss : NULL, in + hs, len - hs, wire + hs, cap - hs,
				&frames);
}

/* What a client reading the answers one at a time got: the handshake's
 * rc (0 without a key), then rcs[0..n) (the last one ended it unless
 * synced == n). */
struct answers {
	int auth;
	unsigned n, synced;
	int rcs[MAX_ANSWERS];
};

static void fuzz_client(uint8_t mode, const uint8_t *in, size_t len, struct answers *ref)
{
	static uint8_t wire[STREAM_MAX + 4096];
	uint8_t frame[WIRE_HDR_LEN + WIRE_NOTIFY_TO_MAX_LEN], hc[WIRE_AUTH_HELLO_LEN];
	unsigned max = mode & M_MANY ? MANY_REQS : MAX_ANSWERS;
	struct auth_sess cs = { .on = false };
	struct ctl_call call;
	union answer out;
	uint64_t forged = 0;
	size_t n;
	int sv[2], rc = 0;

	memset(ref, 0, sizeof(*ref));
	if (len > STREAM_MAX)
		return;
	hello_bytes(nonce_c, hc);
	n = server_stream(mode, hc, in, len, wire, sizeof(wire));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(send(sv[1], wire, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n);
	CHECK(shutdown(sv[1], SHUT_WR) == 0);
	if (mode & M_KEY) {
		rc = ctl_auth_finish(sv[0], &key, nonce_c, sock_now_ms() + 1000, -1, "fuzz", &cs);
		CHECK(rc <= 0 && rc != -ETIMEDOUT);
		CHECK(rc == 0 ? cs.on : !cs.on);
		/* A proof the harness did not make cannot verify. */
		CHECK(rc != 0 || (mode & M_PROOF));
		ref->auth = rc;
	}
	for (unsigned k = 0; !rc && k < max; k++) {
		enum ex_state st;

		call_of(kind_of(mode, k), &call, &out, frame);
		memset(&out, 0, sizeof(out));
		rc = ctl_read_answer(sv[0], &cs, sock_now_ms() + 1000, -1, &call, &st, &forged);
		check_answer(&call, &out, rc, st);
		if (rc == 0 && call.decode == decode_desc)
			seg_desc_free(&out.desc);
		ref->rcs[ref->n++] = rc;
		if (st != EX_SYNCED)
			break;
		ref->synced++;
		rc = 0;
	}
	/* Bare frames on a session never open; sealed ones all do. */
	if (cs.on && !(mode & M_SEAL))
		CHECK(cs.rx_seq == 0);
	close(sv[0]);
	close(sv[1]);
}

/* ---- 1b. the client's pipelined calls (many.c) ------------------------ */

/*
 * With M_MANY the same stream answers ctl_call_many: one pipe of
 * MANY_REQS requests of the kinds kind_of says, written back to back on
 * one loopback connection while the answers are read in order.  A thread
 * plays the server: it accepts, reads the client's AUTH_HELLO (with
 * M_KEY: the stream's proof and seals follow from it), sends the stream,
 * half-closes and reads until the client lets go.  Every answer must
 * come out as the one-at-a-time reader had it, and the requests it never
 * answered with the error that ended the connection.
 */
struct many_peer {
	int lfd;
	uint8_t mode;
	const uint8_t *in;
	size_t len;
};

static int many_listener(char *address, size_t cap)
{
	static int lfd = -1;
	static uint16_t port;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);

	if (lfd < 0) {
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
		CHECK(listen(lfd, 4) == 0 && getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0);
		port = ntohs(sin.sin_port);
	}
	snprintf(address, cap, "127.0.0.1:%u", port);
	return lfd;
}

static void *many_serve(void *arg)
{
	static uint8_t wire[STREAM_MAX + 4096], sink[4096];
	const struct many_peer *mp = arg;
	uint8_t hello[WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN];
	struct pollfd p = { .fd = mp->lfd, .events = POLLIN };
	int64_t until = sock_now_ms() + SERVER_CLOSE_MS;
	size_t n;
	int fd;

	CHECK(poll(&p, 1, SERVER_CLOSE_MS) == 1); /* the client always dials */
	fd = accept(mp->lfd, NULL, NULL);
	CHECK(fd >= 0);
	if (!(mp->mode & M_KEY) ||
	    sock_recv_full(fd, -1, hello, sizeof(hello), until, NULL) == 0) {
		n = server_stream(mp->mode, hello + WIRE_HDR_LEN, mp->in, mp->len, wire,
				  sizeof(wire));
		/* The client may be done (and gone) before it all went. */
		(void)sock_send_full(fd, -1, wire, n, until);
		shutdown(fd, SHUT_WR);
	}
	while (sock_now_ms() < until && recv(fd, sink, sizeof(sink), 0) > 0)
		;
	close(fd);
	return NULL;
}

/* The pipe's request frames: a header each (the peer is the harness,
 * which reads none of them), of the kinds kind_of says. */
static size_t many_frames(const struct ctl_call *calls, uint8_t *b)
{
	size_t n = 0;

	for (unsigned k = 0; k < MANY_REQS; k++) {
		wire_hdr_encode(b + n, calls[k].req_type, 8);
		memset(b + n + WIRE_HDR_LEN, 0, 8);
		n += WIRE_HDR_LEN + 8;
	}
	return n;
}

/* ctl_call_many's rcs against the one-at-a-time reader's (ref). */
static void many_check(const struct answers *ref, const struct ctl_pipe *pipe,
		       const struct ctl_call *calls)
{
	for (unsigned k = 0; k < MANY_REQS; k++) {
		int rc = pipe->rcs[k];

		CHECK(rc <= 0 && rc >= -CTL_ERRNO_MAX && rc != -ETIMEDOUT && rc != -ECANCELED);
		if (ref->auth) { /* the dial failed: every request says so */
			bool said = false;

			CHECK(rc == ctl_dial_failed(NULL, "fuzz", &calls[0], ref->auth, &said));
			continue;
		}
		/* Past the answer that ended the connection: its error. */
		CHECK(rc == ref->rcs[k < ref->n ? k : ref->n - 1]);
	}
	CHECK(pipe->answered == (ref->auth ? 0 : ref->synced));
}

static void fuzz_many(uint8_t mode, const uint8_t *in, size_t len, const struct answers *ref)
{
	uint8_t frames[MANY_REQS * (WIRE_HDR_LEN + 8)], frame[WIRE_HDR_LEN + WIRE_NOTIFY_TO_MAX_LEN];
	struct ctl_call calls[MANY_REQS];
	const struct ctl_call *callp[MANY_REQS];
	union answer outs[MANY_REQS];
	void *outp[MANY_REQS];
	int rcs[MANY_REQS];
	struct ctl_client cl;
	struct ctl_pipe pipe;
	struct many_peer mp = { .mode = mode, .in = in, .len = len };
	char address[32];
	pthread_t t;

	if (!(mode & M_MANY) || len > MANY_STREAM_MAX)
		return;
	memset(outs, 0, sizeof(outs));
	for (unsigned k = 0; k < MANY_REQS; k++) {
		call_of(kind_of(mode, k), &calls[k], &outs[k], frame);
		calls[k].quiet = 1; /* the log is not under test */
		callp[k] = &calls[k];
		outp[k] = calls[k].out;
	}
	mp.lfd = many_listener(address, sizeof(address));
	pipe = (struct ctl_pipe){ .address = address, .frames = frames, .count = MANY_REQS,
				  .len = many_frames(calls, frames), .rcs = rcs,
				  .calls = callp, .outs = outp };
	CHECK(ctl_client_init(&cl, mode & M_KEY ? &key : NULL) == 0);
	CHECK(pthread_create(&t, NULL, many_serve, &mp) == 0);
	CHECK(ctl_call_many(&cl, &pipe, 1, SERVER_CLOSE_MS, &calls[0]) == 0);
	ctl_client_fini(&cl); /* its kept connection too: the peer's read ends */
	CHECK(pthread_join(t, NULL) == 0);
	many_check(ref, &pipe, calls);
	for (unsigned k = 0; k < pipe.answered; k++) {
		check_answer(&calls[k], &outs[k], rcs[k], EX_SYNCED);
		if (rcs[k] == 0 && calls[k].decode == decode_desc)
			seg_desc_free(&outs[k].desc);
	}
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
	struct answers ref;

	fuzz_client(data[0], data + 1, size - 1, &ref);
	fuzz_many(data[0], data + 1, size - 1, &ref);
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
	/* A keyed client's hello refused (auth_recv's WIRE_ERROR). */
	seed(dir, "auth-refused", M_KEY, b, n);
	/* Pipelined (M_MANY): fetch, connect, keepalive, disconnect in turn. */
	memset(&desc, 0, sizeof(desc));
	CHECK(on_describe(NULL, &desc) == 0);
	CHECK(wire_desc_encode(&desc, p, sizeof(p)) == 0);
	h = server_hello(b);
	n = frame(b + h, WIRE_DESC, p, wire_desc_size(&desc));
	seg_desc_free(&desc);
	CHECK(wire_connect_rep_encode(&rep, p, sizeof(p)) == 0);
	n += frame(b + h + n, WIRE_CONNECT_REP, p, wire_connect_rep_size(&rep));
	n += frame(b + h + n, WIRE_KEEPALIVE_REP, NULL, 0);
	n += frame(b + h + n, WIRE_DISCONNECT_REP, NULL, 0);
	seed(dir, "many", M_MANY, b + h, n);
	seed(dir, "many-keyed", M_MANY | M_KEY | M_PROOF | M_SEAL, b, h + n);
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
