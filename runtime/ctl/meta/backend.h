/* SPDX-License-Identifier: MIT */
/*
 * Inside the metadata store: the handle and what each backend provides.
 * meta.c checks arguments, takes the handle's lock (with the caller's
 * deadline) and calls the backend with it held; the backends never take
 * it themselves.
 */
#ifndef FERRY_RUNTIME_CTL_META_BACKEND_H
#define FERRY_RUNTIME_CTL_META_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/ctl/meta/meta.h"

/* The handle's publication (m->lock). */
struct meta_pub {
	bool active;
	char name[META_KEY_MAX];
	char key[META_KEY_MAX];
	char value[META_VALUE_MAX];
	uint32_t ttl_ms;
	int64_t lease;                 /* etcd: the lease ID (> 0), 0 none */
};

struct meta;

/* Every call: m->lock held, deadline in sock_now_ms() milliseconds. */
struct meta_ops {
	const char *scheme;            /* "redis", "etcd" */
	int (*init)(struct meta *m);   /* allocate the backend's state (no I/O) */
	void (*fini)(struct meta *m);  /* close and free it */
	/* Claim m->pub (create-if-absent, or take over our own value). */
	int (*publish)(struct meta *m, int64_t deadline);
	int (*keepalive)(struct meta *m, int64_t deadline);
	int (*resolve)(struct meta *m, const char *key, char *value, size_t cap, int64_t deadline);
	/* Compare-and-delete m->pub, end its lease. */
	int (*remove)(struct meta *m, int64_t deadline);
};

struct meta {
	pthread_mutex_t lock;          /* the connection and pub, see meta.h */
	const struct meta_ops *ops;
	char url[META_URL_MAX];
	char host[64];                 /* numeric IPv4, resolved once by meta_open */
	uint16_t port;
	void *conn;                    /* the backend's state */
	struct meta_pub pub;
	uint64_t answers;              /* values resolve returned (their order) */
};

extern const struct meta_ops meta_redis_ops;
extern const struct meta_ops meta_etcd_ops;

/* Milliseconds left until deadline, at most an hour; 0 once it has passed
 * (the callers then end -ETIMEDOUT: meta_deadline gives each call at
 * least 1 ms to begin with). */
int meta_left_ms(int64_t deadline);

/* Rate-limited by the caller: one line naming the store and what failed. */
#define meta_log(m, fmt, ...) log_err("metadata %s: " fmt, (m)->url, ##__VA_ARGS__)

#endif /* FERRY_RUNTIME_CTL_META_BACKEND_H */
