/* SPDX-License-Identifier: MIT */
/*
 * The sender's side of notifications: ferry_notify (the port's thread)
 * and the engine's notifier thread (control path; see notify.h).
 *
 * A job knows the slots of the WRITEs to its segment that were pending
 * when it was queued (those already ended were checked then).  While some
 * still are, the thread sleeps: it has the cores ring its bell when a
 * request of the job's batch ends (job_arm), so a notification leaves as
 * soon as its last WRITE has landed, without the thread polling; then it
 * goes to its peer's lane (lane.c).  Slots cannot be reused while the job
 * lives: the job's own slot keeps the batch's pending count above zero, so
 * ferry_batch_reset and ferry_batch_destroy refuse (-EBUSY) until the
 * notifier or a sender ends it.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/fd.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"


/* ---- ferry_notify ------------------------------------------------------ */

/* The earlier WRITEs of b (slots [0, slot)) to segment (sslot, gen): those
 * pending into j->deps (room for every earlier slot: one pass, and no
 * count that a WRITE ending meanwhile could make wrong); -EIO if one
 * already ended badly. */
static int job_deps(struct notify_job *j, const struct ferry_batch *b, uint32_t slot,
		    uint32_t sslot, uint32_t gen)
{
	if (slot == 0)
		return 0;
	j->deps = malloc(slot * sizeof(*j->deps));
	if (!j->deps)
		return -ENOMEM;
	for (uint32_t i = 0; i < slot; i++) {
		const struct ferry_rq *r = &b->rqs[i];
		int32_t st;

		if (r->op != NIC_OP_WRITE || r->seg_slot != sslot || r->seg_gen != gen)
			continue;
		st = load_acquire(r->state); /* pairs with: store_release in rq_finish */
		if (st != RQ_PENDING && st != RQ_DONE)
			return -EIO;
		if (st == RQ_PENDING)
			j->deps[j->n_deps++] = i;
	}
	return 0;
}

static void job_free(struct notify_job *j)
{
	free(j->deps);
	free(j);
}

/* A job for slot's notification, or -errno (the slot's reason). */
static int job_make(struct ferry_batch *b, uint32_t slot, ferry_seg_t seg, const void *msg,
		    uint32_t len, struct notify_job **out)
{
	struct ferry_engine *e = b->port->e;
	struct notify_job *j;
	struct ferry_seg *s;
	uint32_t sslot;
	int rc;

	if (len > FERRY_NOTIF_MAX)
		return -EMSGSIZE;
	if (!msg && len)
		return -EINVAL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	s = seg_acquire(e, seg, &sslot);
	if (!s) {
		free(j);
		return -EBADF;
	}
	rc = READ_ONCE(s->stale) ? -ESTALE : 0;
	memcpy(j->address, s->address, sizeof(j->address)); /* fixed while we hold the reference */
	/* A refresh may swap the descriptor (same incarnation; the old one is
	 * kept): pairs with: store_release in refresh_install. */
	j->msg.to_incarnation = load_acquire(s->desc)->incarnation;
	seg_release_ref(s);
	if (!rc)
		rc = job_deps(j, b, slot, sslot, (uint32_t)(seg >> 32));
	if (rc) {
		job_free(j);
		return rc;
	}
	j->rq = &b->rqs[slot];
	j->rqs = b->rqs;
	snprintf(j->msg.from, sizeof(j->msg.from), "%s", e->opts.name ? e->opts.name : e->ctl.address);
	j->msg.len = (uint16_t)len;
	if (len)
		memcpy(j->msg.msg, msg, len);
	*out = j;
	return 0;
}

/* Lock-free push on the inbox (a Treiber stack: the thread takes it whole). */
static void inbox_push(struct notify *nt, struct notify_job *j)
{
	struct notify_job *head = READ_ONCE(nt->inbox);

	do
		j->next = head;
	while (!cas_weak_release(nt->inbox, &head, j)); /* pairs with: xchg_acquire in inbox_take */
	eventfd_write(nt->wake_fd, 1); /* cannot overflow in practice */
}

int ferry_notify(struct ferry_batch *b, ferry_seg_t seg, const void *msg, uint32_t len)
{
	struct notify_job *j = NULL;
	struct ferry_rq *rq;
	uint32_t slot;
	int rc;

	if (!b)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (b->n >= b->capacity)
		return -ENOSPC;
	slot = b->n;
	rq = &b->rqs[slot];
	rq_clear(rq, &b->acct);
	rq->op = RQ_OP_NOTIFY;
	rq->len = len;
	rc = job_make(b, slot, seg, msg, len, &j);
	store_release(b->n, slot + 1); /* pairs with: load_acquire in ferry_req_status */
	if (rc) {
		rq_refuse(rq, rc);
		return (int)slot;
	}
	if (j->n_deps)
		fetch_add_relaxed(b->port->e->notify.with_deps, 1); /* statistics */
	fetch_add_relaxed(b->acct.pending, 1); /* published by the inbox's release */
	inbox_push(&b->port->e->notify, j);
	return (int)slot;
}

/* ---- the notifier thread ------------------------------------------------ */

/* Everything pushed since the last take, oldest first. */
static struct notify_job *inbox_take(struct notify *nt)
{
	struct notify_job *j = xchg_acquire(nt->inbox, NULL); /* pairs with: cas_weak_release in inbox_push */
	struct notify_job *fifo = NULL;

	while (j) {
		struct notify_job *next = j->next;

		j->next = fifo;
		fifo = j;
		j = next;
	}
	return fifo;
}

/* j waits for no WRITE any more: the last such job of its batch clears the
 * flag (a ring that raced with that is a spurious wake-up, no more). */
static void job_disarm(struct notify_job *j)
{
	struct rq_batch *b = j->rq->batch;

	if (!j->armed)
		return;
	j->armed = false;
	if (--b->bell_jobs == 0)
		fetch_and_relaxed(b->pending, ~RQ_BATCH_BELL);
}

void notify_job_end(struct notify *nt, struct notify_job *j, int err)
{
	job_disarm(j); /* before the slot ends: the batch may go right after */
	if (!err) {
		WRITE_ONCE(j->rq->ok_bytes, j->msg.len); /* published by rq_end's release */
		fetch_add_relaxed(nt->sent, 1);
	}
	rq_end(j->rq, err);
	job_free(j);
}

/* The job's WRITEs: 1 all done, 0 some pending, -EIO one failed. */
static int job_deps_state(struct notify_job *j)
{
	while (j->done_deps < j->n_deps) {
		/* pairs with: store_release in rq_finish */
		int32_t st = load_acquire(j->rqs[j->deps[j->done_deps]].state);

		if (st == RQ_PENDING)
			return 0;
		if (st != RQ_DONE)
			return -EIO;
		j->done_deps++;
	}
	return 1;
}

/*
 * Have the cores ring the bell as requests of j's batch end, then look at
 * j's WRITEs again.  The flag is set by an acq_rel RMW on the batch's
 * pending word, which each core's decrement follows or precedes: a WRITE
 * that ended before it is seen by this look, one that ends after it rings
 * and reads this round's reset of rung (rq_bell_ring).  So every look
 * that finds WRITEs pending arms again, even when the flag is set.
 */
static int job_arm(struct notify_job *j)
{
	struct rq_batch *b = j->rq->batch;

	if (!j->armed) {
		j->armed = true;
		b->bell_jobs++;
	}
	/* pairs with: fetch_sub_acq_rel in batch_requests_ended */
	fetch_or_acq_rel(b->pending, RQ_BATCH_BELL);
	return job_deps_state(j);
}

/*
 * One look at a job: 1 it goes on waiting (*wait_us lowered to when it
 * wants the next look), 0 it left (ended, or handed to its peer's lane).
 * rang: the sleep before this look was ended by the eventfd (a ring, a
 * new job, a stop), not its timeout.
 */
static int job_step(struct ferry_engine *e, struct notify_job *j, int stop, bool rang,
		    int64_t *wait_us)
{
	int32_t cancelled = load_acquire(j->rq->error); /* pairs with: cas_release in ferry_batch_cancel */
	int rc;

	if (stop || cancelled) {
		notify_job_end(&e->notify, j, stop ? -ECANCELED : cancelled);
		return 0;
	}
	rc = job_deps_state(j);
	if (rc == 0)
		rc = job_arm(j);
	if (rc == 0) {
		j->waited = true;
		wait_at_most(wait_us, NOTIFY_DEP_WAIT_US);
		return 1;
	}
	/* Its WRITEs were pending at the last look; this one came by the clock. */
	if (j->waited && !rang)
		fetch_add_relaxed(e->notify.dep_late, 1); /* statistics */
	j->waited = false;
	job_disarm(j); /* no rings while it is sent */
	if (rc < 0)
		notify_job_end(&e->notify, j, rc);
	else
		notify_lane_push(e, j);
	return 0;
}

/* Sleep until a job comes, a core rings or wait_us passes (< 0: no
 * timeout); whether the eventfd (not the clock) ended it. */
static bool notify_sleep(struct notify *nt, int64_t wait_us)
{
	struct pollfd p = { .fd = nt->wake_fd, .events = POLLIN };
	struct timespec ts = { wait_us / 1000000, (wait_us % 1000000) * 1000 };
	eventfd_t v;

	(void)ppoll(&p, 1, wait_us < 0 ? NULL : &ts, NULL);
	return eventfd_read(nt->wake_fd, &v) == 0; /* non-blocking: -1 when nothing came */
}

/* One look at every job, the new ones (from the inbox) last. */
static void lead_round(struct ferry_engine *e, int stop, int64_t *wait_us)
{
	struct notify *nt = &e->notify;
	struct notify_job *fresh = inbox_take(nt), **pp = &nt->lead_jobs;

	/* Before the looks, which arm: a core that rings after a look reads it. */
	WRITE_ONCE(nt->bell.rung, 0);
	*nt->lead_tail = fresh;
	while (*pp) {
		struct notify_job *j = *pp, *next = j->next;

		if (job_step(e, j, stop, nt->lead_rang, wait_us))
			pp = &j->next;
		else
			*pp = next;
	}
	nt->lead_tail = pp;
}

void notify_lead(struct ferry_engine *e, unsigned gen)
{
	struct notify *nt = &e->notify;

	for (;;) {
		int stop = load_acquire(nt->stop); /* pairs with: store_release in notify_stop_begin */
		int64_t wait_us = -1;
		int sent;

		lead_round(e, stop, &wait_us);
		if (stop && !nt->lead_jobs && !READ_ONCE(nt->inbox)) {
			notify_lead_done(e);
			return;
		}
		sent = notify_lead_send(e, gen, &wait_us);
		if (sent < 0)
			return; /* deposed while in the send */
		if (sent > 0 || stop) {
			nt->lead_rang = true; /* looked again at once: nothing came late */
			continue;
		}
		nt->lead_rang = notify_sleep(nt, wait_us);
	}
}

void notify_init(struct ferry_engine *e, uint32_t queue)
{
	uint32_t size = 2; /* a turn counter tells full from empty only with 2 cells or more */

	if (!queue)
		queue = NOTIF_QUEUE_DEFAULT;
	while (size < queue && size < (1u << 20))
		size <<= 1;
	e->notify.q_size = size;
	ctl_set_notify(&e->ctl, notify_receive);
}

int notify_start(struct ferry_engine *e)
{
	struct notify *nt = &e->notify;
	int rc;

	nt->wake_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (nt->wake_fd < 0) {
		rc = -errno;
		log_err("notifications: cannot make their eventfd: %s", strerror(-rc));
		return rc;
	}
	nt->bell.fd = nt->wake_fd; /* batches point at it from their creation (port.c) */
	nt->lead_tail = &nt->lead_jobs;
	nt->lead_rang = true;
	rc = notify_threads_start(e);
	if (rc)
		return rc;
	nt->running = 1;
	return 0;
}

void notify_stop_begin(struct ferry_engine *e)
{
	if (!e->notify.running)
		return;
	store_release(e->notify.stop, 1); /* pairs with: load_acquire in notify_lead, lane_job_stopped */
	eventfd_write(e->notify.wake_fd, 1);
	notify_threads_wake(&e->notify);
}

void notify_stop_end(struct ferry_engine *e)
{
	notify_threads_stop(&e->notify);
	e->notify.running = 0;
}

void notify_close_bell(struct ferry_engine *e)
{
	/* Not in notify_stop_end: a core that saw RQ_BATCH_BELL just before the
	 * last job ended may ring after the join, and the number of a closed fd
	 * is soon another's (a control socket's). */
	if (e->notify.wake_fd >= 0)
		fd_close(e->notify.wake_fd);
	e->notify.wake_fd = -1;
}
