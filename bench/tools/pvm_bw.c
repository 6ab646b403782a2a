/* SPDX-License-Identifier: MIT */
/*
 * pvm_bw: the ceiling of cma on this host, without ferry.  A fork()ed
 * child maps and touches a pool and waits; the parent copies SIZE-byte
 * blocks from its own pool into the child's with process_vm_writev (or
 * out of it with process_vm_readv), walking both pools like memcpy_bw,
 * for DURATION seconds.  Both pools are touched first, so no page fault
 * is timed.
 *
 *   pvm_bw --size 1M [--pool 256M] [--duration 2] [--cpu N] [--op write|read]
 *          [--iov K] [--hugepages]
 *
 * --iov K cuts each block into K iovecs (what a gathered run of K slices
 * costs against one iovec); --hugepages madvise(MADV_HUGEPAGE)s both
 * pools before they are touched (transparent huge pages, if the kernel
 * has them in "madvise" or "always" mode).
 *
 * Output, one line: "size S pool P iov K thp 0|1 secs T gbps X calls_per_s C
 * cpu_secs C cpu_gbps Y" (cpu_gbps per second of this thread's CPU time,
 * the kernel's copy included).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_IOV 1024

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
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	if (thp && madvise(a, len, MADV_HUGEPAGE))
		fprintf(stderr, "pvm_bw: madvise(MADV_HUGEPAGE): %s\n", strerror(errno));
	memset(a, fill, len);
	return a;
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fprintf(stderr, "pvm_bw: cpu %d: %s (not pinned)\n", cpu, strerror(errno));
}

/* The child: map and touch the pool, send its address, wait to be killed. */
static void child(int wfd, uint64_t pool, int thp)
{
	char *p = pool_map(pool, 2, thp);
	uintptr_t a = (uintptr_t)p;

	if (write(wfd, &a, sizeof(a)) != sizeof(a) || !p)
		_exit(1);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	uint64_t size = 0, pool = 256ull << 20, copied = 0, calls = 0, off = 0, t0, end, t, c0, c;
	struct iovec liov[MAX_IOV], riov[MAX_IOV];
	int cpu = -1, thp = 0, rd = 0, fds[2], bad = 0;
	unsigned niov = 1;
	double dur = 2;
	uintptr_t remote = 0;
	char *src;
	pid_t pid;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--hugepages"))
			thp = 1;
		else if (!v)
			bad = 1;
		else if (!strcmp(argv[i], "--size"))
			size = parse_size(v), i++;
		else if (!strcmp(argv[i], "--pool"))
			pool = parse_size(v), i++;
		else if (!strcmp(argv[i], "--duration"))
			dur = atof(v), i++;
		else if (!strcmp(argv[i], "--cpu"))
			cpu = atoi(v), i++;
		else if (!strcmp(argv[i], "--iov"))
			niov = (unsigned)atoi(v), i++;
		else if (!strcmp(argv[i], "--op"))
			rd = !strcmp(v, "read"), bad |= rd ? 0 : strcmp(v, "write") != 0, i++;
		else
			bad = 1;
	}
	if (bad || !size || size > pool || dur <= 0 || !niov || niov > MAX_IOV ||
	    size % niov) {
		fprintf(stderr, "usage: pvm_bw --size BYTES[K|M|G] [--pool 256M] [--duration 2] "
				"[--cpu N] [--op write|read] [--iov K] [--hugepages]\n");
		return 2;
	}
	pool -= pool % size;
	if (pipe(fds))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(fds[0]);
		child(fds[1], pool, thp);
	}
	close(fds[1]);
	pin(cpu);
	src = pool_map(pool, 1, thp);
	if (!src || read(fds[0], &remote, sizeof(remote)) != sizeof(remote) || !remote) {
		fprintf(stderr, "pvm_bw: %llu-byte pools: %s\n", (unsigned long long)pool,
			strerror(errno));
		kill(pid, SIGKILL);
		return 1;
	}
	c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	t0 = now_ns();
	end = t0 + (uint64_t)(dur * 1e9);
	do {
		for (uint64_t n = 0; n < pool / size || n < 64; n++) {
			uint64_t part = size / niov;
			ssize_t got;

			for (unsigned k = 0; k < niov; k++) {
				liov[k].iov_base = src + off + k * part;
				riov[k].iov_base = (void *)(remote + off + k * part);
				liov[k].iov_len = riov[k].iov_len = part;
			}
			got = rd ? process_vm_readv(pid, liov, niov, riov, niov, 0)
				 : process_vm_writev(pid, liov, niov, riov, niov, 0);
			if (got != (ssize_t)size) {
				fprintf(stderr, "pvm_bw: process_vm_%s: %zd (%s)\n",
					rd ? "readv" : "writev", got, strerror(errno));
				kill(pid, SIGKILL);
				return 1;
			}
			calls++;
			off = off + size < pool ? off + size : 0;
			copied += size;
		}
		t = now_ns();
	} while (t < end);
	c = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	printf("size %llu pool %llu iov %u thp %d secs %.3f gbps %.3f calls_per_s %.0f "
	       "cpu_secs %.3f cpu_gbps %.3f\n",
	       (unsigned long long)size, (unsigned long long)pool, niov, thp,
	       (double)(t - t0) / 1e9, (double)copied / ((double)(t - t0) / 1e9) / 1e9,
	       (double)calls / ((double)(t - t0) / 1e9), (double)c / 1e9,
	       c ? (double)copied / (double)c : 0.0);
	return 0;
}
