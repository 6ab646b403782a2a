/* SPDX-License-Identifier: MIT */
/*
 * The notifier's threads, and the lanes they send on (control path, never
 * the cores).
 *
 * A send is one control call, and a peer that does not answer (stopped,
 * partitioned, swapping) keeps it for up to NOTIFY_IO_TIMEOUT_MS.  On a
 * lone notifier thread that would hold back every notification of the
 * engine.  So the jobs whose WRITEs have landed queue per peer address (a
 * lane, in the order they became ready), and the notifier is a role:
 *
 *   leader  waits for WRITEs (send.c) and sends, a lane after the other,
 *           up to CTL_NOTIFY_MANY jobs of a lane in one exchange (written
 *           back to back, answered in order); before each exchange it arms
 *           a timer (watch_fd, NOTIFY_WATCH_MS), disarmed when it ends.
 *   deputy  sleeps on that timer.  When it fires the leader is still in
 *           its send: the deputy takes the role (lead_gen moves) and leads.
 *   the deposed leader stays with its lane, which no one else takes, and
 *           serves it to its end, in exchanges too (pausing for a full
 *           receiver there), then becomes the deputy, or idle.
 *
 * A send that is answered in time wakes no other thread (arming a timer
 * wakes no one): one wake-up per notification, as with one thread.  A
 * separate sender pool, tried first, added a second wake-up in series and
 * lengthened the tail on a 2-CPU host.  A mute peer costs the others
 * NOTIFY_WATCH_MS once, and one thread while it stays mute; with
 * NOTIFY_THREADS_MAX threads busy, the leader's sends go unwatched.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/fd.h"
#include "ring/base/log.h"
#include "runtime/ctl/sock.h"
#include "runtime/engine/engine.h"

/* ---- lanes (lock held) -------------------------------------------------- */

/* A lane with a job that nobody serves, or NULL. */
static struct notify_lane *lane_unserved(struct notify *nt)
{
	for (struct notify_lane *l = nt->lanes; l; l = l->next)
		if (!l->busy && l->head)
			return l;
	return NULL;
}

/* The oldest unserved lane whose receiver is not in a pause, or NULL
 * (*wait_us lowered to the end of the first pause). */
static struct notify_lane *lane_ready(struct notify *nt, int64_t *wait_us)
{
	int64_t now = sock_now_ms();

	for (struct notify_lane *l = nt->lanes; l; l = l->next) {
		if (l->busy || !l->head)
			continue;
		if (now >= l->next_ms)
			return l;
		wait_at_most(wait_us, (l->next_ms - now) * 1000);
	}
	return NULL;
}

static void lane_unlink(struct notify *nt, struct notify_lane *l)
{
	struct notify_lane **pp = &nt->lanes;

	while (*pp != l)
		pp = &(*pp)->next;
	*pp = l->next;
	l->next = NULL;
}

/* After a send: an empty lane goes, one with more goes last (the others first). */
static void lane_done(struct notify *nt, struct notify_lane *l)
{
	struct notify_lane **pp;

	l->busy = false;
	lane_unlink(nt, l);
	if (!l->head) {
		free(l);
		return;
	}
	for (pp = &nt->lanes; *pp; pp = &(*pp)->next)
		;
	*pp = l;
}

static struct notify_job *lane_pop(struct notify_lane *l)
{
	struct notify_job *j = l->head;

	l->head = j->next;
	if (!l->head)
		l->tail = &l->head;
	return j;
}

static struct notify_lane *lane_get(struct notify *nt, const char *address)
{
	struct notify_lane *l, **pp;

	for (pp = &nt->lanes; (l = *pp); pp = &l->next)
		if (strcmp(l->address, address) == 0)
			return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	memcpy(l->address, address, sizeof(l->address));
	l->tail = &l->head;
	*pp = l;
	return l;
}

void notify_lane_push(struct ferry_engine *e, struct notify_job *j)
{
	struct notify *nt = &e->notify;
	struct notify_lane *l;

	pthread_mutex_lock(&nt->lanes_lock);
	l = lane_get(nt, j->address);
	if (l) {
		j->next = NULL;
		*l->tail = j;
		l->tail = &j->next;
	}
	pthread_mutex_unlock(&nt->lanes_lock);
	if (!l)
		notify_job_end(nt, j, -ENOMEM);
}

/* ---- sending ------------------------------------------------------------ */

/* Why j must end now instead of being sent (0: it may go). */
static int job_stopped(struct notify *nt, struct notify_job *j)
{
	if (load_acquire(nt->stop)) /* pairs with: store_release in notify_stop_begin */
		return -ECANCELED;
	return load_acquire(j->rq->error); /* pairs with: cas_release in ferry_batch_cancel */
}

/* A receiver whose queue is full: try again after a pause that doubles
 * (1 to NOTIFY_BACKOFF_MAX_MS), for up to opts.timeout_ms of refusals. */
static int job_busy(struct ferry_engine *e, struct notify_job *j, int64_t now)
{
	if (!j->deadline_ms && e->opts.timeout_ms)
		j->deadline_ms = now + e->opts.timeout_ms;
	if (j->deadline_ms && now >= j->deadline_ms)
		return -ETIMEDOUT;
	j->backoff_ms = j->backoff_ms ? j->backoff_ms * 2 : 1;
	if (j->backoff_ms > NOTIFY_BACKOFF_MAX_MS)
		j->backoff_ms = NOTIFY_BACKOFF_MAX_MS;
	j->next_ms = now + j->backoff_ms;
	fetch_add_relaxed(e->notify.busy_retries, 1);
	return 1;
}

/* What one exchange sends: a lane's first jobs, in order. */
struct lead_batch {
	struct notify_job *j[CTL_NOTIFY_MANY];
	const struct wire_notify *msg[CTL_NOTIFY_MANY];
	int rc[CTL_NOTIFY_MANY];
	unsigned n;
};

/* Take l's first jobs; those stopped or cancelled end here (lock held). */
static void batch_take(struct notify *nt, struct notify_lane *l, struct lead_batch *lb)
{
	lb->n = 0;
	while (l->head && lb->n < CTL_NOTIFY_MANY) {
		struct notify_job *j = lane_pop(l);
		int rc = job_stopped(nt, j);

		if (rc) {
			notify_job_end(nt, j, rc);
			continue;
		}
		lb->j[lb->n] = j;
		lb->msg[lb->n] = &j->msg;
		lb->n++;
	}
}

/* One exchange for the batch, outside the lock (held on entry and exit):
 * written back to back on one connection, answered in order. */
static void batch_call(struct ferry_engine *e, struct lead_batch *lb)
{
	struct notify *nt = &e->notify;
	const char *address = lb->j[0]->address;
	int rc;

	if (++nt->sending > nt->senders_peak)
		WRITE_ONCE(nt->senders_peak, nt->sending); /* tests read it without the lock */
	fetch_add_relaxed(nt->sends, lb->n);
	pthread_mutex_unlock(&nt->lanes_lock);
	if (lb->n == 1) {
		lb->rc[0] = ctl_notify(&e->client, address, NOTIFY_IO_TIMEOUT_MS, lb->msg[0]);
	} else {
		rc = ctl_notify_many(&e->client, address, NOTIFY_IO_TIMEOUT_MS, lb->msg, lb->n,
				     lb->rc);
		for (unsigned i = 0; rc && i < lb->n; i++)
			lb->rc[i] = rc;
	}
	pthread_mutex_lock(&nt->lanes_lock);
	nt->sending--;
}

/* Asleep until the monotonic ms `until`, or a stop (lock held). */
static void pause_until(struct notify *nt, int64_t until)
{
	struct timespec ts = { until / 1000, (until % 1000) * 1000000 };

	(void)pthread_cond_timedwait(&nt->pause_cond, &nt->lanes_lock, &ts);
}

/* ---- the roles ---------------------------------------------------------- */

static void watch_arm(struct notify *nt, int64_t ms)
{
	struct itimerspec t = { .it_value = { ms / 1000, (ms % 1000) * 1000000 } };

	(void)timerfd_settime(nt->watch_fd, 0, &t, NULL); /* 0 disarms, and clears a tick */
}

/* The watch fired and was not armed again since (a tick read late may
 * belong to the send before; lock held). */
static bool watch_expired(struct notify *nt)
{
	struct itimerspec t;

	if (timerfd_gettime(nt->watch_fd, &t))
		return true;
	return t.it_value.tv_sec == 0 && t.it_value.tv_nsec == 0;
}

static int thread_start(struct ferry_engine *e);

/* Before the leader's send: a deputy to watch it (lock held).  An idle
 * thread takes the role, or a new one; none: the send goes unwatched. */
static void deputy_ensure(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;

	if (nt->deputy)
		return;
	if (nt->idle)
		pthread_cond_broadcast(&nt->idle_cond);
	else
		(void)thread_start(e);
}

/* The leader, after the exchange: the delivered and the failed end; those
 * the receiver refused as full go back first on l, in order, until the
 * first one's pause ends (lock held). */
static void batch_done(struct ferry_engine *e, struct notify_lane *l, struct lead_batch *lb,
		       int64_t *wait_us)
{
	struct notify_job *refused = NULL, **tail = &refused;

	for (unsigned i = 0; i < lb->n; i++) {
		struct notify_job *j = lb->j[i];
		int rc = lb->rc[i];

		if (rc == -EAGAIN)
			rc = job_busy(e, j, sock_now_ms());
		if (rc <= 0) {
			notify_job_end(&e->notify, j, rc);
			continue;
		}
		if (!refused) {
			l->next_ms = j->next_ms;
			wait_at_most(wait_us, (j->next_ms - sock_now_ms()) * 1000);
		}
		*tail = j;
		tail = &j->next;
	}
	if (!refused)
		return;
	*tail = l->head;
	if (!l->head)
		l->tail = tail;
	l->head = refused;
}

/*
 * The deposed leader: the rest of its lane, an exchange at a time, then
 * the lane goes (lock held).  Each exchange settles as the leader's does
 * (batch_done): what the receiver queued ends at once, what it refused as
 * full goes back first, and the lane pauses until the first one's retry.
 * Sending the refused one again alone until it got in held the others of
 * its exchange PENDING -- delivered, up to timeout_ms.
 */
static void lane_serve(struct ferry_engine *e, struct notify_lane *l, struct lead_batch *lb)
{
	int64_t wait_us = -1; /* batch_done's report for a leader: not read here */

	for (;;) {
		batch_done(e, l, lb, &wait_us);
		if (!l->head)
			break;
		/* pairs with: store_release in notify_stop_begin */
		if (sock_now_ms() < l->next_ms && !load_acquire(e->notify.stop)) {
			pause_until(&e->notify, l->next_ms);
			lb->n = 0;
			continue;
		}
		batch_take(&e->notify, l, lb);
		if (lb->n)
			batch_call(e, lb);
	}
	lane_done(&e->notify, l);
}

int notify_lead_send(struct ferry_engine *e, unsigned gen, int64_t *wait_us)
{
	struct notify *nt = &e->notify;
	struct lead_batch lb;
	struct notify_lane *l;

	pthread_mutex_lock(&nt->lanes_lock);
	l = lane_ready(nt, wait_us);
	if (!l) {
		pthread_mutex_unlock(&nt->lanes_lock);
		return 0;
	}
	l->busy = true;
	batch_take(nt, l, &lb);
	if (lb.n) {
		deputy_ensure(e);
		nt->leader_sending = true;
		watch_arm(nt, NOTIFY_WATCH_MS);
		batch_call(e, &lb);
		if (nt->lead_gen != gen) {
			/* The deputy leads now (the watch and the flag are its
			 * sends' now); this lane stays with this thread. */
			lane_serve(e, l, &lb);
			return -1;
		}
		watch_arm(nt, 0);
		nt->leader_sending = false;
		batch_done(e, l, &lb, wait_us);
	}
	lane_done(nt, l);
	pthread_mutex_unlock(&nt->lanes_lock);
	return 1;
}

/* The deputy (lock held): asleep until the watch fires in a send of the
 * leader's -- then take the role and lead -- or the engine stops. */
static void deputy_watch(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;
	struct pollfd p[2] = { { .fd = nt->watch_fd, .events = POLLIN },
			       { .fd = nt->deputy_fd, .events = POLLIN } };
	uint64_t v;

	nt->deputy = true;
	while (!nt->lead_done) {
		pthread_mutex_unlock(&nt->lanes_lock);
		(void)poll(p, 2, -1);
		(void)!read(nt->watch_fd, &v, sizeof(v)); /* non-blocking: clear a tick */
		pthread_mutex_lock(&nt->lanes_lock);
		/* pairs with: store_release in notify_stop_begin */
		if (nt->leader_sending && watch_expired(nt) && !load_acquire(nt->stop)) {
			unsigned gen = ++nt->lead_gen;

			nt->deputy = false;
			nt->leader_sending = false; /* that send is no longer the leader's */
			fetch_add_relaxed(nt->takeovers, 1); /* statistics */
			pthread_mutex_unlock(&nt->lanes_lock);
			notify_lead(e, gen);
			return;
		}
	}
	nt->deputy = false;
}

static void *notify_thread(void *arg)
{
	struct ferry_engine *e = arg;
	struct notify *nt = &e->notify;

	pthread_mutex_lock(&nt->lanes_lock);
	while (!nt->lead_done) {
		if (!nt->leader) {
			unsigned gen = ++nt->lead_gen;

			nt->leader = true;
			pthread_mutex_unlock(&nt->lanes_lock);
			notify_lead(e, gen); /* back with the lock, the role handed on or done */
		} else if (!nt->deputy) {
			deputy_watch(e);
		} else {
			nt->idle++;
			pthread_cond_wait(&nt->idle_cond, &nt->lanes_lock);
			nt->idle--;
		}
	}
	pthread_mutex_unlock(&nt->lanes_lock);
	return NULL;
}

/* One more thread (lock held); 0 or -errno. */
static int thread_start(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;
	char name[16];
	int rc;

	if (nt->threads == NOTIFY_THREADS_MAX)
		return -EAGAIN;
	rc = pthread_create(&nt->thread[nt->threads], NULL, notify_thread, e);
	if (rc) {
		log_err("cannot start a notifier thread: %s", strerror(rc));
		return -rc;
	}
	snprintf(name, sizeof(name), "ferry-notify%u", nt->threads);
	(void)pthread_setname_np(nt->thread[nt->threads], name);
	nt->threads++;
	return 0;
}

void notify_lead_done(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;
	struct notify_lane *l;

	pthread_mutex_lock(&nt->lanes_lock);
	while ((l = lane_unserved(nt))) {
		while (l->head)
			notify_job_end(nt, lane_pop(l), -ECANCELED);
		lane_done(nt, l);
	}
	nt->leader = false;
	nt->lead_done = true;
	pthread_cond_broadcast(&nt->idle_cond); /* the idle threads, and notify_threads_stop */
	(void)eventfd_write(nt->deputy_fd, 1);
}

/* ---- start and stop ----------------------------------------------------- */

static int sync_init(struct notify *nt)
{
	pthread_condattr_t ca;
	int rc;

	rc = pthread_condattr_init(&ca);
	if (rc)
		return rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* sock_now_ms's clock */
	if (!rc)
		rc = pthread_cond_init(&nt->pause_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (rc)
		return rc;
	rc = pthread_cond_init(&nt->idle_cond, NULL);
	if (rc) {
		pthread_cond_destroy(&nt->pause_cond);
		return rc;
	}
	rc = pthread_mutex_init(&nt->lanes_lock, NULL);
	if (rc) {
		pthread_cond_destroy(&nt->pause_cond);
		pthread_cond_destroy(&nt->idle_cond);
	}
	return rc;
}

static void sync_destroy(struct notify *nt)
{
	pthread_cond_destroy(&nt->pause_cond);
	pthread_cond_destroy(&nt->idle_cond);
	pthread_mutex_destroy(&nt->lanes_lock);
	fd_close(nt->watch_fd);
	fd_close(nt->deputy_fd);
}

int notify_threads_start(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;
	int rc;

	nt->watch_fd = fd_track(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	nt->deputy_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	rc = nt->watch_fd < 0 || nt->deputy_fd < 0 ? errno : sync_init(nt);
	if (rc) {
		log_err("notifier: cannot make its timer, eventfd or locks: %s", strerror(rc));
		if (nt->watch_fd >= 0)
			fd_close(nt->watch_fd);
		if (nt->deputy_fd >= 0)
			fd_close(nt->deputy_fd);
		return -rc;
	}
	pthread_mutex_lock(&nt->lanes_lock);
	rc = thread_start(e); /* the first leader; the deputy comes with the first send */
	pthread_mutex_unlock(&nt->lanes_lock);
	if (rc) {
		sync_destroy(nt);
		return rc;
	}
	nt->lanes_ready = true;
	return 0;
}

void notify_threads_wake(struct notify *nt)
{
	if (!nt->lanes_ready)
		return;
	pthread_mutex_lock(&nt->lanes_lock);
	pthread_cond_broadcast(&nt->pause_cond);
	pthread_mutex_unlock(&nt->lanes_lock);
}

void notify_threads_stop(struct notify *nt)
{
	unsigned n;

	if (!nt->lanes_ready)
		return;
	pthread_mutex_lock(&nt->lanes_lock);
	while (!nt->lead_done) /* only a leader starts threads: none after */
		pthread_cond_wait(&nt->idle_cond, &nt->lanes_lock);
	n = nt->threads;
	pthread_mutex_unlock(&nt->lanes_lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(nt->thread[i], NULL);
	nt->threads = 0;
	/* Every lane was served to its end, or emptied by the last leader. */
	while (nt->lanes) {
		struct notify_lane *l = nt->lanes;

		nt->lanes = l->next;
		free(l);
	}
	sync_destroy(nt);
	nt->lanes_ready = false;
}
