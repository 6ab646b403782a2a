/* SPDX-License-Identifier: MIT */
/*
 * The control thread: a TCP listener on the engine's control address that
 * answers WIRE_GET_DESC with the engine's current segment descriptor, and the
 * client side used by ferry_segment_open() to fetch a peer's descriptor.
 * Connections are served one at a time with socket timeouts, so a slow or
 * malicious client cannot wedge the engine for longer than the timeout; every
 * malformed message is refused with a logged reason and the connection closed.
 */
#ifndef FERRY_RUNTIME_CTL_H
#define FERRY_RUNTIME_CTL_H

#include <pthread.h>
#include <stdint.h>

#include "wire.h"

/* Build the descriptor to send: fill *out (regions on the heap); 0 or -errno. */
typedef int (*ctl_describe_fn)(void *arg, struct seg_desc *out);

struct ctl {
	int listen_fd;
	int stop_fd;               /* eventfd that wakes the thread to stop */
	pthread_t thread;
	int running;
	char address[64];          /* "host:port" actually bound */
	ctl_describe_fn describe;
	void *arg;
	uint64_t served;           /* requests answered */
	uint64_t refused;          /* malformed messages */
};

/* Bind listen ("ip:port", port 0 = any; NULL = "127.0.0.1:0") and start the thread. */
int ctl_start(struct ctl *c, const char *listen, ctl_describe_fn describe, void *arg);
/* Stop the thread and close the socket; safe on a never-started ctl. */
void ctl_stop(struct ctl *c);
/* Fetch the descriptor of the engine at address; blocks up to timeout_ms. */
int ctl_fetch_desc(const char *address, int timeout_ms, struct seg_desc *out);

#endif /* FERRY_RUNTIME_CTL_H */
