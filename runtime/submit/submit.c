/* SPDX-License-Identifier: MIT */
/*
 * Submission.  A request is validated completely before anything is
 * queued, then split into at most one part per core (striped over the
 * rails) and each part's pointer goes to its core's ring.
 */
#include "runtime/submit/submit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/engine.h"
#include "runtime/submit/dispatch.h"


/* ---- submission ---- */

static int rq_check_args(const struct ferry_req *r)
{
	if (r->op != FERRY_OP_READ && r->op != FERRY_OP_WRITE)
		return -EINVAL;
	if (!r->local || r->len == 0)
		return -EINVAL;
	if ((uintptr_t)r->local + r->len < (uintptr_t)r->local || r->remote + r->len < r->remote)
		return -EFAULT;
	return 0;
}

/* rq_check_args inside a run, but the op (run_fill checks it against the
 * peer's region's access in the same compare): a NULL local fails the
 * range check against the run's region, which never starts at 0
 * (ferry_mem_register_access). */
static inline bool run_len_bad(const struct ferry_req *r)
{
	return r->len == 0 || (uintptr_t)r->local + r->len < (uintptr_t)r->local ||
	       r->remote + r->len < r->remote;
}

/*
 * What one submit call holds across its requests: references taken in
 * bulk, one atomic per run of consecutive requests to one segment or one
 * local region instead of one per request (and one per completion on the
 * cores' side stays), handed to the requests as they pass validation and
 * given back at the end for those that did not use them.  A call's first
 * run of each kind is taken for all its requests left, unscanned (a batch
 * mostly goes to one peer from one region; one that does not gives back
 * the rest at its first switch), later runs for the requests in a row
 * counted.  The segment's rails are picked once per RAILS_REUSE requests
 * of a run, and again after a wait for ring room.  The port's thread
 * only, on its stack.
 */
struct submit_hold {
	struct ferry_seg *seg;         /* referenced seg_left times, */
	ferry_seg_t handle;            /* by this handle, */
	uint32_t seg_end;              /* for the requests to it in [.., seg_end) of the call */
	uint32_t slot;
	uint32_t seg_left;
	struct rails_snap rails;       /* seg's */
	const struct seg_desc *desc;   /* seg's, as the last request looked it up */
	struct mem_region *lreg;       /* referenced lreg_left times, */
	uint32_t lreg_end;             /* for the requests it covers in [.., lreg_end) */
	uint32_t lreg_left;
};

/* Give back the references no request used. */
static void hold_drop(struct submit_hold *h)
{
	if (h->seg_left)
		seg_release_refs(h->seg, h->seg_left);
	if (h->lreg_left)
		fetch_sub_release(h->lreg->refs, h->lreg_left); /* pairs with: load_sc in unregister */
	h->seg_left = 0;
	h->lreg_left = 0;
}

/* [addr, addr + len) inside r (read racy: see rq_find_local). */
static bool region_covers(const struct mem_region *r, uint64_t addr, uint64_t len)
{
	uint64_t base = READ_ONCE(r->addr);

	return addr >= base && addr + len <= base + READ_ONCE(r->len);
}

/* The references to r to take at once for reqs[i] (which r covers) and
 * the requests after it: all those left for the call's first run, else
 * those in a row whose local range r covers.  A bad request only
 * miscounts. */
static uint32_t lreg_run(const struct submit_hold *h, const struct mem_region *r,
			 const struct ferry_req *reqs, uint32_t i, uint32_t n)
{
	uint64_t base = READ_ONCE(r->addr), end = base + READ_ONCE(r->len);
	uint32_t k = 1;

	if (!h->lreg)
		return n - i;
	for (; i + k < n; k++) {
		uint64_t addr = (uintptr_t)reqs[i + k].local;

		if (addr < base || addr + reqs[i + k].len > end)
			break;
	}
	return k;
}

/*
 * The port's cached region, with k references, if it still covers the
 * request.  A Dekker pair with ferry_mem_unregister: we take the references,
 * then look at the generation; it bumps the generation, then looks at the
 * references.  Either it sees ours (-EBUSY) or we see its bump (and undo).
 * The struct is type-stable (engine.h), so a stale pointer is safe to
 * touch.
 */
static struct mem_region *lcache_get(struct ferry_engine *e, struct ferry_port *p,
				     const struct submit_hold *h, const struct ferry_rq *rq,
				     const struct ferry_req *reqs, uint32_t i, uint32_t n, uint32_t *k)
{
	struct mem_region *r = p->lcache;

	if (!r || load_acquire(e->regions_gen) != p->lcache_gen || /* pairs with: store_sc in unregister */
	    !region_covers(r, rq->local, rq->len))
		return NULL;
	*k = h->lreg ? lreg_run(h, r, reqs, i, n) : n - i; /* the call's first run: no call */
	fetch_add_sc(r->refs, *k);
	if (load_sc(e->regions_gen) == p->lcache_gen)
		return r;
	fetch_sub_relaxed(r->refs, *k); /* unregistered meanwhile: ours were not seen */
	return NULL;
}

/* The local region of reqs[i] (rq), referenced by the hold: the hold's
 * if reqs[i] is in its run (covered: counted when it was taken), else the
 * port's cache, else a lookup. */
static int rq_find_local(struct ferry_engine *e, struct ferry_port *p, struct submit_hold *h,
			 struct ferry_rq *rq, const struct ferry_req *reqs, uint32_t i, uint32_t n)
{
	struct mem_region *r;
	uint32_t k;

	if (likely(i < h->lreg_end && region_covers(h->lreg, rq->local, rq->len))) {
		rq->lreg = h->lreg;
		return 0;
	}
	if (h->lreg_left) {
		fetch_sub_release(h->lreg->refs, h->lreg_left); /* pairs with: load_sc in unregister */
		h->lreg_left = 0;
	}
	h->lreg_end = 0; /* its run is over, whatever comes next */
	r = lcache_get(e, p, h, rq, reqs, i, n, &k);
	if (!r) {
		pthread_rwlock_rdlock(&e->regions_lock);
		r = ferry_region_find(e, rq->local, rq->len);
		if (r) {
			/* Under the read lock: unregister (write lock) sees them. */
			k = lreg_run(h, r, reqs, i, n);
			fetch_add_relaxed(r->refs, k);
			p->lcache = r;
			p->lcache_gen = READ_ONCE(e->regions_gen); /* stable under the lock */
		}
		pthread_rwlock_unlock(&e->regions_lock);
		if (!r)
			return -EFAULT;
	}
	h->lreg = r;
	h->lreg_end = i + k;
	h->lreg_left = k;
	rq->lreg = r;
	return 0;
}

/* The peer's region holding the request: the port's last one if it still
 * does (same handle, same descriptor), else a binary search.  Descriptors
 * live until their segment is closed, and the caller holds the segment. */
static const struct seg_region *rq_find_remote(struct ferry_port *p, const struct ferry_req *r,
					       const struct seg_desc *d)
{
	const struct seg_region *g = p->rcache;

	if (g && p->rcache_seg == r->seg && p->rcache_desc == d && r->remote >= g->addr &&
	    r->remote + r->len <= g->addr + g->len)
		return g;
	g = seg_desc_find(d, r->remote, r->len);
	if (g) {
		p->rcache = g;
		p->rcache_seg = r->seg;
		p->rcache_desc = d;
	}
	return g;
}

/*
 * The rails (cores) to stripe over, read after the references were taken
 * (an eviction then sees them, or we see the rail gone): those with an
 * endpoint that are neither down nor paused; else every one with an
 * endpoint (their cores fail fast or serve slowly); 0 when none -- or
 * when each of them is down by itself (its device or its path: EP_DOWN,
 * not the peer gone) and some rail has no endpoint (evicted): a reconnect
 * of that one may reach the peer, so it is a miss, not a verdict.  Before,
 * such requests failed -EHOSTDOWN for as long as the down rail stayed
 * down (test_epcache's test_down_rail_beside_evicted).  *miss: the core a
 * miss waits on, one whose rail has no endpoint (the reconnect makes it),
 * from core first on; read in the same look, not again: a reconnect that
 * lands meanwhile must not send the part to a down rail.
 */
/* The first core of mask from first on (cyclically); first when none. */
static unsigned first_of(uint64_t mask, unsigned first, unsigned ncores)
{
	for (unsigned k = 0; k < ncores; k++) {
		unsigned i = (first + k) % ncores;

		if (mask & (1ull << i))
			return i;
	}
	return first;
}

static uint64_t rails_pick(const struct ferry_engine *e, const struct ferry_seg *s,
			   uint32_t slot, uint32_t *count, unsigned *miss)
{
	uint64_t good = 0, live = 0, own_down = 0, gone = 0;
	uint32_t ngood = 0, nlive = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		if (rail_gone(s, i)) {
			gone |= 1ull << i;
			continue;
		}
		live |= 1ull << i;
		nlive++;
		if (!rail_unusable(s, i)) {
			good |= 1ull << i;
			ngood++;
		} else if (READ_ONCE(s->rail_down[i]) == EP_DOWN) {
			own_down |= 1ull << i;
		}
	}
	*count = ngood; /* counted here: popcount is a call on x86-64 v1 */
	if (likely(good))
		return good;
	if (live == own_down && gone)
		live = nlive = 0;
	*miss = first_of(gone, slot % e->ncores, e->ncores); /* this same look's */
	*count = nlive;
	return live;
}

/*
 * Pick rq's rails into snap, for RAILS_REUSE requests.  A cache miss
 * (every endpoint to the segment was evicted) does not block the
 * submitter: the repair thread is asked to reconnect, and the request
 * waits on one core until it has (the next request looks again).
 */
void rq_rails_pick(struct ferry_engine *e, struct ferry_rq *rq, struct rails_snap *snap)
{
	unsigned miss; /* set when no rail is good */

	snap->rails = rails_pick(e, rq->seg, rq->seg_slot, &snap->n, &miss);
	snap->left = RAILS_REUSE - 1;
	rq->rails = snap->rails;
	rq->nparts = snap->n;
	if (rq->rails)
		return;
	store_release(rq->seg->want_eps, 1); /* pairs with: load_acquire in repair_reconnects */
	repair_kick(e);
	rq->rails = 1ull << miss;
	rq->nparts = 1;
}

/*
 * The segment of reqs[i], referenced by the hold: the hold's if reqs[i]
 * is in its run, else references for the requests in a row to this
 * handle, taken at once.  NULL: unknown, closed or closing (*slot set
 * when the handle names a slot).
 */
static struct ferry_seg *hold_seg(struct ferry_engine *e, struct submit_hold *h,
				  const struct ferry_req *reqs, uint32_t i, uint32_t n,
				  uint32_t *slot)
{
	ferry_seg_t handle = reqs[i].seg;
	struct ferry_seg *s;
	uint32_t k = 1;

	if (likely(i < h->seg_end && handle == h->handle)) {
		*slot = h->slot;
		return h->seg;
	}
	if (h->seg_left) {
		seg_release_refs(h->seg, h->seg_left);
		h->seg_left = 0;
	}
	h->seg_end = 0; /* its run is over, whatever comes next */
	s = seg_lookup(e, handle, slot);
	/* Not the Dekker check (seg_refs_take is): a closed segment's
	 * requests are refused without counting the run. */
	if (!s || load_sc(s->state) != SEG_OPEN)
		return NULL;
	if (!h->seg) /* the call's first run: see struct submit_hold */
		k = n - i;
	while (i + k < n && reqs[i + k].seg == handle)
		k++;
	if (!seg_refs_take(s, handle, k))
		return NULL;
	h->seg = s;
	h->handle = handle;
	h->seg_end = i + k;
	h->slot = *slot;
	h->seg_left = k;
	h->rails.left = 0; /* picked after these references */
	return s;
}

/* The peer's region allows what rq does to it (its owner's access rights). */
static int rq_access_ok(const struct ferry_rq *rq)
{
	uint32_t need = rq->op == NIC_OP_READ ? NIC_ACCESS_REMOTE_READ : NIC_ACCESS_REMOTE_WRITE;

	return (rq->rreg->access & need) == need ? 0 : -EACCES;
}

/* Validate reqs[i] (of n) and fill rq with references from the hold; on
 * error rq holds nothing. */
static int rq_prepare(struct ferry_port *p, struct submit_hold *h, struct ferry_rq *rq,
		      const struct ferry_req *reqs, uint32_t i, uint32_t n)
{
	const struct ferry_req *r = &reqs[i];
	struct ferry_engine *e = p->e;
	const struct seg_desc *d;
	struct ferry_seg *s;
	int rc;

	/* What ferry_notify looks at (job_deps), written before any refusal:
	 * a WRITE to its segment refused even for its arguments did not
	 * succeed, so the notification must not go (-EIO). */
	rq->op = (uint8_t)r->op; /* FERRY_OP_READ or _WRITE once checked below */
	rq->seg_slot = (uint32_t)r->seg - 1;
	rq->seg_gen = (uint32_t)(r->seg >> 32);
	rc = rq_check_args(r);
	if (rc) {
		/* an op that is neither (257 would read as a WRITE) refused no WRITE */
		if ((unsigned)r->op > FERRY_OP_WRITE)
			rq->op = RQ_OP_NONE;
		return rc;
	}
	rq->local = (uintptr_t)r->local;
	rq->remote = r->remote;
	rq->len = r->len;
	s = hold_seg(e, h, reqs, i, n, &rq->seg_slot);
	if (!s)
		return -EBADF;
	if (READ_ONCE(s->stale))
		return -ESTALE; /* the peer restarted: open its address again */
	d = load_acquire(s->desc); /* pairs with: store_release in refresh_install */
	h->desc = d;
	rq->rreg = rq_find_remote(p, r, d);
	rc = rq->rreg ? rq_access_ok(rq) : -EFAULT;
	if (rc == 0)
		rc = rq_find_local(e, p, h, rq, reqs, i, n);
	if (rc == 0 && unlikely(region_refuses(rq->lreg, rq->op, s->cpu_copy)))
		rc = -EFAULT;
	if (rc)
		return rc;
	/* Valid: one reference of each kind is the request's now. */
	h->seg_left--;
	h->lreg_left--;
	rq->seg = s;
	rq->seg_refs = &s->inflight;
	rq->lreg_refs = &rq->lreg->refs;
	rq_rails(e, rq, &h->rails);
	rq->nslices = slice_count(r->len, e->opts.slice_size);
	if (rq->nslices < rq->nparts)
		rq->nparts = (uint32_t)rq->nslices;
	return 0;
}

/* What every slot of ferry_submit needs before validation; the rest
 * rq_prepare writes once when the request is valid, rq_refuse_clear when
 * it is not. */
static inline void rq_begin(struct ferry_rq *rq, struct rq_batch *b)
{
	rq->batch = b;
	rq->seg_slot = UINT32_MAX; /* no segment until rq_prepare names one (ferry_notify looks) */
	rq_outcome_clear(rq);
}

/* Request r, valid and like t (same batch, segment, regions and rails),
 * in slot q: rq_begin's fields and rq_prepare's. */
static inline void rq_fill(struct ferry_rq *q, const struct ferry_req *r, const struct ferry_rq *t,
			   uint32_t slice_size, uint32_t nrails)
{
	/* batch, segment, regions, their references and the rails */
	memcpy(&q->RQ_SHARED_FIRST, &t->RQ_SHARED_FIRST, RQ_SHARED_SIZE);
	rq_outcome_clear(q);
	q->local = (uintptr_t)r->local;
	q->remote = r->remote;
	q->len = r->len;
	q->op = (uint8_t)r->op; /* an enum nic_op of the same value */
	q->nslices = slice_count(r->len, slice_size);
	q->nparts = q->nslices < nrails ? (uint32_t)q->nslices : nrails;
	q->remaining = r->len;
}

/* The references and parts a valid request would hold: none. */
static inline void rq_clear_refs(struct ferry_rq *rq)
{
	rq->seg = NULL;
	rq->lreg = NULL;
	rq->rreg = NULL;
	rq->lreg_refs = NULL;
	rq->seg_refs = NULL;
	rq->nparts = 0;
}

/* A slot's fields before validation fills them. */
void rq_clear(struct ferry_rq *rq, struct rq_batch *b)
{
	rq_begin(rq, b);
	rq_clear_refs(rq);
}

/* A refused slot: rq_clear's fields, then FAILED with err. */
static void rq_refuse_clear(struct ferry_rq *rq, int err)
{
	rq_clear_refs(rq);
	rq_refuse(rq, err);
}

/* A validated request that will not be dispatched: its references go
 * back to the hold (they came from it). */
static void rq_unprepare(struct ferry_rq *rq, struct submit_hold *h)
{
	h->seg_left++;
	h->lreg_left++;
	rq->seg = NULL;
	rq->lreg_refs = NULL;
	rq->seg_refs = NULL;
}

/* What run_fill compares a run's requests with: its first's handle,
 * regions and access, and where they go. */
struct run_ctx {
	const struct ferry_req *reqs;
	ferry_seg_t handle;
	uint64_t gbase, gend, lbase, lend;
	uint32_t op_lo, op_span;       /* the ops the peer's region allows: op - op_lo <= op_span */
	uint32_t slice_size;
};

/* The ops a region's access allows as one range for run_fill's single
 * compare (an op out of range or not allowed fails it alike); false
 * when it allows none (then no run: each request is validated alone). */
static inline bool run_ops(struct run_ctx *c, uint32_t access)
{
	/* NIC_ACCESS_REMOTE_READ is bit FERRY_OP_READ, _WRITE bit FERRY_OP_WRITE */
	_Static_assert(NIC_ACCESS_REMOTE_READ == 1u << FERRY_OP_READ &&
		       NIC_ACCESS_REMOTE_WRITE == 1u << FERRY_OP_WRITE, "an op's access bit");
	switch (access & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE)) {
	case NIC_ACCESS_REMOTE_READ:
		c->op_lo = FERRY_OP_READ, c->op_span = 0;
		return true;
	case NIC_ACCESS_REMOTE_WRITE:
		c->op_lo = FERRY_OP_WRITE, c->op_span = 0;
		return true;
	case NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE:
		c->op_lo = FERRY_OP_READ, c->op_span = 1;
		return true;
	default:
		return false;
	}
}

/* dispatch_run's fill for ferry_submit: reqs[i] checked for what can
 * differ from the run's first (its arguments, handle and ranges), then
 * filled from it. */
static inline bool run_fill(const void *ctx, struct ferry_rq *q, const struct ferry_rq *t,
			    uint32_t i, uint32_t nrails)
{
	const struct run_ctx *c = ctx;
	const struct ferry_req *r = &c->reqs[i];

	_Static_assert(FERRY_OP_READ == 0 && FERRY_OP_WRITE == 1, "the ops are 0 and 1");
	_Static_assert((int)NIC_OP_READ == FERRY_OP_READ && (int)NIC_OP_WRITE == FERRY_OP_WRITE,
		       "a request's op is its enum nic_op");
	/* the op: valid and allowed by the peer's region in one compare (run_ops) */
	if ((uint32_t)r->op - c->op_lo > c->op_span || run_len_bad(r) || r->seg != c->handle ||
	    (uintptr_t)r->local < c->lbase || (uintptr_t)r->local + r->len > c->lend ||
	    r->remote < c->gbase || r->remote + r->len > c->gend)
		return false;
	rq_fill(q, r, t, c->slice_size, nrails);
	return true;
}

/*
 * The requests after rq -- valid, queued, its run's first -- that share
 * everything rq_prepare looked up for it: the segment and local region
 * references the hold took for them (i < seg_end, lreg_end: same handle,
 * range in the region), the rails picked (rails.left), and the peer's
 * region (same descriptor, covers them, allows their op).  Each is checked
 * for what can differ (its arguments, handle and ranges) and filled from
 * rq; the first that differs is left to rq_prepare.  The segment going
 * stale is looked at once, at the start: a run never waits (a wait for
 * ring room ends it), so that look is as fresh for its requests as a lone
 * request's validation is by the time a core takes it.  Returns how many,
 * from reqs[i] on, it queued; slots from rqs[i] on.
 */
/* noinline: its loop gets registers of its own (2 instructions fewer per
 * request than inside submit_some, make callgrind) */
static __attribute__((noinline)) uint32_t
submit_run(struct dispatch *d, struct submit_hold *h, const struct ferry_rq *rq,
	   struct ferry_rq *rqs, const struct ferry_req *reqs, uint32_t i, uint32_t n, bool wait)
{
	uint32_t end = h->seg_end < h->lreg_end ? h->seg_end : h->lreg_end, first = i;
	struct ferry_seg *s = rq->seg;
	bool waited = false, one = h->rails.n == 1;
	const struct seg_region *g = rq->rreg;
	uint64_t lbase = READ_ONCE(h->lreg->addr);
	struct run_ctx c = {
		.reqs = reqs,
		.handle = h->handle,
		.gbase = g->addr,
		.gend = g->addr + g->len,
		.lbase = lbase,
		.lend = lbase + READ_ONCE(h->lreg->len),
		.slice_size = d->p->e->opts.slice_size,
	};

	/* a READ into a read-only local region is rq_prepare's to refuse */
	if (!h->rails.rails ||
	    !run_ops(&c, h->lreg->local_ro ? g->access & NIC_ACCESS_REMOTE_WRITE : g->access))
		return 0;
	/* pairs with: store_release in refresh_install */
	if (READ_ONCE(s->stale) || load_acquire(s->desc) != h->desc)
		return 0;
	if (end > i + h->rails.left)
		end = i + h->rails.left;
	if (end > n)
		end = n;
	/* ferry_submit to one rail, the common case, has wait and one constant */
	if (wait && one)
		i = dispatch_run(d, h->rails.rails, 1, true, true, rq, rqs, i, end, run_fill, &c,
				 &waited);
	else
		i = dispatch_run(d, h->rails.rails, h->rails.n, one, wait, rq, rqs, i, end,
				 run_fill, &c, &waited);
	if (one)
		dispatch_skip(d, i - first);
	h->seg_left -= i - first;
	h->lreg_left -= i - first;
	h->rails.left = waited ? 0 : h->rails.left - (i - first); /* pick again after a wait */
	return i - first;
}

/*
 * Validate and queue the requests of reqs (at most n) into b's next slots.
 * wait: ferry_submit, which waits on a full ring; else stop before the
 * first request whose rings have no room.  Returns how many took a slot.
 * The batch counts all n pending at once (its owner, this thread, is the
 * only one that looks for 0 before the cores have ended them) and the
 * refused and untaken ones come off at the end.
 */
static uint32_t submit_some(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n,
			    bool wait)
{
	struct submit_hold h = { .seg = NULL };
	struct ferry_port *p = b->port;
	uint32_t i, k, queued = 0, first = b->n; /* only this thread writes n */
	struct ferry_rq *rq = &b->rqs[first];
	struct dispatch d;

	if (n == 0)
		return 0;
	dispatch_begin(&d, p);
	fetch_add_relaxed(b->acct.pending, n); /* published by the ring's release */
	/* b->n is stored once at the end: it publishes the slots. */
	for (i = 0; i < n; i++, rq++) {
		int rc;

		rq_begin(rq, &b->acct);
		rc = rq_prepare(p, &h, rq, reqs, i, n);
		if (rc == 0 && !wait && !rq_fits(&d, rq)) {
			rq_unprepare(rq, &h);
			break;
		}
		if (rc) {
			rq_refuse_clear(rq, rc);
			continue;
		}
		rq->remaining = rq->len;
		queued++;
		/* The ring's release publishes rq's fields to the cores. */
		if (rq_dispatch(&d, rq)) {
			h.rails.left = 0;
			continue;
		}
		if (i + 1 == n) /* the call's last: no run follows (a lone request saves ~90) */
			continue;
		k = submit_run(&d, &h, rq, &b->rqs[first], reqs, i + 1, n, wait);
		i += k;
		rq += k;
		queued += k;
	}
	/* the slots' states: ferry_req_status (any thread) reads them from here on */
	store_release(b->n, first + i); /* pairs with: load_acquire in ferry_req_status */
	dispatch_end(&d);
	port_publish(p);
	hold_drop(&h);
	if (queued < n)
		fetch_sub_relaxed(b->acct.pending, n - queued); /* none of these reach a core */
	return i;
}

int ferry_submit(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n)
{
	uint32_t first;

	if (!b || (!reqs && n))
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (b->capacity - b->n < n)
		return -ENOSPC;
	first = b->n;
	submit_some(b, reqs, n, true);
	return (int)first;
}

int ferry_try_submit(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n)
{
	if (!b || (!reqs && n))
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (n > b->capacity - b->n)
		n = b->capacity - b->n;
	return (int)submit_some(b, reqs, n, false);
}

/*
 * Mark every request of b that has not ended: the cores cut and post no
 * more of it (a part not yet cut fails, a slice not yet posted is dropped)
 * and it ends FAILED -ECANCELED once its posted slices are back.  A
 * request that already failed keeps its own error.
 */
int ferry_batch_cancel(struct ferry_batch *b)
{
	if (!b)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	for (uint32_t i = 0; i < b->n; i++) {
		struct ferry_rq *rq = &b->rqs[i];
		int32_t none = 0;

		if (load_acquire(rq->state) == RQ_PENDING) /* pairs with: rq_finish */
			cas_release(rq->error, &none, -ECANCELED); /* pairs with: rq_finish's acquire */
	}
	/* The cores look at the epoch once a pass and then drop the slices of
	 * failed requests that wait for room (their first look after this):
	 * released after the errors, so a core that sees the new epoch sees
	 * them too and posts none of those slices. */
	fetch_add_release(b->port->e->cancel_epoch, 1); /* pairs with: load_acquire in core_pass */
	for (unsigned i = 0; i < b->port->e->ncores; i++)
		core_kick(b->port->e->cores[i]);
	return 0;
}
