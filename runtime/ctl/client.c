/* SPDX-License-Identifier: MIT */
/*
 * The control client: one TCP connection per call (fetch a descriptor,
 * connect or disconnect an endpoint, keepalive), so a reply can never be
 * matched to the wrong request; every call is bounded by its timeout.
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
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/sock.h"

/*
 * One request/reply exchange: the client opens one TCP connection per call,
 * so a reply can never be matched to the wrong request.
 */
struct ctl_call {
	const char *what;  /* "fetch", "connect", "disconnect": for the logs */
	int quiet;         /* a dead peer is no news (keepalive): log nothing */
	uint8_t *frame;    /* WIRE_HDR_LEN bytes of room, then the request payload */
	size_t req_len;    /* payload bytes */
	uint16_t req_type;
	uint16_t rep_type; /* the answer expected besides WIRE_ERROR */
	uint32_t rep_max;  /* larger replies are refused unread */
	/* Decode the reply payload into out; NULL when it must be empty. */
	int (*decode)(const uint8_t *buf, size_t len, void *out);
	void *out;
};

/* Connect with a deadline.  Returns the fd or -errno. */
static int ctl_dial(const struct sockaddr_in *sin, int64_t deadline)
{
	socklen_t elen = sizeof(int);
	int fd, rc, err = 0;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sock_set_nodelay(fd);
	rc = connect(fd, (const struct sockaddr *)sin, sizeof(*sin));
	if (rc && (errno == EINPROGRESS || errno == EINTR)) {
		/* EINTR: the connect goes on in the background, as for EINPROGRESS. */
		rc = sock_wait_fd(fd, POLLOUT, -1, deadline);
		if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
			err = errno;
		if (!rc && err)
			rc = -err;
	} else if (rc) {
		rc = -errno;
	}
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Turn a transport error into what ctl_fetch_desc documents. */
static int ctl_io_error(int rc)
{
	switch (rc) {
	case -ETIMEDOUT:
	case -ENOMEM:
	case -EPROTO:
	case -EPROTONOSUPPORT:
		return rc;
	default:
		/* Closed, reset, broken pipe: the peer hung up on us. */
		return -ECONNRESET;
	}
}

static int ctl_read_error(int fd, const struct wire_hdr *h, int64_t deadline, const char *what)
{
	uint8_t b[4];
	int32_t err;
	int rc;

	if (h->payload_len != sizeof(b)) {
		ctl_log("%s: ERROR reply with a %u byte payload", what, h->payload_len);
		return -EPROTO;
	}
	rc = sock_recv_full(fd, -1, b, sizeof(b), deadline, NULL);
	if (rc)
		return ctl_io_error(rc);
	err = (int32_t)sock_get_le32(b);
	if (err >= 0 || err < -CTL_ERRNO_MAX) {
		ctl_log("%s: ERROR reply with errno %d", what, err);
		return -EPROTO;
	}
	return err;
}

static int ctl_read_reply(int fd, const struct wire_hdr *h, int64_t deadline,
			  const struct ctl_call *call)
{
	uint8_t *buf;
	int rc;

	if (h->payload_len > call->rep_max) {
		ctl_log("%s: reply of type %u with a %u byte payload (at most %u)", call->what,
			h->type, h->payload_len, call->rep_max);
		return -EPROTO;
	}
	if (!call->decode)
		return 0;
	/* At most rep_max <= WIRE_MAX_PAYLOAD bytes: wire_hdr_decode checked it. */
	buf = malloc(h->payload_len ? h->payload_len : 1);
	if (!buf)
		return -ENOMEM;
	rc = sock_recv_full(fd, -1, buf, h->payload_len, deadline, NULL);
	if (rc)
		rc = ctl_io_error(rc);
	else
		rc = call->decode(buf, h->payload_len, call->out);
	free(buf);
	return rc;
}

/* Send the request on a connected fd and read the reply. */
static int ctl_exchange(int fd, int64_t deadline, const struct ctl_call *call)
{
	uint8_t b[WIRE_HDR_LEN];
	struct wire_hdr h;
	int rc;

	wire_hdr_encode(call->frame, call->req_type, (uint32_t)call->req_len);
	rc = sock_send_full(fd, -1, call->frame, WIRE_HDR_LEN + call->req_len, deadline);
	if (!rc)
		rc = sock_recv_full(fd, -1, b, sizeof(b), deadline, NULL);
	if (rc)
		return ctl_io_error(rc);
	rc = wire_hdr_decode(b, sizeof(b), &h);
	if (rc)
		return rc;
	if (h.type == call->rep_type)
		return ctl_read_reply(fd, &h, deadline, call);
	if (h.type == WIRE_ERROR)
		return ctl_read_error(fd, &h, deadline, call->what);
	ctl_log("%s: unexpected reply type %u", call->what, h.type);
	return -EPROTO;
}

/* Resolve, connect, exchange, close: what every client call shares. */
static int ctl_call(const char *address, int timeout_ms, const struct ctl_call *call)
{
	struct sockaddr_in sin;
	int64_t deadline;
	int fd, rc;

	if (timeout_ms <= 0)
		return -EINVAL;
	if (sock_resolve_peer(address, &sin)) {
		ctl_log("%s: bad address \"%s\" (want a.b.c.d:port or localhost:port)",
			call->what, address ? address : "(null)");
		return -EINVAL;
	}
	deadline = sock_now_ms() + timeout_ms;

	fd = ctl_dial(&sin, deadline);
	if (fd < 0) {
		if (!call->quiet)
			ctl_log("%s: cannot connect to %s: %s", call->what, address,
				strerror(-fd));
		/* Unreachable, refused, reset: all mean "no engine there". */
		if (fd == -ETIMEDOUT || fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM)
			return fd;
		return -ECONNREFUSED;
	}
	rc = ctl_exchange(fd, deadline, call);
	close(fd);
	if (rc && rc != -EPROTO && !call->quiet)
		ctl_log("%s: %s: %s", call->what, address, strerror(-rc));
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

int ctl_fetch_desc(const char *address, int timeout_ms, struct seg_desc *out)
{
	uint8_t frame[WIRE_HDR_LEN];
	struct ctl_call call = {
		.what = "fetch", .frame = frame, .req_type = WIRE_GET_DESC,
		.rep_type = WIRE_DESC, .rep_max = WIRE_MAX_PAYLOAD,
		.decode = decode_desc, .out = out,
	};

	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	return ctl_call(address, timeout_ms, &call);
}

/* The reply must be for this endpoint and carry one peer QP per QP of ours. */
static int ctl_check_rep(const struct wire_connect_req *req, const struct wire_connect_rep *rep)
{
	if (rep->token == req->token && rep->n_qps == req->n_qps)
		return 0;
	ctl_log("connect: reply for token %llu with %u QPs, asked for token %llu with %u",
		(unsigned long long)rep->token, rep->n_qps, (unsigned long long)req->token,
		req->n_qps);
	return -EPROTO;
}

int ctl_connect(const char *address, int timeout_ms, const struct wire_connect_req *req,
		struct wire_connect_rep *rep)
{
	static const struct wire_connect_rep full = { .n_qps = WIRE_MAX_EP_QPS };
	struct ctl_call call = {
		.what = "connect", .req_type = WIRE_CONNECT_REQ,
		.rep_type = WIRE_CONNECT_REP, .rep_max = (uint32_t)wire_connect_rep_size(&full),
		.decode = decode_connect_rep, .out = rep,
	};
	int rc;

	if (!rep)
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	if (!req)
		return -EINVAL;
	call.req_len = wire_connect_req_size(req);
	call.frame = malloc(WIRE_HDR_LEN + call.req_len);
	if (!call.frame)
		return -ENOMEM;
	/* Refuses (-EINVAL) what the target would refuse, before any connection. */
	rc = wire_connect_req_encode(req, call.frame + WIRE_HDR_LEN, call.req_len);
	if (!rc)
		rc = ctl_call(address, timeout_ms, &call);
	if (!rc)
		rc = ctl_check_rep(req, rep);
	if (rc)
		memset(rep, 0, sizeof(*rep));
	free(call.frame);
	return rc;
}

int ctl_disconnect(const char *address, int timeout_ms, const struct wire_disconnect *d)
{
	uint8_t frame[WIRE_HDR_LEN + WIRE_DISCONNECT_LEN];
	struct ctl_call call = {
		.what = "disconnect", .frame = frame, .req_len = WIRE_DISCONNECT_LEN,
		.req_type = WIRE_DISCONNECT, .rep_type = WIRE_DISCONNECT_REP, .rep_max = 0,
	};

	if (!d)
		return -EINVAL;
	(void)wire_disconnect_encode(d, frame + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN);
	return ctl_call(address, timeout_ms, &call);
}

int ctl_keepalive(const char *address, int timeout_ms, uint64_t incarnation)
{
	struct wire_disconnect d = { .incarnation = incarnation };
	uint8_t frame[WIRE_HDR_LEN + WIRE_KEEPALIVE_LEN];
	struct ctl_call call = {
		.what = "keepalive", .quiet = 1, .frame = frame, .req_len = WIRE_KEEPALIVE_LEN,
		.req_type = WIRE_KEEPALIVE, .rep_type = WIRE_KEEPALIVE_REP, .rep_max = 0,
	};

	(void)wire_disconnect_encode(&d, frame + WIRE_HDR_LEN, WIRE_KEEPALIVE_LEN);
	return ctl_call(address, timeout_ms, &call);
}
