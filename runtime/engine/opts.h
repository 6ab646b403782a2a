/* SPDX-License-Identifier: MIT */
/* Option parsing and checking (control path only). */
#ifndef FERRY_RUNTIME_OPTS_H
#define FERRY_RUNTIME_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/ferry.h"

#define FERRY_MAX_CORES 64

/*
 * Parse a core list ("0-3,8", ranges and singles, spaces ignored) or a hex
 * mask ("0xf", up to 64 bits) into ascending CPU numbers.  Refuses with
 * -EINVAL, writing a message that names the offending token into err
 * (errlen bytes), on: an empty list, a malformed token, a reversed range, a
 * duplicate CPU, a CPU >= ncpus_online or not online (when check_online),
 * or more than max CPUs.  NULL or "" means "the first online CPU".
 */
int ferry_parse_cores(const char *s, unsigned *cpus, unsigned max, unsigned *n,
		      int check_online, char *err, size_t errlen);

/*
 * Strict unsigned decimal: digits only (no blank, sign or hex), with an
 * optional binary K/M/G suffix (64K = 65536) when suffix is nonzero, at most
 * max.  Returns NULL with the value in *out, or why v is not one ("empty",
 * "negative", "not a decimal number...", "bad suffix...", "too large"); *out
 * is untouched then.  Zero is accepted: callers that want a positive number
 * say so themselves.  Internal: the FERRY_* variables and ferry_bench's flags.
 */
const char *ferry_parse_num(const char *v, int suffix, uint64_t max, uint64_t *out);

/* Longest engine name (names are [A-Za-z0-9._-]+). */
#define FERRY_NAME_MAX 63

/* A valid engine name. */
bool ferry_name_valid(const char *name);

/* The options of v0.2, the first with opts_size: the smallest a caller has. */
#define FERRY_OPTS_SIZE_MIN (offsetof(struct ferry_opts, counters) + sizeof(int))

/*
 * A complete copy of the caller's options in full: defaults, then the
 * fields o->opts_size covers.  -EINVAL when o was never initialised by
 * ferry_opts_default (opts_size too small).
 */
int ferry_opts_complete(struct ferry_opts *full, const struct ferry_opts *o);

/* Check numeric knobs of o (powers of two, ranges); -EINVAL with a message in err. */
int ferry_opts_check(const struct ferry_opts *o, char *err, size_t errlen);

#endif /* FERRY_RUNTIME_OPTS_H */
