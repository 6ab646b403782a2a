/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's runs end to end, in this process on the loop
 * NIC: a command line parsed, set up and run as main() does, then what the
 * ports counted looked at before teardown.  The Makefile links tests with
 * libferry.a only, so the bench's files are included (all but main's;
 * --opens' only for its report, no test here opens segments).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/batch.c"
#include "bench/bench_cfg.c"
#include "bench/bench_opts.c"
#include "bench/bench_out.c"
#include "bench/bench_usage.c"
#include "bench/bench_util.c"
#include "bench/counters.c"
#include "bench/mode_bw.c"
#include <sys/resource.h>

/*
 * cpu_snap's getrusage through this stub: with rusage_step 1 and then 2,
 * two fixed snapshots, in the second of which the calling thread's user
 * time reads more than its process's -- as the kernel's separate scaling
 * of a thread's and of its process's user/system split gives now and then
 * (a --target once printed 'user 18446744073709.5 ms').
 */
static int rusage_step; /* 0: the real getrusage */

static int rusage_stub(int who, struct rusage *ru)
{
	static const long us[2][2][2] = { /* [step-1][thread][user, sys] */
		{ { 5000, 5000 }, { 1000, 1000 } },
		{ { 6000, 9000 }, { 7000, 1000 } },
	};
	const long *v;

	if (!rusage_step)
		return getrusage(who, ru);
	v = us[rusage_step - 1][who == RUSAGE_THREAD];
	*ru = (struct rusage){ .ru_utime = { .tv_usec = v[0] }, .ru_stime = { .tv_usec = v[1] } };
	return 0;
}

/*
 * --idle's requests through this stub: with warm_fails on, every warm
 * request (a turn's second) runs and is then counted failed, as when the
 * engine ends it with an error.
 */
static bool warm_fails;
static unsigned idle_calls;

static int lat_run_stub(struct bench_port *bp, uint64_t n)
{
	int rc = lat_run(bp, n);

	if (warm_fails && idle_calls++ % 2 == 1)
		bp->failures++;
	return rc;
}

#define getrusage rusage_stub
#define lat_run lat_run_stub
#include "bench/mode_idle.c"
#undef lat_run
#undef getrusage

/*
 * The in-flight mode's resets go through this stub: with busy_resets on,
 * a used sub-batch's reset is refused (-EBUSY) twice before it succeeds,
 * as when the core that ended its last request has not yet dropped its
 * count from the batch (rq_finish) -- a window the bench meets now and
 * then, made certain here.
 */
static bool busy_resets;
static unsigned reset_calls;
static bool reset_refused;          /* the last reset was refused, none worked since */
static uint64_t refused_pause_max;  /* the longest pause asked for meanwhile */

static int reset_stub(struct ferry_batch *b)
{
	reset_refused = busy_resets && ferry_batch_size(b) && reset_calls++ % 3 != 2;
	if (reset_refused)
		return -EBUSY;
	return ferry_batch_reset(b);
}

/* The pause asked for, not the time it took: no timing in pass/fail. */
static void pause_stub(uint64_t gap)
{
	if (reset_refused && gap > refused_pause_max)
		refused_pause_max = gap;
	pause_ns(gap);
}

#define ferry_batch_reset reset_stub
#define pause_ns pause_stub
#include "bench/mode_inflight.c"
#undef pause_ns
#undef ferry_batch_reset

/*
 * --lat's submits go through this stub: call number lat_bad_at (from 0)
 * submits the request with len 0, which the library ends FAILED -EINVAL
 * at once; with lat_refuse on, that call is refused instead (-EINVAL,
 * nothing submitted), as a batch that cannot take a request.
 */
static uint64_t lat_bad_at = UINT64_MAX, lat_submits;
static bool lat_refuse;

static int lat_submit_stub(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n)
{
	struct ferry_req bad = reqs[0];

	if (lat_submits++ != lat_bad_at)
		return ferry_submit(b, reqs, n);
	if (lat_refuse)
		return -EINVAL;
	bad.len = 0;
	return ferry_submit(b, &bad, 1);
}

#define ferry_submit lat_submit_stub
#include "bench/mode_lat.c"
#undef ferry_submit

/*
 * --notify's polls go through this stub: with notif_fail_after n, the
 * first poll after n notifications came is refused (-EIO), as a receiver
 * engine that fails mid-run; that turn fails.
 */
static uint64_t notif_fail_after = UINT64_MAX, notifs_polled;

static int notif_poll_stub(struct ferry_engine *e, struct ferry_notif *out, unsigned max)
{
	int k;

	if (notifs_polled >= notif_fail_after) {
		notif_fail_after = UINT64_MAX;
		return -EIO;
	}
	k = ferry_notif_poll(e, out, max);
	if (k > 0)
		notifs_polled += (uint64_t)k;
	return k;
}

#define ferry_notif_poll notif_poll_stub
#include "bench/mode_notify.c"
#undef ferry_notif_poll
/* Its own comparator once clashed with bench_util.c's (both static). */
#define cmp_u64 openers_cmp_u64
#include "bench/mode_openers.c"
#undef cmp_u64
#include "bench/mode_opens.c"
#include "bench/mode_pingpong.c"
#include "bench/mode_target.c"
#include "bench/outputs.c"
#include "bench/port.c"
#include "bench/pp_peer.c"
#include "bench/progress.c"
#include "bench/report.c"
#include "bench/run.c"
#include "bench/setup.c"
#include "bench/softnic.c"
#include "bench/verify.c"
#include "bench/wakefloor.c"

/* ferry_bench.c's, which also holds main(). */
int report(const char *what, int rc)
{
	fprintf(stderr, "ferry_bench: %s: %s\n", what, strerror(-rc));
	return rc;
}

/* Parse argv (NULL-terminated, after the program name) and set b up. */
static void bench_start(struct bench *b, const char **args)
{
	char *argv[32] = { "ferry_bench" }, err[512];
	int argc = 1;

	while (*args)
		argv[argc++] = (char *)*args++;
	memset(b, 0, sizeof(*b));
	assert_int_equal(bench_parse_args(argc, argv, &b->cfg, err, sizeof(err)), 0);
	assert_int_equal(bench_setup(b), 0);
}

static uint64_t ports_ok(const struct bench *b)
{
	uint64_t ok = 0;

	for (unsigned p = 0; p < b->cfg.ports; p++)
		ok += b->ports[p].ok;
	return ok;
}

/*
 * In flight (the default mode), a duration over before a port's first
 * pass: the port still runs one round of --batch requests, as --sync runs
 * one batch; it must not print a row of nothing and exit 0.
 */
static void test_inflight_one_round(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "8",
			       "--duration", "0.000001", "--json", NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	assert_int_equal(bench_run(&b), 0);
	assert_true(ports_ok(&b) >= 8);
	bench_teardown(&b);
}

/*
 * --verify of WRITEs against a --target that outlives the run (the
 * compare scripts keep one for every round and size): the bytes a first
 * run left there must not pass a second, identical run's check, or that
 * run passes whether its WRITEs landed or not.  The first run is one
 * process here; its target buffer stands for the long-lived target's.
 */
static void test_verify_not_stale(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "4",
			       "--iters", "1", "--verify", "--json", NULL };
	static struct bench a, b;
	uint64_t len, first = 0;
	uint8_t *left;

	(void)state;
	bench_start(&a, args);
	assert_int_equal(bench_run(&a), 0);
	assert_int_equal(a.mismatches, 0);
	len = a.per_port;
	left = malloc(len);
	assert_non_null(left);
	memcpy(left, a.tbuf, len);
	bench_teardown(&a);
	bench_start(&b, args);
	assert_true(bench_pattern_check(left, len, 0, bench_write_seed(&b.cfg, 0), &first) > 0);
	bench_teardown(&b);
	free(left);
}

/* fd (1 or 2) into a temporary file until capture_end; the saved fd. */
struct capture {
	FILE *tmp;
	int fd, saved;
};

static void capture_begin(struct capture *c, int fd)
{
	c->tmp = tmpfile();
	c->fd = fd;
	assert_non_null(c->tmp);
	fflush(fd == 1 ? stdout : stderr);
	c->saved = dup(fd);
	assert_true(c->saved >= 0);
	assert_true(dup2(fileno(c->tmp), fd) >= 0);
}

/* What went to the fd since capture_begin, in buf (len bytes, NUL-terminated). */
static void capture_end(struct capture *c, char *buf, size_t len)
{
	size_t n;

	fflush(c->fd == 1 ? stdout : stderr);
	assert_true(dup2(c->saved, c->fd) >= 0);
	close(c->saved);
	rewind(c->tmp);
	n = fread(buf, 1, len - 1, c->tmp);
	buf[n] = 0;
	fclose(c->tmp);
}

/* What buffers_verify(b) wrote to stderr, in buf. */
static void verify_stderr(struct bench *b, char *buf, size_t len)
{
	struct capture c;

	capture_begin(&c, 2);
	buffers_verify(b);
	capture_end(&c, buf, len);
}

/*
 * --verify of WRITEs into another process (read back, then checked) when
 * a port stopped early: its bytes are not checked, and the run must say
 * so.  Before: its read-back was skipped and its own buffer, still holding
 * the pattern it wrote, was checked instead: it passed, silently.  The
 * two-process mode is played in one process: the target's buffer hidden
 * (tbuf NULL), port 1 marked stopped.
 */
static void test_verify_stopped_port(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "4",
			       "--ports", "2", "--iters", "1", "--verify", "--json", NULL };
	static struct bench b;
	char err[1024];
	uint8_t *tbuf;

	(void)state;
	bench_start(&b, args);
	assert_int_equal(bench_run(&b), 0);
	tbuf = b.tbuf;
	b.tbuf = NULL;
	b.cfg.mode = BENCH_INITIATOR;
	b.ports[1].err = -EIO;
	b.mismatches = 0;
	verify_stderr(&b, err, sizeof(err));
	assert_int_equal(b.mismatches, 0); /* port 0: read back, checked, right */
	if (!strstr(err, "port 1: its 16384 bytes at offset 16384 of the target's buffer not "
			 "verified: the port stopped early"))
		fail_msg("stderr: '%s'", err);
	assert_null(strstr(err, "port 0"));
	b.ports[1].err = 0;
	b.cfg.mode = BENCH_LOCAL;
	b.tbuf = tbuf;
	bench_teardown(&b);
}

/* print_json's output, in out (len bytes, NUL-terminated). */
static void json_output(const struct bench *b, const struct totals *t, char *out, size_t len)
{
	struct capture c;

	capture_begin(&c, 1);
	print_json(b, t);
	capture_end(&c, out, len);
}

/*
 * One process: a port that stopped early is checked in place, and its
 * unfinished requests' bytes are wrong; the run must say that the port
 * stopped, not only "bytes wrong" as if they were corrupted.  Played by
 * undoing port 1's bytes in the target's buffer after a good run.
 */
static void test_verify_stopped_port_local(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "4",
			       "--ports", "2", "--iters", "1", "--verify", "--json", NULL };
	static struct bench b;
	char err[1024];

	(void)state;
	bench_start(&b, args);
	assert_int_equal(bench_run(&b), 0);
	assert_int_equal(b.cfg.mode, BENCH_LOCAL);
	memset(b.tbuf + req_offset(&b, 1, 0) + 4096, 0, 4096); /* its request 1 never ran */
	b.ports[1].err = -EIO;
	b.mismatches = 0;
	verify_stderr(&b, err, sizeof(err));
	assert_true(b.mismatches > 0);
	if (!strstr(err, "port 1 request 1") || !strstr(err, "port 1 stopped early (Input/output "
							      "error)"))
		fail_msg("stderr: '%s'", err);
	assert_null(strstr(err, "port 0"));
	b.ports[1].err = 0;
	bench_teardown(&b);
}

/*
 * --notify --notifs K: the rate is K notifications per turn whose
 * notifications all came, over those turns' time.  Here 2 turns of 4
 * come, the third's poll fails (the port stops).  Before: the failed
 * turn counted (3 turns' notifications over 2 turns' time, 1.5x).
 */
static void test_notify_rate_failed_turn(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "8", "--notify",
			       "--notifs", "4", "--iters", "5", "--json", NULL };
	static struct bench b;
	static char json[16384];
	struct totals t;
	double want, got;
	const char *lat;

	(void)state;
	bench_start(&b, args);
	notifs_polled = 0;
	notif_fail_after = 8;
	assert_int_equal(bench_run(&b), 1); /* a port stopped early */
	notif_fail_after = UINT64_MAX;
	totals_sum(&b, &t);
	assert_int_equal(t.lat.n, 2);
	assert_true(t.lat_ns > 0);
	want = 4.0 * 2.0 * 1e9 / (double)t.lat_ns;
	if (fabs(notifs_per_s(&b, &t) - want) > want * 1e-9)
		fail_msg("notifications/s %.0f, want %.0f (%" PRIu64 " turns, 2 whole)",
			 notifs_per_s(&b, &t), want, t.batches);
	/* and the mean turn is over the 2 timed ones, not the 3 turns (before:
	 * the failed turn deflated batch_lat_us by a third) */
	json_output(&b, &t, json, sizeof(json));
	lat = strstr(json, "\"batch_lat_us\":");
	assert_non_null(lat);
	got = strtod(lat + strlen("\"batch_lat_us\":"), NULL);
	want = (double)t.lat_ns / 2.0 / 1e3;
	if (fabs(got - want) > 0.001 + want * 1e-6)
		fail_msg("batch_lat_us %.3f, want %.3f (%" PRIu64 " turns, 2 timed)", got, want,
			 t.batches);
	bench_teardown(&b);
}

/*
 * The cores' CPU line: the time summed is every engine core thread's of
 * this process (one-process mode: the initiator's core and the target's),
 * so the share per core must be over as many threads, not the initiator's
 * cores alone (a busy tcp target printed "133 % of 1.005 s per core").
 */
static void test_cores_cpu_threads(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--target-cores", "1", "--size",
			       "4K", "--iters", "2", "--json", NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	assert_int_equal(bench_run(&b), 0);
	assert_int_equal(b.core_threads,
			 ferry_engine_cores(b.init) + ferry_engine_cores(b.target));
	bench_teardown(&b);
}

/* The others' CPU never reads negative (2^64 ns) when this thread's user
 * time reads ahead of the process's. */
static void test_cpu_thread_ahead(void **state)
{
	struct cpu_use c;

	(void)state;
	rusage_step = 1; /* others: user 4 ms, system 4 ms */
	cpu_snap(&c);
	rusage_step = 2; /* others: user -1 ms (0), system 8 ms */
	cpu_since(&c);
	rusage_step = 0;
	assert_int_equal(c.user_ns, 0);
	assert_int_equal(c.sys_ns, 4000000);
}

/*
 * In flight with one sub-batch (--refill = --batch): a refused reset is
 * tried again at once, not after the longest pause (10 ms per refusal
 * with nothing else in flight: 50 turns took over half a second).
 */
static void test_inflight_reset_busy(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "2",
			       "--refill", "2", "--iters", "50", "--json", NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	busy_resets = true;
	reset_calls = 0;
	refused_pause_max = 0;
	assert_int_equal(bench_run(&b), 0);
	busy_resets = false;
	reset_refused = false;
	assert_int_equal(ports_ok(&b), 100);
	assert_true(reset_calls >= 3 * 49);
	/* After a refusal the port looks again within RESET_RETRY_NS; before,
	 * it asked for POLL_MAX_NS (10 ms a turn: 50 turns took 0.5 s). */
	assert_true(refused_pause_max <= RESET_RETRY_NS);
	bench_teardown(&b);
}

/*
 * A sweep in flight: the next size's first turn resets the sub-batches the
 * last size drained; a reset refused for a moment (the same window) must
 * be waited out, not stop the port.
 */
static void test_sweep_reset_busy(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K:8K", "--batch",
			       "4", "--iters", "3", "--json", NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	busy_resets = true;
	reset_calls = 0;
	assert_int_equal(bench_run(&b), 0);
	busy_resets = false;
	assert_int_equal(b.nrows, 2);
	assert_int_equal(b.rows[1].requests, 12);
	assert_int_equal(b.ports[0].err, 0);
	bench_teardown(&b);
}

/*
 * --iters 2^59 with --batch 32: the in-flight limit, iters x batch
 * requests, must not wrap (to 0: nothing was ever submitted and the port
 * spun through its 2^59 turns); it saturates.
 */
static void test_inflight_iters_no_wrap(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "4K", "--batch", "32",
			       "--iters", "576460752303423488", NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	assert_int_equal(size_prepare(&b, b.cfg.size, 0), 0);
	assert_int_equal(b.nreq, 32);
	assert_int_equal(flight_begin(&b.ports[0]), 0);
	assert_true(b.ports[0].flight->limit == UINT64_MAX);
	bench_teardown(&b);
}

/*
 * --idle: the warm requests' failures are the warm row's, not the cold
 * one's (each turn's second request fails here, the cold ones do not).
 */
static void test_idle_warm_failures(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--idle", "0.001", "--iters", "3",
			       NULL };
	static struct bench b;

	(void)state;
	bench_start(&b, args);
	warm_fails = true;
	idle_calls = 0;
	assert_int_equal(bench_run(&b), 1);
	warm_fails = false;
	assert_int_equal(b.nrows, 2);
	assert_string_equal(b.rows[0].mode, "idle_cold");
	assert_int_equal(b.rows[0].failures, 0);
	assert_string_equal(b.rows[1].mode, "idle_warm");
	assert_int_equal(b.rows[1].failures, 3);
	bench_teardown(&b);
}

/*
 * --lat over more than one chunk of timed requests (LAT_CHUNK), --verify
 * on: every request is counted once, as a turn, as DONE and as a sample,
 * and the READ bytes still check.
 */
static void test_lat_chunks(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "8", "--op", "read",
			       "--lat", "--iters", "2500", "--verify", "--json", NULL };
	static struct bench b;
	struct totals t;

	(void)state;
	bench_start(&b, args);
	assert_int_equal(bench_run(&b), 0);
	totals_sum(&b, &t);
	assert_int_equal(t.batches, 2500);
	assert_int_equal(t.ok, 2500);
	assert_int_equal(t.lat.n, 2500);
	assert_int_equal(t.failures, 0);
	assert_int_equal(b.mismatches, 0);
	assert_int_equal(b.unverified, 0);
	bench_teardown(&b);
}

/*
 * --lat, request 1500 (the second chunk's) fails: it is counted failed and
 * not sampled, the run goes on; the requests around it are DONE and
 * sampled.
 */
static void test_lat_failed_request(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "8", "--lat",
			       "--iters", "2000", "--json", NULL };
	static struct bench b;
	struct totals t;

	(void)state;
	bench_start(&b, args);
	lat_submits = 0;
	lat_bad_at = 1500;
	assert_int_equal(bench_run(&b), 1); /* a failure */
	lat_bad_at = UINT64_MAX;
	totals_sum(&b, &t);
	assert_int_equal(t.batches, 2000);
	assert_int_equal(t.ok, 1999);
	assert_int_equal(t.failures, 1);
	assert_int_equal(t.lat.n, 1999);
	assert_false(t.early);
	bench_teardown(&b);
}

/*
 * --lat, the submit of request 1100 refused: the port stops there, and
 * the 1100 requests before it (a whole chunk and part of the next) keep
 * their turns and samples.
 */
static void test_lat_submit_refused(void **state)
{
	const char *args[] = { "--nics", "loop", "--cores", "0", "--size", "8", "--lat",
			       "--iters", "2000", "--json", NULL };
	static struct bench b;
	struct totals t;

	(void)state;
	bench_start(&b, args);
	lat_submits = 0;
	lat_bad_at = 1100;
	lat_refuse = true;
	assert_int_equal(bench_run(&b), 1); /* the port stopped */
	lat_bad_at = UINT64_MAX;
	lat_refuse = false;
	totals_sum(&b, &t);
	assert_int_equal(t.batches, 1100);
	assert_int_equal(t.ok, 1100);
	assert_int_equal(t.lat.n, 1100);
	assert_true(t.early);
	assert_int_equal(b.ports[0].err, -EINVAL);
	bench_teardown(&b);
}

/* openers_report's line on stdout, in line (len bytes). */
static int openers_line(const struct opener *o, uint32_t m, char *line, size_t len)
{
	FILE *tmp = tmpfile();
	int saved, rc;

	assert_non_null(tmp);
	fflush(stdout);
	saved = dup(1);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(tmp), 1) >= 0);
	rc = openers_report(o, m, NULL);
	fflush(stdout);
	assert_true(dup2(saved, 1) >= 0);
	close(saved);
	rewind(tmp);
	assert_non_null(fgets(line, (int)len, tmp));
	fclose(tmp);
	return rc;
}

/*
 * --opens' concurrent opens: 100 that took 1..100 ms and one that failed
 * after 10 s.  The percentiles are of the 100 opens, nearest rank as in
 * every other row: p50 50 ms (not the upper middle, 51), p99 99 ms (not
 * the max), max 100 ms (not the failed attempt's 10 s).
 */
static void test_openers_percentiles(void **state)
{
	static struct opener o[101];
	double p50 = 0, p99 = 0, max = 0;
	char line[512];
	const char *at;

	(void)state;
	for (uint32_t i = 0; i < 100; i++)
		o[i] = (struct opener){ .t0 = 1000, .t1 = 1000 + (i + 1) * 1000000ull };
	o[100] = (struct opener){ .t0 = 1000, .t1 = 1000 + 10000000000ull, .rc = -ECONNREFUSED };
	assert_int_equal(openers_line(o, 101, line, sizeof(line)), -EIO);
	at = strstr(line, "p50 ");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "p50 %lf ms, p99 %lf ms, max %lf ms", &p50, &p99, &max), 3);
	assert_true(p50 == 50.0);
	assert_true(p99 == 99.0);
	assert_true(max == 100.0);
	assert_non_null(strstr(line, "1 failed"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inflight_one_round),
		cmocka_unit_test(test_verify_not_stale),
		cmocka_unit_test(test_verify_stopped_port),
		cmocka_unit_test(test_verify_stopped_port_local),
		cmocka_unit_test(test_notify_rate_failed_turn),
		cmocka_unit_test(test_cores_cpu_threads),
		cmocka_unit_test(test_cpu_thread_ahead),
		cmocka_unit_test(test_inflight_reset_busy),
		cmocka_unit_test(test_sweep_reset_busy),
		cmocka_unit_test(test_openers_percentiles),
		cmocka_unit_test(test_inflight_iters_no_wrap),
		cmocka_unit_test(test_idle_warm_failures),
		cmocka_unit_test(test_lat_chunks),
		cmocka_unit_test(test_lat_failed_request),
		cmocka_unit_test(test_lat_submit_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
