/* SPDX-License-Identifier: MIT */
/*
 * --idle SECONDS: what an idle engine costs, and how fast it wakes up.
 * First the engines of this process (initiator and target; a --connect
 * initiator alone) sit idle for SECONDS while the main thread sleeps:
 * their CPU over that window is getrusage of the process minus the main
 * thread's own, as % of one core.  Then one port sends --iters small
 * requests, each after BENCH_IDLE_GAP_MS of idleness (cold: the cores have
 * gone to sleep and must be woken) and each again at once (warm: the cores
 * still spin), timed like --lat, submit to seen done.  The first cold one
 * comes right after the window.  Goals: under 1 % of a core idle, and a
 * request at an idle engine starting within ~50 us (cold - warm).  Then,
 * as a yardstick, the machine's own wake-up of a thread asleep on the
 * core's CPU, without ferry (wakefloor.c): the "floor" row.
 *
 * A --target reports its CPU the same way over the time it served
 * (mode_target.c); --target --idle SECONDS serves that long.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"

/* The goals the numbers are printed against. */
#define GOAL_CPU_PCT 1.0
#define GOAL_WAKE_US 50.0
#define FLOOR_MAX_SAMPLES 200 /* at BENCH_IDLE_GAP_MS each: 2 s at most */

static uint64_t tv_ns(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* The process's and the thread's times are sampled apart (and the kernel
 * accounts them at tick granularity): over a short window the difference
 * can shrink, which must read as 0, not wrap. */
static uint64_t ns_delta(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* The process's CPU so far apart from this thread's.  cpu_since on the same thread. */
void cpu_snap(struct cpu_use *c)
{
	struct rusage all, me;

	getrusage(RUSAGE_SELF, &all);
	getrusage(RUSAGE_THREAD, &me);
	c->wall_ns = now_ns();
	/* The kernel splits a thread's and its process's time into user and
	 * system apart: this thread's user (or system) time can read more
	 * than the process's, which must read 0, not wrap. */
	c->user_ns = ns_delta(tv_ns(all.ru_utime), tv_ns(me.ru_utime));
	c->sys_ns = ns_delta(tv_ns(all.ru_stime), tv_ns(me.ru_stime));
}

/* c (a cpu_snap) becomes what the others used since. */
void cpu_since(struct cpu_use *c)
{
	struct cpu_use now;

	cpu_snap(&now);
	c->wall_ns = now.wall_ns - c->wall_ns;
	c->user_ns = ns_delta(now.user_ns, c->user_ns);
	c->sys_ns = ns_delta(now.sys_ns, c->sys_ns);
}

double cpu_pct(const struct cpu_use *c)
{
	return c->wall_ns ? 100.0 * (double)(c->user_ns + c->sys_ns) / (double)c->wall_ns : 0.0;
}

/* Loops and sleeps of every core of e so far (what they did while idle). */
static void cores_sum(struct ferry_engine *e, uint64_t *loops, uint64_t *sleeps)
{
	struct ferry_core_stats st;

	for (unsigned k = 0; e && k < ferry_engine_cores(e); k++) {
		if (ferry_core_stats(e, k, &st))
			continue;
		*loops += st.loops;
		*sleeps += st.sleeps;
	}
}

/* The window: no port thread exists, the main thread sleeps. */
void idle_window(struct bench *b)
{
	struct timespec ts = { (time_t)b->cfg.idle,
			       (long)((b->cfg.idle - (double)(time_t)b->cfg.idle) * 1e9) };
	uint64_t loops = 0, sleeps = 0;

	cores_sum(b->init, &loops, &sleeps);
	cores_sum(b->target, &loops, &sleeps);
	b->idle_loops = loops;
	b->idle_sleeps = sleeps;
	cpu_snap(&b->idle_cpu);
	while (nanosleep(&ts, &ts))
		;
	cpu_since(&b->idle_cpu);
	loops = sleeps = 0;
	cores_sum(b->init, &loops, &sleeps);
	cores_sum(b->target, &loops, &sleeps);
	b->idle_loops = loops - b->idle_loops;
	b->idle_sleeps = sleeps - b->idle_sleeps;
}

/* Sample n: an idle gap (the window before the first), a cold request, a warm one. */
int idle_run(struct bench_port *bp, uint64_t n)
{
	struct timespec gap = { 0, (long)BENCH_IDLE_GAP_MS * 1000000L };
	struct bench_samples cold;
	uint64_t failed;
	int rc;

	if (n)
		nanosleep(&gap, NULL);
	rc = lat_run(bp, n);
	if (n == 0)
		bp->first_ns = bp->lat_ns;
	if (rc)
		return rc;
	cold = bp->lat;
	bp->lat = bp->warm;
	failed = bp->failures;
	rc = lat_run(bp, n);
	bp->warm_failures += bp->failures - failed;
	bp->warm = bp->lat;
	bp->lat = cold;
	return rc;
}

/*
 * After the samples, the engines idle again: the same gap and wake-up
 * with a bare thread on the CPU of the initiator's first core, woken from
 * the port CPUs.  A cold request cannot start sooner than this.
 */
void idle_floor(struct bench *b)
{
	struct bench_port *bp = &b->ports[0];
	struct ferry_core_stats st;
	uint64_t n = bp->lat.seen;

	if (n > FLOOR_MAX_SAMPLES)
		n = FLOOR_MAX_SAMPLES;
	b->floor_cpu = ferry_core_stats(b->init, 0, &st) ? -1 : (int)st.cpu;
	b->floor_rc = wake_floor_measure(b->floor_cpu, b->pin ? &b->port_cpus : NULL,
					 n ? (unsigned)n : 1, BENCH_IDLE_GAP_MS, &bp->floor);
}

/* The CPU line of a window: --idle's, and --target's when it stops. */
void cpu_print(const char *what, const struct cpu_use *c)
{
	double pct = cpu_pct(c);

	printf("# %s %.2f s: %.3f %% of one core (user %.1f ms, system %.1f ms; goal < %.0f %%: %s)\n",
	       what, (double)c->wall_ns / 1e9, pct, (double)c->user_ns / 1e6,
	       (double)c->sys_ns / 1e6, GOAL_CPU_PCT, pct < GOAL_CPU_PCT ? "met" : "NOT met");
}

static void idle_json(const struct bench *b, const struct bench_lat *cold,
		      const struct bench_lat *warm, const struct bench_lat *floor)
{
	const struct cpu_use *c = &b->idle_cpu;

	printf("{");
	json_str("mode", bench_mode_name(b->cfg.mode));
	json_run(b);
	json_str("op", bench_op_name(b->cfg.op));
	json_str("nics", b->iopts.nics);
	json_str("transport", bench_transport(b));
	json_str("cores", b->iopts.cores);
	printf("\"size\":%" PRIu64 ",\"idle_s\":%.3f,\"cpu_pct\":%.4f,\"cpu_user_ms\":%.3f,"
	       "\"cpu_sys_ms\":%.3f,\"idle_loops\":%" PRIu64 ",\"idle_sleeps\":%" PRIu64
	       ",\"gap_ms\":%u,\"first_us\":%.3f,",
	       b->size, (double)c->wall_ns / 1e9, cpu_pct(c), (double)c->user_ns / 1e6,
	       (double)c->sys_ns / 1e6, b->idle_loops, b->idle_sleeps, BENCH_IDLE_GAP_MS,
	       (double)b->ports[0].first_ns / 1e3);
	printf("\"cold_failures\":%" PRIu64 ",\"warm_failures\":%" PRIu64 ",",
	       b->rows[b->nrows - 2].failures, b->rows[b->nrows - 1].failures);
	json_lat("cold", cold);
	json_lat("warm", warm);
	if (floor) {
		printf("\"floor_cpu\":%d,", b->floor_cpu);
		json_lat("floor", floor);
	}
	json_cores(b, b->before, b->after);
	printf("}\n");
}

/* The floor's line: what of a cold request's extra is the machine's. */
static void floor_print(const struct bench *b, const struct bench_lat *floor, double extra)
{
	double f = (double)floor->p50 / 1e3;

	if (b->floor_rc) {
		printf("# wake-up floor not measured: %s\n", strerror(-b->floor_rc));
		return;
	}
	printf("# floor: this machine wakes a thread asleep in poll(2) on cpu %d from the port cpus "
	       "in %.2f us (p50; the same gap, no ferry)",
	       b->floor_cpu, f);
	printf("; cold - warm - floor = %.2f us%s\n", extra - f,
	       extra < f ? " (below 0: the waiting thread ran the pass, no wake-up on the way)" : "");
}

/* The window's CPU, then cold and warm wake-up latencies (t: the cold
 * ones) and the machine's floor. */
void idle_print(struct bench *b, const struct totals *t)
{
	struct bench_port *bp = &b->ports[0];
	struct bench_lat warm, floor = { 0 };
	uint64_t cold_failures;
	double extra;

	if (bench_samples_summary(&bp->warm, 1, &warm) ||
	    (!b->floor_rc && bench_samples_summary(&bp->floor, 1, &floor)))
		report("latency percentiles", -ENOMEM);
	/* ok and failures count the warm ones too */
	cold_failures = t->failures - bp->warm_failures;
	b->rows[b->nrows - 1].requests = t->lat.n;
	b->rows[b->nrows - 1].failures = cold_failures;
	row_add_lat(b, "idle_warm", &warm, bp->warm_failures);
	if (b->cfg.json) {
		idle_json(b, &t->lat, &warm, b->floor_rc ? NULL : &floor);
		return;
	}
	cpu_print("engines idle", &b->idle_cpu);
	printf("# cores over the window: %" PRIu64 " loop passes, %" PRIu64 " sleeps\n",
	       b->idle_loops, b->idle_sleeps);
	print_lat_row("cold", b->size, &t->lat, cold_failures);
	print_lat_row("warm", b->size, &warm, bp->warm_failures);
	if (!b->floor_rc)
		print_lat_row("floor", 0, &floor, 0);
	extra = ((double)t->lat.p50 - (double)warm.p50) / 1e3;
	printf("# first request after the window: %.2f us; a cold request (after %u ms idle) "
	       "takes %.2f us more than a warm one (p50; goal: starts within ~%.0f us: %s)\n",
	       (double)bp->first_ns / 1e3, BENCH_IDLE_GAP_MS, extra, GOAL_WAKE_US,
	       extra <= GOAL_WAKE_US ? "met" : "NOT met");
	floor_print(b, &floor, extra);
	fflush(stdout);
}
