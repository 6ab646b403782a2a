/* SPDX-License-Identifier: MIT */
/*
 * The repair thread: replaces QPs that broke (an error completion, a flush,
 * a timeout) once their owning core has drained them, through a new
 * handshake with the peer.  A core asks through its repair ring (SPSC, core
 * -> this thread; the request is an encoded integer, not a pointer, so a
 * request for an endpoint that has gone since is simply dropped).  When the
 * peer cannot be reached through the core's rail, the rail is marked down
 * (new work avoids it, its waiting slices move to another rail); when no
 * rail reaches the peer, the cores fail its requests fast (-EHOSTDOWN).
 * The repair is tried again with a growing back-off: a link that comes back,
 * or a restarted peer, becomes reachable again.  Handshakes go side by
 * side (up to CTL_CALLS_MAX in flight, driven by this thread's poll): one
 * to a peer that does not answer holds up no other.
 */
#include "ring/base/fd.h"
#include "runtime/ctl/repair.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <urcu/urcu-qsbr.h>

#include "ring/base/clock.h"
#include "runtime/ctl/call.h"
#include "runtime/engine/engine.h"

#define REPAIR_WAIT_MAX_MS 1000         /* asleep, it still looks this often */
#define REPAIR_BACKOFF_MIN_MS 50
#define REPAIR_BACKOFF_MAX_MS 2000
#define REPAIR_SAY_EVERY_MS 30000       /* a peer that stays dead is logged this often */

/*
 * Core i's rail cannot reach the peer.  New work avoids the rail at once
 * (submitters and hand-overs read the flag), but the cores are told to
 * fail fast only when no rail of the segment reaches the peer: while one
 * does, the slices waiting on this rail move there (runtime/core/handover.c)
 * instead of failing with -EHOSTDOWN.
 */
bool rail_unreachable(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot)
{
	WRITE_ONCE(s->rail_down[i], 1); /* a hint for submitters and hand-overs */
	for (unsigned k = 0; k < e->ncores; k++)
		if (s->eps[k] && !READ_ONCE(s->rail_down[k]))
			return false; /* the peer answers on core k's rail */
	for (unsigned k = 0; k < e->ncores; k++)
		if (s->eps[k])
			seg_rail_set_down(e, s, k, slot, 1);
	return true;
}

/*
 * Nothing listens at the peer's control address (a refused connection):
 * its process is gone, or not up again yet, and its QPs with it, whichever
 * rail they are on.  Every rail goes down at once and what our QPs hold is
 * flushed (EP_PEER_GONE): otherwise a request in flight waited out one
 * slice timeout per QP or rail its retries tried (fault-vm peer_kill:
 * 2.0-6.0 s after the kill with timeout_ms 2000).  Once per verdict: the
 * probes that follow find the rails down already.
 */
static void peer_gone(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot)
{
	for (unsigned k = 0; k < e->ncores; k++)
		if (s->eps[k] && READ_ONCE(s->rail_down[k]) != EP_PEER_GONE)
			seg_rail_set_down(e, s, k, slot, EP_PEER_GONE);
}

/*
 * A repair of core's rail failed (rc).  A dead peer is probed again and
 * again (back-off up to REPAIR_BACKOFF_MAX_MS, per QP): say so on the
 * first failure, when the last rail goes (requests start failing), and
 * then every REPAIR_SAY_EVERY_MS while it lasts -- not at every probe.
 * ctl_lock held.
 */
static void repair_say_failed(struct ferry_seg *s, unsigned core, int rc, bool all_down)
{
	int64_t now = (int64_t)ferry_now_ms();

	s->repairs_failed++;
	if (s->repair_said_ms && now - s->repair_said_ms < REPAIR_SAY_EVERY_MS &&
	    (s->repair_said_all || !all_down))
		return;
	log_err("segment %s: cannot replace the broken QPs of core %u's rail: %s; %s; probed "
		"again with back-off (up to %d s), logged again every %d s while it fails "
		"(%u failed repairs so far)",
		s->address, core, strerror(-rc),
		rc == -ECONNREFUSED ? "no rail reaches the peer (nothing listens at its address): its "
				      "requests, those in flight too, fail at once (EHOSTDOWN)"
		: all_down ? "no rail reaches the peer: its requests fail at once (EHOSTDOWN)"
			   : "new work avoids the rail and its waiting slices move to the others",
		REPAIR_BACKOFF_MAX_MS / 1000, REPAIR_SAY_EVERY_MS / 1000, s->repairs_failed);
	s->repair_said_ms = now;
	s->repair_said_all = all_down;
}

/* A repair of core's rail worked: after failures, say the peer is back. */
static void repair_say_done(struct ferry_seg *s, unsigned core)
{
	if (s->repair_said_ms)
		log_warn("segment %s: core %u's rail reaches the peer again (after %u failed "
			 "repairs)", s->address, core, s->repairs_failed);
	s->repairs_failed = 0;
	s->repair_said_ms = 0;
	s->repair_said_all = false;
}

/* Is the job's endpoint still there?  A CLOSING segment still has requests
 * in flight that may need the QP.  ctl_lock held. */
static struct ferry_ep *repair_target(struct ferry_engine *e, const struct repair_job *j)
{
	struct ferry_seg *s = seg_at(&e->segs, j->slot);

	if ((s->state != SEG_OPEN && s->state != SEG_CLOSING) || s->gen != j->gen)
		return NULL;
	return s->eps[j->core];
}

/*
 * A repair handshake in flight.  f->ep is only compared, never followed,
 * until repair_flight_target found it published again: the endpoint may be
 * retired and freed meanwhile (the reaper does not wait for flights), and
 * another endpoint may then take its address -- so the peer's token of
 * the QP being replaced (unique, never reused) says whether it is still
 * the same one.
 */
struct repair_flight {
	struct ferry_engine *e;
	struct repair_job j;
	struct ferry_ep *ep;
	uint64_t old_token;         /* f->ep->peer_tokens[j.qp] when it went */
	unsigned tx;                /* f->ep->tx */
	struct qpx *q;              /* the new QP */
	uint64_t token;
	struct seg_peer peer;
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct ctl_call call;       /* its frame: the CONNECT_REQ (malloc'd; a GET_DESC behind) */
	struct seg_fresh *fresh;    /* the GET_DESC's: the peer's address now (NULL: not asked) */
	struct ctl_pipe pipe;
	int rcs[2];                 /* the CONNECT_REQ's, the GET_DESC's */
	bool busy;
};

/* The flight's endpoint, if it is still there (and still the same one:
 * see above); ctl_lock held. */
static struct ferry_ep *repair_flight_target(struct ferry_engine *e,
					     const struct repair_flight *f)
{
	struct ferry_ep *ep = repair_target(e, &f->j);

	return ep && ep == f->ep && ep->peer_tokens[f->j.qp] == f->old_token ? ep : NULL;
}

/* The new QP f->q is connected to the peer (its half there is f->token):
 * have the core take it in place of the broken one, if the endpoint is
 * still there; ctl_lock held. */
static int repair_install(struct ferry_engine *e, const struct repair_flight *f)
{
	const struct repair_job *j = &f->j;
	struct ferry_ep *ep = f->ep;
	struct qpx *q = f->q;
	uint64_t token = f->token;
	const char *address = f->peer.address;
	struct ferry_seg *s = seg_at(&e->segs, j->slot);
	struct core_cmd cmd = { .type = CMD_QP_REPLACE, .slot = j->slot, .ep = ep, .qp = q,
				.index = j->qp };
	int rc = 0;

	if (!repair_flight_target(e, f))
		rc = -ENOENT; /* the segment or endpoint went meanwhile: nothing to repair */
	/* Gone stale meanwhile (its name moved, the engine there alive, so
	 * the handshake worked): its rails stay EP_STALE, no QP goes in. */
	if (!rc && READ_ONCE(s->stale))
		rc = -ENOENT;
	if (!rc)
		rc = core_command(e->cores[j->core], &cmd);
	if (rc) {
		qpx_destroy(&e->cores[j->core]->tx[f->tx], q);
		/* Not s->address: a segment closed meanwhile has none any more. */
		seg_disconnect_later(e, address, token, 1);
		/* Gone, or replaced by a job before this one: done, not retried. */
		return rc == -ENOENT || rc == -EALREADY ? 0 : rc;
	}
	seg_disconnect_later(e, s->address, ep->peer_tokens[j->qp], 1);
	ep->peer_tokens[j->qp] = token;
	/* The address that worked (the peer's now: seg_fresh_take) is the
	 * next handshake's with that NIC (a reconnect's too). */
	s->desc->nics[f->peer.remote_nic].addr = f->peer.raddr;
	if (READ_ONCE(s->rail_down[j->core]))
		WRITE_ONCE(s->rail_down[j->core], 0);
	repair_say_done(s, j->core);
	return 0;
}

/*
 * First half of replacing QP j->qp of core j->core's endpoint, under
 * ctl_lock: the endpoint, if it is still there, and a new QP for it.  1
 * with f ready for the handshake, 0 when there is nothing to repair, or
 * -errno to try again later.
 */
static int repair_prepare(struct ferry_engine *e, struct repair_flight *f)
{
	const struct repair_job *j = &f->j;
	struct ferry_seg *s = seg_at(&e->segs, j->slot);
	struct ferry_core *c = e->cores[j->core];
	int rc;

	pthread_mutex_lock(&e->ctl_lock);
	f->ep = repair_target(e, j);
	/* A stale segment's peer restarted: every handshake would be refused
	 * -ESTALE (and logged) until the application closes it; its rails are
	 * down and its requests fail fast, so there is nothing to repair. */
	if (f->ep && READ_ONCE(s->stale))
		f->ep = NULL;
	rc = f->ep ? qpx_create(&c->tx[f->ep->tx], e->opts.wrs_per_qp, f->ep, &f->q) : 0;
	if (f->ep && !rc) {
		f->tx = f->ep->tx;
		f->old_token = f->ep->peer_tokens[j->qp];
		f->token = ++e->next_token;
		seg_peer_of(s, (uint16_t)f->ep->remote_nic, &f->peer);
	} else if (f->ep) {
		/* No QP on this rail (its device may be dead): new work avoids
		 * it and its waiting slices move, as for an unreachable peer. */
		rail_unreachable(e, s, j->core, j->slot);
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc)
		return rc;
	return f->ep ? 1 : 0;
}

/* Second half, the handshake over (rc): the new QP installed, or the
 * failure taken in (rails down as it says).  0, or -errno to retry later. */
static int repair_conclude(struct ferry_engine *e, struct repair_flight *f, int rc)
{
	const struct repair_job *j = &f->j;
	struct ferry_seg *s = seg_at(&e->segs, j->slot);

	pthread_mutex_lock(&e->ctl_lock);
	if (rc) {
		qpx_destroy(&e->cores[j->core]->tx[f->tx], f->q);
		/* Gone stale meanwhile (its peer restarted): its rails stay
		 * EP_STALE, whatever became of a handshake to the old one. */
		if (repair_flight_target(e, f) && !READ_ONCE(s->stale)) {
			bool stale = rc == -ESTALE; /* the peer restarted: its keys are gone */
			bool all_down;

			if (stale) /* says so itself, once */
				seg_mark_stale(e, s, j->slot);
			if (rc == -ECONNREFUSED) {
				peer_gone(e, s, j->slot);
				all_down = true;
			} else {
				all_down = rail_unreachable(e, s, j->core, j->slot);
			}
			if (!stale)
				repair_say_failed(s, j->core, rc, all_down);
		}
	} else {
		rc = repair_install(e, f);
	}
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

static void repair_later(struct repair *r, struct repair_job *j);

/* A flight is over (its call's done, or refused before it went). */
static void repair_landed(void *arg)
{
	struct repair_flight *f = arg;
	struct ferry_engine *e = f->e;
	int rc = f->rcs[0];
	/* Our request out, the answer not in (timed out, cancelled at
	 * destroy): the peer may yet make the QP, and keep it for as long as
	 * our keepalives renew our lease.  Its token is freed like a replaced
	 * QP's (a peer that never made it answers -ENOENT). */
	bool peer_may_hold = rc && ctl_pipe_unanswered_sent(&f->pipe, 0);

	if (!rc) {
		rc = ctl_check_rep(&f->req, &f->rep);
		peer_may_hold = rc != 0; /* made, but its answer is not for this QP */
	}
	if (peer_may_hold)
		seg_disconnect_background(e, f->peer.address, f->token, 1, rc);
	seg_fresh_take(f->fresh, f->rcs[1], &f->peer);
	f->fresh = NULL;
	if (!rc)
		rc = seg_handshake_apply(e, f->j.core, &f->peer, &f->q, 1, f->token, &f->rep, true);
	rc = repair_conclude(e, f, rc);
	free(f->call.frame);
	f->call.frame = NULL;
	f->busy = false;
	e->repair.landed = true; /* DISCONNECTs it may have queued go out (repair_main) */
	if (rc)
		repair_later(&e->repair, &f->j);
}

static struct repair_flight *repair_free_flight(struct repair *r)
{
	for (unsigned i = 0; i < CTL_CALLS_MAX; i++)
		if (!r->flights[i].busy)
			return &r->flights[i];
	return NULL;
}

/*
 * Replace QP j->qp of core j->core's endpoint: a new QP made under
 * ctl_lock, connected through a handshake that goes beside the others in
 * flight (a peer that does not answer holds up no other repair: one
 * after the other, a live peer's repair waited out a mute one's 10 s),
 * installed under ctl_lock again when the answer comes (repair_landed).
 */
static void repair_run(struct ferry_engine *e, struct repair_job *j)
{
	struct repair *r = &e->repair;
	struct repair_flight *f = repair_free_flight(r);
	int rc;

	if (!f || !ctl_calls_room(r->calls)) {
		repair_later(r, j); /* no room in flight: a slot frees within their timeout */
		return;
	}
	*f = (struct repair_flight){ .e = e, .j = *j, .busy = true };
	rc = repair_prepare(e, f);
	if (rc <= 0) {
		f->busy = false;
		if (rc)
			repair_later(r, j);
		return;
	}
	fetch_add_relaxed(r->handshakes, 1); /* statistics */
	seg_handshake_req(e, j->core, &f->peer, &f->q, 1, f->token, &f->req);
	rc = ctl_connect_prepare(&f->req, &f->rep, 1, &f->call);
	if (!rc && ferry_now_ms() < READ_ONCE(r->refuse_until_ms))
		rc = -ECONNREFUSED; /* a test's refusing peer */
	f->pipe = (struct ctl_pipe){ .address = f->peer.address, .frames = f->call.frame,
				     .len = WIRE_HDR_LEN + f->call.req_len, .count = 1,
				     .rcs = f->rcs };
	if (!rc) /* the peer's address now, in the same round trip */
		f->fresh = seg_fresh_ask(&f->call, &f->pipe);
	if (!rc)
		rc = ctl_calls_start(r->calls, &f->pipe, &f->call, seg_hs_timeout_ms(e),
				     repair_landed, f);
	if (rc) {
		f->rcs[0] = f->rcs[1] = rc;
		repair_landed(f);
	}
}

/* The handshakes in flight that are ready take their next step; those
 * answered (or out of time) are concluded.  How many ended. */
static unsigned repair_flights_run(struct ferry_engine *e)
{
	unsigned ended = ctl_calls_active(e->repair.calls) ? ctl_calls_run(e->repair.calls) : 0;

	if (ended)
		e->repair.reconn_deferred = false; /* room again: deferred reconnects go */
	return ended;
}

static void repair_later(struct repair *r, struct repair_job *j)
{
	uint32_t backoff = j->backoff_ms ? j->backoff_ms * 2 : REPAIR_BACKOFF_MIN_MS;

	if (r->n_later >= READ_ONCE(r->later_max))
		return; /* dropped: the core asks again (REPAIR_REASK_MS) if still broken */
	j->backoff_ms = backoff < REPAIR_BACKOFF_MAX_MS ? backoff : REPAIR_BACKOFF_MAX_MS;
	j->due_ms = ferry_now_ms() + j->backoff_ms;
	r->later[r->n_later] = *j;
	WRITE_ONCE(r->n_later, r->n_later + 1); /* tests read it: a statistic */
}

void repair_due_now(struct ferry_engine *e, unsigned i)
{
	struct repair *r = &e->repair;

	for (unsigned k = 0; k < r->n_later; k++)
		if (r->later[k].core == i)
			r->later[k].due_ms = 0;
}

/* Jobs whose back-off ran out go again. */
static unsigned repair_due(struct ferry_engine *e)
{
	struct repair *r = &e->repair;
	uint64_t now = ferry_now_ms();
	unsigned ran = 0;

	for (unsigned k = 0; k < r->n_later;) {
		struct repair_job j = r->later[k];

		if (j.due_ms > now) {
			k++;
			continue;
		}
		r->later[k] = r->later[r->n_later - 1];
		WRITE_ONCE(r->n_later, r->n_later - 1);
		repair_run(e, &j);
		ran++;
	}
	return ran;
}

static bool same_job(const struct repair_job *q, const struct repair_job *j)
{
	return q->slot == j->slot && q->qp == j->qp && q->core == j->core && q->gen == j->gen;
}

/* The same QP's job waits out a back-off already, or is in flight: a
 * core's ask again (each REPAIR_REASK_MS while the QP stays broken) adds
 * nothing, and kept it would hand-shake once more for a QP its twin
 * replaced. */
static bool repair_queued(const struct repair *r, const struct repair_job *j)
{
	for (unsigned k = 0; k < r->n_later; k++)
		if (same_job(&r->later[k], j))
			return true;
	for (unsigned k = 0; k < CTL_CALLS_MAX; k++)
		if (r->flights[k].busy && same_job(&r->flights[k].j, j))
			return true; /* its handshake is in flight */
	return false;
}

static unsigned repair_drain(struct ferry_engine *e)
{
	unsigned got = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		void *v;

		while ((v = ferry_ring_get(&e->cores[i]->repairs))) {
			struct repair_job j = { 0 };

			core_repair_decode((uintptr_t)v, &j);
			if (!repair_queued(&e->repair, &j))
				repair_run(e, &j);
			got++;
		}
	}
	return got;
}

/* What the cores' passes logged (log_defer): to the sink, from here. */
static unsigned repair_logs(struct ferry_engine *e)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++)
		if (log_box_pending(&e->cores[i]->logbox))
			n += log_box_drain(&e->cores[i]->logbox);
	return n;
}

/* ms until the next timed job (a repair's or a DISCONNECT's back-off
 * running out), at most REPAIR_WAIT_MAX_MS. */
static int repair_next_ms(struct ferry_engine *e)
{
	const struct repair *r = &e->repair;
	uint64_t now = ferry_now_ms(), next = now + REPAIR_WAIT_MAX_MS;

	for (unsigned k = 0; k < r->n_later; k++)
		if (r->later[k].due_ms < next)
			next = r->later[k].due_ms;
	if (r->disc_due_ms && r->disc_due_ms < next)
		next = r->disc_due_ms;
	return next > now ? (int)(next - now) : 0;
}

/* Work queued since the last round: a core's repair ring, retired
 * endpoints, a segment waiting for a reconnect. */
static bool repair_has_work(struct ferry_engine *e)
{
	for (unsigned i = 0; i < e->ncores; i++)
		if (ferry_ring_count(&e->cores[i]->repairs) || log_box_pending(&e->cores[i]->logbox))
			return true;
	if (READ_ONCE(e->reaper.retired) || READ_ONCE(e->repair.disc_queued))
		return true;
	return repair_reconnect_wanted(e);
}

/*
 * Nothing to do: sleep until kicked (a core's repair request, a retired
 * endpoint, a request waiting for a reconnect) or the next timed job.  The
 * flag and the kick are a Dekker pair, as for the cores (idle.c): either
 * the kicker sees us asleep and writes the eventfd, or we see its work.
 */
static void repair_wait(struct ferry_engine *e)
{
	struct repair *r = &e->repair;
	struct pollfd p[1 + FERRY_MAX_CORES * CORE_MAX_TX + CTL_CALLS_MAX + 1] = {
		{ .fd = r->wake_fd, .events = POLLIN }
	};
	unsigned n = 1 + events_fds(e, p + 1, FERRY_MAX_CORES * CORE_MAX_TX);
	int wait_ms = repair_next_ms(e), calls_ms;
	eventfd_t v;

	/* Device events and the handshakes in flight wake it too. */
	n += ctl_calls_fds(r->calls, p + n, &calls_ms);
	if (calls_ms >= 0 && calls_ms < wait_ms)
		wait_ms = calls_ms;
	store_sc(r->sleeping, 1); /* Dekker pair with repair_kick */
	smp_mb_after_sc(); /* repair_has_work's reads are not all seq_cst */
	if (!repair_has_work(e))
		(void)poll(p, n, wait_ms);
	WRITE_ONCE(r->sleeping, 0);
	(void)eventfd_read(r->wake_fd, &v); /* non-blocking: EAGAIN when not kicked */
}

void repair_kick(struct ferry_engine *e)
{
	smp_mb_before_sc(); /* the work just queued may be a relaxed store */
	if (xchg_sc(e->repair.sleeping, 0)) /* Dekker pair with repair_wait; one call per burst */
		eventfd_write(e->repair.wake_fd, 1);
}

/* Engine destroy began: the client is cancelled, a DISCONNECT sent now
 * would only be dropped; left queued, the destroy sends it once the
 * client resumes (seg_disconnect_all). */
static bool repair_destroying(struct ferry_engine *e)
{
	bool d;

	pthread_mutex_lock(&e->ctl_lock);
	d = e->destroying;
	pthread_mutex_unlock(&e->ctl_lock);
	return d;
}

/* A DISCONNECT's back-off ran out (seg_disconnect_start said when): it
 * goes with the next flush, which says when the next one does. */
static bool disc_backoff_over(struct repair *r)
{
	if (!r->disc_due_ms || ferry_now_ms() < r->disc_due_ms)
		return false;
	r->disc_due_ms = 0;
	return true;
}

static void *repair_main(void *arg)
{
	struct ferry_engine *e = arg;

	/* Registered for call_rcu (ep/teardown.c), offline but for that. */
	urcu_qsbr_register_thread();
	urcu_qsbr_thread_offline();
	while (!load_acquire(e->repair.stop)) { /* pairs with: store_release in repair_stop */
		/* (A flight's endpoint may go meanwhile: repair_flight_target.)
		 * In this order: calls that land make room for the reconnects. */
		unsigned work = events_run(e);

		work += repair_drain(e);
		work += repair_due(e);
		work += repair_flights_run(e);
		work += repair_reconnects(e);
		work += reap_run(&e->reaper);
		work += repair_logs(e);
		/* pairs with: store_release in disc_wake_repair (items queued) */
		if (xchg_acquire(e->repair.disc_queued, 0) | disc_backoff_over(&e->repair))
			e->repair.landed = true; /* their DISCONNECTs go with the next flush */
		if (e->repair.landed && !repair_destroying(e)) /* the old halves of QPs ... */
			/* ... not waited for; without room, again after the next landing */
			e->repair.landed = seg_disconnect_start(e, e->repair.calls) == -EBUSY;
		if (!work)
			repair_wait(e);
	}
	ctl_calls_cancel(e->repair.calls, -ECANCELED); /* their new QPs destroyed */
	/* No flush here: the client is cancelled (engine_stop_opens), it would
	 * drop what is queued; the destroy sends it once the client resumes. */
	reap_run(&e->reaper);
	urcu_qsbr_thread_online();
	urcu_qsbr_unregister_thread();
	return NULL;
}

int repair_start(struct ferry_engine *e)
{
	int rc;

	e->repair.later_max = REPAIR_LATER_MAX;
	e->repair.calls = ctl_calls_new(&e->client);
	e->repair.flights = calloc(CTL_CALLS_MAX, sizeof(*e->repair.flights));
	if (!e->repair.calls || !e->repair.flights)
		return -ENOMEM; /* freed by repair_stop */
	e->repair.wake_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (e->repair.wake_fd < 0) {
		rc = -errno;
		log_err("cannot make the repair thread's eventfd: %s", strerror(-rc));
		return rc;
	}
	rc = -pthread_create(&e->repair.thread, NULL, repair_main, e);
	if (rc) {
		/* repair_stop closes the eventfd only of a started thread:
		 * left open, every such failed create kept one fd. */
		log_err("cannot start the repair thread: %s", strerror(-rc));
		fd_close(e->repair.wake_fd);
		e->repair.wake_fd = -1;
		return rc;
	}
	(void)pthread_setname_np(e->repair.thread, "ferry-repair");
	e->repair.started = 1;
	return 0;
}

void repair_stop(struct ferry_engine *e)
{
	if (e->repair.started) {
		store_release(e->repair.stop, 1); /* pairs with: load_acquire in repair_main */
		eventfd_write(e->repair.wake_fd, 1);
		pthread_join(e->repair.thread, NULL);
		e->repair.started = 0;
		fd_close(e->repair.wake_fd);
		e->repair.wake_fd = -1;
	}
	ctl_calls_free(e->repair.calls); /* none in flight: the thread ended them */
	e->repair.calls = NULL;
	free(e->repair.flights);
	e->repair.flights = NULL;
}
