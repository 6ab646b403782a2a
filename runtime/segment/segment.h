/* SPDX-License-Identifier: MIT */
/*
 * Segments: a peer engine's registered memory as seen from here, and the
 * endpoints every local core holds to it (one rail per core).  The control
 * path opens, refreshes and closes them under the engine's ctl_lock, but
 * never holds it across a round trip to a peer: an open reserves its slot
 * (SEG_OPENING) under the lock, fetches and handshakes without it, and
 * publishes under it again (open.c); submitters take a reference
 * (inflight) with no lock, and the cores and submitters read the per-rail
 * flags.
 */
#ifndef FERRY_RUNTIME_SEGMENT_H
#define FERRY_RUNTIME_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "ep/ep.h"
#include "ring/base/atomics.h"
#include "ring/base/compiler.h"
#include "runtime/engine/opts.h"
#include "runtime/ctl/wire.h"
#include "runtime/ferry.h"

struct ferry_engine;
struct qpx;

/* One control-plane call of a segment.  Generous: with hundreds of peers
 * opening at once on a loaded host (256 engines on 2 CPUs under ASan took
 * up to ~5 s for all), a slow answer must not become a failed open.  A dead
 * peer refuses at once; only a mute one costs the whole deadline. */
#define SEG_CTL_TIMEOUT_MS 10000

enum seg_state { SEG_FREE = 0, SEG_OPENING, SEG_OPEN, SEG_CLOSING };

struct ferry_seg {
	uint32_t gen;                  /* store_sc by the control path; load_sc by submitters */
	uint32_t state;                /* enum seg_state: likewise */
	uint64_t inflight;             /* requests using the segment: Dekker pair, see segment.c */
	uint32_t stale;                /* the peer restarted: refuse with -ESTALE */
	uint32_t opens;                /* opens not closed yet (ctl_lock): the last close closes */
	char address[64];
	char name[FERRY_NAME_MAX + 1]; /* opened by this name too ("": by address only) */
	uint64_t name_order;           /* the store's answer that named it (byname.c; ctl_lock) */
	char transport[16];            /* the provider the segment goes over (route.c) */
	uint8_t cpu_copy;              /* it moves bytes with the CPU (loop, tcp, cma): not verbs */
	uint8_t tx;                    /* its context in every local core */
	uint16_t n_peer_nics;          /* the peer's contexts of that transport: */
	uint16_t peer_nics[WIRE_MAX_NICS]; /* their descriptor entries */
	struct seg_desc *desc;         /* current descriptor (rcu-style: store_release) */
	struct seg_desc *old_descs[8]; /* replaced by refresh, kept until close */
	unsigned n_old;
	/* Core i's endpoint: written under ctl_lock with rcu_assign_pointer
	 * (seg_ep_set), read by core i with rcu_dereference (core_ep) and
	 * plainly by the control path, its only writer. */
	struct ferry_ep *eps[FERRY_MAX_CORES];
	uint8_t rail_down[FERRY_MAX_CORES]; /* the core's rail cannot reach the peer */
	uint8_t rail_paused[FERRY_MAX_CORES]; /* written by the core: rail health */
	uint8_t rail_gone[FERRY_MAX_CORES]; /* no endpoint (evicted, no room): load_sc/store_sc */
	uint32_t want_eps;             /* a request waits for evicted endpoints */
	uint32_t connect_round;        /* reconnects the repair thread finished */
	uint64_t connect_cores;        /* the cores it tried (had no endpoint at its start) */
	/* The repair thread's alone (under ctl_lock): how it tells a dead peer
	 * once, not at every probe (repair.c). */
	uint32_t repairs_failed;       /* failed in a row since the last success */
	int64_t repair_said_ms;        /* when a failure was last logged (0: not since) */
	bool repair_said_all;          /* that every rail is down, too */
	/* The last reconnect's result on each core it tried (0 or -errno):
	 * one core's NIC may fail where another's worked. */
	int32_t connect_errs[FERRY_MAX_CORES];
};

/*
 * The engine's segment slots: FERRY_MAX_SEGMENTS of them reserved at
 * engine create as one anonymous mapping (address space only: the kernel
 * gives a page memory when it is first written), taken SEG_CHUNK at a time
 * as opens need them (n_slots, under ctl_lock), never unmapped while the
 * engine lives: type-stable, so a lock-free reader (seg_lookup,
 * seg_acquire, the cores) may look at any slot it has a number for, and a
 * slot never taken reads as zeros (generation 0: no handle names it).
 * Memory grows with the most segments ever open at once, not with
 * FERRY_MAX_SEGMENTS, and a lookup is one index as with a plain array.
 */
#define SEG_CHUNK 64
_Static_assert(FERRY_MAX_SEGMENTS % SEG_CHUNK == 0, "whole chunks");

struct seg_table {
	struct ferry_seg *slots;       /* [FERRY_MAX_SEGMENTS], mapped at engine create */
	uint32_t n_slots;              /* slots taken so far: store_release */
};

/* Slots taken so far (any thread). */
static inline uint32_t seg_slots(const struct seg_table *t)
{
	return load_acquire(t->n_slots); /* pairs with: store_release in seg_table_grow */
}

/* The segment of slot (NULL: out of range): any thread. */
static inline struct ferry_seg *seg_at(const struct seg_table *t, uint32_t slot)
{
	return likely(slot < FERRY_MAX_SEGMENTS) ? &t->slots[slot] : NULL;
}

/* segment.c: reserve the slots (engine create); -ENOMEM. */
int seg_table_init(struct seg_table *t);
/* segment.c: SEG_CHUNK more slots (ctl_lock held); -ENOSPC at FERRY_MAX_SEGMENTS. */
int seg_table_grow(struct seg_table *t);
/* segment.c: unmap the slots (engine destroy, after seg_release of each). */
void seg_table_free(struct seg_table *t);

/* Publish ep (NULL: unpublish) as core i's endpoint to s; ctl_lock held. */
static inline void seg_ep_set(struct ferry_seg *s, unsigned i, struct ferry_ep *ep)
{
	rcu_assign_pointer(s->eps[i], ep); /* pairs with: rcu_dereference in core_ep */
}

/* What a handshake needs of its segment, copied under ctl_lock so the
 * round trip can go without it. */
struct seg_peer {
	char address[64];
	uint64_t target_incarnation;
	uint16_t remote_nic;        /* the peer's descriptor entry */
	struct nic_addr raddr;      /* its address */
	uint8_t tx;                 /* our context (transport) in the core */
	/* raddr is the peer's answer to this handshake's GET_DESC, not the
	 * segment's cached copy (which a repair may have updated since). */
	bool raddr_fresh;
};

static inline ferry_seg_t seg_handle(uint32_t gen, uint32_t slot)
{
	return (uint64_t)gen << 32 | (slot + 1);
}

/* An open by name: the engine the metadata store says holds it. */
struct seg_want {
	const char *name;
	uint64_t incarnation;          /* the descriptor must say the same */
};

/* open.c: open the segment at address (want: NULL, or what the store said
 * of the name that led here); no lock held. */
int seg_open_address(struct ferry_engine *e, const char *address, const struct seg_want *want,
		     ferry_seg_t *out);
/* byname.c: ferry_segment_open of a name (no ctl_lock held). */
int seg_open_named(struct ferry_engine *e, const char *name, ferry_seg_t *out);
/*
 * byname.c: nothing listens at address any more (a keepalive was refused):
 * each segment there opened by name whose name the metadata store now
 * gives to another incarnation (its engine restarted elsewhere) is marked
 * stale, so its requests end -ESTALE and the application opens the name
 * again, rather than -EHOSTDOWN for as long as repairs knock at the old
 * address.  It is not moved to the new engine: that one's regions and
 * keys are another descriptor, and requests in flight hold the old ones.
 * The lease thread; no lock held; asks the store (bounded).  0, or the
 * store's error (it did not answer: ask it no more this round).
 */
int seg_names_recheck(struct ferry_engine *e, const char *address);

/* The segment of handle h (NULL: unknown handle or slot), its slot in *slot. */
struct ferry_seg *seg_lookup(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot);

/* route.c: the transports in ferry's order of preference. */
#define ROUTE_N 4
extern const char *const route_order[ROUTE_N];

/* route.c: the next transport (from *next on, in ferry's order) that both
 * engines have and that reaches the peer of descriptor d: fills transport,
 * tx and peer_nics.  -EPROTONOSUPPORT when none is left. */
int seg_route_next(struct ferry_engine *e, struct ferry_seg *s, const struct seg_desc *d,
		   unsigned *next);

/* A reference on an open segment for a request (NULL: closed or unknown). */
struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot);
/* n references at once on s, the segment of handle h (seg_lookup): false,
 * holding none, when it is no longer open in h's generation. */
bool seg_refs_take(struct ferry_seg *s, ferry_seg_t h, uint32_t n);
void seg_release_ref(struct ferry_seg *s);
void seg_release_refs(struct ferry_seg *s, uint32_t n);

/* Mark core i's rail to s down (or up) and tell its core (fail fast); ctl_lock held. */
void seg_rail_set_down(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot,
		       int down);
/* The peer restarted: fail the segment's requests fast (-ESTALE), said
 * once in the log; ctl_lock held. */
void seg_mark_stale(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot);
/* The same without the message (the caller said why: a name that moved);
 * false if it was stale already. */
bool seg_mark_stale_quiet(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot);
/*
 * Connect the rails of segment slot (generation gen) that have no endpoint
 * (evicted), for parked requests (the repair thread), in two halves
 * around handshakes sent without waiting (seg_handshake_start): begin
 * prepares the endpoints under ctl_lock, if the segment is still open in
 * that generation (NULL: no memory), and says which handshakes to send
 * (seg_reconnect_hs: none when there is nothing to connect); end takes
 * their results (rcs[k] for hs[k]), publishes what connected and frees r:
 * rails added, or -errno.  The caller flushes the DISCONNECTs.
 */
struct seg_reconn;
struct seg_reconn *seg_reconnect_begin(struct ferry_engine *e, struct ferry_seg *s,
				       uint32_t slot, uint32_t gen);
const struct seg_hs *seg_reconnect_hs(const struct seg_reconn *r, unsigned *n);
/* The cores r tried: those with no endpoint when it began. */
uint64_t seg_reconnect_cores(const struct seg_reconn *r);
/* errs (NULL: not wanted): each tried core's own result, 0 when it has an
 * endpoint now, else why not (-EBUSY: no room). */
int seg_reconnect_end(struct ferry_engine *e, struct seg_reconn *r, const int *rcs, int *errs);
/* Room in core i's endpoint cache, evicting with SIEVE if it is full;
 * -EBUSY when every cached endpoint is in use.  ctl_lock held. */
int seg_make_room(struct ferry_engine *e, unsigned i);
/* Tear down slot's endpoints on every core (their peer halves queued for
 * DISCONNECT); ctl_lock held. */
void seg_remove_eps(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot);
/* Engine destroy: tell every peer to free its half of our endpoints (best effort). */
void seg_disconnect_all(struct ferry_engine *e);

/* handshake.c: what a handshake to the peer's entry remote_nic needs; ctl_lock held. */
void seg_peer_of(const struct ferry_seg *s, uint16_t remote_nic, struct seg_peer *out);
/* handshake.c: connect hs[k].nqps QPs of core hs[k].core to new responder
 * QPs on the peer, in one CONNECT_REQ each (QP j is token + j there), all
 * at once: a peer that does not answer costs one timeout, not one per
 * core.  rcs[k]: 0, -ENETUNREACH (our provider cannot reach the peer's
 * NIC), -EMFILE, -ENFILE, -ENOMEM or -ENOBUFS (our QPs could not connect
 * for want of those here), or the control call's error.  quiet: the
 * caller logs why it failed.  No lock held. */
struct seg_hs {
	unsigned core;
	struct seg_peer *peer;         /* (seg_handshake_start may update its raddr) */
	struct qpx *const *qps;
	unsigned nqps;
	uint64_t token;
};
void seg_handshake_many(struct ferry_engine *e, const struct seg_hs *hs, unsigned n, int *rcs,
			bool quiet);
/* The same without waiting, on a set of calls a poll loop drives (the
 * repair thread's): done(arg, rcs) once every handshake ended (rcs valid
 * during the call; hs must stay until then).  0, -EBUSY (no room in
 * calls: nothing started), -ENOMEM.  For endpoints made from the
 * segment's cached descriptor (a reconnect's): each peer's CONNECT_REQs
 * have a GET_DESC behind them, as a repair's (seg_fresh_ask), and each
 * hs[k].peer->raddr is the peer's NIC address now if it answered (else
 * the cached one), before our QPs are connected to it. */
struct ctl_calls;
typedef void (*seg_hs_done_fn)(void *arg, const int *rcs);
int seg_handshake_start(struct ferry_engine *e, struct ctl_calls *calls, const struct seg_hs *hs,
			unsigned n, bool quiet, seg_hs_done_fn done, void *arg);
/* Its two halves, for a caller that sends the CONNECT_REQ itself (the
 * repair thread, many at once): the request, then, with the peer's reply,
 * our QPs connected (-ENETUNREACH, the peer's halves queued for DISCONNECT,
 * when our provider cannot reach them; the same queued, the error kept,
 * when it failed for want of descriptors or memory here). */
void seg_handshake_req(struct ferry_engine *e, unsigned i, const struct seg_peer *p,
		       struct qpx *const *qps, unsigned n, uint64_t token,
		       struct wire_connect_req *req);
int seg_handshake_apply(struct ferry_engine *e, unsigned i, const struct seg_peer *p,
			struct qpx *const *qps, unsigned n, uint64_t token,
			const struct wire_connect_rep *rep, bool quiet);
/* handshake.c: a GET_DESC behind connect's CONNECT_REQ, on pipe (count 1,
 * its frames connect's frame, rcs room for 2), so that the round trip that
 * makes the peer's new QPs also says the peer's NIC addresses now: an IB
 * LID or a RoCE GID may have changed since we fetched its descriptor, and
 * a QP connected to the old one reaches nobody.  Any peer of this wire
 * version answers it.  NULL (pipe as it was) without memory. */
struct seg_fresh;
struct ctl_call;
struct ctl_pipe;
struct seg_fresh *seg_fresh_ask(struct ctl_call *connect, struct ctl_pipe *pipe);
/* Its answer (rc: the GET_DESC's) taken: p->raddr the peer's address now,
 * if the answer came from p's incarnation; else the cached one stays.
 * Frees f (NULL: nothing). */
void seg_fresh_take(struct seg_fresh *f, int rc, struct seg_peer *p);
/* disconnect.c: the peer's QPs token .. token + n - 1 are to be freed (any
 * thread, any lock); seg_disconnect_flush sends the DISCONNECTs (no lock). */
void seg_disconnect_later(struct ferry_engine *e, const char *address, uint64_t token,
			  unsigned n);
/* Like seg_disconnect_later, but sent by the repair thread without
 * waiting: for a peer that got a handshake and no answer came back (why:
 * the handshake's error; -ECANCELED, engine destroy's cancel, is sent by
 * the destroy with a brief bound: the peer may be mute). */
void seg_disconnect_background(struct ferry_engine *e, const char *address, uint64_t token,
			       unsigned n, int why);
/* A handshake's bound: SEG_CTL_TIMEOUT_MS unless a test lowered it (hs_timeout_ms). */
int seg_hs_timeout_ms(struct ferry_engine *e);
void seg_disconnect_flush(struct ferry_engine *e);   /* the calling thread's */
void seg_disconnect_flush_all(struct ferry_engine *e); /* every thread's (engine destroy) */
/* The calling thread's, without waiting, on calls (the repair thread's),
 * to as many peers as it has room for: 0, or -EBUSY when some stay queued
 * (call again once a call landed). */
int seg_disconnect_start(struct ferry_engine *e, struct ctl_calls *calls);
/* The time after which a DISCONNECT that first failed at now is tried no
 * more (ms, ferry_now_ms's clock): now + lease_ms; 0 (none: only the
 * number of sends bounds it) when lease_ms is 0. */
uint64_t seg_disconnect_deadline_ms(const struct ferry_engine *e, uint64_t now);
/* Free a slot's descriptors (engine destroy). */
void seg_release(struct ferry_seg *s);

/* The core has no endpoint to the segment (see ep_keep's Dekker pair). */
static inline bool rail_gone(const struct ferry_seg *s, unsigned core)
{
	return load_sc(s->rail_gone[core]);
}

/* A rail (core's endpoint to a segment) new work should avoid. */
static inline bool rail_unusable(const struct ferry_seg *s, unsigned core)
{
	/* down and paused are hints: a request sent to a rail that just went
	 * down fails fast or moves, it is never lost. */
	return rail_gone(s, core) || READ_ONCE(s->rail_down[core]) ||
	       READ_ONCE(s->rail_paused[core]);
}

#endif /* FERRY_RUNTIME_SEGMENT_H */
