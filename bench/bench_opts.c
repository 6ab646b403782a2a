/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench command line.  Every refusal names the flag and the value,
 * and nothing here touches an engine, so tests/unit/bench/test_bench_opts.c includes
 * this file directly and runs the parser on its own.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_opts.h"
#include "runtime/engine/opts.h"

/* Long-only options: values past any character getopt could return. */
enum {
	OPT_OP = 256,
	OPT_BATCH,
	OPT_PORTS,
	OPT_CORES,
	OPT_TARGET_CORES,
	OPT_SLICE,
	OPT_NOCOPY,
	OPT_SPIN,
	OPT_VERIFY,
	OPT_JSON,
	OPT_NO_PORT_PIN,
	OPT_TARGET,
	OPT_LISTEN,
	OPT_CONNECT,
	OPT_BUFFER,
	OPT_REMOTE_ADDR,
	OPT_SEED,
	OPT_LAT,
	OPT_SWEEP,
	OPT_CSV,
	OPT_PLOT,
	OPT_PROM,
	OPT_COUNTERS,
	OPT_END, /* one past the last: size of the seen[] array */
};

/* perftest's short letters where it has one: -s size, -n iters, -D, -q, -t, -d. */
static const char short_opts[] = "+:hs:n:D:q:t:d:";

static const struct option long_opts[] = {
	{ "op", required_argument, NULL, OPT_OP },
	{ "size", required_argument, NULL, 's' },
	{ "batch", required_argument, NULL, OPT_BATCH },
	{ "ports", required_argument, NULL, OPT_PORTS },
	{ "cores", required_argument, NULL, OPT_CORES },
	{ "target-cores", required_argument, NULL, OPT_TARGET_CORES },
	{ "nics", required_argument, NULL, 'd' },
	{ "duration", required_argument, NULL, 'D' },
	{ "iters", required_argument, NULL, 'n' },
	{ "slice", required_argument, NULL, OPT_SLICE },
	{ "qps", required_argument, NULL, 'q' },
	{ "depth", required_argument, NULL, 't' },
	{ "nocopy", no_argument, NULL, OPT_NOCOPY },
	{ "spin", no_argument, NULL, OPT_SPIN },
	{ "verify", no_argument, NULL, OPT_VERIFY },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "no-port-pin", no_argument, NULL, OPT_NO_PORT_PIN },
	{ "target", no_argument, NULL, OPT_TARGET },
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "connect", required_argument, NULL, OPT_CONNECT },
	{ "buffer", required_argument, NULL, OPT_BUFFER },
	{ "remote-addr", required_argument, NULL, OPT_REMOTE_ADDR },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "lat", no_argument, NULL, OPT_LAT },
	{ "sweep", no_argument, NULL, OPT_SWEEP },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "prom", required_argument, NULL, OPT_PROM },
	{ "counters", required_argument, NULL, OPT_COUNTERS },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

__attribute__((format(printf, 3, 4)))
static int bad_arg(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

void bench_cfg_default(struct bench_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->op = FERRY_OP_WRITE;
	cfg->size = 64 << 10;
	cfg->size_max = cfg->size;
	cfg->seed = 1;
	cfg->batch = 32;
	cfg->ports = 1;
	cfg->duration = 3.0;
	cfg->counters = -1;
}

const char *bench_op_name(enum ferry_op op)
{
	return op == FERRY_OP_READ ? "read" : "write";
}

const char *bench_mode_name(enum bench_mode m)
{
	switch (m) {
	case BENCH_TARGET:
		return "target";
	case BENCH_INITIATOR:
		return "initiator";
	default:
		return "local";
	}
}

/*
 * The runtime's number parser (FERRY_* variables), so that the flags and
 * the variables take the same numbers; a flag's count or size must also be
 * positive.
 */
static const char *parse_num(const char *s, int suffix, uint64_t max, uint64_t *out)
{
	const char *why;
	uint64_t x;

	why = ferry_parse_num(s, suffix, max, &x);
	if (why)
		return why;
	if (x == 0)
		return "must be greater than 0";
	*out = x;
	return NULL;
}

const char *bench_parse_size(const char *s, uint64_t max, uint64_t *out)
{
	return parse_num(s, 1, max, out);
}

static int take_size(const char *flag, const char *v, uint64_t max, uint64_t *out,
		     char *err, size_t errlen)
{
	const char *why = parse_num(v, 1, max, out);

	if (why)
		return bad_arg(err, errlen, "%s '%s': %s (a positive size, max %llu)", flag, v, why,
			    (unsigned long long)max);
	return 0;
}

/*
 * --size: one size, or "LO:HI", the powers of two from LO to HI (both
 * powers of two, LO <= HI): one run, and one output row, per size.
 */
static int take_size_range(const char *v, struct bench_cfg *cfg, char *err, size_t errlen)
{
	const char *colon = strchr(v, ':'), *why;
	char lo_s[64];
	uint64_t lo = 0, hi = 0; /* set by the parser; gcc cannot see it */
	size_t n;

	if (!colon) {
		if (take_size("--size", v, BENCH_MAX_BUFFER, &lo, err, errlen))
			return -EINVAL;
		cfg->size = cfg->size_max = lo;
		cfg->sweep = false;
		return 0;
	}
	n = (size_t)(colon - v);
	if (n >= sizeof(lo_s))
		return bad_arg(err, errlen, "--size '%s': LO of LO:HI too long", v);
	memcpy(lo_s, v, n);
	lo_s[n] = '\0';
	why = parse_num(lo_s, 1, BENCH_MAX_BUFFER, &lo);
	if (why)
		return bad_arg(err, errlen, "--size '%s': LO '%s': %s (a positive size, max %llu)", v,
			    lo_s, why, BENCH_MAX_BUFFER);
	why = parse_num(colon + 1, 1, BENCH_MAX_BUFFER, &hi);
	if (why)
		return bad_arg(err, errlen, "--size '%s': HI '%s': %s (a positive size, max %llu)", v,
			    colon + 1, why, BENCH_MAX_BUFFER);
	if (lo > hi)
		return bad_arg(err, errlen, "--size '%s': LO is larger than HI (want LO:HI, e.g. 2:64M)",
			    v);
	if (lo & (lo - 1) || hi & (hi - 1))
		return bad_arg(err, errlen,
			    "--size '%s': a range runs powers of two: LO and HI must be powers of two",
			    v);
	cfg->size = lo;
	cfg->size_max = hi;
	cfg->sweep = true;
	return 0;
}

/*
 * HOST:PORT as the engine takes it: a dotted IPv4 address (for --connect
 * also "localhost", the one name the engine resolves), the port decimal,
 * 1..65535 (0 = any port for --listen).
 */
static int take_hostport(const char *flag, const char *v, int listen, const char **out,
			 char *err, size_t errlen)
{
	const char *colon = strrchr(v, ':'), *q;
	char host[64];
	struct in_addr a;
	unsigned long port = 0;
	size_t n;

	if (!*v)
		return bad_arg(err, errlen, "%s: empty value (want HOST:PORT)", flag);
	if (!colon)
		return bad_arg(err, errlen, "%s '%s': no port (want HOST:PORT)", flag, v);
	n = (size_t)(colon - v);
	if (!n)
		return bad_arg(err, errlen, "%s '%s': no host (want HOST:PORT)", flag, v);
	if (n >= sizeof(host))
		return bad_arg(err, errlen, "%s '%s': host too long", flag, v);
	memcpy(host, v, n);
	host[n] = '\0';
	q = colon + 1;
	if (!*q || strlen(q) > 5)
		return bad_arg(err, errlen, "%s '%s': bad port '%s' (1..65535)", flag, v, q);
	for (const char *d = q; *d; d++) {
		if (!isdigit((unsigned char)*d))
			return bad_arg(err, errlen, "%s '%s': bad port '%s' (1..65535)", flag, v, q);
		port = port * 10 + (unsigned long)(*d - '0');
	}
	if (port > 65535 || (port == 0 && !listen))
		return bad_arg(err, errlen, "%s '%s': bad port '%s' (%s..65535)", flag, v, q,
			    listen ? "0" : "1");
	if (inet_pton(AF_INET, host, &a) != 1 && (listen || strcmp(host, "localhost")))
		return bad_arg(err, errlen, "%s '%s': host '%s' is not a dotted IPv4 address%s", flag,
			    v, host, listen ? "" : " (or localhost)");
	*out = v;
	return 0;
}

/* A hexadecimal address, "0x" optional, not 0. */
static int take_hex(const char *flag, const char *v, uint64_t *out, char *err, size_t errlen)
{
	unsigned long long x;
	const char *d = v;
	char *end;

	if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
		d += 2;
	if (!isxdigit((unsigned char)*d))
		return bad_arg(err, errlen, "%s '%s': not a hexadecimal address", flag, v);
	errno = 0;
	x = strtoull(d, &end, 16);
	if (*end || errno == ERANGE)
		return bad_arg(err, errlen, "%s '%s': not a hexadecimal address", flag, v);
	if (!x)
		return bad_arg(err, errlen, "%s '%s': must not be 0", flag, v);
	*out = x;
	return 0;
}

static int take_u32(const char *flag, const char *v, int suffix, uint32_t max, uint32_t *out,
		    char *err, size_t errlen)
{
	const char *why;
	uint64_t x;

	why = parse_num(v, suffix, max, &x);
	if (why)
		return bad_arg(err, errlen, "%s '%s': %s (a positive integer, max %u)", flag, v, why,
			    max);
	*out = (uint32_t)x;
	return 0;
}

static int take_iters_like(const char *flag, const char *v, uint64_t *out, char *err,
			   size_t errlen)
{
	const char *why = parse_num(v, 0, UINT64_MAX, out);

	if (why)
		return bad_arg(err, errlen, "%s '%s': %s (a positive integer)", flag, v, why);
	return 0;
}

static int take_iters(const char *v, uint64_t *out, char *err, size_t errlen)
{
	return take_iters_like("--iters", v, out, err, errlen);
}

static int take_duration(const char *v, double *out, char *err, size_t errlen)
{
	char *end;
	double d;

	/* strtod takes "inf", "nan", hex and blanks: want a plain number. */
	if (!isdigit((unsigned char)*v) && *v != '.')
		return bad_arg(err, errlen, "--duration '%s': not a number of seconds", v);
	errno = 0;
	d = strtod(v, &end);
	if (*end || errno == ERANGE || !isfinite(d))
		return bad_arg(err, errlen, "--duration '%s': not a number of seconds", v);
	if (d <= 0 || d > BENCH_MAX_DURATION)
		return bad_arg(err, errlen, "--duration '%s': must be in (0, %.0f] seconds", v,
			    BENCH_MAX_DURATION);
	*out = d;
	return 0;
}

static int take_op(const char *v, enum ferry_op *op, char *err, size_t errlen)
{
	if (!strcmp(v, "read"))
		*op = FERRY_OP_READ;
	else if (!strcmp(v, "write"))
		*op = FERRY_OP_WRITE;
	else
		return bad_arg(err, errlen, "--op '%s': must be 'read' or 'write'", v);
	return 0;
}

static int take_str(const char *flag, const char *v, const char **out, char *err, size_t errlen)
{
	if (!*v)
		return bad_arg(err, errlen, "%s: empty value", flag);
	*out = v;
	return 0;
}

/*
 * An output file.  getopt takes the next word as the value even when it is
 * a flag ("--plot --json"): that is a forgotten file name, not a file.
 * "-" is stdout where stdout_ok.
 */
static int take_file(const char *flag, const char *v, bool stdout_ok, const char **out,
		     char *err, size_t errlen)
{
	if (!*v)
		return bad_arg(err, errlen, "%s: empty value (want a file name)", flag);
	if (!strcmp(v, "-") && !stdout_ok)
		return bad_arg(err, errlen, "%s '-': give a file name (stdout has the table)", flag);
	if (v[0] == '-' && v[1])
		return bad_arg(err, errlen,
			    "%s '%s': that is an option, not a file name (missing file name? "
			    "for a file of that name say ./%s)",
			    flag, v, v);
	*out = v;
	return 0;
}

/* gnuplot writes what its terminal says whatever the name: keep the two in step. */
static int take_png(const char *v, const char **out, char *err, size_t errlen)
{
	size_t n = strlen(v);

	if (take_file("--plot", v, false, out, err, errlen))
		return -EINVAL;
	if (n < 5 || strcasecmp(v + n - 4, ".png"))
		return bad_arg(err, errlen, "--plot '%s': draws a PNG: the name must end in .png", v);
	return 0;
}

static int take_on_off(const char *flag, const char *v, int *out, char *err, size_t errlen)
{
	if (!strcmp(v, "on"))
		*out = 1;
	else if (!strcmp(v, "off"))
		*out = 0;
	else
		return bad_arg(err, errlen, "%s '%s': must be 'on' or 'off'", flag, v);
	return 0;
}

/* One option c with value v (NULL for flags). */
static int apply_opt(int c, const char *v, struct bench_cfg *cfg, char *err, size_t errlen)
{
	switch (c) {
	case OPT_OP:
		return take_op(v, &cfg->op, err, errlen);
	case 's':
		return take_size_range(v, cfg, err, errlen);
	case OPT_BATCH:
		return take_u32("--batch", v, 0, BENCH_MAX_BATCH, &cfg->batch, err, errlen);
	case OPT_PORTS:
		return take_u32("--ports", v, 0, BENCH_MAX_PORTS, &cfg->ports, err, errlen);
	case OPT_CORES:
		return take_str("--cores", v, &cfg->cores, err, errlen);
	case OPT_TARGET_CORES:
		return take_str("--target-cores", v, &cfg->target_cores, err, errlen);
	case 'd':
		return take_str("--nics", v, &cfg->nics, err, errlen);
	case 'D':
		cfg->duration_set = true;
		return take_duration(v, &cfg->duration, err, errlen);
	case 'n':
		return take_iters(v, &cfg->iters, err, errlen);
	case OPT_SLICE:
		return take_u32("--slice", v, 1, UINT32_MAX, &cfg->slice, err, errlen);
	case 'q':
		return take_u32("--qps", v, 0, UINT32_MAX, &cfg->qps, err, errlen);
	case 't':
		return take_u32("--depth", v, 1, UINT32_MAX, &cfg->depth, err, errlen);
	case OPT_NOCOPY:
		cfg->nocopy = true;
		return 0;
	case OPT_SPIN:
		cfg->spin = true;
		return 0;
	case OPT_VERIFY:
		cfg->verify = true;
		return 0;
	case OPT_JSON:
		cfg->json = true;
		return 0;
	case OPT_NO_PORT_PIN:
		cfg->no_port_pin = true;
		return 0;
	case 'h':
		cfg->help = true;
		return 0;
	case OPT_TARGET:
		cfg->mode = BENCH_TARGET;
		return 0;
	case OPT_LISTEN:
		return take_hostport("--listen", v, 1, &cfg->listen, err, errlen);
	case OPT_CONNECT:
		cfg->mode = BENCH_INITIATOR;
		return take_hostport("--connect", v, 0, &cfg->connect, err, errlen);
	case OPT_BUFFER:
		return take_size("--buffer", v, BENCH_MAX_BUFFER, &cfg->buffer, err, errlen);
	case OPT_REMOTE_ADDR:
		return take_hex("--remote-addr", v, &cfg->remote_addr, err, errlen);
	case OPT_SEED:
		return take_iters_like("--seed", v, &cfg->seed, err, errlen);
	case OPT_LAT:
		cfg->lat = true;
		return 0;
	case OPT_SWEEP:
		cfg->sweep = true;
		return 0;
	case OPT_CSV:
		return take_file("--csv", v, false, &cfg->csv, err, errlen);
	case OPT_PLOT:
		return take_png(v, &cfg->plot, err, errlen);
	case OPT_PROM:
		return take_file("--prom", v, true, &cfg->prom, err, errlen);
	case OPT_COUNTERS:
		return take_on_off("--counters", v, &cfg->counters, err, errlen);
	}
	return bad_arg(err, errlen, "internal: unhandled option %d", c);
}

/*
 * A long option getopt refused: unknown, an ambiguous prefix ("--s"), or a
 * flag given a value ("--json=1").  Say which, with the candidates.
 */
static int long_opt_error(const char *arg, char *err, size_t errlen)
{
	const char *name = arg + 2, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	const struct option *hit = NULL;
	char cands[256] = "";
	unsigned n = 0;

	for (const struct option *o = long_opts; o->name; o++) {
		if (strncmp(o->name, name, len))
			continue;
		if (strlen(o->name) == len) { /* exact: wins over prefixes */
			hit = o;
			n = 1;
			break;
		}
		hit = o;
		n++;
		snprintf(cands + strlen(cands), sizeof(cands) - strlen(cands), "%s--%s",
			 n > 1 ? ", " : "", o->name);
	}
	if (n > 1)
		return bad_arg(err, errlen, "ambiguous option '%s' (%s)", arg, cands);
	if (n == 1 && eq && hit->has_arg == no_argument)
		return bad_arg(err, errlen, "option '--%s' takes no value", hit->name);
	return bad_arg(err, errlen, "unknown option '%s' (see --help)", arg);
}

/* What getopt returned instead of an option: say which argument it was. */
static int getopt_error(int c, int argc, char **argv, char *err, size_t errlen)
{
	const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";

	if (c == ':')
		return bad_arg(err, errlen, "option '%s' needs a value", arg);
	/* optopt is the letter for an unknown short option, 0 for a long one. */
	if (optopt && optopt < 256)
		return bad_arg(err, errlen, "unknown option '-%c' (see --help)", optopt);
	if (!strncmp(arg, "--", 2))
		return long_opt_error(arg, err, errlen);
	return bad_arg(err, errlen, "unknown option '%s' (see --help)", arg);
}

/* The flag that option code c stands for, for messages. */
static const char *opt_flag(int c)
{
	static char buf[64];

	for (const struct option *o = long_opts; o->name; o++) {
		if (o->val == c) {
			snprintf(buf, sizeof(buf), "--%s", o->name);
			return buf;
		}
	}
	return "?";
}

/* Options that only make sense for a process that submits requests. */
static const int initiator_only[] = {
	OPT_OP, 's', OPT_BATCH, OPT_PORTS, 'n', OPT_TARGET_CORES, OPT_NOCOPY, OPT_VERIFY,
	OPT_NO_PORT_PIN, OPT_REMOTE_ADDR, OPT_LAT, OPT_SWEEP, OPT_CSV, OPT_PLOT,
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
	if (seen[OPT_LISTEN] && cfg->mode != BENCH_TARGET)
		return bad_arg(err, errlen, "--listen needs --target (the initiator uses --connect)");
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
	if (!cfg->lat)
		return 0;
	if (seen[OPT_BATCH] && cfg->batch != 1)
		return bad_arg(err, errlen, "--lat sends one request at a time: --batch must be 1");
	if (seen[OPT_PORTS] && cfg->ports != 1)
		return bad_arg(err, errlen, "--lat sends one request at a time: --ports must be 1");
	cfg->batch = 1;
	cfg->ports = 1;
	return 0;
}

/* Checks across flags, once all are known; fills derived fields. */
static int check_cfg(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen)
{
	uint64_t per_port, need;
	int rc;

	if (cfg->duration_set && cfg->iters)
		return bad_arg(err, errlen, "--duration and --iters exclude each other");
	/* With --nocopy no byte moves: every check would fail. */
	if (cfg->verify && cfg->nocopy)
		return bad_arg(err, errlen, "--verify and --nocopy exclude each other");
	if (cfg->json && cfg->prom && !strcmp(cfg->prom, "-"))
		return bad_arg(err, errlen,
			    "--prom - and --json both write to stdout: give --prom a file name");
	rc = check_modes(cfg, seen, err, errlen);
	if (!rc)
		rc = check_lat_sweep(cfg, seen, err, errlen);
	if (rc)
		return rc;
	if (cfg->mode == BENCH_TARGET)
		return 0;
	/* size and batch are each capped, so these products cannot overflow. */
	if (cfg->mode == BENCH_LOCAL && !cfg->sweep && !cfg->buffer) {
		per_port = cfg->size * cfg->batch;
		if (per_port > BENCH_MAX_BUFFER || per_port * cfg->ports > BENCH_MAX_BUFFER)
			return bad_arg(err, errlen,
				    "buffer --ports %u x --batch %u x --size %llu exceeds the %llu MiB "
				    "cap (or give a smaller --buffer: batches shrink to fit)",
				    cfg->ports, cfg->batch, (unsigned long long)cfg->size,
				    BENCH_MAX_BUFFER >> 20);
		return 0;
	}
	/* Every port needs room for at least one request of the largest size. */
	need = cfg->size_max * cfg->ports;
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

int bench_parse_args(int argc, char **argv, struct bench_cfg *cfg, char *err, size_t errlen)
{
	bool seen[OPT_END] = { false };
	int c, rc;

	bench_cfg_default(cfg);
	if (err && errlen)
		err[0] = '\0';
	/* 0, not 1: glibc then also forgets its state inside a grouped "-hx". */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
		if (c == '?' || c == ':')
			return getopt_error(c, argc, argv, err, errlen);
		rc = apply_opt(c, optarg, cfg, err, errlen);
		if (rc)
			return rc;
		if (c >= 0 && c < OPT_END)
			seen[c] = true;
	}
	if (optind < argc)
		return bad_arg(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
	if (cfg->help)
		return 0;
	return check_cfg(cfg, seen, err, errlen);
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

uint64_t bench_buffer_bytes(const struct bench_cfg *cfg)
{
	uint64_t need = cfg->size_max * cfg->ports;

	if (cfg->buffer)
		return cfg->buffer;
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
	return cfg->seed + 1 + k;
}

void bench_usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [options]                  one process: initiator and target engines\n"
		"       %s --target [options]         two processes: the target (serves a buffer)\n"
		"       %s --connect HOST:PORT [...]  two processes: the initiator\n"
		"P threads (ports) submit batches of one-sided requests from the initiator\n"
		"to the target's buffer, like perftest's ib_write_bw / ib_read_bw.\n"
		"\n"
		"  --op read|write        operation (default write)\n"
		"  -s, --size BYTES       bytes per request, K/M/G suffixes (default 64K);\n"
		"                         LO:HI runs the powers of two from LO to HI, one row each\n"
		"  --sweep                --size %llu:%lluM (perftest -a)\n"
		"  --batch N              requests per batch (default 32)\n"
		"  --ports N              submitting threads, one port each (default 1)\n"
		"  --lat                  latency: one port, one request at a time, busy-polled;\n"
		"                         prints min/typical(p50)/avg/p99/p99.9/max in us\n"
		"  --cores LIST           this process's engine cores (default FERRY_CORES or \"0\")\n"
		"  --target-cores LIST    one-process mode: target cores (default: same as --cores)\n"
		"  -d, --nics NAMES       NICs, comma list (default FERRY_NICS or \"auto\": RDMA devices, else loop)\n"
		"  -D, --duration SECS    run time per size, fractions allowed (default 3;\n"
		"                         --target: until SIGINT/SIGTERM)\n"
		"  -n, --iters N          batches per port (--lat: requests) instead of a duration\n"
		"  --slice SIZE           bytes per work request (default 64K)\n"
		"  -q, --qps N            QPs per endpoint\n"
		"  -t, --depth N          work requests per QP\n"
		"  --nocopy               loop NIC skips the memcpy (data plane cost only)\n"
		"  --spin                 this process's cores never yield when idle\n"
		"  --verify               check every byte moved (READ: against the target's\n"
		"                         pattern; WRITE: read back and compare)\n"
		"  --json                 JSON on stdout instead of tables (one object per size)\n"
		"  --no-port-pin          do not keep port threads off the initiator's CPUs\n"
		"  --counters on|off      the cores' latency histogram and hardware counters\n"
		"                         (default FERRY_COUNTERS or on; off to measure their cost)\n"
		"\n"
		"Output (the table on stdout, a progress line on stderr for long runs):\n"
		"  --csv FILE             also one CSV row per size, with a header line: mode\n"
		"                         (bw|lat), op, size, batch, ports, cores, gbps (GB/s),\n"
		"                         reqs_per_s, p50_us, p99_us, p999_us, max_us, ...\n"
		"  --plot FILE.png        draw GB/s and p99 latency against size with gnuplot\n"
		"                         (apt-get install -y gnuplot-nox)\n"
		"  --prom FILE|-          at the end, this process's engine counters in the\n"
		"                         Prometheus text format (- = stdout)\n"
		"  -h, --help             this text\n"
		"\n"
		"Two processes (the loop NIC cannot cross processes: give RDMA NICs or tcp):\n"
		"  --target               create only the target engine, register --buffer bytes\n"
		"                         filled with the --seed pattern at 0x%llx (if free),\n"
		"                         print \"ferry_bench target: listening on ADDR buffer\n"
		"                         0xADDR LEN\" and serve until SIGINT/SIGTERM or --duration\n"
		"  --listen HOST:PORT     target's control address, dotted IPv4 (default\n"
		"                         FERRY_LISTEN or %s)\n"
		"  --connect HOST:PORT    create only the initiator and open the target there\n"
		"  --remote-addr HEX      the target's buffer address (default 0x%llx)\n"
		"  --buffer SIZE          each side's buffer (default %llu MiB in the two-process\n"
		"                         modes and sweeps, else ports x batch x size); batches\n"
		"                         shrink so that ports x batch x size fits; the initiator's\n"
		"                         must not exceed the target's\n"
		"  --seed N               pattern seed of the target's buffer (default 1; the\n"
		"                         initiator's --verify must use the target's)\n"
		"\n"
		"Buffers are at most %llu MiB.  Environment: FERRY_* variables (see ferry.h)\n"
		"apply before the flags.  Exit status: 0 ok, 1 setup error / failed request /\n"
		"verify mismatch, 2 usage.\n",
		prog, prog, prog, BENCH_SWEEP_MIN, BENCH_SWEEP_MAX >> 20, BENCH_TARGET_ADDR,
		BENCH_DEFAULT_LISTEN, BENCH_TARGET_ADDR, BENCH_DEFAULT_BUFFER >> 20,
		BENCH_MAX_BUFFER >> 20);
}
