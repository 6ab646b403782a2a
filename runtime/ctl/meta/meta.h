/* SPDX-License-Identifier: MIT */
/*
 * The metadata store: where an engine publishes its name, under a lease,
 * and where peers resolve a name to what reaches that engine.  Two
 * backends behind one interface: Redis (redis.c, hiredis) and etcd v3.4
 * through its JSON gateway (etcd.c, libcurl + cJSON).  The "p2p" setting
 * means no store at all: nobody opens one.
 *
 * Keys are "ferry/segments/<name>" (name: [A-Za-z0-9._-], at most 63);
 * values are opaque to this layer: printable ASCII (0x20..0x7e), 1 to
 * META_VALUE_MAX - 1 bytes (record.h gives them their meaning).  What a
 * store sends is network input: every reply is checked for its exact type,
 * fields and bounds, and anything else is refused (-EPROTO).  Keys and
 * rkeys never go into the store.
 *
 * Threads and blocking.  Every call blocks, each for at most its
 * timeout_ms -- the wait for the handle's lock, (re)connecting, the
 * request and the reply together -- so: control threads only, never a
 * core.  One exception: a meta_publish whose claim failed after it was
 * sent then takes the claim back, for up to 500 ms more (below).  Any number of control threads may share one handle: m->lock
 * (backend.h) serialises the connection (a hiredis context or a curl easy
 * handle, neither thread-safe) and the handle's publication (name, value,
 * TTL, lease).  Nothing else is shared.  A handle publishes at most one
 * name (an engine has one).
 *
 * A handle connects lazily, on its first call, and after a failure the
 * next call connects again: a store that is down makes calls fail fast
 * and one that is back makes them work, with nothing to reopen.
 *
 * Errors (negative errno): -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT,
 * -ECONNRESET: the store cannot be reached or did not answer in time;
 * -ENOENT: no such name (or nothing of ours to remove or keep alive);
 * -EEXIST: the name is held by another value (another engine);
 * -EPROTO: a reply that is not what the protocol says; -EACCES: the store
 * refused us (authentication); -EINVAL: bad URL, name or value; -EIO:
 * the client library failed otherwise (etcd: a curl error such as a body
 * cut short or a malformed header, logged; redis: hiredis without errno).
 */
#ifndef FERRY_RUNTIME_CTL_META_H
#define FERRY_RUNTIME_CTL_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define META_VALUE_MAX 256             /* bytes of a value, with its NUL */
#define META_KEY_PREFIX "ferry/segments/"
#define META_KEY_MAX 96                /* prefix + name + NUL fits */
#define META_URL_MAX 128

struct meta;

/*
 * A handle on the store at url: "redis://host:port" or "etcd://host:port"
 * (host: an IPv4 address or a host name, resolved here once, so that no
 * later call waits on DNS past its deadline; the store must listen on
 * IPv4).  Nothing is sent yet.  -EINVAL for a malformed URL,
 * -EHOSTUNREACH for a host name that does not resolve.  May block on DNS.
 */
int meta_open(const char *url, struct meta **out);

/* Close the connection and free the handle (what it published stays until
 * its lease ends: call meta_remove first).  NULL is ignored. */
void meta_close(struct meta *m);

/* The URL the handle was opened with (for messages). */
const char *meta_url(const struct meta *m);

/*
 * Publish value under name with a lease of ttl_ms (Redis: PX ttl_ms; etcd:
 * a lease of ceil(ttl_ms / 1000) s, which etcd may round up to its minimum,
 * ~2 s by default).  Create-if-absent: -EEXIST when the name holds another
 * value; a name that holds exactly this value is taken over (a publish
 * retried after a lost reply).  The handle then keeps the publication for
 * meta_keepalive and meta_remove; -EBUSY if it holds one already.
 * A claim that failed once sent (a timeout: the store may have executed
 * it) is taken back under a deadline of its own, 500 ms (redis.c
 * REDIS_UNDO_MS, etcd.c ETCD_UNDO_MS), so this call may block up to
 * timeout_ms + 500 ms.  Not within timeout_ms: the claim's wait has used
 * it up by then, and leaving the record to its lease instead would make
 * a retried create fail -EEXIST for the whole ttl_ms.
 */
int meta_publish(struct meta *m, const char *name, const char *value, uint32_t ttl_ms,
		 int timeout_ms);

/*
 * Renew the lease of the handle's publication.  0: renewed.  1: the store
 * had lost it (restarted without persistence, or the lease ran out while
 * the store was unreachable) and it is published again.  -EEXIST: another
 * value holds the name now (our lease ran out and someone took it; later
 * calls keep trying to get it back when it is free).  -ENOENT: nothing
 * published.  Or a transport error: call again later.
 */
int meta_keepalive(struct meta *m, int timeout_ms);

/* The value under name, NUL-terminated in value (cap bytes, at least
 * META_VALUE_MAX).  -ENOENT when there is none; -EPROTO for a value that
 * is not 1..META_VALUE_MAX-1 printable bytes. */
int meta_resolve(struct meta *m, const char *name, char *value, size_t cap, int timeout_ms);

/* The same, and where the answer stands among the handle's answers in
 * *order (1, 2, ...): the handle asks one store one call at a time, so a
 * larger order is a later state of the store (which name moved where). */
int meta_resolve_ordered(struct meta *m, const char *name, char *value, size_t cap,
			 int timeout_ms, uint64_t *order);

/*
 * Remove name if it still holds the value this handle published (a
 * compare-and-delete: a successor's record is never removed) and end the
 * lease.  The handle forgets the publication whatever the outcome.
 * -ENOENT when the handle published nothing under name or the store no
 * longer holds our value.
 */
int meta_remove(struct meta *m, const char *name, int timeout_ms);

/* "ferry/segments/<name>" into key (META_KEY_MAX); -EINVAL for a bad name. */
int meta_key(const char *name, char *key, size_t cap);

/* A value this layer stores and returns: 1..META_VALUE_MAX-1 bytes of
 * printable ASCII. */
static inline bool meta_value_ok(const char *v, size_t len)
{
	if (len == 0 || len >= META_VALUE_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (v[i] < 0x20 || v[i] > 0x7e)
			return false;
	return true;
}

#endif /* FERRY_RUNTIME_CTL_META_H */
