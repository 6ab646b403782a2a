/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench's configuration once every flag is read: the checks across
 * flags (which combinations make no sense, and why), what the flags imply
 * for the engine's options, and the buffer layout (how large each side's
 * buffer is, how many requests of a size fit).  No engine is touched, so
 * tests/unit/bench/test_bench_opts.c includes this file like bench_opts.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts_int.h"

/* Options that only make sense for a process that submits requests. */
static const int initiator_only[] = {
	OPT_OP, 's', OPT_BATCH, OPT_PORTS, 'n', OPT_TARGET_CORES, OPT_NOCOPY, OPT_VERIFY,
	OPT_NO_PORT_PIN, OPT_REMOTE_ADDR, OPT_LAT, OPT_SWEEP, OPT_CSV, OPT_PLOT, OPT_SYNC,
	OPT_REFILL, OPT_STATUS_ONCE, OPT_PREP, OPT_SAME_ADDR, OPT_NOTIFY, OPT_NOTIFS,
};

/* Checks of the two-process modes. */
static int check_modes(const struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	if (seen[OPT_TARGET] && seen[OPT_CONNECT])
		return bad_arg(err, errlen,
			    "--target and --connect exclude each other (one process is the target, "
			    "the other connects to it)");
	if (cfg->mode == BENCH_TARGET) {
		for (size_t i = 0; i < sizeof(initiator_only) / sizeof(initiator_only[0]); i++)
			if (seen[initiator_only[i]])
				return bad_arg(err, errlen,
					    "%s applies to the initiator (--connect), not to --target",
					    opt_flag(initiator_only[i]));
	}
	/* --connect --pingpong: where the target connects back to this process. */
	if (seen[OPT_LISTEN] && cfg->mode != BENCH_TARGET &&
	    !(cfg->mode == BENCH_INITIATOR && cfg->pingpong))
		return bad_arg(err, errlen,
			    "--listen needs --target (the initiator uses --connect; with --pingpong "
			    "it may say where the target reaches it)");
	if (seen[OPT_REMOTE_ADDR] && cfg->mode != BENCH_INITIATOR)
		return bad_arg(err, errlen, "--remote-addr needs --connect");
	if (cfg->mode == BENCH_INITIATOR && seen[OPT_TARGET_CORES])
		return bad_arg(err, errlen,
			    "--target-cores is for the one-process mode: give the target process --cores");
	if (cfg->mode != BENCH_LOCAL && seen[OPT_NOCOPY])
		return bad_arg(err, errlen,
			    "--nocopy is for the loop NIC, which cannot reach another process");
	return 0;
}

/* The flag that makes a run send one request at a time, for messages. */
static const char *one_at_a_time(const struct bench_cfg *cfg)
{
	if (cfg->pingpong)
		return "--pingpong";
	if (cfg->notify)
		return "--notify";
	return cfg->idle ? "--idle" : "--lat";
}

/* --lat and --sweep against the rest. */
static int check_lat_sweep(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	if (seen[OPT_SWEEP] && seen['s'])
		return bad_arg(err, errlen,
			    "--sweep and --size exclude each other (--sweep is --size %llu:%lluM; "
			    "give --size LO:HI for other sizes)",
			    BENCH_SWEEP_MIN, BENCH_SWEEP_MAX >> 20);
	if (seen[OPT_SWEEP]) {
		cfg->size = BENCH_SWEEP_MIN;
		cfg->size_max = BENCH_SWEEP_MAX;
	}
	if (!cfg->lat && !cfg->idle)
		return 0;
	if (seen[OPT_BATCH] && cfg->batch != 1)
		return bad_arg(err, errlen, "%s sends one request at a time: --batch must be 1",
			    one_at_a_time(cfg));
	if (seen[OPT_PORTS] && cfg->ports != 1)
		return bad_arg(err, errlen, "%s sends one request at a time: --ports must be 1",
			    one_at_a_time(cfg));
	cfg->batch = 1;
	cfg->ports = 1;
	return 0;
}

/*
 * --pingpong: WRITEs both ways, the bytes must arrive (the peer polls its
 * memory for them), one message at a time; its rows are latency rows.
 */
static int check_pingpong(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	if (!cfg->pingpong)
		return 0;
	if (cfg->lat)
		return bad_arg(err, errlen,
			    "--lat and --pingpong exclude each other (two latency tests: one request "
			    "timed to its completion, or half a WRITE round trip)");
	if (seen[OPT_OP] && cfg->op != FERRY_OP_WRITE)
		return bad_arg(err, errlen, "--pingpong WRITEs, like ib_write_lat: not with --op read");
	if (cfg->nocopy)
		return bad_arg(err, errlen,
			    "--pingpong polls memory for the peer's message: not with --nocopy, which "
			    "moves no byte");
	if (cfg->verify)
		return bad_arg(err, errlen, "--verify is for the throughput and --lat runs, not --pingpong");
	cfg->lat = cfg->mode != BENCH_TARGET;
	return 0;
}

/*
 * --notify: one WRITE and a notification after it (ferry_notify), timed
 * until the target engine's ferry_notif_poll returns the notification,
 * which is read in this process: its rows are latency rows.
 */
static int check_notify(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	if (seen[OPT_NOTIFS] && !cfg->notify)
		return bad_arg(err, errlen, "--notifs is the notifications per --notify turn: "
			    "give --notify too");
	if (!seen[OPT_NOTIFS])
		cfg->notifs = 1;
	if (seen[OPT_PEERS] && !cfg->notify)
		return bad_arg(err, errlen, "--peers is the engines --notify's notifications go to: "
			    "give --notify too");
	if (!seen[OPT_PEERS])
		cfg->peers = 1;
	if (!cfg->notify)
		return 0;
	if (cfg->pingpong || cfg->idle)
		return bad_arg(err, errlen, "--notify is a latency test of its own: not with %s",
			    cfg->pingpong ? "--pingpong" : "--idle");
	if (cfg->mode != BENCH_LOCAL)
		return bad_arg(err, errlen,
			    "--notify polls the target engine's notifications, so both engines run "
			    "in this process: not with --target or --connect");
	if (seen[OPT_OP] && cfg->op != FERRY_OP_WRITE)
		return bad_arg(err, errlen,
			    "--notify times a WRITE and the notification that follows it: not "
			    "--op read");
	cfg->lat = true;
	return 0;
}

/*
 * --idle SECONDS: the engines idle that long, then one request at a time
 * (--iters of them, each after an idle gap, and each again at once); a
 * --target serves that long and reports its CPU.
 */
static int check_idle(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	static const int not_with[] = { OPT_LAT,   OPT_PINGPONG, OPT_SYNC, OPT_REFILL, OPT_VERIFY,
					OPT_SWEEP, OPT_PREP,	 OPT_PLOT, 'D' };

	if (!cfg->idle)
		return 0;
	for (size_t i = 0; i < sizeof(not_with) / sizeof(not_with[0]); i++)
		if (seen[not_with[i]])
			return bad_arg(err, errlen,
				    "--idle measures an idle engine and then one request at a time: "
				    "not with %s%s",
				    opt_flag(not_with[i]),
				    not_with[i] == 'D' ? " (--idle SECONDS is the idle time)" : "");
	if (cfg->size != cfg->size_max)
		return bad_arg(err, errlen, "--idle runs one size: not --size LO:HI");
	if (cfg->mode == BENCH_TARGET) {
		cfg->duration = cfg->idle;
		cfg->duration_set = true;
		return 0;
	}
	if (!seen['s'])
		cfg->size = cfg->size_max = BENCH_IDLE_SIZE;
	if (!cfg->iters)
		cfg->iters = BENCH_IDLE_ITERS;
	return 0;
}

/* How a throughput port submits: in flight (--refill), --sync (--status-once), --prep. */
static int check_run(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	bool single = cfg->lat || cfg->idle;

	if (cfg->sync && single)
		return bad_arg(err, errlen, "--sync is for throughput runs: %s sends one request at a time",
			    one_at_a_time(cfg));
	if (seen[OPT_REFILL] && (cfg->sync || single))
		return bad_arg(err, errlen,
			    "--refill is for throughput runs with requests in flight, not %s",
			    cfg->sync ? "--sync (it resubmits the whole batch)" : one_at_a_time(cfg));
	if (seen[OPT_REFILL] && cfg->refill > cfg->batch)
		return bad_arg(err, errlen,
			    "--refill %u exceeds --batch %u (the requests in flight per port)",
			    cfg->refill, cfg->batch);
	if (cfg->status_once && !cfg->sync)
		return bad_arg(err, errlen,
			    "--status-once needs --sync (in flight, a request's status is read until "
			    "it has ended)");
	if (cfg->prep && (cfg->pingpong || cfg->idle))
		return bad_arg(err, errlen, "--prep is for throughput and --lat runs, not %s",
			    one_at_a_time(cfg));
	if (!seen[OPT_REFILL])
		cfg->refill = bench_default_refill(cfg->batch);
	return 0;
}

/* Checks across flags, once all are known; fills derived fields. */
int bench_check_cfg(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	uint64_t per_port, need;
	int rc;

	if (cfg->duration_set && cfg->iters)
		return bad_arg(err, errlen, "--duration and --iters exclude each other");
	/* With --nocopy no byte moves: every check would fail. */
	if (cfg->verify && cfg->nocopy)
		return bad_arg(err, errlen, "--verify and --nocopy exclude each other");
	/* Requests sharing their bytes leave nothing per request to check. */
	if (cfg->verify && cfg->same_addr)
		return bad_arg(err, errlen, "--verify and --same-addr exclude each other");
	if (cfg->json && cfg->prom && !strcmp(cfg->prom, "-"))
		return bad_arg(err, errlen,
			    "--prom - and --json both write to stdout: give --prom a file name");
	if (cfg->secret && !cfg->opens)
		return bad_arg(err, errlen, "--secret goes with --opens");
	if (cfg->opens && cfg->mode != BENCH_LOCAL)
		return bad_arg(err, errlen, "--opens runs both engines in this process: not with "
				    "--target or --connect");
	rc = check_modes(cfg, seen, err, errlen);
	if (!rc)
		rc = check_pingpong(cfg, seen, err, errlen);
	if (!rc)
		rc = check_notify(cfg, seen, err, errlen);
	if (!rc)
		rc = check_idle(cfg, seen, err, errlen);
	if (!rc)
		rc = check_lat_sweep(cfg, seen, err, errlen);
	if (!rc)
		rc = check_run(cfg, seen, err, errlen);
	if (rc)
		return rc;
	if (cfg->mode == BENCH_TARGET)
		return 0;
	/* size and batch are each capped, so these products cannot overflow. */
	if (cfg->mode == BENCH_LOCAL && !cfg->sweep && !cfg->buffer) {
		per_port = cfg->pingpong ? bench_pp_bytes(cfg->size) : cfg->size * cfg->batch;
		if (per_port > BENCH_MAX_BUFFER || per_port * cfg->ports > BENCH_MAX_BUFFER)
			return bad_arg(err, errlen,
				    "buffer --ports %u x --batch %u x --size %llu exceeds the %llu MiB "
				    "cap (or give a smaller --buffer: batches shrink to fit)",
				    cfg->ports, cfg->batch, (unsigned long long)cfg->size,
				    BENCH_MAX_BUFFER >> 20);
		return 0;
	}
	/* Every port needs room for at least one request of the largest size. */
	need = cfg->pingpong ? bench_pp_bytes(cfg->size_max) : cfg->size_max * cfg->ports;
	if (need > BENCH_MAX_BUFFER)
		return bad_arg(err, errlen,
			    "--ports %u x --size %llu exceeds the %llu MiB buffer cap", cfg->ports,
			    (unsigned long long)cfg->size_max, BENCH_MAX_BUFFER >> 20);
	if (need > bench_buffer_bytes(cfg) && (cfg->buffer || cfg->mode == BENCH_INITIATOR))
		return bad_arg(err, errlen,
			    "--buffer %llu is smaller than --ports %u x --size %llu%s",
			    (unsigned long long)bench_buffer_bytes(cfg), cfg->ports,
			    (unsigned long long)cfg->size_max,
			    cfg->mode == BENCH_INITIATOR ? " (and the target's --buffer must be as large)"
							 : "");
	return 0;
}

void bench_apply_opts(const struct bench_cfg *cfg, struct ferry_opts *o)
{
	if (cfg->cores)
		o->cores = cfg->cores;
	else if (!o->cores || !*o->cores)
		o->cores = "0"; /* neither flag nor FERRY_CORES */
	if (cfg->nics)
		o->nics = cfg->nics;
	if (cfg->slice)
		o->slice_size = cfg->slice;
	if (cfg->qps)
		o->qps_per_ep = cfg->qps;
	if (cfg->depth)
		o->wrs_per_qp = cfg->depth;
	/*
	 * The engine refuses signal_every > wrs_per_qp.  A shallow --depth is
	 * a measurement, not a mistake: signal more often unless the user chose
	 * FERRY_SIGNAL_EVERY explicitly (then let the engine say why).
	 */
	if (cfg->depth && o->signal_every > cfg->depth && !getenv("FERRY_SIGNAL_EVERY"))
		o->signal_every = cfg->depth;
	if (cfg->spin)
		o->idle = FERRY_IDLE_SPIN;
	if (cfg->caller)
		o->idle = FERRY_IDLE_CALLER;
	if (cfg->counters >= 0)
		o->counters = cfg->counters;
	/* The target listens where the initiator expects it. */
	if (cfg->mode == BENCH_TARGET) {
		if (cfg->listen)
			o->listen = cfg->listen;
		else if (!getenv("FERRY_LISTEN"))
			o->listen = BENCH_DEFAULT_LISTEN;
	}
}

static uint64_t page_up(uint64_t s)
{
	return (s + BENCH_PP_CTL - 1) & ~(BENCH_PP_CTL - 1);
}

uint64_t bench_pp_recv(uint64_t s)
{
	(void)s;
	return BENCH_PP_CTL;
}

uint64_t bench_pp_send(uint64_t s)
{
	return BENCH_PP_CTL + page_up(s);
}

uint64_t bench_pp_bytes(uint64_t s)
{
	return BENCH_PP_CTL + 2 * page_up(s);
}

const char *bench_run_name(const struct bench_cfg *cfg)
{
	if (cfg->idle)
		return "idle";
	if (cfg->pingpong)
		return "pingpong";
	if (cfg->notify)
		return "notify";
	if (cfg->lat)
		return "lat";
	return cfg->sync ? "bw_sync" : "bw";
}

uint64_t bench_buffer_bytes(const struct bench_cfg *cfg)
{
	uint64_t need = cfg->pingpong ? bench_pp_bytes(cfg->size_max) : cfg->size_max * cfg->ports;

	if (cfg->buffer)
		return cfg->buffer;
	if (cfg->mode == BENCH_LOCAL && !cfg->sweep && cfg->pingpong)
		return bench_pp_bytes(cfg->size);
	if (cfg->mode == BENCH_LOCAL && !cfg->sweep)
		return cfg->size * cfg->batch * cfg->ports;
	if (cfg->mode == BENCH_LOCAL && need > BENCH_DEFAULT_BUFFER)
		return need;
	return BENCH_DEFAULT_BUFFER;
}

uint64_t bench_total_bytes(const struct bench_cfg *cfg)
{
	return bench_buffer_bytes(cfg);
}

uint32_t bench_batch_for(const struct bench_cfg *cfg, uint64_t s)
{
	uint64_t fit = bench_buffer_bytes(cfg) / (s * cfg->ports);

	if (fit < 1)
		fit = 1;
	return fit < cfg->batch ? (uint32_t)fit : cfg->batch;
}

uint64_t bench_next_size(const struct bench_cfg *cfg, uint64_t s)
{
	if (!cfg->sweep || s >= cfg->size_max)
		return 0;
	return s * 2;
}

uint64_t bench_write_seed(const struct bench_cfg *cfg, unsigned k)
{
	/* The nonce above the low byte: k < 64 sizes never brings it back to seed. */
	return cfg->seed + 1 + k + (cfg->write_nonce << 8);
}
