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

/* The KEEPALIVE call for incarnation, its request in frame. */
#define CTL_KEEPALIVE_FRAME (WIRE_HDR_LEN + WIRE_KEEPALIVE_LEN)
void ctl_keepalive_call(struct ctl_call *call, uint8_t frame[CTL_KEEPALIVE_FRAME],
			uint64_t incarnation);

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
