/* SPDX-License-Identifier: MIT */
/*
 * The metadata store (runtime/ctl/meta/): the pure parts first -- strict
 * base64, the published record's grammar, etcd's JSON replies, store URLs
 * -- then each backend against a real server (tests/harness/servers.h):
 * publish/resolve/remove with create-if-absent, a lease that runs out
 * without renewals, renewals that keep it, bad values in the store refused,
 * a silent server timing out, and a server that dies and comes back.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <setjmp.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "runtime/ctl/meta/backend.h"
#include "runtime/ctl/meta/base64.h"
#include "runtime/ctl/meta/etcd_json.h"
#include "runtime/ctl/meta/meta.h"
#include "runtime/ctl/meta/record.h"
#include "tests/harness/pollwatch.h"
#include "tests/harness/servers.h"
#include "tests/harness/wait.h"

#define VAL_A "v1 addr=127.0.0.1:7000 inc=0123456789abcdef tx=loop"
#define VAL_B "v1 addr=127.0.0.1:7001 inc=fedcba9876543210 tx=tcp"
#define T_MS 5000 /* calls' deadline against a live server (generous: a loaded host) */

/* ---- the handle's lock ------------------------------------------------ */

/*
 * The lock calls of this binary pass through here (ferry is linked in from
 * libferry.a) and record the clock their deadline was on: -1 before any.
 */
static clockid_t lock_clock = (clockid_t)-1;

__attribute__((visibility("default"))) int pthread_mutex_clocklock(pthread_mutex_t *mx,
								   clockid_t c,
								   const struct timespec *ts);
int pthread_mutex_clocklock(pthread_mutex_t *mx, clockid_t c, const struct timespec *ts)
{
	int (*real)(pthread_mutex_t *, clockid_t, const struct timespec *);

	*(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_clocklock");
	lock_clock = c;
	return real(mx, c, ts);
}

__attribute__((visibility("default"))) int pthread_mutex_timedlock(pthread_mutex_t *mx,
								   const struct timespec *ts);
int pthread_mutex_timedlock(pthread_mutex_t *mx, const struct timespec *ts)
{
	int (*real)(pthread_mutex_t *, const struct timespec *);

	*(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_timedlock");
	lock_clock = CLOCK_REALTIME;
	return real(mx, ts);
}

/*
 * A call waits for the handle's lock against a monotonic deadline: one on
 * CLOCK_REALTIME would be stretched by a wall-clock step back during the
 * wait.  (ThreadSanitizer builds keep timedlock: meta.c, meta_lock.)
 */
static void test_lock_clock(void **state)
{
	char v[META_VALUE_MAX];
	struct meta *m;

	(void)state;
	assert_int_equal(meta_open("redis://127.0.0.1:1", &m), 0);
	lock_clock = (clockid_t)-1;
	assert_true(meta_resolve(m, "x", v, sizeof(v), 300) < 0); /* refused: nothing listens */
#if defined(__SANITIZE_THREAD__)
	assert_int_equal(lock_clock, CLOCK_REALTIME);
#else
	assert_int_equal(lock_clock, CLOCK_MONOTONIC);
#endif
	meta_close(m);
}

/* ---- base64 ---------------------------------------------------------- */

static void b64_round(const char *plain, const char *enc)
{
	char out[128];
	uint8_t back[128];
	size_t n;

	assert_int_equal(meta_b64_encode(plain, strlen(plain), out, sizeof(out)), 0);
	assert_string_equal(out, enc);
	assert_int_equal(meta_b64_decode(enc, strlen(enc), back, sizeof(back), &n), 0);
	assert_int_equal(n, strlen(plain));
	assert_memory_equal(back, plain, n);
}

static void test_base64(void **state)
{
	static const char *const bad[] = {
		"Zg=", "Zg", "Z===", "====", "Zm9v\n", " Zm9v", "Zm9v====", "Zg==Zm9v", "Zh==",
		"Zm9=", "Zm9vYg=a", "Zm-v", "Zm_v", "Zm9\x80",
	};
	uint8_t out[8];
	char enc[8];
	size_t n;

	(void)state;
	/* RFC 4648 section 10 */
	b64_round("", "");
	b64_round("f", "Zg==");
	b64_round("fo", "Zm8=");
	b64_round("foo", "Zm9v");
	b64_round("foob", "Zm9vYg==");
	b64_round("fooba", "Zm9vYmE=");
	b64_round("foobar", "Zm9vYmFy");
	b64_round("ferry/segments/x", "ZmVycnkvc2VnbWVudHMveA==");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(meta_b64_decode(bad[i], strlen(bad[i]), out, sizeof(out), &n),
				 -EPROTO);
	/* bounded output */
	assert_int_equal(meta_b64_decode("Zm9vYmFy", 8, out, 5, &n), -ENOSPC);
	assert_int_equal(meta_b64_encode("foo", 3, enc, 4), -ENOSPC);
	assert_int_equal(meta_b64_encode("foo", 3, enc, 5), 0);
}

/* ---- the record ------------------------------------------------------ */

static void test_record_roundtrip(void **state)
{
	struct meta_record r = { .addr = "10.1.2.3:7000", .incarnation = 0x0123456789abcdefull,
				 .n_tx = 3, .tx = { "verbs", "tcp", "cma" } };
	struct meta_record back;
	char line[META_VALUE_MAX];

	(void)state;
	assert_int_equal(meta_record_encode(&r, line, sizeof(line)), 0);
	assert_string_equal(line, "v1 addr=10.1.2.3:7000 inc=0123456789abcdef tx=verbs,tcp,cma");
	assert_int_equal(meta_record_decode(line, strlen(line), &back), 0);
	assert_memory_equal(&back, &r, sizeof(r));
	/* what does not follow the grammar is never published */
	strcpy(r.addr, "0.0.0.0:7000");
	assert_int_equal(meta_record_encode(&r, line, sizeof(line)), -EINVAL);
	strcpy(r.addr, "10.1.2.3:7000");
	strcpy(r.tx[1], "verbs");
	assert_int_equal(meta_record_encode(&r, line, sizeof(line)), -EINVAL);
	strcpy(r.tx[1], "tcp");
	assert_int_equal(meta_record_encode(&r, line, 20), -ENOSPC);
}

static void test_record_refused(void **state)
{
	static const char *const bad[] = {
		"",
		"v1",
		"v2 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp",
		"V1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp",
		" v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp ",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp\n",
		"v1  addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp",
		"v1 inc=0123456789abcdef addr=1.2.3.4:5 tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp,",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=,tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp,,cma",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp,tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=TCP",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=verbs-2",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=abcdefghijklmnop",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=a,b,c,d,e,f,g,h,i",
		"v1 addr=1.2.3.4:5 inc=0123456789ABCDEF tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcde tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef0 tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0x23456789abcdef tx=tcp",
		"v1 addr=1.2.3:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4.5:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.256:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.04:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4:0 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4:05 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4:65536 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4: inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4 inc=0123456789abcdef tx=tcp",
		"v1 addr=0.0.0.0:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=host:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=+1.2.3.4:5 inc=0123456789abcdef tx=tcp",
		"v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp;rkey=1",
	};
	struct meta_record r;
	const char nul[] = "v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp\0x";

	(void)state;
	assert_int_equal(meta_record_decode("v1 addr=1.2.3.4:5 inc=0123456789abcdef tx=tcp", 45, &r),
			 0);
	assert_string_equal(r.addr, "1.2.3.4:5");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = meta_record_decode(bad[i], strlen(bad[i]), &r);

		if (rc != -EPROTO)
			fail_msg("accepted: '%s'", bad[i]);
		assert_true(r.addr[0] == 0 && r.n_tx == 0 && r.incarnation == 0);
	}
	assert_int_equal(meta_record_decode(nul, sizeof(nul) - 1, &r), -EPROTO);
	assert_int_equal(meta_record_decode(NULL, 0, &r), -EPROTO);
}

/* ---- etcd's replies -------------------------------------------------- */

#define HDR "\"header\":{\"cluster_id\":\"1\",\"member_id\":\"2\",\"revision\":\"2\",\"raft_term\":\"2\"}"
/* "ferry/segments/x" and VAL_A-like values in base64 */
#define KX "ZmVycnkvc2VnbWVudHMveA=="
#define VH "djEgaGVsbG8=" /* "v1 hello" */

static int parse_range(const char *body, char *v)
{
	return etcd_parse_range(body, strlen(body), "ferry/segments/x", v, META_VALUE_MAX);
}

static void test_etcd_replies(void **state)
{
	char v[META_VALUE_MAX];
	int64_t id, ttl;
	bool ok;
	int code;
	const char *s;

	(void)state;
	s = "{" HDR ",\"ID\":\"7587899322163159302\",\"TTL\":\"2\"}";
	assert_int_equal(etcd_parse_grant(s, strlen(s), &id, &ttl), 0);
	assert_true(id == 7587899322163159302ll && ttl == 2);
	s = "{\"ID\":7587899322163159302,\"TTL\":\"2\"}"; /* a number, not a string */
	assert_int_equal(etcd_parse_grant(s, strlen(s), &id, &ttl), -EPROTO);
	s = "{\"ID\":\"-5\",\"TTL\":\"2\"}";
	assert_int_equal(etcd_parse_grant(s, strlen(s), &id, &ttl), -EPROTO);
	s = "{\"ID\":\"99999999999999999999\",\"TTL\":\"2\"}";
	assert_int_equal(etcd_parse_grant(s, strlen(s), &id, &ttl), -EPROTO);
	s = "{\"ID\":\"5\",\"TTL\":\"2\"} {}";
	assert_int_equal(etcd_parse_grant(s, strlen(s), &id, &ttl), -EPROTO);

	s = "{\"result\":{" HDR ",\"ID\":\"5\",\"TTL\":\"10\"}}\n";
	assert_int_equal(etcd_parse_keepalive(s, strlen(s), 5, &ttl), 0);
	assert_int_equal(ttl, 10);
	s = "{\"result\":{" HDR ",\"ID\":\"5\"}}\n"; /* the lease is gone */
	assert_int_equal(etcd_parse_keepalive(s, strlen(s), 5, &ttl), 0);
	assert_int_equal(ttl, 0);
	assert_int_equal(etcd_parse_keepalive(s, strlen(s), 6, &ttl), -EPROTO);

	assert_int_equal(parse_range("{" HDR ",\"kvs\":[{\"key\":\"" KX "\",\"create_revision\":"
				     "\"2\",\"value\":\"" VH "\",\"lease\":\"5\"}],\"count\":\"1\"}", v), 0);
	assert_string_equal(v, "v1 hello");
	assert_int_equal(parse_range("{" HDR "}", v), -ENOENT);
	/* another key, two kvs, a bad count, a missing value, a value with a newline */
	assert_int_equal(parse_range("{\"kvs\":[{\"key\":\"eHl6\",\"value\":\"" VH "\"}],"
				     "\"count\":\"1\"}", v), -EPROTO);
	assert_int_equal(parse_range("{\"kvs\":[{\"key\":\"" KX "\",\"value\":\"" VH "\"},{\"key\":\""
				     KX "\",\"value\":\"" VH "\"}],\"count\":\"2\"}", v), -EPROTO);
	assert_int_equal(parse_range("{\"kvs\":[{\"key\":\"" KX "\",\"value\":\"" VH "\"}],"
				     "\"count\":\"3\"}", v), -EPROTO);
	assert_int_equal(parse_range("{\"kvs\":[{\"key\":\"" KX "\"}],\"count\":\"1\"}", v), -EPROTO);
	assert_int_equal(parse_range("{\"kvs\":[{\"key\":\"" KX "\",\"value\":\"djEKaA==\"}],"
				     "\"count\":\"1\"}", v), -EPROTO);
	assert_int_equal(parse_range("{\"kvs\":{},\"count\":\"1\"}", v), -EPROTO);
	assert_int_equal(parse_range("[]", v), -EPROTO);
	assert_int_equal(parse_range("", v), -EPROTO);
	assert_int_equal(parse_range("{\"count\":\"1\"}", v), -EPROTO);

	s = "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":{}}}]}";
	assert_int_equal(etcd_parse_claim(s, strlen(s), "ferry/segments/x", &ok, v, sizeof(v)), 0);
	assert_true(ok);
	s = "{" HDR ",\"responses\":[{\"response_range\":{\"kvs\":[{\"key\":\"" KX "\",\"value\":\""
	    VH "\"}],\"count\":\"1\"}}]}";
	assert_int_equal(etcd_parse_claim(s, strlen(s), "ferry/segments/x", &ok, v, sizeof(v)), 0);
	assert_false(ok);
	assert_string_equal(v, "v1 hello");
	s = "{\"succeeded\":\"true\",\"responses\":[{\"response_put\":{}}]}";
	assert_int_equal(etcd_parse_claim(s, strlen(s), "ferry/segments/x", &ok, v, sizeof(v)),
			 -EPROTO);
	s = "{\"responses\":[{\"response_range\":{}}]}"; /* it existed at the compare */
	assert_int_equal(etcd_parse_claim(s, strlen(s), "ferry/segments/x", &ok, v, sizeof(v)),
			 -EPROTO);

	s = "{\"succeeded\":true,\"responses\":[{\"response_delete_range\":{\"deleted\":\"1\"}}]}";
	assert_int_equal(etcd_parse_drop(s, strlen(s), &ok), 0);
	assert_true(ok);
	s = "{" HDR "}";
	assert_int_equal(etcd_parse_drop(s, strlen(s), &ok), 0);
	assert_false(ok);

	s = "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver: "
	    "requested lease not found\",\"code\":5}";
	etcd_parse_error(s, strlen(s), &code, v, sizeof(v));
	assert_int_equal(code, 5);
	assert_string_equal(v, "etcdserver: requested lease not found");
	etcd_parse_error("<html>", 6, &code, v, sizeof(v));
	assert_int_equal(code, -1);
}

/* ---- URLs and arguments ---------------------------------------------- */

static void test_urls(void **state)
{
	static const char *const bad[] = {
		"", "p2p", "redis://", "redis://:6379", "redis://h", "redis://h:", "redis://h:0",
		"redis://h:65536", "redis://h:06379", "redis://h:6379/", "redis://h:6379 ",
		"redis://user@h:6379", "http://h:2379", "etcd:/h:2379", "etcd://[::1]:2379",
		"etcd://h_x:2379", "Redis://h:6379",
	};
	struct meta *m;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (meta_open(bad[i], &m) != -EINVAL)
			fail_msg("accepted: '%s'", bad[i]);
	assert_int_equal(meta_open("redis://127.0.0.1:6379", &m), 0);
	assert_string_equal(meta_url(m), "redis://127.0.0.1:6379");
	meta_close(m);
	assert_int_equal(meta_open("etcd://localhost:2379", &m), 0); /* resolved once, here */
	meta_close(m);
	assert_int_equal(meta_open("etcd://no-such-host.invalid:2379", &m), -EHOSTUNREACH);
}

/* ---- against the servers --------------------------------------------- */

struct fixture {
	enum test_server_kind kind;
	struct test_server srv;
	int start_rc;
};

static struct fixture fx_redis = { .kind = SERVER_REDIS };
static struct fixture fx_etcd = { .kind = SERVER_ETCD };

static int group_setup(void **state)
{
	(void)state;
	fx_redis.start_rc = server_start(&fx_redis.srv, SERVER_REDIS);
	fx_etcd.start_rc = server_start(&fx_etcd.srv, SERVER_ETCD);
	fx_redis.srv.kind = SERVER_REDIS;
	fx_etcd.srv.kind = SERVER_ETCD;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	server_stop(&fx_redis.srv);
	server_stop(&fx_etcd.srv);
	return 0;
}

/* The fixture's server is up (or the test is skipped); a handle on it. */
static struct meta *fx_open(void **state, struct fixture **out)
{
	struct fixture *f = *state;
	struct meta *m;

	SERVERS_REQUIRE(&f->srv, f->start_rc);
	if (!f->srv.pid) /* an earlier test failed while the server was down */
		assert_int_equal(server_restart(&f->srv), 0);
	assert_int_equal(meta_open(f->srv.url, &m), 0);
	*out = f;
	return m;
}

static void test_publish_resolve_remove(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f), *m2;
	char v[META_VALUE_MAX];

	assert_int_equal(meta_open(f->srv.url, &m2), 0);
	assert_int_equal(meta_resolve(m, "prr", v, sizeof(v), T_MS), -ENOENT);
	assert_int_equal(meta_publish(m, "prr", VAL_A, 10000, T_MS), 0);
	assert_int_equal(meta_resolve(m2, "prr", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	/* create-if-absent: another value is refused, the same one taken over */
	assert_int_equal(meta_publish(m2, "prr", VAL_B, 10000, T_MS), -EEXIST);
	assert_int_equal(meta_resolve(m2, "prr", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	assert_int_equal(meta_publish(m, "other", VAL_A, 10000, T_MS), -EBUSY); /* one per handle */
	/* remove is a compare-and-delete: a successor's record stays */
	assert_int_equal(meta_remove(m2, "prr", T_MS), -ENOENT); /* m2 published nothing */
	assert_int_equal(meta_publish(m2, "prr", VAL_A, 10000, T_MS), 0);
	assert_int_equal(meta_remove(m2, "prr", T_MS), 0);
	assert_int_equal(meta_resolve(m, "prr", v, sizeof(v), T_MS), -ENOENT);
	assert_int_equal(meta_publish(m2, "prr", VAL_B, 10000, T_MS), 0);
	assert_int_equal(meta_remove(m, "prr", T_MS), -ENOENT); /* not our value any more */
	assert_int_equal(meta_resolve(m, "prr", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_B);
	assert_int_equal(meta_keepalive(m, T_MS), -ENOENT); /* m forgot it */
	assert_int_equal(meta_remove(m2, "prr", T_MS), 0);
	/* arguments */
	assert_int_equal(meta_resolve(m, "a/b", v, sizeof(v), T_MS), -EINVAL);
	assert_int_equal(meta_resolve(m, "a", v, 16, T_MS), -EINVAL);
	assert_int_equal(meta_publish(m, "x:1", VAL_A, 10000, T_MS), -EINVAL);
	assert_int_equal(meta_publish(m, "x", "two\nlines", 10000, T_MS), -EINVAL);
	assert_int_equal(meta_publish(m, "x", "", 10000, T_MS), -EINVAL);
	meta_close(m);
	meta_close(m2);
}

static void test_lease_expires(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f);
	char v[META_VALUE_MAX];
	int64_t t0 = wait_now_ms();

	/* 1 s (etcd grants its minimum, ~2 s), never renewed */
	assert_int_equal(meta_publish(m, "expiring", VAL_A, 1000, T_MS), 0);
	WAIT_UNTIL(meta_resolve(m, "expiring", v, sizeof(v), T_MS) == -ENOENT, 20000,
		   "the record of a lease nobody renews to expire");
	print_message("%s: a 1 s lease expired after %lld ms\n", f->srv.url,
		      (long long)(wait_now_ms() - t0));
	/* the next renewal finds it gone and publishes it again */
	assert_int_equal(meta_keepalive(m, T_MS), 1);
	assert_int_equal(meta_resolve(m, "expiring", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	assert_int_equal(meta_remove(m, "expiring", T_MS), 0);
	meta_close(m);
}

/* POST body to the test etcd's path; the reply in out. */
static void etcd_raw(struct fixture *f, const char *path, const char *body, char *out, size_t cap)
{
	char url[96];
	FILE *mem = fmemopen(out, cap, "w");
	CURL *h = curl_easy_init();
	long status = 0;

	assert_non_null(mem);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", f->srv.port, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, mem);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	assert_int_equal(status, 200);
	curl_easy_cleanup(h);
	fclose(mem);
}

/* What the server says is left of the record's lease, in ms (etcd counts
 * whole seconds). */
static int64_t lease_left_ms(struct fixture *f, struct meta *m, const char *key)
{
	char body[128], out[1024];
	const char *ttl;

	if (f->kind == SERVER_REDIS) {
		redisContext *c = redisConnect("127.0.0.1", f->srv.port);
		redisReply *r;
		int64_t left;

		assert_true(c && !c->err);
		r = redisCommand(c, "PTTL %s", key);
		assert_true(r && r->type == REDIS_REPLY_INTEGER);
		left = r->integer;
		freeReplyObject(r);
		redisFree(c);
		return left;
	}
	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)m->pub.lease);
	etcd_raw(f, "/v3/lease/timetolive", body, out, sizeof(out));
	ttl = strstr(out, "\"TTL\":\"");
	assert_non_null(ttl);
	return strtoll(ttl + 7, NULL, 10) * 1000;
}

static void test_keepalive_keeps(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f);
	char v[META_VALUE_MAX];
	int64_t before;

	assert_int_equal(meta_publish(m, "kept", VAL_A, 10000, T_MS), 0);
	/* the lease runs down (looked at every 50 ms)... */
	WAIT_UNTIL((nanosleep(&(struct timespec){ 0, 50000000 }, NULL),
		    before = lease_left_ms(f, m, "ferry/segments/kept")) <= 8000, 20000,
		   "the lease to run down by 2 s");
	assert_true(before > 0);
	/* ...and a renewal winds it up again: the record is kept, not re-made */
	assert_int_equal(meta_keepalive(m, T_MS), 0);
	assert_true(lease_left_ms(f, m, "ferry/segments/kept") >= 9000);
	assert_int_equal(meta_resolve(m, "kept", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	assert_int_equal(meta_remove(m, "kept", T_MS), 0);
	meta_close(m);
}

/* Write raw bytes under ferry/segments/<name>, past ferry's checks. */
static void raw_put(struct fixture *f, const char *name, const char *val, size_t len)
{
	char key[META_KEY_MAX], body[ETCD_REQ_MAX], k64[200], v64[1600];

	snprintf(key, sizeof(key), "ferry/segments/%s", name);
	if (f->kind == SERVER_REDIS) {
		redisContext *c = redisConnect("127.0.0.1", f->srv.port);
		redisReply *r;

		assert_true(c && !c->err);
		r = redisCommand(c, "SET %s %b", key, val, len);
		assert_true(r && r->type == REDIS_REPLY_STATUS);
		freeReplyObject(r);
		redisFree(c);
	} else {
		char out[1024];

		assert_int_equal(meta_b64_encode(key, strlen(key), k64, sizeof(k64)), 0);
		assert_int_equal(meta_b64_encode(val, len, v64, sizeof(v64)), 0);
		snprintf(body, sizeof(body), "{\"key\":\"%s\",\"value\":\"%s\"}", k64, v64);
		etcd_raw(f, "/v3/kv/put", body, out, sizeof(out));
	}
}

static void test_bad_values(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f);
	char v[META_VALUE_MAX], big[400];
	struct meta_record r;

	memset(big, 'a', sizeof(big));
	raw_put(f, "bad-long", big, sizeof(big));
	raw_put(f, "bad-ctl", "v1 \x01", 4);
	raw_put(f, "bad-nul", "v1\0abc", 6);
	raw_put(f, "bad-empty", "", 0);
	raw_put(f, "bad-high", "v1 \xc3\xa9", 5);
	raw_put(f, "bad-record", "v1 addr=1.2.3.4:5 inc=0123 tx=tcp", 33);
	assert_int_equal(meta_resolve(m, "bad-long", v, sizeof(v), T_MS), -EPROTO);
	assert_string_equal(v, "");
	assert_int_equal(meta_resolve(m, "bad-ctl", v, sizeof(v), T_MS), -EPROTO);
	assert_int_equal(meta_resolve(m, "bad-nul", v, sizeof(v), T_MS), -EPROTO);
	assert_int_equal(meta_resolve(m, "bad-empty", v, sizeof(v), T_MS), -EPROTO);
	assert_int_equal(meta_resolve(m, "bad-high", v, sizeof(v), T_MS), -EPROTO);
	/* a printable value this layer returns; the record's grammar refuses it */
	assert_int_equal(meta_resolve(m, "bad-record", v, sizeof(v), T_MS), 0);
	assert_int_equal(meta_record_decode(v, strlen(v), &r), -EPROTO);
	/* the handle still works */
	assert_int_equal(meta_resolve(m, "bad-none", v, sizeof(v), T_MS), -ENOENT);
	meta_close(m);
}

/* A server that accepts connections and never answers: calls end at their deadline. */
static void test_silent_server(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	char url[64], v[META_VALUE_MAX];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct meta *m;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%u", f->kind == SERVER_REDIS ? "redis" : "etcd",
		 ntohs(a.sin_port));
	assert_int_equal(meta_open(url, &m), 0);
	/* bounded by the deadlines: no wait longer than 300 ms, one ran out */
	poll_watch();
	assert_int_equal(meta_resolve(m, "x", v, sizeof(v), 300), -ETIMEDOUT);
	poll_check_timed_out(300);
	/* A publish that timed out takes its claim back (it may have been
	 * executed) under a deadline of its own: 500 ms (redis.c
	 * REDIS_UNDO_MS, etcd.c ETCD_UNDO_MS), so its waits keep to that
	 * (meta.h: publish may block timeout_ms + 500 ms). */
	poll_watch();
	assert_int_equal(meta_publish(m, "x", VAL_A, 10000, 300), -ETIMEDOUT);
	poll_check_timed_out(500);
	meta_close(m);
	close(fd);
}

static void test_server_down_and_back(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f), *m2;
	char v[META_VALUE_MAX];
	int rc, max_ms, ran_out;

	assert_int_equal(meta_open(f->srv.url, &m2), 0);
	assert_int_equal(meta_publish(m, "downup", VAL_A, 10000, T_MS), 0);
	assert_int_equal(meta_resolve(m2, "downup", v, sizeof(v), T_MS), 0);
	server_kill(&f->srv, SIGKILL);
	poll_watch();
	rc = meta_resolve(m2, "downup", v, sizeof(v), T_MS);
	assert_true(rc == -ECONNREFUSED || rc == -ECONNRESET);
	rc = meta_keepalive(m, T_MS);
	assert_true(rc == -ECONNREFUSED || rc == -ECONNRESET);
	rc = meta_resolve(m2, "downup", v, sizeof(v), T_MS);
	assert_int_equal(rc, -ECONNREFUSED); /* now no connection is left to reset */
	/* Each failed on the refusal: none waited a deadline out. */
	poll_watched(&max_ms, &ran_out);
	assert_int_equal(ran_out, 0);
	assert_int_equal(server_restart(&f->srv), 0);
	/* Redis (no persistence) lost the record: the renewal publishes it again
	 * (1); etcd kept it and its lease (0).  Either way it resolves again. */
	rc = meta_keepalive(m, T_MS);
	assert_int_equal(rc, f->kind == SERVER_REDIS ? 1 : 0);
	assert_int_equal(meta_resolve(m2, "downup", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	assert_int_equal(meta_remove(m, "downup", T_MS), 0);
	meta_close(m);
	meta_close(m2);
}

/* Delete ferry/segments/<name> past ferry (an operator's redis-cli DEL or
 * etcdctl del). */
static void raw_del(struct fixture *f, const char *name)
{
	char key[META_KEY_MAX], body[ETCD_REQ_MAX], k64[200], out[1024];

	snprintf(key, sizeof(key), "ferry/segments/%s", name);
	if (f->kind == SERVER_REDIS) {
		redisContext *c = redisConnect("127.0.0.1", f->srv.port);
		redisReply *r;

		assert_true(c && !c->err);
		r = redisCommand(c, "DEL %s", key);
		assert_true(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
		freeReplyObject(r);
		redisFree(c);
		return;
	}
	assert_int_equal(meta_b64_encode(key, strlen(key), k64, sizeof(k64)), 0);
	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k64);
	etcd_raw(f, "/v3/kv/deleterange", body, out, sizeof(out));
	assert_non_null(strstr(out, "\"deleted\":\"1\""));
}

/*
 * The record deleted behind the publisher's back while its lease lives:
 * the next renewal publishes it again (1), on both stores.  Before, etcd
 * renewed the lease only: it answered 0 ("renewed") for a record that was
 * gone, and the name stayed unresolvable as long as the engine lived,
 * where Redis's renewal made it again.
 */
static void test_record_deleted(void **state)
{
	struct fixture *f;
	struct meta *m = fx_open(state, &f);
	char v[META_VALUE_MAX];
	int rc;

	assert_int_equal(meta_publish(m, "deleted", VAL_A, 10000, T_MS), 0);
	raw_del(f, "deleted");
	assert_int_equal(meta_resolve(m, "deleted", v, sizeof(v), T_MS), -ENOENT);
	rc = meta_keepalive(m, T_MS);
	print_message("%s: a renewal after the record was deleted: %d\n", f->srv.url, rc);
	assert_int_equal(rc, 1);
	assert_int_equal(meta_resolve(m, "deleted", v, sizeof(v), T_MS), 0);
	assert_string_equal(v, VAL_A);
	/* and the next one finds it in place */
	assert_int_equal(meta_keepalive(m, T_MS), 0);
	assert_int_equal(meta_remove(m, "deleted", T_MS), 0);
	meta_close(m);
}

/* Each server test twice, named after its backend. */
#define BOTH(t) { "redis_" #t, t, NULL, NULL, &fx_redis }, { "etcd_" #t, t, NULL, NULL, &fx_etcd }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_record_roundtrip),
		cmocka_unit_test(test_record_refused),
		cmocka_unit_test(test_etcd_replies),
		cmocka_unit_test(test_urls),
		cmocka_unit_test(test_lock_clock),
		BOTH(test_publish_resolve_remove),
		BOTH(test_lease_expires),
		BOTH(test_keepalive_keeps),
		BOTH(test_bad_values),
		BOTH(test_silent_server),
		BOTH(test_server_down_and_back),
		BOTH(test_record_deleted),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
