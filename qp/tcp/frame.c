/* SPDX-License-Identifier: MIT */
/*
 * tcp: the frame codec (frame.h).  Pure functions over byte buffers, so
 * that the fuzzer (tests/fuzz/fuzz_tcp.c) can drive them alone.
 */
#include "qp/tcp/frame.h"

#include <errno.h>
#include <string.h>

#include <sodium.h>

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void tcp_frame_encode(const struct tcp_frame *f, uint8_t *buf)
{
	buf[0] = f->type;
	buf[1] = f->status;
	put16(buf + 2, 0);
	put32(buf + 4, f->len);
	put32(buf + 8, f->seq);
	put32(buf + 12, f->rkey);
	put64(buf + 16, f->addr);
}

/* A request names a target range: it must not wrap the address space. */
static int check_request(const struct tcp_frame *f)
{
	if (f->status != TCP_ST_OK)
		return -EPROTO;
	if (f->addr > UINT64_MAX - f->len)
		return -EPROTO;
	return 0;
}

/* A response names no target; an error carries no payload. */
static int check_response(const struct tcp_frame *f)
{
	if (f->rkey || f->addr || f->status > TCP_ST_MAX)
		return -EPROTO;
	if (f->status != TCP_ST_OK && f->len)
		return -EPROTO;
	return 0;
}

static int check_fields(const struct tcp_frame *f)
{
	switch (f->type) {
	case TCP_F_HELLO:
		if (f->status || f->len != TCP_HELLO_LEN || f->seq || f->rkey || f->addr)
			return -EPROTO;
		return 0;
	case TCP_F_WRITE:
	case TCP_F_READ_REQ:
		return check_request(f);
	case TCP_F_READ_RESP:
		return check_response(f);
	case TCP_F_ACK:
		if (f->len)
			return -EPROTO;
		return check_response(f);
	default:
		return -EPROTONOSUPPORT;
	}
}

int tcp_frame_decode(const uint8_t *buf, size_t len, struct tcp_frame *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (len < TCP_HDR_LEN)
		return -EMSGSIZE;
	out->type = buf[0];
	out->status = buf[1];
	out->len = get32(buf + 4);
	out->seq = get32(buf + 8);
	out->rkey = get32(buf + 12);
	out->addr = get64(buf + 16);
	rc = check_fields(out);
	if (rc == 0 && get16(buf + 2) != 0)
		rc = -EPROTO; /* flags: none defined */
	if (rc == 0 && out->len > TCP_MAX_FRAME)
		rc = -EPROTO;
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}

/*
 * HELLO body: 0 u32 magic, 4 u16 version, 6 u16 flags (0), 8 u32 qpn,
 * 12 u32 max_frame, 16 secret[16], 32 mac[32].
 */
void tcp_hello_encode(const struct tcp_hello *h, uint8_t *buf)
{
	put32(buf, TCP_HELLO_MAGIC);
	put16(buf + 4, TCP_VERSION);
	put16(buf + 6, 0);
	put32(buf + 8, h->qpn);
	put32(buf + 12, h->max_frame);
	memcpy(buf + 16, h->secret, TCP_SECRET_LEN);
	memcpy(buf + 32, h->mac, TCP_MAC_LEN);
}

int tcp_hello_decode(const uint8_t *buf, size_t len, struct tcp_hello *out)
{
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (len != TCP_HELLO_LEN)
		return -EMSGSIZE;
	if (get32(buf) != TCP_HELLO_MAGIC || get16(buf + 6) != 0)
		rc = -EPROTO;
	else if (get16(buf + 4) != TCP_VERSION)
		rc = -EPROTONOSUPPORT;
	out->qpn = get32(buf + 8);
	out->max_frame = get32(buf + 12);
	if (rc == 0 && (!out->qpn || out->max_frame < TCP_MIN_FRAME || out->max_frame > TCP_MAX_FRAME))
		rc = -EPROTO;
	if (rc) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	memcpy(out->secret, buf + 16, TCP_SECRET_LEN);
	memcpy(out->mac, buf + 32, TCP_MAC_LEN);
	return 0;
}

/* Constant time (libsodium's): how long it takes tells nothing of where
 * the bytes differ. */
int tcp_secret_equal(const uint8_t *a, const uint8_t *b)
{
	return sodium_memcmp(a, b, TCP_SECRET_LEN) == 0;
}

int tcp_mac_equal(const uint8_t *a, const uint8_t *b)
{
	return sodium_memcmp(a, b, TCP_MAC_LEN) == 0;
}

const char *tcp_frame_strerror(int err)
{
	switch (err) {
	case -EMSGSIZE:
		return "truncated";
	case -EPROTO:
		return "a field out of range";
	case -EPROTONOSUPPORT:
		return "unknown type or version";
	default:
		return "malformed";
	}
}
