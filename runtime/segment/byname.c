/* SPDX-License-Identifier: MIT */
/*
 * ferry_segment_open of a name ("prefill-0" rather than "10.0.0.7:7000"):
 * the metadata store says which engine holds the name -- its control
 * address and incarnation -- and the open then goes on as for an address,
 * so re-opens, incarnation checks and stale marking work the same.  The
 * descriptor the engine itself sends must carry the incarnation the store
 * named (open.c: want_check); memory keys come only from that
 * descriptor, never from the store.
 *
 * The store is asked without ctl_lock held: a slow or dead store delays
 * this open (NAMED_RESOLVE_TIMEOUT_MS at most), no other control call.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ring/base/log.h"
#include "runtime/engine/engine.h"

/* An open whose answer turned out old asks the store again, this often. */
#define NAMED_OPEN_TRIES 3

/*
 * The name now belongs to incarnation inc: handles still open to another
 * incarnation under that name are to an engine that died (or lost its
 * lease): stale, as when a peer restarts on its address.  ctl_lock held.
 */
static void seg_stale_others(struct ferry_engine *e, const char *name, uint64_t inc)
{
	for (uint32_t slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		if (s->state != SEG_OPEN || READ_ONCE(s->stale) || strcmp(s->name, name) != 0 ||
		    s->desc->incarnation == inc)
			continue;
		log_warn("segment '%s': the name now belongs to incarnation %016llx: the handle to "
			 "%016llx at %s is stale", name, (unsigned long long)inc,
			 (unsigned long long)s->desc->incarnation, s->address);
		seg_mark_stale_quiet(e, s, slot); /* not "restarted": said above */
	}
}

/*
 * An open by name is done: it opened h, the incarnation inc that the
 * store's order-th answer named.  Opens of the name run side by side, so
 * another may have finished first on a later answer (the name moved
 * meanwhile): then ours is old news, and taken as the name's holder it
 * would mark the newer segment stale.  true: a segment opened on a later
 * answer names another incarnation (ask again).  Else our answer is the
 * newest: h answers to the name from now on, takes its order, and other
 * incarnations under the name go stale.  The name is set here, not when
 * h opened: an open found late is undone, and h may be a segment opened
 * by address (or another name) that must stay as it was.  ctl_lock held.
 */
static bool seg_name_settle(struct ferry_engine *e, const char *name, uint64_t inc,
			    uint64_t order, ferry_seg_t h)
{
	struct ferry_seg *own;
	uint32_t slot;

	for (slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		if (s->state == SEG_OPEN && !READ_ONCE(s->stale) && strcmp(s->name, name) == 0 &&
		    s->desc->incarnation != inc && s->name_order > order)
			return true;
	}
	own = seg_lookup(e, h, &slot);
	if (own && own->state == SEG_OPEN) {
		if (strcmp(own->name, name) != 0) { /* another name's order meant nothing here */
			snprintf(own->name, sizeof(own->name), "%s", name);
			own->name_order = 0;
		}
		if (own->name_order < order)
			own->name_order = order;
	}
	seg_stale_others(e, name, inc);
	return false;
}

/*
 * Resolve name and open what the store names, once.  1: ask again -- the
 * name moved while we opened (nothing stays open), or the engine there is
 * not the incarnation the store named (-ESTALE: it may have restarted and
 * taken the name meanwhile; *refused says which incarnation was not
 * there).  An answer naming *refused again is -ESTALE at once: the
 * store's record is stale (a dead engine's, not expired yet).
 */
static int open_named_once(struct ferry_engine *e, const char *name, uint64_t *refused,
			   ferry_seg_t *out)
{
	struct meta_record rec;
	struct seg_want want;
	uint64_t order = 0;
	bool late = false;
	int rc = named_resolve(e, name, &rec, &order, false);

	if (rc)
		return rc;
	if (rec.incarnation == *refused)
		return -ESTALE; /* want_check said why */
	want.name = name;
	want.incarnation = rec.incarnation;
	rc = seg_open_address(e, rec.addr, &want, out);
	if (rc == 0) {
		pthread_mutex_lock(&e->ctl_lock);
		late = seg_name_settle(e, name, rec.incarnation, order, *out);
		pthread_mutex_unlock(&e->ctl_lock);
	}
	if (late) {
		/* Not the name's holder any more: this open is undone. */
		(void)ferry_segment_close(e, *out);
		return 1;
	}
	if (rc == -ESTALE) {
		*refused = rec.incarnation;
		return 1;
	}
	if (rc && rc != -ECANCELED)
		log_err("segment '%s': the engine the store names (%s, incarnation %016llx) cannot "
			"be opened: %s", name, rec.addr, (unsigned long long)rec.incarnation,
			strerror(-rc));
	return rc;
}

/* Resolve and open, again while the name moves under us (engine destroy
 * waits). */
static int open_named(struct ferry_engine *e, const char *name, ferry_seg_t *out)
{
	uint64_t refused = 0; /* incarnations are never 0 */
	int rc = 1;

	for (int i = 0; i < NAMED_OPEN_TRIES && rc == 1; i++)
		rc = open_named_once(e, name, &refused, out);
	if (rc == 1) {
		log_err("segment '%s': the name kept moving while it was opened: try again", name);
		rc = -ESTALE;
	}
	return rc;
}

/* A segment opened by name, as the recheck found it under ctl_lock. */
struct name_check {
	uint32_t slot, gen;
	uint64_t incarnation;
	char name[FERRY_NAME_MAX + 1];
};

#define NAME_CHECKS_MAX 8 /* per refused address and round: the store is asked once each */

/* The store names name's holder (quietly: asked again at the next refused
 * keepalive); 0 and its incarnation in *inc, or -errno. */
static int name_holder(struct ferry_engine *e, const char *name, uint64_t *inc)
{
	struct meta_record rec;
	uint64_t order;
	int rc = named_resolve(e, name, &rec, &order, true);

	if (!rc)
		*inc = rec.incarnation;
	return rc;
}

/* c's segment, if still open as found and not stale: stale now.  ctl_lock held. */
static void name_check_stale(struct ferry_engine *e, const struct name_check *c, uint64_t inc)
{
	struct ferry_seg *s = seg_at(&e->segs, c->slot);

	if (s->state != SEG_OPEN || s->gen != c->gen || READ_ONCE(s->stale) ||
	    strcmp(s->name, c->name) != 0)
		return;
	log_warn("segment '%s': nothing listens at %s any more, and the name now belongs to "
		 "incarnation %016llx: the handle to %016llx is stale (open the name again)",
		 c->name, s->address, (unsigned long long)inc, (unsigned long long)c->incarnation);
	seg_mark_stale_quiet(e, s, c->slot); /* not "restarted": said above */
}

int seg_names_recheck(struct ferry_engine *e, const char *address)
{
	struct name_check c[NAME_CHECKS_MAX];
	unsigned n = 0;
	uint64_t inc;
	int rc = 0;

	if (!e->named.store)
		return 0;
	pthread_mutex_lock(&e->ctl_lock);
	for (uint32_t slot = 0; slot < seg_slots(&e->segs) && n < NAME_CHECKS_MAX; slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		if (s->state != SEG_OPEN || READ_ONCE(s->stale) || !s->name[0] ||
		    strcmp(s->address, address) != 0)
			continue;
		c[n] = (struct name_check){ .slot = slot, .gen = s->gen,
					    .incarnation = s->desc->incarnation };
		memcpy(c[n++].name, s->name, sizeof(c[0].name));
	}
	pthread_mutex_unlock(&e->ctl_lock);
	for (unsigned k = 0; k < n && (rc == 0 || rc == -ENOENT); k++) {
		rc = name_holder(e, c[k].name, &inc);
		if (rc || inc == c[k].incarnation)
			continue; /* no record (yet), or still the dead one's */
		pthread_mutex_lock(&e->ctl_lock);
		name_check_stale(e, &c[k], inc);
		pthread_mutex_unlock(&e->ctl_lock);
	}
	return rc == -ENOENT ? 0 : rc;
}

int seg_open_named(struct ferry_engine *e, const char *name, ferry_seg_t *out)
{
	int rc;

	if (!ferry_name_valid(name)) {
		log_err("segment '%s': neither host:port nor a name (1..%d of [A-Za-z0-9._-])", name,
			FERRY_NAME_MAX);
		return -EINVAL;
	}
	/* Counted as an open from the store's lookup on: engine destroy waits
	 * for it (e->opening) before the store's handle, and e, go. */
	pthread_mutex_lock(&e->ctl_lock);
	if (e->destroying) {
		pthread_mutex_unlock(&e->ctl_lock);
		return -ECANCELED;
	}
	e->opening++;
	pthread_mutex_unlock(&e->ctl_lock);
	rc = open_named(e, name, out);
	/* The last touch of e: engine destroy may go on once we are out. */
	pthread_mutex_lock(&e->ctl_lock);
	e->opening--;
	pthread_cond_broadcast(&e->seg_cond);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}
