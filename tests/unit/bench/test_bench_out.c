/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's output helpers (bench/bench_out.c): the --csv
 * header and rows byte for byte, the --plot data and gnuplot script, the
 * PATH search behind "--plot needs gnuplot", a real plot when gnuplot is
 * installed (skipped, and said, when not), the progress line and the
 * counter formatters.  The Makefile links tests with libferry.a only, so
 * the file under test is included.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench/bench_out.c"

/* What fn(stream, args...) wrote, as a string the caller frees. */
#define CAPTURE(out, fn, ...)                                     \
	do {                                                      \
		size_t len_ = 0;                                  \
		FILE *f_ = open_memstream(&(out), &len_);         \
		assert_non_null(f_);                              \
		assert_true(fn(f_, ##__VA_ARGS__) >= 0);          \
		fclose(f_);                                       \
	} while (0)

static struct bench_row row_64k(void)
{
	return (struct bench_row){
		.mode = "bw", .op = "write", .size = 65536, .batch = 32, .ports = 1,
		.cores = 1, .counters = 1, .requests = 1000, .failures = 2, .secs = 0.5,
		.lat = { .n = 1000, .min = 1000, .p50 = 2000, .p99 = 5000, .p999 = 7000,
			 .max = 9000, .avg = 2500.0 },
	};
}

static void test_csv(void **state)
{
	struct bench_row r = row_64k();
	char *out = NULL;

	(void)state;
	CAPTURE(out, bench_csv_header);
	assert_string_equal(out, "mode,op,size,batch,ports,cores,counters,gbps,reqs_per_s,"
				 "p50_us,p99_us,p999_us,max_us,min_us,avg_us,requests,failures,"
				 "secs\n");
	free(out);
	CAPTURE(out, bench_csv_row, &r);
	assert_string_equal(out, "bw,write,65536,32,1,1,on,0.131072,2000.0,2.000,5.000,7.000,"
				 "9.000,1.000,2.500,1000,2,0.500000\n");
	free(out);
	/* Nothing measured: empty latency fields, not zeros. */
	r = (struct bench_row){ .mode = "lat", .op = "read", .size = 8, .batch = 1, .ports = 1,
				.cores = 2, .counters = 0, .failures = 5, .secs = 1.0 };
	CAPTURE(out, bench_csv_row, &r);
	assert_string_equal(out, "lat,read,8,1,1,2,off,0.000000,0.0,,,,,,,0,5,1.000000\n");
	free(out);
	/* Header and row have as many fields. */
	r = row_64k();
	assert_true(bench_row_gbps(&r) == 0.131072);
	assert_true(bench_row_rate(&r) == 2000.0);
	r.secs = 0;
	assert_true(bench_row_gbps(&r) == 0 && bench_row_rate(&r) == 0);
}

static unsigned commas(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == ',';
	return n;
}

static void test_csv_columns(void **state)
{
	struct bench_row r = row_64k();
	char *h = NULL, *a = NULL, *b = NULL;

	(void)state;
	CAPTURE(h, bench_csv_header);
	CAPTURE(a, bench_csv_row, &r);
	r.lat.n = 0;
	CAPTURE(b, bench_csv_row, &r);
	assert_int_equal(commas(h), 17);
	assert_int_equal(commas(a), commas(h));
	assert_int_equal(commas(b), commas(h));
	free(h);
	free(a);
	free(b);
}

static void test_formatters(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(bench_size_str(2, b, sizeof(b)), "2");
	assert_string_equal(bench_size_str(0, b, sizeof(b)), "0");
	assert_string_equal(bench_size_str(1000, b, sizeof(b)), "1000");
	assert_string_equal(bench_size_str(1536, b, sizeof(b)), "1536");
	assert_string_equal(bench_size_str(65536, b, sizeof(b)), "64K");
	assert_string_equal(bench_size_str(3 << 20, b, sizeof(b)), "3M");
	assert_string_equal(bench_size_str(1ull << 30, b, sizeof(b)), "1G");
	assert_string_equal(bench_size_str(1ull << 50, b, sizeof(b)), "1024T");
	assert_string_equal(bench_count_str(0, b, sizeof(b)), "0");
	assert_string_equal(bench_count_str(UINT64_MAX - 1, b, sizeof(b)), "18446744073709551614");
	assert_string_equal(bench_count_str(UINT64_MAX, b, sizeof(b)), "-");
	assert_int_equal(bench_hw_delta(10, 4), 6);
	assert_int_equal(bench_hw_delta(UINT64_MAX, 4), UINT64_MAX);
	assert_int_equal(bench_hw_delta(10, UINT64_MAX), UINT64_MAX);
}

static void test_progress(void **state)
{
	struct bench_progress p = { .size = 65536, .step = 2, .steps = 12, .elapsed = 1.54,
				    .total = 3, .gbps = 12.345 };
	char b[128];

	(void)state;
	bench_progress_fmt(b, sizeof(b), &p);
	assert_string_equal(b, "size 64K (3/12): 1.5/3.0 s, 12.35 GB/s");
	p.total = 0;
	p.done = 500;
	p.todo = 1000;
	bench_progress_fmt(b, sizeof(b), &p);
	assert_string_equal(b, "size 64K (3/12): 1.5 s, batch 500/1000, 12.35 GB/s");
	/* A short buffer truncates, never overflows. */
	bench_progress_fmt(b, 8, &p);
	assert_string_equal(b, "size 64");
}

static void test_plot_data(void **state)
{
	struct bench_row r[2] = { row_64k(), row_64k() };
	char *out = NULL;

	(void)state;
	r[1].size = 1 << 20;
	r[1].lat.n = 0;
	CAPTURE(out, bench_plot_data, r, 2);
	assert_string_equal(out, "# size gbps p99_us\n"
				 "65536 0.131072 5.000\n"
				 "1048576 2.097152 NaN\n");
	free(out);
}

static void test_plot_script(void **state)
{
	struct bench_row r[12];
	char *out = NULL;

	(void)state;
	for (unsigned i = 0; i < 12; i++) {
		r[i] = row_64k();
		r[i].size = 2ull << i;
		r[i].lat.p99 = 1000 * (i + 1);
	}
	CAPTURE(out, bench_plot_script, "/tmp/d.dat", "/tmp/it's.png", "a 'quoted'\ntitle", r,
				       12);
	/* Quotes doubled, control characters blanked: gnuplot reads them literally. */
	assert_non_null(strstr(out, "set output '/tmp/it''s.png'\n"));
	assert_non_null(strstr(out, "set title 'a ''quoted'' title'\n"));
	assert_non_null(strstr(out, "set logscale x 2\n"));
	assert_non_null(strstr(out, "set logscale y2 10\n"));
	assert_non_null(strstr(out, "set xtics (\"2\" 2, \"4\" 4, "));
	assert_non_null(strstr(out, "\"1K\" 1024, \"2K\" 2048, \"4K\" 4096) rotate by -45\n"));
	assert_non_null(strstr(out, "set xrange [1.33333:6144]\n"));
	assert_non_null(strstr(out, "set y2range [0.5:24]\n"));
	assert_non_null(strstr(out, "plot '/tmp/d.dat' using 1:2 axes x1y1"));
	assert_non_null(strstr(out, "'/tmp/d.dat' using 1:3 axes x1y2"));
	assert_non_null(strstr(out, "pngcairo"));
	free(out);
	/* No latency anywhere: no y2 range to set. */
	r[0].lat.n = 0;
	CAPTURE(out, bench_plot_script, "d", "p.png", "t", r, 1);
	assert_null(strstr(out, "y2range"));
	assert_null(strstr(out, "rotate"));
	free(out);
}

/* A scratch directory with an executable `name` (and a plain file `plain`). */
static void fake_bin(char *dir, size_t len, const char *name)
{
	char path[512];
	FILE *f;

	snprintf(dir, len, "/tmp/ferry_test_bench_out.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/plain", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
}

static void rm_fake_bin(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	snprintf(path, sizeof(path), "%s/plain", dir);
	unlink(path);
	rmdir(dir);
}

static void test_find_program(void **state)
{
	char dir[256], path[600];

	(void)state;
	fake_bin(dir, sizeof(dir), "fakeplot");
	snprintf(path, sizeof(path), "/nonexistent:%s", dir);
	assert_true(bench_find_program("fakeplot", path));
	snprintf(path, sizeof(path), "%s:", dir);
	assert_true(bench_find_program("fakeplot", path));
	assert_false(bench_find_program("plain", path)); /* not executable */
	assert_false(bench_find_program("fakeplot", "/nonexistent::/also-not"));
	assert_false(bench_find_program("fakeplot", ""));
	assert_false(bench_find_program("fakeplot", NULL));
	rm_fake_bin(dir, "fakeplot");
}

/* The real thing, when gnuplot is there: a PNG comes out, temporaries go. */
static void test_plot_gnuplot(void **state)
{
	struct bench_row r[3] = { row_64k(), row_64k(), row_64k() };
	char dir[256], png[300], err[512];
	unsigned char head[8];
	FILE *f;

	(void)state;
	if (!bench_find_program(BENCH_GNUPLOT, getenv("PATH"))) {
		print_message("gnuplot is not installed (%s): real plot not tested\n",
			      BENCH_GNUPLOT_INSTALL);
		skip();
	}
	r[1].size = 1 << 20;
	r[2].size = 16 << 20;
	r[2].lat.n = 0;
	snprintf(dir, sizeof(dir), "/tmp/ferry_test_plot.XXXXXX");
	assert_non_null(mkdtemp(dir));
	setenv("TMPDIR", dir, 1);
	snprintf(png, sizeof(png), "%s/bw.png", dir);
	if (bench_plot(r, 3, png, "test 'plot'", err, sizeof(err)))
		fail_msg("bench_plot: %s", err);
	f = fopen(png, "rb");
	assert_non_null(f);
	assert_int_equal(fread(head, 1, 8, f), 8);
	fclose(f);
	assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
	unlink(png);
	/* The data and script files were removed: the directory is empty again. */
	assert_int_equal(rmdir(dir), 0);
	unsetenv("TMPDIR");
}

/* gnuplot missing from PATH: a clear error naming the package. */
static void test_plot_no_gnuplot(void **state)
{
	struct bench_row r = row_64k();
	char err[512], *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

	(void)state;
	setenv("PATH", "/nonexistent", 1);
	assert_int_equal(bench_plot(&r, 1, "/tmp/never.png", "t", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, BENCH_GNUPLOT_INSTALL));
	if (path)
		setenv("PATH", path, 1);
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_csv_columns),
		cmocka_unit_test(test_formatters),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_plot_data),
		cmocka_unit_test(test_plot_script),
		cmocka_unit_test(test_find_program),
		cmocka_unit_test(test_plot_gnuplot),
		cmocka_unit_test(test_plot_no_gnuplot),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
