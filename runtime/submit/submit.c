/* SPDX-License-Identifier: MIT */
/*
 * Ports, batches and submission: the application side of the data plane.
 * A port belongs to one application thread; it produces into one SPSC ring
 * per core.  A request is validated completely before anything is queued,
 * then split into at most one part per core (striped over the rails) and
 * each part's pointer goes to its core's ring.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <urcu/urcu-qsbr.h>

#include "runtime/internal.h"
#include "ring/base/counters.h"

#define MAX_BATCH (1u << 24)
#define WAIT_SPINS 4096
#define WAIT_SLICE_NS (100ll * 1000 * 1000)

/* ---- ports ---- */

static struct ferry_port *port_alloc(struct ferry_engine *e)
{
	struct ferry_port *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->e = e;
	p->rings = ferry_zalloc_lines(e->ncores * sizeof(*p->rings));
	if (!p->rings) {
		free(p);
		return NULL;
	}
	for (unsigned i = 0; i < e->ncores; i++) {
		if (ferry_ring_init(&p->rings[i], e->opts.ring_size)) {
			while (i--)
				ferry_ring_fini(&p->rings[i]);
			free(p->rings);
			free(p);
			return NULL;
		}
	}
	return p;
}

static void port_free(struct ferry_port *p)
{
	for (unsigned i = 0; i < p->e->ncores; i++)
		ferry_ring_fini(&p->rings[i]);
	free(p->rings);
	free(p);
}

int ferry_port_create(struct ferry_engine *e, struct ferry_port **out)
{
	struct ferry_port *p;
	unsigned slot;
	int rc = -ENOSPC;

	if (!e || !out)
		return -EINVAL;
	p = port_alloc(e);
	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&e->ctl_lock);
	for (slot = 0; slot < FERRY_MAX_PORTS; slot++) {
		if (!e->ports[slot]) {
			p->slot = slot;
			p->rr = slot; /* spread single-part requests of different ports */
			__atomic_store_n(&e->ports[slot], p, __ATOMIC_RELEASE); /* rcu_assign_pointer */
			if (slot >= e->n_ports_hw)
				__atomic_store_n(&e->n_ports_hw, slot + 1, __ATOMIC_RELEASE);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc) {
		port_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int ferry_port_destroy(struct ferry_port *p)
{
	struct ferry_engine *e;

	if (!p)
		return -EINVAL;
	if (p->batches)
		return -EBUSY;
	e = p->e;
	pthread_mutex_lock(&e->ctl_lock);
	__atomic_store_n(&e->ports[p->slot], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&e->ctl_lock);
	/* Every core passes a quiescent state: none still reads p's rings. */
	urcu_qsbr_synchronize_rcu();
	ferry_tsan_acquire(&e->tsan_gp);
	port_free(p);
	return 0;
}

/* ---- batches ---- */

int ferry_batch_create(struct ferry_port *p, uint32_t capacity, struct ferry_batch **out)
{
	struct ferry_batch *b;

	if (!p || !out || capacity == 0 || capacity > MAX_BATCH)
		return -EINVAL;
	b = ferry_zalloc_lines(sizeof(*b));
	if (!b)
		return -ENOMEM;
	memset(b, 0, sizeof(*b));
	b->rqs = ferry_zalloc_lines((size_t)capacity * sizeof(*b->rqs));
	if (!b->rqs) {
		free(b);
		return -ENOMEM;
	}
	memset(b->rqs, 0, (size_t)capacity * sizeof(*b->rqs));
	b->port = p;
	b->capacity = capacity;
	p->batches++;
	*out = b;
	return 0;
}

int ferry_batch_destroy(struct ferry_batch *b)
{
	if (!b)
		return -EINVAL;
	if (BATCH_COUNT(__atomic_load_n(&b->pending, __ATOMIC_ACQUIRE)))
		return -EBUSY;
	b->port->batches--;
	free(b->rqs);
	free(b);
	return 0;
}

int ferry_batch_reset(struct ferry_batch *b)
{
	if (!b)
		return -EINVAL;
	if (BATCH_COUNT(__atomic_load_n(&b->pending, __ATOMIC_ACQUIRE)))
		return -EBUSY;
	b->n = 0;
	__atomic_store_n(&b->failed, 0, __ATOMIC_RELAXED);
	return 0;
}

uint32_t ferry_batch_size(const struct ferry_batch *b)
{
	return b ? b->n : 0;
}

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

static int rq_find_local(struct ferry_engine *e, struct ferry_rq *rq)
{
	pthread_rwlock_rdlock(&e->regions_lock);
	rq->lreg = ferry_region_find(e, (uintptr_t)rq->req.local, rq->req.len);
	if (rq->lreg)
		__atomic_fetch_add(&rq->lreg->refs, 1, __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&e->regions_lock);
	return rq->lreg ? 0 : -EFAULT;
}

static uint64_t rails_pick(const struct ferry_engine *e, const struct ferry_seg *s);

/*
 * The rails to stripe rq over.  A cache miss (every endpoint to the
 * segment was evicted) does not block the submitter: the repair thread is
 * asked to reconnect, and the request waits on one core until it has.
 */
static void rq_rails(struct ferry_engine *e, struct ferry_rq *rq)
{
	rq->rails = rails_pick(e, rq->seg);
	if (rq->rails)
		return;
	__atomic_store_n(&rq->seg->want_eps, 1, __ATOMIC_RELEASE);
	rq->rails = 1ull << (rq->seg_slot % e->ncores);
}

/* Validate r and fill rq; on error nothing is held. */
static int rq_prepare(struct ferry_engine *e, struct ferry_rq *rq, const struct ferry_req *r)
{
	const struct seg_desc *d;
	int rc = rq_check_args(r);

	if (rc)
		return rc;
	rq->seg = seg_acquire(e, r->seg, &rq->seg_slot);
	if (!rq->seg)
		return -EBADF;
	rq->seg_gen = (uint32_t)(r->seg >> 32);
	if (__atomic_load_n(&rq->seg->stale, __ATOMIC_RELAXED)) {
		seg_release_ref(rq->seg);
		rq->seg = NULL;
		return -ESTALE; /* the peer restarted: open its address again */
	}
	d = __atomic_load_n(&rq->seg->desc, __ATOMIC_ACQUIRE);
	rq->rreg = seg_desc_find(d, r->remote, r->len);
	rc = rq->rreg ? rq_find_local(e, rq) : -EFAULT;
	if (rc == 0)
		rq_rails(e, rq);
	if (rc) {
		seg_release_ref(rq->seg);
		rq->seg = NULL;
		return rc;
	}
	rq->nslices = slice_count(r->len, e->opts.slice_size);
	rq->nparts = (uint32_t)__builtin_popcountll(rq->rails);
	if (rq->nslices < rq->nparts)
		rq->nparts = (uint32_t)rq->nslices;
	return 0;
}

static void rq_refuse(struct ferry_batch *b, struct ferry_rq *rq, int err)
{
	rq->error = err;
	__atomic_store_n(&rq->state, FERRY_FAILED, __ATOMIC_RELEASE);
	__atomic_fetch_add(&b->failed, 1, __ATOMIC_RELAXED);
}

/* Queue part p of rq on core c; a full ring is back-pressure: wait for room. */
static void part_enqueue(struct ferry_port *p, struct ferry_core *c, struct ferry_rq *rq, unsigned part)
{
	void *tagged = (void *)((uintptr_t)rq | part);
	unsigned spins = 0;

	while (!ferry_ring_put(&p->rings[c->index], tagged)) {
		core_kick(c);
		if (++spins < 64)
			ferry_cpu_relax();
		else
			sched_yield();
	}
}

/*
 * The rails (cores) to stripe over, read once after seg_acquire took the
 * reference (an eviction then sees the reference, or we see the rail gone):
 * those with an endpoint that are neither down nor paused; else every one
 * with an endpoint (their cores fail fast or serve slowly); 0 when none.
 */
static uint64_t rails_pick(const struct ferry_engine *e, const struct ferry_seg *s)
{
	uint64_t good = 0, live = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		if (rail_gone(s, i))
			continue;
		live |= 1ull << i;
		if (!rail_unusable(s, i))
			good |= 1ull << i;
	}
	return good ? good : live;
}

static void rq_dispatch(struct ferry_port *p, struct ferry_rq *rq)
{
	struct ferry_engine *e = p->e;
	unsigned first = p->rr++ % e->ncores;
	unsigned k = 0;

	for (unsigned i = 0; k < rq->nparts && i < e->ncores; i++) {
		unsigned core = (first + i) % e->ncores;
		struct ferry_core *c = e->cores[core];

		if (!(rq->rails & (1ull << core)))
			continue;
		part_enqueue(p, c, rq, k++);
		core_kick(c);
	}
}

int ferry_submit(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n)
{
	struct ferry_engine *e;
	uint32_t first;

	if (!b || (!reqs && n))
		return -EINVAL;
	if (b->capacity - b->n < n)
		return -ENOSPC;
	e = b->port->e;
	first = b->n;
	for (uint32_t i = 0; i < n; i++) {
		struct ferry_rq *rq = &b->rqs[b->n++];
		int rc;

		memset(rq, 0, sizeof(*rq));
		rq->req = reqs[i];
		rq->batch = b;
		rc = rq_prepare(e, rq, &reqs[i]);
		if (rc) {
			rq_refuse(b, rq, rc);
			continue;
		}
		rq->remaining = rq->req.len;
		__atomic_fetch_add(&b->pending, 1, __ATOMIC_RELAXED);
		/* The ring's release publishes rq's fields to the cores. */
		rq_dispatch(b->port, rq);
	}
	return (int)first;
}

static int batch_result(const struct ferry_batch *b)
{
	return __atomic_load_n(&b->failed, __ATOMIC_ACQUIRE) ? -EIO : 0;
}

/* Sleep on the batch's pending word until it changes or timeout_ns passes. */
static void batch_sleep(struct ferry_batch *b, int64_t timeout_ns)
{
	uint32_t v = __atomic_load_n(&b->pending, __ATOMIC_ACQUIRE);

	if (BATCH_COUNT(v) == 0)
		return;
	if (!(v & BATCH_WAITER)) {
		if (!__atomic_compare_exchange_n(&b->pending, &v, v | BATCH_WAITER, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return; /* it changed: look again */
		v |= BATCH_WAITER;
	}
	/* Returns at once if a core decremented after our read. */
	ferry_futex_wait(&b->pending, v, timeout_ns);
}

int ferry_batch_wait(struct ferry_batch *b, int64_t timeout_ms)
{
	uint64_t deadline = 0;
	unsigned spins = 0;
	int rc;

	if (!b)
		return -EINVAL;
	if (timeout_ms > 0)
		deadline = ferry_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		int64_t left = WAIT_SLICE_NS;

		if (BATCH_COUNT(__atomic_load_n(&b->pending, __ATOMIC_ACQUIRE)) == 0) {
			rc = batch_result(b);
			break;
		}
		if (timeout_ms == 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (++spins < WAIT_SPINS) {
			ferry_cpu_relax();
			continue;
		}
		if (deadline) {
			uint64_t now = ferry_now_ns();

			if (now >= deadline) {
				rc = -ETIMEDOUT;
				break;
			}
			if ((int64_t)(deadline - now) < left)
				left = (int64_t)(deadline - now);
		}
		batch_sleep(b, left);
	}
	/* Cores stop calling futex_wake once nobody sleeps. */
	__atomic_fetch_and(&b->pending, ~BATCH_WAITER, __ATOMIC_RELAXED);
	return rc;
}

int ferry_req_status(const struct ferry_batch *b, uint32_t i, struct ferry_req_status *st)
{
	const struct ferry_rq *rq;

	if (!b || !st)
		return -EINVAL;
	if (i >= b->n)
		return -ERANGE;
	rq = &b->rqs[i];
	st->state = __atomic_load_n(&rq->state, __ATOMIC_ACQUIRE);
	st->error = __atomic_load_n(&rq->error, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&rq->ok_bytes, __ATOMIC_RELAXED);
	if (st->state == FERRY_PENDING)
		st->error = 0; /* an error is final only once the request is */
	return 0;
}

/* ---- stats ---- */

_Static_assert(FERRY_LAT_BUCKETS == FERRY_HISTO_BUCKETS, "one histogram layout");

#define HW_REFRESH_NS (100ull * 1000 * 1000)

/* A read() of a running worker's counter interrupts its CPU (~20 us in a
 * VM): refresh at most every 100 ms per core, serve the cache between. */
static void hw_counters(struct ferry_core *c, struct ferry_core_stats *out)
{
	uint64_t now = ferry_now_ns(), v[PERF_CTR_N];
	uint8_t ok[PERF_CTR_N];

	if (now - __atomic_load_n(&c->hw_cache_ns, __ATOMIC_ACQUIRE) > HW_REFRESH_NS) {
		perf_read(&c->perf, v, ok);
		for (int i = 0; i < PERF_CTR_N; i++)
			__atomic_store_n(&c->hw_cache[i], ok[i] ? v[i] : UINT64_MAX,
					 __ATOMIC_RELAXED);
		__atomic_store_n(&c->hw_cache_ns, now, __ATOMIC_RELEASE);
	}
	out->cycles = __atomic_load_n(&c->hw_cache[PERF_CTR_CYCLES], __ATOMIC_RELAXED);
	out->instructions = __atomic_load_n(&c->hw_cache[PERF_CTR_INSTRUCTIONS], __ATOMIC_RELAXED);
	out->cache_misses = __atomic_load_n(&c->hw_cache[PERF_CTR_CACHE_MISSES], __ATOMIC_RELAXED);
	out->ctx_switches = __atomic_load_n(&c->hw_cache[PERF_CTR_CTX_SWITCHES], __ATOMIC_RELAXED);
}

int ferry_core_counters_note(const struct ferry_engine *e, unsigned core, char *buf, size_t len)
{
	if (!e || !buf || !len)
		return -EINVAL;
	if (core >= e->ncores)
		return -ERANGE;
	perf_note(&e->cores[core]->perf, buf, len);
	return 0;
}

int ferry_core_stats(const struct ferry_engine *e, unsigned core, struct ferry_core_stats *out)
{
	const struct ferry_core_stats *s;

	if (!e || !out)
		return -EINVAL;
	if (core >= e->ncores)
		return -ERANGE;
	s = &e->cores[core]->stats;
	out->cpu = s->cpu;
	out->numa_node = s->numa_node;
#define COPY(f) out->f = stat_read(s, f)
	COPY(wrs_posted); COPY(completions); COPY(cqes); COPY(bytes); COPY(doorbells);
	COPY(polls); COPY(empty_polls); COPY(qp_full); COPY(cq_full); COPY(pool_empty);
	COPY(slices_in_flight); COPY(wr_errors); COPY(retries); COPY(qp_resets); COPY(handovers); COPY(rail_pauses); COPY(reqs_done); COPY(provider_errors);
	COPY(sleeps); COPY(wakeups); COPY(loops);
#undef COPY
	/* The core counts time in TSC ticks; convert on the reader's side. */
	out->busy_ns = ferry_tsc_to_ns(stat_read(s, busy_ns));
	out->idle_ns = ferry_tsc_to_ns(stat_read(s, idle_ns));
	out->ep_evictions = __atomic_load_n(&e->cores[core]->ep_evictions, __ATOMIC_RELAXED);
	histo_snapshot(&e->cores[core]->lat, out->lat);
	out->lat_hz = ferry_tsc_hz();
	hw_counters(e->cores[core], out);
	return 0;
}
