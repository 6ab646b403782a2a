/* SPDX-License-Identifier: MIT */
/*
 * Prepared transfers (NIXL's prepared descriptor lists): a set of requests
 * to one segment validated once -- ranges, regions, slice counts -- so that
 * a serving loop submits entries by index without checking them again.
 * The set holds a reference on each entry's local region, so the region
 * cannot be unregistered under it; the segment is checked once per submit
 * call (one reference per request, taken in bulk), and so is its
 * descriptor: when a refresh replaced it (the peer's regions changed), the
 * entries are checked again against the new one before they go, as
 * ferry_submit would check them (prep_rebind).
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
	/* In the view's descriptor, kept until the segment closes; NULL when
	 * that has no region for the range (err says why: refused at submit). */
	const struct seg_region *rreg;
	int32_t err;                   /* 0, -EFAULT or -EACCES */
};

/* The descriptor of the segment the entries were checked against. */
struct prep_view {
	const struct seg_desc *desc;
	uint32_t n_bad;                /* entries it has no region for */
};

struct ferry_prep {
	struct ferry_port *port;
	ferry_seg_t seg;
	uint32_t n;
	struct mem_region *lreg;       /* every entry's, if they share one; else NULL */
	/* Checked again by ferry_prep_submit, on the port's thread (the set's
	 * only user), after a refresh: written through the const set. */
	struct prep_view *view;
	struct prep_entry *entry;      /* [n] */
};

/* A set, its view and its entries: one allocation (pr first: freed as one). */
struct prep_block {
	struct ferry_prep pr;
	struct prep_view view;
	struct prep_entry entry[];
};

static void prep_unref(struct ferry_prep *pr, uint32_t upto)
{
	for (uint32_t i = 0; i < upto; i++)
		fetch_sub_release(pr->entry[i].lreg->refs, 1); /* pairs with: unregister's load */
}

/* pe's peer region in d, checked for pe's op: 0, or -EFAULT (no region
 * holds the range), -EACCES (it does not allow the op); then rreg NULL. */
static int prep_entry_bind(const struct seg_desc *d, struct prep_entry *pe)
{
	struct ferry_rq t;
	uint32_t need;

	memcpy(&t, pe->head, RQ_HEAD_SIZE);
	need = t.op == NIC_OP_READ ? NIC_ACCESS_REMOTE_READ : NIC_ACCESS_REMOTE_WRITE;
	pe->rreg = seg_desc_find(d, t.remote, t.len);
	pe->err = pe->rreg ? 0 : -EFAULT;
	if (pe->rreg && !(pe->rreg->access & need)) {
		pe->rreg = NULL;
		pe->err = -EACCES;
	}
	return pe->err;
}

/* Entry i from req r: the checks ferry_submit makes, made once. */
static int prep_entry_init(struct ferry_engine *e, const struct ferry_seg *s,
			   const struct seg_desc *d, struct prep_entry *pe, const struct ferry_req *r)
{
	struct ferry_rq t;
	int rc;

	if ((r->op != FERRY_OP_READ && r->op != FERRY_OP_WRITE) || !r->local || r->len == 0)
		return -EINVAL;
	t.local = (uintptr_t)r->local;
	t.remote = r->remote;
	t.len = r->len;
	t.op = (uint8_t)r->op; /* checked: FERRY_OP_READ or _WRITE */
	t.nparts = 1;
	t.nslices = slice_count(r->len, e->opts.slice_size);
	memcpy(pe->head, &t, RQ_HEAD_SIZE);
	rc = prep_entry_bind(d, pe);
	if (rc)
		return rc;
	pthread_rwlock_rdlock(&e->regions_lock);
	pe->lreg = ferry_region_find(e, t.local, t.len);
	if (pe->lreg && region_refuses(pe->lreg, t.op, s->cpu_copy))
		pe->lreg = NULL; /* -EFAULT, as ferry_submit refuses it */
	if (pe->lreg)
		fetch_add_relaxed(pe->lreg->refs, 1); /* under the read lock: unregister sees it */
	pthread_rwlock_unlock(&e->regions_lock);
	return pe->lreg ? 0 : -EFAULT;
}

/* Why prep_entry_init refused an entry (its rc), for the log. */
static const char *prep_why(int rc)
{
	switch (rc) {
	case -EFAULT:
		return "a range outside registered memory, a READ into read-only memory, "
		       "or a device's memory over a transport that copies with the CPU";
	case -EACCES: /* prep_entry_bind: the peer's region does not allow the op */
		return "the peer's region does not allow the op (FERRY_ACCESS_REMOTE_*)";
	default:
		return "bad op, address or length";
	}
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
	const struct seg_desc *d;
	struct prep_block *blk;
	struct ferry_prep *pr;
	struct ferry_seg *s;
	uint32_t slot, i;
	int rc = 0;

	if (!p || !reqs || !out || n == 0 || n > (1u << 24))
		return -EINVAL;
	if (engine_forked(p->e))
		return -EOWNERDEAD;
	blk = calloc(1, sizeof(*blk) + (size_t)n * sizeof(blk->entry[0]));
	if (!blk)
		return -ENOMEM;
	pr = &blk->pr;
	pr->view = &blk->view;
	pr->entry = blk->entry;
	s = seg_acquire(p->e, seg, &slot);
	if (!s) {
		free(blk);
		return -EBADF;
	}
	if (READ_ONCE(s->stale)) { /* every submit of the set would end -ESTALE */
		seg_release_ref(s);
		free(blk);
		return -ESTALE;
	}
	/* One descriptor for every entry: the one the view names. */
	d = load_acquire(s->desc); /* pairs with: store_release in refresh_install */
	pr->view->desc = d;
	for (i = 0; i < n && rc == 0; i++) {
		rc = prep_entry_init(p->e, s, d, &pr->entry[i], &reqs[i]);
		if (rc)
			log_err("ferry_prep_create: request %u: %s", i, prep_why(rc));
	}
	seg_release_ref(s);
	if (rc) {
		prep_unref(pr, i - 1);
		free(blk);
		return rc;
	}
	pr->port = p;
	pr->seg = seg;
	pr->n = n;
	pr->lreg = prep_one_lreg(pr);
	p->preps++; /* the port's thread: ferry_port_destroy waits for none */
	*out = pr;
	return 0;
}

int ferry_prep_destroy(struct ferry_prep *pr)
{
	if (!pr)
		return -EINVAL;
	if (engine_forked(pr->port->e))
		return -EOWNERDEAD;
	prep_unref(pr, pr->n);
	pr->port->preps--;
	free(pr); /* its block's first member */
	return 0;
}

/*
 * One reference on the segment per request, taken at once: the same Dekker
 * pair with the closer as seg_acquire (add, then look at the state).  NULL
 * when the handle is closed or unknown (*err -EBADF) or stale (-ESTALE).
 */
static struct ferry_seg *prep_seg_refs(struct ferry_engine *e, ferry_seg_t h, uint32_t n,
				       uint32_t *slot, int *err)
{
	struct ferry_seg *s = seg_lookup(e, h, slot);

	*err = -EBADF;
	if (!s)
		return NULL;
	if (!seg_refs_take(s, h, n))
		return NULL;
	if (READ_ONCE(s->stale)) {
		seg_release_refs(s, n);
		*err = -ESTALE; /* the peer restarted: as ferry_submit says */
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

/* Every slot of the call FAILED err: -EBADF (the segment is closed), -ESTALE
 * (stale: the peer restarted), as ferry_submit refuses them. */
static void prep_refuse(struct ferry_batch *b, uint32_t n, int err)
{
	for (uint32_t i = 0; i < n; i++) {
		struct ferry_rq *rq = &b->rqs[b->n + i];

		rq_clear(rq, &b->acct);
		rq_refuse(rq, err);
	}
	store_release(b->n, b->n + n); /* pairs with: load_acquire in ferry_req_status */
}

/*
 * The peer's regions changed since the set was checked (a refresh put d in
 * the segment): every entry is checked against d as ferry_submit would
 * check it, and takes d's region (its keys) or, when d has none for it,
 * is refused from now on (prep_submit_some).  Once per change, not per
 * request; the port's thread, the set's only user.
 */
static void prep_rebind(const struct ferry_prep *pr, const struct seg_desc *d)
{
	uint32_t bad = 0;

	for (uint32_t i = 0; i < pr->n; i++)
		bad += prep_entry_bind(d, &pr->entry[i]) != 0;
	if (bad > pr->view->n_bad)
		log_warn("ferry_prep_submit: the peer's regions changed: %u of %u prepared "
			 "requests have no region there now (they end FAILED -EFAULT or -EACCES)",
			 bad, pr->n);
	pr->view->desc = d;
	pr->view->n_bad = bad;
}

/*
 * Entries idx[0..n) into slots first.. of b, in runs like ferry_submit's
 * (dispatch_run): a run's first is filled and its rails picked, the rest
 * of the run copies those and its entry's image, with nothing to check --
 * the set was validated once and the segment is looked at once per call
 * (prep_seg_refs: s, slot, n references of the caller's).
 */
static void prep_dispatch(struct ferry_batch *b, const struct ferry_prep *pr, const uint32_t *idx,
			  uint32_t n, uint32_t first, struct ferry_seg *s, uint32_t slot)
{
	struct rails_snap rails = { .left = 0 };
	struct ferry_engine *e = b->port->e;
	struct ferry_rq *rqs = &b->rqs[first];
	struct prep_run c;
	struct dispatch d;

	fetch_add_relaxed(b->acct.pending, n); /* published by the ring's release */
	if (pr->lreg) /* the one region of every entry: the call's references at once */
		fetch_add_relaxed(pr->lreg->refs, n); /* the set holds one too: unregister is -EBUSY */
	c.entry = pr->entry;
	c.idx = idx;
	c.lreg_each = !pr->lreg;
	dispatch_begin(&d, b->port);
	for (uint32_t i = 0; i < n;) {
		struct ferry_rq *rq = &rqs[i];
		bool waited = false;
		uint32_t end;

		prep_fill(rq, &c.entry[idx[i]], s, slot, pr->seg, &b->acct);
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
	dispatch_end(&d);
}

/* Slot rq for entry pe, which the peer's regions no longer hold: FAILED
 * with why, nothing posted.  A WRITE to the segment that did not succeed,
 * for a later ferry_notify (job_deps) like ferry_submit's refusals. */
static void prep_refuse_entry(struct ferry_rq *rq, const struct prep_entry *pe,
			      struct rq_batch *b, uint32_t slot, ferry_seg_t h)
{
	memcpy(rq, pe->head, RQ_HEAD_SIZE);
	rq_clear(rq, b);
	rq->seg_slot = slot;
	rq->seg_gen = (uint32_t)(h >> 32);
	rq_refuse(rq, pe->err);
}

/* prep_dispatch for a call when some of the set's entries have no region
 * now: the stretches of the others go as usual, each of those is refused
 * in its slot and gives its segment reference back. */
static void prep_submit_some(struct ferry_batch *b, const struct ferry_prep *pr,
			     const uint32_t *idx, uint32_t n, uint32_t first, struct ferry_seg *s,
			     uint32_t slot)
{
	for (uint32_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && pr->entry[idx[j]].rreg; j++)
			;
		if (j > i) {
			prep_dispatch(b, pr, idx + i, j - i, first + i, s, slot);
			continue;
		}
		prep_refuse_entry(&b->rqs[first + i], &pr->entry[idx[i]], &b->acct, slot, pr->seg);
		seg_release_ref(s);
		j = i + 1;
	}
}

/*
 * The segment is looked at once per call (prep_seg_refs), and its
 * descriptor: the one the set was checked against, unless a refresh
 * replaced it (prep_rebind).
 */
int ferry_prep_submit(struct ferry_batch *b, const struct ferry_prep *pr, const uint32_t *idx,
		      uint32_t n)
{
	const struct seg_desc *d;
	struct ferry_seg *s;
	uint32_t first, slot;
	int err;

	if (!b || !pr || (!idx && n) || pr->port != b->port)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (b->capacity - b->n < n)
		return -ENOSPC;
	for (uint32_t i = 0; i < n; i++)
		if (idx[i] >= pr->n)
			return -EINVAL;
	first = b->n;
	if (!n) /* nothing to take a segment reference for, nor to refuse: the next slot */
		return (int)first;
	s = prep_seg_refs(b->port->e, pr->seg, n, &slot, &err);
	if (!s) {
		prep_refuse(b, n, err);
		return (int)first;
	}
	/* Kept while we hold references: replaced ones stay until the close. */
	d = load_acquire(s->desc); /* pairs with: store_release in refresh_install */
	if (unlikely(d != pr->view->desc))
		prep_rebind(pr, d);
	if (likely(!pr->view->n_bad))
		prep_dispatch(b, pr, idx, n, first, s, slot);
	else
		prep_submit_some(b, pr, idx, n, first, s, slot);
	store_release(b->n, b->n + n); /* pairs with: load_acquire in ferry_req_status */
	port_publish(b->port);
	return (int)first;
}
