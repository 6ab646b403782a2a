/* SPDX-License-Identifier: MIT */
/*
 * The target side of the endpoint handshake, run by the control thread: for
 * each initiator endpoint, the responder QPs on the requested NIC,
 * connected back to the initiator's QPs, and the lease that frees them when
 * the initiator goes silent.
 */
#ifndef FERRY_RUNTIME_CTL_PASSIVE_H
#define FERRY_RUNTIME_CTL_PASSIVE_H

#include <stdint.h>

#include "runtime/ctl/wire.h"

struct ferry_engine;
struct passive_ep;

/*
 * Names (initiator incarnation, token) a DISCONNECT asked us to free
 * before we held them: the initiator gave up on their handshake, and its
 * CONNECT_REQ may still come (nothing orders it before the DISCONNECT, on
 * another connection); it is refused.  A ring, the oldest overwritten:
 * tokens of a live initiator are never used twice, but arrive in no
 * order (its segments', cores' and repairs' handshakes interleave), so
 * no "below this one" mark would do.  Under passive_lock.
 */
#define PASSIVE_GONE_MAX 1024
struct passive_gone {
	struct {
		uint64_t incarnation;
		uint64_t token;
	} name[PASSIVE_GONE_MAX];
	unsigned n;    /* names held, up to PASSIVE_GONE_MAX */
	unsigned next; /* the slot written next (the oldest once full) */
};

/* The control server's handlers (arg: the engine). */
int passive_connect(void *arg, const struct wire_connect_req *req, struct wire_connect_rep *rep);
int passive_disconnect(void *arg, const struct wire_disconnect *d);
int passive_keepalive(void *arg, uint64_t incarnation);
/* Free every responder QP (engine destroy). */
void passive_destroy_all(struct ferry_engine *e);
/* Free responder QPs whose initiator was silent for lease_ns; how many. */
unsigned passive_expire(struct ferry_engine *e, uint64_t lease_ns);
/* Responder QPs held, in all or of one initiator incarnation. */
unsigned passive_count(struct ferry_engine *e);
unsigned passive_count_of(struct ferry_engine *e, uint64_t incarnation);

#endif /* FERRY_RUNTIME_CTL_PASSIVE_H */
