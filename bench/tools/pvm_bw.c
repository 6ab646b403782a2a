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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

#define MAX_IOV 1024

const char tool_name[] = "pvm_bw";

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
	uint64_t size, pool, copied = 0, calls = 0, off = 0, t0, end, t, c0, c;
	struct iovec liov[MAX_IOV], riov[MAX_IOV];
	int rd = 0, fds[2], bad = 0;
	struct copy_opts o;
	unsigned niov = 1;
	uintptr_t remote = 0;
	char *src;
	pid_t pid;

	copy_opts_default(&o);
	for (int i = 1, n; i < argc && !bad; i += n) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		n = copy_opt(&o, argv[i], v);
		if (n)
			continue;
		n = 2;
		if (v && !strcmp(argv[i], "--iov"))
			niov = (unsigned)atoi(v);
		else if (v && !strcmp(argv[i], "--op"))
			rd = !strcmp(v, "read"), bad = !rd && strcmp(v, "write") != 0;
		else
			bad = 1;
	}
	if (bad || copy_opts_check(&o) || !niov || niov > MAX_IOV || o.size % niov) {
		fprintf(stderr, "usage: pvm_bw --size BYTES[K|M|G] [--pool 256M] [--duration 2] "
				"[--cpu N] [--op write|read] [--iov K] [--hugepages]\n");
		return 2;
	}
	size = o.size;
	pool = o.pool;
	if (pipe(fds))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(fds[0]);
		child(fds[1], pool, o.thp);
	}
	close(fds[1]);
	pin_cpu(o.cpu);
	src = pool_map(pool, 1, o.thp);
	if (!src || read(fds[0], &remote, sizeof(remote)) != sizeof(remote) || !remote) {
		fprintf(stderr, "pvm_bw: %llu-byte pools: %s\n", (unsigned long long)pool,
			strerror(errno));
		kill(pid, SIGKILL);
		return 1;
	}
	c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	t0 = now_ns();
	end = t0 + (uint64_t)(o.dur * 1e9);
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
	       (unsigned long long)size, (unsigned long long)pool, niov, o.thp,
	       (double)(t - t0) / 1e9, (double)copied / ((double)(t - t0) / 1e9) / 1e9,
	       (double)calls / ((double)(t - t0) / 1e9), (double)c / 1e9,
	       c ? (double)copied / (double)c : 0.0);
	return 0;
}
