/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's command line (bench/bench_opts.c): defaults,
 * every flag, size suffixes, and that each refusal names the flag it is
 * about.  The Makefile links tests with libferry.a only, so the parser is
 * included here rather than linked.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../bench/bench_opts.c"

#define MAX_ARGS 32

struct parsed {
	int rc;
	struct bench_cfg cfg;
	char err[512];
};

/* Parse a NULL-terminated list of arguments (argv[0] is added). */
static void parse_v(struct parsed *r, const char *const *args)
{
	char *argv[MAX_ARGS + 2];
	int argc = 0;

	memset(r, 0, sizeof(*r));
	argv[argc++] = strdup("ferry_bench");
	for (; *args; args++) {
		assert_true(argc <= MAX_ARGS);
		argv[argc++] = strdup(*args);
	}
	argv[argc] = NULL;
	r->rc = bench_parse_args(argc, argv, &r->cfg, r->err, sizeof(r->err));
	/* String fields of cfg point into argv: test_strings keeps its own. */
	for (int i = 0; i < argc; i++)
		free(argv[i]);
}

#define PARSE(r, ...) parse_v((r), (const char *const[]){ __VA_ARGS__, NULL })

/* The arguments are accepted. */
static void expect_ok(struct parsed *r, const char *const *args)
{
	parse_v(r, args);
	if (r->rc)
		fail_msg("refused: %s", r->err);
}

#define OK(r, ...) expect_ok((r), (const char *const[]){ __VA_ARGS__, NULL })

/* The arguments are refused with -EINVAL and a message containing want. */
static void expect_bad(const char *want, const char *const *args)
{
	struct parsed r;

	parse_v(&r, args);
	if (r.rc != -EINVAL)
		fail_msg("accepted, expected an error containing '%s'", want);
	if (!strstr(r.err, want))
		fail_msg("message '%s' does not contain '%s'", r.err, want);
}

#define BAD(want, ...) expect_bad((want), (const char *const[]){ __VA_ARGS__, NULL })

static void test_defaults(void **state)
{
	struct parsed r;

	(void)state;
	parse_v(&r, (const char *const[]){ NULL });
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.cfg.op, FERRY_OP_WRITE);
	assert_int_equal(r.cfg.size, 65536);
	assert_int_equal(r.cfg.batch, 32);
	assert_int_equal(r.cfg.ports, 1);
	assert_null(r.cfg.cores);
	assert_null(r.cfg.target_cores);
	assert_null(r.cfg.nics);
	assert_true(r.cfg.duration == 3.0);
	assert_int_equal(r.cfg.iters, 0);
	assert_int_equal(r.cfg.slice, 0);
	assert_int_equal(r.cfg.qps, 0);
	assert_int_equal(r.cfg.depth, 0);
	assert_false(r.cfg.nocopy || r.cfg.spin || r.cfg.verify || r.cfg.json);
	assert_false(r.cfg.no_port_pin || r.cfg.help);
	assert_string_equal(r.err, "");
}

static void test_all_long_flags(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--op", "read", "--size", "1M", "--batch", "8", "--ports", "4", "--slice",
	   "16K", "--qps", "3", "--depth", "2K", "--duration", "1.5", "--spin", "--json",
	   "--no-port-pin");
	assert_int_equal(r.cfg.op, FERRY_OP_READ);
	assert_int_equal(r.cfg.size, 1 << 20);
	assert_int_equal(r.cfg.batch, 8);
	assert_int_equal(r.cfg.ports, 4);
	assert_int_equal(r.cfg.slice, 16384);
	assert_int_equal(r.cfg.qps, 3);
	assert_int_equal(r.cfg.depth, 2048);
	assert_true(r.cfg.duration == 1.5);
	assert_true(r.cfg.spin && r.cfg.json && r.cfg.no_port_pin);
	assert_false(r.cfg.nocopy || r.cfg.verify);

	OK(&r, "--iters", "100", "--nocopy");
	assert_int_equal(r.cfg.iters, 100);
	assert_true(r.cfg.nocopy);

	OK(&r, "--verify", "--op=write");
	assert_true(r.cfg.verify);
	assert_int_equal(r.cfg.op, FERRY_OP_WRITE);
}

static void test_short_flags(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "-s", "4K", "-n", "7", "-q", "1", "-t", "64", "-d", "loop");
	assert_int_equal(r.cfg.size, 4096);
	assert_int_equal(r.cfg.iters, 7);
	assert_int_equal(r.cfg.qps, 1);
	assert_int_equal(r.cfg.depth, 64);
	OK(&r, "-D", "0.25", "-s128");
	assert_true(r.cfg.duration == 0.25);
	assert_int_equal(r.cfg.size, 128);
	OK(&r, "-h");
	assert_true(r.cfg.help);
}

/* String values are kept as given (argv must outlive cfg, as in main). */
static void test_strings(void **state)
{
	char a0[] = "ferry_bench", a1[] = "--cores", a2[] = "0-3,8", a3[] = "--target-cores",
	     a4[] = "1", a5[] = "--nics=loop,loop";
	char *argv[] = { a0, a1, a2, a3, a4, a5, NULL };
	struct bench_cfg cfg;
	char err[256];

	(void)state;
	assert_int_equal(bench_parse_args(6, argv, &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.cores, "0-3,8");
	assert_string_equal(cfg.target_cores, "1");
	assert_string_equal(cfg.nics, "loop,loop");
	BAD("--cores", "--cores", "");
	BAD("--nics", "--nics=");
	BAD("--target-cores", "--target-cores", "");
}

static void test_size_suffixes(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "1", 1 },       { "4096", 4096 },   { "64K", 65536 },  { "64k", 65536 },
		{ "3M", 3 << 20 }, { "1m", 1 << 20 }, { "1G", 1 << 30 }, { "1g", 1 << 30 },
		{ "1048576K", 1 << 30 },
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const char *why = bench_parse_size(good[i].s, BENCH_MAX_BUFFER, &v);

		if (why)
			fail_msg("'%s' refused: %s", good[i].s, why);
		assert_int_equal(v, good[i].v);
	}
}

static void test_bad_sizes(void **state)
{
	static const char *const bad[] = {
		"0", "0K", "12Q", "-5", "", " 5", "+5", "5KB", "K", "1.5K", "0x10",
		"2G", "1073741825", "99999999999999999999999", "18446744073709551615K",
		"17179869184G",
	};
	uint64_t v = 42;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (!bench_parse_size(bad[i], BENCH_MAX_BUFFER, &v))
			fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)v);
		assert_int_equal(v, 42); /* untouched on failure */
	}
	BAD("--size '0'", "--size", "0");
	BAD("--size '12Q'", "--size", "12Q");
	BAD("--size '-5': negative", "--size", "-5");
	BAD("--size '99999999999999999999999': too large", "--size", "99999999999999999999999");
	BAD("--size '2G': too large", "-s", "2G");
	BAD("--slice '0'", "--slice", "0");
	BAD("--slice '4G'", "--slice", "4G");
	BAD("--depth '1Q'", "--depth", "1Q");
}

static void test_bad_counts(void **state)
{
	(void)state;
	BAD("--ports '0'", "--ports", "0");
	BAD("--batch '0'", "--batch", "0");
	BAD("--ports '-1'", "--ports", "-1");
	BAD("--ports '1025'", "--ports", "1025");
	BAD("--batch '2M'", "--batch", "2M"); /* no suffixes on counts */
	BAD("--batch '1048577'", "--batch", "1048577");
	BAD("--qps '0'", "--qps", "0");
	BAD("--qps 'two'", "-q", "two");
	BAD("--iters '0'", "--iters", "0");
	BAD("--iters '5x'", "-n", "5x");
	BAD("--iters '99999999999999999999'", "-n", "99999999999999999999");
	BAD("--depth '0'", "-t", "0");
}

static void test_bad_op(void **state)
{
	(void)state;
	BAD("--op 'copy'", "--op", "copy");
	BAD("--op 'READ'", "--op", "READ");
	BAD("--op ''", "--op", "");
}

static void test_duration(void **state)
{
	(void)state;
	BAD("--duration '0'", "--duration", "0");
	BAD("--duration '-1'", "--duration", "-1");
	BAD("--duration 'abc'", "--duration", "abc");
	BAD("--duration 'nan'", "--duration", "nan");
	BAD("--duration 'inf'", "--duration", "inf");
	BAD("--duration '3s'", "--duration", "3s");
	BAD("--duration '1e9'", "-D", "1e9");
	BAD("--duration and --iters", "--duration", "2", "--iters", "5");
}

static void test_getopt_errors(void **state)
{
	(void)state;
	BAD("unknown option '--bogus'", "--bogus");
	BAD("unknown option '-x'", "-x");
	BAD("unknown option '-x'", "-hx");
	BAD("option '--json' takes no value", "--json=1");
	BAD("option '--verify' takes no value", "--ver=yes");
	BAD("unknown option '--bogus=1'", "--bogus=1");
	BAD("'--size' needs a value", "--size");
	BAD("'-s' needs a value", "-s");
	BAD("unexpected argument 'extra'", "extra");
	BAD("unexpected argument 'extra'", "--spin", "extra", "--json");
}

static void test_cross_checks(void **state)
{
	struct parsed r;

	(void)state;
	BAD("--verify and --nocopy", "--verify", "--nocopy");
	BAD("exceeds the 1024 MiB cap", "--size", "1G", "--batch", "2");
	BAD("--ports 5 x --batch 1 x --size 268435456", "--ports", "5", "--batch", "1", "--size",
	    "256M");
	/* Exactly the cap is fine. */
	OK(&r, "--ports", "4", "--batch", "1", "--size", "256M");
	assert_int_equal(bench_total_bytes(&r.cfg), BENCH_MAX_BUFFER);
	/* The largest counts together must not overflow into a small product. */
	BAD("cap", "--ports", "1024", "--batch", "1048576", "--size", "1G");
	/* --help is honoured even when the rest would not check out. */
	OK(&r, "--verify", "--nocopy", "--help");
	assert_true(r.cfg.help);
}

/* The parser resets getopt: a second run sees its own arguments only. */
static void test_reparse(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--spin", "--size", "1K");
	OK(&r, "--batch", "3");
	assert_false(r.cfg.spin);
	assert_int_equal(r.cfg.size, 65536);
	assert_int_equal(r.cfg.batch, 3);
	BAD("-x", "-hx");
	OK(&r, "-h");
	assert_true(r.cfg.help);
}

/* Prefixes of long options, as getopt_long allows them. */
static void test_abbrev(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--dur", "2", "--ver");
	assert_true(r.cfg.duration == 2.0);
	assert_true(r.cfg.verify);
	BAD("ambiguous option '--s' (--size, --slice, --spin)", "--s", "1");
	BAD("ambiguous option '--no' (--nocopy, --no-port-pin)", "--no");
}

static void test_apply_defaults(void **state)
{
	struct ferry_opts o;
	struct bench_cfg cfg;

	(void)state;
	bench_cfg_default(&cfg);
	ferry_opts_default(&o);
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.cores, "0");
	assert_string_equal(o.nics, "auto");
	assert_int_equal(o.slice_size, 65536);
	assert_int_equal(o.qps_per_ep, 2);
	assert_int_equal(o.wrs_per_qp, 256);
	assert_int_equal(o.loop_nocopy, 0);
	assert_int_equal(o.idle, FERRY_IDLE_ADAPTIVE);

	/* A core list from the environment survives when --cores is absent. */
	ferry_opts_default(&o);
	o.cores = "1";
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.cores, "1");
}

static void test_apply_flags(void **state)
{
	struct ferry_opts o;
	struct bench_cfg cfg;

	(void)state;
	bench_cfg_default(&cfg);
	cfg.cores = "0-1";
	cfg.nics = "loop,loop";
	cfg.slice = 4096;
	cfg.qps = 1;
	cfg.depth = 512;
	cfg.nocopy = true;
	cfg.spin = true;
	ferry_opts_default(&o);
	o.cores = "3";
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.cores, "0-1");
	assert_string_equal(o.nics, "loop,loop");
	assert_int_equal(o.slice_size, 4096);
	assert_int_equal(o.qps_per_ep, 1);
	assert_int_equal(o.wrs_per_qp, 512);
	assert_int_equal(o.signal_every, 16);
	assert_int_equal(o.loop_nocopy, 1);
	assert_int_equal(o.idle, FERRY_IDLE_SPIN);
}

/* A shallow --depth lowers signal_every, unless the environment chose it. */
static void test_apply_depth_signal(void **state)
{
	struct ferry_opts o;
	struct bench_cfg cfg;

	(void)state;
	bench_cfg_default(&cfg);
	cfg.depth = 4;
	unsetenv("FERRY_SIGNAL_EVERY");
	ferry_opts_default(&o);
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.signal_every, 4);

	setenv("FERRY_SIGNAL_EVERY", "16", 1);
	ferry_opts_default(&o);
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.signal_every, 16);
	unsetenv("FERRY_SIGNAL_EVERY");
}

static void test_names_and_usage(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	assert_string_equal(bench_op_name(FERRY_OP_READ), "read");
	assert_string_equal(bench_op_name(FERRY_OP_WRITE), "write");
	f = open_memstream(&text, &len);
	assert_non_null(f);
	bench_usage(f, "ferry_bench");
	fclose(f);
	/* Every flag is documented. */
	for (const struct option *lo = long_opts; lo->name; lo++) {
		char flag[64];

		snprintf(flag, sizeof(flag), "--%s", lo->name);
		if (!strstr(text, flag))
			fail_msg("usage does not mention %s", flag);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_all_long_flags),
		cmocka_unit_test(test_short_flags),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_size_suffixes),
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_bad_counts),
		cmocka_unit_test(test_bad_op),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_getopt_errors),
		cmocka_unit_test(test_cross_checks),
		cmocka_unit_test(test_reparse),
		cmocka_unit_test(test_abbrev),
		cmocka_unit_test(test_apply_defaults),
		cmocka_unit_test(test_apply_flags),
		cmocka_unit_test(test_apply_depth_signal),
		cmocka_unit_test(test_names_and_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
