/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench command line.  Every refusal names the flag and the value,
 * and nothing here touches an engine, so tests/test_bench_opts.c includes
 * this file directly and runs the parser on its own.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"

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
	cfg->batch = 32;
	cfg->ports = 1;
	cfg->duration = 3.0;
}

const char *bench_op_name(enum ferry_op op)
{
	return op == FERRY_OP_READ ? "read" : "write";
}

static unsigned suffix_shift(char c)
{
	switch (c) {
	case 'k': case 'K':
		return 10;
	case 'm': case 'M':
		return 20;
	case 'g': case 'G':
		return 30;
	}
	return 0;
}

/*
 * Strict unsigned decimal, optional K/M/G when suffix is set.  strtoull
 * alone would accept " 5", "+5" and wrap "-5" to a huge value: insist on a
 * digit first.
 */
static const char *parse_num(const char *s, int suffix, uint64_t max, uint64_t *out)
{
	unsigned long long x;
	unsigned shift = 0;
	char *end;

	if (!*s)
		return "empty";
	if (*s == '-')
		return "negative";
	if (!isdigit((unsigned char)*s))
		return "not a decimal number";
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return "too large";
	if (*end && suffix)
		shift = suffix_shift(*end);
	if (shift)
		end++;
	if (*end)
		return suffix ? "trailing garbage (suffixes: K, M, G)" : "trailing garbage";
	if (x == 0)
		return "must be greater than 0";
	if (x > (max >> shift))
		return "too large";
	*out = (uint64_t)x << shift;
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

static int take_iters(const char *v, uint64_t *out, char *err, size_t errlen)
{
	const char *why = parse_num(v, 0, UINT64_MAX, out);

	if (why)
		return bad_arg(err, errlen, "--iters '%s': %s (a positive integer)", v, why);
	return 0;
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

/* One option c with value v (NULL for flags). */
static int apply_opt(int c, const char *v, struct bench_cfg *cfg, int *seen_duration,
		     char *err, size_t errlen)
{
	switch (c) {
	case OPT_OP:
		return take_op(v, &cfg->op, err, errlen);
	case 's':
		return take_size("--size", v, BENCH_MAX_BUFFER, &cfg->size, err, errlen);
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
		*seen_duration = 1;
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

/* Checks across flags, once all are known. */
static int check_cfg(const struct bench_cfg *cfg, int seen_duration, char *err, size_t errlen)
{
	uint64_t per_port;

	if (seen_duration && cfg->iters)
		return bad_arg(err, errlen, "--duration and --iters exclude each other");
	/* With --nocopy no byte moves: every check would fail. */
	if (cfg->verify && cfg->nocopy)
		return bad_arg(err, errlen, "--verify and --nocopy exclude each other");
	/* size and batch are each capped, so this product cannot overflow. */
	per_port = cfg->size * cfg->batch;
	if (per_port > BENCH_MAX_BUFFER || per_port * cfg->ports > BENCH_MAX_BUFFER)
		return bad_arg(err, errlen,
			    "buffer --ports %u x --batch %u x --size %llu exceeds the %llu MiB cap",
			    cfg->ports, cfg->batch, (unsigned long long)cfg->size,
			    BENCH_MAX_BUFFER >> 20);
	return 0;
}

int bench_parse_args(int argc, char **argv, struct bench_cfg *cfg, char *err, size_t errlen)
{
	int c, rc, seen_duration = 0;

	bench_cfg_default(cfg);
	if (err && errlen)
		err[0] = '\0';
	/* 0, not 1: glibc then also forgets its state inside a grouped "-hx". */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
		if (c == '?' || c == ':')
			return getopt_error(c, argc, argv, err, errlen);
		rc = apply_opt(c, optarg, cfg, &seen_duration, err, errlen);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return bad_arg(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
	if (cfg->help)
		return 0;
	return check_cfg(cfg, seen_duration, err, errlen);
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
	if (cfg->nocopy)
		o->loop_nocopy = 1;
	if (cfg->spin)
		o->idle = FERRY_IDLE_SPIN;
}

uint64_t bench_total_bytes(const struct bench_cfg *cfg)
{
	return cfg->size * cfg->batch * cfg->ports;
}

void bench_usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [options]\n"
		"Two engines in one process (initiator and target); P threads submit\n"
		"batches of one-sided requests from the initiator to the target.\n"
		"\n"
		"  --op read|write        operation (default write)\n"
		"  -s, --size BYTES       bytes per request, K/M/G suffixes (default 64K)\n"
		"  --batch N              requests per batch (default 32)\n"
		"  --ports N              submitting threads, one port each (default 1)\n"
		"  --cores LIST           initiator cores (default FERRY_CORES or \"0\")\n"
		"  --target-cores LIST    target cores (default: same as --cores)\n"
		"  -d, --nics NAMES       NICs, comma list (default FERRY_NICS or \"auto\": RDMA devices, else loop)\n"
		"  -D, --duration SECS    run time, fractions allowed (default 3)\n"
		"  -n, --iters N          batches per port instead of a duration\n"
		"  --slice SIZE           bytes per work request (default 64K)\n"
		"  -q, --qps N            QPs per endpoint\n"
		"  -t, --depth N          work requests per QP\n"
		"  --nocopy               loop NIC skips the memcpy (data plane cost only)\n"
		"  --spin                 initiator cores never yield when idle\n"
		"  --verify               fill a pattern, check every byte after the run\n"
		"  --json                 one JSON object on stdout instead of tables\n"
		"  --no-port-pin          do not keep port threads off the initiator's CPUs\n"
		"  -h, --help             this text\n"
		"\n"
		"Each side's buffer is ports x batch x size bytes, at most %llu MiB.\n"
		"Environment: FERRY_* variables (see ferry.h) apply before the flags.\n",
		prog, BENCH_MAX_BUFFER >> 20);
}
