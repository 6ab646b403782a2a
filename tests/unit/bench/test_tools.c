/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the baseline tools of bench/tools/ (built on their own,
 * not linked to ferry): tcp_pingpong's result line.  The tool and tool.c
 * are included, its main renamed, so that its static helpers are at hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int tcp_pingpong_main(int argc, char **argv);

#define main tcp_pingpong_main
#include "bench/tools/tcp_pingpong.c"
#undef main
#include "bench/tools/tool.c"

/* tcp_pingpong's line for n samples of 1..n us (sorted), as a string. */
static void pingpong_line(uint32_t n, char *out, size_t len)
{
	uint64_t *t = calloc(n, sizeof(*t)), sum = 0;
	char *buf = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&buf, &blen);

	assert_non_null(t);
	assert_non_null(f);
	for (uint32_t i = 0; i < n; i++)
		sum += t[i] = (i + 1) * 1000ull;
	print_result(f, 8, n, t, sum);
	fclose(f);
	snprintf(out, len, "%s", buf);
	free(buf);
	free(t);
}

/*
 * Nearest rank: of 100 samples p50 is the 50th and p99 the 99th.  Before:
 * t[n / 2] and t[n * 99 / 100], the 51st and the 100th (the maximum).
 */
static void test_pingpong_percentiles(void **state)
{
	char line[256];

	(void)state;
	pingpong_line(100, line, sizeof(line));
	assert_string_equal(line, "size 8 iters 100 min_us 1.000 p50_us 50.000 avg_us 50.500 "
				  "p99_us 99.000\n");
	pingpong_line(1, line, sizeof(line));
	assert_string_equal(line, "size 8 iters 1 min_us 1.000 p50_us 1.000 avg_us 1.000 "
				  "p99_us 1.000\n");
	pingpong_line(3, line, sizeof(line));
	assert_string_equal(line, "size 8 iters 3 min_us 1.000 p50_us 2.000 avg_us 2.000 "
				  "p99_us 3.000\n");
	pingpong_line(1000, line, sizeof(line));
	assert_non_null(strstr(line, "p50_us 500.000 avg_us 500.500 p99_us 990.000\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pingpong_percentiles),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
