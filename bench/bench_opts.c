/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench command line: the flags and their values (the checks across
 * flags are bench_cfg.c's, --help is bench_usage.c's).  Every refusal names
 * the flag and the value, and nothing here touches an engine, so
 * tests/unit/bench/test_bench_opts.c includes these files directly and runs
 * the parser on its own.
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

#include "bench_opts_int.h"
#include "runtime/engine/opts.h"

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
	{ "caller", no_argument, NULL, OPT_CALLER },
	{ "hugepages", no_argument, NULL, OPT_HUGEPAGES },
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
	{ "sync", no_argument, NULL, OPT_SYNC },
	{ "refill", required_argument, NULL, OPT_REFILL },
	{ "status-once", no_argument, NULL, OPT_STATUS_ONCE },
	{ "prep", no_argument, NULL, OPT_PREP },
	{ "pingpong", no_argument, NULL, OPT_PINGPONG },
	{ "notify", no_argument, NULL, OPT_NOTIFY },
	{ "notifs", required_argument, NULL, OPT_NOTIFS },
	{ "peers", required_argument, NULL, OPT_PEERS },
	{ "idle", required_argument, NULL, OPT_IDLE },
	{ "opens", required_argument, NULL, OPT_OPENS },
	{ "secret", required_argument, NULL, OPT_SECRET },
	{ "same-addr", no_argument, NULL, OPT_SAME_ADDR },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

int bad_arg(char *err, size_t errlen, const char *fmt, ...)
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

/* Seconds, fractions allowed: --duration, --idle. */
static int take_seconds(const char *flag, const char *v, double *out, char *err, size_t errlen)
{
	char *end;
	double d;

	/*
	 * strtod takes "inf", "nan", hex ("0x10" is 16 s), exponents and
	 * blanks: want a plain decimal number, digits and one point.
	 */
	if (strspn(v, "0123456789.") != strlen(v) || strchr(v, '.') != strrchr(v, '.') ||
	    !strpbrk(v, "0123456789"))
		return bad_arg(err, errlen, "%s '%s': not a number of seconds", flag, v);
	errno = 0;
	d = strtod(v, &end);
	if (*end || errno == ERANGE || !isfinite(d))
		return bad_arg(err, errlen, "%s '%s': not a number of seconds", flag, v);
	if (d <= 0 || d > BENCH_MAX_DURATION)
		return bad_arg(err, errlen, "%s '%s': must be in (0, %.0f] seconds", flag, v,
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

/* The flags that choose how a port submits and what a run measures. */
static int apply_run_opt(int c, const char *v, struct bench_cfg *cfg, char *err, size_t errlen)
{
	switch (c) {
	case OPT_SYNC:
		cfg->sync = true;
		return 0;
	case OPT_REFILL:
		return take_u32("--refill", v, 0, BENCH_MAX_BATCH, &cfg->refill, err, errlen);
	case OPT_STATUS_ONCE:
		cfg->status_once = true;
		return 0;
	case OPT_PREP:
		cfg->prep = true;
		return 0;
	case OPT_PINGPONG:
		cfg->pingpong = true;
		return 0;
	case OPT_NOTIFY:
		cfg->notify = true;
		return 0;
	case OPT_NOTIFS:
		return take_u32("--notifs", v, 0, BENCH_MAX_NOTIFS, &cfg->notifs, err, errlen);
	case OPT_PEERS:
		return take_u32("--peers", v, 0, BENCH_MAX_PEERS, &cfg->peers, err, errlen);
	case OPT_IDLE:
		return take_seconds("--idle", v, &cfg->idle, err, errlen);
	case OPT_OPENS:
		return take_u32("--opens", v, 0, FERRY_MAX_SEGMENTS, &cfg->opens, err, errlen);
	case OPT_SECRET:
		return take_str("--secret", v, &cfg->secret, err, errlen);
	}
	return bad_arg(err, errlen, "internal: unhandled option %d", c);
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
		return take_seconds("--duration", v, &cfg->duration, err, errlen);
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
	case OPT_CALLER:
		cfg->caller = true;
		return 0;
	case OPT_HUGEPAGES:
		cfg->hugepages = true;
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
	case OPT_SAME_ADDR:
		cfg->same_addr = true;
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
	default:
		return apply_run_opt(c, v, cfg, err, errlen);
	}
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
const char *opt_flag(int c)
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
	return bench_check_cfg(cfg, seen, err, errlen);
}

