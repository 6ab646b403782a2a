/* SPDX-License-Identifier: MIT */
/*
 * Notifications (ferry_notify, ferry_notif_poll): a short message to a
 * peer, delivered once the WRITEs to it that came before in the batch have
 * landed.  They ride the control plane, never the cores:
 *
 *   sender:   ferry_notify (the port's thread) takes a batch slot, notes
 *             which earlier WRITEs to the segment are still pending, and
 *             pushes a job on the engine's lock-free inbox (send.c).  The
 *             notifier (one per engine, control path) waits for those
 *             WRITEs to end -- it reads their states, asleep until a core
 *             rings its bell (a request of a batch with a waiting
 *             notification ended: RQ_BATCH_BELL) -- then puts the job on
 *             its peer's lane and sends a NOTIFY over the client's
 *             authenticated connections, and ends the slot.  The notifier
 *             is a role, not a thread (lane.c): when a send lasts longer
 *             than NOTIFY_WATCH_MS a deputy takes the role over, so a peer
 *             that does not answer holds back only its own lane.
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
#include <stdbool.h>
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
#define NOTIFY_WATCH_MS 2        /* a send the leader is in for longer: the deputy leads */
#define NOTIFY_THREADS_MAX 8     /* leader, deputy, and a thread per peer that did not answer */
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

/* One notification on its way (send.c makes it, lane.c sends it). */
struct notify_job {
	struct notify_job *next;
	struct ferry_rq *rq;           /* its slot */
	struct ferry_rq *rqs;          /* the batch's slots */
	uint32_t *deps;                /* earlier WRITEs to the segment, pending when queued */
	uint32_t n_deps, done_deps;
	bool armed;                    /* counted in its batch's bell_jobs */
	bool waited;                   /* its WRITEs were pending at the last look */
	int64_t next_ms;               /* a full receiver: not before then */
	int64_t deadline_ms;           /* of the refusals (0: none yet, or no timeout) */
	uint32_t backoff_ms;
	char address[64];
	struct wire_notify msg;
};

/* The notifications ready for one peer, oldest first (lane.c). */
struct notify_lane {
	struct notify_lane *next;
	struct notify_job *head, **tail;
	bool busy;                     /* a thread is on it: no other takes it */
	int64_t next_ms;               /* its first job's receiver was full: not before then */
	char address[64];
};

struct notify {
	/* receiver */
	struct notif_queue *q;         /* made on the first NOTIFY (store_release) */
	uint32_t q_size;               /* power of 2 */
	uint64_t received;             /* queued (relaxed counters, for tests) */
	uint64_t refused_full;         /* -EAGAIN answers */
	uint64_t refused_stale;        /* -ESTALE answers: for another incarnation */
	/* sender */
	struct notify_job *inbox;      /* lock-free stack: ports push, the thread takes all */
	int wake_fd;                   /* eventfd: a job came, or stop */
	int stop;
	int running;
	/* the leader's alone (the role passes under lanes_lock) */
	struct notify_job *lead_jobs, **lead_tail; /* waiting for their WRITEs */
	bool lead_rang;                /* the last sleep ended by the eventfd */
	uint64_t sent;                 /* delivered */
	uint64_t busy_retries;         /* sends refused -EAGAIN and tried again */
	uint64_t with_deps;            /* notifications queued behind pending WRITEs */
	uint64_t dep_late;             /* notifications whose WRITEs were found ended after a
	                                * sleep that no ring ended (a lost ring would show) */
	struct rq_bell bell;           /* rung by the cores for waiting jobs (wake_fd) */
	/* the threads (lane.c; under lanes_lock: control path) */
	pthread_mutex_t lanes_lock;
	pthread_cond_t idle_cond;      /* threads with no role: one is wanted, or stop */
	pthread_cond_t pause_cond;     /* a full receiver's pause: only stop ends it early */
	struct notify_lane *lanes;     /* those with work or a thread on them, oldest first */
	int watch_fd;                  /* timerfd: armed while the leader is in a send */
	int deputy_fd;                 /* eventfd: stop, for the deputy */
	unsigned threads, idle;
	unsigned lead_gen;             /* the role's hand-overs: a leader that sees it move was deposed */
	bool leader, deputy;           /* the roles are taken */
	bool leader_sending;           /* the leader is in a send: the deputy may take over */
	bool lead_done;                /* stopping, and the last leader ended every job */
	bool lanes_ready;              /* lock, conditions and fds made */
	pthread_t thread[NOTIFY_THREADS_MAX];
	unsigned sending;
	uint64_t sends;                /* notifications whose send began (statistics, for tests) */
	uint64_t takeovers;            /* the deputy took the role from a leader in a send */
	uint64_t senders_peak;         /* most sends at once (statistics, for tests) */
};

struct ferry_engine;

/* The leader's next look in us at the latest (*wait_us < 0: none asked yet;
 * a time already past: at once). */
static inline void wait_at_most(int64_t *wait_us, int64_t us)
{
	if (us < 0)
		us = 0;
	if (*wait_us < 0 || *wait_us > us)
		*wait_us = us;
}

/* Before ctl_start: the queue bound (0: NOTIF_QUEUE_DEFAULT, rounded up to
 * a power of 2, at least 2) and the server's handler. */
void notify_init(struct ferry_engine *e, uint32_t queue);
/* Start the notifier (its first thread).  0 or -errno. */
int notify_start(struct ferry_engine *e);
/* Engine destroy, first step: jobs end -ECANCELED from now on. */
void notify_stop_begin(struct ferry_engine *e);
/* Then: join its threads (every job ended), and once the control server
 * has stopped, free the queue.  Safe on a never-started notify. */
void notify_stop_end(struct ferry_engine *e);
void notify_free_queue(struct ferry_engine *e);
/* Last, once the cores have stopped (a core may still ring the bell of a
 * job that just ended): close the bell's eventfd. */
void notify_close_bell(struct ferry_engine *e);

/* send.c: end the job's slot (err 0: delivered) and free the job. */
void notify_job_end(struct notify *nt, struct notify_job *j, int err);

/* send.c: lead (called unlocked, by the thread that took the role at
 * generation gen) until deposed or done; returns with the lock held and
 * the role no longer this thread's. */
void notify_lead(struct ferry_engine *e, unsigned gen);

/* lane.c */
/* notify_start: the lock, the conditions, the fds and the first thread; 0 or -errno. */
int notify_threads_start(struct ferry_engine *e);
/* The leader: a job whose WRITEs have all landed goes on its peer's lane. */
void notify_lane_push(struct ferry_engine *e, struct notify_job *j);
/* The leader: send one job of a lane nobody serves (one whose receiver
 * was full waits out its pause: *wait_us lowered).  1 it did (a lane may
 * have more), 0 none was ready, -1 deposed during the send: the lane was
 * served to its end, the lock is held. */
int notify_lead_send(struct ferry_engine *e, unsigned gen, int64_t *wait_us);
/* The leader, stopping, every job of its own ended: end the lanes' that
 * no one serves; no one leads again (lock held after). */
void notify_lead_done(struct ferry_engine *e);
/* Wake the threads: the engine stops (pauses end, jobs end -ECANCELED). */
void notify_threads_wake(struct notify *nt);
/* Once stopping: wait for lead_done, join every thread, free the rest. */
void notify_threads_stop(struct notify *nt);

/* queue.c: the control server's NOTIFY handler (arg: the engine). */
int notify_receive(void *arg, const struct wire_notify *n);

#endif /* FERRY_RUNTIME_NOTIFY_H */
