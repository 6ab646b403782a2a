/* SPDX-License-Identifier: MIT */
/*
 * --target, the serving half of a two-process run: map the buffer where
 * --connect looks for it by default, fill it with the --seed pattern,
 * register it, say where it is, and serve until SIGINT/SIGTERM or the end
 * of --duration (--idle); then the process's CPU over that time (apart
 * from the main thread, which waits for the signal) and the per-core
 * counters.  --pingpong also answers ping-pongs (pp_peer.c).  Also the
 * check both halves make that their NICs can reach another process.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"

/*
 * --target's buffer: at BENCH_TARGET_ADDR, where --connect looks by
 * default, unless something is there already (MAP_FIXED_NOREPLACE fails
 * with EEXIST; a kernel older than 4.17 ignores the flag and returns
 * another address): then anywhere, and the printed address is the one to
 * pass to --remote-addr.
 */
static int target_map(struct bench *b)
{
	uint64_t alen = buf_round(&b->cfg, b->buffer);
	void *want = (void *)(uintptr_t)BENCH_TARGET_ADDR, *p;

	p = mmap(want, alen, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != MAP_FAILED && p != want) {
		munmap(p, alen);
		p = MAP_FAILED;
		errno = EEXIST;
	}
	if (p == MAP_FAILED) {
		fprintf(stderr,
			"ferry_bench: target: cannot map the buffer at 0x%llx (%s): mapped elsewhere; "
			"give the initiator --remote-addr\n",
			BENCH_TARGET_ADDR, strerror(errno));
		p = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return report("target buffer mmap", -errno);
	}
	/* Before bench_pattern_fill's first touch; the fallback address may be
	 * only 4 KiB-aligned: huge pages then back the 2 MiB-aligned part. */
	buf_advise(&b->cfg, p, alen);
	b->tbuf = p;
	b->tbuf_len = alen;
	b->tbuf_mapped = true;
	return 0;
}

/* The software NIC reaches engines of this process only (cma, verbs, tcp go further). */
int nics_check_remote(struct ferry_engine *e, const char *role)
{
	for (unsigned k = 0; k < ferry_engine_cores(e); k++) {
		const char *nic = ferry_core_nic(e, k);

		if (nic && !strcmp(nic, "loop")) {
			fprintf(stderr,
				"ferry_bench: %s: core %u uses the loop NIC, which cannot reach another "
				"process: give RDMA NICs (--nics rxe0), tcp, or cma on one host\n",
				role, k);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * Wait for SIGINT/SIGTERM (blocked in every thread, so they queue) or the
 * end of --duration.  Returns the signal, or 0 at the deadline.
 */
static int target_wait(const struct bench *b, const sigset_t *set)
{
	uint64_t deadline = b->cfg.duration_set ? now_ns() + (uint64_t)(b->cfg.duration * 1e9) : 0;

	for (;;) {
		struct timespec ts;
		int sig;

		if (!deadline) {
			sig = sigwaitinfo(set, NULL);
		} else {
			uint64_t now = now_ns(), left;

			if (now >= deadline)
				return 0;
			left = deadline - now;
			ts.tv_sec = (time_t)(left / 1000000000ull);
			ts.tv_nsec = (long)(left % 1000000000ull);
			sig = sigtimedwait(set, NULL, &ts);
		}
		if (sig > 0)
			return sig;
		if (errno != EINTR && errno != EAGAIN)
			return report("sigwait", -errno), 0;
	}
}

static void target_json(const struct bench *b, int sig, double secs, const struct cpu_use *cpu)
{
	printf("{");
	json_str("mode", "target");
	json_str("address", ferry_engine_address(b->target));
	json_str("nics", b->topts.nics);
	json_str("cores", b->topts.cores);
	json_str("stopped_by", sig ? strsignal(sig) : "duration");
	printf("\"buffer_addr\":%" PRIu64 ",\"buffer_len\":%" PRIu64 ",\"seed\":%" PRIu64
	       ",\"seconds\":%.3f,",
	       (uint64_t)(uintptr_t)b->tbuf, b->buffer, b->cfg.seed, secs);
	printf("\"cpu_pct\":%.4f,\"cpu_user_ms\":%.3f,\"cpu_sys_ms\":%.3f,", cpu_pct(cpu),
	       (double)cpu->user_ns / 1e6, (double)cpu->sys_ns / 1e6);
	json_cores(b, b->first, b->after);
	printf("}\n");
}

int target_main(struct bench *b)
{
	struct cpu_use cpu;
	sigset_t set;
	uint64_t t0;
	int rc, sig;

	/* Before any engine thread exists, so that all of them inherit the mask. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	rc = -pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (rc)
		return report("pthread_sigmask", rc), 1;
	b->buffer = bench_buffer_bytes(&b->cfg);
	rc = outputs_open(b);
	if (!rc)
		rc = opts_build(b);
	if (!rc)
		rc = target_map(b);
	if (rc) {
		bench_teardown(b);
		return 1;
	}
	/* Before the engine: its listener is up as soon as it exists. */
	bench_pattern_fill(b->tbuf, b->buffer, 0, b->cfg.seed);
	rc = engine_open(b, "target", &b->topts, &b->target);
	if (!rc)
		rc = nics_check_remote(b->target, "target");
	if (!rc) {
		rc = ferry_mem_register(b->target, b->tbuf, b->buffer);
		if (rc)
			report("ferry_mem_register(target buffer)", rc);
	}
	if (!rc) {
		b->self = b->target;
		b->ncores = ferry_engine_cores(b->target);
		rc = stats_alloc(b);
	}
	if (!rc && b->cfg.pingpong)
		rc = pp_peer_start(b, b->target, b->tbuf, b->buffer);
	if (rc) {
		bench_teardown(b);
		return 1;
	}
	stats_snap(b, b->first);
	t0 = now_ns();
	printf("ferry_bench target: listening on %s buffer 0x%" PRIx64 " %" PRIu64 "\n",
	       ferry_engine_address(b->target), (uint64_t)(uintptr_t)b->tbuf, b->buffer);
	fflush(stdout);
	cpu_snap(&cpu);
	sig = target_wait(b, &set);
	cpu_since(&cpu);
	fprintf(stderr, "ferry_bench target: %s, stopping\n", sig ? strsignal(sig) : "duration over");
	stats_snap(b, b->after);
	stats_final(b);
	if (b->cfg.json) {
		target_json(b, sig, (double)(now_ns() - t0) / 1e9, &cpu);
	} else {
		printf("# ferry_bench target: nics %s, cores %s, %.1f s\n", b->topts.nics,
		       b->topts.cores, (double)(now_ns() - t0) / 1e9);
		cpu_print("target served", &cpu);
		print_cores(b, b->first, b->after);
	}
	fflush(stdout);
	rc = prom_put(b);
	bench_teardown(b);
	return rc ? 1 : 0;
}
