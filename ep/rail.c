/* SPDX-License-Identifier: MIT */
#include "ep/rail.h"

#include "ring/base/atomics.h"

static void rail_publish(struct rail *r)
{
	if (r->published)
		WRITE_ONCE(*r->published, r->paused); /* a hint for submitters: no order */
}

bool rail_note_error(struct rail *r, const struct rail_cfg *cfg, uint64_t now)
{
	if (now - r->win_start > cfg->window) {
		r->win_start = now;
		r->errs = 0;
	}
	if (++r->errs < cfg->errors || r->paused)
		return false;
	r->backoff = r->backoff ? 2 * r->backoff : cfg->pause_min;
	if (r->backoff > cfg->pause_max)
		r->backoff = cfg->pause_max;
	r->paused_until = now + r->backoff;
	r->paused = 1;
	rail_publish(r);
	return true;
}

void rail_note_success(struct rail *r)
{
	r->errs = 0;
	r->backoff = 0;
	if (r->paused) {
		r->paused = 0;
		rail_publish(r);
	}
}

bool rail_pause_over(struct rail *r, uint64_t now)
{
	if (!r->paused || now < r->paused_until)
		return false;
	r->paused = 0;
	rail_publish(r);
	return true;
}
