/* SPDX-License-Identifier: MIT */
/*
 * Options: defaults, environment overrides, the core list and the range
 * checks of the numeric knobs.  Control path only: clarity over speed, and
 * every refusal names the field (or variable) and the value that was wrong,
 * because a misconfigured engine is the most common support question.
 *
 * Decisions worth knowing:
 * - Core lists come out in ascending order whatever the input order, and
 *   duplicates are an error rather than silently merged ("0-3,2" is more
 *   likely a typo than an intent).
 * - NULL or "" means the first online CPU; a list of only blanks is refused.
 * - CPU numbers are limited to CPU_SETSIZE - 1, what pthread affinity takes.
 * - K/M/G suffixes (binary: 64K = 65536) are accepted on sizes and queue
 *   depths (FERRY_SLICE_SIZE, FERRY_WRS_PER_QP, FERRY_CQES, FERRY_RING_SIZE)
 *   only: a binary K on milliseconds or on a retry count would surprise.
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/engine/opts.h"

#include "ring/base/log.h"
#include "slice/slice.h"

#define CPU_LIMIT CPU_SETSIZE
#define ONLINE_PATH "/sys/devices/system/cpu/online"

/* The online CPUs, and how to show them in a message ("0-1"). */
struct online {
	cpu_set_t set;
	char desc[256];
};

static void opts_fill_defaults(struct ferry_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->opts_size = sizeof(*o);
	o->cores = NULL;
	o->nics = "auto";
	o->listen = "127.0.0.1:0";
	o->slice_size = 65536;
	o->qps_per_ep = 2;
	o->wrs_per_qp = 256;
	o->cqes = 4096;
	o->signal_every = 16;
	o->ring_size = 1024;
	o->retries = 9;
	o->timeout_ms = 10000;
	o->rail_errors = 3;
	o->rail_window_ms = 100;
	o->rail_pause_ms = 10;
	o->rail_pause_max_ms = 2000;
	o->keepalive_ms = 5000;
	o->lease_ms = 30000;
	o->ep_cache = 128;
	o->idle = FERRY_IDLE_ADAPTIVE;
	o->verbose = 0;
	o->counters = 1;
	o->name = NULL;
	o->metadata = "p2p";
	o->secret_file = NULL;
	o->idle_linger_us = 50;
}

/* Copy the first n bytes of src over dst: the fields a caller's version has. */
static void opts_copy_prefix(struct ferry_opts *dst, const struct ferry_opts *src, size_t n)
{
	memcpy(dst, src, n < sizeof(*dst) ? n : sizeof(*dst));
}

void ferry_opts_init(struct ferry_opts *o, size_t size)
{
	struct ferry_opts d;

	if (!o || size < sizeof(o->opts_size))
		return;
	opts_fill_defaults(&d);
	d.opts_size = size;
	if (size > sizeof(d)) /* a newer caller: fields we do not know stay zero */
		memset((char *)o + sizeof(d), 0, size - sizeof(d));
	opts_copy_prefix(o, &d, size);
}

/* The exported symbol behind the ferry_opts_default() macro, for callers
 * that take its address: the size this library was built with. */
void(ferry_opts_default)(struct ferry_opts *o)
{
	ferry_opts_init(o, sizeof(*o));
}

int ferry_opts_complete(struct ferry_opts *full, const struct ferry_opts *o)
{
	opts_fill_defaults(full);
	if (o->opts_size < FERRY_OPTS_SIZE_MIN)
		return -EINVAL;
	opts_copy_prefix(full, o, o->opts_size);
	full->opts_size = sizeof(*full);
	return 0;
}

const char *ferry_state_name(enum ferry_state s)
{
	switch (s) {
	case FERRY_PENDING:
		return "pending";
	case FERRY_DONE:
		return "done";
	case FERRY_FAILED:
		return "failed";
	case FERRY_TIMEOUT:
		return "timeout";
	}
	/* Not a valid state: say so instead of crashing a log line. */
	return "unknown";
}

__attribute__((format(printf, 3, 4)))
static void errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Core lists                                                          */
/* ------------------------------------------------------------------ */

static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

static const char *trim_end(const char *start, const char *end)
{
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	return end;
}

/*
 * Decimal number at *p (leading blanks skipped), then skip trailing blanks.
 * Saturates at CPU_LIMIT: anything that large is refused anyway, and this
 * keeps "99999999999" from wrapping into a valid CPU.
 */
static int take_num(const char **p, const char *end, unsigned long *v)
{
	const char *q = skip_blanks(*p, end);
	unsigned long x = 0;

	if (q == end || !isdigit((unsigned char)*q))
		return -EINVAL;
	for (; q < end && isdigit((unsigned char)*q); q++)
		x = x >= CPU_LIMIT ? CPU_LIMIT : x * 10 + (unsigned long)(*q - '0');
	*p = skip_blanks(q, end);
	*v = x;
	return 0;
}

/* "N" or "N - M" in [tok, end) -> [lo, hi]; -EINVAL if malformed. */
static int parse_range(const char *tok, const char *end, unsigned long *lo, unsigned long *hi)
{
	const char *p = tok;

	if (take_num(&p, end, lo))
		return -EINVAL;
	*hi = *lo;
	if (p < end && *p == '-') {
		p++;
		if (take_num(&p, end, hi))
			return -EINVAL;
	}
	return p == end ? 0 : -EINVAL;
}

/* Add one comma-separated token of list s to set. */
static int add_token(const char *s, const char *tok, const char *end, cpu_set_t *set,
		     char *err, size_t errlen)
{
	unsigned long lo, hi, cpu;
	int len;

	tok = skip_blanks(tok, end);
	end = trim_end(tok, end);
	len = (int)(end - tok);
	if (tok == end) {
		errf(err, errlen, "core list '%s': empty entry", s);
		return -EINVAL;
	}
	if (parse_range(tok, end, &lo, &hi)) {
		errf(err, errlen, "core list '%s': bad token '%.*s'", s, len, tok);
		return -EINVAL;
	}
	if (hi >= CPU_LIMIT) {
		errf(err, errlen, "core list '%s': token '%.*s' out of range (max core %d)", s,
		     len, tok, CPU_LIMIT - 1);
		return -EINVAL;
	}
	if (lo > hi) {
		errf(err, errlen, "core list '%s': reversed range '%.*s'", s, len, tok);
		return -EINVAL;
	}
	for (cpu = lo; cpu <= hi; cpu++) {
		if (CPU_ISSET(cpu, set)) {
			errf(err, errlen, "core list '%s': core %lu listed twice", s, cpu);
			return -EINVAL;
		}
		CPU_SET(cpu, set);
	}
	return 0;
}

/* "0-3,8" -> set.  Also reads the kernel's online list, same syntax. */
static int parse_list(const char *s, cpu_set_t *set, char *err, size_t errlen)
{
	const char *tok = s, *end;
	int rc;

	CPU_ZERO(set);
	for (;;) {
		end = strchr(tok, ',');
		if (!end)
			end = tok + strlen(tok);
		rc = add_token(s, tok, end, set, err, errlen);
		if (rc)
			return rc;
		if (!*end)
			return 0;
		tok = end + 1;
	}
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Hex mask s whose digits start at p (just after "0x") -> set. */
static int parse_mask(const char *s, const char *p, cpu_set_t *set, char *err, size_t errlen)
{
	const char *end = trim_end(p, p + strlen(p));
	uint64_t m = 0;
	unsigned cpu;
	int d;

	if (p == end) {
		errf(err, errlen, "core mask '%s': no hex digits after '0x'", s);
		return -EINVAL;
	}
	for (; p < end; p++) {
		d = hex_digit(*p);
		if (d < 0) {
			errf(err, errlen, "core mask '%s': bad hex digit '%c'", s, *p);
			return -EINVAL;
		}
		if (m >> 60) {
			errf(err, errlen, "core mask '%s': wider than 64 bits", s);
			return -EINVAL;
		}
		m = m << 4 | (uint64_t)d;
	}
	if (!m) {
		errf(err, errlen, "core mask '%s': selects no core", s);
		return -EINVAL;
	}
	CPU_ZERO(set);
	for (cpu = 0; cpu < 64; cpu++)
		if (m >> cpu & 1)
			CPU_SET(cpu, set);
	return 0;
}

/* Fallback when sysfs is unreadable (some containers): CPUs 0..n-1. */
static void online_from_sysconf(struct online *on)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN), i;

	if (n < 1)
		n = 1;
	if (n > CPU_LIMIT)
		n = CPU_LIMIT;
	CPU_ZERO(&on->set);
	for (i = 0; i < n; i++)
		CPU_SET(i, &on->set);
	if (n == 1)
		snprintf(on->desc, sizeof(on->desc), "0");
	else
		snprintf(on->desc, sizeof(on->desc), "0-%ld", n - 1);
}

/*
 * The online CPUs from sysfs ("0-1,4-7\n").  A line that does not fit the
 * buffer is not trusted: cut mid-number it would name the wrong CPUs.
 */
static void read_online(struct online *on)
{
	FILE *f = fopen(ONLINE_PATH, "re");
	char *nl = NULL;
	int ok = 0;

	if (f) {
		if (fgets(on->desc, sizeof(on->desc), f))
			nl = strchr(on->desc, '\n');
		fclose(f);
	}
	if (nl) {
		*nl = '\0';
		ok = !parse_list(on->desc, &on->set, NULL, 0) && CPU_COUNT(&on->set) > 0;
	}
	if (!ok)
		online_from_sysconf(on);
}

/* Write the CPUs of set to cpus in ascending order, checking online and max. */
static int emit(const char *s, const cpu_set_t *set, const struct online *on, unsigned *cpus,
		unsigned max, unsigned *n, char *err, size_t errlen)
{
	unsigned cpu, cnt = 0;

	for (cpu = 0; cpu < CPU_LIMIT; cpu++) {
		if (!CPU_ISSET(cpu, set))
			continue;
		if (on && !CPU_ISSET(cpu, &on->set)) {
			errf(err, errlen, "core list '%s': core %u is not online (online: %s)", s,
			     cpu, on->desc);
			return -EINVAL;
		}
		if (cnt == max) {
			errf(err, errlen, "core list '%s': more than %u cores", s, max);
			return -EINVAL;
		}
		cpus[cnt++] = cpu;
	}
	*n = cnt;
	return 0;
}

/* NULL/"": the lowest online CPU (read_online never leaves the set empty). */
static int first_online(unsigned *cpus, unsigned max, unsigned *n, char *err, size_t errlen)
{
	struct online on;
	cpu_set_t one;
	unsigned cpu;

	read_online(&on);
	for (cpu = 0; !CPU_ISSET(cpu, &on.set); cpu++)
		;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return emit("", &one, NULL, cpus, max, n, err, errlen);
}

int ferry_parse_cores(const char *s, unsigned *cpus, unsigned max, unsigned *n,
		      int check_online, char *err, size_t errlen)
{
	struct online on;
	cpu_set_t set;
	const char *p;
	int rc;

	if (!cpus || !n) {
		errf(err, errlen, "core list: no output array");
		return -EINVAL;
	}
	if (!s || !*s)
		return first_online(cpus, max, n, err, errlen);
	p = skip_blanks(s, s + strlen(s));
	if (!*p) {
		errf(err, errlen, "core list '%s': empty", s);
		return -EINVAL;
	}
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		rc = parse_mask(s, p + 2, &set, err, errlen);
	else
		rc = parse_list(s, &set, err, errlen);
	if (rc)
		return rc;
	if (check_online)
		read_online(&on);
	return emit(s, &set, check_online ? &on : NULL, cpus, max, n, err, errlen);
}

/* ------------------------------------------------------------------ */
/* Environment                                                         */
/* ------------------------------------------------------------------ */

struct env_num {
	const char *name;
	size_t off;  /* of a uint32_t field of struct ferry_opts */
	int suffix;  /* K/M/G allowed */
};

static const struct env_num env_nums[] = {
	{ "FERRY_SLICE_SIZE", offsetof(struct ferry_opts, slice_size), 1 },
	{ "FERRY_QPS_PER_EP", offsetof(struct ferry_opts, qps_per_ep), 0 },
	{ "FERRY_WRS_PER_QP", offsetof(struct ferry_opts, wrs_per_qp), 1 },
	{ "FERRY_CQES", offsetof(struct ferry_opts, cqes), 1 },
	{ "FERRY_SIGNAL_EVERY", offsetof(struct ferry_opts, signal_every), 0 },
	{ "FERRY_RING_SIZE", offsetof(struct ferry_opts, ring_size), 1 },
	{ "FERRY_RETRIES", offsetof(struct ferry_opts, retries), 0 },
	{ "FERRY_TIMEOUT_MS", offsetof(struct ferry_opts, timeout_ms), 0 },
	{ "FERRY_RAIL_ERRORS", offsetof(struct ferry_opts, rail_errors), 0 },
	{ "FERRY_RAIL_WINDOW_MS", offsetof(struct ferry_opts, rail_window_ms), 0 },
	{ "FERRY_RAIL_PAUSE_MS", offsetof(struct ferry_opts, rail_pause_ms), 0 },
	{ "FERRY_RAIL_PAUSE_MAX_MS", offsetof(struct ferry_opts, rail_pause_max_ms), 0 },
	{ "FERRY_KEEPALIVE_MS", offsetof(struct ferry_opts, keepalive_ms), 0 },
	{ "FERRY_LEASE_MS", offsetof(struct ferry_opts, lease_ms), 0 },
	{ "FERRY_EP_CACHE", offsetof(struct ferry_opts, ep_cache), 0 },
	{ "FERRY_IDLE_LINGER_US", offsetof(struct ferry_opts, idle_linger_us), 0 },
};

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
 * Shared with ferry_bench's command line (see opts.h), so both accept the
 * same numbers and say the same thing about the ones they refuse.
 */
const char *ferry_parse_num(const char *v, int suffix, uint64_t max, uint64_t *out)
{
	unsigned long long x;
	unsigned shift = 0;
	char *end;

	if (!*v)
		return "empty";
	if (*v == '-')
		return "negative";
	/* strtoull would skip blanks and accept a sign: insist on a digit first. */
	if (!isdigit((unsigned char)*v))
		return "not a decimal number";
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno == ERANGE)
		return "too large";
	if (*end) {
		if (!suffix)
			return "not a decimal number (no K/M/G suffix here)";
		shift = suffix_shift(*end);
		if (!shift || end[1])
			return "bad suffix or trailing garbage (K, M or G)";
	}
	if (x > (max >> shift))
		return "too large";
	*out = (uint64_t)x << shift;
	return NULL;
}

/* Strict uint32: digits only, optional suffix; NULL or the reason it is not one. */
static const char *parse_u32(const char *v, int suffix, uint32_t *out)
{
	const char *why;
	uint64_t x;

	why = ferry_parse_num(v, suffix, UINT32_MAX, &x);
	/* Name the limit: nothing else tells the user of a variable what it is. */
	if (why && !strcmp(why, "too large"))
		return "too large (max 4294967295)";
	if (why)
		return why;
	*out = (uint32_t)x;
	return NULL;
}

static int env_bad(const char *name, const char *v, const char *why)
{
	log_err("%s='%s': %s", name, v, why);
	return -EINVAL;
}

static int env_num(const struct env_num *e, struct ferry_opts *o)
{
	const char *v = getenv(e->name), *why;
	uint32_t x;

	if (!v)
		return 0;
	why = parse_u32(v, e->suffix, &x);
	if (why)
		return env_bad(e->name, v, why);
	memcpy((char *)o + e->off, &x, sizeof(x));
	return 0;
}

/* FERRY_CORES: syntax only here; whether the cores are online is checked at create. */
static int env_cores(struct ferry_opts *o)
{
	const char *v = getenv("FERRY_CORES");
	unsigned cpus[FERRY_MAX_CORES], n;
	char err[256];

	if (!v)
		return 0;
	if (ferry_parse_cores(v, cpus, FERRY_MAX_CORES, &n, 0, err, sizeof(err)))
		return env_bad("FERRY_CORES", v, err);
	o->cores = v;
	return 0;
}

/* A string that must not be empty (unlike FERRY_CORES, where "" has a meaning). */
static int env_str(const char *name, const char **field)
{
	const char *v = getenv(name);

	if (!v)
		return 0;
	if (!*v)
		return env_bad(name, v, "empty");
	*field = v;
	return 0;
}

static int env_idle(struct ferry_opts *o)
{
	const char *v = getenv("FERRY_IDLE");

	if (!v)
		return 0;
	if (!strcmp(v, "adaptive"))
		o->idle = FERRY_IDLE_ADAPTIVE;
	else if (!strcmp(v, "spin"))
		o->idle = FERRY_IDLE_SPIN;
	else if (!strcmp(v, "caller"))
		o->idle = FERRY_IDLE_CALLER;
	else
		return env_bad("FERRY_IDLE", v, "expected 'adaptive', 'spin' or 'caller'");
	return 0;
}

/* A 0/1 switch. */
static int env_flag(const char *name, int *field)
{
	const char *v = getenv(name);

	if (!v)
		return 0;
	if (strcmp(v, "0") && strcmp(v, "1"))
		return env_bad(name, v, "expected 0 or 1");
	*field = v[0] - '0';
	return 0;
}

/*
 * Parse into a copy and publish it only if every variable was good, so a
 * typo never leaves a half-applied configuration.  Every bad variable is
 * reported, not just the first, to save the user a round trip per typo.
 */
int ferry_opts_from_env(struct ferry_opts *o)
{
	struct ferry_opts t;
	size_t i;
	int rc = 0;

	if (!o || ferry_opts_complete(&t, o)) {
		log_err("ferry_opts_from_env: options not initialised (call ferry_opts_default first)");
		return -EINVAL;
	}
	if (env_cores(&t))
		rc = -EINVAL;
	if (env_str("FERRY_NICS", &t.nics))
		rc = -EINVAL;
	if (env_str("FERRY_LISTEN", &t.listen))
		rc = -EINVAL;
	for (i = 0; i < sizeof(env_nums) / sizeof(env_nums[0]); i++)
		if (env_num(&env_nums[i], &t))
			rc = -EINVAL;
	if (env_idle(&t))
		rc = -EINVAL;
	if (env_flag("FERRY_VERBOSE", &t.verbose))
		rc = -EINVAL;
	if (env_flag("FERRY_COUNTERS", &t.counters))
		rc = -EINVAL;
	if (env_str("FERRY_NAME", &t.name))
		rc = -EINVAL;
	if (env_str("FERRY_METADATA", &t.metadata))
		rc = -EINVAL;
	if (env_str("FERRY_SECRET_FILE", &t.secret_file))
		rc = -EINVAL;
	if (!rc) {
		size_t size = o->opts_size;

		t.opts_size = size; /* the caller's, not ours */
		opts_copy_prefix(o, &t, size);
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* Checks                                                              */
/* ------------------------------------------------------------------ */

/* v in [lo, hi]; hint explains a bound that depends on another field. */
static int check_range(const char *field, uint32_t v, uint32_t lo, uint32_t hi, const char *hint,
		       char *err, size_t errlen)
{
	if (v >= lo && v <= hi)
		return 0;
	errf(err, errlen, "%s %u out of range [%u, %u]%s", field, v, lo, hi, hint);
	return -EINVAL;
}

static int check_ring_size(uint32_t v, char *err, size_t errlen)
{
	/* ck_ring needs a power of two >= 4 (capacity is size - 1). */
	if (check_range("ring_size", v, 4, 1u << 20, "", err, errlen))
		return -EINVAL;
	if (v & (v - 1)) {
		errf(err, errlen, "ring_size %u is not a power of two", v);
		return -EINVAL;
	}
	return 0;
}

#define IDLE_LINGER_MAX_US 1000000u

static int check_nics_idle(const struct ferry_opts *o, char *err, size_t errlen)
{
	if (!o->nics || !*o->nics) {
		errf(err, errlen, "nics is empty (use \"loop\" for the software NIC)");
		return -EINVAL;
	}
	if (o->idle != FERRY_IDLE_ADAPTIVE && o->idle != FERRY_IDLE_SPIN &&
	    o->idle != FERRY_IDLE_CALLER) {
		errf(err, errlen, "idle %d is not a policy (0 adaptive, 1 spin, 2 caller)", (int)o->idle);
		return -EINVAL;
	}
	if (o->idle_linger_us > IDLE_LINGER_MAX_US) {
		errf(err, errlen, "idle_linger_us %u is above %u (1 s)", o->idle_linger_us,
		     IDLE_LINGER_MAX_US);
		return -EINVAL;
	}
	return 0;
}

/*
 * Order matters: wrs_per_qp is checked before cqes and signal_every, whose
 * bounds depend on it, so the message names the field that is really off.
 */
/* [A-Za-z0-9._-] in ASCII: isalnum() would follow the locale (0xE9 is a
 * letter in Latin-1), while the wire's check of a sender's name does not
 * (wire.c), and every ferry_notify of such an engine would end -EINVAL. */
static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '-';
}

bool ferry_name_valid(const char *name)
{
	size_t n = 0;

	for (; name[n]; n++)
		if (!name_char(name[n]))
			return false;
	return n > 0 && n <= FERRY_NAME_MAX;
}

/* name and metadata: their syntax (the store and the key file are checked
 * when the engine starts). */
static int check_cluster(const struct ferry_opts *o, char *err, size_t errlen)
{
	const char *m = o->metadata;

	if (o->name && !ferry_name_valid(o->name)) {
		errf(err, errlen, "name '%s': want 1..%d of [A-Za-z0-9._-]", o->name, FERRY_NAME_MAX);
		return -EINVAL;
	}
	if (m && strcmp(m, "p2p") != 0 && strncmp(m, "redis://", 8) != 0 &&
	    strncmp(m, "etcd://", 7) != 0) {
		errf(err, errlen, "metadata '%s': want p2p, redis://host:port or etcd://host:port", m);
		return -EINVAL;
	}
	if (o->name && (!m || strcmp(m, "p2p") == 0)) {
		errf(err, errlen, "name '%s' needs a metadata store (redis://... or etcd://...)",
		     o->name);
		return -EINVAL;
	}
	return 0;
}

int ferry_opts_check(const struct ferry_opts *o, char *err, size_t errlen)
{
	if (!o) {
		errf(err, errlen, "no options");
		return -EINVAL;
	}
	if (check_nics_idle(o, err, errlen) || check_cluster(o, err, errlen) ||
	    check_range("slice_size", o->slice_size, 4096, SLICE_MAX_LEN, "", err, errlen) ||
	    check_range("qps_per_ep", o->qps_per_ep, 1, 16, "", err, errlen) ||
	    check_range("wrs_per_qp", o->wrs_per_qp, 1, 32768, "", err, errlen) ||
	    check_range("cqes", o->cqes, o->wrs_per_qp, 1u << 20, " (at least wrs_per_qp)",
			err, errlen) ||
	    check_range("signal_every", o->signal_every, 1, o->wrs_per_qp,
			" (at most wrs_per_qp)", err, errlen) ||
	    check_ring_size(o->ring_size, err, errlen) ||
	    check_range("retries", o->retries, 0, 100, "", err, errlen) ||
	    check_range("ep_cache", o->ep_cache, 1, FERRY_MAX_SEGMENTS, "", err, errlen) ||
	    check_range("rail_errors", o->rail_errors, 1, 1000000, "", err, errlen) ||
	    check_range("rail_window_ms", o->rail_window_ms, 1, 3600000, "", err, errlen) ||
	    check_range("rail_pause_max_ms", o->rail_pause_max_ms, 1, 3600000, "", err, errlen) ||
	    check_range("rail_pause_ms", o->rail_pause_ms, 1, o->rail_pause_max_ms,
			" (at most rail_pause_max_ms)", err, errlen))
		return -EINVAL;
	return 0;
}
