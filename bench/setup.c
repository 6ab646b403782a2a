/* SPDX-License-Identifier: MIT */
/*
 * Set-up and teardown of a run: the engines' options (environment, then
 * flags), the buffers (page-aligned and touched, so that page faults stay
 * out of the run), the engines and the segment to the target, each port's
 * ferry port, batch, requests and latency samples; and the teardown, in
 * an order that is safe with requests still in flight.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "runtime/engine/knobs.h"

/*
 * A batch that moves no byte for this long is given up (its requests stay
 * in flight): the engine's slice timeout (timeout_ms) plus this margin, so
 * that the engine ends stalled requests (TIMEOUT) first; when it does not,
 * the bench says so.  WAIT_MS alone with timeout_ms = 0 (off).
 */
#define WAIT_MS 10000
#define WAIT_MARGIN_MS 5000
/* Each port keeps at least this many latency samples, however many ports. */
#define LAT_SAMPLES_MIN 4096u

uint64_t buf_round(const struct bench_cfg *cfg, uint64_t len)
{
	uint64_t a = cfg->hugepages ? HUGE_PAGE : PAGE;

	return (len + a - 1) & ~(a - 1);
}

/*
 * The library never advises the application's memory: whether registered
 * buffers get huge pages is the application's choice (README "cma").  A
 * refusal (no THP in this kernel) is said once and the run goes on.
 */
void buf_advise(const struct bench_cfg *cfg, void *p, uint64_t len)
{
	static bool said;

	if (cfg->hugepages && madvise(p, len, MADV_HUGEPAGE) && !said) {
		said = true;
		fprintf(stderr, "ferry_bench: --hugepages: madvise(MADV_HUGEPAGE): %s (4 KiB pages)\n",
			strerror(errno));
	}
}

/* Page-aligned (--hugepages: huge-page-aligned) and touched, so that page
 * faults stay out of the run. */
static uint8_t *buf_alloc(const struct bench_cfg *cfg, uint64_t len)
{
	uint64_t alen = buf_round(cfg, len);
	uint8_t *p = aligned_alloc(cfg->hugepages ? HUGE_PAGE : PAGE, alen);

	if (p) {
		buf_advise(cfg, p, alen);
		memset(p, 0, alen);
	}
	return p;
}

/*
 * Initiator options: defaults, then FERRY_* from the environment, then the
 * flags.  The one-process target copies them but keeps the adaptive idle
 * policy: its cores have nothing to do with a one-sided NIC, and spinning
 * would steal the CPUs the initiator's cores copy on.  The initiator
 * listens on any port so that a fixed FERRY_LISTEN only applies to the
 * target.  --target's own engine takes the flags as they are.
 */
int opts_build(struct bench *b)
{
	int rc;

	ferry_opts_default(&b->iopts);
	rc = ferry_opts_from_env(&b->iopts);
	if (rc)
		return report("FERRY_* environment", rc);
	bench_apply_opts(&b->cfg, &b->iopts);
	b->stall_ns = (uint64_t)(b->iopts.timeout_ms ? b->iopts.timeout_ms + WAIT_MARGIN_MS : WAIT_MS) *
		      1000000ull;
	b->topts = b->iopts;
	if (b->cfg.mode == BENCH_TARGET)
		return 0;
	b->topts.cores = b->cfg.target_cores ? b->cfg.target_cores : b->iopts.cores;
	b->topts.idle = FERRY_IDLE_ADAPTIVE;
	b->iopts.listen = "127.0.0.1:0";
	/* --connect --pingpong: the target connects back to this engine. */
	if (b->cfg.mode == BENCH_INITIATOR && b->cfg.pingpong && b->cfg.listen)
		b->iopts.listen = b->cfg.listen;
	else if (b->cfg.mode == BENCH_INITIATOR && b->cfg.pingpong)
		return pingpong_listen(b);
	return 0;
}

int engine_open(const struct bench *b, const char *role, const struct ferry_opts *o,
		struct ferry_engine **e)
{
	/* A benchmark-only knob, not a public option (runtime/engine/knobs.h). */
	struct ferry_knobs k = { .loop_nocopy = b->cfg.nocopy };
	char what[256];
	int rc;

	rc = ferry_engine_create_knobs(o, &k, e);
	if (rc) {
		snprintf(what, sizeof(what), "ferry_engine_create(%s, cores '%s', nics '%s')",
			 role, o->cores ? o->cores : "", o->nics ? o->nics : "");
		return report(what, rc);
	}
	return 0;
}

static int segment_open(struct bench *b, const char *addr)
{
	char what[320];
	int rc;

	rc = ferry_segment_open(b->init, addr, &b->seg);
	if (!rc)
		return 0;
	snprintf(what, sizeof(what), "ferry_segment_open(%s)%s", addr ? addr : "(null)",
		 b->cfg.mode == BENCH_INITIATOR && (rc == -ECONNREFUSED || rc == -ETIMEDOUT)
			 ? " (is ferry_bench --target listening there?)"
			 : "");
	return report(what, rc);
}

static int ports_register(struct bench *b)
{
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		int rc = ferry_mem_register(b->init, b->ports[p].buf, b->local_cap);

		if (rc)
			return report("ferry_mem_register(initiator buffer)", rc);
	}
	return 0;
}

/* --notify --peers P: receivers 1..P-1, engines like the target's on
 * addresses of their own (no name: a store would see one name twice), no
 * memory (nothing is written to them), a segment to each. */
static int receivers_open(struct bench *b)
{
	struct ferry_opts o = b->topts;
	char what[320];
	int rc;

	o.listen = "127.0.0.1:0";
	o.name = NULL;
	b->fan[0] = b->target;
	b->fan_seg[0] = b->seg;
	for (unsigned p = 1; p < b->cfg.peers; p++) {
		rc = engine_open(b, "receiver", &o, &b->fan[p]);
		if (rc)
			return rc;
		rc = ferry_segment_open(b->init, ferry_engine_address(b->fan[p]), &b->fan_seg[p]);
		if (rc) {
			snprintf(what, sizeof(what), "ferry_segment_open(receiver %u, %s)", p,
				 ferry_engine_address(b->fan[p]));
			return report(what, rc);
		}
	}
	return 0;
}

static int engines_open(struct bench *b)
{
	int rc;

	if (b->cfg.mode == BENCH_LOCAL) {
		rc = engine_open(b, "target", &b->topts, &b->target);
		if (rc)
			return rc;
		rc = ferry_mem_register(b->target, b->tbuf, b->buffer);
		if (rc)
			return report("ferry_mem_register(target buffer)", rc);
	}
	rc = engine_open(b, "initiator", &b->iopts, &b->init);
	if (!rc && b->cfg.mode == BENCH_INITIATOR)
		rc = nics_check_remote(b->init, "initiator");
	if (!rc)
		rc = ports_register(b);
	if (rc)
		return rc;
	if (b->cfg.mode == BENCH_LOCAL) {
		rc = segment_open(b, ferry_engine_address(b->target));
		b->remote_base = (uint64_t)(uintptr_t)b->tbuf;
	} else {
		rc = segment_open(b, b->cfg.connect);
		b->remote_base = b->cfg.remote_addr ? b->cfg.remote_addr : BENCH_TARGET_ADDR;
	}
	if (!rc && b->cfg.notify)
		rc = receivers_open(b);
	if (rc)
		return rc;
	b->self = b->init;
	b->ncores = ferry_engine_cores(b->init);
	soft_nic_hint(b->init, "/sys");
	return 0;
}

/*
 * Latency samples kept exactly per port: BENCH_LAT_SAMPLES shared by the
 * ports, no more than the run can produce with --iters; --lat --iters N
 * keeps all N up to BENCH_MAX_LAT_SAMPLES.
 */
static uint64_t lat_samples_cap(const struct bench_cfg *cfg)
{
	uint64_t cap = BENCH_LAT_SAMPLES / cfg->ports;

	if (cap < LAT_SAMPLES_MIN)
		cap = LAT_SAMPLES_MIN;
	if ((cfg->lat || cfg->idle) && cfg->iters)
		return cfg->iters < BENCH_MAX_LAT_SAMPLES ? cfg->iters : BENCH_MAX_LAT_SAMPLES;
	/* Divided, not multiplied: iters may be anything up to 2^64 - 1. */
	if (cfg->iters && cfg->iters <= cap / cfg->batch)
		return cfg->iters * cfg->batch;
	return cap;
}

static int port_setup(struct bench *b, struct bench_port *bp)
{
	int rc;

	bp->b = b;
	rc = ferry_port_create(b->init, &bp->port);
	if (rc)
		return report("ferry_port_create", rc);
	/* --notify: the notifications take slots after the request */
	rc = ferry_batch_create(bp->port, b->cfg.batch + (b->cfg.notify ? b->cfg.notifs : 0),
				&bp->batch);
	if (rc)
		return report("ferry_batch_create", rc);
	bp->reqs = calloc(b->cfg.batch, sizeof(*bp->reqs));
	bp->open = calloc(b->cfg.batch, sizeof(*bp->open));
	bp->prep_idx = calloc(b->cfg.batch, sizeof(*bp->prep_idx));
	if (!bp->reqs || !bp->open || !bp->prep_idx)
		return report("request array", -ENOMEM);
	for (uint32_t i = 0; i < b->cfg.batch; i++)
		bp->prep_idx[i] = i;
	if (bench_samples_init(&bp->lat, lat_samples_cap(&b->cfg), bp->idx + 1) ||
	    (b->cfg.idle && bench_samples_init(&bp->warm, lat_samples_cap(&b->cfg), bp->idx + 2)) ||
	    (b->cfg.idle && bench_samples_init(&bp->floor, lat_samples_cap(&b->cfg), bp->idx + 3)))
		return report("latency samples", -ENOMEM);
	if (bench_in_flight(&b->cfg))
		return flight_setup(bp);
	return 0;
}

static int bench_alloc(struct bench *b)
{
	b->buffer = bench_buffer_bytes(&b->cfg);
	for (uint64_t s = b->cfg.size; s; s = bench_next_size(&b->cfg, s)) {
		uint64_t need = b->cfg.pingpong ? bench_pp_bytes(s) : bench_batch_for(&b->cfg, s) * s;

		if (need > b->local_cap)
			b->local_cap = need;
		b->nsizes++;
	}
	b->ports = calloc(b->cfg.ports, sizeof(*b->ports));
	b->rows = calloc(b->nsizes + 1, sizeof(*b->rows)); /* --idle: cold and warm rows */
	if (!b->ports || !b->rows)
		return report("port array", -ENOMEM);
	for (unsigned p = 0; p < b->cfg.ports; p++)
		b->ports[p].idx = p;
	if (b->cfg.mode == BENCH_LOCAL) {
		b->tbuf = buf_alloc(&b->cfg, b->buffer);
		if (!b->tbuf)
			return report("target buffer", -ENOMEM);
		b->tbuf_len = b->buffer;
	}
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		b->ports[p].buf = buf_alloc(&b->cfg, b->local_cap);
		if (!b->ports[p].buf)
			return report("initiator buffer", -ENOMEM);
	}
	buffers_fill_once(b);
	return 0;
}

int bench_setup(struct bench *b)
{
	int rc;

	/* --verify reads WRITEs back from a --target that may have served an
	 * identical run before: this run's bytes must be its own. */
	b->cfg.write_nonce = bench_mix64(now_ns() ^ ((uint64_t)getpid() << 32));

	rc = outputs_open(b);
	if (!rc)
		rc = opts_build(b);
	if (!rc)
		rc = bench_alloc(b);
	if (!rc)
		rc = engines_open(b);
	for (unsigned p = 0; !rc && p < b->cfg.ports; p++)
		rc = port_setup(b, &b->ports[p]);
	if (!rc)
		rc = stats_alloc(b);
	if (rc)
		return rc;
	ports_place(b);
	/* After ports_place: the answering thread runs where the port threads do. */
	if (b->cfg.pingpong && b->cfg.mode == BENCH_LOCAL)
		return pp_peer_start(b, b->target, b->tbuf, b->buffer);
	return 0;
}

/*
 * Ports and batches first, then the initiator (it may still hold requests
 * against the target's memory), then the target, then the memory.  A stuck
 * batch and its port are left to the engine's destroy, which ends what is
 * in flight; the batch itself is leaked on purpose: freeing it under a core
 * that may still write its status would be worse.
 */
void bench_teardown(struct bench *b)
{
	pp_peer_stop(b);
	for (unsigned p = 0; b->ports && p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];

		flight_free(bp);
		if (bp->prep)
			ferry_prep_destroy(bp->prep);
		if (!bp->stuck) {
			if (bp->batch)
				ferry_batch_destroy(bp->batch);
			if (bp->port)
				ferry_port_destroy(bp->port);
		}
		free(bp->reqs);
		free(bp->open);
		free(bp->prep_idx);
		bench_samples_free(&bp->lat);
		bench_samples_free(&bp->warm);
		bench_samples_free(&bp->floor);
	}
	ferry_engine_destroy(b->init);
	for (unsigned p = 1; p < BENCH_MAX_PEERS; p++)
		ferry_engine_destroy(b->fan[p]); /* NULL: nothing */
	if (b->target && b->tbuf && b->cfg.mode == BENCH_TARGET)
		ferry_mem_unregister(b->target, b->tbuf);
	ferry_engine_destroy(b->target);
	for (unsigned p = 0; b->ports && p < b->cfg.ports; p++)
		free(b->ports[p].buf);
	free(b->ports);
	if (b->tbuf_mapped)
		munmap(b->tbuf, b->tbuf_len);
	else
		free(b->tbuf);
	free(b->first);
	free(b->before);
	free(b->after);
	free(b->rows);
	if (b->csv)
		fclose(b->csv);
	if (b->prom && b->prom != stdout)
		fclose(b->prom);
}
