/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's command line (bench/bench_opts.c, with the
 * checks across flags of bench_cfg.c and --help of bench_usage.c): defaults,
 * every flag, size suffixes and ranges, the two-process flags, and that
 * each refusal names the flag it is about; and of its engine-free helpers
 * (bench/bench_util.c: the --verify pattern, the --lat percentiles, the
 * preallocated latency samples).  The
 * Makefile links tests with libferry.a only, so they are included here
 * rather than linked.
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

#include "bench/bench_opts.c"
#include "bench/bench_cfg.c"
#include "bench/bench_usage.c"
#include "bench/bench_util.c"

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
	assert_false(r.cfg.no_port_pin || r.cfg.help || r.cfg.hugepages);
	assert_string_equal(r.err, "");
	/* the flags added for the two-process, latency and sweep modes */
	assert_int_equal(r.cfg.mode, BENCH_LOCAL);
	assert_int_equal(r.cfg.size_max, 65536);
	assert_int_equal(r.cfg.seed, 1);
	assert_int_equal(r.cfg.buffer, 0);
	assert_int_equal(r.cfg.remote_addr, 0);
	assert_null(r.cfg.listen);
	assert_null(r.cfg.connect);
	assert_false(r.cfg.lat || r.cfg.sweep || r.cfg.duration_set);
	/* output flags: none, and the engine's counters setting is kept */
	assert_null(r.cfg.csv);
	assert_null(r.cfg.plot);
	assert_null(r.cfg.prom);
	assert_int_equal(r.cfg.counters, -1);
	/* requests in flight, resubmitted as they end */
	assert_false(r.cfg.sync || r.cfg.status_once || r.cfg.prep || r.cfg.pingpong);
	assert_true(r.cfg.idle == 0);
	assert_int_equal(r.cfg.refill, 8); /* 32 in flight, 4 sub-batches */
	/* The one-process buffer is still ports x batch x size. */
	assert_int_equal(bench_buffer_bytes(&r.cfg), 32 * 65536);
	assert_int_equal(bench_batch_for(&r.cfg, 65536), 32);
	assert_int_equal(bench_next_size(&r.cfg, 65536), 0);
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
	assert_false(r.cfg.nocopy || r.cfg.verify || r.cfg.same_addr);

	OK(&r, "--same-addr");
	assert_true(r.cfg.same_addr);
	/* Requests that share their bytes leave nothing per request to check. */
	BAD("--verify and --same-addr exclude each other", "--same-addr", "--verify");

	OK(&r, "--iters", "100", "--nocopy");
	assert_int_equal(r.cfg.iters, 100);
	assert_true(r.cfg.nocopy);

	OK(&r, "--hugepages"); /* both halves of a cma run take it */
	assert_true(r.cfg.hugepages);
	OK(&r, "--target", "--hugepages");
	assert_true(r.cfg.hugepages);

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

/* Sizes go through the runtime's parser: the same words as FERRY_SLICE_SIZE. */
static void test_shared_number_parser(void **state)
{
	uint64_t v = 0;

	(void)state;
	BAD("--size '5KB': bad suffix or trailing garbage (K, M or G)", "--size", "5KB");
	BAD("--size ' 5': not a decimal number", "--size", " 5");
	BAD("--batch '2M': not a decimal number (no K/M/G suffix here)", "--batch", "2M");
	BAD("--iters '5x': not a decimal number (no K/M/G suffix here)", "-n", "5x");
	/* Zero is the bench's refusal, not the runtime's: the runtime takes it. */
	BAD("--batch '0': must be greater than 0", "--batch", "0");
	assert_null(ferry_parse_num("0", 0, 10, &v));
	assert_int_equal(v, 0);
	assert_null(ferry_parse_num("2G", 1, UINT64_MAX, &v));
	assert_int_equal(v, 2ull << 30);
	assert_string_equal(ferry_parse_num("11", 0, 10, &v), "too large");
	assert_string_equal(ferry_parse_num("1K", 1, 1023, &v), "too large");
	assert_int_equal(v, 2ull << 30); /* untouched on a refusal */
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
	/* strtod's other forms: hex (16 s, a quarter second), an exponent. */
	BAD("--duration '0x10': not a number", "--duration", "0x10");
	BAD("--duration '0x0.4': not a number", "--duration", "0x0.4");
	BAD("--duration '1e1': not a number", "--duration", "1e1");
	BAD("--idle '0x1': not a number", "--idle", "0x1");
	BAD("--duration '.': not a number", "--duration", ".");
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
	BAD("ambiguous option '--s' (--size, --slice, --spin, --seed, --sweep, --sync, --status-once, --secret, --same-addr)", "--s", "1");
	/* An exact name wins over the longer names it prefixes. */
	OK(&r, "--target");
	assert_int_equal(r.cfg.mode, BENCH_TARGET);
	BAD("ambiguous option '--ta' (--target-cores, --target)", "--ta");
	BAD("ambiguous option '--no' (--nocopy, --no-port-pin, --notify, --notifs)", "--no");
}

/* --target and --connect, with what each accepts. */
static void test_two_process_flags(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--target");
	assert_int_equal(r.cfg.mode, BENCH_TARGET);
	assert_false(r.cfg.duration_set); /* runs until a signal */
	assert_int_equal(bench_buffer_bytes(&r.cfg), BENCH_DEFAULT_BUFFER);

	OK(&r, "--target", "--listen", "0.0.0.0:9000", "--buffer", "64M", "--seed", "7",
	   "--cores", "1", "--nics", "rxe0", "-D", "10", "--json", "--spin", "--slice", "32K",
	   "-q", "1", "-t", "64");
	assert_int_equal(r.cfg.mode, BENCH_TARGET);
	assert_non_null(r.cfg.listen); /* argv was freed: only check it was set */
	OK(&r, "--target", "--listen", "10.99.0.1:0"); /* port 0 = any, for a listener */

	OK(&r, "--connect", "10.99.0.1:18515", "--remote-addr", "0x7e0000000000", "--buffer",
	   "64M", "--op", "read", "--verify", "--size", "1M", "--batch", "8");
	assert_int_equal(r.cfg.mode, BENCH_INITIATOR);
	assert_int_equal(r.cfg.remote_addr, 0x7e0000000000ull);
	assert_int_equal(r.cfg.buffer, 64 << 20);
	assert_int_equal(bench_buffer_bytes(&r.cfg), 64 << 20);
	assert_int_equal(bench_batch_for(&r.cfg, 1 << 20), 8);
	OK(&r, "--connect", "localhost:1", "--remote-addr", "7E0000001000");
	assert_int_equal(r.cfg.remote_addr, 0x7e0000001000ull);
	/* Without --buffer the initiator assumes the target's default. */
	OK(&r, "--connect", "127.0.0.1:18515", "--size", "64M");
	assert_int_equal(bench_buffer_bytes(&r.cfg), BENCH_DEFAULT_BUFFER);
	assert_int_equal(bench_batch_for(&r.cfg, 64 << 20), 4);
	OK(&r, "--connect", "127.0.0.1:18515", "--size", "512M", "--buffer", "512M");
}

static void test_bad_hostport(void **state)
{
	(void)state;
	BAD("--connect '10.0.0.1': no port", "--connect", "10.0.0.1");
	BAD("--connect ':80': no host", "--connect", ":80");
	BAD("--connect '10.0.0.1:': bad port ''", "--connect", "10.0.0.1:");
	BAD("--connect '10.0.0.1:0': bad port '0' (1..65535)", "--connect", "10.0.0.1:0");
	BAD("--connect '10.0.0.1:65536': bad port", "--connect", "10.0.0.1:65536");
	BAD("--connect '10.0.0.1:8x': bad port", "--connect", "10.0.0.1:8x");
	BAD("--connect '10.0.0.1:+80': bad port", "--connect", "10.0.0.1:+80");
	BAD("--connect '10.0.0.1:123456': bad port", "--connect", "10.0.0.1:123456");
	BAD("host 'example.com' is not a dotted IPv4 address", "--connect", "example.com:80");
	/* inet_aton would take "1.2.3" as 1.2.0.3: the engine does not, nor do we. */
	BAD("host '1.2.3' is not a dotted IPv4 address", "--connect", "1.2.3:80");
	BAD("host '::1' is not", "--connect", "::1:80");
	BAD("--connect: empty value", "--connect", "");
	/* The listener binds a dotted address: no names at all. */
	BAD("--listen 'localhost:1': host 'localhost'", "--target", "--listen", "localhost:1");
	BAD("--listen '1.2.3.4:99999': bad port '99999' (0..65535)", "--target", "--listen",
	    "1.2.3.4:99999");
	BAD("--listen '1.2.3.4': no port", "--target", "--listen", "1.2.3.4");
	BAD("--remote-addr 'xyz': not a hexadecimal address", "--connect", "1.2.3.4:5",
	    "--remote-addr", "xyz");
	BAD("--remote-addr '0x': not a hexadecimal", "--connect", "1.2.3.4:5", "--remote-addr",
	    "0x");
	BAD("--remote-addr '0x1g'", "--connect", "1.2.3.4:5", "--remote-addr", "0x1g");
	BAD("--remote-addr '0': must not be 0", "--connect", "1.2.3.4:5", "--remote-addr", "0");
	BAD("--remote-addr '-1'", "--connect", "1.2.3.4:5", "--remote-addr", "-1");
	BAD("--remote-addr '0x10000000000000000'", "--connect", "1.2.3.4:5", "--remote-addr",
	    "0x10000000000000000");
	BAD("--seed '0'", "--target", "--seed", "0");
}

static void test_mode_conflicts(void **state)
{
	(void)state;
	BAD("--target and --connect exclude each other", "--target", "--connect", "1.2.3.4:5");
	BAD("--target and --connect exclude each other", "--connect", "1.2.3.4:5", "--target");
	/* The target only serves: the initiator's flags are mistakes there. */
	BAD("--op applies to the initiator (--connect), not to --target", "--target", "--op",
	    "read");
	BAD("--size applies to the initiator", "--target", "-s", "1M");
	BAD("--batch applies to the initiator", "--target", "--batch", "4");
	BAD("--ports applies to the initiator", "--target", "--ports", "2");
	BAD("--iters applies to the initiator", "--target", "-n", "5");
	BAD("--verify applies to the initiator", "--target", "--verify");
	BAD("--same-addr applies to the initiator", "--target", "--same-addr");
	BAD("--lat applies to the initiator", "--target", "--lat");
	BAD("--sweep applies to the initiator", "--target", "--sweep");
	BAD("--nocopy applies to the initiator", "--target", "--nocopy");
	BAD("--target-cores applies to the initiator", "--target", "--target-cores", "1");
	BAD("--remote-addr applies to the initiator", "--target", "--remote-addr", "0x1000");
	BAD("--listen needs --target", "--listen", "1.2.3.4:5");
	BAD("--listen needs --target", "--connect", "1.2.3.4:5", "--listen", "1.2.3.4:6");
	BAD("--remote-addr needs --connect", "--remote-addr", "0x1000");
	BAD("--target-cores is for the one-process mode", "--connect", "1.2.3.4:5",
	    "--target-cores", "1");
	BAD("--nocopy is for the loop NIC", "--connect", "1.2.3.4:5", "--nocopy");
	/* The initiator's buffer must fit its requests, and not exceed the target's. */
	BAD("--buffer 268435456 is smaller than --ports 1 x --size 536870912 (and the target's",
	    "--connect", "1.2.3.4:5", "--size", "512M");
	BAD("--buffer 1048576 is smaller than --ports 2 x --size 1048576", "--connect",
	    "1.2.3.4:5", "--buffer", "1M", "--ports", "2", "--size", "1M");
	BAD("--duration and --iters", "--connect", "1.2.3.4:5", "-D", "1", "-n", "3");
}

/* --size LO:HI and --sweep. */
static void test_size_ranges(void **state)
{
	struct parsed r;
	uint64_t s, n = 0;

	(void)state;
	OK(&r, "--size", "2:64M");
	assert_true(r.cfg.sweep);
	assert_int_equal(r.cfg.size, 2);
	assert_int_equal(r.cfg.size_max, 64 << 20);
	for (s = r.cfg.size; s; s = bench_next_size(&r.cfg, s), n++)
		assert_int_equal(s, 2ull << n);
	assert_int_equal(n, 26); /* 2^1 .. 2^26 */
	/* A sweep's buffer is 256 MiB by default; big sizes get smaller batches. */
	assert_int_equal(bench_buffer_bytes(&r.cfg), BENCH_DEFAULT_BUFFER);
	assert_int_equal(bench_batch_for(&r.cfg, 2), 32);
	assert_int_equal(bench_batch_for(&r.cfg, 8 << 20), 32);
	assert_int_equal(bench_batch_for(&r.cfg, 16 << 20), 16);
	assert_int_equal(bench_batch_for(&r.cfg, 64 << 20), 4);

	OK(&r, "-s", "4K:4K");
	assert_true(r.cfg.sweep);
	assert_int_equal(bench_next_size(&r.cfg, 4096), 0);
	OK(&r, "--size", "1k:1m", "--ports", "2", "--buffer", "8M");
	assert_int_equal(r.cfg.size, 1024);
	assert_int_equal(r.cfg.size_max, 1 << 20);
	assert_int_equal(bench_batch_for(&r.cfg, 1 << 20), 4);
	assert_int_equal(bench_batch_for(&r.cfg, 1024), 32);
	/* The last --size wins, range or not. */
	OK(&r, "--size", "2:8", "--size", "4K");
	assert_false(r.cfg.sweep);
	assert_int_equal(r.cfg.size_max, 4096);
	/* One process: a sweep's buffer grows to fit one request per port of the largest. */
	OK(&r, "--size", "2:512M", "--ports", "2");
	assert_int_equal(bench_buffer_bytes(&r.cfg), 1ull << 30);
	assert_int_equal(bench_batch_for(&r.cfg, 512 << 20), 1);

	OK(&r, "--sweep");
	assert_true(r.cfg.sweep);
	assert_int_equal(r.cfg.size, BENCH_SWEEP_MIN);
	assert_int_equal(r.cfg.size_max, BENCH_SWEEP_MAX);
	OK(&r, "--sweep", "--connect", "1.2.3.4:5", "--op", "read");
	assert_true(r.cfg.sweep);

	BAD("--size '64M:2': LO is larger than HI", "--size", "64M:2");
	BAD("--size '0:4K': LO '0': must be greater than 0", "--size", "0:4K");
	BAD("--size '2:0': HI '0': must be greater than 0", "--size", "2:0");
	BAD("--size ':4K': LO '': empty", "--size", ":4K");
	BAD("--size '2:': HI '': empty", "--size", "2:");
	BAD("--size '2:4:8': HI '4:8': bad suffix or trailing garbage", "--size", "2:4:8");
	BAD("--size '3:64': a range runs powers of two", "--size", "3:64");
	BAD("--size '2:96K': a range runs powers of two", "--size", "2:96K");
	BAD("--size '1:2G': HI '2G': too large", "--size", "1:2G");
	BAD("--size '-2:8': LO '-2': negative", "--size", "-2:8");
	BAD("--sweep and --size exclude each other", "--sweep", "--size", "4K");
	BAD("--sweep and --size exclude each other", "--size", "2:4K", "--sweep");
	BAD("--ports 3 x --size 536870912 exceeds the 1024 MiB buffer cap", "--ports", "3",
	    "--size", "2:512M");
	BAD("--buffer 1048576 is smaller than --ports 1 x --size 2097152", "--size", "2:2M",
	    "--buffer", "1M");
	BAD("--buffer 1048576 is smaller than --ports 1 x --size 2097152", "--size", "2M",
	    "--buffer", "1M");
	BAD("--buffer '2G'", "--buffer", "2G");
}

static void test_lat(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--lat");
	assert_true(r.cfg.lat);
	assert_int_equal(r.cfg.batch, 1);
	assert_int_equal(r.cfg.ports, 1);
	assert_int_equal(bench_buffer_bytes(&r.cfg), 65536);
	OK(&r, "--lat", "--batch", "1", "--ports", "1", "-s", "8", "-n", "1000");
	assert_int_equal(r.cfg.size, 8);
	assert_int_equal(r.cfg.iters, 1000);
	OK(&r, "--lat", "--size", "2:1K", "--connect", "10.99.0.1:18515", "--op", "read");
	assert_true(r.cfg.lat && r.cfg.sweep);
	assert_int_equal(bench_batch_for(&r.cfg, 2), 1);
	BAD("--lat sends one request at a time: --batch must be 1", "--lat", "--batch", "2");
	BAD("--lat sends one request at a time: --ports must be 1", "--ports", "4", "--lat");
}

/* How a throughput port submits: in flight (--refill), --sync, --status-once, --prep. */
static void test_run_flags(void **state)
{
	struct parsed r;

	(void)state;
	/* In flight is the default, in BENCH_DEFAULT_SUBBATCHES sub-batches (rounded up). */
	OK(&r, "--batch", "64");
	assert_false(r.cfg.sync || r.cfg.status_once || r.cfg.prep || r.cfg.pingpong);
	assert_int_equal(r.cfg.refill, 16);
	OK(&r, "--batch", "5");
	assert_int_equal(r.cfg.refill, 2);
	OK(&r, "--batch", "1");
	assert_int_equal(r.cfg.refill, 1);
	assert_string_equal(bench_run_name(&r.cfg), "bw");
	OK(&r, "--batch", "64", "--refill", "16", "--prep");
	assert_int_equal(r.cfg.refill, 16);
	assert_true(r.cfg.prep);
	OK(&r, "--batch", "8", "--refill", "8");
	assert_int_equal(r.cfg.refill, 8);
	OK(&r, "--sync", "--status-once", "--prep", "--batch", "64", "--size", "4K");
	assert_true(r.cfg.sync && r.cfg.status_once && r.cfg.prep);
	assert_string_equal(bench_run_name(&r.cfg), "bw_sync");
	/* --sync keeps the old layout: every request its own bytes. */
	assert_int_equal(bench_buffer_bytes(&r.cfg), 64 * 4096);
	OK(&r, "--lat", "--prep");
	assert_true(r.cfg.lat && r.cfg.prep);
	assert_int_equal(r.cfg.refill, 1);
	assert_string_equal(bench_run_name(&r.cfg), "lat");
	OK(&r, "--connect", "10.0.0.2:18515", "--refill", "4", "--batch", "4");
	assert_int_equal(r.cfg.refill, 4);
}

static void test_bad_run_flags(void **state)
{
	(void)state;
	BAD("--refill '0': must be greater than 0", "--refill", "0");
	BAD("--refill 'x'", "--refill", "x");
	BAD("--refill 64 exceeds --batch 32 (the requests in flight per port)", "--refill", "64");
	BAD("--refill 9 exceeds --batch 8", "--batch", "8", "--refill", "9");
	BAD("--refill is for throughput runs with requests in flight, not --sync", "--sync",
	    "--refill", "4");
	BAD("--refill is for throughput runs with requests in flight, not --lat", "--lat",
	    "--refill", "1");
	BAD("--status-once needs --sync", "--status-once");
	BAD("--sync is for throughput runs: --lat sends one request at a time", "--lat", "--sync");
	BAD("--sync is for throughput runs: --pingpong sends", "--sync", "--pingpong");
	BAD("--prep is for throughput and --lat runs, not --pingpong", "--pingpong", "--prep");
	BAD("--sync applies to the initiator (--connect), not to --target", "--target", "--sync");
	BAD("--refill applies to the initiator", "--target", "--refill", "2");
	BAD("--status-once applies to the initiator", "--target", "--status-once");
	BAD("--prep applies to the initiator", "--prep", "--target");
	BAD("option '--sync' takes no value", "--sync=1");
}

/* --pingpong: WRITE both ways, one message at a time, latency rows. */
static void test_pingpong(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--pingpong");
	assert_true(r.cfg.pingpong && r.cfg.lat);
	assert_int_equal(r.cfg.batch, 1);
	assert_int_equal(r.cfg.ports, 1);
	assert_string_equal(bench_run_name(&r.cfg), "pingpong");
	/* A control page, then the message received, then the one sent, page-aligned. */
	assert_int_equal(bench_pp_recv(65536), 4096);
	assert_int_equal(bench_pp_send(65536), 4096 + 65536);
	assert_int_equal(bench_pp_send(8), 8192);
	assert_int_equal(bench_pp_bytes(8), 3 * 4096);
	assert_int_equal(bench_pp_bytes(65536), 4096 + 2 * 65536);
	assert_int_equal(bench_buffer_bytes(&r.cfg), 4096 + 2 * 65536);
	OK(&r, "--pingpong", "--size", "8", "--iters", "1000", "--batch", "1", "--ports", "1");
	assert_int_equal(r.cfg.size, 8);
	assert_int_equal(bench_buffer_bytes(&r.cfg), 3 * 4096);
	OK(&r, "--pingpong", "--size", "2:8M");
	assert_int_equal(bench_buffer_bytes(&r.cfg), BENCH_DEFAULT_BUFFER);
	/* The target answers, it does not measure. */
	OK(&r, "--target", "--pingpong");
	assert_true(r.cfg.pingpong);
	assert_false(r.cfg.lat);
	/* The initiator may say where the target reaches it. */
	OK(&r, "--connect", "10.0.0.2:18515", "--pingpong", "--listen", "10.0.0.1:0");
	assert_non_null(r.cfg.listen); /* points into the freed argv: not read */
	OK(&r, "--connect", "10.0.0.2:18515", "--pingpong", "--buffer", "12K", "--size", "8");
	BAD("--buffer 8192 is smaller than --ports 1 x --size 8", "--connect", "10.0.0.2:18515",
	    "--pingpong", "--buffer", "8K", "--size", "8");
	BAD("--listen needs --target (the initiator uses --connect; with --pingpong", "--connect",
	    "10.0.0.2:18515", "--listen", "10.0.0.1:0");
	BAD("--listen needs --target", "--pingpong", "--listen", "127.0.0.1:0");
	BAD("--lat and --pingpong exclude each other", "--lat", "--pingpong");
	BAD("--pingpong WRITEs, like ib_write_lat: not with --op read", "--pingpong", "--op", "read");
	BAD("--pingpong polls memory for the peer's message: not with --nocopy", "--pingpong",
	    "--nocopy");
	BAD("--verify is for the throughput and --lat runs, not --pingpong", "--pingpong",
	    "--verify");
	BAD("--pingpong sends one request at a time: --batch must be 1", "--pingpong", "--batch",
	    "2");
	BAD("--pingpong sends one request at a time: --ports must be 1", "--ports", "2",
	    "--pingpong");
}

/* --notify: a WRITE and its notification, one at a time, latency rows. */
static void test_notify(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--notify");
	assert_true(r.cfg.notify && r.cfg.lat);
	assert_int_equal(r.cfg.batch, 1);
	assert_int_equal(r.cfg.ports, 1);
	assert_int_equal(r.cfg.op, FERRY_OP_WRITE);
	assert_string_equal(bench_run_name(&r.cfg), "notify");
	OK(&r, "--notify", "--lat", "--size", "8:1M", "--op", "write", "--caller");
	assert_true(r.cfg.notify && r.cfg.lat);
	BAD("--notify times a WRITE and the notification that follows it: not --op read",
	    "--notify", "--op", "read");
	BAD("--notify polls the target engine's notifications, so both engines run in this "
	    "process: not with --target or --connect", "--connect", "10.0.0.2:18515", "--notify");
	BAD("--notify applies to the initiator (--connect), not to --target", "--target",
	    "--notify");
	BAD("--notify is a latency test of its own: not with --pingpong", "--notify", "--pingpong");
	BAD("--notify is a latency test of its own: not with --idle", "--idle", "1", "--notify");
	BAD("--notify sends one request at a time: --ports must be 1", "--notify", "--ports", "2");
	/* --notifs K: K notifications after each WRITE. */
	OK(&r, "--notify");
	assert_int_equal(r.cfg.notifs, 1);
	OK(&r, "--notify", "--notifs", "64");
	assert_int_equal(r.cfg.notifs, 64);
	assert_int_equal(r.cfg.batch, 1);
	BAD("--notifs is the notifications per --notify turn: give --notify too", "--notifs", "4");
	BAD("--notifs '0': must be greater than 0", "--notify", "--notifs", "0");
	BAD("(a positive integer, max 4096)", "--notify", "--notifs", "4097");
	BAD("--notify sends one request at a time: --batch must be 1", "--notify", "--batch", "4");
	BAD("--sync is for throughput runs: --notify sends", "--notify", "--sync");
	/* --peers P: notification i to receiver i % P. */
	OK(&r, "--notify");
	assert_int_equal(r.cfg.peers, 1);
	OK(&r, "--notify", "--notifs", "8", "--peers", "4");
	assert_int_equal(r.cfg.peers, 4);
	assert_int_equal(r.cfg.notifs, 8);
	BAD("--peers is the engines --notify's notifications go to: give --notify too", "--peers",
	    "2");
	BAD("--peers '0': must be greater than 0", "--notify", "--peers", "0");
	BAD("(a positive integer, max 16)", "--notify", "--peers", "17");
}

/* --idle SECONDS: an idle window, then cold and warm single requests. */
static void test_idle(void **state)
{
	struct parsed r;

	(void)state;
	OK(&r, "--idle", "2");
	assert_true(r.cfg.idle == 2.0);
	assert_int_equal(r.cfg.size, BENCH_IDLE_SIZE);
	assert_int_equal(r.cfg.size_max, BENCH_IDLE_SIZE);
	assert_int_equal(r.cfg.iters, BENCH_IDLE_ITERS);
	assert_int_equal(r.cfg.batch, 1);
	assert_int_equal(r.cfg.ports, 1);
	assert_false(r.cfg.lat || r.cfg.sync);
	assert_false(bench_in_flight(&r.cfg));
	assert_string_equal(bench_run_name(&r.cfg), "idle");
	OK(&r, "--idle", "0.5", "--size", "4K", "--iters", "20", "--op", "read");
	assert_int_equal(r.cfg.size, 4096);
	assert_int_equal(r.cfg.iters, 20);
	OK(&r, "--connect", "10.0.0.2:18515", "--idle", "1");
	/* A target serves that long and reports its CPU. */
	OK(&r, "--target", "--idle", "3");
	assert_true(r.cfg.duration == 3.0 && r.cfg.duration_set);
	BAD("--idle '0': must be in (0, 86400] seconds", "--idle", "0");
	BAD("--idle 'x': not a number of seconds", "--idle", "x");
	BAD("--idle 'inf': not a number of seconds", "--idle", "inf");
	BAD("option '--idle' needs a value", "--idle");
	BAD("not with --duration (--idle SECONDS is the idle time)", "--idle", "1", "--duration",
	    "2");
	BAD("not with --duration", "--target", "--idle", "1", "--duration", "2");
	BAD("--idle measures an idle engine and then one request at a time: not with --lat",
	    "--idle", "1", "--lat");
	BAD("not with --pingpong", "--pingpong", "--idle", "1");
	BAD("not with --sync", "--idle", "1", "--sync");
	BAD("not with --refill", "--idle", "1", "--refill", "1");
	BAD("not with --verify", "--idle", "1", "--verify");
	BAD("not with --sweep", "--idle", "1", "--sweep");
	BAD("not with --prep", "--idle", "1", "--prep");
	BAD("not with --plot", "--idle", "1", "--plot", "x.png");
	BAD("--idle runs one size: not --size LO:HI", "--idle", "1", "--size", "1K:4K");
	BAD("--idle sends one request at a time: --batch must be 1", "--idle", "1", "--batch", "4");
	BAD("--idle sends one request at a time: --ports must be 1", "--idle", "1", "--ports", "2");
}

/* The pattern is a function of (seed, absolute position), filled fast. */
static void test_pattern(void **state)
{
	enum { N = 1000 };
	uint8_t whole[N], part[N];
	uint64_t first = 12345;

	(void)state;
	bench_pattern_fill(whole, N, 0, 1);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(whole[i], bench_pattern_byte(i, 1));
	/* Any sub-range, at any alignment, is the same bytes as in the whole. */
	for (uint64_t pos = 0; pos < 16; pos++) {
		for (uint64_t len = 0; len < 40; len += 3) {
			memset(part, 0, sizeof(part));
			bench_pattern_fill(part, len, pos, 1);
			assert_memory_equal(part, whole + pos, len);
			assert_int_equal(bench_pattern_check(whole + pos, len, pos, 1, &first), 0);
		}
	}
	assert_int_equal(first, 12345); /* untouched without a mismatch */
	/* A flipped byte is found, at its index. */
	whole[517] ^= 0x40;
	assert_int_equal(bench_pattern_check(whole + 3, N - 3, 3, 1, &first), 1);
	assert_int_equal(first, 514);
	whole[517] ^= 0x40;
	/* Bytes at the wrong place, or of another seed, do not pass. */
	assert_true(bench_pattern_check(whole + 8, 64, 16, 1, &first) > 32);
	assert_true(bench_pattern_check(whole, N, 0, 2, &first) > N / 2);
	assert_true(bench_write_seed(&(struct bench_cfg){ .seed = 1 }, 0) != 1);
	assert_true(bench_write_seed(&(struct bench_cfg){ .seed = 1 }, 0) !=
		    bench_write_seed(&(struct bench_cfg){ .seed = 1 }, 1));
	/* Zeroes (a READ that never arrived) do not pass either. */
	memset(part, 0, sizeof(part));
	assert_true(bench_pattern_check(part, N, 0, 1, &first) > N - 16);
}

static void test_percentiles(void **state)
{
	uint64_t v[1000];
	struct bench_lat l;

	(void)state;
	/* 1..100, shuffled: nearest rank gives p50 = 50, p99 = 99, p99.9 = 100. */
	for (uint64_t i = 0; i < 100; i++)
		v[i] = (i * 37) % 100 + 1;
	bench_lat_summary(v, 100, &l);
	assert_int_equal(l.n, 100);
	assert_int_equal(l.min, 1);
	assert_int_equal(l.max, 100);
	assert_int_equal(l.p50, 50);
	assert_int_equal(l.p99, 99);
	assert_int_equal(l.p999, 100);
	assert_true(l.avg == 50.5);
	for (uint64_t i = 0; i < 1000; i++)
		v[i] = 1000 - i;
	bench_lat_summary(v, 1000, &l);
	assert_int_equal(l.p50, 500);
	assert_int_equal(l.p99, 990);
	assert_int_equal(l.p999, 999);
	v[0] = 42;
	bench_lat_summary(v, 1, &l);
	assert_true(l.min == 42 && l.p50 == 42 && l.p99 == 42 && l.p999 == 42 && l.max == 42);
	bench_lat_summary(v, 0, &l);
	assert_int_equal(l.n, 0);
	assert_int_equal(l.max, 0);
	assert_int_equal(bench_percentile(v, 0, 0.5), 0);
}

/* --target listens on --listen, else FERRY_LISTEN, else BENCH_DEFAULT_LISTEN. */
static void test_apply_listen(void **state)
{
	struct ferry_opts o;
	struct bench_cfg cfg;

	(void)state;
	bench_cfg_default(&cfg);
	unsetenv("FERRY_LISTEN");
	ferry_opts_default(&o);
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.listen, "127.0.0.1:0"); /* one process: the engine's default */
	cfg.mode = BENCH_TARGET;
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.listen, BENCH_DEFAULT_LISTEN);
	cfg.listen = "10.99.0.1:7000";
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.listen, "10.99.0.1:7000");
	cfg.listen = NULL;
	setenv("FERRY_LISTEN", "127.0.0.1:7001", 1);
	ferry_opts_default(&o);
	assert_int_equal(ferry_opts_from_env(&o), 0);
	bench_apply_opts(&cfg, &o);
	assert_string_equal(o.listen, "127.0.0.1:7001");
	unsetenv("FERRY_LISTEN");
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
	assert_int_equal(cfg.nocopy, 1);
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

/*
 * Parse string literals in place: unlike parse_v's copies they outlive the
 * call, and cfg's string fields point into argv.  getopt does not permute
 * ("+" in short_opts), so nothing writes to them.
 */
static void parse_lit(struct parsed *r, const char *const *args)
{
	char *argv[MAX_ARGS + 2];
	int argc = 0;

	memset(r, 0, sizeof(*r));
	argv[argc++] = (char *)"ferry_bench";
	for (; *args; args++) {
		assert_true(argc <= MAX_ARGS);
		argv[argc++] = (char *)*args;
	}
	argv[argc] = NULL;
	r->rc = bench_parse_args(argc, argv, &r->cfg, r->err, sizeof(r->err));
	if (r->rc)
		fail_msg("refused: %s", r->err);
}

#define OK_LIT(r, ...) parse_lit((r), (const char *const[]){ __VA_ARGS__, NULL })

/* --csv, --plot, --prom, --counters: accepted values. */
static void test_output_flags(void **state)
{
	struct parsed r;

	(void)state;
	OK_LIT(&r, "--csv", "out.csv", "--plot", "dir/bw.png", "--prom", "m.prom", "--counters",
	       "off");
	assert_string_equal(r.cfg.csv, "out.csv");
	assert_string_equal(r.cfg.plot, "dir/bw.png");
	assert_string_equal(r.cfg.prom, "m.prom");
	assert_int_equal(r.cfg.counters, 0);
	OK_LIT(&r, "--counters", "on", "--prom", "-", "--plot", "X.PNG");
	assert_int_equal(r.cfg.counters, 1);
	assert_string_equal(r.cfg.prom, "-");
	OK_LIT(&r, "--csv=./-x.csv", "--size", "2:64M");
	assert_string_equal(r.cfg.csv, "./-x.csv");
	/* The target has no rows, but counters and a Prometheus dump. */
	OK_LIT(&r, "--target", "--counters", "off", "--prom", "t.prom");
	assert_int_equal(r.cfg.counters, 0);
	assert_string_equal(r.cfg.prom, "t.prom");
	OK(&r, "--connect", "127.0.0.1:9", "--csv", "c.csv", "--plot", "c.png");
}

/* --csv, --plot, --prom, --counters: each refusal says what is wrong. */
static void test_bad_output_flags(void **state)
{
	(void)state;
	BAD("--counters 'maybe': must be 'on' or 'off'", "--counters", "maybe");
	BAD("--counters '1': must be 'on' or 'off'", "--counters", "1");
	BAD("--counters '': must be 'on' or 'off'", "--counters", "");
	BAD("option '--counters' needs a value", "--counters");
	BAD("option '--plot' needs a value", "--plot");
	BAD("option '--prom' needs a value", "--prom");
	BAD("option '--csv' needs a value", "--csv");
	/* getopt takes the next flag as the file: that is a missing file name. */
	BAD("--plot '--json': that is an option, not a file name (missing file name?",
	    "--plot", "--json");
	BAD("--prom '--lat': that is an option", "--prom", "--lat");
	BAD("--csv '-v': that is an option", "--csv", "-v");
	BAD("--csv: empty value (want a file name)", "--csv", "");
	BAD("--plot: empty value", "--plot", "");
	BAD("--csv '-': give a file name (stdout has the table)", "--csv", "-");
	BAD("--plot '-': give a file name", "--plot", "-");
	BAD("--plot 'bw.svg': draws a PNG: the name must end in .png", "--plot", "bw.svg");
	BAD("--plot '.png': draws a PNG", "--plot", ".png");
	BAD("--prom - and --json both write to stdout", "--json", "--prom", "-");
	BAD("--csv applies to the initiator (--connect), not to --target", "--target", "--csv",
	    "x.csv");
	BAD("--plot applies to the initiator (--connect), not to --target", "--target", "--plot",
	    "x.png");
	BAD("ambiguous option '--p' (--ports, --plot, --prom, --prep, --pingpong, --peers)", "--p", "x");
	BAD("ambiguous option '--co' (--cores, --connect, --counters)", "--co", "on");
}

/* --counters maps to the engine's counters option; absent, env/default stay. */
static void test_apply_counters(void **state)
{
	struct ferry_opts o;
	struct bench_cfg cfg;

	(void)state;
	bench_cfg_default(&cfg);
	ferry_opts_default(&o);
	assert_int_equal(o.counters, 1);
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.counters, 1);
	o.counters = 0; /* as FERRY_COUNTERS=0 would */
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.counters, 0);
	cfg.counters = 1;
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.counters, 1);
	cfg.counters = 0;
	bench_apply_opts(&cfg, &o);
	assert_int_equal(o.counters, 0);
}

/* Below their capacity the samples are exact, and the summary is bench_lat_summary's. */
static void test_samples_exact(void **state)
{
	struct bench_samples s[2];
	struct bench_lat l;

	(void)state;
	assert_int_equal(bench_samples_init(&s[0], 1000, 1), 0);
	assert_int_equal(bench_samples_init(&s[1], 1000, 2), 0);
	for (uint64_t i = 1; i <= 100; i++)
		bench_samples_add(&s[i & 1], i * 10);
	assert_int_equal(bench_samples_summary(s, 2, &l), 0);
	assert_int_equal(l.n, 100);
	assert_int_equal(l.min, 10);
	assert_int_equal(l.max, 1000);
	assert_int_equal(l.p50, 500);
	assert_int_equal(l.p99, 990);
	assert_int_equal(l.p999, 1000);
	assert_true(l.avg == 505.0);
	/* reset keeps the memory, forgets the samples */
	bench_samples_reset(&s[0]);
	bench_samples_reset(&s[1]);
	assert_int_equal(bench_samples_summary(s, 2, &l), 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(l.max, 0);
	bench_samples_add(&s[1], 7);
	assert_int_equal(bench_samples_summary(s, 2, &l), 0);
	assert_true(l.n == 1 && l.min == 7 && l.p50 == 7 && l.max == 7);
	bench_samples_free(&s[0]);
	bench_samples_free(&s[1]);
}

/*
 * Past the capacity a uniform subset is kept, whatever the order: a
 * stream that cycles 0..99 keeps percentiles near the true ones, and a
 * port that saw 4x more samples does not count 4x less in the merge.
 */
static void test_samples_subset(void **state)
{
	struct bench_samples s[2];
	struct bench_lat l;

	(void)state;
	assert_int_equal(bench_samples_init(&s[0], 4096, 1), 0);
	assert_int_equal(bench_samples_init(&s[1], 4096, 2), 0);
	for (uint64_t i = 0; i < 400000; i++)
		bench_samples_add(&s[0], 1000 + i % 100);
	for (uint64_t i = 0; i < 100000; i++)
		bench_samples_add(&s[1], 1000 + i % 100);
	assert_true(s[0].n <= 4096 && s[0].n >= 2048);
	assert_true(s[0].shift > s[1].shift);
	assert_int_equal(bench_samples_summary(s, 2, &l), 0);
	assert_int_equal(l.n, 500000);
	assert_int_equal(l.min, 1000);
	assert_int_equal(l.max, 1099);
	assert_true(l.p50 >= 1046 && l.p50 <= 1053);
	assert_true(l.p99 >= 1096);
	assert_true(l.avg == 1049.5);
	bench_samples_free(&s[0]);
	bench_samples_free(&s[1]);
}

/*
 * bench_samples_add_gaps is bench_samples_add per gap: the same state
 * (kept samples in order, counts, min, max, sum, thinning and its random
 * draws) from stamps added in runs of 0, 1, 37, 300 and the rest, past
 * the capacity (thinned) and again after it.
 */
static void test_samples_gaps(void **state)
{
	static const uint64_t runs[] = { 0, 1, 37, 300, 662 };
	struct bench_samples one, gaps;
	uint64_t ts[1001], at = 0;

	(void)state;
	ts[0] = 5000;
	for (unsigned i = 1; i <= 1000; i++)
		ts[i] = ts[i - 1] + 1 + bench_mix64(i) % 977;
	assert_int_equal(bench_samples_init(&one, 256, 3), 0);
	assert_int_equal(bench_samples_init(&gaps, 256, 3), 0);
	for (unsigned i = 0; i < 1000; i++)
		bench_samples_add(&one, ts[i + 1] - ts[i]);
	for (unsigned r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		bench_samples_add_gaps(&gaps, ts + at, runs[r]);
		at += runs[r];
	}
	assert_int_equal(at, 1000);
	assert_true(one.shift > 0);
	assert_int_equal(gaps.seen, one.seen);
	assert_int_equal(gaps.n, one.n);
	assert_int_equal(gaps.shift, one.shift);
	assert_int_equal(gaps.rng, one.rng);
	assert_int_equal(gaps.min, one.min);
	assert_int_equal(gaps.max, one.max);
	assert_true(gaps.sum == one.sum);
	assert_memory_equal(gaps.v, one.v, one.n * sizeof(*one.v));
	bench_samples_free(&one);
	bench_samples_free(&gaps);
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
		cmocka_unit_test(test_shared_number_parser),
		cmocka_unit_test(test_bad_counts),
		cmocka_unit_test(test_bad_op),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_getopt_errors),
		cmocka_unit_test(test_cross_checks),
		cmocka_unit_test(test_reparse),
		cmocka_unit_test(test_abbrev),
		cmocka_unit_test(test_two_process_flags),
		cmocka_unit_test(test_bad_hostport),
		cmocka_unit_test(test_mode_conflicts),
		cmocka_unit_test(test_size_ranges),
		cmocka_unit_test(test_lat),
		cmocka_unit_test(test_run_flags),
		cmocka_unit_test(test_bad_run_flags),
		cmocka_unit_test(test_pingpong),
		cmocka_unit_test(test_notify),
		cmocka_unit_test(test_idle),
		cmocka_unit_test(test_pattern),
		cmocka_unit_test(test_percentiles),
		cmocka_unit_test(test_apply_listen),
		cmocka_unit_test(test_apply_defaults),
		cmocka_unit_test(test_apply_flags),
		cmocka_unit_test(test_apply_depth_signal),
		cmocka_unit_test(test_output_flags),
		cmocka_unit_test(test_bad_output_flags),
		cmocka_unit_test(test_apply_counters),
		cmocka_unit_test(test_samples_exact),
		cmocka_unit_test(test_samples_subset),
		cmocka_unit_test(test_samples_gaps),
		cmocka_unit_test(test_names_and_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
