/* SPDX-License-Identifier: MIT */
/*
 * The control-plane wire format: versioned, little-endian, length-prefixed
 * binary messages exchanged over TCP between engines.  Every decoder checks
 * every size, count and length against the bytes it was given and against
 * hard limits; a malformed message is refused with -EPROTO (and a reason),
 * never read past.
 *
 * Version 2: NIC addresses of 64 bytes, QP infos with a 16-byte secret.
 * One version is spoken: an older frame is refused -EPROTO ("bad
 * version"), a newer one -EPROTONOSUPPORT; engines of one cluster are
 * upgraded together.
 *
 * Frame:   magic u32 "FRY1" | version u16 | type u16 | payload_len u32 | payload
 * Types:   WIRE_GET_DESC (empty payload) -> WIRE_DESC, or WIRE_ERROR (i32: a
 *          negative errno, -4095..-1).
 * DESC:    incarnation u64 | n_nics u16 | reserved u16 | n_regions u32 |
 *          n_nics x (provider name 16 bytes NUL-padded | nic_addr 64 bytes) |
 *          n_regions x (addr u64 | len u64 | access u32 | reserved u32 |
 *                       n_nics x rkey u32); access: bit 0 remote read,
 *          bit 1 remote write, the other bits zero
 *
 * Endpoint handshake (the initiator's control path asks the target's
 * control thread to create and connect the peer QPs):
 * CONNECT_REQ:  incarnation u64 | token u64 | target_incarnation u64 |
 *               target_nic u16 | n_qps u16 | reserved u32 |
 *               provider 16 bytes | nic_addr 64 bytes |
 *               n_qps x (qpn u32 | psn u32 | secret 16 bytes)
 *               -> CONNECT_REP, or WIRE_ERROR (e.g. -ESTALE: the target
 *               restarted since the descriptor was fetched; -ECANCELED: a
 *               DISCONNECT for one of its tokens came first)
 * CONNECT_REP:  token u64 | n_qps u16 | reserved u16 | reserved u32 |
 *               n_qps x (qpn u32 | psn u32 | secret 16 bytes)
 * DISCONNECT:   incarnation u64 | token u64   -> DISCONNECT_REP (empty) or WIRE_ERROR
 * KEEPALIVE:    incarnation u64 | reserved u64 -> KEEPALIVE_REP (empty) or WIRE_ERROR
 *               (-ENOENT: the target holds no QP of that initiator): an
 *               initiator's periodic "still here" that keeps its lease on the
 *               target's QPs
 * n_qps is 1..WIRE_MAX_EP_QPS; reserved fields must be zero.  A CONNECT_REQ
 * with token T and n QPs names its QP i by token T + i on the target: one
 * message connects a whole endpoint, and a DISCONNECT with token T + i
 * frees that QP alone (the repair of one broken QP sends n_qps 1).
 *
 * Authentication (both engines have a cluster key; see runtime/ctl/auth.c):
 * AUTH_HELLO:   alg u16 (2) | reserved u16 | reserved u32 | nonce 32 bytes
 * AUTH_PROOF:   mac 32 bytes, over both hellos (alg included)
 * The client sends AUTH_HELLO first; the server answers AUTH_HELLO and its
 * AUTH_PROOF; the client sends its AUTH_PROOF, then its requests.  A side
 * that refuses sends at most a WIRE_ERROR (-EACCES; -EPROTONOSUPPORT to a
 * hello of alg 1, which had no tags) and closes; after its AUTH_PROOF the
 * server's refusal (-EBUSY at its cap, -EACCES past the deadline) is
 * sealed, as the frames after the proofs.
 * Sealed frames: on an authenticated connection every frame after the two
 * proofs, both ways, has its payload encrypted and is followed by a
 * WIRE_TAG_LEN tag (not counted in payload_len): ChaCha20-Poly1305 (IETF)
 * with the direction's session key, nonce its sequence number (u64 LE,
 * from 0, then 4 zero bytes), the header as associated data (qp/auth's
 * auth_seal).  The header stays in clear and is checked as ever before the
 * payload is read; the tag before anything is made of the payload.  A
 * frame whose tag does not verify closes the connection.  Without a key
 * nothing is sealed: the frames are as in version 2 before.
 *
 * Notifications (ferry_notify, sent once the WRITEs before it landed):
 * NOTIFY:       from_len u8 | reserved u8 | msg_len u16 | reserved u32 |
 *               from (from_len bytes) | msg (msg_len bytes)
 *               -> NOTIFY_REP (empty), or WIRE_ERROR: -EAGAIN when the
 *               receiver's queue is full (nothing queued: send it again later)
 * from is 1..WIRE_NOTIFY_FROM_MAX characters of [A-Za-z0-9._:-] (the
 * sender's name or "host:port"), msg_len at most WIRE_NOTIFY_MAX, and the
 * payload exactly 8 + from_len + msg_len bytes.
 * NOTIFY_TO:    to_incarnation u64 (nonzero) | a NOTIFY's payload
 *               -> as NOTIFY, or WIRE_ERROR -ESTALE when the receiver is
 *               not that incarnation (it restarted at the same address
 *               since the sender fetched its descriptor: the WRITEs the
 *               notification vouches for went to the process before it)
 * What ferry sends is NOTIFY_TO; a NOTIFY (from a sender before it) is still
 * taken, unchecked.  A receiver before it closes the connection unanswered
 * (unknown type): the sender sees -ECONNRESET.
 */
#ifndef FERRY_RUNTIME_WIRE_H
#define FERRY_RUNTIME_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "qp/nic.h"

#define WIRE_MAGIC 0x31595246u /* "FRY1" little-endian */
#define WIRE_VERSION 2
#define WIRE_HDR_LEN 12
#define WIRE_MAX_NICS 256 /* 64 cores x up to 3 transports, and room */
#define WIRE_MAX_REGIONS 16384 /* x 256 NIC keys: a decoded descriptor stays under ~17 MiB */
#define WIRE_MAX_PAYLOAD (1u << 26) /* 64 MiB: many regions of many NICs */
#define WIRE_PROVIDER_LEN 16
/* The largest DESC payload there can be: WIRE_MAX_NICS NICs and
 * WIRE_MAX_REGIONS regions, each with WIRE_MAX_NICS rkeys (~16.4 MiB).  A
 * longer one is refused at its header, before anything is allocated. */
#define WIRE_DESC_MAX_LEN                                                  \
	(16u + WIRE_MAX_NICS * (WIRE_PROVIDER_LEN + NIC_ADDR_LEN) +            \
	 WIRE_MAX_REGIONS * (24u + WIRE_MAX_NICS * 4u))
_Static_assert(WIRE_DESC_MAX_LEN <= WIRE_MAX_PAYLOAD, "the largest descriptor fits a frame");

enum wire_type {
	WIRE_GET_DESC = 1,
	WIRE_DESC = 2,
	WIRE_ERROR = 3,
	WIRE_CONNECT_REQ = 4,
	WIRE_CONNECT_REP = 5,
	WIRE_DISCONNECT = 6,
	WIRE_DISCONNECT_REP = 7,
	WIRE_KEEPALIVE = 8,
	WIRE_KEEPALIVE_REP = 9,
	WIRE_AUTH_HELLO = 10,
	WIRE_AUTH_PROOF = 11,
	WIRE_NOTIFY = 12,
	WIRE_NOTIFY_REP = 13,
	WIRE_NOTIFY_TO = 14,
	WIRE_TYPE_LAST = WIRE_NOTIFY_TO,
};

#define WIRE_MAX_EP_QPS 16

struct wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t payload_len;
};

struct seg_region {
	uint64_t addr;
	uint64_t len;
	uint32_t access;              /* NIC_ACCESS_*: what the owner lets peers do */
	uint32_t rkey[WIRE_MAX_NICS]; /* one per NIC of the peer, n_nics valid */
};

struct seg_nic {
	char provider[WIRE_PROVIDER_LEN]; /* NUL-terminated on decode */
	struct nic_addr addr;
};

/* A peer engine's segment: its NICs and registered regions, sorted by addr. */
struct seg_desc {
	uint64_t incarnation;
	uint16_t n_nics;
	uint32_t n_regions;
	struct seg_region *regions; /* n_regions entries, heap */
	struct seg_nic nics[WIRE_MAX_NICS]; /* last: a kept copy may end after n_nics */
};

/* Encode/decode a frame header (buffer of WIRE_HDR_LEN bytes). */
void wire_hdr_encode(uint8_t *buf, uint16_t type, uint32_t payload_len);
int wire_hdr_decode(const uint8_t *buf, size_t len, struct wire_hdr *out);

/* Bytes needed for the payload of d. */
size_t wire_desc_size(const struct seg_desc *d);
/* Encode d's payload into buf (cap bytes); -ENOSPC if it does not fit. */
int wire_desc_encode(const struct seg_desc *d, uint8_t *buf, size_t cap);
/* Decode a DESC payload; allocates out->regions (free with seg_desc_free).
 * Regions must be sorted by addr, non-empty, non-overlapping and not wrap. */
int wire_desc_decode(const uint8_t *buf, size_t len, struct seg_desc *out);
void seg_desc_free(struct seg_desc *d);

struct wire_connect_req {
	uint64_t incarnation;        /* the initiator engine's */
	uint64_t token;              /* the initiator's endpoint id, echoed back */
	uint64_t target_incarnation; /* from the descriptor the initiator holds */
	uint16_t target_nic;         /* index into the target's descriptor NICs */
	uint16_t n_qps;
	struct seg_nic nic;          /* the initiator's NIC */
	struct nic_qp_info qps[WIRE_MAX_EP_QPS];
};

struct wire_connect_rep {
	uint64_t token;
	uint16_t n_qps;
	struct nic_qp_info qps[WIRE_MAX_EP_QPS];
};

struct wire_disconnect {
	uint64_t incarnation;
	uint64_t token;
};

/* Payload sizes; encoders return -ENOSPC when cap is too small and -EINVAL
 * for values a decoder would refuse; decoders -EPROTO (with a logged reason). */
size_t wire_connect_req_size(const struct wire_connect_req *r);
int wire_connect_req_encode(const struct wire_connect_req *r, uint8_t *buf, size_t cap);
int wire_connect_req_decode(const uint8_t *buf, size_t len, struct wire_connect_req *out);
size_t wire_connect_rep_size(const struct wire_connect_rep *r);
int wire_connect_rep_encode(const struct wire_connect_rep *r, uint8_t *buf, size_t cap);
int wire_connect_rep_decode(const uint8_t *buf, size_t len, struct wire_connect_rep *out);
#define WIRE_DISCONNECT_LEN 16
#define WIRE_KEEPALIVE_LEN 16 /* same layout as DISCONNECT, token reserved (0) */
int wire_disconnect_encode(const struct wire_disconnect *d, uint8_t *buf, size_t cap);
int wire_disconnect_decode(const uint8_t *buf, size_t len, struct wire_disconnect *out);

#define WIRE_AUTH_ALG_V1 1 /* proofs over the nonces only, frames after them bare: refused */
#define WIRE_AUTH_ALG 2    /* proofs over both hellos, every frame after them sealed */
#define WIRE_TAG_LEN 16    /* a sealed frame's tag, after its payload (not in payload_len) */
#define WIRE_AUTH_NONCE_LEN 32
#define WIRE_AUTH_MAC_LEN 32
#define WIRE_AUTH_HELLO_LEN (8 + WIRE_AUTH_NONCE_LEN)
#define WIRE_AUTH_PROOF_LEN WIRE_AUTH_MAC_LEN

struct wire_auth_hello {
	uint16_t alg;
	uint8_t nonce[WIRE_AUTH_NONCE_LEN];
};

struct wire_auth_proof {
	uint8_t mac[WIRE_AUTH_MAC_LEN];
};

int wire_auth_hello_encode(const struct wire_auth_hello *h, uint8_t *buf, size_t cap);
int wire_auth_hello_decode(const uint8_t *buf, size_t len, struct wire_auth_hello *out);
int wire_auth_proof_encode(const struct wire_auth_proof *p, uint8_t *buf, size_t cap);
int wire_auth_proof_decode(const uint8_t *buf, size_t len, struct wire_auth_proof *out);

#define WIRE_NOTIFY_MAX 256      /* = FERRY_NOTIF_MAX */
#define WIRE_NOTIFY_FROM_MAX 63  /* characters of from */
#define WIRE_NOTIFY_FIXED_LEN 8u
#define WIRE_NOTIFY_MAX_LEN (WIRE_NOTIFY_FIXED_LEN + WIRE_NOTIFY_FROM_MAX + WIRE_NOTIFY_MAX)

#define WIRE_NOTIFY_TO_MAX_LEN (8u + WIRE_NOTIFY_MAX_LEN)

struct wire_notify {
	uint64_t to_incarnation;             /* NOTIFY_TO's; 0 from a NOTIFY (not checked) */
	char from[WIRE_NOTIFY_FROM_MAX + 1]; /* NUL-terminated */
	uint16_t len;
	uint8_t msg[WIRE_NOTIFY_MAX];
};

size_t wire_notify_size(const struct wire_notify *n);
int wire_notify_encode(const struct wire_notify *n, uint8_t *buf, size_t cap);
int wire_notify_decode(const uint8_t *buf, size_t len, struct wire_notify *out);
/* NOTIFY_TO: the same, after n->to_incarnation (nonzero). */
size_t wire_notify_to_size(const struct wire_notify *n);
int wire_notify_to_encode(const struct wire_notify *n, uint8_t *buf, size_t cap);
int wire_notify_to_decode(const uint8_t *buf, size_t len, struct wire_notify *out);

/* Region of d that contains [addr, addr+len), or NULL.  Binary search. */
const struct seg_region *seg_desc_find(const struct seg_desc *d, uint64_t addr, uint64_t len);

#endif /* FERRY_RUNTIME_WIRE_H */
