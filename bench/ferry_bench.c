/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench: an ib_write_bw for ferry, in one process.
 *
 * Two engines, an initiator and a target, on the same NICs (the software
 * NIC "loop" by default).  The target registers one buffer; the initiator
 * registers one buffer per port and opens the target's segment.  Each port
 * is one thread that submits a batch of requests, waits for it, checks every
 * request and starts over, until the duration ends or it ran --iters
 * batches.  Request i of port p always moves the same bytes between the
 * same offsets (p * batch + i) * size on both sides, so no two requests ever
 * touch the same memory and --verify can check the final state byte by
 * byte.
 *
 * The per-core counters printed are deltas over the run of the initiator's
 * cores: with a one-sided NIC the target's cores stay idle (on loop, the
 * initiator's cores do the copy themselves).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_opts.h"
#include "runtime/ferry.h"

#define WAIT_MS 10000
/* Failed requests reported one by one per port; the rest are only counted. */
#define MAX_REPORTS 10
#define PAGE 4096

struct bench;

struct bench_port {
	pthread_t thread;
	unsigned idx;
	struct bench *b;
	struct ferry_port *port;
	struct ferry_batch *batch;
	struct ferry_req *reqs;
	uint8_t *buf;        /* batch * size bytes, registered with the initiator */
	/* results, written by the port's thread, read after join */
	uint64_t batches;
	uint64_t ok;         /* requests DONE with all their bytes */
	uint64_t failures;
	uint64_t lat_ns;     /* sum of submit -> wait returned */
	uint64_t end_ns;
	int err;             /* the call that stopped the thread early, if any */
	bool stuck;          /* a batch is still pending: do not free it */
	unsigned reported;
};

struct bench {
	struct bench_cfg cfg;
	struct ferry_opts iopts, topts;
	struct ferry_engine *init, *target;
	ferry_seg_t seg;
	uint8_t *tbuf;
	uint64_t per_port;   /* batch * size */
	uint64_t total;      /* ports * per_port: each side's bytes */
	struct bench_port *ports;
	pthread_barrier_t start;
	uint64_t start_ns, deadline_ns, end_ns;
	unsigned ncores;
	bool pin;            /* port threads run on port_cpus */
	cpu_set_t port_cpus;
	char port_cpus_desc[256];
	struct ferry_core_stats *before, *after;
	uint64_t mismatches; /* --verify: bytes that differ */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int report(const char *what, int rc)
{
	fprintf(stderr, "ferry_bench: %s: %s\n", what, strerror(-rc));
	return rc;
}

/* ------------------------------------------------------------------ */
/* Buffers and the --verify pattern                                    */
/* ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * The byte expected at absolute position x of the logical buffer.  It
 * depends on the position, not only on its offset in a slice or page, so a
 * slice copied to the wrong place shows up.
 */
static uint8_t pattern_at(uint64_t x, uint64_t *w)
{
	if ((x & 7) == 0)
		*w = mix64(x >> 3);
	return (uint8_t)(*w >> ((x & 7) * 8));
}

static void pattern_fill(uint8_t *buf, uint64_t len, uint64_t pos)
{
	uint64_t w = mix64(pos >> 3);

	for (uint64_t i = 0; i < len; i++)
		buf[i] = pattern_at(pos + i, &w);
}

/* Bytes of buf that differ from the pattern; *first is the first one. */
static uint64_t pattern_check(const uint8_t *buf, uint64_t len, uint64_t pos, uint64_t *first)
{
	uint64_t w = mix64(pos >> 3), bad = 0;

	for (uint64_t i = 0; i < len; i++) {
		if (buf[i] == pattern_at(pos + i, &w))
			continue;
		if (!bad++)
			*first = i;
	}
	return bad;
}

/* Page-aligned and touched, so that page faults stay out of the run. */
static uint8_t *buf_alloc(uint64_t len)
{
	uint64_t alen = (len + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	uint8_t *p = aligned_alloc(PAGE, alen);

	if (p)
		memset(p, 0, alen);
	return p;
}

/*
 * Whoever is the source of the data gets the pattern (or a constant
 * without --verify); the destination stays zero so that --verify sees
 * bytes that never arrived.
 */
static void buffers_fill(struct bench *b)
{
	bool write = b->cfg.op == FERRY_OP_WRITE;

	if (!b->cfg.verify) {
		for (unsigned p = 0; p < b->cfg.ports && write; p++)
			memset(b->ports[p].buf, 0xa5, b->per_port);
		if (!write)
			memset(b->tbuf, 0x5a, b->total);
		return;
	}
	if (!write) {
		pattern_fill(b->tbuf, b->total, 0);
		return;
	}
	for (unsigned p = 0; p < b->cfg.ports; p++)
		pattern_fill(b->ports[p].buf, b->per_port, p * b->per_port);
}

static int buffers_alloc(struct bench *b)
{
	b->tbuf = buf_alloc(b->total);
	if (!b->tbuf)
		return report("target buffer", -ENOMEM);
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		b->ports[p].buf = buf_alloc(b->per_port);
		if (!b->ports[p].buf)
			return report("initiator buffer", -ENOMEM);
	}
	buffers_fill(b);
	return 0;
}

/* --verify: the destination of every port must hold the pattern now. */
static void buffers_verify(struct bench *b)
{
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		uint64_t pos = p * b->per_port, first = 0, bad, w;
		const uint8_t *dst = b->cfg.op == FERRY_OP_WRITE ? b->tbuf + pos : b->ports[p].buf;

		bad = pattern_check(dst, b->per_port, pos, &first);
		if (!bad)
			continue;
		b->mismatches += bad;
		w = mix64((pos + first) >> 3);
		fprintf(stderr,
			"ferry_bench: verify: port %u request %" PRIu64 " byte %" PRIu64
			": expected 0x%02x, got 0x%02x (%" PRIu64 " bytes wrong on this port)\n",
			p, first / b->cfg.size, first % b->cfg.size,
			(unsigned)(uint8_t)(w >> (((pos + first) & 7) * 8)), dst[first], bad);
	}
}

/* ------------------------------------------------------------------ */
/* Engines                                                             */
/* ------------------------------------------------------------------ */

/*
 * Initiator options: defaults, then FERRY_* from the environment, then the
 * flags.  The target copies them but keeps the adaptive idle policy: its
 * cores have nothing to do with a one-sided NIC, and spinning would steal
 * the CPUs the initiator's cores copy on.  The initiator listens on any
 * port so that a fixed FERRY_LISTEN only applies to the target.
 */
static int opts_build(struct bench *b)
{
	int rc;

	ferry_opts_default(&b->iopts);
	rc = ferry_opts_from_env(&b->iopts);
	if (rc)
		return report("FERRY_* environment", rc);
	bench_apply_opts(&b->cfg, &b->iopts);
	b->topts = b->iopts;
	b->topts.cores = b->cfg.target_cores ? b->cfg.target_cores : b->iopts.cores;
	b->topts.idle = FERRY_IDLE_ADAPTIVE;
	b->iopts.listen = "127.0.0.1:0";
	return 0;
}

static int engine_open(const char *role, const struct ferry_opts *o, struct ferry_engine **e)
{
	char what[256];
	int rc;

	rc = ferry_engine_create(o, e);
	if (rc) {
		snprintf(what, sizeof(what), "ferry_engine_create(%s, cores '%s', nics '%s')",
			 role, o->cores ? o->cores : "", o->nics ? o->nics : "");
		return report(what, rc);
	}
	return 0;
}

static int engines_open(struct bench *b)
{
	const char *addr;
	char what[256];
	int rc;

	rc = engine_open("target", &b->topts, &b->target);
	if (rc)
		return rc;
	rc = ferry_mem_register(b->target, b->tbuf, b->total);
	if (rc)
		return report("ferry_mem_register(target buffer)", rc);
	rc = engine_open("initiator", &b->iopts, &b->init);
	if (rc)
		return rc;
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		rc = ferry_mem_register(b->init, b->ports[p].buf, b->per_port);
		if (rc)
			return report("ferry_mem_register(initiator buffer)", rc);
	}
	addr = ferry_engine_address(b->target);
	rc = ferry_segment_open(b->init, addr, &b->seg);
	if (rc) {
		snprintf(what, sizeof(what), "ferry_segment_open(%s)", addr ? addr : "(null)");
		return report(what, rc);
	}
	b->ncores = ferry_engine_cores(b->init);
	return 0;
}

/* Port p's requests: the same batch every time, at distinct offsets. */
static int port_setup(struct bench *b, struct bench_port *bp)
{
	uint64_t remote = (uint64_t)(uintptr_t)b->tbuf + bp->idx * b->per_port;
	int rc;

	bp->b = b;
	rc = ferry_port_create(b->init, &bp->port);
	if (rc)
		return report("ferry_port_create", rc);
	rc = ferry_batch_create(bp->port, b->cfg.batch, &bp->batch);
	if (rc)
		return report("ferry_batch_create", rc);
	bp->reqs = calloc(b->cfg.batch, sizeof(*bp->reqs));
	if (!bp->reqs)
		return report("request array", -ENOMEM);
	for (uint32_t i = 0; i < b->cfg.batch; i++) {
		bp->reqs[i] = (struct ferry_req){
			.op = b->cfg.op,
			.local = bp->buf + i * b->cfg.size,
			.seg = b->seg,
			.remote = remote + i * b->cfg.size,
			.len = b->cfg.size,
		};
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* The port threads                                                    */
/* ------------------------------------------------------------------ */

/* Request i of batch n did not end DONE with all its bytes: say so. */
static void req_failed(struct bench_port *bp, uint64_t n, uint32_t i,
		       const struct ferry_req_status *st)
{
	bp->failures++;
	if (bp->reported == MAX_REPORTS)
		fprintf(stderr, "ferry_bench: port %u: more failures, counted only\n", bp->idx);
	if (bp->reported++ >= MAX_REPORTS)
		return;
	fprintf(stderr,
		"ferry_bench: port %u batch %" PRIu64 " request %u: %s, error %d (%s), %" PRIu64
		" of %" PRIu64 " bytes\n",
		bp->idx, n, i, ferry_state_name(st->state), st->error,
		st->error ? strerror(-st->error) : "none", st->bytes, bp->b->cfg.size);
}

static void batch_check(struct bench_port *bp, uint64_t n)
{
	struct ferry_req_status st;
	uint32_t cnt = bp->b->cfg.batch;

	for (uint32_t i = 0; i < cnt; i++) {
		int rc = ferry_req_status(bp->batch, i, &st);

		if (rc) {
			st = (struct ferry_req_status){ .state = FERRY_FAILED, .error = rc };
			req_failed(bp, n, i, &st);
		} else if (st.state != FERRY_DONE || st.bytes != bp->b->cfg.size) {
			req_failed(bp, n, i, &st);
		} else {
			bp->ok++;
		}
	}
}

/* Stop this port: the batch cannot be reused (or waited for) any more. */
static int port_stop(struct bench_port *bp, uint64_t n, const char *call, int rc)
{
	fprintf(stderr, "ferry_bench: port %u batch %" PRIu64 ": %s: %s\n", bp->idx, n, call,
		strerror(-rc));
	bp->err = rc;
	return rc;
}

static int batch_run(struct bench_port *bp, uint64_t n)
{
	uint64_t t0 = now_ns();
	int rc;

	rc = ferry_submit(bp->batch, bp->reqs, bp->b->cfg.batch);
	if (rc < 0)
		return port_stop(bp, n, "ferry_submit", rc);
	rc = ferry_batch_wait(bp->batch, WAIT_MS);
	bp->lat_ns += now_ns() - t0;
	bp->batches++;
	if (rc == -ETIMEDOUT) {
		/* Requests are still in flight: the batch's memory must live on. */
		bp->stuck = true;
		batch_check(bp, n);
		return port_stop(bp, n, "ferry_batch_wait (10 s, requests still pending)", rc);
	}
	if (rc && rc != -EIO)
		return port_stop(bp, n, "ferry_batch_wait", rc);
	batch_check(bp, n);
	rc = ferry_batch_reset(bp->batch);
	if (rc)
		return port_stop(bp, n, "ferry_batch_reset", rc);
	return 0;
}

static bool port_done(const struct bench *b, uint64_t n)
{
	if (b->cfg.iters)
		return n >= b->cfg.iters;
	return now_ns() >= b->deadline_ns;
}

static void *port_main(void *arg)
{
	struct bench_port *bp = arg;
	struct bench *b = bp->b;
	uint64_t n = 0;

	pthread_barrier_wait(&b->start);
	/* At least one batch, even when the thread starts past a tiny duration. */
	do {
		if (batch_run(bp, n++))
			break;
	} while (!port_done(b, n));
	bp->end_ns = now_ns();
	return NULL;
}

/* "0-1,4" for a message; "none" when empty. */
static void cpus_describe(const cpu_set_t *set, char *out, size_t len)
{
	size_t used = 0;
	int lo = -1;

	out[0] = '\0';
	for (int cpu = 0; cpu <= CPU_SETSIZE; cpu++) {
		bool in = cpu < CPU_SETSIZE && CPU_ISSET(cpu, set);

		if (in && lo < 0)
			lo = cpu;
		if (in || lo < 0 || used >= len)
			continue;
		if (lo == cpu - 1)
			used += (size_t)snprintf(out + used, len - used, "%s%d", used ? "," : "", lo);
		else
			used += (size_t)snprintf(out + used, len - used, "%s%d-%d", used ? "," : "",
						 lo, cpu - 1);
		lo = -1;
	}
	if (!out[0])
		snprintf(out, len, "none");
}

/*
 * Keep the port threads off the initiator's CPUs when there are CPUs left.
 * Otherwise the scheduler tends to wake a port thread on the CPU of the core
 * that woke it, where it preempts that core mid-pass: seen on a 2-CPU host
 * with --nocopy, up to 10 us of core busy time per slice instead of 0.3 us.
 */
static void ports_place(struct bench *b)
{
	struct ferry_core_stats st;
	cpu_set_t set;

	if (b->cfg.no_port_pin || sched_getaffinity(0, sizeof(set), &set))
		goto unpinned;
	for (unsigned k = 0; k < b->ncores; k++)
		if (!ferry_core_stats(b->init, k, &st) && st.cpu < CPU_SETSIZE)
			CPU_CLR(st.cpu, &set);
	if (!CPU_COUNT(&set))
		goto unpinned;
	b->pin = true;
	b->port_cpus = set;
	cpus_describe(&set, b->port_cpus_desc, sizeof(b->port_cpus_desc));
	return;
unpinned:
	snprintf(b->port_cpus_desc, sizeof(b->port_cpus_desc), "any");
}

static int port_spawn(struct bench *b, struct bench_port *bp)
{
	pthread_attr_t attr;
	int rc;

	rc = pthread_attr_init(&attr);
	if (rc)
		return -rc;
	if (b->pin)
		rc = pthread_attr_setaffinity_np(&attr, sizeof(b->port_cpus), &b->port_cpus);
	if (!rc)
		rc = pthread_create(&bp->thread, &attr, port_main, bp);
	pthread_attr_destroy(&attr);
	return -rc;
}

static void stats_snap(const struct bench *b, struct ferry_core_stats *s)
{
	for (unsigned k = 0; k < b->ncores; k++)
		if (ferry_core_stats(b->init, k, &s[k]))
			memset(&s[k], 0, sizeof(s[k]));
}

/*
 * A core adds a poll's completions to its counters after it has ended the
 * requests of that poll, so a snapshot taken right after the last wait can
 * miss the last burst.  Give the cores up to 100 ms to catch up.
 */
static void stats_settle(const struct bench *b, struct ferry_core_stats *s)
{
	struct timespec ms = { .tv_nsec = 1000000 };
	bool settled = false;

	for (int tries = 0; tries < 100 && !settled; tries++) {
		stats_snap(b, s);
		settled = true;
		for (unsigned k = 0; k < b->ncores; k++)
			settled &= s[k].completions == s[k].wrs_posted;
		if (!settled)
			nanosleep(&ms, NULL);
	}
}

static int ports_run(struct bench *b)
{
	unsigned p;
	int rc;

	rc = -pthread_barrier_init(&b->start, NULL, b->cfg.ports + 1);
	if (rc)
		return report("pthread_barrier_init", rc);
	ports_place(b);
	for (p = 0; p < b->cfg.ports; p++) {
		rc = port_spawn(b, &b->ports[p]);
		if (rc) {
			report("pthread_create", rc);
			/* The barrier counts every port: the ones never started cannot come. */
			exit(1);
		}
	}
	stats_snap(b, b->before);
	b->start_ns = now_ns();
	b->deadline_ns = b->start_ns + (uint64_t)(b->cfg.duration * 1e9);
	pthread_barrier_wait(&b->start);
	b->end_ns = b->start_ns;
	for (p = 0; p < b->cfg.ports; p++) {
		pthread_join(b->ports[p].thread, NULL);
		if (b->ports[p].end_ns > b->end_ns)
			b->end_ns = b->ports[p].end_ns;
	}
	stats_settle(b, b->after);
	pthread_barrier_destroy(&b->start);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Results                                                             */
/* ------------------------------------------------------------------ */

struct totals {
	uint64_t batches, ok, failures, lat_ns;
	double secs;
	bool early; /* a port stopped on an error */
};

static void totals_sum(const struct bench *b, struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		const struct bench_port *bp = &b->ports[p];

		t->batches += bp->batches;
		t->ok += bp->ok;
		t->failures += bp->failures;
		t->lat_ns += bp->lat_ns;
		t->early |= bp->err != 0;
	}
	t->secs = (double)(b->end_ns - b->start_ns) / 1e9;
}

/* after - before of every counter; cpu and node from after. */
static void stats_delta(const struct ferry_core_stats *a, const struct ferry_core_stats *bf,
			struct ferry_core_stats *d)
{
	*d = *a;
#define SUB(f) d->f = a->f - bf->f
	SUB(wrs_posted); SUB(completions); SUB(cqes); SUB(bytes); SUB(doorbells);
	SUB(polls); SUB(empty_polls); SUB(qp_full); SUB(cq_full); SUB(pool_empty);
	SUB(wr_errors); SUB(reqs_done); SUB(provider_errors); SUB(sleeps); SUB(wakeups);
	SUB(busy_ns); SUB(idle_ns); SUB(loops);
#undef SUB
}

static double ns_per_slice(const struct ferry_core_stats *d)
{
	return d->completions ? (double)d->busy_ns / (double)d->completions : 0.0;
}

static void print_table(const struct bench *b, const struct totals *t)
{
	const struct ferry_opts *o = &b->iopts;
	uint64_t bytes = t->ok * b->cfg.size;

	printf("# ferry_bench: %s, nics %s, cores %s (target %s, ports on cpus %s), slice %u, "
	       "qps %u, depth %u, idle %s, %s%s\n",
	       bench_op_name(b->cfg.op), o->nics, o->cores, b->topts.cores, b->port_cpus_desc,
	       o->slice_size,
	       o->qps_per_ep, o->wrs_per_qp, o->idle == FERRY_IDLE_SPIN ? "spin" : "adaptive",
	       o->loop_nocopy ? "nocopy" : "copy", b->cfg.verify ? ", verify" : "");
	printf("%-5s %10s %6s %5s %9s %14s %8s %8s %12s %12s %8s\n", "op", "size", "batch",
	       "ports", "batches", "bytes", "secs", "GB/s", "req/s", "batch_us", "failures");
	printf("%-5s %10" PRIu64 " %6u %5u %9" PRIu64 " %14" PRIu64 " %8.3f %8.3f %12.0f %12.2f %8"
	       PRIu64 "\n",
	       bench_op_name(b->cfg.op), b->cfg.size, b->cfg.batch, b->cfg.ports, t->batches,
	       bytes, t->secs, (double)bytes / t->secs / 1e9, (double)t->ok / t->secs,
	       t->batches ? (double)t->lat_ns / (double)t->batches / 1e3 : 0.0, t->failures);
	printf("\n%4s %4s %11s %11s %10s %11s %11s %8s %8s %10s %8s %9s %9s %9s\n", "core", "cpu",
	       "wrs_posted", "completions", "doorbells", "polls", "empty_polls", "qp_full",
	       "cq_full", "pool_empty", "sleeps", "busy_ms", "idle_ms", "ns/slice");
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;

		stats_delta(&b->after[k], &b->before[k], &d);
		printf("%4u %4u %11" PRIu64 " %11" PRIu64 " %10" PRIu64 " %11" PRIu64 " %11" PRIu64
		       " %8" PRIu64 " %8" PRIu64 " %10" PRIu64 " %8" PRIu64 " %9.1f %9.1f %9.1f\n",
		       k, d.cpu, d.wrs_posted, d.completions, d.doorbells, d.polls, d.empty_polls,
		       d.qp_full, d.cq_full, d.pool_empty, d.sleeps, (double)d.busy_ns / 1e6,
		       (double)d.idle_ns / 1e6, ns_per_slice(&d));
		if (d.wr_errors || d.provider_errors)
			printf("     core %u: wr_errors %" PRIu64 ", provider_errors %" PRIu64 "\n", k,
			       d.wr_errors, d.provider_errors);
	}
}

/* A JSON string: user-given names may hold quotes or control characters. */
static void json_str(const char *key, const char *s)
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

static void json_core(unsigned k, const struct ferry_core_stats *d)
{
	printf("{\"core\":%u,\"cpu\":%u,\"numa_node\":%d", k, d->cpu, d->numa_node);
#define F(f) printf(",\"" #f "\":%" PRIu64, d->f)
	F(wrs_posted); F(completions); F(cqes); F(bytes); F(doorbells); F(polls);
	F(empty_polls); F(qp_full); F(cq_full); F(pool_empty); F(wr_errors); F(reqs_done);
	F(provider_errors); F(sleeps); F(wakeups); F(busy_ns); F(idle_ns); F(loops);
#undef F
	printf(",\"ns_per_slice\":%.1f}", ns_per_slice(d));
}

static void print_json(const struct bench *b, const struct totals *t)
{
	const struct ferry_opts *o = &b->iopts;
	uint64_t bytes = t->ok * b->cfg.size;

	printf("{");
	json_str("op", bench_op_name(b->cfg.op));
	json_str("nics", o->nics);
	json_str("cores", o->cores);
	json_str("target_cores", b->topts.cores);
	json_str("port_cpus", b->port_cpus_desc);
	json_str("idle", o->idle == FERRY_IDLE_SPIN ? "spin" : "adaptive");
	printf("\"size\":%" PRIu64 ",\"batch\":%u,\"ports\":%u,\"slice\":%u,\"qps\":%u,"
	       "\"depth\":%u,\"nocopy\":%s,\"verify\":%s,",
	       b->cfg.size, b->cfg.batch, b->cfg.ports, o->slice_size, o->qps_per_ep,
	       o->wrs_per_qp, o->loop_nocopy ? "true" : "false", b->cfg.verify ? "true" : "false");
	printf("\"batches\":%" PRIu64 ",\"requests\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"seconds\":%.6f,\"gbps\":%.6f,\"req_per_s\":%.1f,\"batch_lat_us\":%.3f,"
	       "\"failures\":%" PRIu64 ",\"mismatched_bytes\":%" PRIu64 ",\"cores_stats\":[",
	       t->batches, t->ok, bytes, t->secs, (double)bytes / t->secs / 1e9,
	       (double)t->ok / t->secs,
	       t->batches ? (double)t->lat_ns / (double)t->batches / 1e3 : 0.0, t->failures,
	       b->mismatches);
	for (unsigned k = 0; k < b->ncores; k++) {
		struct ferry_core_stats d;

		stats_delta(&b->after[k], &b->before[k], &d);
		if (k)
			printf(",");
		json_core(k, &d);
	}
	printf("]}\n");
}

/* ------------------------------------------------------------------ */
/* Set-up and teardown                                                 */
/* ------------------------------------------------------------------ */

static int bench_alloc(struct bench *b)
{
	b->per_port = b->cfg.size * b->cfg.batch;
	b->total = bench_total_bytes(&b->cfg);
	b->ports = calloc(b->cfg.ports, sizeof(*b->ports));
	if (!b->ports)
		return report("port array", -ENOMEM);
	for (unsigned p = 0; p < b->cfg.ports; p++)
		b->ports[p].idx = p;
	return buffers_alloc(b);
}

static int bench_setup(struct bench *b)
{
	int rc;

	rc = opts_build(b);
	if (!rc)
		rc = bench_alloc(b);
	if (!rc)
		rc = engines_open(b);
	for (unsigned p = 0; !rc && p < b->cfg.ports; p++)
		rc = port_setup(b, &b->ports[p]);
	if (rc)
		return rc;
	b->before = calloc(b->ncores, sizeof(*b->before));
	b->after = calloc(b->ncores, sizeof(*b->after));
	if (!b->before || !b->after)
		return report("stats arrays", -ENOMEM);
	return 0;
}

/*
 * Ports and batches first, then the initiator (it may still hold requests
 * against the target's memory), then the target, then the memory.  A stuck
 * batch and its port are left to the engine's destroy, which ends what is
 * in flight; the batch itself is leaked on purpose: freeing it under a core
 * that may still write its status would be worse.
 */
static void bench_teardown(struct bench *b)
{
	for (unsigned p = 0; b->ports && p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];

		if (!bp->stuck) {
			if (bp->batch)
				ferry_batch_destroy(bp->batch);
			if (bp->port)
				ferry_port_destroy(bp->port);
		}
		free(bp->reqs);
	}
	ferry_engine_destroy(b->init);
	ferry_engine_destroy(b->target);
	for (unsigned p = 0; b->ports && p < b->cfg.ports; p++)
		free(b->ports[p].buf);
	free(b->ports);
	free(b->tbuf);
	free(b->before);
	free(b->after);
}

static int parse_cmdline(int argc, char **argv, struct bench_cfg *cfg)
{
	char err[512];

	if (bench_parse_args(argc, argv, cfg, err, sizeof(err))) {
		fprintf(stderr, "ferry_bench: %s\n", err);
		return 2;
	}
	if (cfg->help) {
		bench_usage(stdout, argv[0]);
		return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	static struct bench b;
	struct totals t;
	int rc;

	rc = parse_cmdline(argc, argv, &b.cfg);
	if (rc >= 0)
		return rc;
	if (bench_setup(&b) || ports_run(&b)) {
		bench_teardown(&b);
		return 1;
	}
	if (b.cfg.verify)
		buffers_verify(&b);
	totals_sum(&b, &t);
	if (b.cfg.json)
		print_json(&b, &t);
	else
		print_table(&b, &t);
	bench_teardown(&b);
	return t.failures || t.early || b.mismatches ? 1 : 0;
}
