/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench output that touches no engine: the --csv rows, the --plot
 * data and gnuplot script (and running gnuplot), the progress line, and the
 * small formatters of the counter table.  Kept apart from the bench's main
 * so that tests/unit/bench/test_bench_out.c can check every byte of them.
 */
#ifndef FERRY_BENCH_OUT_H
#define FERRY_BENCH_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_util.h"

/* What --plot needs and how to get it (Debian). */
#define BENCH_GNUPLOT "gnuplot"
#define BENCH_GNUPLOT_INSTALL "apt-get install -y gnuplot-nox"

/* One size of a run: a row of the table, of --csv and a point of --plot. */
struct bench_row {
	const char *mode;  /* "bw" (throughput) or "lat" (--lat) */
	const char *op;    /* "read" or "write" */
	uint64_t size;     /* bytes per request */
	uint32_t batch;    /* requests per batch at this size */
	uint32_t ports;
	unsigned cores;    /* initiator cores */
	int counters;      /* engine option counters (1 on, 0 off) */
	uint64_t requests; /* ended DONE with all their bytes */
	uint64_t failures;
	double secs;
	struct bench_lat lat; /* per request, ns; lat.n == 0: none measured */
};

/* GB/s (10^9 bytes) and requests/s of a row; 0 when no time passed. */
double bench_row_gbps(const struct bench_row *r);
double bench_row_rate(const struct bench_row *r);

/* The --csv header line (with its newline).  fprintf's result. */
int bench_csv_header(FILE *f);

/*
 * One --csv line: mode,op,size,batch,ports,cores,counters,gbps,reqs_per_s,
 * p50_us,p99_us,p999_us,max_us,min_us,avg_us,requests,failures,secs.  The
 * latency fields are empty when nothing was measured.
 */
int bench_csv_row(FILE *f, const struct bench_row *r);

/* "64K", "1M", "3G" when s is a whole multiple, else bytes ("1000"). */
const char *bench_size_str(uint64_t s, char *buf, size_t len);

/* "12345", or "-" for UINT64_MAX (a hardware counter the kernel refused). */
const char *bench_count_str(uint64_t v, char *buf, size_t len);

/* after - before of a hardware counter; UINT64_MAX when either is. */
uint64_t bench_hw_delta(uint64_t after, uint64_t before);

/*
 * --plot data: "size gbps p99_us" per row after a comment line; p99 is
 * NaN (gnuplot: no point) when nothing was measured.
 */
int bench_plot_data(FILE *f, const struct bench_row *rows, unsigned n);

/*
 * The gnuplot script that draws data (bench_plot_data) into png: GB/s on
 * the left axis, p99 latency (us, log scale) on the right, size on a log2
 * x axis labelled 2, 64K, 1M...  title, data and png are quoted for
 * gnuplot.  pngcairo when gnuplot has it, else png.
 */
int bench_plot_script(FILE *f, const char *data, const char *png, const char *title,
		      const struct bench_row *rows, unsigned n);

/* Whether an executable name is on path (a $PATH-style list; NULL: "/usr/bin:/bin"). */
bool bench_find_program(const char *name, const char *path);

/*
 * Draw rows into png: data and script in temporary files (removed after),
 * then gnuplot, then a check that png is a PNG.  0, or -errno with the
 * reason in err.
 */
int bench_plot(const struct bench_row *rows, unsigned n, const char *png, const char *title,
	       char *err, size_t errlen);

/* Where a run is, for the progress line. */
struct bench_progress {
	uint64_t size;
	unsigned step, steps; /* this size is step + 1 of steps */
	double elapsed;       /* seconds into this size */
	double total;         /* seconds this size runs; 0 with --iters */
	uint64_t done, todo;  /* --iters: batches done and to do per port */
	double gbps;          /* over the last interval */
};

/* "size 64K (3/12): 1.5/3.0 s, 12.34 GB/s" (with --iters: "1.5 s, batch 500/1000"). */
int bench_progress_fmt(char *buf, size_t len, const struct bench_progress *p);

#endif /* FERRY_BENCH_OUT_H */
