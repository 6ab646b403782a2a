/* SPDX-License-Identifier: MIT */
/*
 * The DISCONNECTs that free the peer's halves of our QPs.  Round trips,
 * so they never run under ctl_lock: those decided under the lock are
 * queued and sent once it is released (seg_disconnect_flush).  One per
 * QP (handshake.c: token T + k names QP k), written back to back on one
 * connection per peer, every peer at once (ctl_disconnect_many): a peer
 * that does not answer costs one timeout, not one per QP.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/ctl.h"
#include "runtime/engine/engine.h"

struct disc_item {
	TAILQ_ENTRY(disc_item) queued; /* in e->disc_items */
	struct disc_item *next;        /* in a batch taken off it */
	char address[64];
	uint64_t token;
	pthread_t by;      /* the thread that queued it sends it */
	bool brief;        /* each on its own connection; at destroy DISC_BRIEF_MS (those
	                    * sent again after a back-off too: disc_alone) */
	uint8_t sends;     /* tries that never reached the peer (disc_unanswered_again) */
	uint64_t due_ms;   /* its back-off runs out then (ferry_now_ms; 0: none) */
	uint64_t until_ms; /* no try after then (set at the first that failed; 0: none) */
};

/*
 * Tries of a DISCONNECT that never reaches its peer whole, for a reason
 * that may pass (disc_transient: a partition, a peer at its connection
 * cap), DISC_RETRY_MS apart at first, then twice as long each time up to
 * 16 x (250 ms .. 4 s), for as long as the peer's lease on us lasts: a
 * peer cut off for longer frees them at the lease's expiry, but one that
 * comes back sooner sees another segment's keepalives renew the lease,
 * and then the QPs stayed for good.  A fixed number of tries (8: ~16 s of
 * back-offs when the connect fails at once) ended before a 30 s lease
 * did.  The peer's lease is not known here: ours (the option) stands in.
 * With lease_ms 0 the peer most likely has none either, and then nothing
 * but a DISCONNECT frees those QPs: no deadline, the tries go on until
 * DISC_SENDS are used (~112 s of back-offs when each connect fails at
 * once, ~7 min when each times out).  A fixed 30 s window gave up on them
 * first.  DISC_SENDS bounds every one.
 */
#define DISC_SENDS 32
#define DISC_RETRY_MS 250
#define DISC_RETRY_DOUBLINGS 4

/* DISCONNECTs queued at most, one per QP (a peer's cap is 8192 QPs):
 * beyond, the oldest is dropped and counted (e->disc_dropped), its peer's
 * lease left to free it -- a long partition to many peers must not grow
 * the queue without bound. */
#define DISC_QUEUE_MAX 65536

/* The bound of the DISCONNECTs that engine destroy sends for handshakes it
 * cancelled: a peer that does not answer must not make the destroy wait
 * 10 s for QPs its lease frees anyway, and a live one serves a request
 * written whole even after we closed its connection -- one per connection
 * (ctl_disconnect_each). */
#define DISC_BRIEF_MS 250

/* Which queued DISCONNECTs disconnects_take takes: the brief ones go each
 * on a connection of its own (ctl_disconnect_each), the others back to
 * back on one connection per peer. */
enum disc_kind { DISC_BRIEF, DISC_FULL };

/* d at the tail of the queue (disc_lock held); the oldest item when that
 * overflowed it, for disc_drop after the unlock (else NULL). */
static struct disc_item *disc_push(struct ferry_engine *e, struct disc_item *d)
{
	unsigned max = e->knobs.disc_queue_max ? e->knobs.disc_queue_max : DISC_QUEUE_MAX;
	struct disc_item *old = NULL;

	TAILQ_INSERT_TAIL(&e->disc_items, d, queued);
	if (++e->disc_n > max) {
		old = TAILQ_FIRST(&e->disc_items);
		TAILQ_REMOVE(&e->disc_items, old, queued);
		e->disc_n--;
	}
	return old;
}

/* An item the full queue pushed out: counted, said at 1, 2, 4, ... drops
 * (a long partition to many peers would fill the log otherwise). */
static void disc_drop(struct ferry_engine *e, struct disc_item *old)
{
	uint64_t n;

	if (!old)
		return;
	n = fetch_add_relaxed(e->disc_dropped, 1) + 1;
	if (!(n & (n - 1)))
		log_warn("segment %s: DISCONNECT queue full (%llu dropped): the peer's lease "
			 "frees its QP %llu", old->address, (unsigned long long)n,
			 (unsigned long long)old->token);
	free(old);
}

static void disconnect_queue(struct ferry_engine *e, const char *address, uint64_t token,
			     unsigned n, pthread_t by, bool brief)
{
	for (unsigned k = 0; token && k < n; k++) {
		struct disc_item *d = calloc(1, sizeof(*d));

		if (!d) {
			/* The peer's lease frees it when our keepalives stop. */
			log_warn("segment %s: no memory to free the peer's QP %llu", address,
				 (unsigned long long)(token + k));
			continue;
		}
		snprintf(d->address, sizeof(d->address), "%s", address);
		d->token = token + k;
		d->by = by;
		d->brief = brief;
		pthread_mutex_lock(&e->disc_lock);
		d = disc_push(e, d);
		pthread_mutex_unlock(&e->disc_lock);
		disc_drop(e, d);
	}
}

void seg_disconnect_later(struct ferry_engine *e, const char *address, uint64_t token,
			  unsigned n)
{
	disconnect_queue(e, address, token, n, pthread_self(), false);
}

/* Items were queued for the repair thread: it sends them on its next pass.
 * After the unlock: the repair thread that sees the flag finds the items. */
static void disc_wake_repair(struct ferry_engine *e)
{
	/* pairs with: xchg_acquire in repair_main */
	store_release(e->repair.disc_queued, 1);
	repair_kick(e);
}

void seg_disconnect_background(struct ferry_engine *e, const char *address, uint64_t token,
			       unsigned n, int why)
{
	disconnect_queue(e, address, token, n, e->repair.thread, why == -ECANCELED);
	disc_wake_repair(e);
}

/* Whether d goes on a connection of its own (the DISC_BRIEF kind): one
 * a slow peer may read late, or, at destroy, one sent again after a
 * back-off (DISC_BRIEF_MS each, not a peer's 10 s).  Those sent again
 * from the repair thread go back to back with their peer's others: one
 * connection for them all, one dial that fails for them all. */
static bool disc_alone(const struct disc_item *d, bool all)
{
	return d->brief || (all && d->sends);
}

/* Whether d fits in the calls_max (0: any number) calls the items taken
 * so far need (seen[]: theirs, one per peer, or one each when brief). */
static bool disc_fits(const struct disc_item *d, bool alone, const char **seen,
		      unsigned *n_seen, unsigned calls_max)
{
	if (!calls_max)
		return true;
	for (unsigned i = 0; !alone && i < *n_seen; i++)
		if (!strcmp(seen[i], d->address))
			return true; /* on that peer's call */
	if (*n_seen == calls_max)
		return false;
	seen[(*n_seen)++] = d->address;
	return true;
}

/* Whether d waits out a back-off still (never when all: engine destroy
 * sends each once more, now); *due: the earliest such end. */
static bool disc_waits(const struct disc_item *d, bool all, uint64_t now, uint64_t *due)
{
	if (all || d->due_ms <= now)
		return false;
	if (!*due || d->due_ms < *due)
		*due = d->due_ms;
	return true;
}

/* Take the queued DISCONNECTs (the caller's, or all) of kind, as many as
 * calls_max calls carry (0: all), off the list into arrays (freed by the
 * caller); how many, 0 when none (or no memory: the leases free them);
 * *more when some of them stay queued for want of room; *due: when the
 * first of those that wait out a back-off may go (0: none waits). */
static unsigned disconnects_take(struct ferry_engine *e, bool all, enum disc_kind kind,
				 unsigned calls_max, bool *more, uint64_t *due, unsigned *calls,
				 const char ***addr, struct wire_disconnect **w,
				 struct disc_item **items)
{
	const char *seen[CTL_CALLS_MAX];
	struct disc_item *d, *next, **tail = items;
	unsigned n = 0, n_seen = 0;
	uint64_t now = ferry_now_ms();

	*items = NULL;
	*more = false;
	*due = 0;
	if (calls_max > CTL_CALLS_MAX)
		calls_max = CTL_CALLS_MAX;
	pthread_mutex_lock(&e->disc_lock);
	for (d = TAILQ_FIRST(&e->disc_items); d; d = next) { /* the oldest peers first */
		bool alone = disc_alone(d, all);
		bool mine = (all || pthread_equal(d->by, pthread_self())) &&
			    alone == (kind == DISC_BRIEF);

		next = TAILQ_NEXT(d, queued);
		if (!mine || disc_waits(d, all, now, due))
			continue;
		if (disc_fits(d, alone, seen, &n_seen, calls_max)) {
			TAILQ_REMOVE(&e->disc_items, d, queued);
			e->disc_n--;
			d->next = NULL;
			*tail = d;
			tail = &d->next;
		} else {
			*more = true;
		}
	}
	pthread_mutex_unlock(&e->disc_lock);
	*calls = n_seen; /* (calls_max 0: not counted) */
	for (d = *items; d; d = d->next)
		n++;
	*addr = n ? malloc(n * sizeof(**addr)) : NULL;
	*w = n ? malloc(n * sizeof(**w)) : NULL;
	if (n && (!*addr || !*w)) {
		log_warn("no memory to free %u of the peers' QPs: their leases will", n);
		return 0;
	}
	n = 0;
	for (d = *items; d; d = d->next, n++) {
		(*addr)[n] = d->address;
		(*w)[n] = (struct wire_disconnect){ .incarnation = e->incarnation, .token = d->token };
	}
	return n;
}

/* Whether a DISCONNECT that never reached its peer (rc) may get there
 * later: the network, the peer's load or ours (out of descriptors or
 * memory here: a dial's -EMFILE/-ENFILE/-ENOMEM), not the peer.  Not
 * -ECONNREFUSED (no engine listens there: its QPs went with it), -EACCES
 * (another key), -EPROTO (not a ferry engine). */
static bool disc_transient(int rc)
{
	return rc == -ETIMEDOUT || rc == -EHOSTUNREACH || rc == -ENETUNREACH ||
	       rc == -ECONNRESET || rc == -EBUSY || rc == -EMFILE || rc == -ENFILE ||
	       rc == -ENOMEM;
}

uint64_t seg_disconnect_deadline_ms(const struct ferry_engine *e, uint64_t now)
{
	return e->opts.lease_ms ? now + e->opts.lease_ms : 0;
}

/* Whether item d, whose DISCONNECT ended with rc and fate at now, goes
 * again; when, in d->due_ms (one now for a batch: a peer's items stay
 * due together, and go again on one connection). */
static bool disc_again(struct ferry_engine *e, struct disc_item *d, int rc, uint8_t fate,
		       uint64_t now)
{
	uint64_t first = e->knobs.disc_retry_ms ? e->knobs.disc_retry_ms : DISC_RETRY_MS;
	unsigned doublings;

	if (rc == -ECANCELED) /* at destroy: no keepalive renews the lease now */
		return false;
	if (fate == DISC_UNREAD_BEHIND) {
		d->due_ms = 0; /* once, now: alone on its connection, it is served when read */
		return true;
	}
	/* Never delivered (not written whole, or the peer hung up on it
	 * unread): a stalled or cut off one, or one behind a proxy, which may
	 * come back and then keep its QPs while our keepalives renew them. */
	if (fate != DISC_NOT_SENT || !disc_transient(rc))
		return false;
	if (!d->sends)
		d->until_ms = seg_disconnect_deadline_ms(e, now);
	if (++d->sends >= DISC_SENDS || (d->until_ms && now >= d->until_ms)) {
		fetch_add_relaxed(e->disc_given_up, 1); /* statistics */
		return false;
	}
	doublings = d->sends - 1u < DISC_RETRY_DOUBLINGS ? d->sends - 1u : DISC_RETRY_DOUBLINGS;
	d->due_ms = now + (first << doublings);
	return true;
}

/*
 * Items whose DISCONNECT did not get through (rcs[k] and fate[k] for the
 * k-th of the list) go again from the repair thread; the others are
 * freed.  Those written whole behind an unanswered one each on a
 * connection of its own: a peer slower than our timeout serves, once it
 * reads them, only the first unanswered request of a connection we
 * closed (its answer meets the closed socket; the reset drops the rest),
 * and the QPs of the others would stay for as long as our keepalives
 * renew our lease there.  Those never delivered (a partition) after a
 * back-off, back to back with their peer's others on one connection:
 * each on its own, a peer's N of them cost N dials a round (N connect
 * timeouts while it stays cut off).  Not at destroy (again false).
 */
static void disc_unanswered_again(struct ferry_engine *e, struct disc_item *items,
				  const int *rcs, const uint8_t *fate, bool again)
{
	struct disc_item *next, *old;
	uint64_t now = ferry_now_ms();
	bool queued = false;

	for (unsigned k = 0; items; items = next, k++) {
		next = items->next;
		if (!again || !rcs || !fate || !disc_again(e, items, rcs[k], fate[k], now)) {
			free(items);
			continue;
		}
		items->brief = fate[k] == DISC_UNREAD_BEHIND;
		items->by = e->repair.thread;
		pthread_mutex_lock(&e->disc_lock);
		old = disc_push(e, items);
		pthread_mutex_unlock(&e->disc_lock);
		disc_drop(e, old);
		queued = true;
	}
	if (queued)
		disc_wake_repair(e);
}

/*
 * Send queued DISCONNECTs (the caller's, or all): every peer at once, each
 * peer's on one connection, each peer bounded by SEG_CTL_TIMEOUT_MS (plus
 * 1 ms per DISCONNECT to the busiest peer, its work for a large batch),
 * up to 64 peers at a time.  One after the other with 10 s each, a peer
 * that does not answer made a segment's close take 10 s per QP (40 s with
 * two cores) and an engine's destroy that long per such peer.  Only the
 * caller's own: taking another thread's (a close's) would let that one
 * return before its peer freed its halves, and hold this one meanwhile.
 */
static int disc_timeout_ms(struct ferry_engine *e)
{
	uint32_t t = READ_ONCE(e->disc_timeout_ms);

	return (int)(t ? t : SEG_CTL_TIMEOUT_MS);
}

static void disconnects_send(struct ferry_engine *e, bool all, enum disc_kind kind)
{
	struct disc_item *items;
	struct wire_disconnect *w;
	const char **addr;
	int *rcs = NULL, rc = 0;
	bool more;
	uint8_t *fate = NULL;
	unsigned calls;
	uint64_t due; /* (the repair thread's: seg_disconnect_start) */
	unsigned n = disconnects_take(e, all, kind, 0, &more, &due, &calls, &addr, &w, &items);
	int timeout_ms = kind == DISC_BRIEF ? DISC_BRIEF_MS : disc_timeout_ms(e);

	if (n)
		rcs = malloc(n * sizeof(*rcs));
	if (n && kind == DISC_FULL) /* (brief ones go each alone: first on theirs) */
		fate = calloc(n, sizeof(*fate));
	if (n && !rcs)
		log_warn("no memory to free %u of the peers' QPs: their leases will", n);
	if (rcs && kind == DISC_BRIEF)
		rc = ctl_disconnect_each(&e->client, addr, w, n, timeout_ms, rcs);
	else if (rcs)
		rc = ctl_disconnect_many(&e->client, addr, w, n, timeout_ms, rcs, fate);
	for (unsigned i = 0; rcs && !rc && e->opts.verbose && i < n; i++)
		if (rcs[i]) /* a peer that is gone has nothing left to free */
			log_info("segment %s: disconnect: %s", addr[i], strerror(-rcs[i]));
	/* (Brief ones, each: no fate, none again; only destroy sends them so.) */
	disc_unanswered_again(e, items, rcs && !rc ? rcs : NULL, fate, !all && kind != DISC_BRIEF);
	free(fate);
	free(rcs);
	free(addr);
	free(w);
}

/* What a DISCONNECT batch in flight holds until it lands. */
struct disc_flight {
	struct ferry_engine *e;
	struct disc_item *items;
	const char **addr;
	struct wire_disconnect *w;
	int *rcs;
	uint8_t *fate;
	unsigned calls;         /* counted in e->repair.disc_calls while in flight */
};

static void disc_flight_landed(void *arg)
{
	struct disc_flight *f = arg;
	struct repair *r = &f->e->repair;

	WRITE_ONCE(r->disc_calls, r->disc_calls - f->calls); /* tests read it */
	disc_unanswered_again(f->e, f->items, f->rcs, f->fate, true);
	free(f->fate);
	free(f->rcs);
	free(f->addr);
	free(f->w);
	free(f);
}

/* A batch that found no room in flight: its items queued again. */
static void disc_flight_putback(struct ferry_engine *e, struct disc_flight *f)
{
	struct disc_item *d, *at = NULL;

	pthread_mutex_lock(&e->disc_lock);
	for (d = f->items; d; at = d, d = d->next, e->disc_n++) /* back first, in order: the oldest */
		if (at)
			TAILQ_INSERT_AFTER(&e->disc_items, at, d, queued);
		else
			TAILQ_INSERT_HEAD(&e->disc_items, d, queued);
	pthread_mutex_unlock(&e->disc_lock);
	f->items = NULL;
	disc_flight_landed(f);
}

/* Start the caller's queued DISCONNECTs of kind that room calls carry;
 * how many calls went (*more: some stay queued for want of room; *due:
 * when the first that waits out a back-off may go, 0: none waits). */
static unsigned disc_flight_start(struct ferry_engine *e, struct ctl_calls *calls,
				  enum disc_kind kind, unsigned room, bool *more, uint64_t *due)
{
	struct disc_flight *f = calloc(1, sizeof(*f));
	unsigned n, used = ctl_calls_active(calls);
	int rc;

	*due = 0;
	if (!f) {
		seg_disconnect_flush(e);
		return 0;
	}
	f->e = e;
	n = disconnects_take(e, false, kind, room, more, due, &f->calls, &f->addr, &f->w,
			     &f->items);
	f->rcs = n ? malloc(n * sizeof(*f->rcs)) : NULL;
	f->fate = n ? calloc(n, sizeof(*f->fate)) : NULL;
	/* Counted before the start: a call that ends at once lands inside it. */
	WRITE_ONCE(e->repair.disc_calls, e->repair.disc_calls + f->calls);
	rc = n ? ctl_disconnect_start(calls, f->addr, f->w, n, disc_timeout_ms(e),
				      kind == DISC_BRIEF, f->rcs, f->fate, disc_flight_landed, f)
	       : 0;
	if (rc == -EBUSY) { /* (cannot be: room checked) */
		disc_flight_putback(e, f);
		*more = true;
		return 0;
	}
	if (!n || rc) {
		/* Nothing, or no memory to send them without waiting: here and now. */
		struct wire_disconnect *w = f->w;
		const char **addr = f->addr;
		int *rcs = n ? malloc(n * sizeof(*rcs)) : NULL;

		if (rcs)
			(void)ctl_disconnect_many(&e->client, addr, w, n, disc_timeout_ms(e), rcs,
						  NULL);
		free(rcs);
		free(f->rcs);
		f->rcs = NULL; /* never filled: what went out is not tried again */
		disc_flight_landed(f);
	}
	return ctl_calls_active(calls) - used;
}

/* The earlier of two due times (0: none). */
static uint64_t disc_earlier(uint64_t a, uint64_t b)
{
	return !a || (b && b < a) ? b : a;
}

int seg_disconnect_start(struct ferry_engine *e, struct ctl_calls *calls)
{
	bool more_brief = false, more = false;
	uint64_t due = 0, due_full = 0; /* (those sent again wait out back-offs) */
	/* At most half the calls (counted in flight): DISCONNECTs to mute peers
	 * hold theirs 10 s, and repairs and reconnects matter more (leases free
	 * the rest). */
	unsigned half = (ctl_calls_active(calls) + ctl_calls_room(calls) + 1) / 2;
	unsigned room = e->repair.disc_calls < half ? half - e->repair.disc_calls : 0;
	bool looked;

	if (room > ctl_calls_room(calls))
		room = ctl_calls_room(calls);
	looked = room != 0;

	/* What room allows goes now, the rest waits, queued: a round trip here
	 * would stop the caller's poll loop as long as a peer takes to answer
	 * (10 s if mute).  Those a slow peer may read late first, each on its
	 * own connection. */
	if (room)
		room -= disc_flight_start(e, calls, DISC_BRIEF, room, &more_brief, &due);
	if (room)
		(void)disc_flight_start(e, calls, DISC_FULL, room, &more, &due_full);
	else
		more = true; /* (maybe none: found next time) */
	/* The repair thread wakes then (repair_next_ms), no sooner (without
	 * room: at the next landing, which looks again). */
	if (looked)
		e->repair.disc_due_ms = disc_earlier(due, due_full);
	return more || more_brief ? -EBUSY : 0;
}

void seg_disconnect_flush(struct ferry_engine *e)
{
	disconnects_send(e, false, DISC_BRIEF);
	disconnects_send(e, false, DISC_FULL);
}

/*
 * Engine destroy sends the DISCONNECTs that failed before (waiting out a
 * back-off) once more, each on a connection of its own, DISC_BRIEF_MS at
 * most, CTL_CALLS_MAX side by side: to a peer whose connects hang, K of
 * them take K / 64 x 250 ms.  Beyond DISC_DESTROY_RETRIED (~1 s of that)
 * they are dropped and counted, their peers' leases free those QPs: a
 * long partition to many peers must not hold a destroy for minutes.
 */
#define DISC_DESTROY_RETRIED 256

static void disc_trim_retried(struct ferry_engine *e)
{
	unsigned max = e->knobs.disc_destroy_retried ? e->knobs.disc_destroy_retried
						     : DISC_DESTROY_RETRIED;
	struct disc_item *d, *next, *drop = NULL;
	unsigned kept = 0, n = 0;

	pthread_mutex_lock(&e->disc_lock);
	for (d = TAILQ_FIRST(&e->disc_items); d; d = next) {
		next = TAILQ_NEXT(d, queued);
		if (!d->sends || kept++ < max)
			continue;
		TAILQ_REMOVE(&e->disc_items, d, queued);
		e->disc_n--;
		d->next = drop;
		drop = d;
		n++;
	}
	pthread_mutex_unlock(&e->disc_lock);
	if (!n)
		return;
	fetch_add_relaxed(e->disc_dropped, n); /* statistics */
	log_warn("engine destroy: %u DISCONNECTs that had not got through are left to the "
		 "peers' leases (%u sent once more)", n, max);
	for (; drop; drop = next) {
		next = drop->next;
		free(drop);
	}
}

void seg_disconnect_flush_all(struct ferry_engine *e)
{
	disc_trim_retried(e);
	disconnects_send(e, true, DISC_BRIEF);
	disconnects_send(e, true, DISC_FULL);
}
