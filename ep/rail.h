/* SPDX-License-Identifier: MIT */
/*
 * Rail health.  A rail is one core's endpoint to one segment (a local NIC to
 * a peer NIC).  Errors within a window pause it, each pause longer than the
 * last while it keeps failing, and a success ends a pause early: new work
 * avoids a paused rail, and a retried slice moves to another one.  The
 * owning core is the only writer; it publishes "paused" into the byte the
 * control path gave it (the segment's per-core flag), which submitters read
 * when they pick rails.
 */
#ifndef FERRY_EP_RAIL_H
#define FERRY_EP_RAIL_H

#include <stdbool.h>
#include <stdint.h>

/* Thresholds in clock ticks, from the engine's options. */
struct rail_cfg {
	uint32_t errors;       /* errors within window that pause the rail */
	uint64_t window;
	uint64_t pause_min;    /* the first pause */
	uint64_t pause_max;    /* the longest */
};

struct rail {
	uint32_t errs;         /* errors in the current window */
	uint8_t paused;
	uint64_t win_start;
	uint64_t paused_until;
	uint64_t backoff;      /* the next pause's length (grows) */
	uint8_t *published;    /* where submitters read "paused" (NULL: nowhere) */
};

/* Count an error at now; true when it paused the rail (now). */
bool rail_note_error(struct rail *r, const struct rail_cfg *cfg, uint64_t now);

/* A success: the error count and back-off start over, a pause ends. */
void rail_note_success(struct rail *r);

/* End a pause whose time is up; true when it ended one. */
bool rail_pause_over(struct rail *r, uint64_t now);

/* Anything to forget on a success?  (The hot path's one test.) */
static inline bool rail_troubled(const struct rail *r)
{
	return r->errs | r->paused;
}

#endif /* FERRY_EP_RAIL_H */
