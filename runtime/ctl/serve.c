/* SPDX-License-Identifier: MIT */
/*
 * The control server's answers (server.c moves the bytes): what each
 * message may be, when it may come (authentication first when this engine
 * has a cluster key), and what it gets back.  GET_DESC -> DESC, CONNECT_REQ
 * -> CONNECT_REP, DISCONNECT -> DISCONNECT_REP, KEEPALIVE -> KEEPALIVE_REP,
 * NOTIFY -> NOTIFY_REP (or -EAGAIN: the engine's queue is full), or a WIRE_ERROR with the engine's negative errno.
 *
 * Authentication, the server's side (the client's is in auth.c):
 *   peer: AUTH_HELLO (its nonce)
 *   us:   AUTH_HELLO (our nonce) and AUTH_PROOF (server proof), one write
 *   peer: AUTH_PROOF (client proof) -- then its requests, each sealed
 * Until the peer's proof verifies, any other message is refused with a
 * WIRE_ERROR -EACCES and nothing else: no descriptor, key or QP leaves.
 * After it, a message whose tag does not verify is never served: server.c
 * checks it before ctl_handle and closes the connection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ctl/conn.h"
#include "runtime/ctl/sock.h"

_Static_assert(WIRE_AUTH_NONCE_LEN == AUTH_NONCE_LEN, "one nonce size");
_Static_assert(WIRE_AUTH_MAC_LEN == AUTH_MAC_LEN, "one proof size");

static const char *type_name(uint16_t type)
{
	switch (type) {
	case WIRE_GET_DESC:
		return "GET_DESC";
	case WIRE_CONNECT_REQ:
		return "CONNECT_REQ";
	case WIRE_DISCONNECT:
		return "DISCONNECT";
	case WIRE_KEEPALIVE:
		return "KEEPALIVE";
	case WIRE_NOTIFY:
		return "NOTIFY";
	case WIRE_NOTIFY_TO:
		return "NOTIFY_TO";
	case WIRE_AUTH_HELLO:
		return "AUTH_HELLO";
	case WIRE_AUTH_PROOF:
		return "AUTH_PROOF";
	default:
		return "a message";
	}
}

/*
 * The largest payload the server reads for a message type, or -1 for a type
 * it never takes.  Larger ones are refused unread, so a client cannot make
 * the server buffer more than the biggest valid request.
 */
long ctl_req_max(uint16_t type)
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
	case WIRE_NOTIFY:
		return WIRE_NOTIFY_MAX_LEN;
	case WIRE_NOTIFY_TO:
		return WIRE_NOTIFY_TO_MAX_LEN;
	case WIRE_AUTH_HELLO:
		return WIRE_AUTH_HELLO_LEN;
	case WIRE_AUTH_PROOF:
		return WIRE_AUTH_PROOF_LEN;
	default:
		return -1;
	}
}

int ctl_gate(struct ctl *c, struct ctl_conn *cn, uint16_t type)
{
	bool auth_msg = type == WIRE_AUTH_HELLO || type == WIRE_AUTH_PROOF;

	if (!c->cfg.has_key && type == WIRE_AUTH_HELLO)
		return ctl_conn_deny(c, cn, "it has a key (secret_file) and this side has none");
	if (cn->auth == CONN_WANT_HELLO && type != WIRE_AUTH_HELLO)
		return ctl_conn_deny(c, cn, "%s before authenticating: it has no key "
				     "(secret_file) and this side requires one", type_name(type));
	if (cn->auth == CONN_WANT_PROOF && type != WIRE_AUTH_PROOF)
		return ctl_conn_deny(c, cn, "%s instead of its proof", type_name(type));
	if (cn->auth == CONN_OPEN && auth_msg) {
		(void)ctl_conn_refuse(c, cn, "%s out of turn", type_name(type));
		return -EPROTO;
	}
	return 0;
}

/* A peer of version 1 cannot tag its frames: it must not get a
 * connection a relay could speak on.  Told so in a frame it can parse. */
static void deny_old(struct ctl *c, struct ctl_conn *cn, uint16_t alg)
{
	ctl_conn_error(cn, -EPROTONOSUPPORT);
	(void)ctl_conn_deny(c, cn, "it speaks authentication version %u, without sealed "
			    "frames; with a key this side talks to version %d only: upgrade the "
			    "peer", alg, WIRE_AUTH_ALG);
}

/* The peer's hello: answer with ours and our proof, in one frame pair. */
static void serve_hello(struct ctl *c, struct ctl_conn *cn)
{
	struct wire_auth_hello mine = { .alg = WIRE_AUTH_ALG }, theirs;
	struct wire_auth_proof proof;
	size_t n = 2 * WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN + WIRE_AUTH_PROOF_LEN;
	uint8_t *f;

	if (wire_auth_hello_decode(cn->payload, cn->h.payload_len, &theirs)) {
		(void)ctl_conn_deny(c, cn, "malformed AUTH_HELLO");
		return;
	}
	if (theirs.alg != WIRE_AUTH_ALG) {
		deny_old(c, cn, theirs.alg);
		return;
	}
	f = malloc(n);
	if (!f) {
		cn->closing = true;
		return;
	}
	memcpy(cn->hello_c, cn->payload, WIRE_AUTH_HELLO_LEN);
	auth_nonce(mine.nonce);
	(void)wire_auth_hello_encode(&mine, cn->hello_s, WIRE_AUTH_HELLO_LEN);
	auth_proof2(&c->cfg.key, AUTH_SERVER, cn->hello_c, cn->hello_s, WIRE_AUTH_HELLO_LEN,
		    proof.mac);
	wire_hdr_encode(f, WIRE_AUTH_HELLO, WIRE_AUTH_HELLO_LEN);
	memcpy(f + WIRE_HDR_LEN, cn->hello_s, WIRE_AUTH_HELLO_LEN);
	wire_hdr_encode(f + WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN, WIRE_AUTH_PROOF,
			WIRE_AUTH_PROOF_LEN);
	(void)wire_auth_proof_encode(&proof, f + 2 * WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN,
				     WIRE_AUTH_PROOF_LEN);
	ctl_conn_send(cn, f, n, false);
	cn->auth = CONN_WANT_PROOF;
}

/*
 * A refusal to a peer that holds our hello and proof (CONN_WANT_PROOF,
 * nothing of ours queued) goes sealed, with the session its proof would
 * open: once it has sent that proof it takes every frame as sealed, and a
 * bare WIRE_ERROR reads as a sealed frame cut short -- a reset, not why
 * (at the cap, -EBUSY; at the deadline, -EACCES).  A peer without the key
 * cannot open it, and needs not: our proof failed for it already.
 */
void ctl_conn_seal_early(struct ctl *c, struct ctl_conn *cn)
{
	if (cn->sealed || cn->auth != CONN_WANT_PROOF || cn->tx)
		return;
	auth_sess_init(&cn->sess, &c->cfg.key, AUTH_SERVER, cn->hello_c, cn->hello_s,
		       WIRE_AUTH_HELLO_LEN);
	cn->sealed = true; /* nothing more is read: the connection closes */
}

static void serve_proof(struct ctl *c, struct ctl_conn *cn)
{
	struct wire_auth_proof p;

	if (wire_auth_proof_decode(cn->payload, cn->h.payload_len, &p)) {
		(void)ctl_conn_deny(c, cn, "malformed AUTH_PROOF");
		return;
	}
	if (!auth_verify2(&c->cfg.key, AUTH_CLIENT, cn->hello_c, cn->hello_s, WIRE_AUTH_HELLO_LEN,
			  p.mac)) {
		(void)ctl_conn_deny(c, cn, "its proof does not verify: its key differs from ours");
		return;
	}
	/* From here on every frame, both ways, carries the session's tag. */
	auth_sess_init(&cn->sess, &c->cfg.key, AUTH_SERVER, cn->hello_c, cn->hello_s,
		       WIRE_AUTH_HELLO_LEN);
	cn->sealed = true;
	cn->auth = CONN_OPEN;
	cn->auth_deadline = 0;
}

/*
 * Build, encode and queue the descriptor, or a WIRE_ERROR saying why not.
 * The frame is built in one buffer so it goes out in as few segments as
 * the socket allows.
 */
static void serve_desc(struct ctl *c, struct ctl_conn *cn)
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
	ctl_conn_reply(cn, rc, WIRE_DESC, frame, size);
}

/* A connect made but not answered whole: its QPs go again (an initiator
 * told an error sends no DISCONNECT for them; our lease would keep them
 * for as long as its keepalives come). */
static void connect_undo(struct ctl *c, const struct wire_connect_req *req)
{
	for (uint16_t i = 0; i < req->n_qps && c->cfg.disconnect; i++) {
		struct wire_disconnect d = { .incarnation = req->incarnation, .token = req->token + i };

		(void)c->cfg.disconnect(c->arg, &d);
	}
}

static void serve_connect(struct ctl *c, struct ctl_conn *cn)
{
	static const struct wire_connect_rep most = { .n_qps = WIRE_MAX_EP_QPS };
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	uint8_t *frame;
	size_t size = 0;
	int rc;

	if (wire_connect_req_decode(cn->payload, cn->h.payload_len, &req)) {
		(void)ctl_conn_refuse(c, cn, "malformed CONNECT_REQ");
		return;
	}
	memset(&rep, 0, sizeof(rep));
	/* The reply's memory first: QPs made and then answered -ENOMEM would
	 * stay (the initiator frees nothing it was told failed). */
	frame = malloc(WIRE_HDR_LEN + wire_connect_rep_size(&most));
	if (!frame)
		rc = -ENOMEM;
	else
		rc = c->cfg.connect ? c->cfg.connect(c->arg, &req, &rep) : -EOPNOTSUPP;
	if (!rc) {
		/* Encoding refuses (-EINVAL) a reply the initiator would refuse. */
		size = wire_connect_rep_size(&rep);
		rc = wire_connect_rep_encode(&rep, frame + WIRE_HDR_LEN, wire_connect_rep_size(&most));
		if (rc)
			connect_undo(c, &req);
	}
	if (rc)
		ctl_log("connect request (token %llu) from %s: %s", (unsigned long long)req.token,
			cn->peer, strerror(-rc));
	ctl_conn_reply(cn, rc, WIRE_CONNECT_REP, frame, size); /* frees frame for an error */
}

/* DISCONNECT and KEEPALIVE: same layout, empty answers. */
static void serve_small(struct ctl *c, struct ctl_conn *cn)
{
	bool ka = cn->h.type == WIRE_KEEPALIVE;
	struct wire_disconnect d;
	int rc;

	if (wire_disconnect_decode(cn->payload, cn->h.payload_len, &d) || (ka && d.token)) {
		(void)ctl_conn_refuse(c, cn, "malformed %s", type_name(cn->h.type));
		return;
	}
	if (ka) {
		rc = c->cfg.keepalive ? c->cfg.keepalive(c->arg, d.incarnation) : -EOPNOTSUPP;
	} else {
		rc = c->cfg.disconnect ? c->cfg.disconnect(c->arg, &d) : -EOPNOTSUPP;
		/* -ENOENT: nothing to free (its lease ran out, or it belonged to
		 * an incarnation of ours before a restart): no news. */
		if (rc && rc != -ENOENT)
			ctl_log("disconnect request (token %llu) from %s: %s",
				(unsigned long long)d.token, cn->peer, strerror(-rc));
	}
	ctl_conn_reply(cn, rc, ka ? WIRE_KEEPALIVE_REP : WIRE_DISCONNECT_REP,
		       rc ? NULL : malloc(WIRE_HDR_LEN), 0);
}

/* A notification: into the engine's queue, or -EAGAIN when it is full
 * (back-pressure: the sender keeps it and tries again; nothing is dropped),
 * or -ESTALE when it is for another incarnation (the engine checks). */
static void serve_notify(struct ctl *c, struct ctl_conn *cn)
{
	struct wire_notify n;
	uint8_t *rep;
	int rc;

	if (cn->h.type == WIRE_NOTIFY_TO)
		rc = wire_notify_to_decode(cn->payload, cn->h.payload_len, &n);
	else
		rc = wire_notify_decode(cn->payload, cn->h.payload_len, &n);
	if (rc) {
		(void)ctl_conn_refuse(c, cn, "malformed NOTIFY");
		return;
	}
	/* The reply's memory first: a notification queued and then answered
	 * -ENOMEM would be sent again, and arrive twice. */
	rep = malloc(WIRE_HDR_LEN);
	if (!rep)
		rc = -ENOMEM;
	else
		rc = c->cfg.notify ? c->cfg.notify(c->arg, &n) : -EOPNOTSUPP;
	ctl_conn_reply(cn, rc, WIRE_NOTIFY_REP, rep, 0); /* frees rep for an error */
}

void ctl_handle(struct ctl *c, struct ctl_conn *cn)
{
	switch (cn->h.type) {
	case WIRE_AUTH_HELLO:
		serve_hello(c, cn);
		break;
	case WIRE_AUTH_PROOF:
		serve_proof(c, cn);
		break;
	case WIRE_GET_DESC:
		serve_desc(c, cn);
		break;
	case WIRE_CONNECT_REQ:
		serve_connect(c, cn);
		break;
	case WIRE_NOTIFY:
	case WIRE_NOTIFY_TO:
		serve_notify(c, cn);
		break;
	default:
		serve_small(c, cn);
		break;
	}
}
