/* SPDX-License-Identifier: MIT */
/*
 * Notifications (ferry_notify, ferry_notif_poll): a short message to a
 * peer, delivered once the WRITEs to it that came before in the batch have
 * landed.  They ride the control plane, never the cores:
 *
 *   sender:   ferry_notify (the port's thread) takes a batch slot, notes
 *             which earlier WRITEs to the segment are still pending, and
 *             pushes a job on the engine's lock-free inbox (send.c).  The
 *             notifier thread (one per engine, control path) waits for
 *             those WRITEs to end -- it reads their states, every
 *             asleep until a core rings its bell (a request of a batch
 *             with a waiting notification ended: RQ_BATCH_BELL) -- then sends a NOTIFY
 *             over the client's authenticated connections and ends the slot.
 *   receiver: the control server decodes the NOTIFY and pushes it on a
 *             bounded queue (queue.c); ferry_notif_poll drains it from any
 *             thread.  A full queue answers -EAGAIN: the sender keeps the
 *             slot pending and sends again later (back-pressure, never a
 *             drop), up to opts.timeout_ms of refusals in a row.
 *
 * The cores are untouched: a notification slot is never dispatched to one.
 */
#ifndef FERRY_RUNTIME_NOTIFY_H
#define FERRY_RUNTIME_NOTIFY_H

#include <pthread.h>
#include <stdint.h>

#include "ring/base/compiler.h"
#include "runtime/ctl/wire.h"
#include "runtime/ferry.h"
#include "slice/request.h"

#define NOTIF_QUEUE_DEFAULT 1024 /* notifications a receiver holds (~330 KiB, made on the first) */
#define NOTIFY_DEP_WAIT_US 10000 /* waiting for WRITEs, asleep at most this long: the
                                  * cores ring (no ring is lost: dep_late counts any
                                  * WRITE found ended only by this look) */
#define NOTIFY_BACKOFF_MAX_MS 64 /* longest pause between sends to a full receiver */
#define NOTIFY_IO_TIMEOUT_MS 2000
#define RQ_OP_NOTIFY 0xff        /* a notification's slot (never a nic_op) */

_Static_assert(WIRE_NOTIFY_MAX == FERRY_NOTIF_MAX, "one message bound");
_Static_assert(WIRE_NOTIFY_FROM_MAX + 1 == sizeof(((struct ferry_notif *)0)->from),
	       "one sender name bound");

struct notif_cell {
	uint64_t seq;                  /* Vyukov's turn counter (queue.c) */
	struct ferry_notif n;
};

/* The receiver's bounded queue: one producer (the control server thread),
 * any number of consumers (ferry_notif_poll). */
struct notif_queue {
	uint64_t head ferry_cache_aligned; /* consumers' next */
	uint64_t tail ferry_cache_aligned; /* the producer's next */
	uint64_t mask;
	struct notif_cell *cells;
};

struct notify_job;

struct notify {
	/* receiver */
	struct notif_queue *q;         /* made on the first NOTIFY (store_release) */
	uint32_t q_size;               /* power of 2 */
	uint64_t received;             /* queued (relaxed counters, for tests) */
	uint64_t refused_full;         /* -EAGAIN answers */
	/* sender */
	struct notify_job *inbox;      /* lock-free stack: ports push, the thread takes all */
	int wake_fd;                   /* eventfd: a job came, or stop */
	int stop;
	int running;
	pthread_t thread;
	uint64_t sent;                 /* delivered */
	uint64_t busy_retries;         /* sends refused -EAGAIN and tried again */
	uint64_t with_deps;            /* notifications queued behind pending WRITEs */
	uint64_t dep_late;             /* notifications whose WRITEs were found ended after a
	                                * sleep that no ring ended (a lost ring would show) */
	struct rq_bell bell;           /* rung by the cores for waiting jobs (wake_fd) */
};

struct ferry_engine;

/* Before ctl_start: the queue bound (0: NOTIF_QUEUE_DEFAULT, rounded up to
 * a power of 2, at least 2) and the server's handler. */
void notify_init(struct ferry_engine *e, uint32_t queue);
/* Start the notifier thread.  0 or -errno. */
int notify_start(struct ferry_engine *e);
/* Engine destroy, first step: jobs end -ECANCELED from now on. */
void notify_stop_begin(struct ferry_engine *e);
/* Then: join the thread (every job ended), and once the control server
 * has stopped, free the queue.  Safe on a never-started notify. */
void notify_stop_end(struct ferry_engine *e);
void notify_free_queue(struct ferry_engine *e);
/* Last, once the cores have stopped (a core may still ring the bell of a
 * job that just ended): close the bell's eventfd. */
void notify_close_bell(struct ferry_engine *e);

/* queue.c: the control server's NOTIFY handler (arg: the engine). */
int notify_receive(void *arg, const struct wire_notify *n);

#endif /* FERRY_RUNTIME_NOTIFY_H */
