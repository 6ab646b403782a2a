/* SPDX-License-Identifier: MIT */
/*
 * tcp: one-sided READ/WRITE over TCP, behind the same interface as the
 * verbs provider (qp/nic.h).  What tests and tools may ask of it beyond
 * that interface.
 */
#ifndef FERRY_QP_TCP_H
#define FERRY_QP_TCP_H

#include <stdint.h>

#include "qp/nic.h"

/* What peers may do to a registered region (reg_mr's access). */
#define TCP_ACCESS_REMOTE_READ NIC_ACCESS_REMOTE_READ
#define TCP_ACCESS_REMOTE_WRITE NIC_ACCESS_REMOTE_WRITE

/* Change what peers may do to mr (control path); -EINVAL if it is not ours. */
int tcp_set_mr_access(struct nic *nic, const struct nic_mr *mr, unsigned access);
/* How long a new connection may take to say HELLO (tests; TCP_HELLO_MS). */
void tcp_set_hello_ms(struct nic *nic, unsigned ms);

struct tcp_counters {
	uint64_t frames_tx;     /* frames sent, requests and responses */
	uint64_t frames_rx;     /* frames received */
	uint64_t payload_tx;    /* WRITE and READ_RESP bytes sent */
	uint64_t payload_rx;    /* WRITE and READ_RESP bytes received into place */
	uint64_t accepted;      /* connections accepted by the listener */
	uint64_t refused;       /* connections closed before or at their HELLO */
	uint64_t violations;    /* connections closed for a malformed or unexpected frame */
	uint64_t broken;        /* connections lost: EOF, reset, timeout */
	uint64_t sq_overflows;  /* post beyond max_wr: caller bug */
	uint64_t cq_overflows;  /* a CQE with no room: caller bug */
};

/* Sum over the context's CQs (and the ones destroyed). */
void tcp_get_counters(const struct nic *nic, struct tcp_counters *out);

/* The port of the context's data listener (host order). */
uint16_t tcp_port(const struct nic *nic);

#endif /* FERRY_QP_TCP_H */
