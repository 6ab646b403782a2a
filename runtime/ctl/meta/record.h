/* SPDX-License-Identifier: MIT */
/*
 * What an engine publishes under its name: what a peer needs to reach it,
 * and nothing it could abuse.  One line of printable ASCII:
 *
 *   v1 addr=10.0.0.7:7000 inc=0123456789abcdef tx=verbs,tcp,cma
 *
 * - "v1": the format; another version is refused (-EPROTO), so a future
 *   format can say what it changes;
 * - addr: the control address, a dotted IPv4 address (no leading zeros,
 *   not 0.0.0.0) and a port 1..65535 (no leading zero);
 * - inc: the engine's incarnation, exactly 16 lowercase hex digits; the
 *   opener checks it against the descriptor the engine itself sends;
 * - tx: the transports the engine offers, 1..META_REC_TX_MAX distinct
 *   names of [a-z0-9]{1,15}, comma-separated.
 *
 * Exactly these fields, in this order, one space apart, nothing before or
 * after.  A fixed grammar rather than JSON: it is parsed strictly in a few
 * dozen lines with no parser underneath (a value also comes from Redis,
 * where no JSON parser would otherwise be needed), it reads at a glance in
 * redis-cli or etcdctl, and it fuzzes well (tests/fuzz/fuzz_meta.c).
 * Memory keys (rkeys) and regions never go into the store: they come from
 * the peer's descriptor over the control connection, which is
 * authenticated when a cluster secret is set.
 */
#ifndef FERRY_RUNTIME_CTL_META_RECORD_H
#define FERRY_RUNTIME_CTL_META_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define META_REC_TX_MAX 8
#define META_REC_TX_LEN 16             /* a transport name, with its NUL */

struct meta_record {
	char addr[24];                 /* "a.b.c.d:port" */
	uint64_t incarnation;
	unsigned n_tx;
	char tx[META_REC_TX_MAX][META_REC_TX_LEN];
};

/* The line for r into buf (cap bytes, NUL-terminated); -EINVAL if r does
 * not follow the grammar, -ENOSPC if buf is short. */
int meta_record_encode(const struct meta_record *r, char *buf, size_t cap);

/* Parse len bytes (no NUL needed); -EPROTO, with *r zeroed, for anything
 * but the grammar above. */
int meta_record_decode(const char *buf, size_t len, struct meta_record *r);

#endif /* FERRY_RUNTIME_CTL_META_RECORD_H */
