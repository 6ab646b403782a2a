/* SPDX-License-Identifier: MIT */
/*
 * Prometheus exposition: fixed counters of two cores against a golden file
 * (tests/unit/metrics/golden/prom.txt, read relative to the repo root where the tests
 * run; FERRY_UPDATE_GOLDEN=1 rewrites it after a deliberate change: review
 * the diff), -ENOSPC on every short buffer, label escaping, histograms and
 * unmeasured values through a test table, the engine wrapper on a live
 * engine, and every line of every output checked against the exposition
 * grammar by a small independent parser.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/ferry.h"
#include "runtime/metrics/histo.h"
#include "runtime/metrics/prom.h"

#define GOLDEN "tests/unit/metrics/golden/prom.txt"
#define LABEL "127.0.0.1:1234"

/* ---- the grammar checker ---- */

#define MAX_FAMILIES 128
#define MAX_SERIES 4096

struct checker {
	char fam[MAX_FAMILIES][96];
	char type[MAX_FAMILIES][16];
	unsigned nfam;
	int cur;              /* family of the last TYPE line */
	char *series[MAX_SERIES];
	unsigned nseries;
	unsigned lineno;
	const char *line;
};

/* cmocka's failure longjmps out of the test; abort() tells the compiler so. */
static void __attribute__((noreturn)) bad(const struct checker *c, const char *why)
{
	fail_msg("line %u: %s: \"%s\"", c->lineno, why, c->line);
	abort();
}

static const char *metric_name(const char *p)
{
	if (!(isalpha((unsigned char)*p) || *p == '_' || *p == ':'))
		return NULL;
	while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
		p++;
	return p;
}

static const char *label_name(const char *p)
{
	if (!(isalpha((unsigned char)*p) || *p == '_') || strncmp(p, "__", 2) == 0)
		return NULL;
	while (isalnum((unsigned char)*p) || *p == '_')
		p++;
	return p;
}

/* p at the opening quote; returns past the closing one, NULL if malformed. */
static const char *label_value(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (; *p && *p != '"'; p++)
		if (*p == '\\' && (!p[1] || !strchr("\\\"n", *++p)))
			return NULL;
	return *p == '"' ? p + 1 : NULL;
}

/* A Go ParseFloat number as Prometheus writes them: no hex, no "infinity". */
static int is_float(const char *s)
{
	int digits = 0;

	if (*s == '+' || *s == '-')
		s++;
	if (!strcmp(s, "Inf") || !strcmp(s, "NaN"))
		return 1;
	for (; isdigit((unsigned char)*s); s++)
		digits++;
	if (*s == '.')
		for (s++; isdigit((unsigned char)*s); s++)
			digits++;
	if (digits && (*s == 'e' || *s == 'E')) {
		s += s[1] == '+' || s[1] == '-' ? 2 : 1;
		if (!isdigit((unsigned char)*s))
			return 0;
		while (isdigit((unsigned char)*s))
			s++;
	}
	return digits && !*s;
}

static int find_family(const struct checker *c, const char *name, size_t n)
{
	for (unsigned i = 0; i < c->nfam; i++)
		if (strlen(c->fam[i]) == n && !strncmp(c->fam[i], name, n))
			return (int)i;
	return -1;
}

static void check_help(struct checker *c, const char *p)
{
	const char *e = metric_name(p);

	if (!e || *e != ' ')
		bad(c, "HELP without a metric name and text");
	for (p = e + 1; *p; p++)
		if (*p == '\\' && (!p[1] || !strchr("\\n", *++p)))
			bad(c, "bad escape in HELP");
}

static void check_type(struct checker *c, const char *p)
{
	const char *e = metric_name(p);
	const char *t = e ? e + 1 : NULL;

	if (!e || *e != ' ')
		bad(c, "TYPE without a metric name");
	if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
	    strcmp(t, "summary") && strcmp(t, "untyped"))
		bad(c, "unknown TYPE");
	if (find_family(c, p, (size_t)(e - p)) >= 0)
		bad(c, "second TYPE for a family");
	if (c->nfam == MAX_FAMILIES || (size_t)(e - p) >= sizeof(c->fam[0]))
		bad(c, "checker limits");
	snprintf(c->fam[c->nfam], sizeof(c->fam[0]), "%.*s", (int)(e - p), p);
	snprintf(c->type[c->nfam], sizeof(c->type[0]), "%s", t);
	if (!strcmp(t, "counter") && (e - p < 6 || strncmp(e - 6, "_total", 6)))
		bad(c, "counter name without _total");
	c->cur = (int)c->nfam++;
}

/* A sample must belong to the family of the last TYPE line. */
static void check_family(struct checker *c, const char *name, size_t n)
{
	static const char *const suffix[] = { "_bucket", "_count", "_sum" };
	const char *fam = c->cur >= 0 ? c->fam[c->cur] : "";
	size_t fl = strlen(fam);

	if (n == fl && !strncmp(name, fam, n) && strcmp(c->type[c->cur], "histogram"))
		return;
	if (c->cur >= 0 && !strcmp(c->type[c->cur], "histogram") && n > fl &&
	    !strncmp(name, fam, fl))
		for (unsigned i = 0; i < 3; i++)
			if (n - fl == strlen(suffix[i]) && !strncmp(name + fl, suffix[i], n - fl))
				return;
	bad(c, "sample outside the group of its family");
}

static void check_unique(struct checker *c, const char *s, size_t n)
{
	for (unsigned i = 0; i < c->nseries; i++)
		if (strlen(c->series[i]) == n && !strncmp(c->series[i], s, n))
			bad(c, "duplicate series");
	if (c->nseries == MAX_SERIES)
		bad(c, "checker limits");
	c->series[c->nseries++] = strndup(s, n);
}

static void check_sample(struct checker *c, const char *p)
{
	const char *e = metric_name(p), *q;

	if (!e)
		bad(c, "bad metric name");
	check_family(c, p, (size_t)(e - p));
	q = e;
	if (*q == '{') {
		for (q++; *q != '}';) {
			q = label_name(q);
			if (!q || *q != '=')
				bad(c, "bad label name");
			q = label_value(q + 1);
			if (!q)
				bad(c, "bad label value");
			if (*q == ',')
				q++;
			else if (*q != '}')
				bad(c, "labels not separated by commas");
		}
		q++;
	}
	check_unique(c, p, (size_t)(q - p));
	if (*q != ' ' || !is_float(q + 1))
		bad(c, "value is not a float");
}

static void check_line(struct checker *c, char *l)
{
	c->line = l;
	if (!strncmp(l, "# HELP ", 7))
		check_help(c, l + 7);
	else if (!strncmp(l, "# TYPE ", 7))
		check_type(c, l + 7);
	else if (l[0] != '#' && l[0])
		check_sample(c, l);
}

/* Every line of text is a comment, HELP, TYPE or sample; returns the samples. */
static unsigned check_exposition(const char *text)
{
	struct checker *c = calloc(1, sizeof(*c));
	char *copy = strdup(text), *l, *save = NULL;
	unsigned samples;

	assert_non_null(c);
	assert_non_null(copy);
	c->cur = -1;
	assert_true(text[0] == '\0' || text[strlen(text) - 1] == '\n');
	for (l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		c->lineno++;
		check_line(c, l);
	}
	samples = c->nseries;
	for (unsigned i = 0; i < c->nseries; i++)
		free(c->series[i]);
	free(copy);
	free(c);
	return samples;
}

/* ---- fixtures ---- */

/* Every counter distinct, so a row pointing at the wrong field shows. */
static void fixture(struct ferry_core_stats st[2])
{
	memset(st, 0, 2 * sizeof(st[0]));
	for (unsigned i = 0; i < 2; i++) {
		uint64_t base = i ? 1000000 : 0;

		st[i].cpu = i ? 8 : 0;
		st[i].numa_node = (int)i;
		st[i].wrs_posted = base + 123;
		st[i].completions = base + 122;
		st[i].cqes = base + 9;
		st[i].bytes = base + 8061952;
		st[i].doorbells = base + 40;
		st[i].polls = base + 5000;
		st[i].empty_polls = base + 4900;
		st[i].qp_full = base + 3;
		st[i].cq_full = base + 2;
		st[i].pool_empty = base + 1;
		st[i].slices_in_flight = base + 7;
		st[i].wr_errors = base + 11;
		st[i].retries = base + 17;
		st[i].qp_resets = base + 18;
		st[i].handovers = base + 19;
		st[i].rail_pauses = base + 20;
		st[i].ep_evictions = base + 24;
		st[i].reqs_done = base + 12;
		st[i].provider_errors = base + 13;
		st[i].sleeps = base + 14;
		st[i].wakeups = base + 15;
		st[i].loops = base + 16;
		st[i].cycles = base + 21;
		st[i].instructions = base + 22;
		st[i].cache_misses = UINT64_MAX; /* not measured: left out */
		st[i].ctx_switches = base + 23;
		st[i].lat_hz = 1000000000; /* 1 tick = 1 ns */
		st[i].lat[10] = base + 5;  /* ~1 us */
		st[i].lat[17] = 2;         /* ~65 us */
	}
	st[0].busy_ns = 1500000000;     /* 1.5 s */
	st[0].idle_ns = 123;            /* 0.000000123 s */
	st[1].busy_ns = 0;
	st[1].idle_ns = 18446744073709551614ull; /* UINT64_MAX - 1: all digits */
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *s;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	s = malloc((size_t)n + 1);
	assert_non_null(s);
	assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	fclose(f);
	return s;
}

static void write_golden(const char *text)
{
	FILE *f = fopen(GOLDEN, "w");

	if (!f)
		fail_msg("cannot write %s (run from the repo root)", GOLDEN);
	fputs(text, f);
	fclose(f);
	print_message("rewrote %s: review the diff before committing it\n", GOLDEN);
}

/* First differing line, for a readable failure. */
static void diff_lines(const char *want, const char *got)
{
	unsigned line = 1;
	size_t i = 0;

	while (want[i] && want[i] == got[i])
		line += want[i++] == '\n';
	while (i > 0 && want[i - 1] != '\n')
		i--;
	fail_msg("output differs from %s at line %u:\n want: %.*s\n  got: %.*s", GOLDEN, line,
		 (int)strcspn(want + i, "\n"), want + i, (int)strcspn(got + i, "\n"), got + i);
}

/* ---- tests ---- */

static void test_golden(void **state)
{
	struct ferry_core_stats st[2];
	static char buf[32768];
	char *want;
	int n;

	(void)state;
	fixture(st);
	n = prom_format(buf, sizeof(buf), st, 2, LABEL);
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	if (getenv("FERRY_UPDATE_GOLDEN"))
		write_golden(buf);
	want = read_text(GOLDEN);
	if (!want)
		fail_msg("golden file %s missing: run the test from the repo root "
			 "(FERRY_UPDATE_GOLDEN=1 creates it)", GOLDEN);
	if (strcmp(want, buf))
		diff_lines(want, buf);
	free(want);
	assert_true(check_exposition(buf) >= 2 * 23);  /* 23 counters, 2 cores */
}

/* Every short length fails whole: -ENOSPC, "" in buf, nothing written past len. */
static void test_enospc(void **state)
{
	struct ferry_core_stats st[2];
	static char full[32768], buf[32768 + 64];
	int n;

	(void)state;
	fixture(st);
	n = prom_format(full, sizeof(full), st, 2, LABEL);
	assert_true(n > 0);
	assert_int_equal(prom_format(NULL, 0, st, 2, LABEL), -ENOSPC);
	for (size_t len = 1; len <= (size_t)n + 1; len++) {
		int rc;

		memset(buf, 'X', sizeof(buf));
		rc = prom_format(buf, len, st, 2, LABEL);
		if (len == (size_t)n + 1) {
			assert_int_equal(rc, n);
			assert_string_equal(buf, full);
		} else {
			assert_int_equal(rc, -ENOSPC);
			assert_int_equal(buf[0], '\0');
		}
		for (size_t i = len; i < len + 64; i++)
			assert_int_equal(buf[i], 'X');
	}
}

static void test_bad_args(void **state)
{
	struct ferry_core_stats st[2];
	char buf[64];

	(void)state;
	fixture(st);
	assert_int_equal(prom_format(NULL, 10, st, 2, LABEL), -EINVAL);
	assert_int_equal(prom_format(buf, sizeof(buf), NULL, 2, LABEL), -EINVAL);
	assert_int_equal(prom_format_table(buf, sizeof(buf), NULL, st, 2, LABEL), -EINVAL);
	assert_int_equal(ferry_stats_format_prometheus(NULL, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(buf[0], '\0');
	/* No room at all is not an argument error. */
	assert_int_equal(prom_format(NULL, 0, NULL, 0, LABEL), -ENOSPC);
}

/*
 * Every field of struct ferry_core_stats after the labels (cpu, numa_node)
 * is exported by a row: a field added without a row fails here.
 */
static void test_table_covers_struct(void **state)
{
	const struct prom_table *t = prom_core_table();
	size_t first = offsetof(struct ferry_core_stats, wrs_posted);
	size_t words = (sizeof(struct ferry_core_stats) - first) / 8;
	uint8_t covered[256] = { 0 };

	(void)state;
	assert_true(words <= sizeof(covered));
	assert_int_equal(t->stride, sizeof(struct ferry_core_stats));
	for (size_t i = 0; i < t->nrows; i++) {
		const struct prom_row *r = &t->rows[i];
		size_t n = r->type == PROM_HISTOGRAM ? FERRY_HISTO_BUCKETS : 1;

		assert_true(r->off >= first && (r->off - first) / 8 + n <= words);
		for (size_t w = 0; w < n; w++)
			covered[(r->off - first) / 8 + w]++;
		if (r->type == PROM_HISTOGRAM)
			covered[(r->hz_off - first) / 8]++;
	}
	for (size_t w = 0; w < words; w++)
		if (covered[w] != 1)
			fail_msg("struct ferry_core_stats: the 8 bytes at offset %zu are %s: "
				 "one row per field in runtime/metrics/prom.c", first + 8 * w,
				 covered[w] ? "exported twice" : "not exported");
}

/* The engine-wide table exports every field of struct ferry_engine_stats
 * once (all counters). */
static void test_engine_table_covers_struct(void **state)
{
	const struct prom_table *t = prom_engine_table();
	size_t words = sizeof(struct ferry_engine_stats) / 8;
	uint8_t covered[64] = { 0 };

	(void)state;
	assert_true(words <= sizeof(covered));
	assert_int_equal(t->stride, sizeof(struct ferry_engine_stats));
	assert_true(t->engine_wide);
	for (size_t i = 0; i < t->nrows; i++) {
		assert_int_equal(t->rows[i].type, PROM_COUNTER);
		assert_true(t->rows[i].off / 8 < words);
		covered[t->rows[i].off / 8]++;
	}
	for (size_t w = 0; w < words; w++)
		if (covered[w] != 1)
			fail_msg("struct ferry_engine_stats: the 8 bytes at offset %zu are %s: "
				 "one row per field in runtime/metrics/prom.c", 8 * w,
				 covered[w] ? "exported twice" : "not exported");
}

/* No cores: the families' HELP and TYPE lines only, still valid. */
static void test_no_cores(void **state)
{
	static char buf[8192];

	(void)state;
	assert_true(prom_format(buf, sizeof(buf), NULL, 0, NULL) > 0);
	assert_int_equal(check_exposition(buf), 0);
	assert_non_null(strstr(buf, "# TYPE ferry_slices_in_flight gauge\n"));
}

static void test_escaping(void **state)
{
	struct ferry_core_stats st[2];
	static char buf[32768];

	(void)state;
	fixture(st);
	assert_true(prom_format(buf, sizeof(buf), st, 2, "a\"b\\c\nd") > 0);
	assert_non_null(strstr(buf, "ferry_loops_total{engine=\"a\\\"b\\\\c\\nd\",core=\"1\","
				    "cpu=\"8\"} 1000016\n"));
	assert_null(strstr(buf, "a\"b"));
	check_exposition(buf);
	/* An empty label is a valid label. */
	assert_true(prom_format(buf, sizeof(buf), st, 2, NULL) > 0);
	assert_non_null(strstr(buf, "ferry_cqes_total{engine=\"\",core=\"0\",cpu=\"0\"} 9\n"));
	check_exposition(buf);
}

/* ---- histograms and unmeasured values, through a table of the test's own ---- */

struct rec {
	unsigned cpu;
	uint64_t ops;
	uint64_t hz;
	uint64_t lat[FERRY_HISTO_BUCKETS];
	uint64_t cycles;      /* PROM_NONE when the PMU refused */
};

static const struct prom_row rec_rows[] = {
	{ "t_ops_total", "Ops.", PROM_COUNTER, PROM_UNIT_RAW, offsetof(struct rec, ops), 0 },
	{ "t_lat_seconds", "Latency \\ with \"quotes\"\nand a newline.", PROM_HISTOGRAM,
	  PROM_UNIT_RAW, offsetof(struct rec, lat), offsetof(struct rec, hz) },
	{ "t_cycles_total", "Cycles.", PROM_COUNTER, PROM_UNIT_RAW,
	  offsetof(struct rec, cycles), 0 },
};

static const struct prom_table rec_table = {
	rec_rows, 3, sizeof(struct rec), offsetof(struct rec, cpu), 0,
};

static void test_histogram(void **state)
{
	struct rec r[2];
	static char buf[65536];

	(void)state;
	memset(r, 0, sizeof(r));
	r[0].cpu = 3;
	r[0].hz = 1000000000;  /* 1 tick = 1 ns: bounds are 2^k - 1 ns */
	r[0].lat[0] = 1;
	r[0].lat[10] = 5;       /* [512, 1024) ns */
	r[0].lat[FERRY_HISTO_BUCKETS - 1] = 2;
	r[0].cycles = PROM_NONE;
	r[1].cpu = 4;
	r[1].hz = 3000000000;  /* 1 and 3 ticks are both 1 ns: one bucket */
	r[1].lat[2] = 4;
	r[1].cycles = 77;
	assert_true(prom_format_table(buf, sizeof(buf), &rec_table, r, 2, "e") > 0);
	check_exposition(buf);
	assert_non_null(strstr(buf, "# HELP t_lat_seconds Latency \\\\ with \"quotes\"\\nand a "
				    "newline.\n# TYPE t_lat_seconds histogram\n"));
#define S0 "{engine=\"e\",core=\"0\",cpu=\"3\""
#define S1 "{engine=\"e\",core=\"1\",cpu=\"4\""
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S0 ",le=\"0\"} 1\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S0 ",le=\"0.000000511\"} 1\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S0 ",le=\"0.000001023\"} 6\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S0 ",le=\"70368.744177663\"} 6\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S0 ",le=\"+Inf\"} 8\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_count" S0 "} 8\n"));
	assert_null(strstr(buf, "t_lat_seconds_sum"));
	/* At 3 GHz bucket 1 (1 tick) and bucket 2 (3 ticks) share le="0.000000001". */
	assert_non_null(strstr(buf, "t_lat_seconds_bucket" S1 ",le=\"0.000000001\"} 4\n"));
	assert_non_null(strstr(buf, "t_lat_seconds_count" S1 "} 4\n"));
	/* Unmeasured: no sample, the measured core keeps its own. */
	assert_null(strstr(buf, "t_cycles_total" S0));
	assert_non_null(strstr(buf, "t_cycles_total" S1 "} 77\n"));
	assert_non_null(strstr(buf, "t_ops_total" S0 "} 0\n"));
#undef S0
#undef S1
}

/* The cumulative counts never decrease and le grows along each series. */
static void test_histogram_monotonic(void **state)
{
	struct rec r;
	static char buf[65536];
	double last_le = -1;
	uint64_t last = 0;
	unsigned buckets = 0;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.hz = 2400000000;
	for (unsigned k = 0; k < FERRY_HISTO_BUCKETS; k++)
		r.lat[k] = k * 3 + 1;
	assert_true(prom_format_table(buf, sizeof(buf), &rec_table, &r, 1, "e") > 0);
	check_exposition(buf);
	for (const char *p = strstr(buf, "t_lat_seconds_bucket"); p;
	     p = strstr(p + 1, "t_lat_seconds_bucket")) {
		const char *le = strstr(p, "le=\"") + 4;
		double v = strncmp(le, "+Inf", 4) ? strtod(le, NULL) : 1e300;
		uint64_t c = strtoull(strchr(le, ' ') + 1, NULL, 10);

		assert_true(v > last_le);
		assert_true(c >= last);
		last_le = v;
		last = c;
		buckets++;
	}
	assert_true(buckets > 40);
	assert_int_equal(last, 3 * (47 * 48 / 2) + 48);
}

static void test_engine_wrapper(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	static char buf[65536];
	char want[128];
	int n;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	o.listen = "127.0.0.1:0";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	n = ferry_stats_format_prometheus(e, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	snprintf(want, sizeof(want), "ferry_loops_total{engine=\"%s\",core=\"0\",cpu=\"0\"} ",
		 ferry_engine_address(e));
	assert_non_null(strstr(buf, want));
	/* The engine-wide counters (0.5), after the cores', labelled engine only. */
	snprintf(want, sizeof(want), "\nferry_disconnects_dropped_total{engine=\"%s\"} 0\n",
		 ferry_engine_address(e));
	assert_non_null(strstr(buf, want));
	snprintf(want, sizeof(want), "\nferry_disconnects_given_up_total{engine=\"%s\"} 0\n",
		 ferry_engine_address(e));
	assert_non_null(strstr(buf, want));
	assert_true(check_exposition(buf) >= 23 + 2);  /* one core, the engine's */
	assert_int_equal(ferry_stats_format_prometheus(e, buf, 100), -ENOSPC);
	assert_int_equal(buf[0], '\0');
	ferry_engine_destroy(e);
}

/*
 * The worst record: every counter 20 digits, the largest CPU, a histogram
 * whose every bucket bound is its own series at tick rate hz.
 */
static void worst(struct ferry_core_stats *st, uint64_t hz)
{
	const size_t first = offsetof(struct ferry_core_stats, wrs_posted);

	memset(st, 0, sizeof(*st));
	for (size_t off = first; off < sizeof(*st); off += sizeof(uint64_t))
		*(uint64_t *)(void *)((char *)st + off) = UINT64_MAX - 1;
	memset(st->lat, 0, sizeof(st->lat));
	st->lat[0] = UINT64_MAX - 1; /* every cumulative count: 20 digits */
	st->lat_hz = hz;
	st->cpu = 1023;              /* CPU_SETSIZE - 1: the largest core option */
}

/*
 * FERRY_PROM_BYTES(n) always holds n cores' text: a live engine's, and
 * the worst records under the longest engine label (63 characters, the
 * size of the address) at several tick rates.  ferry.h said "about 2 KiB
 * + 3 KiB per core", which a fresh one-core engine already exceeded.
 */
static void test_buffer_bound(void **state)
{
	static const uint64_t hz[] = { 1, 3, 7, 999999937, 3000000000u };
	static struct ferry_core_stats st[64];
	static char buf[2u << 20];
	struct ferry_engine_stats es = { UINT64_MAX - 1, UINT64_MAX - 1 }; /* 20 digits */
	struct ferry_engine *e;
	struct ferry_opts o;
	char label[64];
	size_t most = 0;
	int n;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	n = ferry_stats_format_prometheus(e, buf, FERRY_PROM_BYTES(1));
	print_message("fresh engine, 1 core: %d bytes, bound %zu\n", n, (size_t)FERRY_PROM_BYTES(1));
	assert_true(n > 0);
	ferry_engine_destroy(e);
	memset(label, '9', sizeof(label) - 1);
	label[sizeof(label) - 1] = '\0';
	for (unsigned h = 0; h < sizeof(hz) / sizeof(hz[0]); h++) {
		for (unsigned i = 0; i < 64; i++)
			worst(&st[i], hz[h]);
		n = prom_format(buf, sizeof(buf), st, 64, label);
		assert_true(n > 0);
		most = (size_t)n > most ? (size_t)n : most;
		assert_true((size_t)n <= FERRY_PROM_BYTES(64));
		n = prom_format(buf, sizeof(buf), st, 1, label);
		/* and the engine-wide counters after them (0.5) */
		n += prom_format_table(buf, sizeof(buf), prom_engine_table(), &es, 1, label);
		assert_true((size_t)n <= FERRY_PROM_BYTES(1));
	}
	print_message("worst 64 cores: %zu bytes, bound %zu\n", most, (size_t)FERRY_PROM_BYTES(64));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_table_covers_struct),
		cmocka_unit_test(test_engine_table_covers_struct),
		cmocka_unit_test(test_enospc),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_no_cores),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_histogram_monotonic),
		cmocka_unit_test(test_engine_wrapper),
		cmocka_unit_test(test_buffer_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
