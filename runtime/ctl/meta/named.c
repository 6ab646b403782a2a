/* SPDX-License-Identifier: MIT */
/*
 * An engine's name in the metadata store (named.h).  Nothing here is on
 * the data path: a store that is down stops names from resolving and
 * leases from renewing, never a transfer.
 *
 * The lease: NAMED_TTL_MS, renewed every third of it by the lease thread
 * (each renewal bounded by NAMED_KEEPALIVE_TIMEOUT_MS, so a dead store
 * holds that thread at most that long per try, and never a repair).  A renewal that
 * fails is retried after 250 ms, doubling up to the renewal period; the
 * first failure is logged, then at most one line every NAMED_LOG_EVERY_MS,
 * and the first success after failures says so.  A store that lost our
 * record (restarted without persistence, or our lease ran out while it was
 * unreachable) gets it again on the next renewal.
 */
#include "runtime/ctl/meta/named.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ring/base/atomics.h"
#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

#define NAMED_RETRY_MIN_MS 250

/* Our record: the control address, the incarnation, every transport offered. */
static int named_record(struct ferry_engine *e, char *buf, size_t cap)
{
	struct meta_record r = { .incarnation = e->incarnation };
	const struct ferry_core *c = e->cores[0];
	int rc;

	if (strlen(e->ctl.address) >= sizeof(r.addr))
		return -EINVAL;
	strcpy(r.addr, e->ctl.address);
	for (unsigned t = 0; t < c->ntx && r.n_tx < META_REC_TX_MAX; t++) {
		const char *p = c->tx[t].prov->name;
		bool dup = false;

		for (unsigned k = 0; k < r.n_tx; k++)
			dup |= strcmp(r.tx[k], p) == 0;
		if (!dup && strlen(p) < META_REC_TX_LEN)
			strcpy(r.tx[r.n_tx++], p);
	}
	rc = meta_record_encode(&r, buf, cap);
	if (rc)
		log_err("name '%s': cannot publish control address %s: peers could not reach it "
			"(listen on the a.b.c.d:port they should use)", e->opts.name, e->ctl.address);
	return rc;
}

/* Who holds name, for the message that refuses it. */
static void named_holder(struct named *n, char *who, size_t cap)
{
	char v[META_VALUE_MAX];
	struct meta_record r;

	snprintf(who, cap, "another engine");
	if (meta_resolve(n->store, n->name, v, sizeof(v), NAMED_REMOVE_TIMEOUT_MS) == 0 &&
	    meta_record_decode(v, strlen(v), &r) == 0)
		snprintf(who, cap, "the engine at %s, incarnation %016llx", r.addr,
			 (unsigned long long)r.incarnation);
}

int named_start(struct ferry_engine *e, uint32_t ttl_ms)
{
	struct named *n = &e->named;
	const char *m = e->opts.metadata;
	char who[128];
	uint64_t t0;
	int rc;

	if (!m || strcmp(m, "p2p") == 0)
		return 0;
	snprintf(n->url, sizeof(n->url), "%s", m);
	rc = meta_open(m, &n->store);
	if (rc)
		return rc;
	if (!e->opts.name)
		return 0;
	snprintf(n->name, sizeof(n->name), "%s", e->opts.name);
	n->ttl_ms = ttl_ms ? ttl_ms : NAMED_TTL_MS;
	rc = named_record(e, n->value, sizeof(n->value));
	if (rc)
		return rc;
	t0 = ferry_now_ms(); /* the record's lease counts from before the request */
	rc = meta_publish(n->store, n->name, n->value, n->ttl_ms, NAMED_PUBLISH_TIMEOUT_MS);
	if (rc == -EEXIST) {
		named_holder(n, who, sizeof(who));
		log_err("name '%s' is held by %s in %s: refused (pick another name; a crashed "
			"engine's record expires within %u ms)", n->name, who, n->url, n->ttl_ms);
		return rc;
	}
	if (rc) {
		log_err("name '%s': cannot publish it in %s: %s", n->name, n->url, strerror(-rc));
		return rc;
	}
	n->published = true;
	n->next_ms = ferry_now_ms() + n->ttl_ms / 3;
	n->held_until_ms = t0 + n->ttl_ms;
	if (e->opts.verbose)
		log_info("name '%s' published in %s: %s (lease %u ms)", n->name, n->url, n->value,
			 n->ttl_ms);
	return 0;
}

void named_stop(struct ferry_engine *e)
{
	struct named *n = &e->named;
	int rc;

	if (n->published && !READ_ONCE(n->frozen)) {
		rc = meta_remove(n->store, n->name, NAMED_REMOVE_TIMEOUT_MS);
		if (rc && rc != -ENOENT)
			log_warn("name '%s': cannot remove it from %s (%s): it expires within %u ms",
				 n->name, n->url, strerror(-rc), n->ttl_ms);
	}
	n->published = false;
	meta_close(n->store);
	n->store = NULL;
}

void named_test_crash(struct ferry_engine *e)
{
	WRITE_ONCE(e->named.frozen, 1);
}

static void named_renew_failed(struct named *n, uint64_t now, int rc)
{
	uint32_t period = n->ttl_ms / 3;
	const char *why = rc == -EEXIST ? "another engine holds the name now (our lease ran out)"
					: strerror(-rc);

	WRITE_ONCE(n->failures, n->failures + 1);
	if (n->failures == 1) {
		n->failing_since_ms = now;
		n->next_log_ms = now + NAMED_LOG_EVERY_MS;
		log_warn("name '%s': lease renewal in %s failed: %s; retrying (logged again every "
			 "%u s while it fails)", n->name, n->url, why, NAMED_LOG_EVERY_MS / 1000);
	} else if (now >= n->next_log_ms) {
		n->next_log_ms = now + NAMED_LOG_EVERY_MS;
		log_warn("name '%s': lease renewal in %s still failing (%u tries in %llu s): %s%s",
			 n->name, n->url, n->failures,
			 (unsigned long long)(now - n->failing_since_ms) / 1000, why,
			 now - n->failing_since_ms > n->ttl_ms
				 ? "; the record may have expired: peers cannot open us by name"
				 : "");
	}
	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : NAMED_RETRY_MIN_MS;
	if (n->backoff_ms > period)
		n->backoff_ms = period;
	n->next_ms = now + n->backoff_ms;
	/* While the record still lives, the back-off never skips past its
	 * end: the last stretch is tried every NAMED_RETRY_MIN_MS, leaving
	 * room for a try's timeout. */
	if (n->held_until_ms > now) {
		uint32_t to = period / 2 < NAMED_KEEPALIVE_TIMEOUT_MS ? period / 2
								 : NAMED_KEEPALIVE_TIMEOUT_MS;
		uint64_t last = n->held_until_ms > (uint64_t)to + NAMED_RETRY_MIN_MS
					? n->held_until_ms - to - NAMED_RETRY_MIN_MS
					: now;

		uint64_t latest = last > now + NAMED_RETRY_MIN_MS ? last : now + NAMED_RETRY_MIN_MS;

		if (n->next_ms > latest) /* only ever sooner than the back-off */
			n->next_ms = latest;
	}
}

void named_keepalive(struct ferry_engine *e)
{
	struct named *n = &e->named;
	uint32_t period = n->ttl_ms / 3;
	int timeout = period / 2 < NAMED_KEEPALIVE_TIMEOUT_MS ? (int)(period / 2)
							      : NAMED_KEEPALIVE_TIMEOUT_MS;
	uint64_t now, t0;
	int rc;

	if (!n->published || READ_ONCE(n->frozen))
		return;
	now = ferry_now_ms();
	if (now < n->next_ms)
		return;
	t0 = now;
	rc = meta_keepalive(n->store, timeout > 0 ? timeout : 1);
	now = ferry_now_ms();
	if (rc < 0) {
		named_renew_failed(n, now, rc);
		return;
	}
	if (n->failures)
		log_info("name '%s': lease renewed in %s again, after %u failed tries in %llu ms",
			 n->name, n->url, n->failures,
			 (unsigned long long)(now - n->failing_since_ms));
	if (rc == 1)
		log_warn("name '%s': %s had lost our record (restarted, or our lease ran out): "
			 "published again", n->name, n->url);
	if (rc == 1)
		WRITE_ONCE(n->republished, n->republished + 1);
	else
		WRITE_ONCE(n->renewed, n->renewed + 1);
	WRITE_ONCE(n->failures, 0);
	n->backoff_ms = 0;
	n->next_ms = now + period;
	n->held_until_ms = t0 + n->ttl_ms; /* counted from when the renewal went out */
}

int named_resolve(struct ferry_engine *e, const char *name, struct meta_record *rec,
		  uint64_t *order, bool quiet)
{
	struct named *n = &e->named;
	char v[META_VALUE_MAX];
	int rc;

	if (!n->store) {
		if (!quiet)
			log_err("segment '%s': a name, but this engine has no metadata store (metadata "
			"p2p): open host:port, or set metadata to redis://... or etcd://...", name);
		return -EINVAL;
	}
	rc = meta_resolve_ordered(n->store, name, v, sizeof(v), NAMED_RESOLVE_TIMEOUT_MS, order);
	if (rc == -ENOENT) {
		if (!quiet)
			log_err("segment '%s': no engine of that name in %s", name, n->url);
		return rc;
	}
	if (rc) {
		if (!quiet)
			log_err("segment '%s': the metadata store %s: %s", name, n->url,
				strerror(-rc));
		return rc;
	}
	rc = meta_record_decode(v, strlen(v), rec);
	if (rc && !quiet)
		log_err("segment '%s': the record in %s is malformed: refused", name, n->url);
	return rc;
}
