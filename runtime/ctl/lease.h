/* SPDX-License-Identifier: MIT */
/*
 * The lease thread (lease.c): keepalives out to every open segment's peer,
 * the QPs of initiators that went silent freed, the engine's name renewed
 * in the metadata store.  Its own thread, so that a peer or a store that
 * does not answer never holds up a repair.
 */
#ifndef FERRY_RUNTIME_CTL_LEASE_H
#define FERRY_RUNTIME_CTL_LEASE_H

#include <pthread.h>
#include <stdint.h>

struct ferry_engine;

struct lease {
	pthread_t thread;
	int started;
	int stop;                      /* load_acquire/store_release */
	int wake_fd;                   /* eventfd: lease_stop wakes the thread */
	uint64_t next_keepalive_ms;    /* the lease thread's own */
	uint64_t next_expire_ms;
	unsigned recheck_from;         /* the lease thread's own: peers_keepalive's */
	/* statistics (relaxed; tests read them) */
	uint64_t rounds;               /* keepalive rounds sent */
	uint64_t unanswered;           /* keepalives that got no answer in time */
};

/* Start the lease thread (after named_start: it renews the name).  0 or -errno. */
int lease_start(struct ferry_engine *e);
/* Stop it; a keepalive round under way ends at once if the engine's
 * client is cancelled (engine destroy cancels it first). */
void lease_stop(struct ferry_engine *e);

#endif /* FERRY_RUNTIME_CTL_LEASE_H */
