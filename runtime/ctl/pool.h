/* SPDX-License-Identifier: MIT */
/*
 * The client's connections (pool.c), for client.c: dial (connect, then
 * authenticate when the client has a key) and keep idle connections per
 * peer for the next call.
 */
#ifndef FERRY_RUNTIME_CTL_POOL_H
#define FERRY_RUNTIME_CTL_POOL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/ctl/ctl.h"

/* A connection to sin, authenticated if cl has a key (cl may be NULL),
 * its session in *sess (off without a key: frames go bare).
 * The fd, or -errno: connect errors as they come (-ECONNREFUSED, ...),
 * or what authentication said (-EACCES, -EBUSY, -EPROTO, ...). */
int ctl_dial(struct ctl_client *cl, const struct sockaddr_in *sin, const char *address,
	     int64_t deadline, struct auth_sess *sess);
/* Connecting in steps, for calls to many peers at once: a non-blocking
 * socket whose connect to sin has begun (the fd, or -errno when it failed
 * at once); once it is writable, ctl_dial_end says how the connect went
 * (0 or -errno).  Neither authenticates. */
int ctl_dial_begin(const struct sockaddr_in *sin);
int ctl_dial_end(int fd);
/* Tests (struct ctl_client's fault_*): the error a dial to sin meets now
 * (and one fewer left), or 0.  cl may be NULL. */
int ctl_dial_fault(struct ctl_client *cl, const struct sockaddr_in *sin);
/* The newest idle connection to sin that is still good (taken out of the
 * pool, its session in *sess), or -1: no dial. */
int ctl_pool_take(struct ctl_client *cl, const struct sockaddr_in *sin, struct auth_sess *sess);
/* A kept connection to sin (*reused = true) or a new one; its session in *sess. */
int ctl_pool_get(struct ctl_client *cl, const struct sockaddr_in *sin, const char *address,
		 int64_t deadline, bool *reused, struct auth_sess *sess);
/* Give a connection back after a clean exchange (it may be closed instead),
 * with its session as the exchange left it. */
void ctl_pool_put(struct ctl_client *cl, const struct sockaddr_in *sin, int fd,
		  const struct auth_sess *sess);
/* Close every idle connection (no file descriptor left for a dial: the
 * pool is a cache, it gives way); how many. */
unsigned ctl_pool_shed(struct ctl_client *cl);

#endif /* FERRY_RUNTIME_CTL_POOL_H */
