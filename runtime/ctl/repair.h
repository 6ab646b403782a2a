/* SPDX-License-Identifier: MIT */
/*
 * The repair thread: replaces QPs that broke, reconnects evicted endpoints
 * that a request waits for, queues retired endpoints for call_rcu.  (The
 * leases are the lease thread's: lease.h.)
 */
#ifndef FERRY_RUNTIME_CTL_REPAIR_H
#define FERRY_RUNTIME_CTL_REPAIR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/core.h"

struct ferry_engine;
struct ctl_calls;
struct repair_flight;

#define REPAIR_LATER_MAX 256
#define REPAIR_RECONN_MAX 64

struct repair {
	pthread_t thread;
	int started;
	int stop;                      /* load_acquire/store_release */
	struct repair_job later[REPAIR_LATER_MAX]; /* failed: try again after a back-off */
	unsigned n_later;              /* written with WRITE_ONCE: tests read it */
	unsigned later_max;            /* REPAIR_LATER_MAX; tests lower it */
	int wake_fd;                   /* eventfd: repair_kick wakes the thread */
	uint32_t sleeping;             /* store_sc/fetch_or_sc: see repair_wait */
	struct ctl_calls *calls;       /* repair handshakes in flight (runtime/ctl/call.h) */
	struct repair_flight *flights; /* what each needs when it lands: CTL_CALLS_MAX */
	bool landed;                   /* a handshake ended since the last DISCONNECT flush */
	uint32_t disc_queued;          /* seg_disconnect_background queued some */
	unsigned disc_calls;           /* calls DISCONNECTs hold (WRITE_ONCE: tests read it) */
	uint64_t disc_due_ms;          /* the earliest DISCONNECT back-off runs out (0: none) */
	bool reconn_deferred;          /* a reconnect found no room: none start until a call lands */
	uint32_t reconn_slots[REPAIR_RECONN_MAX]; /* segments whose reconnect is in flight */
	uint32_t reconn_gens[REPAIR_RECONN_MAX];  /* ... in that generation */
	unsigned n_reconn;             /* WRITE_ONCE: tests read it */
	uint64_t handshakes;           /* repairs tried (statistics, for tests) */
	uint64_t refuse_until_ms;      /* tests: repairs are refused until then (ferry_now_ms),
	                                * as by a peer whose control port is closed a while */
};

int repair_start(struct ferry_engine *e);
/* Work for the repair thread was queued: wake it if it sleeps.  Any thread. */
void repair_kick(struct ferry_engine *e);
void repair_stop(struct ferry_engine *e);

struct ferry_seg;
struct pollfd;
/* Core i's rail to s cannot reach the peer: down; fail fast if no rail can
 * (then true).  ctl_lock held. */
bool rail_unreachable(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot);
/* reconnect.c: reconnect the evicted endpoints requests wait for (this
 * thread); how many started. */
unsigned repair_reconnects(struct ferry_engine *e);
/* A segment waits for a reconnect that could start now. */
bool repair_reconnect_wanted(struct ferry_engine *e);
/* Retry core i's pending repairs now (its port came back). */
void repair_due_now(struct ferry_engine *e, unsigned i);
/* events.c: the contexts' event fds (at most max), and their events handled. */
unsigned events_fds(struct ferry_engine *e, struct pollfd *fds, unsigned max);
unsigned events_run(struct ferry_engine *e);

#endif /* FERRY_RUNTIME_CTL_REPAIR_H */
