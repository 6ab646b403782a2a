/* SPDX-License-Identifier: MIT */
/*
 * The stats API: a snapshot of one core's counters -- the core's own, its
 * posting context's, the latency histogram, the endpoint cache's evictions
 * and the hardware counters -- into the public struct ferry_core_stats,
 * as many fields as the caller's version of the struct has; and the
 * engine-wide ones (the control plane's) into struct ferry_engine_stats,
 * likewise.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "ring/base/clock.h"
#include "ring/base/counters.h"
#include "runtime/engine/engine.h"
#include "runtime/metrics/histo.h"

_Static_assert(FERRY_LAT_BUCKETS == FERRY_HISTO_BUCKETS, "one histogram layout");

#define HW_REFRESH_NS (100ull * 1000 * 1000)

/*
 * Raise a cached counter to v + 1 (0 = never read).  Two readers may
 * refresh at once, or one be preempted between its read and its store
 * while another refreshes: a plain store put the older value over the
 * newer one, and the counter stepped back (for Prometheus, a reset).
 */
static void hw_cache_raise(uint64_t *slot, uint64_t v)
{
	uint64_t cur = READ_ONCE(*slot);

	while (cur < v + 1 && !cas_relaxed(*slot, &cur, v + 1))
		;
}

/* A cached counter, UINT64_MAX while never read (refused or not yet open). */
static uint64_t hw_cache_get(const uint64_t *slot)
{
	uint64_t v = READ_ONCE(*slot);

	return v ? v - 1 : UINT64_MAX;
}

/* A read() of a running worker's counter interrupts its CPU (~20 us in a
 * VM): refresh at most every 100 ms per core, serve the cache between. */
static void hw_counters(struct ferry_core *c, struct ferry_core_stats *out)
{
	uint64_t now = ferry_now_ns(), v[PERF_CTR_N];
	uint8_t ok[PERF_CTR_N];

	if (now - load_acquire(c->hw_cache_ns) > HW_REFRESH_NS) { /* pairs with: below */
		perf_read(&c->perf, v, ok);
		for (int i = 0; i < PERF_CTR_N; i++)
			if (ok[i])
				hw_cache_raise(&c->hw_cache[i], v[i]);
		store_release(c->hw_cache_ns, now); /* pairs with: load_acquire above */
	}
	out->cycles = hw_cache_get(&c->hw_cache[PERF_CTR_CYCLES]);
	out->instructions = hw_cache_get(&c->hw_cache[PERF_CTR_INSTRUCTIONS]);
	out->cache_misses = hw_cache_get(&c->hw_cache[PERF_CTR_CACHE_MISSES]);
	out->ctx_switches = hw_cache_get(&c->hw_cache[PERF_CTR_CTX_SWITCHES]);
}

int ferry_core_counters_note(const struct ferry_engine *e, unsigned core, char *buf, size_t len)
{
	if (!e || !buf || !len)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	if (core >= e->ncores)
		return -ERANGE;
	perf_note(&e->cores[core]->perf, buf, len);
	return 0;
}

static void stats_fill(struct ferry_core *c, struct ferry_core_stats *out)
{
	const struct core_counters *k = &c->ctr;

	memset(out, 0, sizeof(*out));
	out->cpu = c->cpu;
	out->numa_node = c->numa;
	/* Posting counters: the sum over the core's contexts (transports). */
#define QP(f) for (unsigned t = 0; t < c->ntx; t++) out->f += stat_read(&c->tx[t].ctr, f)
#define CORE(f) out->f = stat_read(k, f)
	QP(wrs_posted); QP(completions); QP(cqes); QP(doorbells); QP(polls); QP(empty_polls);
	QP(qp_full); QP(cq_full); QP(wr_errors); QP(provider_errors);
	CORE(bytes); CORE(pool_empty); CORE(slices_in_flight); CORE(retries); CORE(qp_resets);
	CORE(handovers); CORE(rail_pauses); CORE(reqs_done); CORE(sleeps); CORE(wakeups);
	CORE(loops); CORE(caller_passes); CORE(qp_abandons);
#undef QP
#undef CORE
	/* The core counts time in clock ticks; convert on the reader's side. */
	out->busy_ns = ferry_tsc_to_ns(stat_read(k, busy_ticks));
	out->idle_ns = ferry_tsc_to_ns(stat_read(k, idle_ticks));
	out->ep_evictions = READ_ONCE(c->eps.evictions);
	out->nic_events = READ_ONCE(c->nic_events);
	histo_snapshot(&c->lat, out->lat);
	out->lat_hz = ferry_tsc_hz();
	hw_counters(c, out);
}

/* A snapshot of len bytes into the caller's out of size bytes: an older
 * caller gets the fields it knows, a newer one 0 in those we do not have. */
static void stats_copy_out(void *out, size_t size, const void *full, size_t len)
{
	if (size > len)
		memset((char *)out + len, 0, size - len);
	memcpy(out, full, size < len ? size : len);
}

/* The fields of v0.1's struct, which had no size: the smallest a caller has. */
#define STATS_SIZE_MIN (offsetof(struct ferry_core_stats, lat) + sizeof(((struct ferry_core_stats *)0)->lat))

int ferry_core_stats_get(const struct ferry_engine *e, unsigned core, struct ferry_core_stats *out,
			 size_t size)
{
	struct ferry_core_stats full;

	if (!e || !out || size < STATS_SIZE_MIN)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	if (core >= e->ncores)
		return -ERANGE;
	stats_fill(e->cores[core], &full);
	stats_copy_out(out, size, &full, sizeof(full));
	return 0;
}

/* The exported symbol behind the ferry_core_stats() macro, for callers
 * that take its address: the size this library was built with. */
int(ferry_core_stats)(const struct ferry_engine *e, unsigned core, struct ferry_core_stats *out)
{
	return ferry_core_stats_get(e, core, out, sizeof(*out));
}

/* The fields of 0.5's struct (the first): the smallest a caller has. */
#define ENGINE_STATS_SIZE_MIN (offsetof(struct ferry_engine_stats, disconnects_given_up) + \
			       sizeof(uint64_t))

int ferry_engine_stats_get(const struct ferry_engine *e, struct ferry_engine_stats *out,
			   size_t size)
{
	struct ferry_engine_stats full;

	if (!e || !out || size < ENGINE_STATS_SIZE_MIN)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	memset(&full, 0, sizeof(full));
	full.disconnects_dropped = READ_ONCE(e->disc_dropped);
	full.disconnects_given_up = READ_ONCE(e->disc_given_up);
	stats_copy_out(out, size, &full, sizeof(full));
	return 0;
}

/* The exported symbol behind the ferry_engine_stats() macro (as above). */
int(ferry_engine_stats)(const struct ferry_engine *e, struct ferry_engine_stats *out)
{
	return ferry_engine_stats_get(e, out, sizeof(*out));
}
