/* SPDX-License-Identifier: MIT */
/*
 * The metadata store's front: the URL, the checks every call shares, the
 * handle's lock taken with the caller's deadline, and the dispatch to the
 * backend (redis.c, etcd.c).
 */
#include "runtime/ctl/meta/meta.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ring/base/log.h"
#include "runtime/ctl/meta/backend.h"
#include "runtime/ctl/sock.h"
#include "runtime/engine/opts.h"

int meta_left_ms(int64_t deadline)
{
	int64_t left = deadline - sock_now_ms();

	if (left <= 0)
		return 0;
	return left > 3600000 ? 3600000 : (int)left;
}

int meta_key(const char *name, char *key, size_t cap)
{
	if (!name || !ferry_name_valid(name))
		return -EINVAL;
	if ((size_t)snprintf(key, cap, "%s%s", META_KEY_PREFIX, name) >= cap)
		return -EINVAL;
	return 0;
}

/* host: [A-Za-z0-9.-]{1,63}; port: 1..65535, plain decimal without a
 * leading 0; nothing else. */
static int meta_parse_hostport(const char *s, char *host, size_t hcap, uint16_t *port)
{
	size_t n = strcspn(s, ":");

	if (n == 0 || n >= hcap || s[n] != ':')
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    c != '.' && c != '-')
			return -EINVAL;
	}
	if (s[n + 1] == '0' || sock_parse_port(s + n + 1, port))
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	return 0;
}

/* Resolve host once, to a numeric IPv4 address (later calls never wait on DNS). */
static int meta_resolve_host(const char *host, char *out, size_t cap)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	int rc = getaddrinfo(host, NULL, &hints, &ai);

	if (rc != 0 || !ai) {
		log_err("metadata store host '%s' does not resolve to an IPv4 address: %s", host,
			gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	if (!inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, out,
		       (socklen_t)cap))
		rc = -EINVAL;
	freeaddrinfo(ai);
	return rc;
}

int meta_open(const char *url, struct meta **out)
{
	static const struct meta_ops *const backends[] = { &meta_redis_ops, &meta_etcd_ops };
	const struct meta_ops *ops = NULL;
	const char *rest = NULL;
	char host[64];
	struct meta *m;
	uint16_t port;
	int rc;

	if (!url || !out || strlen(url) >= META_URL_MAX)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		size_t n = strlen(backends[i]->scheme);

		if (strncmp(url, backends[i]->scheme, n) == 0 && strncmp(url + n, "://", 3) == 0) {
			ops = backends[i];
			rest = url + n + 3;
		}
	}
	if (!ops || meta_parse_hostport(rest, host, sizeof(host), &port)) {
		log_err("metadata '%s': want redis://host:port or etcd://host:port", url);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ops = ops;
	m->port = port;
	snprintf(m->url, sizeof(m->url), "%s", url);
	rc = meta_resolve_host(host, m->host, sizeof(m->host));
	if (rc == 0)
		rc = ops->init(m);
	if (rc) {
		free(m);
		return rc;
	}
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	m->ops->fini(m);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

const char *meta_url(const struct meta *m)
{
	return m->url;
}

/*
 * The lock, waited for no longer than the deadline.  The wait's own deadline
 * is on CLOCK_MONOTONIC (clocklock), so a wall-clock step back while it waits
 * does not stretch it.  ThreadSanitizer (gcc 12's libtsan) does not intercept
 * clocklock and would miss the lock, so its builds keep timedlock, whose clock
 * is CLOCK_REALTIME: there the monotonic time left becomes a realtime deadline.
 */
#if defined(__SANITIZE_THREAD__)
#define META_LOCK_CLOCK CLOCK_REALTIME
#else
#define META_LOCK_CLOCK CLOCK_MONOTONIC
#endif

static int meta_lock(struct meta *m, int64_t deadline)
{
	int left = meta_left_ms(deadline);
	struct timespec ts;
	int rc;

	clock_gettime(META_LOCK_CLOCK, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (long)(left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
#if defined(__SANITIZE_THREAD__)
	rc = pthread_mutex_timedlock(&m->lock, &ts);
#else
	rc = pthread_mutex_clocklock(&m->lock, CLOCK_MONOTONIC, &ts);
#endif
	return rc == 0 ? 0 : -ETIMEDOUT;
}

static int64_t meta_deadline(int timeout_ms)
{
	return sock_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
}

int meta_publish(struct meta *m, const char *name, const char *value, uint32_t ttl_ms,
		 int timeout_ms)
{
	int64_t deadline = meta_deadline(timeout_ms);
	struct meta_pub p = { .active = true, .ttl_ms = ttl_ms };
	int rc;

	if (!m || !value || ttl_ms == 0 || meta_key(name, p.key, sizeof(p.key)) ||
	    !meta_value_ok(value, strlen(value)))
		return -EINVAL;
	snprintf(p.name, sizeof(p.name), "%s", name);
	memcpy(p.value, value, strlen(value) + 1);
	rc = meta_lock(m, deadline);
	if (rc)
		return rc;
	if (m->pub.active) {
		rc = -EBUSY;
	} else {
		m->pub = p;
		rc = m->ops->publish(m, deadline);
		if (rc)
			memset(&m->pub, 0, sizeof(m->pub));
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int meta_keepalive(struct meta *m, int timeout_ms)
{
	int64_t deadline = meta_deadline(timeout_ms);
	int rc;

	if (!m)
		return -EINVAL;
	rc = meta_lock(m, deadline);
	if (rc)
		return rc;
	rc = m->pub.active ? m->ops->keepalive(m, deadline) : -ENOENT;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int meta_resolve(struct meta *m, const char *name, char *value, size_t cap, int timeout_ms)
{
	uint64_t order;

	return meta_resolve_ordered(m, name, value, cap, timeout_ms, &order);
}

int meta_resolve_ordered(struct meta *m, const char *name, char *value, size_t cap,
			 int timeout_ms, uint64_t *order)
{
	int64_t deadline = meta_deadline(timeout_ms);
	char key[META_KEY_MAX];
	int rc;

	if (!m || !value || !order || cap < META_VALUE_MAX || meta_key(name, key, sizeof(key)))
		return -EINVAL;
	value[0] = '\0';
	rc = meta_lock(m, deadline);
	if (rc)
		return rc;
	rc = m->ops->resolve(m, key, value, cap, deadline);
	*order = ++m->answers; /* under the lock that orders the calls */
	pthread_mutex_unlock(&m->lock);
	if (rc == 0 && !meta_value_ok(value, strnlen(value, cap))) /* the backends check too */
		rc = -EPROTO;
	if (rc)
		value[0] = '\0';
	return rc;
}

int meta_remove(struct meta *m, const char *name, int timeout_ms)
{
	int64_t deadline = meta_deadline(timeout_ms);
	int rc;

	if (!m || !name)
		return -EINVAL;
	rc = meta_lock(m, deadline);
	if (rc)
		return rc;
	if (!m->pub.active || strcmp(m->pub.name, name) != 0) {
		rc = -ENOENT;
	} else {
		rc = m->ops->remove(m, deadline);
		memset(&m->pub, 0, sizeof(m->pub));
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}
