/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text exposition of the per-core counters and the engine-wide
 * ones (see prom.h).  The
 * format: https://prometheus.io/docs/instrumenting/exposition_formats/
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/metrics/histo.h"
#include "runtime/metrics/prom.h"

/* offsetof a uint64_t field, refused at compile time if it is not one. */
#define U64_OFF(type, f)                                                           \
	(offsetof(type, f) +                                                       \
	 0 * sizeof(struct {                                                       \
		 _Static_assert(__builtin_types_compatible_p(                      \
					__typeof__(((type *)0)->f), uint64_t),     \
				#f " must be a uint64_t");                         \
		 int x;                                                            \
	 }))

#define CTR(f, name, help) \
	{ name, help, PROM_COUNTER, PROM_UNIT_RAW, U64_OFF(struct ferry_core_stats, f), 0 }
#define GAUGE(f, name, help) \
	{ name, help, PROM_GAUGE, PROM_UNIT_RAW, U64_OFF(struct ferry_core_stats, f), 0 }
#define SECONDS(f, name, help) \
	{ name, help, PROM_COUNTER, PROM_UNIT_NS, U64_OFF(struct ferry_core_stats, f), 0 }

/* In the order of struct ferry_core_stats; cpu and numa_node are not counters. */
static const struct prom_row ferry_rows[] = {
	CTR(wrs_posted, "ferry_wrs_posted_total", "Work requests handed to the NIC."),
	CTR(completions, "ferry_completions_total",
	    "Work requests retired (signalled or not)."),
	CTR(cqes, "ferry_cqes_total", "Completion entries polled."),
	CTR(bytes, "ferry_bytes_total", "Bytes moved successfully."),
	CTR(doorbells, "ferry_doorbells_total", "Post calls (one per QP per pass)."),
	CTR(polls, "ferry_polls_total", "CQ polls."),
	CTR(empty_polls, "ferry_empty_polls_total", "CQ polls that returned nothing."),
	CTR(qp_full, "ferry_qp_full_total", "Times a QP had no room for pending work (its depth, or its RDMA READ credits)."),
	CTR(cq_full, "ferry_cq_full_total", "Times the CQ quota had no room."),
	CTR(pool_empty, "ferry_pool_empty_total", "Times the slice pool ran dry."),
	GAUGE(slices_in_flight, "ferry_slices_in_flight",
	      "Slices cut and not yet retired."),
	CTR(wr_errors, "ferry_wr_errors_total", "Completions with an error status."),
	CTR(retries, "ferry_retries_total", "Slices posted again after an error."),
	CTR(qp_resets, "ferry_qp_resets_total",
	    "Broken QPs replaced through a new handshake."),
	CTR(handovers, "ferry_handovers_total",
	    "Failed slices handed to another core's rail."),
	CTR(rail_pauses, "ferry_rail_pauses_total",
	    "Times a rail was paused for its error rate."),
	CTR(ep_evictions, "ferry_ep_evictions_total",
	    "Endpoints evicted from the core's cache (SIEVE)."),
	CTR(reqs_done, "ferry_reqs_done_total", "Request parts finished by this core."),
	CTR(provider_errors, "ferry_provider_errors_total",
	    "Post/poll failures of the NIC provider (a bug unless 0)."),
	CTR(sleeps, "ferry_sleeps_total", "Times the core went to sleep when idle."),
	CTR(wakeups, "ferry_wakeups_total",
	    "Futex wakes of application threads sleeping in ferry_batch_wait."),
	SECONDS(busy_ns, "ferry_busy_seconds_total", "Time in loop passes that did work."),
	SECONDS(idle_ns, "ferry_idle_seconds_total",
		"Time in loop passes that did nothing (including sleep)."),
	CTR(loops, "ferry_loops_total", "Loop passes."),
	CTR(cycles, "ferry_cycles_total", "User-mode CPU cycles of the worker."),
	CTR(instructions, "ferry_instructions_total", "User-mode instructions of the worker."),
	CTR(cache_misses, "ferry_cache_misses_total", "Last-level cache misses of the worker."),
	CTR(ctx_switches, "ferry_context_switches_total", "Context switches of the worker."),
	{ "ferry_slice_latency_seconds", "Time from posting a slice to its completion.",
	  PROM_HISTOGRAM, PROM_UNIT_RAW, offsetof(struct ferry_core_stats, lat),
	  U64_OFF(struct ferry_core_stats, lat_hz) },
	CTR(nic_events, "ferry_nic_events_total",
	    "Device events handled: port down or up, device fatal, QP fatal."),
	CTR(caller_passes, "ferry_caller_passes_total",
	    "Loop passes run by application threads (idle policy caller)."),
	CTR(qp_abandons, "ferry_qp_abandons_total",
	    "Broken QPs whose work requests never came back (a dead device), given up."),
};

#define ENGINE_CTR(f, name, help) \
	{ name, help, PROM_COUNTER, PROM_UNIT_RAW, U64_OFF(struct ferry_engine_stats, f), 0 }

/* In the order of struct ferry_engine_stats. */
static const struct prom_row engine_rows[] = {
	ENGINE_CTR(disconnects_dropped, "ferry_disconnects_dropped_total",
		   "DISCONNECTs dropped unsent (the queue full, or beyond what engine destroy "
		   "sends once more): the peers' leases free those QPs."),
	ENGINE_CTR(disconnects_given_up, "ferry_disconnects_given_up_total",
		   "DISCONNECTs that never reached their peer and whose tries ended: the "
		   "peers' leases free those QPs."),
};

static const struct prom_table engine_table = {
	.rows = engine_rows,
	.nrows = sizeof(engine_rows) / sizeof(engine_rows[0]),
	.stride = sizeof(struct ferry_engine_stats),
	.engine_wide = 1,
};

static const struct prom_table ferry_table = {
	.rows = ferry_rows,
	.nrows = sizeof(ferry_rows) / sizeof(ferry_rows[0]),
	.stride = sizeof(struct ferry_core_stats),
	.cpu_off = offsetof(struct ferry_core_stats, cpu),
};

/* ---- bounded output: the first write that does not fit marks it full ---- */

struct out {
	char *buf;
	size_t len;
	size_t pos;
	int full;
};

static void out_mem(struct out *o, const char *s, size_t n)
{
	/* Keep one byte for the NUL. */
	if (o->full || n >= o->len - o->pos) {
		o->full = 1;
		return;
	}
	memcpy(o->buf + o->pos, s, n);
	o->pos += n;
}

static void out_str(struct out *o, const char *s)
{
	out_mem(o, s, strlen(s));
}

static void out_u64(struct out *o, uint64_t v)
{
	char tmp[24];

	out_mem(o, tmp, (size_t)snprintf(tmp, sizeof(tmp), "%" PRIu64, v));
}

/* ns as exact decimal seconds: 1500000000 -> "1.5", 123 -> "0.000000123". */
static void out_seconds(struct out *o, uint64_t ns)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%" PRIu64 ".%09" PRIu64, ns / 1000000000u,
			 ns % 1000000000u);

	while (tmp[n - 1] == '0')
		n--;
	if (tmp[n - 1] == '.')
		n--;
	out_mem(o, tmp, (size_t)n);
}

/*
 * Escape per the exposition format: backslash and newline always, the
 * double quote in label values only (HELP text keeps it as is).
 */
static void out_escaped(struct out *o, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			out_str(o, "\\\\");
		else if (*s == '\n')
			out_str(o, "\\n");
		else if (*s == '"' && quote)
			out_str(o, "\\\"");
		else
			out_mem(o, s, 1);
	}
}

/* ---- families ---- */

static const char *type_name(enum prom_type t)
{
	return t == PROM_COUNTER ? "counter" : t == PROM_GAUGE ? "gauge" : "histogram";
}

static void out_header(struct out *o, const struct prom_row *r)
{
	out_str(o, "# HELP ");
	out_str(o, r->name);
	out_str(o, " ");
	out_escaped(o, r->help, 0);
	out_str(o, "\n# TYPE ");
	out_str(o, r->name);
	out_str(o, " ");
	out_str(o, type_name(r->type));
	out_str(o, "\n");
}

struct series {
	const char *engine;
	unsigned core;
	unsigned cpu;
	int engine_wide; /* no core, no cpu label */
};

/* name{engine="..",core="..",cpu=".." (engine-wide: name{engine=".." only)
 * -- the caller closes the braces. */
static void out_series(struct out *o, const char *name, const char *suffix,
		       const struct series *s)
{
	out_str(o, name);
	out_str(o, suffix);
	out_str(o, "{engine=\"");
	out_escaped(o, s->engine, 1);
	if (s->engine_wide) {
		out_str(o, "\"");
		return;
	}
	out_str(o, "\",core=\"");
	out_u64(o, s->core);
	out_str(o, "\",cpu=\"");
	out_u64(o, s->cpu);
	out_str(o, "\"");
}

static void out_sample(struct out *o, const struct prom_row *r, const struct series *s,
		       uint64_t v)
{
	if (v == PROM_NONE)
		return;
	out_series(o, r->name, "", s);
	out_str(o, "} ");
	if (r->unit == PROM_UNIT_NS)
		out_seconds(o, v);
	else
		out_u64(o, v);
	out_str(o, "\n");
}

/*
 * Cumulative buckets with `le` in seconds.  Neighbouring bounds can round
 * to the same ns at a fast clock (1 and 3 ticks at 3 GHz are both 1 ns): a
 * series may appear once, so only the last bucket of such a run is written,
 * and its cumulative count covers the run.  No _sum: the cores count no
 * sum (one more store per sample); histogram_quantile needs only buckets.
 */
static void out_histogram(struct out *o, const struct prom_row *r, const struct series *s,
			  const uint64_t *b, uint64_t hz)
{
	uint64_t cum = 0;

	for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++) {
		uint64_t le = histo_ticks_to_ns(histo_bucket_max(k), hz);

		cum += b[k];
		if (k + 1 < FERRY_HISTO_BUCKETS &&
		    histo_ticks_to_ns(histo_bucket_max(k + 1), hz) == le)
			continue;
		out_series(o, r->name, "_bucket", s);
		out_str(o, ",le=\"");
		if (le == UINT64_MAX)
			out_str(o, "+Inf");
		else
			out_seconds(o, le);
		out_str(o, "\"} ");
		out_u64(o, cum);
		out_str(o, "\n");
	}
	out_series(o, r->name, "_count", s);
	out_str(o, "} ");
	out_u64(o, cum);
	out_str(o, "\n");
}

static uint64_t field_u64(const void *rec, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)rec + off, sizeof(v));
	return v;
}

static void out_family(struct out *o, const struct prom_table *t, const struct prom_row *r,
		       const void *recs, unsigned n, const char *engine)
{
	out_header(o, r);
	for (unsigned i = 0; i < n; i++) {
		const char *rec = (const char *)recs + (size_t)i * t->stride;
		struct series s = { engine, i, 0, t->engine_wide };

		if (!t->engine_wide)
			memcpy(&s.cpu, rec + t->cpu_off, sizeof(s.cpu));
		if (r->type == PROM_HISTOGRAM)
			out_histogram(o, r, &s, (const uint64_t *)(const void *)(rec + r->off),
				      field_u64(rec, r->hz_off));
		else
			out_sample(o, r, &s, field_u64(rec, r->off));
	}
}

int prom_format_table(char *buf, size_t len, const struct prom_table *t, const void *recs,
		      unsigned n, const char *engine_label)
{
	struct out o = { buf, len, 0, len == 0 };

	if ((!buf && len) || !t || (!recs && n))
		return -EINVAL;
	if (len > INT_MAX)  /* the count must fit the int returned */
		o.len = (size_t)INT_MAX + 1;
	for (size_t i = 0; i < t->nrows; i++)
		out_family(&o, t, &t->rows[i], recs, n, engine_label ? engine_label : "");
	if (len)
		buf[o.full ? 0 : o.pos] = '\0';
	return o.full ? -ENOSPC : (int)o.pos;
}

const struct prom_table *prom_core_table(void)
{
	return &ferry_table;
}

const struct prom_table *prom_engine_table(void)
{
	return &engine_table;
}

int prom_format(char *buf, size_t len, const struct ferry_core_stats *st, unsigned ncores,
		const char *engine_label)
{
	return prom_format_table(buf, len, &ferry_table, st, ncores, engine_label);
}

/* The engine-wide families after the cores' pos bytes in buf: the bytes
 * in all, or -ENOSPC (buf then ""), -EOWNERDEAD. */
static int prom_engine_after(const struct ferry_engine *e, char *buf, size_t len, size_t pos)
{
	struct ferry_engine_stats es;
	int rc = ferry_engine_stats(e, &es);

	if (!rc)
		rc = prom_format_table(buf + pos, len - pos, &engine_table, &es, 1,
				       ferry_engine_address(e));
	if (rc >= 0 && pos + (size_t)rc > INT_MAX) /* the count must fit the int returned */
		rc = -ENOSPC;
	if (rc < 0 && len)
		buf[0] = '\0'; /* never half of it */
	return rc < 0 ? rc : (int)(pos + (size_t)rc);
}

int ferry_stats_format_prometheus(const struct ferry_engine *e, char *buf, size_t len)
{
	struct ferry_core_stats *st;
	unsigned n;
	int rc = 0;

	if (buf && len)
		buf[0] = '\0';
	if (!e)
		return -EINVAL;
	n = ferry_engine_cores(e);
	st = calloc(n ? n : 1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (unsigned i = 0; i < n && rc == 0; i++) /* -EOWNERDEAD in a forked child */
		rc = ferry_core_stats(e, i, &st[i]);
	if (rc == 0)
		rc = prom_format(buf, len, st, n, ferry_engine_address(e));
	free(st);
	return rc < 0 ? rc : prom_engine_after(e, buf, len, (size_t)rc);
}
