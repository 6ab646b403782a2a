/* SPDX-License-Identifier: MIT */
/*
 * Single-writer counters: only the owning core writes a core's counters, with
 * relaxed atomic stores of (old + n), so there is no read-modify-write cost
 * and a reader on any thread sees whole values with relaxed loads.
 */
#ifndef FERRY_RUNTIME_STATS_H
#define FERRY_RUNTIME_STATS_H

#include <stdint.h>

#define stat_add(s, field, n) \
	__atomic_store_n(&(s)->field, (s)->field + (uint64_t)(n), __ATOMIC_RELAXED)
#define stat_set(s, field, v) __atomic_store_n(&(s)->field, (uint64_t)(v), __ATOMIC_RELAXED)
#define stat_read(s, field) __atomic_load_n(&(s)->field, __ATOMIC_RELAXED)

#endif /* FERRY_RUNTIME_STATS_H */
