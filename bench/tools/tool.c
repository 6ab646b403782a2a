/* SPDX-License-Identifier: MIT */
/* The helpers of the baseline tools (tool.h). */
#include "tool.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t parse_size(const char *s)
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

void pin_cpu(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fprintf(stderr, "%s: cpu %d: %s (not pinned)\n", tool_name, cpu, strerror(errno));
}

char *pool_map(uint64_t len, int fill, int thp)
{
	uint64_t align = 2ull << 20;
	char *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	if (thp && madvise(p, len, MADV_HUGEPAGE))
		fprintf(stderr, "%s: madvise(MADV_HUGEPAGE): %s\n", tool_name, strerror(errno));
	memset(p, fill, len);
	return p;
}

void copy_opts_default(struct copy_opts *o)
{
	*o = (struct copy_opts){ .pool = 256ull << 20, .dur = 2, .cpu = -1 };
}

int copy_opt(struct copy_opts *o, const char *flag, const char *val)
{
	if (!strcmp(flag, "--hugepages")) {
		o->thp = 1;
		return 1;
	}
	if (!val)
		return 0;
	if (!strcmp(flag, "--size"))
		o->size = parse_size(val);
	else if (!strcmp(flag, "--pool"))
		o->pool = parse_size(val);
	else if (!strcmp(flag, "--duration"))
		o->dur = atof(val);
	else if (!strcmp(flag, "--cpu"))
		o->cpu = atoi(val);
	else
		return 0;
	return 2;
}

int copy_opts_check(struct copy_opts *o)
{
	if (!o->size || o->size > o->pool || o->dur <= 0)
		return -1;
	o->pool -= o->pool % o->size;
	return 0;
}
