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
	/* A slot's local .. nslices (RQ_HEAD_SIZE), nparts 1 (one rail):
	 * copied as one block per submit. */
	uint64_t head[RQ_HEAD_SIZE / sizeof(uint64_t)];
	struct mem_region *lreg;       /* referenced by the set */
	const struct seg_region *rreg; /* in a descriptor kept until the segment closes */
};

struct ferry_prep {
	struct ferry_port *port;
	ferry_seg_t seg;
	uint32_t n;
	struct mem_region *lreg;       /* every entry's, if they share one; else NULL */
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
	struct ferry_rq t;

	if ((r->op != FERRY_OP_READ && r->op != FERRY_OP_WRITE) || !r->local || r->len == 0)
		return -EINVAL;
	t.local = (uintptr_t)r->local;
	t.remote = r->remote;
	t.len = r->len;
	t.op = (uint8_t)r->op; /* checked: FERRY_OP_READ or _WRITE */
	t.nparts = 1;
	t.nslices = slice_count(r->len, e->opts.slice_size);
	memcpy(pe->head, &t, RQ_HEAD_SIZE);
	pe->rreg = seg_desc_find(d, r->remote, r->len);
	if (!pe->rreg)
		return -EFAULT;
	if (!(pe->rreg->access & (t.op == NIC_OP_READ ? NIC_ACCESS_REMOTE_READ :
							 NIC_ACCESS_REMOTE_WRITE)))
		return -EACCES;
	pthread_rwlock_rdlock(&e->regions_lock);
	pe->lreg = ferry_region_find(e, t.local, t.len);
	if (pe->lreg && t.op == NIC_OP_READ && pe->lreg->local_ro)
		pe->lreg = NULL; /* a READ into memory this process may not write: -EFAULT */
	if (pe->lreg)
		fetch_add_relaxed(pe->lreg->refs, 1); /* under the read lock: unregister sees it */
	pthread_rwlock_unlock(&e->regions_lock);
	return pe->lreg ? 0 : -EFAULT;
}

/* The local region every entry uses, or NULL if they use several. */
static struct mem_region *prep_one_lreg(const struct ferry_prep *pr)
{
	for (uint32_t i = 1; i < pr->n; i++)
		if (pr->entry[i].lreg != pr->entry[0].lreg)
			return NULL;
	return pr->entry[0].lreg;
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
				"a range outside registered memory (or a READ into read-only memory)" :
				"bad op, address or length");
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
	pr->lreg = prep_one_lreg(pr);
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

/* Slot rq for entry pe, a run's first: every field, once (its local
 * region's reference taken by the caller). */
static void prep_fill(struct ferry_rq *rq, const struct prep_entry *pe, struct ferry_seg *s,
		      uint32_t slot, ferry_seg_t h, struct rq_batch *b)
{
	memcpy(rq, pe->head, RQ_HEAD_SIZE);
	rq->batch = b;
	rq_outcome_clear(rq);
	rq->lreg = pe->lreg;
	rq->rreg = pe->rreg;
	rq->lreg_refs = &pe->lreg->refs;
	rq->seg = s;
	rq->seg_slot = slot;
	rq->seg_gen = (uint32_t)(h >> 32);
	rq->seg_refs = &s->inflight;
	rq->remaining = rq->len;
}

/* What prep_run_fill needs besides the run's first. */
struct prep_run {
	const struct prep_entry *entry;
	const uint32_t *idx;           /* the call's, from its first */
	bool lreg_each;                /* several local regions: a reference per request */
};

/* dispatch_run's fill for ferry_prep_submit: entry idx[i] into slot q,
 * the segment, batch and rails from the run's first (t), no checks. */
static inline bool prep_run_fill(const void *ctx, struct ferry_rq *q, const struct ferry_rq *t,
				 uint32_t i, uint32_t nrails)
{
	const struct prep_run *c = ctx;
	const struct prep_entry *pe = &c->entry[c->idx[i]];

	memcpy(q, pe->head, RQ_HEAD_SIZE);
	/* batch, segment, rails and their references; the regions follow */
	memcpy(&q->RQ_SHARED_FIRST, &t->RQ_SHARED_FIRST, RQ_SHARED_SIZE);
	q->lreg = pe->lreg;
	q->rreg = pe->rreg;
	q->lreg_refs = &pe->lreg->refs;
	if (c->lreg_each)
		fetch_add_relaxed(pe->lreg->refs, 1); /* the set holds one too: unregister is -EBUSY */
	rq_outcome_clear(q);
	if (nrails != 1 && q->nslices > 1) /* a constant 1 on one rail: head's nparts */
		q->nparts = q->nslices < nrails ? (uint32_t)q->nslices : nrails;
	q->remaining = q->len;
	return true;
}

/* Requests i..end of the call after t, its run's first, on t's rails:
 * where it stopped, *waited when a wait for ring room ended it. */
static uint32_t prep_run(struct dispatch *d, const struct rails_snap *rails,
			 const struct ferry_rq *t, struct ferry_rq *rqs, uint32_t i, uint32_t end,
			 const struct prep_run *c, bool *waited)
{
	uint32_t k;

	if (rails->n != 1)
		return dispatch_run(d, rails->rails, rails->n, false, true, t, rqs, i, end,
				    prep_run_fill, c, waited);
	k = dispatch_run_window(d, rails->rails, t, rqs, i, end, prep_run_fill, c, waited);
	dispatch_skip(d, k - i);
	return k;
}

/* Every slot of the call FAILED -EBADF (the segment is closed or stale). */
static void prep_refuse(struct ferry_batch *b, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct ferry_rq *rq = &b->rqs[b->n + i];

		rq_clear(rq, &b->acct);
		rq_refuse(rq, -EBADF);
	}
	store_release(b->n, b->n + n); /* pairs with: load_acquire in ferry_req_status */
}

/*
 * The entries go in runs like ferry_submit's (dispatch_run): a run's first
 * is filled and its rails picked, the rest of the run copies those and
 * its entry's image, with nothing to check -- the set was validated once
 * and the segment is looked at once per call (prep_seg_refs).
 */
int ferry_prep_submit(struct ferry_batch *b, const struct ferry_prep *pr, const uint32_t *idx,
		      uint32_t n)
{
	struct rails_snap rails = { .left = 0 };
	struct prep_run c;
	struct ferry_engine *e;
	struct ferry_rq *rqs;
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
	s = n ? prep_seg_refs(e, pr->seg, n, &slot) : NULL;
	if (!s) {
		prep_refuse(b, n);
		return (int)first;
	}
	fetch_add_relaxed(b->acct.pending, n); /* published by the ring's release */
	if (pr->lreg) /* the one region of every entry: the call's references at once */
		fetch_add_relaxed(pr->lreg->refs, n); /* the set holds one too: unregister is -EBUSY */
	c.entry = pr->entry;
	c.idx = idx;
	c.lreg_each = !pr->lreg;
	rqs = &b->rqs[first];
	dispatch_begin(&d, b->port);
	for (uint32_t i = 0; i < n;) {
		struct ferry_rq *rq = &rqs[i];
		bool waited = false;
		uint32_t end;

		prep_fill(rq, &pr->entry[idx[i]], s, slot, pr->seg, &b->acct);
		if (c.lreg_each)
			fetch_add_relaxed(rq->lreg->refs, 1); /* the set holds one too */
		rq_rails(e, rq, &rails);
		if (rq->nslices < rq->nparts)
			rq->nparts = (uint32_t)rq->nslices;
		i++;
		if (rq_dispatch(&d, rq) || !rails.rails) {
			rails.left = 0; /* pick again after a wait; none: each looks again */
			continue;
		}
		end = n - i < rails.left ? n : i + rails.left;
		end = prep_run(&d, &rails, rq, rqs, i, end, &c, &waited);
		rails.left = waited ? 0 : rails.left - (end - i);
		i = end;
	}
	store_release(b->n, b->n + n); /* pairs with: load_acquire in ferry_req_status */
	dispatch_end(&d);
	port_publish(b->port);
	return (int)first;
}
