/* SPDX-License-Identifier: MIT */
/*
 * An engine's name in the metadata store (named.c): published when the
 * engine is created (after its control server listens), kept alive by the
 * lease thread (lease.h), removed when it is destroyed; and names resolved for
 * ferry_segment_open.  With metadata "p2p" there is no store and nothing
 * here does anything.
 *
 * Threads: named_start and named_stop run in engine create and destroy,
 * when the lease thread is not running; named_keepalive only on the
 * lease thread; named_resolve on any control thread (the store handle has
 * its own lock, meta.h).  The lease thread's fields below are its own.
 */
#ifndef FERRY_RUNTIME_CTL_META_NAMED_H
#define FERRY_RUNTIME_CTL_META_NAMED_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/ctl/meta/meta.h"
#include "runtime/ctl/meta/record.h"
#include "runtime/engine/opts.h"

struct ferry_engine;

#define NAMED_TTL_MS 10000             /* the lease; renewed every third of it */
#define NAMED_RESOLVE_TIMEOUT_MS 2000  /* an open by name waits this long for the store */
#define NAMED_PUBLISH_TIMEOUT_MS 5000
#define NAMED_REMOVE_TIMEOUT_MS 1000
#define NAMED_KEEPALIVE_TIMEOUT_MS 1000
#define NAMED_LOG_EVERY_MS 30000       /* a failing lease refresh logs this often */

struct named {
	struct meta *store;            /* NULL: metadata p2p */
	char url[META_URL_MAX];
	char name[FERRY_NAME_MAX + 1]; /* "": the engine has no name */
	char value[META_VALUE_MAX];    /* the record we published */
	uint32_t ttl_ms;
	bool published;
	uint32_t frozen;               /* test hook: READ_ONCE/WRITE_ONCE */
	/* the lease thread's: */
	uint64_t next_ms;              /* next renewal */
	uint64_t held_until_ms;        /* our record's lease ends (as of the last success) */
	uint32_t backoff_ms;           /* retry delay while renewals fail */
	uint32_t failures;             /* renewals failed in a row (WRITE_ONCE: tests read it) */
	uint64_t failing_since_ms;
	uint64_t next_log_ms;
	/* counters (the lease thread writes, WRITE_ONCE; anyone reads) */
	uint64_t renewed;              /* renewals that found our record */
	uint64_t republished;          /* renewals that had to publish it again */
};

/* Open the store of opts.metadata and publish opts.name (if any).
 * -EEXIST when a live engine holds the name; the store's errors. */
int named_start(struct ferry_engine *e, uint32_t ttl_ms);
/* Remove our record (compare-and-delete) and close the store. */
void named_stop(struct ferry_engine *e);
/* Renew the lease when it is due; retries with back-off, logs rate-limited. */
void named_keepalive(struct ferry_engine *e);
/* The record published under name, and its answer's order
 * (meta_resolve_ordered); -EINVAL (metadata p2p), -ENOENT, the store's
 * errors, -EPROTO (malformed record), each with a message unless quiet
 * (a background check that asks again later). */
int named_resolve(struct ferry_engine *e, const char *name, struct meta_record *rec,
		  uint64_t *order, bool quiet);

/* Test hook: behave as if the process had died -- no more renewals, and
 * destroy leaves the record to expire. */
void named_test_crash(struct ferry_engine *e);

#endif /* FERRY_RUNTIME_CTL_META_NAMED_H */
