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
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* "64K" -> 65536; 0 on a bad number. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': case 'k': v <<= 10; end++; break;
	case 'M': case 'm': v <<= 20; end++; break;
	case 'G': case 'g': v <<= 30; end++; break;
	default: break;
	}
	return *end ? 0 : v;
}

/* A 2 MiB-aligned pool (so that THP can back all of it), touched. */
static char *pool_map(uint64_t len, int fill, int thp)
{
	uint64_t align = 2ull << 20;
	char *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	if (thp && madvise(p, len, MADV_HUGEPAGE))
		fprintf(stderr, "memcpy_bw: madvise(MADV_HUGEPAGE): %s\n", strerror(errno));
	memset(p, fill, len);
	return p;
}

int main(int argc, char **argv)
{
	uint64_t size = 0, pool = 256ull << 20, copied = 0, off = 0, t0, end, t, c0, c;
	double dur = 2;
	int cpu = -1, thp = 0, bad = 0;
	char *src, *dst;

	for (int i = 1; i < argc; i += 2) {
		if (!strcmp(argv[i], "--hugepages"))
			thp = 1, i--;
		else if (i + 1 == argc)
			bad = 1;
		else if (!strcmp(argv[i], "--size"))
			size = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--pool"))
			pool = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--duration"))
			dur = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--cpu"))
			cpu = atoi(argv[i + 1]);
		else
			bad = 1;
	}
	if (bad || !size || size > pool || dur <= 0) {
		fprintf(stderr,
			"usage: memcpy_bw --size BYTES[K|M|G] [--pool 256M] [--duration 2] [--cpu N] "
			"[--hugepages]\n");
		return 2;
	}
	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			fprintf(stderr, "memcpy_bw: cpu %d: %s (not pinned)\n", cpu, strerror(errno));
	}
	pool -= pool % size;
	src = pool_map(pool, 1, thp);
	dst = pool_map(pool, 2, thp);
	if (!src || !dst) {
		fprintf(stderr, "memcpy_bw: %llu-byte pools: %s\n", (unsigned long long)pool,
			strerror(errno));
		return 1;
	}
	c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	t0 = now_ns();
	end = t0 + (uint64_t)(dur * 1e9);
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
	       (unsigned long long)size, (unsigned long long)pool, thp, (double)(t - t0) / 1e9,
	       (double)copied / ((double)(t - t0) / 1e9) / 1e9, (double)c / 1e9,
	       c ? (double)copied / (double)c : 0.0);
	return 0;
}
