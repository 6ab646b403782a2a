/* SPDX-License-Identifier: MIT */
/*
 * One connection of the control server (server.c moves its bytes, serve.c
 * answers its messages).  Each connection has its own read state -- the
 * header being read, then its payload -- and at most one reply queued: the
 * next request is not read before the reply is sent, so a client that does
 * not read cannot make the server buffer more than one reply for it.
 *
 * Deadlines (absolute, sock_now_ms(); 0 = none):
 *   rx_deadline    a request must be whole CTL_IO_TIMEOUT_MS after its first byte
 *   tx_deadline    a reply must be taken by the client within CTL_IO_TIMEOUT_MS
 *   auth_deadline  a peer must prove itself within CTL_IO_TIMEOUT_MS of accept
 *   idle_deadline  between requests, a connection is closed after idle_ms
 */
#ifndef FERRY_RUNTIME_CTL_CONN_H
#define FERRY_RUNTIME_CTL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qp/auth/auth.h"
#include "ring/base/atomics.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/wire.h"

enum conn_auth {
	CONN_OPEN = 0,   /* requests are served (authenticated, or no key here) */
	CONN_WANT_HELLO, /* key here: the peer's AUTH_HELLO must come first */
	CONN_WANT_PROOF, /* our hello and proof sent: the peer's proof must come next */
};

struct ctl_conn {
	int fd;
	unsigned idx;            /* in ctl.conns */
	uint32_t events;         /* what epoll watches now */
	uint8_t auth;            /* enum conn_auth */
	bool closing;            /* close once the queued reply is sent */
	bool tx_counts;          /* the queued reply answers a request: count it */
	bool have_hdr;           /* hdr is whole and checked; reading the payload */
	bool sealed;             /* sess is on: frames are sealed both ways from now */
	struct wire_hdr h;
	uint8_t hdr[WIRE_HDR_LEN];
	size_t got;              /* bytes of the header, then of the payload */
	uint8_t *payload;
	uint8_t *tx;             /* the queued frame(s) */
	size_t tx_len, tx_off;
	int64_t rx_deadline, tx_deadline, auth_deadline, idle_deadline;
	uint8_t hello_c[WIRE_AUTH_HELLO_LEN], hello_s[WIRE_AUTH_HELLO_LEN]; /* as sent */
	struct auth_sess sess;   /* with a key: the connection's, once both proofs are in */
	char peer[32];           /* "a.b.c.d:port", for the logs */
};

/* Count into a statistic of the server (read by tests and stats: no order). */
static inline void ctl_count(uint64_t *counter)
{
	fetch_add_relaxed(*counter, 1);
}

/* cap.c: the cap when none was set: CTL_MAX_CONNS, or half of the
 * descriptors left under RLIMIT_NOFILE if that is less (at least CTL_MIN_CONNS). */
unsigned ctl_cap_default(void);
/* cap.c: past the cap: a WIRE_ERROR -EBUSY on fd, then close it. */
void ctl_cap_refuse(struct ctl *c, int fd);
/* cap.c: with a key, close the oldest connection not yet authenticated
 * (-EBUSY) to make room; false if there is none.  Not while an event of
 * the current pass may still name it. */
bool ctl_cap_make_room(struct ctl *c);
/* server.c: close a connection, after reading what it sent unread (drain). */
void ctl_conn_close(struct ctl *c, struct ctl_conn *cn, bool drain);

/* serve.c: the largest payload a message of this type may have on this
 * connection, or -1 when the type is not a request. */
long ctl_req_max(uint16_t type);
/* serve.c: may a message of this type come now (authentication)?  0, or
 * the connection is refused (closing, maybe a WIRE_ERROR queued) and -EACCES. */
int ctl_gate(struct ctl *c, struct ctl_conn *cn, uint16_t type);
/* serve.c: a whole message is in (cn->h, cn->payload): answer it. */
void ctl_handle(struct ctl *c, struct ctl_conn *cn);

/* server.c: queue a frame (malloc'd, WIRE_HDR_LEN + payload, header encoded
 * by the caller); counts: it answers a request. */
void ctl_conn_send(struct ctl_conn *cn, uint8_t *frame, size_t len, bool counts);
/* server.c: queue the answer to a request: frame (payload at frame +
 * WIRE_HDR_LEN, malloc'd or NULL) if rc is 0, else a WIRE_ERROR with rc. */
void ctl_conn_reply(struct ctl_conn *cn, int rc, uint16_t type, uint8_t *frame,
		    size_t payload_len);
/* serve.c: with our hello and proof sent and the peer's proof not in, seal
 * what we send from now on (a refusal): the peer reads sealed frames once it
 * has sent its proof. */
void ctl_conn_seal_early(struct ctl *c, struct ctl_conn *cn);
/* server.c: queue a WIRE_ERROR carrying err (negative errno). */
void ctl_conn_error(struct ctl_conn *cn, int err);
/* server.c: count and log a malformed message; the connection closes
 * (after what is queued).  -EPROTO. */
int ctl_conn_refuse(struct ctl *c, struct ctl_conn *cn, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* server.c: count and log a peer that failed authentication, queue a
 * WIRE_ERROR -EACCES, close after it.  -EACCES. */
int ctl_conn_deny(struct ctl *c, struct ctl_conn *cn, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* FERRY_RUNTIME_CTL_CONN_H */
