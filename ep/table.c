/* SPDX-License-Identifier: MIT */
#include "ep/table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ep_table_init(struct ep_table *t, uint32_t cap)
{
	int rc;

	memset(t, 0, sizeof(*t));
	rc = sieve_init(&t->cache, cap, cap);
	if (rc)
		return rc;
	t->eps = calloc(cap, sizeof(*t->eps));
	if (!t->eps) {
		sieve_fini(&t->cache);
		return -ENOMEM;
	}
	t->cap = cap;
	return 0;
}

void ep_table_fini(struct ep_table *t)
{
	free(t->eps);
	sieve_fini(&t->cache);
	t->eps = NULL;
	t->cap = 0;
}

int ep_table_add(struct ep_table *t, struct ferry_ep *ep)
{
	uint32_t i;

	if (sieve_full(&t->cache))
		return -ENOSPC;
	/* Not full: a free index exists.  A linear look on the control path
	 * (at most ep_cache entries), never on the core. */
	for (i = 0; i < t->cap && t->eps[i]; i++)
		;
	ep->cache_idx = i;
	rcu_assign_pointer(t->eps[i], ep); /* pairs with: rcu_dereference in ep_table_at */
	return sieve_insert(&t->cache, i);
}

void ep_table_del(struct ep_table *t, struct ferry_ep *ep)
{
	uint32_t i = ep->cache_idx;

	if (i >= t->cap || t->eps[i] != ep)
		return;
	rcu_assign_pointer(t->eps[i], NULL); /* pairs with: rcu_dereference in ep_table_at */
	sieve_remove(&t->cache, i);
}
