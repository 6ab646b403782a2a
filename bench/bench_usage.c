/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench --help: every flag, grouped by what it is for.  README.md's
 * ferry_bench section shows the same text: keep the two in step.
 */
#include <stdio.h>

#include "bench_opts.h"

void bench_usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [options]                  one process: initiator and target engines\n"
		"       %s --target [options]         two processes: the target (serves a buffer)\n"
		"       %s --connect HOST:PORT [...]  two processes: the initiator\n"
		"P threads (ports) submit batches of one-sided requests from the initiator\n"
		"to the target's buffer, like perftest's ib_write_bw / ib_read_bw.\n"
		"\n"
		"  --op read|write        operation (default write)\n"
		"  -s, --size BYTES       bytes per request, K/M/G suffixes (default 64K);\n"
		"                         LO:HI runs the powers of two from LO to HI, one row each\n"
		"  --sweep                --size %llu:%lluM (perftest -a)\n"
		"  --batch N              requests per batch (default 32)\n"
		"  --ports N              submitting threads, one port each (default 1)\n"
		"  --lat                  latency: one port, one request at a time, busy-polled;\n"
		"                         prints min/typical(p50)/avg/p99/p99.9/max in us\n"
		"  --cores LIST           this process's engine cores (default FERRY_CORES or \"0\")\n"
		"  --target-cores LIST    one-process mode: target cores (default: same as --cores)\n"
		"  -d, --nics NAMES       NICs, comma list (default FERRY_NICS or \"auto\": RDMA devices, else loop)\n"
		"  -D, --duration SECS    run time per size, fractions allowed (default 3;\n"
		"                         --target: until SIGINT/SIGTERM)\n"
		"  -n, --iters N          batches per port (--lat: requests) instead of a duration\n"
		"  --slice SIZE           bytes per work request (default 64K)\n"
		"  -q, --qps N            QPs per endpoint\n"
		"  -t, --depth N          work requests per QP\n"
		"  --nocopy               loop NIC skips the memcpy (data plane cost only)\n"
		"  --spin                 this process's cores never yield when idle\n"
		"  --verify               check every byte moved (READ: against the target's\n"
		"                         pattern; WRITE: read back and compare)\n"
		"  --json                 JSON on stdout instead of tables (one object per size)\n"
		"  --no-port-pin          do not keep port threads off the initiator's CPUs\n"
		"  --counters on|off      the cores' latency histogram and hardware counters\n"
		"                         (default FERRY_COUNTERS or on; off to measure their cost)\n"
		"\n"
		"Output (the table on stdout, a progress line on stderr for long runs):\n"
		"  --csv FILE             also one CSV row per size, with a header line: mode\n"
		"                         (bw|lat), op, size, batch, ports, cores, gbps (GB/s),\n"
		"                         reqs_per_s, p50_us, p99_us, p999_us, max_us, ...\n"
		"  --plot FILE.png        draw GB/s and p99 latency against size with gnuplot\n"
		"                         (apt-get install -y gnuplot-nox)\n"
		"  --prom FILE|-          at the end, this process's engine counters in the\n"
		"                         Prometheus text format (- = stdout)\n"
		"  -h, --help             this text\n"
		"\n"
		"Two processes (the loop NIC cannot cross processes: give RDMA NICs):\n"
		"  --target               create only the target engine, register --buffer bytes\n"
		"                         filled with the --seed pattern at 0x%llx (if free),\n"
		"                         print \"ferry_bench target: listening on ADDR buffer\n"
		"                         0xADDR LEN\" and serve until SIGINT/SIGTERM or --duration\n"
		"  --listen HOST:PORT     target's control address, dotted IPv4 (default\n"
		"                         FERRY_LISTEN or %s)\n"
		"  --connect HOST:PORT    create only the initiator and open the target there\n"
		"  --remote-addr HEX      the target's buffer address (default 0x%llx)\n"
		"  --buffer SIZE          each side's buffer (default %llu MiB in the two-process\n"
		"                         modes and sweeps, else ports x batch x size); batches\n"
		"                         shrink so that ports x batch x size fits; the initiator's\n"
		"                         must not exceed the target's\n"
		"  --seed N               pattern seed of the target's buffer (default 1; the\n"
		"                         initiator's --verify must use the target's)\n"
		"\n"
		"Buffers are at most %llu MiB.  Environment: FERRY_* variables (see ferry.h)\n"
		"apply before the flags.  Exit status: 0 ok, 1 setup error / failed request /\n"
		"verify mismatch, 2 usage.\n",
		prog, prog, prog, BENCH_SWEEP_MIN, BENCH_SWEEP_MAX >> 20, BENCH_TARGET_ADDR,
		BENCH_DEFAULT_LISTEN, BENCH_TARGET_ADDR, BENCH_DEFAULT_BUFFER >> 20,
		BENCH_MAX_BUFFER >> 20);
}
