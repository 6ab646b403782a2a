/* SPDX-License-Identifier: MIT */
/*
 * etcd v3.4's JSON gateway, the bodies: requests built with snprintf (every
 * string in them is base64 or a decimal number, so nothing needs escaping)
 * and replies parsed with cJSON.  No I/O here (etcd.c does that), so the
 * fuzzer can drive the parsers directly.
 *
 * Replies are network input.  A body is at most ETCD_BODY_MAX bytes, holds
 * no NUL byte and is one JSON value with nothing after it; every field used
 * must have its exact JSON type (etcd writes 64-bit integers as decimal
 * strings: those are parsed strictly, digits only, no sign, in range) and
 * appear once in its object, in any case (a member named twice is
 * refused: cJSON would read the first, etcd's own Go client the last, and
 * Go takes "id" for "ID");
 * keys must decode to the very key asked for, values to 1..META_VALUE_MAX-1
 * printable bytes.  Fields ferry does not use (the header, revisions) are
 * ignored, so that a newer etcd that adds some is not refused.
 */
#ifndef FERRY_RUNTIME_CTL_META_ETCD_JSON_H
#define FERRY_RUNTIME_CTL_META_ETCD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_BODY_MAX 65536            /* a reply, with its NUL */
#define ETCD_REQ_MAX 2048              /* a request body */

/* Request bodies into buf (ETCD_REQ_MAX); -ENOSPC, -EINVAL. */
int etcd_body_grant(char *buf, size_t cap, uint32_t ttl_s);
int etcd_body_lease(char *buf, size_t cap, int64_t id);  /* keepalive, revoke */
int etcd_body_range(char *buf, size_t cap, const char *key);
int etcd_body_put(char *buf, size_t cap, const char *key, const char *value, int64_t lease);
/* Txn: if key does not exist, put it with the lease; else read it. */
int etcd_body_claim(char *buf, size_t cap, const char *key, const char *value, int64_t lease);
/* Txn: if key holds value, delete it. */
int etcd_body_drop(char *buf, size_t cap, const char *key, const char *value);

/* A strict decimal int64 of a JSON string ("123"); -EPROTO. */
int etcd_int64(const char *s, int64_t *out);

/* LeaseGrant: {"ID":"<id>","TTL":"<s>"}: id > 0 and ttl > 0; -EPROTO. */
int etcd_parse_grant(const char *body, size_t len, int64_t *id, int64_t *ttl);
/* LeaseKeepAlive: {"result":{"ID":"<id>","TTL":"<s>"}}: ID must be id; a
 * missing TTL (0) means the lease is gone: *ttl = 0.  -EPROTO. */
int etcd_parse_keepalive(const char *body, size_t len, int64_t id, int64_t *ttl);
/* Range of key: its value into value (cap >= META_VALUE_MAX); -ENOENT
 * when there is none; -EPROTO. */
int etcd_parse_range(const char *body, size_t len, const char *key, char *value, size_t cap);
/* Txn of etcd_body_claim: *ok when the put was made, else the value that
 * holds the key into holder (cap >= META_VALUE_MAX).  -EPROTO. */
int etcd_parse_claim(const char *body, size_t len, const char *key, bool *ok, char *holder,
		     size_t cap);
/* Txn of etcd_body_drop: *ok when the key was deleted.  -EPROTO. */
int etcd_parse_drop(const char *body, size_t len, bool *ok);
/* An error reply {"error":..,"code":N,"message":".."}: the gRPC code (-1
 * unknown) and the message, for the log. */
void etcd_parse_error(const char *body, size_t len, int *code, char *msg, size_t cap);

#endif /* FERRY_RUNTIME_CTL_META_ETCD_JSON_H */
