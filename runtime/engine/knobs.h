/* SPDX-License-Identifier: MIT */
/*
 * Knobs for ferry's own benchmarks and tests, kept out of the public
 * options: nothing an application should turn.  The bench links the static
 * library and calls ferry_engine_create_knobs.
 */
#ifndef FERRY_RUNTIME_KNOBS_H
#define FERRY_RUNTIME_KNOBS_H

#include <stdint.h>

struct ferry_engine;
struct ferry_opts;

struct ferry_knobs {
	uint32_t loop_nocopy;  /* loop NIC: check keys and bounds, skip the memcpy */
	uint32_t meta_ttl_ms;  /* the name's lease in the metadata store (tests: short); 0 = 10 s */
	uint32_t notif_queue;  /* notifications a receiver holds; 0 = NOTIF_QUEUE_DEFAULT */
	uint32_t abandon_ms;   /* a QP whose WRs stay out this long is given up (tests of
	                        * a dead device: short); 0 = ABANDON_MS (core.c) */
	uint32_t disc_retry_ms; /* a DISCONNECT that did not get through goes again after
	                         * this, doubled each time up to 16 x; 0 = DISC_RETRY_MS
	                         * (segment/disconnect.c) */
	uint32_t disc_queue_max; /* DISCONNECTs queued at most (the oldest dropped);
	                          * 0 = DISC_QUEUE_MAX (segment/disconnect.c) */
	uint32_t disc_destroy_retried; /* DISCONNECTs in a back-off that engine destroy
	                                * sends once more (the rest dropped); 0 =
	                                * DISC_DESTROY_RETRIED (segment/disconnect.c) */
};

/* ferry_engine_create with knobs (NULL: none). */
int ferry_engine_create_knobs(const struct ferry_opts *o, const struct ferry_knobs *k,
			      struct ferry_engine **out);

#endif /* FERRY_RUNTIME_KNOBS_H */
