/* SPDX-License-Identifier: MIT */
/*
 * Single-writer counters: only the owning thread (a core) writes them, with
 * a relaxed store of (old + n) -- no read-modify-write on the hot path --
 * and a reader on any thread sees whole values with relaxed loads.
 */
#ifndef FERRY_BASE_COUNTERS_H
#define FERRY_BASE_COUNTERS_H

#include <stdint.h>

#include "ring/base/atomics.h"

#define stat_add(s, field, n) WRITE_ONCE((s)->field, (s)->field + (uint64_t)(n))
#define stat_set(s, field, v) WRITE_ONCE((s)->field, (uint64_t)(v))
#define stat_read(s, field) READ_ONCE((s)->field)

#endif /* FERRY_BASE_COUNTERS_H */
