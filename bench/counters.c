/* SPDX-License-Identifier: MIT */
/*
 * Snapshots of the cores' counters (ferry_core_stats): at the start of the
 * run, and before and after each size.  They are timed so that the deltas
 * printed are whole: a core adds a poll's completions after it has ended
 * the poll's requests, and serves hardware counters from a cache.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* The cores refresh hardware counters for readers at most every 100 ms. */
#define HW_REFRESH_WAIT_NS 110000000ull

void stats_snap(const struct bench *b, struct ferry_core_stats *s)
{
	for (unsigned k = 0; k < b->ncores; k++)
		if (ferry_core_stats(b->self, k, &s[k]))
			memset(&s[k], 0, sizeof(s[k]));
}

/*
 * A core adds a poll's completions to its counters after it has ended the
 * requests of that poll, so a snapshot taken right after the last wait can
 * miss the last burst.  Give the cores up to 100 ms to catch up.
 */
void stats_settle(const struct bench *b, struct ferry_core_stats *s)
{
	struct timespec ms = { .tv_nsec = 1000000 };
	bool settled = false;

	for (int tries = 0; tries < 100 && !settled; tries++) {
		stats_snap(b, s);
		settled = true;
		for (unsigned k = 0; k < b->ncores; k++)
			settled &= s[k].completions == s[k].wrs_posted;
		if (!settled)
			nanosleep(&ms, NULL);
	}
}

/*
 * The table's snapshot: the cores serve hardware counters from a cache
 * refreshed at most every 100 ms, so wait that long once and read again,
 * else the last tenth of a second of a run is missing from them.
 */
void stats_final(struct bench *b)
{
	struct timespec ts = { 0, (long)HW_REFRESH_WAIT_NS };

	if (!b->iopts.counters)
		return;
	nanosleep(&ts, NULL);
	stats_snap(b, b->after);
}

/*
 * The cores' CPU time, from /proc: what a core costs per byte whatever
 * else shares its CPU (the GB/s per core-second of the report).  Summed
 * over the threads named by runtime/core (ferry-core<k>); their schedstat's
 * first field is the time they ran, steal time excluded.
 */
uint64_t cores_cpu_ns(unsigned *threads)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	uint64_t sum = 0;

	*threads = 0;
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[64], comm[32] = "";
		unsigned long long ran = 0;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%.16s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		if (strncmp(comm, "ferry-core", 10))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%.16s/schedstat", e->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%llu", &ran) == 1) {
			sum += ran;
			(*threads)++;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

int stats_alloc(struct bench *b)
{
	b->first = calloc(b->ncores, sizeof(*b->first));
	b->before = calloc(b->ncores, sizeof(*b->before));
	b->after = calloc(b->ncores, sizeof(*b->after));
	if (!b->first || !b->before || !b->after)
		return report("stats arrays", -ENOMEM);
	return 0;
}
