/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench output without an engine (see bench_out.h): --csv, --plot,
 * the progress line, counter formatting.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_out.h"

extern char **environ;

double bench_row_gbps(const struct bench_row *r)
{
	return r->secs > 0 ? (double)(r->requests * r->size) / r->secs / 1e9 : 0.0;
}

double bench_row_rate(const struct bench_row *r)
{
	return r->secs > 0 ? (double)r->requests / r->secs : 0.0;
}

int bench_csv_header(FILE *f)
{
	return fprintf(f, "mode,op,size,batch,ports,cores,counters,gbps,reqs_per_s,p50_us,p99_us,"
			  "p999_us,max_us,min_us,avg_us,requests,failures,secs\n");
}

/* One latency field in us, empty when there is none: a 0 would read as a measurement. */
static int csv_us(FILE *f, const struct bench_lat *l, double ns)
{
	return l->n ? fprintf(f, ",%.3f", ns / 1e3) : fprintf(f, ",");
}

int bench_csv_row(FILE *f, const struct bench_row *r)
{
	const struct bench_lat *l = &r->lat;
	int rc;

	rc = fprintf(f, "%s,%s,%" PRIu64 ",%u,%u,%u,%s,%.6f,%.1f", r->mode, r->op, r->size,
		     r->batch, r->ports, r->cores, r->counters ? "on" : "off", bench_row_gbps(r),
		     bench_row_rate(r));
	if (rc >= 0)
		rc = csv_us(f, l, (double)l->p50);
	if (rc >= 0)
		rc = csv_us(f, l, (double)l->p99);
	if (rc >= 0)
		rc = csv_us(f, l, (double)l->p999);
	if (rc >= 0)
		rc = csv_us(f, l, (double)l->max);
	if (rc >= 0)
		rc = csv_us(f, l, (double)l->min);
	if (rc >= 0)
		rc = csv_us(f, l, l->avg);
	if (rc >= 0)
		rc = fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%.6f\n", r->requests, r->failures, r->secs);
	return rc;
}

const char *bench_size_str(uint64_t s, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	unsigned u = 0;

	while (s && !(s & 1023) && u < sizeof(units) - 1) {
		s >>= 10;
		u++;
	}
	if (u)
		snprintf(buf, len, "%" PRIu64 "%c", s, units[u - 1]);
	else
		snprintf(buf, len, "%" PRIu64, s);
	return buf;
}

const char *bench_count_str(uint64_t v, char *buf, size_t len)
{
	if (v == UINT64_MAX)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

uint64_t bench_hw_delta(uint64_t after, uint64_t before)
{
	if (after == UINT64_MAX || before == UINT64_MAX)
		return UINT64_MAX;
	return after - before;
}

int bench_plot_data(FILE *f, const struct bench_row *rows, unsigned n)
{
	int rc = fprintf(f, "# size gbps p99_us\n");

	for (unsigned i = 0; i < n && rc >= 0; i++) {
		const struct bench_row *r = &rows[i];

		if (r->lat.n)
			rc = fprintf(f, "%" PRIu64 " %.6f %.3f\n", r->size, bench_row_gbps(r),
				     (double)r->lat.p99 / 1e3);
		else
			rc = fprintf(f, "%" PRIu64 " %.6f NaN\n", r->size, bench_row_gbps(r));
	}
	return rc;
}

/* s in single quotes for gnuplot: a quote is doubled, control characters become blanks. */
static void gp_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("''", f);
		else
			fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
	}
	fputc('\'', f);
}

/* x tics at the sizes themselves ("64K"), slanted when they would crowd. */
static void gp_xtics(FILE *f, const struct bench_row *rows, unsigned n)
{
	char b[32];

	fprintf(f, "set xtics (");
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%s\"%s\" %" PRIu64, i ? ", " : "",
			bench_size_str(rows[i].size, b, sizeof(b)), rows[i].size);
	fprintf(f, ")%s\n", n > 10 ? " rotate by -45" : "");
	/* Half a doubling of margin: one size alone still gets an x range. */
	fprintf(f, "set xrange [%.6g:%.6g]\n", (double)rows[0].size / 1.5,
		(double)rows[n - 1].size * 1.5);
}

/* The latency axis spans the measured p99s (log scale), with margin. */
static void gp_y2range(FILE *f, const struct bench_row *rows, unsigned n)
{
	double lo = INFINITY, hi = 0;

	for (unsigned i = 0; i < n; i++) {
		double us = (double)rows[i].lat.p99 / 1e3;

		if (!rows[i].lat.n || us <= 0)
			continue;
		lo = us < lo ? us : lo;
		hi = us > hi ? us : hi;
	}
	if (hi > 0)
		fprintf(f, "set y2range [%.6g:%.6g]\n", lo / 2, hi * 2);
}

int bench_plot_script(FILE *f, const char *data, const char *png, const char *title,
		      const struct bench_row *rows, unsigned n)
{
	fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
		   "  set terminal pngcairo size 1000,600 noenhanced\n"
		   "} else {\n"
		   "  set terminal png size 1000,600 noenhanced\n"
		   "}\n");
	fprintf(f, "set output ");
	gp_quote(f, png);
	fprintf(f, "\nset title ");
	gp_quote(f, title);
	fprintf(f, "\nset logscale x 2\n"
		   "set xlabel 'request size (bytes)'\n"
		   "set ylabel 'bandwidth (GB/s)'\n"
		   "set y2label 'p99 latency per request (us)'\n"
		   "set yrange [0:*]\n"
		   "set logscale y2 10\n"
		   "set ytics nomirror\n"
		   "set y2tics\n"
		   "set grid xtics ytics\n"
		   "set key top left\n");
	if (n) {
		gp_xtics(f, rows, n);
		gp_y2range(f, rows, n);
	}
	fprintf(f, "plot ");
	gp_quote(f, data);
	fprintf(f, " using 1:2 axes x1y1 with linespoints lw 2 pt 7 title 'GB/s', \\\n     ");
	gp_quote(f, data);
	return fprintf(f, " using 1:3 axes x1y2 with linespoints lw 2 pt 5 dt 2"
			  " title 'p99 latency (us)'\n");
}

bool bench_find_program(const char *name, const char *path)
{
	char dir[4096];

	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");

		/* An empty entry is the current directory, as for execvp. */
		if (n)
			snprintf(dir, sizeof(dir), "%.*s/%s", (int)n, path, name);
		else
			snprintf(dir, sizeof(dir), "./%s", name);
		if (!access(dir, X_OK))
			return true;
		path += n;
		if (*path == ':')
			path++;
	}
	return false;
}

__attribute__((format(printf, 4, 5)))
static int plot_err(int rc, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* A new temporary file ending in suffix, open for writing; its name in path. */
static FILE *tmp_open(char *path, size_t len, const char *suffix)
{
	const char *dir = getenv("TMPDIR");
	FILE *f;
	int fd;

	snprintf(path, len, "%s/ferry_bench.XXXXXX%s", dir && *dir ? dir : "/tmp", suffix);
	fd = mkstemps(path, (int)strlen(suffix));
	if (fd < 0)
		return NULL;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		unlink(path);
	}
	return f;
}

/* Run `gnuplot script`, its messages on our stderr. */
static int gnuplot_run(const char *script, char *err, size_t errlen)
{
	char *argv[] = { BENCH_GNUPLOT, (char *)script, NULL };
	pid_t pid;
	int rc, st;

	rc = posix_spawnp(&pid, BENCH_GNUPLOT, NULL, NULL, argv, environ);
	if (rc)
		return plot_err(-rc, err, errlen, "cannot run %s: %s (%s)", BENCH_GNUPLOT,
				strerror(rc), BENCH_GNUPLOT_INSTALL);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return plot_err(-errno, err, errlen, "waitpid(gnuplot): %s", strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return plot_err(-EIO, err, errlen, "gnuplot failed (%s %d) on script %s",
				WIFEXITED(st) ? "exit status" : "signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), script);
	return 0;
}

/* png must now hold a PNG: gnuplot may exit 0 after a warning and write nothing. */
static int png_check(const char *png, char *err, size_t errlen)
{
	static const unsigned char magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	unsigned char head[8];
	FILE *f = fopen(png, "rb");
	size_t got;

	if (!f)
		return plot_err(-errno, err, errlen, "gnuplot wrote no %s: %s", png, strerror(errno));
	got = fread(head, 1, sizeof(head), f);
	fclose(f);
	if (got != sizeof(head) || memcmp(head, magic, sizeof(magic)))
		return plot_err(-EIO, err, errlen, "%s is not a PNG (%zu bytes read)", png, got);
	return 0;
}

/* Write both temporary files; their names in data and script. */
static int plot_files(const struct bench_row *rows, unsigned n, const char *png, const char *title,
		      char *data, char *script, size_t len, char *err, size_t errlen)
{
	FILE *fd, *fs;
	int bad;

	fd = tmp_open(data, len, ".dat");
	if (!fd)
		return plot_err(-errno, err, errlen, "temporary file %s: %s", data, strerror(errno));
	bad = bench_plot_data(fd, rows, n) < 0;
	bad |= fclose(fd) != 0;
	fs = tmp_open(script, len, ".gp");
	if (!fs) {
		unlink(data);
		return plot_err(-errno, err, errlen, "temporary file %s: %s", script, strerror(errno));
	}
	bad |= bench_plot_script(fs, data, png, title, rows, n) < 0;
	bad |= fclose(fs) != 0;
	if (bad) {
		unlink(data);
		unlink(script);
		return plot_err(-EIO, err, errlen, "cannot write the plot's temporary files");
	}
	return 0;
}

int bench_plot(const struct bench_row *rows, unsigned n, const char *png, const char *title,
	       char *err, size_t errlen)
{
	char data[4200], script[4200];
	int rc;

	rc = plot_files(rows, n, png, title, data, script, sizeof(data), err, errlen);
	if (rc)
		return rc;
	rc = gnuplot_run(script, err, errlen);
	/* A script gnuplot failed on is kept (the message names it) for whoever debugs it. */
	if (rc == -EIO)
		return rc;
	unlink(script);
	unlink(data);
	return rc ? rc : png_check(png, err, errlen);
}

int bench_progress_fmt(char *buf, size_t len, const struct bench_progress *p)
{
	char sz[32];
	int n;

	bench_size_str(p->size, sz, sizeof(sz));
	n = snprintf(buf, len, "size %s (%u/%u): ", sz, p->step + 1, p->steps);
	if (n < 0 || (size_t)n >= len)
		return n;
	if (p->total > 0)
		n += snprintf(buf + n, len - (size_t)n, "%.1f/%.1f s", p->elapsed, p->total);
	else
		n += snprintf(buf + n, len - (size_t)n, "%.1f s, batch %" PRIu64 "/%" PRIu64,
			      p->elapsed, p->done, p->todo);
	if (n < 0 || (size_t)n >= len)
		return n;
	return n + snprintf(buf + n, len - (size_t)n, ", %.2f GB/s", p->gbps);
}
