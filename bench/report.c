/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench's results on stdout: the table's header and one row per size
 * (throughput or --lat columns), the per-core tables of software and
 * hardware counters at the end, and --json's one object per size.  The
 * counters printed are deltas between two snapshots (counters.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* after - before of every counter; cpu and node from after. */
static void stats_delta(const struct ferry_core_stats *a, const struct ferry_core_stats *bf,
			struct ferry_core_stats *d)
{
	*d = *a;
#define SUB(f) d->f = a->f - bf->f
	SUB(wrs_posted); SUB(completions); SUB(cqes); SUB(bytes); SUB(doorbells);
	SUB(polls); SUB(empty_polls); SUB(qp_full); SUB(cq_full); SUB(pool_empty);
	SUB(wr_errors); SUB(reqs_done); SUB(provider_errors); SUB(sleeps); SUB(wakeups);
	SUB(busy_ns); SUB(idle_ns); SUB(loops); SUB(retries); SUB(qp_resets); SUB(handovers);
	SUB(rail_pauses);
#undef SUB
#define HW(f) d->f = bench_hw_delta(a->f, bf->f)
	HW(cycles); HW(instructions); HW(cache_misses); HW(ctx_switches);
#undef HW
}

static double ns_per_slice(const struct ferry_core_stats *d)
{
	return d->completions ? (double)d->busy_ns / (double)d->completions : 0.0;
}

/* The run's flag in the header: --sync, --lat...; none for the default (requests in flight). */
static void print_run_flag(const struct bench_cfg *c)
{
	const char *n = bench_run_name(c);

	if (!strcmp(n, "bw_sync"))
		printf(" --sync");
	else if (strcmp(n, "bw"))
		printf(" --%s", n);
}

/* How a throughput port submits, for the header. */
static void print_submit(const struct bench *b)
{
	if (bench_in_flight(&b->cfg))
		printf(", %u in flight per port, refill %u", b->cfg.batch, b->cfg.refill);
	if (b->cfg.prep)
		printf(", prep");
	if (b->cfg.status_once)
		printf(", status once");
}

void print_lat_header(const char *first)
{
	printf("%-5s %10s %10s %10s %10s %10s %10s %10s %10s %8s\n", first, "size", "iters",
	       "t_min_us", "t_typ_us", "t_avg_us", "t_p99_us", "t_p999_us", "t_max_us", "failures");
}

/* What the segment goes over (ferry_segment_transport): cma, verbs, tcp or loop. */
const char *bench_transport(const struct bench *b)
{
	const char *t = b->init ? ferry_segment_transport(b->init, b->seg) : NULL;

	return t ? t : "-";
}

void print_header(const struct bench *b)
{
	const struct ferry_opts *o = &b->iopts;

	printf("# ferry_bench");
	print_run_flag(&b->cfg);
	printf(": %s, nics %s, transport %s, cores %s ", bench_op_name(b->cfg.op), o->nics,
	       bench_transport(b), o->cores);
	if (b->cfg.mode == BENCH_LOCAL)
		printf("(target %s, ", b->topts.cores);
	else
		printf("(target %s remote 0x%" PRIx64 ", ", b->cfg.connect, b->remote_base);
	printf("ports on cpus %s), slice %u, qps %u, depth %u, idle %s, %s, counters %s%s%s",
	       b->port_cpus_desc, o->slice_size, o->qps_per_ep, o->wrs_per_qp,
	       o->idle == FERRY_IDLE_SPIN ? "spin" : o->idle == FERRY_IDLE_CALLER ? "caller" : "adaptive", b->cfg.nocopy ? "nocopy" : "copy",
	       onoff(o->counters), b->cfg.verify ? ", verify" : "",
	       b->cfg.same_addr ? ", same-addr" : "");
	print_submit(b);
	printf("\n");
	if (b->cfg.pingpong)
		printf("# t_* are half round trips (WRITE there, WRITE back, answer seen), like "
		       "ib_write_lat's\n");
	if (b->cfg.notify)
		printf("# t_* run from the WRITE's submit until the target engine's "
		       "ferry_notif_poll returns the notification queued after it\n");
	if (b->cfg.idle)
		printf("# --idle %.3g s, then %" PRIu64 " x (%u ms idle, a request: cold; again at "
		       "once: warm), submit to done\n",
		       b->cfg.idle, b->cfg.iters, BENCH_IDLE_GAP_MS);
	if (b->cfg.lat || b->cfg.idle)
		print_lat_header(b->cfg.idle ? "wake" : "op");
	else
		printf("%-5s %10s %6s %5s %9s %14s %8s %8s %10s %12s %10s %9s %9s %9s %9s %8s\n",
		       "op", "size", "batch", "ports", "batches", "bytes", "secs", "GB/s", "MB/s",
		       "req/s", "batch_us", "p50_us", "p99_us", "p999_us", "max_us", "failures");
}

/* A latency in us for the table; "-" when nothing was measured. */
static const char *us_str(const struct bench_lat *l, uint64_t ns, char *buf, size_t len)
{
	if (!l->n)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2f", (double)ns / 1e3);
	return buf;
}

/* One row of latencies in us: min, typical (p50), avg, p99, p99.9, max. */
void print_lat_row(const char *label, uint64_t size, const struct bench_lat *l,
		   uint64_t failures)
{
	printf("%-5s %10" PRIu64 " %10" PRIu64 " %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %8" PRIu64
	       "\n",
	       label, size, l->n, (double)l->min / 1e3, (double)l->p50 / 1e3, l->avg / 1e3,
	       (double)l->p99 / 1e3, (double)l->p999 / 1e3, (double)l->max / 1e3, failures);
}

/*
 * --notify: notifications polled per second of the turns' own time.  Only
 * the turns whose notifications all came count: they are the ones timed
 * (their samples, lat.n, and lat_ns); batches also counts a failed turn.
 */
static double notifs_per_s(const struct bench *b, const struct totals *t)
{
	return t->lat_ns ? (double)b->cfg.notifs * (double)t->lat.n * 1e9 / (double)t->lat_ns
			 : 0.0;
}

/*
 * The mean time per batch (per turn in --notify), in us.  --notify times
 * only the turns whose notifications all came (lat.n of them, lat_ns their
 * sum); dividing by batches, which counts a failed turn too, deflated it.
 */
static double batch_lat_us(const struct bench *b, const struct totals *t)
{
	uint64_t n = b->cfg.notify ? t->lat.n : t->batches;

	return n ? (double)t->lat_ns / (double)n / 1e3 : 0.0;
}

void print_row(const struct bench *b, const struct totals *t)
{
	uint64_t bytes = t->ok * b->size;
	const struct bench_lat *l = &t->lat;
	char p50[32], p99[32], p999[32], max[32];

	if (b->cfg.lat) {
		print_lat_row(bench_op_name(b->cfg.op), b->size, l, t->failures);
		if (b->cfg.notify && b->cfg.notifs > 1)
			printf("# %u notifications per turn to %u receiver(s): %.0f notifications/s "
			       "(turns back to back, each timed from the WRITE's submit to the last "
			       "one polled)\n",
			       b->cfg.notifs, b->cfg.peers, notifs_per_s(b, t));
	} else {
		printf("%-5s %10" PRIu64 " %6u %5u %9" PRIu64 " %14" PRIu64
		       " %8.3f %8.3f %10.1f %12.0f %10.2f %9s %9s %9s %9s %8" PRIu64 "\n",
		       bench_op_name(b->cfg.op), b->size, b->nreq, b->cfg.ports, t->batches, bytes,
		       t->secs, (double)bytes / t->secs / 1e9, (double)bytes / t->secs / 1e6,
		       (double)t->ok / t->secs, batch_lat_us(b, t),
		       us_str(l, l->p50, p50, sizeof(p50)), us_str(l, l->p99, p99, sizeof(p99)),
		       us_str(l, l->p999, p999, sizeof(p999)), us_str(l, l->max, max, sizeof(max)),
		       t->failures);
		/*
		 * Per core-second: what the cores cost whatever shared their CPUs.
		 * The time is every engine's core threads' (one-process mode: the
		 * target's too), so the share is per such thread, not per
		 * initiator core (a busy tcp target made that 133 %).
		 */
		if (b->cores_cpu_ns && b->core_threads)
			printf("# the cores ran %.3f s (%.0f %% of %.3f s per core thread, %u "
			       "threads): %.3f GB/s per core-second\n",
			       (double)b->cores_cpu_ns / 1e9,
			       100.0 * (double)b->cores_cpu_ns / 1e9 / t->secs / b->core_threads,
			       t->secs, b->core_threads, (double)bytes / (double)b->cores_cpu_ns);
	}
	fflush(stdout);
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The software counters of each core over the run. */
static void print_sw_cores(const struct bench *b, const struct ferry_core_stats *before,
			   const struct ferry_core_stats *after)
{
	printf("\n%4s %4s %11s %11s %14s %10s %11s %11s %8s %8s %10s %8s %8s %8s %6s %6s %9s\n",
	       "core", "cpu", "wrs_posted", "completions", "bytes", "doorbells", "polls",
	       "empty_polls", "qp_full", "cq_full", "pool_empty", "retries", "errors", "sleeps",
	       "busy%", "idle%", "ns/slice");
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;
		uint64_t all;

		stats_delta(&after[k], &before[k], &d);
		all = d.busy_ns + d.idle_ns;
		printf("%4u %4u %11" PRIu64 " %11" PRIu64 " %14" PRIu64 " %10" PRIu64 " %11" PRIu64
		       " %11" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10" PRIu64 " %8" PRIu64 " %8" PRIu64
		       " %8" PRIu64 " %6.1f %6.1f %9.1f\n",
		       k, d.cpu, d.wrs_posted, d.completions, d.bytes, d.doorbells, d.polls,
		       d.empty_polls, d.qp_full, d.cq_full, d.pool_empty, d.retries, d.wr_errors,
		       d.sleeps, pct(d.busy_ns, all), pct(d.idle_ns, all), ns_per_slice(&d));
		if (d.provider_errors)
			printf("     core %u: provider_errors %" PRIu64 " (a bug: should be 0)\n", k,
			       d.provider_errors);
	}
}

/* "1.23" or "-" when either count is missing (or there is nothing to divide by). */
static const char *ratio_str(uint64_t num, uint64_t den, char *buf, size_t len)
{
	if (num == UINT64_MAX || den == UINT64_MAX || !den)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2f", (double)num / (double)den);
	return buf;
}

static bool hw_missing(const struct ferry_core_stats *d)
{
	return d->cycles == UINT64_MAX || d->instructions == UINT64_MAX ||
	       d->cache_misses == UINT64_MAX || d->ctx_switches == UINT64_MAX;
}

/*
 * The worker threads' hardware counters (user mode; the whole thread, idle
 * passes included), then one line per core that misses any, saying why.
 */
static void print_hw_cores(const struct bench *b, const struct ferry_core_stats *before,
			   const struct ferry_core_stats *after)
{
	char c[32], i[32], ipc[32], m[32], x[32], ips[32], note[256];

	printf("\n%4s %4s %14s %14s %6s %12s %12s %11s\n", "core", "cpu", "cycles", "instructions",
	       "IPC", "cache_misses", "ctx_switches", "instr/slice");
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;

		stats_delta(&after[k], &before[k], &d);
		printf("%4u %4u %14s %14s %6s %12s %12s %11s\n", k, d.cpu,
		       bench_count_str(d.cycles, c, sizeof(c)),
		       bench_count_str(d.instructions, i, sizeof(i)),
		       ratio_str(d.instructions, d.cycles, ipc, sizeof(ipc)),
		       bench_count_str(d.cache_misses, m, sizeof(m)),
		       bench_count_str(d.ctx_switches, x, sizeof(x)),
		       ratio_str(d.instructions, d.completions, ips, sizeof(ips)));
	}
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;

		stats_delta(&after[k], &before[k], &d);
		if (!hw_missing(&d))
			continue;
		if (ferry_core_counters_note(b->self, k, note, sizeof(note)))
			snprintf(note, sizeof(note), "unknown");
		printf("core %u: hardware counters: %s\n", k, note);
	}
}

void print_cores(const struct bench *b, const struct ferry_core_stats *before,
		 const struct ferry_core_stats *after)
{
	print_sw_cores(b, before, after);
	print_hw_cores(b, before, after);
	fflush(stdout);
}

/* A JSON string: user-given names may hold quotes or control characters. */
void json_str(const char *key, const char *s)
{
	printf("\"%s\":\"", key);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	printf("\",");
}

/* A hardware counter: null when the kernel does not count it. */
static void json_hw(const char *key, uint64_t v)
{
	if (v == UINT64_MAX)
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%" PRIu64, key, v);
}

static void json_core(unsigned k, const struct ferry_core_stats *d)
{
	printf("{\"core\":%u,\"cpu\":%u,\"numa_node\":%d", k, d->cpu, d->numa_node);
#define F(f) printf(",\"" #f "\":%" PRIu64, d->f)
	F(wrs_posted); F(completions); F(cqes); F(bytes); F(doorbells); F(polls);
	F(empty_polls); F(qp_full); F(cq_full); F(pool_empty); F(wr_errors); F(reqs_done);
	F(provider_errors); F(sleeps); F(wakeups); F(busy_ns); F(idle_ns); F(loops);
	F(retries); F(qp_resets); F(handovers); F(rail_pauses);
#undef F
	json_hw("cycles", d->cycles);
	json_hw("instructions", d->instructions);
	json_hw("cache_misses", d->cache_misses);
	json_hw("ctx_switches", d->ctx_switches);
	printf(",\"ns_per_slice\":%.1f}", ns_per_slice(d));
}

void json_cores(const struct bench *b, const struct ferry_core_stats *before,
		const struct ferry_core_stats *after)
{
	printf("\"cores_stats\":[");
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;

		stats_delta(&after[k], &before[k], &d);
		if (k)
			printf(",");
		json_core(k, &d);
	}
	printf("]");
}

/* "key":{"n":..,"min":..,...} in us, and a comma; nothing when no sample. */
void json_lat(const char *key, const struct bench_lat *l)
{
	if (!l->n)
		return;
	printf("\"%s\":{\"n\":%" PRIu64 ",\"min\":%.3f,\"p50\":%.3f,\"avg\":%.3f,"
	       "\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f},",
	       key, l->n, (double)l->min / 1e3, (double)l->p50 / 1e3, l->avg / 1e3,
	       (double)l->p99 / 1e3, (double)l->p999 / 1e3, (double)l->max / 1e3);
}

/*
 * What the run measures and how its ports submit: "run" (bw: in flight,
 * bw_sync, lat, pingpong, idle), "inflight" (requests a port has in
 * flight at most), "refill" (in flight: resubmitted together), "prep",
 * "status_once".
 */
void json_run(const struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;

	json_str("run", bench_run_name(c));
	printf("\"inflight\":%u,\"refill\":%u,\"prep\":%s,\"status_once\":%s,", b->nreq,
	       bench_in_flight(c) ? (c->refill < b->nreq ? c->refill : b->nreq) : 0,
	       c->prep ? "true" : "false", c->status_once ? "true" : "false");
}

void print_json(const struct bench *b, const struct totals *t)
{
	const struct ferry_opts *o = &b->iopts;
	const struct bench_lat *l = &t->lat;
	uint64_t bytes = t->ok * b->size;

	printf("{");
	json_str("mode", bench_mode_name(b->cfg.mode));
	json_run(b);
	json_str("op", bench_op_name(b->cfg.op));
	json_str("nics", o->nics);
	json_str("transport", bench_transport(b));
	json_str("cores", o->cores);
	if (b->cfg.mode == BENCH_LOCAL)
		json_str("target_cores", b->topts.cores);
	else
		json_str("connect", b->cfg.connect);
	json_str("port_cpus", b->port_cpus_desc);
	json_str("idle", o->idle == FERRY_IDLE_SPIN ? "spin" : o->idle == FERRY_IDLE_CALLER ? "caller" : "adaptive");
	printf("\"size\":%" PRIu64 ",\"batch\":%u,\"ports\":%u,\"slice\":%u,\"qps\":%u,"
	       "\"depth\":%u,\"nocopy\":%s,\"verify\":%s,\"same_addr\":%s,",
	       b->size, b->nreq, b->cfg.ports, o->slice_size, o->qps_per_ep, o->wrs_per_qp,
	       b->cfg.nocopy ? "true" : "false", b->cfg.verify ? "true" : "false",
	       b->cfg.same_addr ? "true" : "false");
	printf("\"batches\":%" PRIu64 ",\"requests\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"seconds\":%.6f,\"gbps\":%.6f,\"mbps\":%.3f,\"req_per_s\":%.1f,"
	       "\"batch_lat_us\":%.3f,\"failures\":%" PRIu64 ",\"mismatched_bytes\":%" PRIu64 ",",
	       t->batches, t->ok, bytes, t->secs, (double)bytes / t->secs / 1e9,
	       (double)bytes / t->secs / 1e6, (double)t->ok / t->secs,
	       batch_lat_us(b, t), t->failures,
	       b->mismatches);
	json_str("counters", onoff(o->counters));
	/*
	 * Per request, in every run: in flight from its own submit, --sync from
	 * its batch's; --pingpong: half round trips.
	 */
	json_lat("lat_us", l);
	if (b->cfg.notify)
		printf("\"notifs_per_turn\":%u,\"notify_peers\":%u,\"notifs_per_s\":%.1f,",
		       b->cfg.notifs, b->cfg.peers, notifs_per_s(b, t));
	printf("\"cores_cpu_s\":%.6f,\"gbps_per_core_cpu\":%.6f,", (double)b->cores_cpu_ns / 1e9,
	       b->cores_cpu_ns ? (double)bytes / (double)b->cores_cpu_ns : 0.0);
	json_cores(b, b->before, b->after);
	printf("}\n");
	fflush(stdout);
}
