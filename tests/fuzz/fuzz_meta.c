/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what ferry reads from a metadata store (`make
 * fuzz`): the published record's line (record.c), strict base64 and etcd's
 * JSON replies and decimal strings (etcd_json.c).  Every input goes to
 * every decoder.
 *
 * Invariants: an accepted record, base64 or decimal string re-encodes to
 * the very same bytes (one encoding per value: the decoders accept nothing
 * lax); a value a parser returns is 1..META_VALUE_MAX-1 printable bytes;
 * what a decoder refuses leaves its output empty.  A broken invariant
 * aborts.
 *
 * With FERRY_FUZZ_SEEDS=<dir> the target writes a few valid inputs into
 * <dir> and exits (built from the encoders, so they follow the format).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ctl/meta/base64.h"
#include "runtime/ctl/meta/etcd_json.h"
#include "runtime/ctl/meta/meta.h"
#include "runtime/ctl/meta/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* stderr is closed under -close_fd_mask=2: the abort's stack says which. */
#define CHECK(cond)                 \
	do {                        \
		if (!(cond))        \
			abort();    \
	} while (0)

#define KEY "ferry/segments/prefill-0"

static void fuzz_record(const char *in, size_t n)
{
	struct meta_record r;
	char again[META_VALUE_MAX];

	if (meta_record_decode(in, n, &r) != 0) {
		CHECK(r.addr[0] == 0 && r.n_tx == 0 && r.incarnation == 0);
		return;
	}
	CHECK(r.n_tx >= 1 && r.n_tx <= META_REC_TX_MAX);
	CHECK(meta_record_encode(&r, again, sizeof(again)) == 0);
	CHECK(strlen(again) == n && memcmp(again, in, n) == 0);
	CHECK(meta_value_ok(again, n));
}

static void fuzz_base64(const char *in, size_t n)
{
	uint8_t out[1024];
	char again[1400];
	size_t got = 0;

	if (meta_b64_decode(in, n, out, sizeof(out), &got) != 0)
		return;
	CHECK(got <= sizeof(out) && META_B64_LEN(got) == n);
	CHECK(meta_b64_encode(out, got, again, sizeof(again)) == 0);
	CHECK(memcmp(again, in, n) == 0);
}

static void check_value(int rc, const char *v)
{
	if (rc == 0)
		CHECK(meta_value_ok(v, strlen(v)));
	else
		CHECK(v[0] == '\0');
}

static void fuzz_etcd(const char *in, size_t n)
{
	char v[META_VALUE_MAX], msg[200];
	int64_t id = -1, ttl = -1;
	bool ok;
	int rc, code;

	rc = etcd_parse_grant(in, n, &id, &ttl);
	CHECK(rc == 0 ? id > 0 && ttl > 0 : rc == -EPROTO);
	rc = etcd_parse_keepalive(in, n, 5, &ttl);
	CHECK(rc == 0 ? ttl >= 0 : rc == -EPROTO);
	rc = etcd_parse_range(in, n, KEY, v, sizeof(v));
	CHECK(rc == 0 || rc == -ENOENT || rc == -EPROTO);
	check_value(rc, v);
	rc = etcd_parse_claim(in, n, KEY, &ok, v, sizeof(v));
	CHECK(rc == 0 || rc == -EPROTO);
	check_value(rc == 0 && !ok ? 0 : -1, v);
	rc = etcd_parse_drop(in, n, &ok);
	CHECK(rc == 0 || (rc == -EPROTO && !ok));
	etcd_parse_error(in, n, &code, msg, sizeof(msg));
	CHECK(code >= -1 && code <= 16 && strlen(msg) < sizeof(msg));
	for (const char *p = msg; *p; p++)
		CHECK(*p >= 0x20 && *p <= 0x7e);
}

/* etcd's 64-bit integers (decimal strings): one spelling per value, so an
 * accepted string prints back as itself; a NUL inside ends the string,
 * as in cJSON's valuestring. */
static void fuzz_int64(const char *in, size_t n)
{
	char s[32], again[32];
	int64_t v = -1;

	if (n >= sizeof(s))
		return;
	memcpy(s, in, n);
	s[n] = '\0';
	if (etcd_int64(s, &v) != 0)
		return;
	CHECK(v >= 0);
	snprintf(again, sizeof(again), "%lld", (long long)v);
	CHECK(strcmp(again, s) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;

	fuzz_record(in, size);
	fuzz_base64(in, size);
	fuzz_etcd(in, size);
	fuzz_int64(in, size);
	return 0;
}

static void seed(const char *dir, const char *name, const char *body)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(body, f);
	fclose(f);
}

static void write_seeds(const char *dir)
{
	struct meta_record r = { .addr = "10.0.0.7:7000", .incarnation = 0x0123456789abcdefull,
				 .n_tx = 3, .tx = { "verbs", "tcp", "cma" } };
	char line[META_VALUE_MAX], k[200], v[400], body[2048];

	CHECK(meta_record_encode(&r, line, sizeof(line)) == 0);
	seed(dir, "meta-record", line);
	CHECK(meta_b64_encode(KEY, strlen(KEY), k, sizeof(k)) == 0);
	CHECK(meta_b64_encode(line, strlen(line), v, sizeof(v)) == 0);
	seed(dir, "meta-b64", v);
	snprintf(body, sizeof(body), "{\"header\":{\"revision\":\"2\"},\"kvs\":[{\"key\":\"%s\","
		 "\"create_revision\":\"2\",\"value\":\"%s\",\"lease\":\"5\"}],\"count\":\"1\"}", k, v);
	seed(dir, "meta-range", body);
	snprintf(body, sizeof(body), "{\"header\":{},\"responses\":[{\"response_range\":{\"kvs\":"
		 "[{\"key\":\"%s\",\"value\":\"%s\"}],\"count\":\"1\"}}]}", k, v);
	seed(dir, "meta-claim-failed", body);
	seed(dir, "meta-claim-ok", "{\"succeeded\":true,\"responses\":[{\"response_put\":{}}]}");
	seed(dir, "meta-drop", "{\"succeeded\":true,\"responses\":[{\"response_delete_range\":"
		  "{\"deleted\":\"1\"}}]}");
	seed(dir, "meta-grant", "{\"header\":{},\"ID\":\"7587899322163159302\",\"TTL\":\"10\"}");
	seed(dir, "meta-keepalive", "{\"result\":{\"header\":{},\"ID\":\"5\",\"TTL\":\"10\"}}\n");
	seed(dir, "meta-int64", "9223372036854775807");
	seed(dir, "meta-error", "{\"error\":\"etcdserver: requested lease not found\","
		  "\"message\":\"etcdserver: requested lease not found\",\"code\":5}");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FERRY_FUZZ_SEEDS");

	(void)argc;
	(void)argv;
	if (dir) {
		write_seeds(dir);
		exit(0);
	}
	return 0;
}
