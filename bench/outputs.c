/* SPDX-License-Identifier: MIT */
/*
 * The output files the user names: --csv (a row per size, flushed as it
 * comes), --plot (gnuplot over every row, at the end) and --prom (the
 * engine's counters in the Prometheus text format, at the end).  They are
 * opened, or checked, before anything is measured.  The formats are
 * bench_out.c's; this file ties them to a run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* This size's results as a row of --csv and a point of --plot (--idle: the cold ones). */
void row_add(struct bench *b, const struct totals *t)
{
	struct bench_row *r = &b->rows[b->nrows++];

	*r = (struct bench_row){
		.mode = b->cfg.idle ? "idle_cold" : bench_run_name(&b->cfg),
		.op = bench_op_name(b->cfg.op),
		.size = b->size,
		.batch = b->nreq,
		.ports = b->cfg.ports,
		.cores = b->ncores,
		.counters = b->iopts.counters,
		.requests = t->ok,
		.failures = t->failures,
		.secs = t->secs,
		.lat = t->lat,
	};
}

/* One more row of latencies only, at this size (--idle's warm ones; bench_alloc made room). */
void row_add_lat(struct bench *b, const char *mode, const struct bench_lat *l,
		 uint64_t failures)
{
	struct bench_row *r = &b->rows[b->nrows++];

	*r = b->rows[b->nrows - 2];
	r->mode = mode;
	r->requests = l->n;
	r->failures = failures;
	r->lat = *l;
}

/* Write and flush each row as it comes: an interrupted sweep keeps its rows. */
int csv_put(struct bench *b)
{
	if (!b->csv)
		return 0;
	for (; b->csv_rows < b->nrows; b->csv_rows++) {
		if (bench_csv_row(b->csv, &b->rows[b->csv_rows]) >= 0 && !fflush(b->csv))
			continue;
		fprintf(stderr, "ferry_bench: --csv %s: %s\n", b->cfg.csv, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* gnuplot runs at the end: check now that it may write where --plot says. */
static bool plot_dir_ok(const char *png)
{
	const char *slash = strrchr(png, '/');
	char dir[4096];

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == png)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - png), png);
	if (!access(dir, W_OK | X_OK))
		return true;
	fprintf(stderr, "ferry_bench: --plot %s: cannot write in %s: %s\n", png, dir,
		strerror(errno));
	return false;
}

/* An output file the user named: the message says which flag. */
static FILE *output_open(const char *flag, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		fprintf(stderr, "ferry_bench: %s %s: %s\n", flag, path, strerror(errno));
	return f;
}

/*
 * Open --csv and --prom, and make sure --plot can run, before anything is
 * measured: a typo in a path must not cost a 10-minute sweep.
 */
int outputs_open(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;

	if (c->plot && !bench_find_program(BENCH_GNUPLOT, getenv("PATH"))) {
		fprintf(stderr, "ferry_bench: --plot needs gnuplot, which is not installed: %s\n",
			BENCH_GNUPLOT_INSTALL);
		return -ENOENT;
	}
	if (c->plot && !plot_dir_ok(c->plot))
		return -EACCES;
	if (c->prom && !strcmp(c->prom, "-")) {
		b->prom = stdout;
	} else if (c->prom) {
		b->prom = output_open("--prom", c->prom);
		if (!b->prom)
			return -EIO;
	}
	if (c->csv) {
		b->csv = output_open("--csv", c->csv);
		if (!b->csv)
			return -EIO;
		if (bench_csv_header(b->csv) < 0 || fflush(b->csv)) {
			fprintf(stderr, "ferry_bench: --csv %s: %s\n", c->csv, strerror(errno));
			return -EIO;
		}
	}
	return 0;
}

/* --plot: the rows through gnuplot. */
int plot_put(struct bench *b)
{
	const struct ferry_opts *o = &b->iopts;
	char title[512], err[512];

	if (!b->cfg.plot || !b->nrows)
		return 0;
	snprintf(title, sizeof(title),
		 "ferry_bench %s %s: nics %s, cores %s, %u port(s), batch %u, slice %u, %s, counters %s",
		 bench_run_name(&b->cfg), bench_op_name(b->cfg.op), o->nics, o->cores,
		 b->cfg.ports, b->cfg.batch, o->slice_size, b->cfg.nocopy ? "nocopy" : "copy",
		 onoff(o->counters));
	if (bench_plot(b->rows, b->nrows, b->cfg.plot, title, err, sizeof(err))) {
		fprintf(stderr, "ferry_bench: --plot: %s\n", err);
		return -EIO;
	}
	fprintf(stderr, "ferry_bench: --plot: wrote %s\n", b->cfg.plot);
	return 0;
}

/* --prom: the engine's counters in the Prometheus text format. */
int prom_put(struct bench *b)
{
	size_t len = 4096 + 8192 * (size_t)b->ncores;
	char *buf = NULL;
	int n = -ENOSPC;

	if (!b->prom)
		return 0;
	/* The size is a guess ("about 2 KiB + 3 KiB per core"): grow on -ENOSPC. */
	for (; n == -ENOSPC && len <= (64u << 20); len *= 2) {
		char *nb = realloc(buf, len);

		if (!nb)
			break;
		buf = nb;
		n = ferry_stats_format_prometheus(b->self, buf, len);
	}
	if (n < 0) {
		free(buf);
		return report("ferry_stats_format_prometheus", n);
	}
	fwrite(buf, 1, (size_t)n, b->prom);
	free(buf);
	if (fflush(b->prom) || ferror(b->prom))
		return report(b->cfg.prom, -EIO);
	return 0;
}
