/* SPDX-License-Identifier: MIT */
/*
 * The port threads: one per --ports, each with its own ferry port and
 * batch, kept off the CPUs of the initiator's cores when there are CPUs
 * left.  For each size they start together at a barrier and repeat
 * port_step(), the mode's turn (a round of requests in flight, a batch,
 * one request), until the duration is over or they ran --iters.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "bench.h"

/*
 * One turn of a port's loop, as the flags ask: a round of --batch requests
 * kept in flight, a batch (--sync), one ping-pong, a WRITE and its
 * notification (--notify), or an idle gap and a request (--idle); --lat
 * runs a chunk of single requests at once, one turn each, so that its
 * timed loop is not this one.  *turns: how many turns it ran.
 */
static int port_step(struct bench_port *bp, uint64_t n, uint64_t *turns)
{
	const struct bench_cfg *c = &bp->b->cfg;

	*turns = 1;
	if (c->idle)
		return idle_run(bp, n);
	if (c->pingpong)
		return pingpong_run(bp, n);
	if (c->notify)
		return notify_run(bp, n);
	if (c->lat)
		return lat_chunk(bp, n, turns);
	if (c->sync)
		return batch_run(bp, n);
	return flight_run(bp, n);
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
	uint64_t n = 0, turns;

	/* poll_pause's sleeps: the default 50 us timer slack would dwarf them. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	pthread_barrier_wait(&b->start);
	/* At least one batch, even when the thread starts past a tiny duration. */
	do {
		if (port_step(bp, n, &turns))
			break;
		n += turns;
		__atomic_store_n(&bp->prog_bytes, bp->ok * b->size, __ATOMIC_RELAXED);
		__atomic_store_n(&bp->prog_batches, n, __ATOMIC_RELAXED);
	} while (!port_done(b, n));
	if (bench_in_flight(&b->cfg)) /* a turn leaves requests in flight */
		flight_drain(bp, n);
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
void ports_place(struct bench *b)
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
	return bench_thread_on(&bp->thread, port_main, bp, b->pin ? &b->port_cpus : NULL);
}

/* One size: every port runs until the duration ends or its --iters. */
int ports_run(struct bench *b)
{
	unsigned p;
	int rc;

	rc = -pthread_barrier_init(&b->start, NULL, b->cfg.ports + 1);
	if (rc)
		return report("pthread_barrier_init", rc);
	for (p = 0; p < b->cfg.ports; p++) {
		rc = port_spawn(b, &b->ports[p]);
		if (rc) {
			report("pthread_create", rc);
			/* The barrier counts every port: the ones never started cannot come. */
			exit(1);
		}
	}
	stats_snap(b, b->before);
	b->cores_cpu_ns = cores_cpu_ns(&b->core_threads);
	b->start_ns = now_ns();
	b->deadline_ns = b->start_ns + (uint64_t)(b->cfg.duration * 1e9);
	pthread_barrier_wait(&b->start);
	b->end_ns = b->start_ns;
	ports_join(b);
	for (p = 0; p < b->cfg.ports; p++)
		if (b->ports[p].end_ns > b->end_ns)
			b->end_ns = b->ports[p].end_ns;
	b->cores_cpu_ns = cores_cpu_ns(&b->core_threads) - b->cores_cpu_ns;
	stats_settle(b, b->after);
	pthread_barrier_destroy(&b->start);
	return 0;
}
