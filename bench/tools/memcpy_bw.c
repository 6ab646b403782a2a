/* SPDX-License-Identifier: MIT */
/*
 * memcpy_bw: the baseline of cma in bench/compare-tcp.sh.  One thread
 * copies SIZE-byte blocks from one pool to another, walking both pools
 * (256 MiB each by default, far beyond any cache: cold buffers, like
 * ferry_bench's 256 MiB two-process buffers), for DURATION seconds.
 * Both pools are touched first, so no page fault is timed.
 *
 *   memcpy_bw --size 64K|1M|BYTES [--pool 256M] [--duration 2] [--cpu N] [--hugepages]
 *
 * --hugepages: madvise(MADV_HUGEPAGE) both pools before they are touched
 * (transparent huge pages), as pvm_bw and ferry_bench --hugepages do.
 *
 * Output, one line: "size S pool P thp 0|1 secs T gbps X cpu_secs C cpu_gbps Y"
 * (10^9 bytes/s copied; cpu_gbps per second of this thread's CPU time,
 * what the copy costs whatever else shares the CPU).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tool.h"

const char tool_name[] = "memcpy_bw";

int main(int argc, char **argv)
{
	uint64_t size, pool, copied = 0, off = 0, t0, end, t, c0, c;
	struct copy_opts o;
	int bad = 0;
	char *src, *dst;

	copy_opts_default(&o);
	for (int i = 1, n; i < argc && !bad; i += n) {
		n = copy_opt(&o, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
		bad = !n;
	}
	if (bad || copy_opts_check(&o)) {
		fprintf(stderr,
			"usage: memcpy_bw --size BYTES[K|M|G] [--pool 256M] [--duration 2] [--cpu N] "
			"[--hugepages]\n");
		return 2;
	}
	pin_cpu(o.cpu);
	size = o.size;
	pool = o.pool;
	src = pool_map(pool, 1, o.thp);
	dst = pool_map(pool, 2, o.thp);
	if (!src || !dst) {
		fprintf(stderr, "memcpy_bw: %llu-byte pools: %s\n", (unsigned long long)pool,
			strerror(errno));
		return 1;
	}
	c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	t0 = now_ns();
	end = t0 + (uint64_t)(o.dur * 1e9);
	do {
		/* A pool's worth between clock reads, at least 64 blocks. */
		for (uint64_t n = 0; n < pool / size || n < 64; n++) {
			memcpy(dst + off, src + off, size);
			off = off + size < pool ? off + size : 0;
			copied += size;
		}
		/* Keep the compiler from proving the copies dead. */
		__asm__ volatile("" : : "r"(dst) : "memory");
		t = now_ns();
	} while (t < end);
	c = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	printf("size %llu pool %llu thp %d secs %.3f gbps %.3f cpu_secs %.3f cpu_gbps %.3f\n",
	       (unsigned long long)size, (unsigned long long)pool, o.thp, (double)(t - t0) / 1e9,
	       (double)copied / ((double)(t - t0) / 1e9) / 1e9, (double)c / 1e9,
	       c ? (double)copied / (double)c : 0.0);
	return 0;
}
