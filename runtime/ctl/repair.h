/* SPDX-License-Identifier: MIT */
/*
 * The repair thread: replaces QPs that broke, reconnects evicted endpoints
 * that a request waits for, queues retired endpoints for call_rcu, and keeps
 * the leases (lease.c): keepalives out, silent initiators' QPs freed.
 */
#ifndef FERRY_RUNTIME_CTL_REPAIR_H
#define FERRY_RUNTIME_CTL_REPAIR_H

#include <pthread.h>
#include <stdint.h>

#include "runtime/core/core.h"

struct ferry_engine;

#define REPAIR_LATER_MAX 256

struct repair {
	pthread_t thread;
	int started;
	int stop;                      /* load_acquire/store_release */
	struct repair_job later[REPAIR_LATER_MAX]; /* failed: try again after a back-off */
	unsigned n_later;
	uint64_t next_keepalive_ms;    /* peers told we are alive */
	uint64_t next_expire_ms;       /* silent initiators' QPs freed */
};

int repair_start(struct ferry_engine *e);
void repair_stop(struct ferry_engine *e);

/* lease.c, on the repair thread: keepalives out, expired initiators' QPs freed,
 * the name's lease in the metadata store renewed. */
void repair_leases(struct ferry_engine *e);

#endif /* FERRY_RUNTIME_CTL_REPAIR_H */
