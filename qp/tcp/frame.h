/* SPDX-License-Identifier: MIT */
/*
 * tcp: the frame format, a pure codec (no sockets, no state): what one
 * side of a tcp QP's connection sends the other.
 *
 * Every frame starts with a 24-byte header, little endian:
 *
 *   0  u8  type     TCP_F_*
 *   1  u8  status   TCP_ST_* (responses only; 0 in requests)
 *   2  u16 flags    0
 *   4  u32 len      payload bytes that follow (WRITE, READ_RESP, HELLO),
 *                   or bytes asked for (READ_REQ); <= TCP_MAX_FRAME
 *   8  u32 seq      the request's sequence number (RC: one per WR, in order)
 *  12  u32 rkey     the target region's key (WRITE, READ_REQ)
 *  16  u64 addr     the target address (WRITE, READ_REQ)
 *
 * HELLO (both ways, the first frame on a connection) carries a 64-byte
 * body: magic "FTCP", version, the qpn and secret of the QP the sender
 * wants to reach (the peer's, as the control-plane handshake gave them),
 * the largest frame the sender accepts, and a MAC: with a cluster key,
 * the sender's proof that it holds the key (qp/auth: HMAC over its role
 * and both QPs' secrets, so a proof is good for one connection, one way);
 * without one, 32 zero bytes.  The initiator's WRITE carries its
 * payload; READ_REQ none; the target answers each READ_REQ with a
 * READ_RESP (the bytes) and acknowledges WRITEs with ACK, cumulatively:
 * ACK seq n or READ_RESP seq n says every request up to n is done.  A
 * response with a non-zero status has no payload and ends the connection.
 *
 * The decoders are strict: every field is checked, reserved bits must be
 * zero, unknown types are refused; on refusal the output is zeroed.  The
 * encoding is canonical: what decodes re-encodes to the same bytes.
 */
#ifndef FERRY_QP_TCP_FRAME_H
#define FERRY_QP_TCP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define TCP_HDR_LEN 24u
#define TCP_HELLO_LEN 64u                /* HELLO's body */
#define TCP_HELLO_MAGIC 0x50435446u      /* "FTCP" little endian */
#define TCP_VERSION 2u                   /* 2: the HELLO's MAC */
#define TCP_SECRET_LEN 16u
#define TCP_MAC_LEN 32u
#define TCP_MAX_FRAME (1u << 30)         /* 1 GiB: the cap of any frame's len */
#define TCP_MIN_FRAME 4096u              /* a peer must accept frames this big */

enum tcp_ftype {
	TCP_F_HELLO = 1,
	TCP_F_WRITE = 2,
	TCP_F_READ_REQ = 3,
	TCP_F_READ_RESP = 4,
	TCP_F_ACK = 5,
};

enum tcp_status {
	TCP_ST_OK = 0,
	TCP_ST_ACCESS = 1,   /* rkey unknown, range outside it, or access refused */
	TCP_ST_TOO_BIG = 2,  /* len above what the target accepts */
	TCP_ST_MAX = TCP_ST_TOO_BIG,
};

struct tcp_frame {
	uint8_t type;
	uint8_t status;
	uint32_t len;
	uint32_t seq;
	uint32_t rkey;
	uint64_t addr;
};

struct tcp_hello {
	uint32_t qpn;        /* the QP the sender wants: the receiver's own */
	uint32_t max_frame;  /* the largest len the sender accepts */
	uint8_t secret[TCP_SECRET_LEN];
	uint8_t mac[TCP_MAC_LEN];   /* the key's proof (zero: no key) */
};

/* Encode f into buf (TCP_HDR_LEN bytes); f must be valid (asserted in debug). */
void tcp_frame_encode(const struct tcp_frame *f, uint8_t *buf);

/*
 * Decode and check one header from the first TCP_HDR_LEN bytes of buf.
 * 0, or -EMSGSIZE (len < TCP_HDR_LEN), -EPROTO (a field out of its
 * range), -EPROTONOSUPPORT (unknown type); on error *out is zeroed.
 */
int tcp_frame_decode(const uint8_t *buf, size_t len, struct tcp_frame *out);

void tcp_hello_encode(const struct tcp_hello *h, uint8_t *buf);

/* Decode a HELLO body: exactly TCP_HELLO_LEN bytes.  0 or -EPROTO /
 * -EMSGSIZE (wrong length) / -EPROTONOSUPPORT (version); zeroed on error. */
int tcp_hello_decode(const uint8_t *buf, size_t len, struct tcp_hello *out);

/* The frame's payload bytes on the wire (READ_REQ asks for len, carries none). */
static inline uint32_t tcp_frame_payload(const struct tcp_frame *f)
{
	return f->type == TCP_F_READ_REQ ? 0 : f->len;
}

/* Constant time: compares every byte whatever the first difference. */
int tcp_secret_equal(const uint8_t *a, const uint8_t *b);
int tcp_mac_equal(const uint8_t *a, const uint8_t *b);

/* Why a frame or HELLO was refused, for the logs. */
const char *tcp_frame_strerror(int err);

#endif /* FERRY_QP_TCP_FRAME_H */
