/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench: an ib_write_bw / ib_write_lat for ferry.
 *
 * Three modes:
 *  - one process (default): two engines, an initiator and a target, on the
 *    same NICs (the software NIC "loop" by default);
 *  - --target: only the target engine.  It maps --buffer bytes at
 *    BENCH_TARGET_ADDR (if free), fills them with the --seed pattern,
 *    registers them, prints "ferry_bench target: listening on ADDR buffer
 *    0xADDR LEN" and serves until SIGINT/SIGTERM (or --duration);
 *  - --connect HOST:PORT: only the initiator, against such a target.
 *
 * The initiator registers one buffer per port.  Each port is one thread
 * that submits a batch of requests, waits for it, checks every request and
 * starts over, until the duration ends or it ran --iters batches.  Request
 * i of port p always moves the same bytes between offset i * size of its
 * port's buffer and offset (p * batch + i) * size of the target's buffer,
 * so no two requests touch the same memory.  The --verify pattern is a
 * function of the target-buffer offset (and a seed), so both processes of
 * the two-process mode compute it on their own.
 *
 * --lat: one port, one request at a time, busy-polled with
 * ferry_batch_wait(b, 0); every request's submit-to-done time is kept and
 * summarised like ib_write_lat (typical = median).  Throughput runs time
 * every request too: from the submit of its batch to the moment the port
 * sees it ended (batch_poll), kept in memory allocated before the run
 * (bench_samples: a uniform subset when there are too many).
 *
 * --size LO:HI (or --sweep): the powers of two from LO to HI, one row each;
 * batches shrink so that they fit the buffer.
 *
 * The per-core counters printed are deltas over the run of this process's
 * cores (the initiator's; the target's in --target): with a one-sided NIC
 * the target's cores stay idle (on loop, the initiator's cores do the copy
 * themselves).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_opts.h"
#include "bench_out.h"
#include "bench_util.h"
#include "runtime/ferry.h"

/* "ferry_bench: what: why" on stderr for a call that failed with rc; returns rc. */
int report(const char *what, int rc)
{
	fprintf(stderr, "ferry_bench: %s: %s\n", what, strerror(-rc));
	return rc;
}

/* ------------------------------------------------------------------ */
/* Engines                                                             */
/* ------------------------------------------------------------------ */

/* This size's requests of every port (the same batch every time), and fresh results. */
static void size_prepare(struct bench *b, uint64_t s, unsigned step)
{
	b->size = s;
	b->step = step;
	b->nreq = bench_batch_for(&b->cfg, s);
	b->per_port = b->nreq * s;
	b->mismatches = 0;
	if (b->nreq < b->cfg.batch && !b->cfg.sweep)
		fprintf(stderr,
			"ferry_bench: batch lowered from %u to %u requests so that %u port(s) fit "
			"the %" PRIu64 "-byte buffer\n",
			b->cfg.batch, b->nreq, b->cfg.ports, b->buffer);
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];

		for (uint32_t i = 0; i < b->nreq; i++) {
			bp->reqs[i] = (struct ferry_req){
				.op = b->cfg.op,
				.local = bp->buf + i * s,
				.seg = b->seg,
				.remote = b->remote_base + req_offset(b, p, i),
				.len = s,
			};
		}
		bp->batches = bp->ok = bp->failures = bp->lat_ns = bp->end_ns = 0;
		__atomic_store_n(&bp->prog_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&bp->prog_batches, 0, __ATOMIC_RELAXED);
		bench_samples_reset(&bp->lat);
		bp->reported = 0;
	}
	buffers_prepare(b);
}

/* ------------------------------------------------------------------ */
/* Results                                                             */
/* ------------------------------------------------------------------ */

/* Every port's request latencies together (they are reset before the next size). */
static void lat_sum(struct bench *b, struct bench_lat *out)
{
	struct bench_samples *all = calloc(b->cfg.ports, sizeof(*all));

	memset(out, 0, sizeof(*out));
	if (!all) {
		report("latency summary", -ENOMEM);
		return;
	}
	/* Shallow copies: the summary may thin the arrays, which is fine now. */
	for (unsigned p = 0; p < b->cfg.ports; p++)
		all[p] = b->ports[p].lat;
	if (bench_samples_summary(all, b->cfg.ports, out))
		report("latency percentiles", -ENOMEM);
	free(all);
}

static void totals_sum(struct bench *b, struct totals *t)
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
	lat_sum(b, &t->lat);
}

/* ------------------------------------------------------------------ */
/* Set-up and teardown                                                 */
/* ------------------------------------------------------------------ */

/* Every size of the run, one row (or JSON object) each.  Exit status. */
static int bench_run(struct bench *b)
{
	bool bad = false;
	unsigned step = 0;
	struct totals t;

	stats_snap(b, b->first);
	progress_start(b);
	if (!b->cfg.json)
		print_header(b);
	for (uint64_t s = b->cfg.size; s; s = bench_next_size(&b->cfg, s), step++) {
		size_prepare(b, s, step);
		ports_run(b);
		if (b->cfg.verify)
			buffers_verify(b);
		totals_sum(b, &t);
		row_add(b, &t);
		if (b->cfg.json)
			print_json(b, &t);
		else
			print_row(b, &t);
		bad |= csv_put(b) != 0;
		bad |= t.failures || t.early || b->mismatches;
		if (t.early)
			break; /* a stuck or broken port cannot run the next size */
	}
	stats_final(b);
	if (!b->cfg.json)
		print_cores(b, b->first, b->after);
	bad |= plot_put(b) != 0;
	bad |= prom_put(b) != 0;
	return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ */

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
	int rc;

	rc = parse_cmdline(argc, argv, &b.cfg);
	if (rc >= 0)
		return rc;
	if (b.cfg.mode == BENCH_TARGET)
		return target_main(&b);
	if (bench_setup(&b)) {
		bench_teardown(&b);
		return 1;
	}
	rc = bench_run(&b);
	bench_teardown(&b);
	return rc;
}
