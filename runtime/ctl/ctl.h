/* SPDX-License-Identifier: MIT */
/*
 * The control plane between engines: a TCP server on the engine's control
 * address (server.c) that answers GET_DESC with the engine's segment
 * descriptor and serves the endpoint handshake (CONNECT, DISCONNECT) and
 * the initiators' KEEPALIVEs; and the client side (client.c) that
 * ferry_segment_open(), the repair thread and the leases use.  Every
 * malformed message is refused with a logged reason and the connection
 * closed; every wait has a deadline.
 */
#ifndef FERRY_RUNTIME_CTL_H
#define FERRY_RUNTIME_CTL_H

#include <pthread.h>
#include <stdint.h>

#include "ring/base/log.h"
#include "runtime/ctl/wire.h"

#define CTL_IO_TIMEOUT_MS 2000
#define CTL_ERRNO_MAX 4095 /* largest errno a WIRE_ERROR may carry */

/* A control-plane message, prefixed "ctl: ". */
#define ctl_log(fmt, ...) log_err("ctl: " fmt, ##__VA_ARGS__)

/* Build the descriptor to send: fill *out (regions on the heap); 0 or -errno. */
typedef int (*ctl_describe_fn)(void *arg, struct seg_desc *out);
/* Create and connect the target-side QPs of an endpoint; fill rep; 0 or -errno
 * (sent back as WIRE_ERROR). */
typedef int (*ctl_connect_fn)(void *arg, const struct wire_connect_req *req,
			      struct wire_connect_rep *rep);
/* Tear down the target-side QPs of an endpoint; 0 or -errno (-ENOENT unknown). */
typedef int (*ctl_disconnect_fn)(void *arg, const struct wire_disconnect *d);
/* An initiator says it is alive: renew its lease; 0 or -ENOENT (nothing of it here). */
typedef int (*ctl_keepalive_fn)(void *arg, uint64_t incarnation);

struct ctl {
	int listen_fd;
	int stop_fd;               /* eventfd that wakes the thread to stop */
	pthread_t thread;
	int running;
	char address[64];          /* "host:port" actually bound */
	ctl_describe_fn describe;
	ctl_connect_fn connect;       /* NULL: CONNECT_REQ answered -EOPNOTSUPP */
	ctl_disconnect_fn disconnect; /* NULL: DISCONNECT answered -EOPNOTSUPP */
	ctl_keepalive_fn keepalive;   /* NULL: KEEPALIVE answered -EOPNOTSUPP */
	void *arg;
	uint64_t served;           /* requests answered */
	uint64_t refused;          /* malformed messages */
};

/* Bind listen ("ip:port", port 0 = any; NULL = "127.0.0.1:0") and start the thread. */
int ctl_start(struct ctl *c, const char *listen, ctl_describe_fn describe, void *arg);
/* Set the endpoint handlers; call before ctl_start (they share its arg). */
void ctl_set_ep_ops(struct ctl *c, ctl_connect_fn connect, ctl_disconnect_fn disconnect);
/* Set the keepalive handler; call before ctl_start. */
void ctl_set_keepalive(struct ctl *c, ctl_keepalive_fn keepalive);
/* Stop the thread and close the socket; safe on a never-started ctl. */
void ctl_stop(struct ctl *c);
/* Fetch the descriptor of the engine at address; blocks up to timeout_ms. */
int ctl_fetch_desc(const char *address, int timeout_ms, struct seg_desc *out);
/* Ask the engine at address to connect an endpoint; blocks up to timeout_ms.
 * Returns 0 with rep filled (token and n_qps checked against req), the
 * target's negative errno from a WIRE_ERROR, or a transport error as for
 * ctl_fetch_desc. */
int ctl_connect(const char *address, int timeout_ms, const struct wire_connect_req *req,
		struct wire_connect_rep *rep);
/* Ask the engine at address to tear down an endpoint's QPs. */
int ctl_disconnect(const char *address, int timeout_ms, const struct wire_disconnect *d);
/* Tell the engine at address that the initiator incarnation is alive. */
int ctl_keepalive(const char *address, int timeout_ms, uint64_t incarnation);

#endif /* FERRY_RUNTIME_CTL_H */
