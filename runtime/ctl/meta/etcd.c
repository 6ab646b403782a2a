/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: etcd v3.4's JSON gateway (grpc-gateway) over HTTP/1.1
 * with libcurl: an easy handle per request, the connection kept between
 * calls while they end cleanly (etcd_handle).  Bodies are built and
 * parsed in etcd_json.c.
 *
 * A name is a key attached to a lease: publishing grants a lease of the
 * TTL and puts the key with it in a transaction that only creates
 * (compare create_revision == 0), so a name held by another engine is
 * refused, never overwritten; keepalive renews the lease
 * (/v3/lease/keepalive, one message per request) and makes sure the key is
 * still there (the same transaction: it may have been deleted past us);
 * when etcd says the lease is gone (it ran out while we could not reach
 * the store), a new one is granted and the key created again the same way.  Removing deletes the key
 * only if it still holds our value (a compare-and-delete transaction) and
 * revokes the lease.
 *
 * Deadlines: CURLOPT_TIMEOUT_MS and CURLOPT_CONNECTTIMEOUT_MS are the time
 * left, per request; a call of several requests stops at its deadline.
 * libcurl is set up once per process (curl_global_init, never cleaned up:
 * the application may use curl too) and used with CURLOPT_NOSIGNAL, as
 * threads require; the host is the numeric address meta_open resolved, so
 * no request waits on DNS.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "ring/base/fd.h"
#include "ring/base/log.h"
#include "runtime/ctl/meta/backend.h"
#include "runtime/ctl/meta/etcd_json.h"
#include "runtime/ctl/sock.h"

/* A failed claim's clean-up: at most this long (engine create waits it). */
#define ETCD_UNDO_MS 500

struct etcd_conn {
	CURL *h;
	CURLSH *share;                 /* its connection cache: the kept connection */
	struct curl_slist *headers;
	char base[96];                 /* "http://a.b.c.d:port" */
	char *resp;                    /* ETCD_BODY_MAX bytes */
	size_t len;
	bool overflow;                 /* the reply did not fit: refused */
	char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t etcd_write(char *p, size_t size, size_t n, void *arg)
{
	struct etcd_conn *c = arg;
	size_t bytes = size * n;

	if (bytes >= ETCD_BODY_MAX - c->len) {
		c->overflow = true;
		return 0; /* CURLE_WRITE_ERROR: the transfer stops */
	}
	memcpy(c->resp + c->len, p, bytes);
	c->len += bytes;
	c->resp[c->len] = '\0';
	return bytes;
}

/* A failed transfer as an errno. */
static int curl_errno(struct meta *m, struct etcd_conn *c, CURLcode cc)
{
	long os = 0;

	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(c->h, CURLINFO_OS_ERRNO, &os);
		return os == EHOSTUNREACH || os == ENETUNREACH || os == ETIMEDOUT ? -(int)os
										  : -ECONNREFUSED;
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		return -ECONNRESET;
	case CURLE_WRITE_ERROR:
		if (c->overflow) {
			meta_log(m, "a reply of more than %d bytes: refused", ETCD_BODY_MAX - 1);
			return -EPROTO;
		}
		return -EIO;
	default:
		meta_log(m, "curl: %s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
		return -EIO;
	}
}

/* An HTTP error answer as an errno: the gateway's gRPC code. */
static int http_errno(struct meta *m, struct etcd_conn *c, const char *path, long status)
{
	char msg[200];
	int code;

	etcd_parse_error(c->resp, c->len, &code, msg, sizeof(msg));
	switch (code) {
	case 5: /* NotFound: a lease */
		return -ENOENT;
	case 7:  /* PermissionDenied */
	case 16: /* Unauthenticated */
		meta_log(m, "%s: refused (HTTP %ld): %s", path, status, msg);
		return -EACCES;
	case 4: /* DeadlineExceeded */
		return -ETIMEDOUT;
	case 14: /* Unavailable: no leader, request timed out, stopping */
		/* The store did not answer: meta.h's error for that (callers
		 * expect no other), quiet as a store that is down. */
		return -ETIMEDOUT;
	default:
		meta_log(m, "%s: HTTP %ld: %s", path, status, msg);
		return -EPROTO;
	}
}

/*
 * Close the kept connection: after anything but a clean answer (a curl
 * error, an HTTP error, a body that does not parse), so that whatever the
 * store left on it cannot answer the next call.  A new share, with an
 * empty connection cache; NULL if that fails (requests then go without).
 */
static void etcd_forget(struct etcd_conn *c)
{
	if (c->h)
		curl_easy_cleanup(c->h); /* detached from the share before it goes */
	c->h = NULL;
	if (c->share)
		curl_share_cleanup(c->share); /* closes the cached connections */
	c->share = curl_share_init();
	if (c->share &&
	    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK) {
		curl_share_cleanup(c->share);
		c->share = NULL;
	}
}

/*
 * A curl easy handle of its own for each request (the previous one
 * closed): with libcurl 7.88, a reply whose first header line is folded
 * (obs-fold), after another reply on the same handle, is unfolded onto
 * what that reply left in the handle, freed by then -- a store, or
 * anything on the path to it, could make us read freed memory (ASan,
 * found by fuzz_meta; curl_easy_reset does not help).  That state is the
 * easy handle's, not the connection's: the connection is kept between
 * requests in the share's connection cache (used under m->lock, one
 * request at a time: no lock callbacks), once etcd_check_idle found it
 * idle; a reply with bytes past its end in the same read makes curl
 * close it itself.
 */
/*
 * curl's sockets close-on-exec, as every fd of ferry's (SOCK_CLOEXEC):
 * the connection is kept between calls, and one inherited by a program the
 * application execs (a worker started by spawn) stayed open at the store
 * after we closed it.  Atomic with the socket: another thread's fork and
 * exec cannot come between.
 */
static curl_socket_t etcd_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	(void)arg;
	(void)purpose;
	return fd_track(socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol));
}

/* And closed through sock_close, unmarked first (fd.h): a forked child
 * closes what is marked, and the kept connection is ours, not the child's. */
static int etcd_close_socket(void *arg, curl_socket_t fd)
{
	(void)arg;
	sock_close(fd);
	return 0;
}

static int etcd_handle(struct etcd_conn *c)
{
	if (c->h)
		curl_easy_cleanup(c->h);
	c->h = curl_easy_init();
	if (!c->h)
		return -ENOMEM;
	if (c->share)
		curl_easy_setopt(c->h, CURLOPT_SHARE, c->share);
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->h, CURLOPT_OPENSOCKETFUNCTION, etcd_socket);
	curl_easy_setopt(c->h, CURLOPT_CLOSESOCKETFUNCTION, etcd_close_socket);
	/* the store itself: never a proxy named by http_proxy/ALL_PROXY */
	curl_easy_setopt(c->h, CURLOPT_PROXY, "");
	curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(c->h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
	curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, etcd_write);
	curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
	return 0;
}

/*
 * The kept connection, if any, must be idle with nothing waiting: bytes
 * after a clean reply (a late second answer, or the store's EOF) are
 * not the next request's answer.  libcurl 7.88 reuses a connection with
 * input pending and reads it as the next reply (test_meta_hostile
 * test_etcd_connection_reused): closed here instead.  What is still
 * in flight when we look would ride on the next request, as with Redis;
 * a store that lies that way could as well lie in its answer.
 */
static void etcd_check_idle(struct etcd_conn *c)
{
	curl_socket_t fd = CURL_SOCKET_BAD;
	struct pollfd p;

	if (!c->h || curl_easy_getinfo(c->h, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
	    fd == CURL_SOCKET_BAD)
		return; /* none kept (curl closed it, or the last request failed) */
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(&p, 1, 0) != 0)
		etcd_forget(c);
}

/* POST body to path; 0 with the reply in c->resp/c->len (HTTP 200), or -errno. */
static int etcd_post(struct meta *m, const char *path, const char *body, int64_t deadline)
{
	struct etcd_conn *c = m->conn;
	int left = meta_left_ms(deadline);
	char url[160];
	long status = 0;
	CURLcode cc;
	int rc;

	if (left == 0)
		return -ETIMEDOUT;
	snprintf(url, sizeof(url), "%s%s", c->base, path);
	etcd_check_idle(c);
	if (etcd_handle(c))
		return -ENOMEM;
	c->len = 0;
	c->resp[0] = '\0';
	c->overflow = false;
	c->errbuf[0] = '\0';
	curl_easy_setopt(c->h, CURLOPT_URL, url);
	curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, (long)left);
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, (long)left);
	cc = curl_easy_perform(c->h);
	if (cc != CURLE_OK) {
		rc = curl_errno(m, c, cc); /* (reads c->h) */
		etcd_forget(c);
		return rc;
	}
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200)
		return 0;
	rc = http_errno(m, c, path, status);
	etcd_forget(c);
	return rc;
}

/* A 200 reply whose body ferry refuses: said, and its connection closed. */
static void etcd_refuse(struct meta *m, const char *what)
{
	meta_log(m, "%s", what);
	etcd_forget(m->conn);
}

static int etcd_grant(struct meta *m, int64_t deadline, int64_t *id)
{
	struct etcd_conn *c = m->conn;
	/* ceil in 64 bits: ttl_ms + 999 may not fit in 32 */
	uint32_t ttl_s = (uint32_t)(((uint64_t)m->pub.ttl_ms + 999) / 1000);
	char body[ETCD_REQ_MAX];
	int64_t ttl;
	int rc = etcd_body_grant(body, sizeof(body), ttl_s);

	if (rc == 0)
		rc = etcd_post(m, "/v3/lease/grant", body, deadline);
	if (rc == 0 && (rc = etcd_parse_grant(c->resp, c->len, id, &ttl)))
		etcd_refuse(m, "/v3/lease/grant: a reply without a valid ID and TTL");
	return rc;
}

static void etcd_revoke(struct meta *m, int64_t id, int64_t deadline)
{
	char body[ETCD_REQ_MAX];

	if (id > 0 && etcd_body_lease(body, sizeof(body), id) == 0)
		(void)etcd_post(m, "/v3/lease/revoke", body, deadline); /* ENOENT: gone already */
}

/*
 * The claim's transaction with lease id: create the key if it is absent
 * (1), else say who holds it: 0 our value, -EEXIST another.  Or -errno.
 */
static int etcd_claim_txn(struct meta *m, int64_t id, int64_t deadline)
{
	struct etcd_conn *c = m->conn;
	char body[ETCD_REQ_MAX], holder[META_VALUE_MAX];
	bool ok = false;
	int rc = etcd_body_claim(body, sizeof(body), m->pub.key, m->pub.value, id);

	if (rc == 0)
		rc = etcd_post(m, "/v3/kv/txn", body, deadline);
	if (rc == 0 && (rc = etcd_parse_claim(c->resp, c->len, m->pub.key, &ok, holder,
					      sizeof(holder))))
		etcd_refuse(m, "/v3/kv/txn: a reply that is not the transaction's");
	if (rc)
		return rc;
	if (ok)
		return 1;
	return strcmp(holder, m->pub.value) == 0 ? 0 : -EEXIST;
}

/*
 * Create the key with a new lease if it is absent; take it over if it
 * holds our value already; else -EEXIST.  The lease goes to m->pub.lease.
 */
static int etcd_claim(struct meta *m, int64_t deadline)
{
	char body[ETCD_REQ_MAX];
	int64_t id = 0;
	int rc = etcd_grant(m, deadline, &id);

	if (rc == 0)
		rc = etcd_claim_txn(m, id, deadline);
	if (rc == 0) { /* ours already (a retried publish): attach it to the new lease */
		rc = etcd_body_put(body, sizeof(body), m->pub.key, m->pub.value, id);
		if (rc == 0)
			rc = etcd_post(m, "/v3/kv/put", body, deadline);
	}
	if (rc < 0) {
		/* The record may be there (a reply lost or late): revoking the
		 * lease takes it back, so it cannot refuse the next create of
		 * the name.  With a deadline of its own: the claim's may be
		 * over, and the revoke would never go. */
		etcd_revoke(m, id, sock_now_ms() + ETCD_UNDO_MS);
		return rc;
	}
	m->pub.lease = id;
	return 0;
}

static int etcd_publish(struct meta *m, int64_t deadline)
{
	m->pub.lease = 0;
	return etcd_claim(m, deadline);
}

static int etcd_keepalive(struct meta *m, int64_t deadline)
{
	struct etcd_conn *c = m->conn;
	char body[ETCD_REQ_MAX];
	int64_t ttl = 0;
	int rc;

	if (m->pub.lease > 0) {
		rc = etcd_body_lease(body, sizeof(body), m->pub.lease);
		if (rc == 0)
			rc = etcd_post(m, "/v3/lease/keepalive", body, deadline);
		if (rc == 0 && (rc = etcd_parse_keepalive(c->resp, c->len, m->pub.lease, &ttl)))
			etcd_refuse(m, "/v3/lease/keepalive: a reply that is not for our lease");
		if (rc)
			return rc;
		/* The lease lives, but the key may not (deleted past us): made
		 * again on it, as Redis's renewal does (1), unless another
		 * value took the name meanwhile (-EEXIST). */
		if (ttl > 0)
			return etcd_claim_txn(m, m->pub.lease, deadline);
	}
	/* The lease is gone, and the key with it: publish again. */
	m->pub.lease = 0;
	rc = etcd_claim(m, deadline);
	return rc ? rc : 1;
}

static int etcd_resolve(struct meta *m, const char *key, char *value, size_t cap,
			int64_t deadline)
{
	struct etcd_conn *c = m->conn;
	char body[ETCD_REQ_MAX];
	int rc = etcd_body_range(body, sizeof(body), key);

	if (rc == 0)
		rc = etcd_post(m, "/v3/kv/range", body, deadline);
	if (rc == 0) {
		rc = etcd_parse_range(c->resp, c->len, key, value, cap);
		if (rc == -EPROTO) {
			meta_log(m, "/v3/kv/range %s: a reply that is not one valid value", key);
			etcd_forget(c);
		}
	}
	return rc;
}

static int etcd_remove(struct meta *m, int64_t deadline)
{
	struct etcd_conn *c = m->conn;
	char body[ETCD_REQ_MAX];
	bool ok = false;
	int rc = etcd_body_drop(body, sizeof(body), m->pub.key, m->pub.value);

	if (rc == 0)
		rc = etcd_post(m, "/v3/kv/txn", body, deadline);
	if (rc == 0 && (rc = etcd_parse_drop(c->resp, c->len, &ok)))
		etcd_refuse(m, "/v3/kv/txn: a reply that is not the transaction's");
	if (rc == 0 && !ok)
		rc = -ENOENT;
	etcd_revoke(m, m->pub.lease, deadline);
	m->pub.lease = 0;
	return rc;
}

static void etcd_fini(struct meta *m)
{
	struct etcd_conn *c = m->conn;

	if (!c)
		return;
	if (c->h)
		curl_easy_cleanup(c->h);
	if (c->share)
		curl_share_cleanup(c->share);
	curl_slist_free_all(c->headers);
	free(c->resp);
	free(c);
	m->conn = NULL;
}

static int etcd_init(struct meta *m)
{
	struct etcd_conn *c;

	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		log_err("metadata %s: curl_global_init: %s", m->url, curl_easy_strerror(curl_init_rc));
		return -ENOMEM;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	m->conn = c;
	snprintf(c->base, sizeof(c->base), "http://%s:%u", m->host, m->port);
	c->resp = malloc(ETCD_BODY_MAX);
	c->headers = curl_slist_append(NULL, "Content-Type: application/json");
	/* no "Expect: 100-continue" round trip before a body */
	if (c->headers)
		c->headers = curl_slist_append(c->headers, "Expect:");
	etcd_forget(c);
	if (!c->resp || !c->headers || !c->share) {
		etcd_fini(m);
		return -ENOMEM;
	}
	return 0;
}

const struct meta_ops meta_etcd_ops = {
	.scheme = "etcd",
	.init = etcd_init,
	.fini = etcd_fini,
	.publish = etcd_publish,
	.keepalive = etcd_keepalive,
	.resolve = etcd_resolve,
	.remove = etcd_remove,
};
