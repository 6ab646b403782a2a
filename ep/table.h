/* SPDX-License-Identifier: MIT */
/*
 * A core's endpoint table: its endpoints by segment slot, published by the
 * control path with rcu_assign_pointer and read by the core, lock-free, with
 * rcu_dereference; and the SIEVE cache that bounds how many there are (the
 * control path's alone, under its lock).  An unpublished endpoint is freed
 * only after a grace period (ep/teardown.c): the core may still hold the
 * pointer it loaded in its last pass.
 */
#ifndef FERRY_EP_TABLE_H
#define FERRY_EP_TABLE_H

#include <stdint.h>

#include "ep/ep.h"
#include "ep/sieve.h"
#include "ring/base/atomics.h"

/* Segment slots a table covers: the engine's FERRY_MAX_SEGMENTS. */
#define EP_TABLE_SLOTS 256
_Static_assert(EP_TABLE_SLOTS <= SIEVE_MAX_KEYS, "a segment slot is a SIEVE key");

struct ep_table {
	struct ferry_ep *eps[EP_TABLE_SLOTS]; /* RCU-published */
	struct sieve cache;           /* which slots hold an endpoint (control path) */
	uint64_t evictions;           /* control path writes, anyone reads (READ_ONCE) */
};

/* The endpoint for slot, or NULL: the owning core (or the control path). */
static inline struct ferry_ep *ep_table_get(const struct ep_table *t, uint32_t slot)
{
	return rcu_dereference(t->eps[slot]); /* pairs with: rcu_assign_pointer in ep_table_set */
}

/* Publish ep (NULL: unpublish) at slot: the control path, under its lock.
 * ep's QPs must be attached by its core first. */
static inline void ep_table_set(struct ep_table *t, uint32_t slot, struct ferry_ep *ep)
{
	rcu_assign_pointer(t->eps[slot], ep); /* pairs with: rcu_dereference in ep_table_get */
}

#endif /* FERRY_EP_TABLE_H */
