/* SPDX-License-Identifier: MIT */
/*
 * One control call's description and the steps of an exchange, shared by
 * client.c (a call to one peer, blocking) and many.c (the same call to
 * many peers at once).
 */
#ifndef FERRY_RUNTIME_CTL_CALL_H
#define FERRY_RUNTIME_CTL_CALL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/ctl/ctl.h"

/* One request/reply exchange. */
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

/* How an exchange left its connection. */
enum ex_state {
	EX_NO_REPLY,  /* broke before a byte of the reply came: the call may go again */
	EX_BROKEN,    /* broke, or out of step: close it */
	EX_SYNCED,    /* a whole reply was read: the connection can carry the next call */
};

/* The KEEPALIVE and DISCONNECT calls, their request in frame (payload
 * encoded by the caller; a pipe's frames need their headers too).  Both
 * best effort: a peer that is gone has nothing to keep or free, and the
 * callers log what they want. */
#define CTL_KEEPALIVE_FRAME (WIRE_HDR_LEN + WIRE_KEEPALIVE_LEN)
#define CTL_KEEPALIVE_CALL(f)                                                                  \
	{ .what = "keepalive", .quiet = 1, .frame = (f), .req_len = WIRE_KEEPALIVE_LEN,       \
	  .req_type = WIRE_KEEPALIVE, .rep_type = WIRE_KEEPALIVE_REP, .rep_max = 0 }
#define CTL_DISCONNECT_FRAME (WIRE_HDR_LEN + WIRE_DISCONNECT_LEN)
#define CTL_DISCONNECT_CALL(f)                                                                 \
	{ .what = "disconnect", .quiet = 1, .frame = (f), .req_len = WIRE_DISCONNECT_LEN,     \
	  .req_type = WIRE_DISCONNECT, .rep_type = WIRE_DISCONNECT_REP, .rep_max = 0 }
/* A KEEPALIVE's payload for incarnation, in frame (after the header's room). */
void ctl_keepalive_encode(uint8_t frame[CTL_KEEPALIVE_FRAME], uint64_t incarnation);

/* One peer's part of ctl_call_many: count requests in frames, back to back
 * (headers encoded), answered in their order into rcs[0..count). */
struct ctl_pipe {
	const char *address;
	const uint8_t *frames;
	size_t len;
	unsigned count; /* >= 1 */
	int *rcs;
};

/* Every pipe's requests to its peer, one connection each (kept or new),
 * up to 64 peers at once, each within timeout_ms of its start; call says
 * what is asked (its frame unused).  0 once every rcs is set, -EINVAL,
 * -ENOMEM (none sent). */
int ctl_call_many(struct ctl_client *cl, struct ctl_pipe *pipes, unsigned n, int timeout_ms,
		  const struct ctl_call *call);

/* A transport error as the calls document it (ctl.h). */
int ctl_io_error(int rc);
/* How a failed send, or a reply that never started (rc), leaves the connection. */
enum ex_state ex_unanswered(int rc);
/* Read the reply to call on fd by deadline; *st says how the connection was left. */
int ctl_read_answer(int fd, int64_t deadline, int stop_fd, const struct ctl_call *call,
		    enum ex_state *st);
/* A dial (connect or authentication) to address failed with rc: what the
 * call returns; *said when the log has said why. */
int ctl_dial_failed(struct ctl_client *cl, const char *address, const struct ctl_call *call,
		    int rc, bool *said);
/* The peer's address, or -EINVAL said in the log. */
int ctl_resolve(const char *address, const struct ctl_call *call, struct sockaddr_in *sin);
/* Why a call that reached the peer failed, in the log (rc 0: nothing). */
void ctl_call_said(const struct ctl_client *cl, const char *address, const struct ctl_call *call,
		   int rc);

#endif /* FERRY_RUNTIME_CTL_CALL_H */
