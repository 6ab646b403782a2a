/* SPDX-License-Identifier: MIT */
/*
 * Socket helpers of the control plane (sock.c): addresses and I/O with a
 * deadline.  Every wait also watches an optional stop fd (an eventfd), so a
 * server thread that is told to stop returns at once.
 */
#ifndef FERRY_RUNTIME_CTL_SOCK_H
#define FERRY_RUNTIME_CTL_SOCK_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define SOCK_HOST_MAX 64

/* CLOCK_MONOTONIC in ms: the deadlines' clock. */
int64_t sock_now_ms(void);

/* A port: plain decimal digits (no sign, no blank), at most 65535.  -EINVAL. */
int sock_parse_port(const char *s, uint16_t *port);
/* Split "host:port" at the last colon; port as sock_parse_port.  -EINVAL. */
int sock_split_addr(const char *s, char *host, uint16_t *port);
/* "a.b.c.d:port" for bind(); port 0 asks the kernel for one.  -EINVAL. */
int sock_parse_listen(const char *s, struct sockaddr_in *sin);
/* "a.b.c.d:port" or "localhost:port" for connect() (no DNS: it would block
 * past the caller's deadline).  -EINVAL. */
int sock_resolve_peer(const char *s, struct sockaddr_in *sin);

/* Wait until fd is ready for events: 0, -ETIMEDOUT at the deadline, or
 * -ECANCELED when stop_fd (if >= 0) becomes readable. */
int sock_wait_fd(int fd, short events, int stop_fd, int64_t deadline);
/* Read exactly len bytes (*got: how many came); end of stream is -ECONNRESET. */
int sock_recv_full(int fd, int stop_fd, void *buf, size_t len, int64_t deadline, size_t *got);
/* Write exactly len bytes; a closed peer is -EPIPE, never SIGPIPE. */
int sock_send_full(int fd, int stop_fd, const void *buf, size_t len, int64_t deadline);

/* SO_RCVTIMEO/SO_SNDTIMEO: a second line of defence behind the deadlines. */
void sock_set_timeouts(int fd, int ms);
/* TCP_NODELAY: small request/reply frames must not wait for Nagle. */
void sock_set_nodelay(int fd);

void sock_put_le32(uint8_t *p, uint32_t v);
uint32_t sock_get_le32(const uint8_t *p);

#endif /* FERRY_RUNTIME_CTL_SOCK_H */
