/* SPDX-License-Identifier: MIT */
/*
 * One control call's description and the steps of an exchange, shared by
 * client.c (a call to one peer, blocking) and many.c (the same call to
 * many peers at once).
 */
#ifndef FERRY_RUNTIME_CTL_CALL_H
#define FERRY_RUNTIME_CTL_CALL_H

#include <netinet/in.h>
#include <poll.h>
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
	bool *went;        /* not NULL: set once the request is written whole (client.c) */
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
	unsigned count;              /* >= 1 */
	int *rcs;
	const struct ctl_call *call; /* NULL: ctl_call_many's */
	void *const *outs;           /* answer k decoded into outs[k] (NULL: call->out) */
	/* Not NULL: request k is calls[k]'s (its reply type, decoder, out
	 * unless outs says), so one round trip may ask different things;
	 * call (or ctl_call_many's) still names the pipe in the logs until
	 * an answer comes.  NULL (or calls[k] NULL): call's. */
	const struct ctl_call *const *calls;
	/* Set by the call (zeroed at its start): */
	size_t sent;                 /* most bytes of frames one connection took (tags too) */
	size_t tag_len;              /* bytes of tag after each frame on that connection */
	unsigned answered;           /* answers read: rcs[0..answered) are the peer's */
};

/* Whether request k of a pipe that ended may have been served by the peer
 * though no answer says so: written whole, never answered (timed out,
 * cancelled, the connection broke).  A CONNECT_REQ in that state may have
 * left responder QPs at the peer that only a DISCONNECT (or its lease)
 * frees. */
bool ctl_pipe_unanswered_sent(const struct ctl_pipe *p, unsigned k);

/*
 * Calls in flight side by side (many.c), for a thread that has a poll loop
 * of its own (the repair thread): up to CTL_CALLS_MAX at once, each pipe's
 * requests on one connection (kept or new), each within its timeout from
 * its start.  Nothing here waits: ctl_calls_fds says what to poll and for
 * how long, ctl_calls_run takes the steps that are ready.  One thread.
 */
#define CTL_CALLS_MAX 64
struct ctl_calls;
typedef void (*ctl_done_fn)(void *arg);
/* NULL: no memory (or no client). */
struct ctl_calls *ctl_calls_new(struct ctl_client *cl);
/* Ends the calls still in flight (-ECANCELED, their done called), then frees. */
void ctl_calls_free(struct ctl_calls *s);
/* Start pipe's requests (call says what is asked; its out takes a single
 * answer, its frame is unused): 0, or -EBUSY (CTL_CALLS_MAX in flight),
 * -EINVAL, -ECANCELED (from a done() that ctl_calls_cancel called).
 * done(arg) once every pipe->rcs is set (maybe before this returns: an
 * address that does not parse, a refused connect). */
int ctl_calls_start(struct ctl_calls *s, struct ctl_pipe *pipe, const struct ctl_call *call,
		    int timeout_ms, ctl_done_fn done, void *arg);
unsigned ctl_calls_active(const struct ctl_calls *s);
/* Calls that may start now (CTL_CALLS_MAX, or a test's lower limit, less
 * those in flight). */
unsigned ctl_calls_room(const struct ctl_calls *s);
/* Tests: at most limit calls at once (0: CTL_CALLS_MAX). */
void ctl_calls_set_limit(struct ctl_calls *s, unsigned limit);
/* The fds to poll (at most CTL_CALLS_MAX + 1: the client's cancel too), and
 * in *next_ms the ms until the earliest deadline (-1: nothing in flight). */
unsigned ctl_calls_fds(const struct ctl_calls *s, struct pollfd *p, int *next_ms);
/* Take every step that is ready and end the calls out of time (or all of
 * them, -ECANCELED, once the client is cancelled); how many ended. */
unsigned ctl_calls_run(struct ctl_calls *s);
/* End every call in flight with rc. */
void ctl_calls_cancel(struct ctl_calls *s, int rc);

/* ctl_disconnect_many (each: ctl_disconnect_each) without waiting, on
 * calls (a poll loop's): done(arg) once every DISCONNECT ended, their
 * results in rcs[0..n) and fate[0..n) then (rcs may be NULL, fate
 * too).  addresses, rcs and fate must stay until then.  0, -EBUSY (no
 * room: nothing sent), -EINVAL, -ENOMEM. */
int ctl_disconnect_start(struct ctl_calls *calls, const char *const *addresses,
			 const struct wire_disconnect *d, unsigned n, int timeout_ms, bool each,
			 int *rcs, uint8_t *fate, ctl_done_fn done, void *arg);

/* Every pipe's requests to its peer at once (up to CTL_CALLS_MAX under
 * way), blocking until all are over; call says what is asked (unless a
 * pipe has its own).  0 once
 * every rcs is set, -EINVAL, -ENOMEM (none sent). */
int ctl_call_many(struct ctl_client *cl, struct ctl_pipe *pipes, unsigned n, int timeout_ms,
		  const struct ctl_call *call);

/* The GET_DESC call's shape, its reply decoded into out (frame unset; the
 * request has no payload: a WIRE_HDR_LEN frame).  Free a decoded out with
 * seg_desc_free. */
void ctl_fetch_call_init(struct ctl_call *call, struct seg_desc *out, int quiet);
/* The CONNECT_REQ call's shape, its reply decoded into rep (frame unset). */
void ctl_connect_call_init(struct ctl_call *call, struct wire_connect_rep *rep, int quiet);
/* The CONNECT_REQ call for req, its reply decoded into rep (zeroed): its
 * frame malloc'd, header encoded (the caller frees it).  0, -EINVAL (what
 * the target would refuse), -ENOMEM. */
int ctl_connect_prepare(const struct wire_connect_req *req, struct wire_connect_rep *rep,
			int quiet, struct ctl_call *call);
/* The reply must be for this endpoint and carry one peer QP per QP of
 * ours: 0 or -EPROTO (logged). */
int ctl_check_rep(const struct wire_connect_req *req, const struct wire_connect_rep *rep);

/* A transport error as the calls document it (ctl.h). */
int ctl_io_error(int rc);
/* How a failed send, or a reply that never started (rc), leaves the connection. */
enum ex_state ex_unanswered(int rc);
/* Whether the server answers rc (-EBUSY at its cap, -EACCES, ...) and closes. */
bool ctl_closing_errno(int rc);
/* Read the reply to call on fd by deadline, opened with sess (tag checked,
 * payload decrypted) when that is on (one that does not verify: -EPROTO, counted in *forged
 * if not NULL); *st says how the connection was left. */
int ctl_read_answer(int fd, struct auth_sess *sess, int64_t deadline, int stop_fd,
		    const struct ctl_call *call, enum ex_state *st, uint64_t *forged);
/* A request's send on fd failed (rc): the server's refusal (-EBUSY,
 * -EACCES: it closed after saying why) if it is there whole, else the
 * send's error as the calls document it; *st says how fd was left. */
int ctl_send_failed(struct ctl_client *cl, int fd, struct auth_sess *sess,
		    const struct ctl_call *call, int rc, enum ex_state *st);
/* frames (len bytes: whole frames back to back, headers encoded) as they go
 * on a connection of sess: with the session on, a copy (malloc'd) with each
 * frame sealed (payload encrypted, tag after it), in order, sess's sequence
 * advanced; else frames itself.  0, -ENOMEM, -EINVAL (frames that do not parse).  Free the copy
 * with ctl_sealed_free(frames, *out). */
int ctl_seal(struct auth_sess *sess, const uint8_t *frames, size_t len, uint8_t **out,
	     size_t *out_len);
void ctl_sealed_free(const uint8_t *frames, uint8_t *sealed);
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
