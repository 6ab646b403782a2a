/* SPDX-License-Identifier: MIT */
/*
 * soft: the control path's side of what the software NICs share (soft.h):
 * a completion ring's allocation, the wait for a busy CQ, the counters'
 * sums.  Called under the provider's own lock; nothing here locks.
 */
#include "qp/soft/soft.h"

#include <sched.h>
#include <stdlib.h>

#include "ring/base/atomics.h"

int soft_cq_init(struct soft_cq *q, uint32_t cqe)
{
	q->ring = calloc(cqe, sizeof(*q->ring));
	if (!q->ring)
		return -ENOMEM;
	q->size = cqe;
	q->head = 0;
	q->tail = 0;
	q->count = 0;
	q->overflow = false;
	return 0;
}

void soft_cq_fini(struct soft_cq *q)
{
	free(q->ring);
	q->ring = NULL;
}

/*
 * seq_cst load: the control path's half of the Dekker pair in
 * soft_busy_enter.  Acquire: what that call did happens before our caller
 * frees or closes what it used.
 */
void soft_busy_wait(uint64_t *seq)
{
	uint64_t s = load_sc(*seq);

	if (!(s & 1))
		return;
	while (load_acquire(*seq) == s) /* pairs with: store_release in soft_busy_leave */
		sched_yield();
}

void soft_cnt_add(uint64_t *sum, const uint64_t *pub, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sum[i] += READ_ONCE(pub[i]);
}
