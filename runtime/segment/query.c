/* SPDX-License-Identifier: MIT */
/*
 * What an application may ask about an open segment: the transport it goes
 * over and the regions the peer registered (so that it need not hard-code
 * remote addresses).  Control path: under the engine's lock, from the
 * segment's current descriptor.
 */
#include <errno.h>
#include <string.h>

#include "runtime/engine/engine.h"

const char *ferry_segment_transport(struct ferry_engine *e, ferry_seg_t seg)
{
	const struct ferry_seg *s;
	const char *name = NULL;
	uint32_t slot;

	if (!e || engine_forked(e))
		return NULL;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (s && s->state == SEG_OPEN) {
		for (unsigned k = 0; k < ROUTE_N && !name; k++)
			if (strcmp(s->transport, route_order[k]) == 0)
				name = route_order[k]; /* static: outlives the segment */
	}
	pthread_mutex_unlock(&e->ctl_lock);
	return name;
}

int ferry_segment_regions(struct ferry_engine *e, ferry_seg_t seg, struct ferry_region_info *out,
			  uint32_t max)
{
	const struct ferry_seg *s;
	uint32_t slot;
	int rc = -ENOENT;

	if (!e || (!out && max))
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (s && s->state == SEG_OPEN && s->desc) {
		const struct seg_desc *d = s->desc;

		for (uint32_t i = 0; i < d->n_regions && i < max; i++) {
			out[i].addr = d->regions[i].addr;
			out[i].len = d->regions[i].len;
			out[i].access = d->regions[i].access;
		}
		rc = d->n_regions > INT32_MAX ? -EOVERFLOW : (int)d->n_regions;
	}
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}
