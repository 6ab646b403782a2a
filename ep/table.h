/* SPDX-License-Identifier: MIT */
/*
 * A core's endpoint table: the endpoints it holds, at most cap (the
 * ep_cache option), by cache index -- not by segment slot, so its size is
 * the cache's and not the number of segments an engine may open.  The
 * control path publishes an entry with rcu_assign_pointer (under its lock)
 * and the core reads them, lock-free, with rcu_dereference when it sweeps
 * its endpoints: O(ep_cache) per sweep.  The core finds the endpoint of a
 * request through its segment instead (runtime/segment: one RCU-published
 * pointer per core).  The SIEVE cache over the indices bounds how many
 * there are (the control path's alone).  An unpublished endpoint is freed
 * only after a grace period (ep/teardown.c): the core may still hold the
 * pointer it loaded in its last pass.
 */
#ifndef FERRY_EP_TABLE_H
#define FERRY_EP_TABLE_H

#include <stdint.h>

#include "ep/ep.h"
#include "ep/sieve.h"
#include "ring/base/atomics.h"

struct ep_table {
	uint32_t cap;                 /* entries: the ep_cache option */
	struct ferry_ep **eps;        /* [cap] RCU-published, by ep->cache_idx */
	struct sieve cache;           /* which indices hold an endpoint (control path) */
	uint64_t evictions;           /* control path writes, anyone reads (READ_ONCE) */
};

/* An empty table of cap entries (1..SIEVE_MAX_KEYS); -EINVAL, -ENOMEM. */
int ep_table_init(struct ep_table *t, uint32_t cap);
/* Free the arrays (the entries must be gone: the core stopped). */
void ep_table_fini(struct ep_table *t);

/* Publish ep at a free index (ep->cache_idx) and enter it in the cache:
 * the control path, under its lock; -ENOSPC when the cache is full (make
 * room first).  ep's QPs must be attached by its core first. */
int ep_table_add(struct ep_table *t, struct ferry_ep *ep);
/* Unpublish ep and drop it from the cache: the control path, under its lock. */
void ep_table_del(struct ep_table *t, struct ferry_ep *ep);

/* The endpoint at index i (i < cap), or NULL: the owning core (or the control path). */
static inline struct ferry_ep *ep_table_at(const struct ep_table *t, uint32_t i)
{
	return rcu_dereference(t->eps[i]); /* pairs with: rcu_assign_pointer in ep_table_add/del */
}

#endif /* FERRY_EP_TABLE_H */
