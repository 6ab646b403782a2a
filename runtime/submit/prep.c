/* SPDX-License-Identifier: MIT */
/*
 * Prepared transfers (NIXL's prepared descriptor lists): a set of requests
 * to one segment validated once -- ranges, regions, slice counts -- so that
 * a serving loop submits entries by index without checking them again.
 * The set holds a reference on each entry's local region, so the region
 * cannot be unregistered under it; the segment is checked once per submit
 * call (one reference per request, taken in bulk).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/log.h"
#include "runtime/engine/engine.h"
#include "runtime/submit/dispatch.h"

struct prep_entry {
	uint64_t local, remote, len;
	uint64_t nslices;
	uint8_t op;                    /* enum nic_op */
	struct mem_region *lreg;       /* referenced by the set */
	const struct seg_region *rreg; /* in a descriptor kept until the segment closes */
};

struct ferry_prep {
	struct ferry_port *port;
	ferry_seg_t seg;
	uint32_t n;
	struct prep_entry entry[];
};

static void prep_unref(struct ferry_prep *pr, uint32_t upto)
{
	for (uint32_t i = 0; i < upto; i++)
		fetch_sub_release(pr->entry[i].lreg->refs, 1); /* pairs with: unregister's load */
}

/* Entry i from req r: the checks ferry_submit makes, made once. */
static int prep_entry_init(struct ferry_engine *e, const struct seg_desc *d,
			   struct prep_entry *pe, const struct ferry_req *r)
{
	if ((r->op != FERRY_OP_READ && r->op != FERRY_OP_WRITE) || !r->local || r->len == 0)
		return -EINVAL;
	pe->local = (uintptr_t)r->local;
	pe->remote = r->remote;
	pe->len = r->len;
	pe->op = r->op == FERRY_OP_READ ? NIC_OP_READ : NIC_OP_WRITE;
	pe->nslices = slice_count(r->len, e->opts.slice_size);
	pe->rreg = seg_desc_find(d, r->remote, r->len);
	if (!pe->rreg)
		return -EFAULT;
	if (!(pe->rreg->access & (pe->op == NIC_OP_READ ? NIC_ACCESS_REMOTE_READ :
							  NIC_ACCESS_REMOTE_WRITE)))
		return -EACCES;
	pthread_rwlock_rdlock(&e->regions_lock);
	pe->lreg = ferry_region_find(e, pe->local, pe->len);
	if (pe->lreg)
		fetch_add_relaxed(pe->lreg->refs, 1); /* under the read lock: unregister sees it */
	pthread_rwlock_unlock(&e->regions_lock);
	return pe->lreg ? 0 : -EFAULT;
}

int ferry_prep_create(struct ferry_port *p, ferry_seg_t seg, const struct ferry_req *reqs,
		      uint32_t n, struct ferry_prep **out)
{
	struct ferry_prep *pr;
	struct ferry_seg *s;
	uint32_t slot, i;
	int rc = 0;

	if (!p || !reqs || !out || n == 0 || n > (1u << 24))
		return -EINVAL;
	pr = calloc(1, sizeof(*pr) + (size_t)n * sizeof(pr->entry[0]));
	if (!pr)
		return -ENOMEM;
	s = seg_acquire(p->e, seg, &slot);
	if (!s) {
		free(pr);
		return -EBADF;
	}
	for (i = 0; i < n && rc == 0; i++) {
		rc = prep_entry_init(p->e, load_acquire(s->desc), &pr->entry[i], &reqs[i]); /* pairs with: seg_refresh_locked */
		if (rc)
			log_err("ferry_prep_create: request %u: %s", i, rc == -EFAULT ?
				"a range outside registered memory" : "bad op, address or length");
	}
	seg_release_ref(s);
	if (rc) {
		prep_unref(pr, i - 1);
		free(pr);
		return rc;
	}
	pr->port = p;
	pr->seg = seg;
	pr->n = n;
	*out = pr;
	return 0;
}

int ferry_prep_destroy(struct ferry_prep *pr)
{
	if (!pr)
		return -EINVAL;
	prep_unref(pr, pr->n);
	free(pr);
	return 0;
}

/*
 * One reference on the segment per request, taken at once: the same Dekker
 * pair with the closer as seg_acquire (add, then look at the state).  NULL
 * when the handle is closed, stale or unknown.
 */
static struct ferry_seg *prep_seg_refs(struct ferry_engine *e, ferry_seg_t h, uint32_t n,
				       uint32_t *slot)
{
	struct ferry_seg *s = seg_lookup(e, h, slot);

	if (!s)
		return NULL;
	if (!seg_refs_take(s, h, n))
		return NULL;
	if (READ_ONCE(s->stale)) {
		seg_release_refs(s, n);
		return NULL;
	}
	return s;
}

/* Slot rq for entry pe: every field, once. */
static void prep_fill(struct ferry_rq *rq, const struct prep_entry *pe, struct ferry_seg *s,
		      uint32_t slot, ferry_seg_t h, struct rq_batch *b)
{
	rq->batch = b;
	rq->ok_bytes = 0;
	rq->error = 0;
	WRITE_ONCE(rq->state, RQ_PENDING); /* readers of a reused slot: ferry_req_status */
	rq->local = pe->local;
	rq->remote = pe->remote;
	rq->len = pe->len;
	rq->op = pe->op;
	rq->nslices = pe->nslices;
	rq->lreg = pe->lreg;
	rq->rreg = pe->rreg;
	fetch_add_relaxed(pe->lreg->refs, 1); /* the set holds one too: unregister is -EBUSY */
	rq->lreg_refs = &pe->lreg->refs;
	rq->seg = s;
	rq->seg_slot = slot;
	rq->seg_gen = (uint32_t)(h >> 32);
	rq->seg_refs = &s->inflight;
}

int ferry_prep_submit(struct ferry_batch *b, const struct ferry_prep *pr, const uint32_t *idx,
		      uint32_t n)
{
	struct rails_snap rails = { .left = 0 };
	struct ferry_engine *e;
	struct ferry_seg *s;
	uint32_t first, slot;
	struct dispatch d;

	if (!b || !pr || (!idx && n) || pr->port != b->port)
		return -EINVAL;
	if (b->capacity - b->n < n)
		return -ENOSPC;
	for (uint32_t i = 0; i < n; i++)
		if (idx[i] >= pr->n)
			return -EINVAL;
	e = b->port->e;
	first = b->n;
	dispatch_begin(&d, b->port);
	s = n ? prep_seg_refs(e, pr->seg, n, &slot) : NULL;
	if (s) /* every request is queued: counted at once (see submit_some) */
		fetch_add_relaxed(b->acct.pending, n); /* published by the ring's release */
	for (uint32_t i = 0; i < n; i++) {
		struct ferry_rq *rq = &b->rqs[b->n++];

		if (!s) {
			rq_clear(rq, &b->acct);
			rq_refuse(rq, -EBADF);
			continue;
		}
		prep_fill(rq, &pr->entry[idx[i]], s, slot, pr->seg, &b->acct);
		rq_rails(e, rq, &rails);
		if (rq->nslices < rq->nparts)
			rq->nparts = (uint32_t)rq->nslices;
		rq->remaining = rq->len;
		if (rq_dispatch(&d, rq))
			rails.left = 0;
	}
	dispatch_end(&d);
	port_publish(b->port);
	return (int)first;
}
