/* SPDX-License-Identifier: MIT */
/*
 * --opens N, first part: many engines open one target at once, as a
 * cluster's prefill and decode processes do at start-up.  min(N, 256)
 * initiator engines (threads of this process, one core each, the same
 * CPUs) are created first, then released together through a barrier to
 * ferry_segment_open the one target; each open is timed on its own
 * thread.  Prints the wall time from release to the last open and the
 * p50/p99/max of one open (issue goal: 256 concurrent opens in under 1 s
 * on loop).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define OPENERS_MAX 256u

struct opener {
	struct ferry_engine *e;
	const char *target;
	pthread_barrier_t *go;
	uint64_t t0, t1; /* ns, CLOCK_MONOTONIC */
	int rc;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *opener_main(void *arg)
{
	struct opener *o = arg;
	ferry_seg_t seg;

	pthread_barrier_wait(o->go);
	o->t0 = mono_ns();
	o->rc = ferry_segment_open(o->e, o->target, &seg);
	o->t1 = mono_ns();
	return NULL;
}

/*
 * The m opens are over: wall time from the first release to the last end,
 * and the percentiles of the opens that worked (bench_lat_summary's
 * nearest rank, as every other row; a failed open's time is no open's).
 */
static int openers_report(const struct opener *o, uint32_t m, const char *secret)
{
	uint64_t *d = calloc(m ? m : 1, sizeof(*d)), first = UINT64_MAX, last = 0, n = 0;
	uint32_t failed = 0;
	struct bench_lat l;

	if (!d)
		return report("openers", -ENOMEM);
	for (uint32_t i = 0; i < m; i++) {
		first = o[i].t0 < first ? o[i].t0 : first;
		last = o[i].t1 > last ? o[i].t1 : last;
		if (!o[i].rc) {
			d[n++] = o[i].t1 - o[i].t0;
			continue;
		}
		if (!failed++)
			fprintf(stderr, "ferry_bench: --opens: an open failed: %s\n", strerror(-o[i].rc));
	}
	bench_lat_summary(d, n, &l);
	printf("opens: %u engines opened one target at once, cluster key %s: %u failed, wall "
	       "%.3f s; one open p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
	       m, secret ? "on" : "off", failed, (double)(last - first) / 1e9, (double)l.p50 / 1e6,
	       (double)l.p99 / 1e6, (double)l.max / 1e6);
	fflush(stdout);
	free(d);
	return failed ? -EIO : 0;
}

static int openers_start(struct opener *o, pthread_t *th, uint32_t m, uint32_t *started)
{
	for (*started = 0; *started < m; (*started)++) {
		int rc = pthread_create(&th[*started], NULL, opener_main, &o[*started]);

		if (rc)
			return report("pthread_create", -rc);
	}
	return 0;
}

int openers_run(const struct bench_cfg *cfg, const char *secret)
{
	uint32_t m = cfg->opens < OPENERS_MAX ? cfg->opens : OPENERS_MAX, made = 0, started = 0;
	struct opener *o = calloc(m, sizeof(*o));
	pthread_t *th = calloc(m, sizeof(*th));
	struct ferry_engine *t = NULL;
	pthread_barrier_t go;
	int rc;

	if (!o || !th) {
		free(o);
		free(th);
		return report("openers", -ENOMEM);
	}
	pthread_barrier_init(&go, NULL, m + 1);
	rc = opens_engine(cfg, opens_cores(cfg, true), "127.0.0.1:0", secret, &t);
	for (; !rc && made < m; made++) {
		o[made] = (struct opener){ .target = ferry_engine_address(t), .go = &go };
		rc = opens_engine(cfg, opens_cores(cfg, false), "127.0.0.1:0", secret, &o[made].e);
	}
	if (!rc)
		rc = openers_start(o, th, m, &started);
	/* An error before the release leaves started threads at the barrier:
	 * return without cleaning up, ferry_bench exits with the error. */
	if (rc)
		return rc;
	pthread_barrier_wait(&go);
	for (uint32_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	rc = openers_report(o, m, secret);
	for (uint32_t i = 0; i < made; i++)
		ferry_engine_destroy(o[i].e);
	ferry_engine_destroy(t);
	pthread_barrier_destroy(&go);
	free(o);
	free(th);
	return rc;
}
