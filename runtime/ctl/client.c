/* SPDX-License-Identifier: MIT */
/*
 * The control client: the calls (fetch a descriptor, connect or disconnect
 * an endpoint, keepalive), each one request and its reply on a connection
 * that is the caller's for the call (pool.c keeps it for the next), so a
 * reply can never be matched to the wrong request; every call is bounded by
 * its timeout.  A kept connection that turns out broken before any byte of
 * the reply came is dropped and the call redialled once; one that failed
 * in any other way is closed, never kept (a late reply could be in flight).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/fd.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/pool.h"
#include "runtime/ctl/sock.h"

/* Turn a transport error into what ctl_fetch_desc documents. */
int ctl_io_error(int rc)
{
	switch (rc) {
	case -ETIMEDOUT:
	case -ENOMEM:
	case -EPROTO:
	case -EPROTONOSUPPORT:
	case -ECANCELED:
		return rc;
	default:
		/* Closed, reset, broken pipe: the peer hung up on us. */
		return -ECONNRESET;
	}
}

/* A WIRE_ERROR's payload: the peer's negative errno. */
static int ctl_read_error(const uint8_t *b, uint32_t len, const char *what)
{
	int32_t err;

	if (len != 4) {
		ctl_log("%s: ERROR reply with a %u byte payload", what, len);
		return -EPROTO;
	}
	err = (int32_t)sock_get_le32(b);
	if (err >= 0 || err < -CTL_ERRNO_MAX) {
		ctl_log("%s: ERROR reply with errno %d", what, err);
		return -EPROTO;
	}
	return err;
}

/* Errors after which the server closes its end: do not keep the connection. */
bool ctl_closing_errno(int rc)
{
	return rc == -EACCES || rc == -EBUSY || rc == -EPROTONOSUPPORT;
}

/* How a failed send or a reply that never started leaves the connection. */
enum ex_state ex_unanswered(int rc)
{
	return rc != -ETIMEDOUT && rc != -ECANCELED ? EX_NO_REPLY : EX_BROKEN;
}

/* The largest payload a reply of type h may have, or -EPROTO (logged). */
static long reply_max(const struct wire_hdr *h, const struct ctl_call *call)
{
	if (h->type == WIRE_ERROR && h->payload_len != 4) {
		ctl_log("%s: ERROR reply with a %u byte payload", call->what, h->payload_len);
		return -EPROTO;
	}
	if (h->type == WIRE_ERROR)
		return 4;
	if (h->type != call->rep_type) {
		ctl_log("%s: unexpected reply type %u", call->what, h->type);
		return -EPROTO;
	}
	if (h->payload_len > call->rep_max) {
		ctl_log("%s: reply of type %u with a %u byte payload (at most %u)", call->what,
			h->type, h->payload_len, call->rep_max);
		return -EPROTO;
	}
	return call->rep_max;
}

/* The payload of the reply whose header is hb, and its tag when the
 * connection has a session: verified before anything is made of it. */
static int ctl_read_body(int fd, struct auth_sess *sess, const uint8_t *hb, uint8_t *buf,
			 uint32_t len, int64_t deadline, int stop_fd, const char *what)
{
	uint8_t tag[WIRE_TAG_LEN];
	int rc = sock_recv_full(fd, stop_fd, buf, len, deadline, NULL);

	if (!rc && sess->on)
		rc = sock_recv_full(fd, stop_fd, tag, sizeof(tag), deadline, NULL);
	if (rc)
		return ctl_io_error(rc);
	if (sess->on && !auth_open(sess, hb, WIRE_HDR_LEN, buf, len, tag)) {
		ctl_log("%s: a reply whose tag does not verify: not from the peer that "
			"authenticated (a relay, or the path altered it); closing", what);
		return -EBADMSG;
	}
	return 0;
}

/* Read the reply to call on fd; *st says how the connection was left. */
int ctl_read_answer(int fd, struct auth_sess *sess, int64_t deadline, int stop_fd,
		    const struct ctl_call *call, enum ex_state *st, uint64_t *forged)
{
	uint8_t b[WIRE_HDR_LEN], *buf;
	struct wire_hdr h;
	size_t got = 0;
	long max;
	int rc;

	*st = EX_BROKEN;
	rc = sock_recv_full(fd, stop_fd, b, sizeof(b), deadline, &got);
	if (rc) {
		if (got == 0)
			*st = ex_unanswered(rc);
		return ctl_io_error(rc);
	}
	rc = wire_hdr_decode(b, sizeof(b), &h);
	max = rc ? rc : reply_max(&h, call);
	if (max < 0)
		return (int)max;
	if (h.type == call->rep_type && !call->decode && !sess->on && !h.payload_len)
		buf = NULL; /* nothing to read */
	/* At most rep_max <= WIRE_MAX_PAYLOAD bytes: wire_hdr_decode checked it. */
	else if (!(buf = malloc(h.payload_len ? h.payload_len : 1)))
		return -ENOMEM;
	rc = buf ? ctl_read_body(fd, sess, b, buf, h.payload_len, deadline, stop_fd, call->what)
		 : 0;
	if (rc) { /* the frame not read whole, or forged: out of step */
		if (rc == -EBADMSG && forged)
			fetch_add_relaxed(*forged, 1); /* statistics */
		free(buf);
		return rc == -EBADMSG ? -EPROTO : rc;
	}
	if (h.type == WIRE_ERROR)
		rc = ctl_read_error(buf, h.payload_len, call->what);
	else if (call->decode)
		rc = call->decode(buf, h.payload_len, call->out);
	free(buf);
	if (rc == -EBADMSG)
		return -EPROTO;
	/* The frame is read whole: whatever errno the peer answered (-ENOMEM,
	 * -ETIMEDOUT, ...) the next answer on the connection is the next
	 * request's -- a pipelined exchange (ctl_notify_many) reads on.  Out
	 * of step only after a refused reply (-EPROTO), or one after which the
	 * server closes. */
	if (rc != -EPROTO && !ctl_closing_errno(rc))
		*st = EX_SYNCED;
	return rc;
}

int ctl_seal(struct auth_sess *sess, const uint8_t *frames, size_t len, uint8_t **out,
	     size_t *out_len)
{
	size_t off = 0, n = 0;
	struct wire_hdr h;
	uint8_t *o;

	*out = (uint8_t *)frames;
	*out_len = len;
	if (!sess->on)
		return 0;
	for (off = 0; off < len; off += WIRE_HDR_LEN + h.payload_len, n++)
		if (len - off < WIRE_HDR_LEN || wire_hdr_decode(frames + off, WIRE_HDR_LEN, &h) ||
		    h.payload_len > len - off - WIRE_HDR_LEN)
			return -EINVAL;
	o = malloc(len + n * WIRE_TAG_LEN);
	if (!o)
		return -ENOMEM;
	*out = o;
	*out_len = len + n * WIRE_TAG_LEN;
	for (off = 0; off < len; off += WIRE_HDR_LEN + h.payload_len) {
		(void)wire_hdr_decode(frames + off, WIRE_HDR_LEN, &h);
		memcpy(o, frames + off, WIRE_HDR_LEN + h.payload_len);
		auth_seal(sess, o, WIRE_HDR_LEN, o + WIRE_HDR_LEN, h.payload_len,
			  o + WIRE_HDR_LEN + h.payload_len);
		o += WIRE_HDR_LEN + h.payload_len + WIRE_TAG_LEN;
	}
	return 0;
}

void ctl_sealed_free(const uint8_t *frames, uint8_t *sealed)
{
	if (sealed != frames)
		free(sealed);
}

/*
 * The request's send failed (rc): the server may have closed the
 * connection after saying why -- at its cap it refuses one whose proof it
 * had not read yet, -EBUSY, sealed after its own proof; our proof then met
 * a closed socket and its reset failed the send.  That answer if it is
 * there whole (-EBUSY, -EACCES), else the send's error.  An ordinary
 * reply found there is not decoded: the call fails, and its out must
 * hold nothing a caller would have to free.
 */
int ctl_send_failed(struct ctl_client *cl, int fd, struct auth_sess *sess,
		    const struct ctl_call *call, int rc, enum ex_state *st)
{
	struct ctl_call refusal_only = *call;
	enum ex_state rst;
	int why;

	*st = ex_unanswered(rc);
	if (rc != -EPIPE && rc != -ECONNRESET)
		return ctl_io_error(rc);
	refusal_only.decode = NULL;
	refusal_only.out = NULL;
	why = ctl_read_answer(fd, sess, sock_now_ms(), -1, &refusal_only, &rst,
			      cl ? &cl->forged : NULL);
	if (!ctl_closing_errno(why))
		return ctl_io_error(rc);
	*st = EX_BROKEN;
	return why;
}

/* Send the request on a connected fd and read the reply; *st says how the
 * connection was left. */
static int ctl_exchange(struct ctl_client *cl, int fd, struct auth_sess *sess, int64_t deadline,
			const struct ctl_call *call, enum ex_state *st)
{
	int stop_fd = cl ? cl->stop_fd : -1;
	uint8_t *f;
	size_t len;
	int rc;

	wire_hdr_encode(call->frame, call->req_type, (uint32_t)call->req_len);
	*st = EX_BROKEN;
	rc = ctl_seal(sess, call->frame, WIRE_HDR_LEN + call->req_len, &f, &len);
	if (rc)
		return rc;
	rc = sock_send_full(fd, stop_fd, f, len, deadline);
	ctl_sealed_free(call->frame, f);
	if (rc)
		return ctl_send_failed(cl, fd, sess, call, rc, st);
	if (call->went)
		*call->went = true;
	return ctl_read_answer(fd, sess, deadline, stop_fd, call, st, cl ? &cl->forged : NULL);
}

/* Why a call got nowhere, said once (*said: ctl_call need not); and what
 * it returns. */
int ctl_dial_failed(struct ctl_client *cl, const char *address,
			   const struct ctl_call *call, int rc, bool *said)
{
	if (rc == -EACCES || rc == -EBUSY || rc == -EPROTO || rc == -ECANCELED ||
	    rc == -EPROTONOSUPPORT)
		return rc; /* said where it happened, by ctl_call, or expected */
	*said = true;
	if (!call->quiet)
		ctl_log("%s: cannot connect to %s: %s", call->what, address, strerror(-rc));
	(void)cl;
	if (rc == -ETIMEDOUT || rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM)
		return rc;
	/* Ours, not the peer's: no room for a socket, or a local firewall
	 * (connect's EPERM).  "Refused" would read as a dead peer. */
	if (rc == -ENOBUFS)
		return -ENOMEM;
	if (rc == -EPERM)
		return -EHOSTUNREACH;
	if (rc == -ECONNRESET || rc == -EPIPE)
		return -ECONNRESET;
	/* No route is not "nothing listens there": the repair thread takes a
	 * refusal for a dead peer (every rail down at once), but a control
	 * network that lost its route says nothing of the peer. */
	if (rc == -ENETUNREACH || rc == -EHOSTUNREACH || rc == -ENETDOWN || rc == -EHOSTDOWN ||
	    rc == -EADDRNOTAVAIL)
		return -EHOSTUNREACH;
	return -ECONNREFUSED; /* refused; anything else: no engine there either */
}

/* A kept connection (unless redial) or a new one to sin; *reused says which. */
static int ctl_conn_get(struct ctl_client *cl, const struct sockaddr_in *sin,
			const char *address, int64_t deadline, bool redial, bool *reused,
			struct auth_sess *sess)
{
	*reused = false;
	/* A redial dials: the other kept connections to the peer are as
	 * likely broken as the one that just was (its host restarted). */
	if (!cl || redial)
		return ctl_dial(cl, sin, address, deadline, sess);
	return ctl_pool_get(cl, sin, address, deadline, reused, sess);
}

/* One exchange on a kept (unless redial) or new connection; *again when
 * it may be redialled, *said when a dial that failed said why. */
static int ctl_call_once(struct ctl_client *cl, const struct sockaddr_in *sin,
			 const char *address, int64_t deadline, const struct ctl_call *call,
			 bool redial, bool *again, bool *said)
{
	struct auth_sess sess;
	bool reused = false;
	enum ex_state st;
	int fd, rc;

	*again = false;
	if (call->went) /* a try before went on a connection the peer had closed */
		*call->went = false;
	fd = ctl_conn_get(cl, sin, address, deadline, redial, &reused, &sess);
	if (fd < 0)
		return ctl_dial_failed(cl, address, call, fd, said);
	rc = ctl_exchange(cl, fd, &sess, deadline, call, &st);
	if (st == EX_SYNCED && cl)
		ctl_pool_put(cl, sin, fd, &sess);
	else
		sock_close(fd);
	auth_wipe(&sess, sizeof(sess));
	*again = rc && st == EX_NO_REPLY && reused;
	return rc;
}

/* The peer's address, or -EINVAL said in the log. */
int ctl_resolve(const char *address, const struct ctl_call *call, struct sockaddr_in *sin)
{
	if (!sock_resolve_peer(address, sin))
		return 0;
	ctl_log("%s: bad address \"%s\" (want a.b.c.d:port or localhost:port)", call->what,
		address ? address : "(null)");
	return -EINVAL;
}

/* Why a call that reached the peer failed, in the log (rc 0: nothing). */
void ctl_call_said(const struct ctl_client *cl, const char *address,
			  const struct ctl_call *call, int rc)
{
	if (rc == -EACCES && !(cl && cl->has_key))
		ctl_log("%s: server %s refused us: it requires authentication (it has a key, "
			"secret_file) and this side has none", call->what, address);
	else if (rc == -EBUSY)
		ctl_log("%s: server %s is at its connection cap (EBUSY)", call->what, address);
	else if (rc && rc != -EPROTO && rc != -EACCES && rc != -EAGAIN && !call->quiet)
		ctl_log("%s: %s: %s", call->what, address, strerror(-rc));
}

/* Resolve, then one exchange (twice if a kept connection was dead). */
static int ctl_call(struct ctl_client *cl, const char *address, int timeout_ms,
		    const struct ctl_call *call)
{
	struct sockaddr_in sin;
	bool again, said = false;
	int64_t deadline;
	int rc;

	if (timeout_ms <= 0 || ctl_resolve(address, call, &sin))
		return -EINVAL;
	deadline = sock_now_ms() + timeout_ms;
	rc = ctl_call_once(cl, &sin, address, deadline, call, false, &again, &said);
	if (again) {
		fetch_add_relaxed(cl->redials, 1); /* statistics */
		rc = ctl_call_once(cl, &sin, address, deadline, call, true, &again, &said);
	}
	if (!said) /* else the dial said why */
		ctl_call_said(cl, address, call, rc);
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

void ctl_fetch_call_init(struct ctl_call *call, struct seg_desc *out, int quiet)
{
	*call = (struct ctl_call){
		.what = "fetch", .quiet = quiet, .req_type = WIRE_GET_DESC,
		.rep_type = WIRE_DESC, .rep_max = WIRE_DESC_MAX_LEN,
		.decode = decode_desc, .out = out,
	};
}

int ctl_fetch_desc(struct ctl_client *cl, const char *address, int timeout_ms,
		   struct seg_desc *out)
{
	uint8_t frame[WIRE_HDR_LEN];
	struct ctl_call call;

	if (!out)
		return -EINVAL;
	ctl_fetch_call_init(&call, out, 0);
	call.frame = frame;
	memset(out, 0, sizeof(*out));
	return ctl_call(cl, address, timeout_ms, &call);
}

/* The reply must be for this endpoint and carry one peer QP per QP of ours. */
int ctl_check_rep(const struct wire_connect_req *req, const struct wire_connect_rep *rep)
{
	if (rep->token == req->token && rep->n_qps == req->n_qps)
		return 0;
	ctl_log("connect: reply for token %llu with %u QPs, asked for token %llu with %u",
		(unsigned long long)rep->token, rep->n_qps, (unsigned long long)req->token,
		req->n_qps);
	return -EPROTO;
}

void ctl_connect_call_init(struct ctl_call *call, struct wire_connect_rep *rep, int quiet)
{
	static const struct wire_connect_rep full = { .n_qps = WIRE_MAX_EP_QPS };

	*call = (struct ctl_call){
		.what = "connect", .quiet = quiet, .req_type = WIRE_CONNECT_REQ,
		.rep_type = WIRE_CONNECT_REP, .rep_max = (uint32_t)wire_connect_rep_size(&full),
		.decode = decode_connect_rep, .out = rep,
	};
}

int ctl_connect_prepare(const struct wire_connect_req *req, struct wire_connect_rep *rep,
			int quiet, struct ctl_call *call)
{
	int rc;

	ctl_connect_call_init(call, rep, quiet);
	if (!rep)
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	if (!req)
		return -EINVAL;
	call->req_len = wire_connect_req_size(req);
	call->frame = malloc(WIRE_HDR_LEN + call->req_len);
	if (!call->frame)
		return -ENOMEM;
	/* Refuses (-EINVAL) what the target would refuse, before any connection. */
	rc = wire_connect_req_encode(req, call->frame + WIRE_HDR_LEN, call->req_len);
	if (rc) {
		free(call->frame);
		call->frame = NULL;
		return rc;
	}
	wire_hdr_encode(call->frame, call->req_type, (uint32_t)call->req_len);
	return 0;
}

int ctl_connect(struct ctl_client *cl, const char *address, int timeout_ms,
		const struct wire_connect_req *req, struct wire_connect_rep *rep)
{
	struct ctl_call call;
	int rc = ctl_connect_prepare(req, rep, 0, &call);

	if (!rc)
		rc = ctl_call(cl, address, timeout_ms, &call);
	if (!rc)
		rc = ctl_check_rep(req, rep);
	if (rc && rep)
		memset(rep, 0, sizeof(*rep));
	free(call.frame);
	return rc;
}

int ctl_disconnect(struct ctl_client *cl, const char *address, int timeout_ms,
		   const struct wire_disconnect *d)
{
	uint8_t frame[CTL_DISCONNECT_FRAME];
	struct ctl_call call = CTL_DISCONNECT_CALL(frame);

	if (!d)
		return -EINVAL;
	(void)wire_disconnect_encode(d, frame + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN);
	return ctl_call(cl, address, timeout_ms, &call);
}

int ctl_keepalive(struct ctl_client *cl, const char *address, int timeout_ms,
		  uint64_t incarnation)
{
	uint8_t frame[CTL_KEEPALIVE_FRAME];
	struct ctl_call call = CTL_KEEPALIVE_CALL(frame);

	ctl_keepalive_encode(frame, incarnation);
	return ctl_call(cl, address, timeout_ms, &call);
}

/*
 * n's whole frame (header included) into f, of WIRE_HDR_LEN +
 * WIRE_NOTIFY_TO_MAX_LEN bytes: a NOTIFY_TO, or a NOTIFY when n names no
 * incarnation (a peer whose descriptor said 0).  Its length, or -EINVAL for
 * what the receiver would refuse, before any connection.
 */
static long notify_frame(const struct wire_notify *n, uint8_t *f)
{
	bool to = n->to_incarnation != 0;
	size_t len = to ? wire_notify_to_size(n) : wire_notify_size(n);
	int rc;

	if (to)
		rc = wire_notify_to_encode(n, f + WIRE_HDR_LEN, WIRE_NOTIFY_TO_MAX_LEN);
	else
		rc = wire_notify_encode(n, f + WIRE_HDR_LEN, WIRE_NOTIFY_TO_MAX_LEN);
	if (rc)
		return rc;
	wire_hdr_encode(f, to ? WIRE_NOTIFY_TO : WIRE_NOTIFY, (uint32_t)len);
	return (long)(WIRE_HDR_LEN + len);
}

/* A notification whose request went whole and whose answer a cancel cut
 * short (engine destroy) may be queued there: like one never answered,
 * -ETIMEDOUT ("it may still get it"), not -ECANCELED (not sent). */
static int notify_cut(int rc, bool went)
{
	return rc == -ECANCELED && went ? -ETIMEDOUT : rc;
}

int ctl_notify(struct ctl_client *cl, const char *address, int timeout_ms,
	       const struct wire_notify *n)
{
	uint8_t frame[WIRE_HDR_LEN + WIRE_NOTIFY_TO_MAX_LEN];
	bool went = false;
	struct ctl_call call = {
		.what = "notify", .frame = frame, .rep_type = WIRE_NOTIFY_REP, .rep_max = 0,
		.went = &went,
	};
	long len;
	int rc;

	if (!n)
		return -EINVAL;
	len = notify_frame(n, frame);
	if (len < 0)
		return (int)len;
	call.req_type = n->to_incarnation ? WIRE_NOTIFY_TO : WIRE_NOTIFY;
	call.req_len = (size_t)len - WIRE_HDR_LEN;
	rc = ctl_call(cl, address, timeout_ms, &call);
	return notify_cut(rc, went); /* went read after the call */
}

/* Frames to send back to back: count NOTIFYs, and their answers. */
struct notify_pipe {
	uint8_t *frames;
	size_t first, len;   /* the first frame's bytes, all frames' */
	unsigned count;
	int *rcs;
};

/* One pass of ctl_notify_many on a kept or new connection: every rcs[i]
 * set; *again when none was answered on a kept connection found broken. */
static void notify_pipe_once(struct ctl_client *cl, const struct sockaddr_in *sin,
			     const char *address, int64_t deadline, const struct ctl_call *call,
			     struct notify_pipe *p, bool redial, bool *again, bool *said)
{
	enum ex_state st = EX_SYNCED;
	struct auth_sess sess;
	bool reused = false;
	unsigned i = 0, whole = 0; /* frames written whole (at least) */
	int fd, rc;

	*again = false;
	fd = ctl_conn_get(cl, sin, address, deadline, redial, &reused, &sess);
	if (fd < 0) {
		rc = ctl_dial_failed(cl, address, call, fd, said);
		st = EX_BROKEN;
	} else {
		size_t first = p->first + (sess.on ? WIRE_TAG_LEN : 0), len;
		uint8_t *f;
		int late = 0;

		rc = ctl_seal(&sess, p->frames, p->len, &f, &len);
		if (rc)
			st = EX_BROKEN;
		/* The first frame alone: until it is whole the server has no
		 * request, so a kept connection that breaks here may be redialled. */
		if (!rc)
			rc = sock_send_full(fd, cl->stop_fd, f, first, deadline);
		if (rc && st == EX_SYNCED) {
			rc = ctl_send_failed(cl, fd, &sess, call, rc, &st);
		} else if (!rc && len > first) {
			/* Whole frames went and may be served even if the rest
			 * breaks: then read their answers, and send none again. */
			late = sock_send_full(fd, cl->stop_fd, f + first, len - first, deadline);
		}
		if (!rc) /* (the rest, when late failed: some may have gone whole too) */
			whole = late ? 1 : p->count;
		ctl_sealed_free(p->frames, f);
		/* The server answers a connection's requests in their order. */
		for (; !rc && st == EX_SYNCED && i < p->count; i++)
			p->rcs[i] = ctl_read_answer(fd, &sess, deadline, cl->stop_fd, call, &st,
						    &cl->forged);
		if (st != EX_SYNCED && i > 0)
			rc = p->rcs[--i]; /* broke reading this one: it and the rest share why */
		if (late) {
			if (st == EX_SYNCED) /* (all answered: cannot be, not all went) */
				rc = ctl_io_error(late);
			st = EX_BROKEN;
		}
		if (st == EX_SYNCED)
			ctl_pool_put(cl, sin, fd, &sess);
		else
			sock_close(fd);
		auth_wipe(&sess, sizeof(sess));
	}
	*again = i == 0 && st == EX_NO_REPLY && reused;
	for (; i < p->count; i++)
		p->rcs[i] = rc;
	for (i = 0; i < whole; i++)
		p->rcs[i] = notify_cut(p->rcs[i], true);
}

int ctl_notify_many(struct ctl_client *cl, const char *address, int timeout_ms,
		    const struct wire_notify *const *n, unsigned count, int *rcs)
{
	struct ctl_call call = { .what = "notify", .req_type = WIRE_NOTIFY_TO,
				 .rep_type = WIRE_NOTIFY_REP, .rep_max = 0 };
	struct notify_pipe p = { .rcs = rcs, .count = count };
	struct sockaddr_in sin;
	bool again, said = false;
	int rc = 0;

	if (!cl || !n || !rcs || !count || count > CTL_NOTIFY_MANY || timeout_ms <= 0)
		return -EINVAL;
	p.frames = malloc(count * (WIRE_HDR_LEN + WIRE_NOTIFY_TO_MAX_LEN));
	if (!p.frames)
		return -ENOMEM;
	for (unsigned i = 0; i < count && !rc; i++) {
		uint8_t *f = p.frames + p.len;

		/* Refuses (-EINVAL) what the receiver would refuse, before any connection. */
		long len = n[i] ? notify_frame(n[i], f) : -EINVAL;

		if (len < 0) {
			rc = (int)len;
			break;
		}
		p.len += (size_t)len;
		if (i == 0)
			p.first = p.len;
	}
	if (!rc)
		rc = ctl_resolve(address, &call, &sin);
	if (!rc) {
		int64_t deadline = sock_now_ms() + timeout_ms;

		notify_pipe_once(cl, &sin, address, deadline, &call, &p, false, &again, &said);
		if (again) {
			fetch_add_relaxed(cl->redials, 1); /* statistics */
			notify_pipe_once(cl, &sin, address, deadline, &call, &p, true, &again,
					 &said);
		}
		for (unsigned i = 0; i < count && !said; i++)
			if (rcs[i] && rcs[i] != -EAGAIN) {
				ctl_call_said(cl, address, &call, rcs[i]);
				break; /* once for the lot */
			}
	}
	free(p.frames);
	return rc;
}
