/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text exposition (format 0.0.4) of the per-core counters, and
 * of the engine-wide ones (one record, labelled engine only).
 *
 * The formatter is table-driven: one row per field of the per-core record
 * (name, help, type, offsetof), so a field added to struct ferry_core_stats
 * is one more row in prom.c.  It only formats: it takes no locks and makes
 * no system calls, and the output is byte-for-byte reproducible.
 */
#ifndef FERRY_RUNTIME_PROM_H
#define FERRY_RUNTIME_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/ferry.h"

/* ferry_stats_format_prometheus (ferry.h) formats every core of an engine
 * with prom_format. */

enum prom_type {
	PROM_COUNTER,   /* monotonic: the name ends in _total */
	PROM_GAUGE,
	PROM_HISTOGRAM, /* a struct histo snapshot in ticks, exported in seconds */
};

enum prom_unit {
	PROM_UNIT_RAW,  /* exported as is */
	PROM_UNIT_NS,   /* ns, exported in seconds (exact decimal) */
};

/* A value the engine could not measure (a refused perf counter): no sample. */
#define PROM_NONE UINT64_MAX

struct prom_row {
	const char *name;      /* family name: ferry_<what>[_seconds][_total] */
	const char *help;
	enum prom_type type;
	enum prom_unit unit;   /* counters and gauges */
	size_t off;            /* offsetof the uint64_t, or of the
	                        * uint64_t[FERRY_HISTO_BUCKETS] of a histogram */
	size_t hz_off;         /* histogram: offsetof the uint64_t tick rate (Hz) */
};

/* A set of per-core records of one type and how to export them. */
struct prom_table {
	const struct prom_row *rows;
	size_t nrows;
	size_t stride;         /* sizeof one record */
	size_t cpu_off;        /* offsetof the record's unsigned CPU (the cpu label) */
	int engine_wide;       /* one record of the engine's: labelled engine only */
};

/*
 * Format n records at recs, family by family in table order, each sample
 * labelled engine="<engine_label>",core="<index>",cpu="<cpu>".  Returns the
 * bytes written (without the NUL), -ENOSPC when buf is too small (buf then
 * holds "": never half a line), -EINVAL on NULL arguments.  buf is always
 * NUL-terminated when len > 0.  Any thread.
 */
int prom_format_table(char *buf, size_t len, const struct prom_table *t, const void *recs,
		      unsigned n, const char *engine_label);

/* The table of struct ferry_core_stats (for the test that it covers every field). */
const struct prom_table *prom_core_table(void);
/* The table of struct ferry_engine_stats (likewise); its samples carry the
 * engine label only.  ferry_stats_format_prometheus puts it after the cores'. */
const struct prom_table *prom_engine_table(void);

/* prom_format_table on ncores struct ferry_core_stats. */
int prom_format(char *buf, size_t len, const struct ferry_core_stats *st, unsigned ncores,
		const char *engine_label);

#endif /* FERRY_RUNTIME_PROM_H */
