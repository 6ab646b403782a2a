/* SPDX-License-Identifier: MIT */
/*
 * Engine lifecycle, memory registration and segments: the control path.  All
 * of it serialises on ctl_lock and may block; none of it runs on a core.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "runtime/internal.h"

#define FETCH_TIMEOUT_MS 5000

/* ---- engine ---- */

static int engine_parse(struct ferry_engine *e, const struct ferry_opts *o, unsigned *cpus)
{
	char err[256];
	int rc;

	if (ferry_opts_check(o, err, sizeof(err)) < 0) {
		fprintf(stderr, "ferry: %s\n", err);
		return -EINVAL;
	}
	rc = ferry_parse_cores(o->cores, cpus, FERRY_MAX_CORES, &e->ncores, 1, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "ferry: %s\n", err);
		return rc;
	}
	if (strlen(o->nics) >= sizeof(e->nics_buf)) {
		fprintf(stderr, "ferry: nics list too long\n");
		return -EINVAL;
	}
	e->opts = *o;
	strcpy(e->nics_buf, o->nics);
	e->opts.nics = e->nics_buf;
	e->opts.cores = NULL;
	e->opts.listen = NULL; /* the bound address is in e->ctl */
	return 0;
}

/* NIC i of the comma list, cycling: core k gets nics[k % n]. */
static void nic_for_core(const char *list, unsigned k, char *out, size_t len)
{
	unsigned n = 1, i;
	const char *p, *q;

	for (p = list; *p; p++)
		n += *p == ',';
	for (i = 0, p = list; i < k % n; i++)
		p = strchr(p, ',') + 1;
	q = strchr(p, ',');
	snprintf(out, len, "%.*s", (int)(q ? (size_t)(q - p) : strlen(p)), p);
}

static int cpu_node(unsigned cpu)
{
	return numa_available() >= 0 ? numa_node_of_cpu((int)cpu) : -1;
}

/*
 * "auto": every active verbs device, each core on a device of its own NUMA
 * node when there is one (round robin within the node), else round robin
 * over all; no device at all means the software NIC.
 */
static void nic_auto(const unsigned *cpus, unsigned ncores, char names[][64])
{
	struct nic_dev_info devs[FERRY_MAX_CORES];
	unsigned used[FERRY_MAX_CORES] = { 0 };
	int n = nic_verbs_discover(devs, FERRY_MAX_CORES);

	for (unsigned i = 0; i < ncores; i++) {
		int node = cpu_node(cpus[i]), pick = -1, best = -1;

		for (int d = 0; d < n; d++) {
			if (devs[d].numa_node == node && (pick < 0 || used[d] < used[pick]))
				pick = d;
			if (best < 0 || used[d] < used[best])
				best = d;
		}
		if (pick < 0)
			pick = best;
		if (pick < 0) {
			snprintf(names[i], 64, "loop");
			continue;
		}
		used[pick]++;
		snprintf(names[i], 64, "%s", devs[pick].name);
	}
}

static void nics_for_cores(const struct ferry_engine *e, const unsigned *cpus, char names[][64])
{
	if (strcmp(e->opts.nics, "auto") == 0) {
		nic_auto(cpus, e->ncores, names);
		return;
	}
	for (unsigned i = 0; i < e->ncores; i++)
		nic_for_core(e->opts.nics, i, names[i], 64);
}

static int engine_describe(void *arg, struct seg_desc *d);

static void engine_print_map(const struct ferry_engine *e)
{
	char what[160];

	for (unsigned i = 0; i < e->ncores; i++) {
		const struct ferry_core *c = e->cores[i];

		c->q.prov->describe(c->q.nic, what, sizeof(what));
		fprintf(stderr, "ferry: core %u: cpu %u (NUMA %d) -> %s\n", i, c->cpu, c->numa, what);
	}
}

static int engine_start(struct ferry_engine *e, const unsigned *cpus, const char *listen)
{
	char names[FERRY_MAX_CORES][64];
	int rc;

	nics_for_cores(e, cpus, names);
	for (unsigned i = 0; i < e->ncores; i++) {
		rc = core_create(e, i, cpus[i], names[i], &e->cores[i]);
		if (rc)
			return rc;
		e->prov[i] = e->cores[i]->q.prov;
	}
	rc = handover_init(e);
	if (rc)
		return rc;
	if (e->opts.verbose)
		engine_print_map(e);
	ctl_set_ep_ops(&e->ctl, passive_connect, passive_disconnect);
	ctl_set_keepalive(&e->ctl, passive_keepalive);
	rc = ctl_start(&e->ctl, listen, engine_describe, e);
	if (rc) {
		fprintf(stderr, "ferry: cannot listen on %s: %s\n", listen ? listen : "(default)",
			strerror(-rc));
		return rc;
	}
	for (unsigned i = 0; i < e->ncores; i++) {
		rc = core_start(e->cores[i]);
		if (rc)
			return rc;
	}
	return repair_start(e);
}

int ferry_engine_create(const struct ferry_opts *o, struct ferry_engine **out)
{
	unsigned cpus[FERRY_MAX_CORES];
	struct ferry_engine *e;
	int rc;

	if (!o || !out)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->ctl_lock, NULL);
	pthread_mutex_init(&e->passive_lock, NULL);
	pthread_rwlock_init(&e->regions_lock, NULL);
	/* A new incarnation per engine: peers can tell a restarted process. */
	if (getrandom(&e->incarnation, sizeof(e->incarnation), 0) != sizeof(e->incarnation))
		e->incarnation = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)e;
	ferry_tsc_hz();
	rc = engine_parse(e, o, cpus);
	if (rc == 0)
		rc = engine_start(e, cpus, o->listen);
	if (rc) {
		ferry_engine_destroy(e);
		return rc;
	}
	*out = e;
	return 0;
}

static void region_free(struct ferry_engine *e, struct mem_region *r)
{
	for (unsigned i = 0; i < e->ncores; i++)
		if (r->mr[i].priv || r->mr[i].lkey)
			e->prov[i]->dereg_mr(e->cores[i]->q.nic, &r->mr[i]);
	free(r);
}

static void seg_release(struct ferry_seg *s)
{
	if (s->desc) {
		seg_desc_free(s->desc);
		free(s->desc);
	}
	for (unsigned i = 0; i < s->n_old; i++) {
		seg_desc_free(s->old_descs[i]);
		free(s->old_descs[i]);
	}
	s->desc = NULL;
	s->n_old = 0;
	memset(s->eps, 0, sizeof(s->eps));
}

void ferry_engine_destroy(struct ferry_engine *e)
{
	if (!e)
		return;
	repair_stop(e);
	seg_disconnect_all(e);
	ctl_stop(&e->ctl);
	/* Cores fail what is queued, flush what is posted, free their eps. */
	for (unsigned i = 0; i < e->ncores; i++)
		if (e->cores[i])
			core_stop(e->cores[i]);
	passive_destroy_all(e);
	for (unsigned s = 0; s < FERRY_MAX_SEGS; s++)
		seg_release(&e->segs[s]);
	for (unsigned i = 0; i < e->n_regions; i++)
		region_free(e, e->regions[i]);
	free(e->regions);
	for (unsigned i = 0; i < e->ncores; i++)
		core_destroy(e->cores[i]);
	for (unsigned i = 0; i < FERRY_MAX_PORTS; i++)
		if (e->ports[i]) {
			for (unsigned k = 0; k < e->ncores; k++)
				ferry_ring_fini(&e->ports[i]->rings[k]);
			free(e->ports[i]->rings);
			free(e->ports[i]);
		}
	reap_wait(e); /* endpoints queued for call_rcu are freed */
	pthread_rwlock_destroy(&e->regions_lock);
	pthread_mutex_destroy(&e->passive_lock);
	pthread_mutex_destroy(&e->ctl_lock);
	free(e);
}

const char *ferry_engine_address(const struct ferry_engine *e)
{
	return e ? e->ctl.address : NULL;
}

unsigned ferry_engine_cores(const struct ferry_engine *e)
{
	return e ? e->ncores : 0;
}

const char *ferry_core_nic(const struct ferry_engine *e, unsigned core)
{
	return e && core < e->ncores ? e->cores[core]->nic_name : NULL;
}

struct nic *ferry_engine_nic(struct ferry_engine *e, unsigned core)
{
	return core < e->ncores ? e->cores[core]->q.nic : NULL;
}

/* ---- memory ---- */

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

static int region_insert(struct ferry_engine *e, struct mem_region *r)
{
	unsigned i = region_lower_bound(e, r->addr);

	/* regions[i] is the first that ends above r->addr: the only candidate. */
	if (i < e->n_regions && e->regions[i]->addr < r->addr + r->len)
		return -EEXIST;
	if (e->n_regions == WIRE_MAX_REGIONS)
		return -ENOSPC; /* a descriptor could not carry more */
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

static int region_register(struct ferry_engine *e, struct mem_region *r, void *addr, size_t len)
{
	for (unsigned i = 0; i < e->ncores; i++) {
		int rc = e->prov[i]->reg_mr(e->cores[i]->q.nic, addr, len, &r->mr[i]);

		if (rc) {
			fprintf(stderr, "ferry: registering %zu bytes at %p on core %u's NIC: %s\n",
				len, addr, i, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

int ferry_mem_register(struct ferry_engine *e, void *addr, size_t len)
{
	struct mem_region *r;
	int rc;

	if (!e || !addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->addr = (uintptr_t)addr;
	r->len = len;
	pthread_mutex_lock(&e->ctl_lock);
	rc = region_register(e, r, addr, len);
	if (rc == 0) {
		pthread_rwlock_wrlock(&e->regions_lock);
		rc = region_insert(e, r);
		pthread_rwlock_unlock(&e->regions_lock);
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc)
		region_free(e, r);
	return rc;
}

int ferry_mem_unregister(struct ferry_engine *e, void *addr)
{
	struct mem_region *r = NULL;
	unsigned i;
	int rc = -ENOENT;

	if (!e || !addr)
		return -EINVAL;
	pthread_mutex_lock(&e->ctl_lock);
	pthread_rwlock_wrlock(&e->regions_lock);
	i = region_lower_bound(e, (uintptr_t)addr);
	if (i < e->n_regions && e->regions[i]->addr == (uintptr_t)addr) {
		r = e->regions[i];
		if (__atomic_load_n(&r->refs, __ATOMIC_ACQUIRE)) {
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
		region_free(e, r);
	pthread_mutex_unlock(&e->ctl_lock);
	return rc;
}

/* The control thread's answer to GET_DESC: our NICs and regions. */
static int engine_describe(void *arg, struct seg_desc *d)
{
	struct ferry_engine *e = arg;
	int rc = 0;

	memset(d, 0, sizeof(*d));
	d->incarnation = e->incarnation;
	d->n_nics = (uint16_t)e->ncores;
	for (unsigned i = 0; i < e->ncores; i++) {
		snprintf(d->nics[i].provider, sizeof(d->nics[i].provider), "%s", e->prov[i]->name);
		e->prov[i]->addr(e->cores[i]->q.nic, &d->nics[i].addr);
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
			for (unsigned i = 0; i < e->ncores; i++)
				d->regions[r].rkey[i] = e->regions[r]->mr[i].rkey;
		}
	}
	pthread_rwlock_unlock(&e->regions_lock);
	return rc;
}
