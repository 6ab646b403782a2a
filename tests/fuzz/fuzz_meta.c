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
 * An input that starts like a RESP reply (one of "+-:$*%~>_,#=(!|") or an
 * HTTP response ("HTTP/") is also what a store answers, live: a thread of
 * this process plays the store on loopback and answers every request
 * with the input, then its half close; the Redis backend (redis.c, over
 * hiredis) or etcd's (etcd.c, over libcurl) resolves, publishes, keeps
 * alive and removes through it.  Each call returns an
 * errno meta.h lists, never -ETIMEDOUT (every byte was there, then the
 * end; unless etcd's reply says so, codes 4 and 14), and a value only as
 * 1..META_VALUE_MAX-1 printable bytes.
 *
 * With FERRY_FUZZ_SEEDS=<dir> the target writes a few valid inputs into
 * <dir> and exits (built from the encoders, so they follow the format).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "runtime/ctl/meta/base64.h"
#include "runtime/ctl/meta/etcd_json.h"
#include "runtime/ctl/meta/meta.h"
#include "runtime/ctl/meta/record.h"

#include "tests/fuzz/fuzz.h"

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

/* ---- a Redis store that answers with the input -------------------------- */

static struct {
	int lfd;
	char url[64];
	pthread_mutex_t lock;
	uint8_t reply[8192]; /* the current input (lock): a copy, since a late */
	size_t len;          /* connection may be served after the input ended */
	struct meta *m, *etcd; /* redis://, etcd:// at the same thread */
} store = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Answer the connection's first request with the reply, then EOF. */
static void store_serve(int fd)
{
	static uint8_t reply[sizeof(store.reply)];
	struct timeval tv = { .tv_sec = 2 };
	char sink[4096];
	size_t len;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (recv(fd, sink, sizeof(sink), 0) <= 0)
		return;
	pthread_mutex_lock(&store.lock);
	len = store.len;
	memcpy(reply, store.reply, len);
	pthread_mutex_unlock(&store.lock);
	(void)!send(fd, reply, len, MSG_NOSIGNAL);
	shutdown(fd, SHUT_WR);
}

/* A connection is closed when the next one comes: by then its client is
 * done with it (closed at once, bytes it sent that were not read could
 * reset it before the reply is read; and a client may keep it, idle,
 * until its next call, so waiting for its close would hold that call). */
static void *store_main(void *arg)
{
	int prev = -1;

	(void)arg;
	for (;;) {
		int fd = accept(store.lfd, NULL, NULL);

		if (fd < 0)
			continue;
		if (prev >= 0)
			close(prev);
		store_serve(fd);
		prev = fd;
	}
	return NULL;
}

static void store_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	pthread_t th;

	store.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(store.lfd >= 0 && bind(store.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(store.lfd, 16) == 0);
	CHECK(getsockname(store.lfd, (struct sockaddr *)&a, &alen) == 0);
	snprintf(store.url, sizeof(store.url), "redis://127.0.0.1:%u", ntohs(a.sin_port));
	CHECK(pthread_create(&th, NULL, store_main, NULL) == 0);
	CHECK(meta_open(store.url, &store.m) == 0);
	snprintf(store.url, sizeof(store.url), "etcd://127.0.0.1:%u", ntohs(a.sin_port));
	CHECK(meta_open(store.url, &store.etcd) == 0);
}

/* What meta.h says a call may return, with the store there and quick. */
/* A call's timeout: the store answers at once; this is only slack for a
 * loaded host, since a call that times out fails the check. */
#define CALL_MS 5000

static bool etcd_said; /* etcd's own codes 4 and 14 say -ETIMEDOUT */

static void check_call(const char *what, int rc)
{
	/* -EIO: libcurl's other failures (a body cut short, a bad status line) */
	if (rc == 0 || rc == 1 || rc == -ENOENT || rc == -EEXIST || rc == -EPROTO ||
	    rc == -EACCES || rc == -ECONNRESET || rc == -ENOMEM || rc == -EIO ||
	    (rc == -ETIMEDOUT && etcd_said))
		return;
	printf("%s: %d\n", what, rc); /* stdout: stderr is closed */
	fflush(stdout);
	abort();
}

/* Every call of the store's interface, each answered with the input. */
static void store_calls(struct meta *m)
{
	char v[META_VALUE_MAX];
	int rc;

	memset(v, 0x55, sizeof(v));
	rc = meta_resolve(m, "prefill-0", v, sizeof(v), CALL_MS);
	check_call("resolve", rc);
	if (rc == 0)
		CHECK(meta_value_ok(v, strlen(v)));
	rc = meta_publish(m, "prefill-0", "v1 addr=127.0.0.1:7000", 5000, CALL_MS);
	check_call("publish", rc);
	if (rc)
		return;
	check_call("keepalive", meta_keepalive(m, CALL_MS));
	check_call("remove", meta_remove(m, "prefill-0", CALL_MS));
}

/* A RESP reply to the Redis backend, an HTTP response to etcd's. */
static void fuzz_store(const uint8_t *in, size_t n)
{
	bool redis = n && memchr("+-:$*%~>_,#=(!|", in[0], 15);
	bool http = n > 5 && !memcmp(in, "HTTP/", 5);

	if (n > sizeof(store.reply) || (!redis && !http))
		return;
	if (!store.m)
		store_start();
	pthread_mutex_lock(&store.lock);
	memcpy(store.reply, in, n);
	store.len = n;
	pthread_mutex_unlock(&store.lock);
	etcd_said = http;
	store_calls(redis ? store.m : store.etcd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;

	fuzz_record(in, size);
	fuzz_base64(in, size);
	fuzz_etcd(in, size);
	fuzz_int64(in, size);
	fuzz_store(data, size);
	return 0;
}

static void seed(const char *dir, const char *name, const char *body)
{
	fuzz_seed_write(dir, name, NULL, 0, body, strlen(body));
}

/* A seed with NULs in it. */
static void seed_bytes(const char *dir, const char *name, const char *b, size_t n)
{
	fuzz_seed_write(dir, name, NULL, 0, b, n);
}

static void write_seeds(const char *dir)
{
	/* After another reply, a folded first header: libcurl 7.88 read
	 * freed memory before etcd.c took a handle per request. */
	static const char folded[] = "HTTP/1.1 200\rKOC\n ontNOAUAUTHed.\rnticaent-Type: app 13\r\n"
				     "\xd4\r\n{\"count\":\"\0\0[\"}";

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
	seed(dir, "redis-value", "$22\r\nv1 addr=127.0.0.1:7000\r\n");
	seed(dir, "redis-int", ":1\r\n");
	seed(dir, "redis-nil", "$-1\r\n");
	seed(dir, "redis-error", "-NOAUTH Authentication required.\r\n");
	seed(dir, "http-range", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		  "Content-Length: 13\r\n\r\n{\"count\":\"0\"}");
	seed(dir, "http-error", "HTTP/1.1 404 Not Found\r\nContent-Length: 64\r\n\r\n"
		  "{\"error\":\"lease not found\",\"message\":\"lease not found\",\"code\":5}");
	seed_bytes(dir, "http-folded", folded, sizeof(folded) - 1);
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
