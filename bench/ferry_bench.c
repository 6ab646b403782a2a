/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench: an ib_write_bw / ib_write_lat for ferry.
 *
 * Three modes:
 *  - one process (default): two engines, an initiator and a target, on the
 *    same NICs ("auto" by default: the segment takes cma, the same host);
 *  - --target: only the target engine.  It maps --buffer bytes at
 *    BENCH_TARGET_ADDR (if free), fills them with the --seed pattern,
 *    registers them, prints "ferry_bench target: listening on ADDR buffer
 *    0xADDR LEN" and serves until SIGINT/SIGTERM (or --duration);
 *  - --connect HOST:PORT: only the initiator, against such a target.
 *
 * The initiator registers one buffer per port.  Each port is one thread
 * that keeps --batch requests in flight, resubmitting them as they end (in
 * sub-batches of --refill), and checks every request, until the duration
 * ends or it ran --iters rounds of --batch requests; --sync submits a batch,
 * waits for all of it and starts over.  Request
 * i of port p always moves the same bytes between offset i * size of its
 * port's buffer and offset (p * batch + i) * size of the target's buffer,
 * so no two requests touch the same memory.  The --verify pattern is a
 * function of the target-buffer offset (and a seed), so both processes of
 * the two-process mode compute it on their own.
 *
 * --lat: one port, one request at a time, busy-polled with
 * ferry_batch_wait(b, 0); every request's submit-to-done time is kept and
 * summarised like ib_write_lat (typical = median).  --pingpong: WRITEs
 * both ways, half round trips like ib_write_lat's.  --idle: the engines'
 * CPU while idle, then cold and warm single requests.  Throughput runs time
 * every request too: from its submit (--sync: its batch's) to the moment
 * the port sees it ended, kept in memory allocated before the run
 * (bench_samples: a uniform subset when there are too many).
 *
 * --size LO:HI (or --sweep): the powers of two from LO to HI, one row each;
 * batches shrink so that they fit the buffer.
 *
 * The per-core counters printed are deltas over the run of this process's
 * cores (the initiator's; the target's in --target): with a one-sided NIC
 * the target's cores stay idle (on loop, the initiator's cores do the copy
 * themselves).
 *
 * The files: this one picks the mode (the command line is bench_opts.c's,
 * bench_cfg.c's and bench_usage.c's); setup.c opens the engines, buffers
 * and ports and closes them; run.c runs the sizes of the one-process and
 * --connect modes; port.c runs the port threads, each repeating
 * port_step(): a round of requests in flight (mode_inflight.c), a batch
 * (mode_bw.c, --sync), one request (mode_lat.c), one ping-pong
 * (mode_pingpong.c, answered by pp_peer.c), an idle gap and a request
 * (mode_idle.c), submitted, waited for and checked with batch.c; verify.c
 * is --verify; mode_target.c is --target; counters.c snapshots the cores'
 * counters;
 * report.c prints the table, the per-core tables and --json, outputs.c
 * writes --csv, --plot and --prom, progress.c draws the progress line.
 * bench.h holds what they share.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* "ferry_bench: what: why" on stderr for a call that failed with rc; returns rc. */
int report(const char *what, int rc)
{
	fprintf(stderr, "ferry_bench: %s: %s\n", what, strerror(-rc));
	return rc;
}

static int parse_cmdline(int argc, char **argv, struct bench_cfg *cfg)
{
	char err[512];

	if (bench_parse_args(argc, argv, cfg, err, sizeof(err))) {
		fprintf(stderr, "ferry_bench: %s\n", err);
		return 2;
	}
	if (cfg->help) {
		bench_usage(stdout, argv[0]);
		return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	static struct bench b;
	int rc;

	rc = parse_cmdline(argc, argv, &b.cfg);
	if (rc >= 0)
		return rc;
	if (b.cfg.mode == BENCH_TARGET)
		return target_main(&b);
	if (b.cfg.opens)
		return opens_main(&b.cfg);
	if (bench_setup(&b)) {
		bench_teardown(&b);
		return 1;
	}
	rc = bench_run(&b);
	bench_teardown(&b);
	return rc;
}
