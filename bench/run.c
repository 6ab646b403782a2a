/* SPDX-License-Identifier: MIT */
/*
 * A run of the one-process and --connect modes: every size in turn (one,
 * or the powers of two of a sweep), each with its requests laid out, the
 * ports run, the results summed over the ports, printed and written to
 * --csv; at the end the per-core tables, --plot and --prom.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/*
 * This size's requests of every port (the same batch every time), and
 * fresh results; --prep's prepared sets, --pingpong's hand-shake.
 */
static int size_prepare(struct bench *b, uint64_t s, unsigned step)
{
	b->size = s;
	b->step = step;
	b->nreq = bench_batch_for(&b->cfg, s);
	b->per_port = b->nreq * s;
	b->mismatches = 0;
	b->unverified = 0;
	if (b->nreq < b->cfg.batch && !b->cfg.sweep)
		fprintf(stderr,
			"ferry_bench: batch lowered from %u to %u requests so that %u port(s) fit "
			"the %" PRIu64 "-byte buffer\n",
			b->cfg.batch, b->nreq, b->cfg.ports, b->buffer);
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];

		for (uint32_t i = 0; i < b->nreq; i++) {
			uint32_t slot = b->cfg.same_addr ? 0 : i;

			bp->reqs[i] = (struct ferry_req){
				.op = b->cfg.op,
				.local = bp->buf + slot * s,
				.seg = b->seg,
				.remote = b->remote_base + req_offset(b, p, slot),
				.len = s,
			};
		}
		bp->batches = bp->ok = bp->failures = bp->lat_ns = bp->end_ns = 0;
		bp->warm_failures = 0;
		__atomic_store_n(&bp->prog_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&bp->prog_batches, 0, __ATOMIC_RELAXED);
		bench_samples_reset(&bp->lat);
		bench_samples_reset(&bp->warm);
		bench_samples_reset(&bp->floor);
		bp->reported = 0;
	}
	buffers_prepare(b);
	if (b->cfg.pingpong)
		return pingpong_size(b);
	return ports_prep(b);
}

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

/* Every size of the run, one row (or JSON object) each.  Exit status. */
int bench_run(struct bench *b)
{
	bool bad = false;
	unsigned step = 0;
	struct totals t;

	stats_snap(b, b->first);
	progress_start(b);
	if (!b->cfg.json)
		print_header(b);
	for (uint64_t s = b->cfg.size; s; s = bench_next_size(&b->cfg, s), step++) {
		if (size_prepare(b, s, step)) {
			bad = true;
			break;
		}
		if (b->cfg.idle)
			idle_window(b);
		ports_run(b);
		if (b->cfg.verify)
			buffers_verify(b);
		if (b->cfg.idle)
			idle_floor(b);
		totals_sum(b, &t);
		row_add(b, &t);
		if (b->cfg.idle)
			idle_print(b, &t);
		else if (b->cfg.json)
			print_json(b, &t);
		else
			print_row(b, &t);
		bad |= csv_put(b) != 0;
		bad |= t.failures || t.early || b->mismatches || b->unverified;
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
