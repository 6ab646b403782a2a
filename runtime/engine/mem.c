/* SPDX-License-Identifier: MIT */
/*
 * Registered memory: a sorted array of regions, one MR per core's NIC
 * context each.  Submitters look regions up under the read lock and hold a
 * reference (refs) while their request is in flight; unregister takes the
 * write lock and refuses a region with references.  The control thread
 * describes the regions (and the NICs) to peers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

/* Region r's MR on core i's context t begins to go (dereg_mr_begin) or
 * goes (dereg_mr); false when it is gone already (zeroed). */
static bool mr_begin_dereg(struct ferry_engine *e, struct mem_region *r, unsigned i,
			   unsigned t, uint64_t *until)
{
	struct qctx *q = &e->cores[i]->tx[t];
	struct nic_mr *mr = &r->mr[i][t];
	uint64_t u = 0;

	if (!mr->priv && !mr->lkey)
		return false;
	if (q->prov->dereg_mr_begin && q->prov->dereg_mr_begin(q->nic, mr, &u) == 0) {
		*until = u > *until ? u : *until;
		return true;
	}
	if (!q->prov->dereg_mr_begin)
		q->prov->dereg_mr(q->nic, mr);
	*mr = (struct nic_mr){ 0 };
	return false;
}

/*
 * The NICs forget the n regions rs; their memory stays mem_regions (see
 * engine.h).  Every MR begins to go first, then one wait covers them all
 * (cma: a peer may use a key it cached for 10 ms), then they end: one
 * wait per region and context made an unregister cost cores x 10 ms and
 * an engine destroy regions x cores x 10 ms.
 */
static void regions_dereg(struct ferry_engine *e, struct mem_region **rs, unsigned n)
{
	uint64_t until = 0, now;

	for (unsigned k = 0; k < n; k++)
		for (unsigned i = 0; i < e->ncores; i++)
			for (unsigned t = 0; t < e->cores[i]->ntx; t++)
				(void)mr_begin_dereg(e, rs[k], i, t, &until);
	now = ferry_now_ns();
	if (until > now) {
		ferry_sleep_us((long)((until - now + 999) / 1000));
		WRITE_ONCE(e->mem_dereg_waits, e->mem_dereg_waits + 1); /* tests read it */
	}
	for (unsigned k = 0; k < n; k++)
		for (unsigned i = 0; i < e->ncores; i++)
			for (unsigned t = 0; t < e->cores[i]->ntx; t++) {
				struct qctx *q = &e->cores[i]->tx[t];
				struct nic_mr *mr = &rs[k]->mr[i][t];

				if (mr->priv || mr->lkey)
					q->prov->dereg_mr_end(q->nic, mr);
				*mr = (struct nic_mr){ 0 };
			}
}

/* A region struct for a registration: from the pool, or new.  Its refs is
 * left alone: a stale cache may be between its increment and its undo. */
static struct mem_region *region_alloc(struct ferry_engine *e)
{
	struct mem_region *r = e->region_pool;

	if (!r)
		return calloc(1, sizeof(*r));
	e->region_pool = r->next_free;
	r->next_free = NULL;
	return r;
}

/* Back to the pool (ctl_lock held). */
static void region_retire(struct ferry_engine *e, struct mem_region *r)
{
	regions_dereg(e, &r, 1);
	r->next_free = e->region_pool;
	e->region_pool = r;
}

void mem_release_all(struct ferry_engine *e)
{
	regions_dereg(e, e->regions, e->n_regions);
	for (unsigned i = 0; i < e->n_regions; i++)
		free(e->regions[i]);
	free(e->regions);
	e->regions = NULL;
	e->n_regions = 0;
	while (e->region_pool) {
		struct mem_region *r = e->region_pool;

		e->region_pool = r->next_free;
		free(r);
	}
}

/* Index of the first region whose end is above addr. */
static unsigned region_lower_bound(const struct ferry_engine *e, uint64_t addr)
{
	unsigned lo = 0, hi = e->n_regions;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		const struct mem_region *r = e->regions[mid];

		if (r->addr + r->len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct mem_region *ferry_region_find(struct ferry_engine *e, uint64_t addr, uint64_t len)
{
	unsigned i = region_lower_bound(e, addr);
	struct mem_region *r;

	if (i == e->n_regions || len == 0 || addr + len < addr)
		return NULL;
	r = e->regions[i];
	if (addr < r->addr || addr + len > r->addr + r->len)
		return NULL;
	return r;
}

/* Whether [addr, addr+len) may become a region: -EEXIST when it overlaps
 * one, -ENOSPC when there are as many as a descriptor carries; *at is
 * where it would go.  ctl_lock held (every writer of the array holds it). */
static int region_fits(const struct ferry_engine *e, uint64_t addr, uint64_t len, unsigned *at)
{
	unsigned i = region_lower_bound(e, addr);

	/* regions[i] is the first that ends above addr: the only candidate. */
	if (i < e->n_regions && e->regions[i]->addr < addr + len)
		return -EEXIST;
	if (e->n_regions == WIRE_MAX_REGIONS)
		return -ENOSPC; /* a descriptor could not carry more */
	*at = i;
	return 0;
}

/* r into the array at i, where region_fits placed it: ctl_lock held since
 * (no writer moved the array), regions_lock for writing.  0 or -ENOMEM. */
static int region_insert(struct ferry_engine *e, struct mem_region *r, unsigned i)
{
	if (e->n_regions == e->cap_regions) {
		unsigned cap = e->cap_regions ? 2 * e->cap_regions : 16;
		struct mem_region **n = realloc(e->regions, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		e->regions = n;
		e->cap_regions = cap;
	}
	memmove(&e->regions[i + 1], &e->regions[i], (e->n_regions - i) * sizeof(*e->regions));
	e->regions[i] = r;
	e->n_regions++;
	return 0;
}

/*
 * Register r on every core's every context.  A device's memory (cpu_opaque)
 * is open to peers over verbs only: a copying provider would fault in its
 * copy (a tcp target closed the connection, send: EFAULT, and the peer's
 * READ was retried until -EHOSTUNREACH), so there it gets no remote access
 * and a peer's WR completes with a remote access error.  Verbs is told too
 * (NIC_REG_CPU_OPAQUE): its inline WRITEs are a CPU copy as well.
 */
static int region_register(struct ferry_engine *e, struct mem_region *r, void *addr, size_t len,
			   unsigned access)
{
	for (unsigned i = 0; i < e->ncores; i++) {
		for (unsigned t = 0; t < e->cores[i]->ntx; t++) {
			struct qctx *q = &e->cores[i]->tx[t];
			unsigned acc = access;
			int rc;

			if (r->cpu_opaque) /* out of any CPU copy's reach */
				acc = provider_copies(q->prov->name) ? 0 : access | NIC_REG_CPU_OPAQUE;
			rc = q->prov->reg_mr(q->nic, addr, len, acc, &r->mr[i][t]);
			if (rc) {
				log_err("registering %zu bytes at %p on core %u's %s: %s", len, addr,
					i, q->prov->name, strerror(-rc));
				return rc;
			}
		}
	}
	return 0;
}

/*
 * Whether [addr, end) is mapped readable throughout (and writable, into
 * *writable), from /proc/self/maps.  rdma-core's registration refuses
 * memory that is not there; loop, tcp and cma took any range, and a peer's
 * READ of it crashed a loop target or closed a tcp connection.  Control
 * path: one read of the maps per registration (~25 us for 250 mappings).
 * Without procfs (some sandboxes) the providers decide, as before.
 */
static int range_mapped(uint64_t addr, uint64_t end, bool *writable)
{
	FILE *f = fopen("/proc/self/maps", "re");
	uint64_t lo, hi, at = addr;
	char perms[5];

	*writable = true;
	if (!f)
		return 0;
	while (at < end && fscanf(f, "%" SCNx64 "-%" SCNx64 " %4s%*[^\n]", &lo, &hi, perms) == 3) {
		if (hi <= at)
			continue;
		if (lo > at || perms[0] != 'r')
			break; /* a hole, or memory nobody may read */
		*writable &= perms[1] == 'w';
		at = hi;
	}
	fclose(f);
	return at >= end ? 0 : -EFAULT;
}

/* Every context moves bytes with the CPU (loop, tcp, cma; no verbs): the
 * range check refuses what they could not copy.  With a verbs context the
 * NIC's registration decides: the memory may be a device's (a GPU's, not
 * readable in the maps), and beside verbs a cma or tcp segment fails such
 * requests itself (-EFAULT, or a closed connection) without a crash. */
static bool engine_cpu_only(const struct ferry_engine *e)
{
	for (unsigned t = 0; t < e->ntx; t++) /* every core has the same transports */
		if (e->cores[0]->tx[t].prov == &nic_verbs_provider)
			return false;
	return true;
}

/* The range can be registered with access: mapped, writable if peers
 * write; *writable false when this process may not write it either (a
 * READ into it is refused: it would fault in a copy, and Soft-RoCE was
 * seen writing into such memory).  With verbs the NIC's registration
 * decides what may be registered (engine_cpu_only; memory not all in the
 * maps: writable stays true, nothing is known). */
static int range_check(const struct ferry_engine *e, void *addr, size_t len, unsigned access,
		       bool *writable, bool *opaque)
{
	int rc = range_mapped((uintptr_t)addr, (uintptr_t)addr + len, writable);

	*opaque = false;
	if (!engine_cpu_only(e)) {
		*opaque = rc != 0; /* not all in the maps: a device's, say; nothing else known */
		if (rc)
			*writable = true;
		return 0;
	}
	if (rc) {
		log_err("registering %zu bytes at %p: not all of it is mapped readable", len, addr);
		return rc;
	}
	if ((access & FERRY_ACCESS_REMOTE_WRITE) && !*writable) {
		log_err("registering %zu bytes at %p: peers may write (FERRY_ACCESS_REMOTE_WRITE) "
			"but the memory is not writable", len, addr);
		return -EFAULT;
	}
	return 0;
}

int ferry_mem_register(struct ferry_engine *e, void *addr, size_t len)
{
	return ferry_mem_register_access(e, addr, len,
					 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
}

int ferry_mem_register_access(struct ferry_engine *e, void *addr, size_t len, unsigned access)
{
	struct mem_region *r;
	bool writable, opaque;
	unsigned at;
	int rc;

	if (!e || !addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	if (access & ~(unsigned)(FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE))
		return -EINVAL;
	rc = range_check(e, addr, len, access, &writable, &opaque);
	if (rc)
		return rc;
	pthread_mutex_lock(&e->ctl_lock);
	/* Before the NICs see the range: a full key table's -ENOMEM hid the
	 * overlap's -EEXIST, and verbs pinned a range only to refuse it. */
	rc = region_fits(e, (uintptr_t)addr, len, &at);
	r = rc ? NULL : region_alloc(e);
	if (!r) {
		pthread_mutex_unlock(&e->ctl_lock);
		return rc ? rc : -ENOMEM;
	}
	WRITE_ONCE(r->addr, (uintptr_t)addr); /* a stale port cache may read them */
	WRITE_ONCE(r->len, len);
	r->access = access;
	r->local_ro = !writable; /* before region_insert publishes it (under regions_lock) */
	r->cpu_opaque = opaque;
	rc = region_register(e, r, addr, len, access);
	if (rc == 0) {
		pthread_rwlock_wrlock(&e->regions_lock);
		rc = region_insert(e, r, at);
		pthread_rwlock_unlock(&e->regions_lock);
	}
	if (rc)
		region_retire(e, r);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

int ferry_mem_unregister(struct ferry_engine *e, void *addr)
{
	struct mem_region *r = NULL;
	unsigned i;
	int rc = -ENOENT;

	if (!e || !addr)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	pthread_mutex_lock(&e->ctl_lock);
	pthread_rwlock_wrlock(&e->regions_lock);
	i = region_lower_bound(e, (uintptr_t)addr);
	if (i < e->n_regions && e->regions[i]->addr == (uintptr_t)addr) {
		r = e->regions[i];
		/* Dekker pair with the ports' caches (rq_find_local): the
		 * generation first, then the references. */
		store_sc(e->regions_gen, e->regions_gen + 1);
		if (load_sc(r->refs)) { /* pairs with: fetch_sub_release in rq_finish */
			rc = -EBUSY;
			r = NULL;
		} else {
			memmove(&e->regions[i], &e->regions[i + 1],
				(e->n_regions - i - 1) * sizeof(*e->regions));
			e->n_regions--;
			rc = 0;
		}
	}
	pthread_rwlock_unlock(&e->regions_lock);
	if (r)
		region_retire(e, r);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

/* The control thread's answer to GET_DESC: our NICs and regions. */
int engine_describe(void *arg, struct seg_desc *d)
{
	struct ferry_engine *e = arg;
	int rc = 0;

	memset(d, 0, sizeof(*d));
	d->incarnation = e->incarnation;
	/* Entry i * ntx + t: context t of core i (see nics.c). */
	d->n_nics = (uint16_t)(e->ncores * e->ntx);
	for (unsigned i = 0; i < e->ncores; i++) {
		for (unsigned t = 0; t < e->ntx; t++) {
			const struct qctx *q = &e->cores[i]->tx[t];
			struct seg_nic *n = &d->nics[i * e->ntx + t];

			snprintf(n->provider, sizeof(n->provider), "%s", q->prov->name);
			q->prov->addr(q->nic, &n->addr);
		}
	}
	pthread_rwlock_rdlock(&e->regions_lock);
	d->regions = calloc(e->n_regions ? e->n_regions : 1, sizeof(*d->regions));
	if (!d->regions) {
		rc = -ENOMEM;
	} else {
		d->n_regions = e->n_regions;
		for (unsigned r = 0; r < e->n_regions; r++) {
			d->regions[r].addr = e->regions[r]->addr;
			d->regions[r].len = e->regions[r]->len;
			d->regions[r].access = e->regions[r]->access;
			for (unsigned i = 0; i < e->ncores; i++)
				for (unsigned t = 0; t < e->ntx; t++)
					d->regions[r].rkey[i * e->ntx + t] =
						e->regions[r]->mr[i][t].rkey;
		}
	}
	pthread_rwlock_unlock(&e->regions_lock);
	return rc;
}
