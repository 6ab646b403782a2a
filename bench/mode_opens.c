/* SPDX-License-Identifier: MIT */
/*
 * --opens N: first min(N, 256) engines open one target at once
 * (mode_openers.c); then how fast one engine opens many segments, and what
 * they cost in memory.  One target engine in this process listens on 0.0.0.0, so
 * every 127.0.x.y reaches it: the initiator opens it under N distinct
 * loopback addresses, each a segment of its own (its slot, descriptor and
 * endpoints, one handshake per core; ep_cache bounds the endpoints kept,
 * the rest are evicted as the opens go on).  Timed: the N opens, then one
 * 64-byte WRITE through each segment (mostly cache misses: reconnects),
 * checked, then the N closes.  RSS (VmRSS) is read with the engines
 * created and 0 segments open, and with N open.  With --secret FILE it
 * all runs a second time with that cluster key on both engines (every
 * control call and data connection authenticated).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define OPENS_SLOT 64u   /* bytes moved per segment */
#define OPENS_BATCH 32u  /* WRITEs per batch */

struct opens_run {
	struct ferry_engine *t, *in;
	uint8_t *lbuf, *rbuf;
	ferry_seg_t *seg;
	uint32_t n;
	double t_open, t_io, t_close;
	long rss0, rss1;
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's resident set in KiB (VmRSS), or -1. */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* The CPUs of the initiator's (or the target's) engine. */
const char *opens_cores(const struct bench_cfg *cfg, bool target)
{
	const char *env = getenv("FERRY_CORES");

	if (target && cfg->target_cores)
		return cfg->target_cores;
	return cfg->cores ? cfg->cores : env ? env : "0";
}

int opens_engine(const struct bench_cfg *cfg, const char *cores, const char *listen,
		 const char *secret, struct ferry_engine **out)
{
	struct ferry_opts o;
	int rc;

	ferry_opts_default(&o);
	rc = ferry_opts_from_env(&o);
	if (rc)
		return report("FERRY_* environment", rc);
	o.cores = cores;
	if (cfg->nics)
		o.nics = cfg->nics;
	else if (!getenv("FERRY_NICS"))
		o.nics = "loop";
	o.listen = listen;
	o.secret_file = secret;
	rc = ferry_engine_create(&o, out);
	return rc ? report("ferry_engine_create", rc) : 0;
}

static int opens_setup(const struct bench_cfg *cfg, const char *secret, struct opens_run *r)
{
	size_t len = (size_t)r->n * OPENS_SLOT;
	int rc;

	rc = opens_engine(cfg, opens_cores(cfg, true), "0.0.0.0:0", secret, &r->t);
	if (!rc)
		rc = opens_engine(cfg, opens_cores(cfg, false), "127.0.0.1:0", secret, &r->in);
	if (rc)
		return rc;
	r->lbuf = aligned_alloc(PAGE, (len + PAGE - 1) / PAGE * PAGE);
	r->rbuf = aligned_alloc(PAGE, (len + PAGE - 1) / PAGE * PAGE);
	r->seg = calloc(r->n, sizeof(*r->seg));
	if (!r->lbuf || !r->rbuf || !r->seg)
		return report("buffers", -ENOMEM);
	for (size_t k = 0; k < len; k++)
		r->lbuf[k] = (uint8_t)(k * 131 + 7);
	memset(r->rbuf, 0, len);
	rc = ferry_mem_register(r->in, r->lbuf, len);
	if (!rc)
		rc = ferry_mem_register(r->t, r->rbuf, len);
	return rc ? report("ferry_mem_register", rc) : 0;
}

/* The N opens, timed; RSS before and after. */
static int opens_open(struct opens_run *r)
{
	const char *ta = ferry_engine_address(r->t);
	unsigned port = (unsigned)atoi(strrchr(ta, ':') + 1);
	char addr[64];
	double t0;

	r->rss0 = rss_kib();
	t0 = mono_s();
	for (uint32_t i = 0; i < r->n; i++) {
		int rc;

		snprintf(addr, sizeof(addr), "127.0.%u.%u:%u", 1 + i / 250, 1 + i % 250, port);
		rc = ferry_segment_open(r->in, addr, &r->seg[i]);
		if (rc) {
			fprintf(stderr, "ferry_bench: open %u of %u (%s): %s\n", i + 1, r->n, addr,
				strerror(-rc));
			return rc;
		}
	}
	r->t_open = mono_s() - t0;
	r->rss1 = rss_kib();
	return 0;
}

/* One WRITE through each segment, in batches; every byte checked. */
static int opens_write(struct opens_run *r)
{
	struct ferry_req q[OPENS_BATCH];
	struct ferry_port *p = NULL;
	struct ferry_batch *b = NULL;
	double t0 = mono_s();
	int rc = ferry_port_create(r->in, &p);

	if (!rc)
		rc = ferry_batch_create(p, OPENS_BATCH, &b);
	for (uint32_t i = 0; !rc && i < r->n; i += OPENS_BATCH) {
		uint32_t m = r->n - i < OPENS_BATCH ? r->n - i : OPENS_BATCH;

		for (uint32_t k = 0; k < m; k++) {
			size_t off = (size_t)(i + k) * OPENS_SLOT;

			q[k] = (struct ferry_req){ FERRY_OP_WRITE, r->lbuf + off, r->seg[i + k],
						   (uint64_t)(uintptr_t)(r->rbuf + off), OPENS_SLOT };
		}
		rc = ferry_submit(b, q, m);
		if (!rc)
			rc = ferry_batch_wait(b, 60000);
		for (uint32_t k = 0; !rc && k < m; k++) {
			struct ferry_req_status st;

			rc = ferry_req_status(b, k, &st);
			if (!rc && st.state != FERRY_DONE)
				rc = st.error ? st.error : -EIO;
		}
		if (!rc)
			rc = ferry_batch_reset(b);
	}
	r->t_io = mono_s() - t0;
	if (b)
		ferry_batch_destroy(b);
	if (p)
		ferry_port_destroy(p);
	if (rc)
		return report("write through each segment", rc);
	if (memcmp(r->lbuf, r->rbuf, (size_t)r->n * OPENS_SLOT)) {
		fprintf(stderr, "ferry_bench: --opens: the target's bytes differ from what was written\n");
		return -EIO;
	}
	return 0;
}

static void opens_teardown(struct opens_run *r)
{
	double t0 = mono_s();

	for (uint32_t i = 0; r->seg && i < r->n; i++)
		if (r->seg[i])
			ferry_segment_close(r->in, r->seg[i]);
	r->t_close = mono_s() - t0;
	if (r->in && r->lbuf)
		ferry_mem_unregister(r->in, r->lbuf);
	if (r->t && r->rbuf)
		ferry_mem_unregister(r->t, r->rbuf);
	ferry_engine_destroy(r->in);
	ferry_engine_destroy(r->t);
	free(r->lbuf);
	free(r->rbuf);
	free(r->seg);
	malloc_trim(0); /* a second run's RSS starts from what this one used, not its heap */
}

static int opens_one(const struct bench_cfg *cfg, const char *secret)
{
	struct opens_run r = { .n = cfg->opens };
	int rc = opens_setup(cfg, secret, &r);

	if (!rc)
		rc = opens_open(&r);
	if (!rc)
		rc = opens_write(&r);
	opens_teardown(&r);
	if (rc)
		return 1;
	printf("opens: %u segments, cluster key %s: opened in %.3f s (%.0f opens/s); one %u-byte "
	       "WRITE through each, checked, in %.3f s; closed in %.3f s; RSS %ld KiB with 0 "
	       "open, %ld KiB with %u (%+.1f KiB per segment)\n",
	       r.n, secret ? "on" : "off", r.t_open, r.n / r.t_open, OPENS_SLOT, r.t_io, r.t_close,
	       r.rss0, r.rss1, r.n, (double)(r.rss1 - r.rss0) / r.n);
	fflush(stdout);
	return 0;
}

int opens_main(const struct bench_cfg *cfg)
{
	int rc = openers_run(cfg, NULL);

	if (!rc && cfg->secret)
		rc = openers_run(cfg, cfg->secret);
	if (!rc)
		rc = opens_one(cfg, NULL);
	if (!rc && cfg->secret)
		rc = opens_one(cfg, cfg->secret);
	return rc ? 1 : 0;
}
