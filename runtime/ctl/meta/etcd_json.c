/* SPDX-License-Identifier: MIT */
/* etcd v3.4's JSON gateway: request bodies and strict reply parsers (etcd_json.h). */
#include "runtime/ctl/meta/etcd_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "runtime/ctl/meta/base64.h"
#include "runtime/ctl/meta/meta.h"

#define B64_KEY (META_B64_LEN(META_KEY_MAX) + 1)
#define B64_VAL (META_B64_LEN(META_VALUE_MAX) + 1)

static int body_done(int n, size_t cap)
{
	return n < 0 || (size_t)n >= cap ? -ENOSPC : 0;
}

int etcd_body_grant(char *buf, size_t cap, uint32_t ttl_s)
{
	return body_done(snprintf(buf, cap, "{\"TTL\":\"%u\"}", ttl_s), cap);
}

int etcd_body_lease(char *buf, size_t cap, int64_t id)
{
	return body_done(snprintf(buf, cap, "{\"ID\":\"%lld\"}", (long long)id), cap);
}

/* key and value as base64, into k and v. */
static int b64_kv(const char *key, const char *value, char *k, char *v)
{
	if (meta_b64_encode(key, strlen(key), k, B64_KEY))
		return -EINVAL;
	if (v && meta_b64_encode(value, strlen(value), v, B64_VAL))
		return -EINVAL;
	return 0;
}

int etcd_body_range(char *buf, size_t cap, const char *key)
{
	char k[B64_KEY];

	if (b64_kv(key, NULL, k, NULL))
		return -EINVAL;
	return body_done(snprintf(buf, cap, "{\"key\":\"%s\"}", k), cap);
}

int etcd_body_put(char *buf, size_t cap, const char *key, const char *value, int64_t lease)
{
	char k[B64_KEY], v[B64_VAL];

	if (b64_kv(key, value, k, v))
		return -EINVAL;
	return body_done(snprintf(buf, cap, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}",
				  k, v, (long long)lease), cap);
}

int etcd_body_claim(char *buf, size_t cap, const char *key, const char *value, int64_t lease)
{
	char k[B64_KEY], v[B64_VAL];

	if (b64_kv(key, value, k, v))
		return -EINVAL;
	return body_done(snprintf(buf, cap,
				  "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\","
				  "\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
				  "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
				  "\"lease\":\"%lld\"}}],"
				  "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
				  k, k, v, (long long)lease, k), cap);
}

int etcd_body_drop(char *buf, size_t cap, const char *key, const char *value)
{
	char k[B64_KEY], v[B64_VAL];

	if (b64_kv(key, value, k, v))
		return -EINVAL;
	return body_done(snprintf(buf, cap,
				  "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\","
				  "\"target\":\"VALUE\",\"value\":\"%s\"}],"
				  "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}}]}",
				  k, v, k), cap);
}

int etcd_int64(const char *s, int64_t *out)
{
	int64_t v = 0;
	size_t n = strlen(s);

	/* digits only, no leading zero but "0", at most 19 (INT64_MAX has 19) */
	if (n == 0 || n > 19 || (n > 1 && s[0] == '0'))
		return -EPROTO;
	for (size_t i = 0; i < n; i++) {
		int d = s[i] - '0';

		if (d < 0 || d > 9 || v > (INT64_MAX - d) / 10)
			return -EPROTO;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

/* One JSON value filling body (no NUL inside, nothing after); NULL if not. */
static cJSON *parse_body(const char *body, size_t len)
{
	const char *end = NULL;
	cJSON *j;
	char *copy;

	if (len == 0 || len >= ETCD_BODY_MAX || memchr(body, 0, len))
		return NULL;
	/* cJSON turns "\u0000" into a NUL that ends the string early: what
	 * follows it would be ignored, not refused */
	for (size_t i = 0; i + 1 < len; i++)
		if (body[i] == '\\') {
			if (body[i + 1] == 'u' && len - i >= 6 && memcmp(body + i + 2, "0000", 4) == 0)
				return NULL;
			i++;
		}
	copy = malloc(len + 1);
	if (!copy)
		return NULL;
	memcpy(copy, body, len);
	copy[len] = '\0';
	/* length with the NUL: cJSON wants to see it after the value */
	j = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
	free(copy);
	return j;
}

/*
 * obj's member name into *out: -ENOENT when absent, -EPROTO when obj is
 * not an object or names it twice, in any case ("ID" and "id").  Parsers
 * disagree on a duplicate (cJSON takes the first, Go's encoding/json the
 * last, and Go matches names ignoring case): a reply that says two things
 * is refused rather than read one way.
 */
static int member(const cJSON *obj, const char *name, const cJSON **out)
{
	*out = NULL;
	if (!cJSON_IsObject(obj))
		return -EPROTO;
	for (const cJSON *it = obj->child; it; it = it->next) {
		if (!it->string || strcasecmp(it->string, name) != 0)
			continue;
		if (*out || strcmp(it->string, name) != 0) {
			*out = NULL;
			return -EPROTO;
		}
		*out = it;
	}
	return *out ? 0 : -ENOENT;
}

/* obj.name as a strict int64 string; -ENOENT when absent, -EPROTO when not one. */
static int get_int64(const cJSON *obj, const char *name, int64_t *out)
{
	const cJSON *it;
	int rc = member(obj, name, &it);

	if (rc)
		return rc;
	if (!cJSON_IsString(it) || etcd_int64(it->valuestring, out))
		return -EPROTO;
	return 0;
}

static const cJSON *get_object(const cJSON *obj, const char *name)
{
	const cJSON *it;

	return member(obj, name, &it) == 0 && cJSON_IsObject(it) ? it : NULL;
}

int etcd_parse_grant(const char *body, size_t len, int64_t *id, int64_t *ttl)
{
	cJSON *j = parse_body(body, len);
	int rc = -EPROTO;

	if (cJSON_IsObject(j) && get_int64(j, "ID", id) == 0 && get_int64(j, "TTL", ttl) == 0 &&
	    *id > 0 && *ttl > 0)
		rc = 0;
	cJSON_Delete(j);
	return rc;
}

int etcd_parse_keepalive(const char *body, size_t len, int64_t id, int64_t *ttl)
{
	cJSON *j = parse_body(body, len);
	const cJSON *r = cJSON_IsObject(j) ? get_object(j, "result") : NULL;
	int64_t got = 0;
	int rc = -EPROTO;

	*ttl = 0;
	if (r && get_int64(r, "ID", &got) == 0 && got == id) {
		rc = get_int64(r, "TTL", ttl);
		if (rc == -ENOENT) { /* proto3 leaves out a zero: the lease is gone */
			*ttl = 0;
			rc = 0;
		}
	}
	cJSON_Delete(j);
	return rc;
}

/* A base64 JSON string decoded into out (cap bytes, NUL-terminated). */
static int get_b64(const cJSON *obj, const char *name, char *out, size_t cap, size_t *n)
{
	const cJSON *it;

	if (member(obj, name, &it) || !cJSON_IsString(it) || cap == 0 ||
	    meta_b64_decode(it->valuestring, strlen(it->valuestring), (uint8_t *)out, cap - 1, n))
		return -EPROTO;
	out[*n] = '\0';
	return 0;
}

/*
 * The kvs of a range of key: none (-ENOENT, with "count" absent or "0"),
 * or exactly one whose key is key and whose value is a valid value
 * (copied into value) with "count" "1".
 */
static int range_value(const cJSON *rr, const char *key, char *value, size_t cap)
{
	const cJSON *kvs, *kv;
	int64_t count = 0;
	int rc = get_int64(rr, "count", &count);
	char k[META_KEY_MAX];
	size_t n;

	if (rc == -EPROTO || member(rr, "kvs", &kvs) == -EPROTO || (kvs && !cJSON_IsArray(kvs)))
		return -EPROTO;
	if (!kvs || cJSON_GetArraySize(kvs) == 0)
		return count == 0 ? -ENOENT : -EPROTO;
	if (cJSON_GetArraySize(kvs) != 1 || count != 1)
		return -EPROTO;
	kv = cJSON_GetArrayItem(kvs, 0);
	if (!cJSON_IsObject(kv) || get_b64(kv, "key", k, sizeof(k), &n) || n != strlen(key) ||
	    memcmp(k, key, n) != 0)
		return -EPROTO;
	if (get_b64(kv, "value", value, cap, &n) || !meta_value_ok(value, n)) {
		value[0] = '\0';
		return -EPROTO;
	}
	return 0;
}

int etcd_parse_range(const char *body, size_t len, const char *key, char *value, size_t cap)
{
	cJSON *j = parse_body(body, len);
	int rc = cJSON_IsObject(j) ? range_value(j, key, value, cap) : -EPROTO;

	if (rc)
		value[0] = '\0';
	cJSON_Delete(j);
	return rc;
}

/* "succeeded": true, or absent (proto3 leaves out false). */
static int txn_succeeded(const cJSON *j, bool *ok)
{
	const cJSON *s;

	if (member(j, "succeeded", &s) == -EPROTO || (s && !cJSON_IsBool(s)))
		return -EPROTO;
	*ok = s && cJSON_IsTrue(s);
	return 0;
}

/* The only response of a txn, which must be an object named name. */
static const cJSON *txn_response(const cJSON *j, const char *name)
{
	const cJSON *rs;

	if (member(j, "responses", &rs) || !cJSON_IsArray(rs) || cJSON_GetArraySize(rs) != 1 ||
	    !cJSON_IsObject(cJSON_GetArrayItem(rs, 0)))
		return NULL;
	return get_object(cJSON_GetArrayItem(rs, 0), name);
}

int etcd_parse_claim(const char *body, size_t len, const char *key, bool *ok, char *holder,
		     size_t cap)
{
	cJSON *j = parse_body(body, len);
	const cJSON *rr;
	int rc = -EPROTO;

	holder[0] = '\0';
	*ok = false;
	if (!cJSON_IsObject(j) || txn_succeeded(j, ok))
		goto out;
	if (*ok) {
		rc = txn_response(j, "response_put") ? 0 : -EPROTO;
	} else if ((rr = txn_response(j, "response_range"))) {
		rc = range_value(rr, key, holder, cap);
		rc = rc == -ENOENT ? -EPROTO : rc; /* it existed at the compare */
	}
out:
	if (rc) {
		*ok = false;
		holder[0] = '\0';
	}
	cJSON_Delete(j);
	return rc;
}

int etcd_parse_drop(const char *body, size_t len, bool *ok)
{
	cJSON *j = parse_body(body, len);
	int rc = -EPROTO;

	*ok = false;
	if (cJSON_IsObject(j) && txn_succeeded(j, ok) == 0)
		rc = !*ok || txn_response(j, "response_delete_range") ? 0 : -EPROTO;
	if (rc)
		*ok = false;
	cJSON_Delete(j);
	return rc;
}

void etcd_parse_error(const char *body, size_t len, int *code, char *msg, size_t cap)
{
	cJSON *j = parse_body(body, len);
	const cJSON *c, *m;

	/* a code that is not one whole number 0..16, or said twice: unknown */
	*code = member(j, "code", &c) == 0 && cJSON_IsNumber(c) && c->valuedouble >= 0 &&
			c->valuedouble <= 16 && c->valuedouble == (double)c->valueint
		? c->valueint
		: -1;
	(void)member(j, "message", &m);
	snprintf(msg, cap, "%s", cJSON_IsString(m) ? m->valuestring : "(no message)");
	/* the message is the server's: keep it printable for the log */
	for (char *p = msg; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	cJSON_Delete(j);
}
