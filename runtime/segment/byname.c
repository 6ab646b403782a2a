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
#include <string.h>

#include "ring/base/log.h"
#include "runtime/engine/engine.h"

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
		seg_mark_stale(e, s, slot);
	}
}

/* Resolve name and open what the store names (engine destroy waits). */
static int open_named(struct ferry_engine *e, const char *name, ferry_seg_t *out)
{
	struct meta_record rec;
	struct seg_want want;
	int rc = named_resolve(e, name, &rec);

	if (rc)
		return rc;
	want.name = name;
	want.incarnation = rec.incarnation;
	rc = seg_open_address(e, rec.addr, &want, out);
	if (rc == 0) {
		pthread_mutex_lock(&e->ctl_lock);
		seg_stale_others(e, name, rec.incarnation);
		pthread_mutex_unlock(&e->ctl_lock);
	}
	if (rc && rc != -ESTALE && rc != -ECANCELED)
		log_err("segment '%s': the engine the store names (%s, incarnation %016llx) cannot "
			"be opened: %s", name, rec.addr, (unsigned long long)rec.incarnation,
			strerror(-rc));
	return rc;
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
