/* SPDX-License-Identifier: MIT */
/* Option parsing and checking (control path only). */
#ifndef FERRY_RUNTIME_OPTS_H
#define FERRY_RUNTIME_OPTS_H

#include <stddef.h>

#include "ferry.h"

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

/* Check numeric knobs of o (powers of two, ranges); -EINVAL with a message in err. */
int ferry_opts_check(const struct ferry_opts *o, char *err, size_t errlen);

#endif /* FERRY_RUNTIME_OPTS_H */
