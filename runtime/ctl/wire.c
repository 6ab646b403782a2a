/* SPDX-License-Identifier: MIT */
/*
 * Control-plane wire format (see wire.h).  Every field is encoded byte by
 * byte in little-endian order, never by copying a struct, so the format does
 * not depend on the compiler's padding or the host's byte order.
 *
 * The decoders are pure functions of their input (no globals, no state) so
 * that a fuzzer can drive them directly; their only side effect is one line
 * on stderr naming the reason for a refusal.
 */
#include "runtime/ctl/wire.h"

#include "ring/base/log.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes of the fixed parts of a DESC payload. */
#define DESC_HDR_LEN 16u /* incarnation u64, n_nics u16, reserved u16, n_regions u32 */
#define DESC_NIC_LEN (WIRE_PROVIDER_LEN + NIC_ADDR_LEN)
#define DESC_REGION_LEN 24u /* addr u64, len u64, access u32, reserved u32; then rkeys */
/* CONNECT_REQ: incarnation, token, target_incarnation u64; target_nic u16,
 * n_qps u16, reserved u32; then one NIC entry as in a DESC. */
#define CONN_REQ_HDR_LEN 32u
#define CONN_REQ_FIXED_LEN (CONN_REQ_HDR_LEN + DESC_NIC_LEN)
/* CONNECT_REP: token u64, n_qps u16, reserved u16, reserved u32. */
#define CONN_REP_FIXED_LEN 16u
#define QP_INFO_LEN (8u + NIC_QP_SECRET_LEN) /* qpn u32, psn u32, secret */

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	put_le16(p, (uint16_t)v);
	put_le16(p + 2, (uint16_t)(v >> 16));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)get_le16(p) | ((uint32_t)get_le16(p + 2) << 16);
}

static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | ((uint64_t)get_le32(p + 4) << 32);
}

/* Log why a message was refused and return -EPROTO. */
static int __attribute__((format(printf, 1, 2))) wire_refuse(const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_err("wire: refused: %s", msg);
	return -EPROTO;
}

void wire_hdr_encode(uint8_t *buf, uint16_t type, uint32_t payload_len)
{
	put_le32(buf, WIRE_MAGIC);
	put_le16(buf + 4, WIRE_VERSION);
	put_le16(buf + 6, type);
	put_le32(buf + 8, payload_len);
}

static bool wire_type_known(uint16_t type)
{
	/* The types are dense; a new one must extend this range. */
	return type >= WIRE_GET_DESC && type <= WIRE_TYPE_LAST;
}

int wire_hdr_decode(const uint8_t *buf, size_t len, struct wire_hdr *out)
{
	struct wire_hdr h;

	if (len < WIRE_HDR_LEN)
		return wire_refuse("header truncated (%zu of %d bytes)", len, WIRE_HDR_LEN);
	h.magic = get_le32(buf);
	h.version = get_le16(buf + 4);
	h.type = get_le16(buf + 6);
	h.payload_len = get_le32(buf + 8);

	if (h.magic != WIRE_MAGIC)
		return wire_refuse("bad magic 0x%08x", h.magic);
	if (h.version > WIRE_VERSION) {
		/* A newer peer: say so distinctly so the caller can report it. */
		log_err("wire: refused: version %u, this side speaks %u", h.version, WIRE_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h.version != WIRE_VERSION)
		return wire_refuse("bad version %u", h.version);
	if (!wire_type_known(h.type))
		return wire_refuse("unknown message type %u", h.type);
	if (h.payload_len > WIRE_MAX_PAYLOAD)
		return wire_refuse("payload of %u bytes exceeds %u", h.payload_len,
				   WIRE_MAX_PAYLOAD);
	*out = h;
	return 0;
}

/*
 * Payload size for the given counts; false on size_t overflow.  The counts
 * come from the network, so the arithmetic is checked even though the hard
 * limits keep it far below SIZE_MAX on 64-bit hosts.
 */
static bool desc_size_for(uint32_t n_nics, uint32_t n_regions, size_t *out)
{
	size_t nics, per_region, regions, total;

	if (__builtin_mul_overflow((size_t)n_nics, (size_t)DESC_NIC_LEN, &nics) ||
	    __builtin_mul_overflow((size_t)n_nics, (size_t)4, &per_region) ||
	    __builtin_add_overflow(per_region, (size_t)DESC_REGION_LEN, &per_region) ||
	    __builtin_mul_overflow((size_t)n_regions, per_region, &regions) ||
	    __builtin_add_overflow((size_t)DESC_HDR_LEN, nics, &total) ||
	    __builtin_add_overflow(total, regions, &total))
		return false;
	*out = total;
	return true;
}

size_t wire_desc_size(const struct seg_desc *d)
{
	size_t n;

	if (!desc_size_for(d->n_nics, d->n_regions, &n))
		return SIZE_MAX;
	return n;
}

static const char *desc_counts_invalid(uint32_t n_nics, uint32_t n_regions)
{
	if (n_nics == 0)
		return "no NIC";
	if (n_nics > WIRE_MAX_NICS)
		return "too many NICs";
	if (n_regions > WIRE_MAX_REGIONS)
		return "too many regions";
	return NULL;
}

/* Region i must be non-empty, not wrap, and start at or after region i-1's end. */
static const char *region_invalid(const struct seg_region *r, uint32_t i)
{
	const struct seg_region *prev = i ? r - 1 : NULL;

	if (r->len == 0)
		return "zero length";
	if (r->access & ~NIC_ACCESS_ALL)
		return "unknown access bits";
	/* An end of exactly 2^64 is refused too: it is not representable. */
	if (r->len > UINT64_MAX - r->addr)
		return "wraps around the address space";
	if (prev && r->addr < prev->addr)
		return "not sorted by address";
	if (prev && r->addr < prev->addr + prev->len)
		return "overlaps the previous one";
	return NULL;
}

/* Why a caller's provider name cannot be sent, or NULL.  Bytes after its
 * NUL do not matter: the encoder pads with zeros. */
static const char *name_invalid(const char *name)
{
	size_t n = strnlen(name, WIRE_PROVIDER_LEN);

	if (n == 0)
		return "empty";
	if (n == WIRE_PROVIDER_LEN)
		return "not NUL-terminated";
	return NULL;
}

/*
 * Why a received 16-byte provider field is refused, or NULL.  Besides the
 * terminating NUL, the padding must be zero: that keeps the encoding
 * canonical (decode then encode gives back the same bytes), which the fuzz
 * target relies on.
 */
static const char *provider_invalid(const uint8_t *p)
{
	const char *why = name_invalid((const char *)p);
	size_t k;

	if (why)
		return why;
	for (k = strlen((const char *)p); k < WIRE_PROVIDER_LEN; k++)
		if (p[k])
			return "padding not zero";
	return NULL;
}

/*
 * Check what both sides must agree on: counts, provider names, regions.
 * Returns 0, or -EPROTO after logging the reason.
 */
static int desc_check(const struct seg_desc *d)
{
	const char *why;
	uint32_t i;

	why = desc_counts_invalid(d->n_nics, d->n_regions);
	if (why)
		return wire_refuse("descriptor: %s (%u NICs, %u regions)", why, d->n_nics,
				   d->n_regions);
	for (i = 0; i < d->n_nics; i++) {
		why = name_invalid(d->nics[i].provider);
		if (why)
			return wire_refuse("descriptor: NIC %u provider name %s", i, why);
	}
	if (d->n_regions && !d->regions)
		return wire_refuse("descriptor: %u regions but no array", d->n_regions);
	for (i = 0; i < d->n_regions; i++) {
		why = region_invalid(&d->regions[i], i);
		if (why)
			return wire_refuse("descriptor: region %u (addr 0x%llx len 0x%llx) %s", i,
					   (unsigned long long)d->regions[i].addr,
					   (unsigned long long)d->regions[i].len, why);
	}
	return 0;
}

static void nic_encode(const struct seg_nic *nic, uint8_t *p)
{
	size_t n = strnlen(nic->provider, WIRE_PROVIDER_LEN);

	/* NUL-pad: bytes after the name in the caller's buffer may be garbage. */
	memset(p, 0, WIRE_PROVIDER_LEN);
	memcpy(p, nic->provider, n);
	memcpy(p + WIRE_PROVIDER_LEN, nic->addr.bytes, NIC_ADDR_LEN);
}

static uint8_t *desc_encode_region(const struct seg_region *r, uint16_t n_nics, uint8_t *p)
{
	uint16_t k;

	put_le64(p, r->addr);
	put_le64(p + 8, r->len);
	put_le32(p + 16, r->access);
	put_le32(p + 20, 0); /* reserved */
	p += DESC_REGION_LEN;
	for (k = 0; k < n_nics; k++, p += 4)
		put_le32(p, r->rkey[k]);
	return p;
}

int wire_desc_encode(const struct seg_desc *d, uint8_t *buf, size_t cap)
{
	uint8_t *p = buf;
	size_t size;
	uint32_t i;

	/* Never send what the peer's decoder would refuse. */
	if (desc_check(d))
		return -EINVAL;
	size = wire_desc_size(d);
	if (size > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (size > cap)
		return -ENOSPC;

	put_le64(p, d->incarnation);
	put_le16(p + 8, d->n_nics);
	put_le16(p + 10, 0); /* reserved */
	put_le32(p + 12, d->n_regions);
	p += DESC_HDR_LEN;
	for (i = 0; i < d->n_nics; i++, p += DESC_NIC_LEN)
		nic_encode(&d->nics[i], p);
	for (i = 0; i < d->n_regions; i++)
		p = desc_encode_region(&d->regions[i], d->n_nics, p);
	return 0;
}

/* Copy a NIC entry whose provider field passed provider_invalid(). */
static void nic_decode(const uint8_t *p, struct seg_nic *nic)
{
	memcpy(nic->provider, p, WIRE_PROVIDER_LEN);
	memcpy(nic->addr.bytes, p + WIRE_PROVIDER_LEN, NIC_ADDR_LEN);
}

static int desc_decode_nic(const uint8_t *p, uint32_t i, struct seg_nic *nic)
{
	const char *why = provider_invalid(p);

	if (why)
		return wire_refuse("descriptor: NIC %u provider name %s", i, why);
	nic_decode(p, nic);
	return 0;
}

static const uint8_t *desc_decode_region(const uint8_t *p, uint16_t n_nics, struct seg_region *r,
					 bool *reserved_set)
{
	uint16_t k;

	r->addr = get_le64(p);
	r->len = get_le64(p + 8);
	r->access = get_le32(p + 16);
	*reserved_set |= get_le32(p + 20) != 0;
	p += DESC_REGION_LEN;
	for (k = 0; k < n_nics; k++, p += 4)
		r->rkey[k] = get_le32(p);
	return p;
}

/* Check the fixed part and that len is exactly what the counts imply. */
static int desc_decode_hdr(const uint8_t *buf, size_t len, struct seg_desc *out)
{
	uint16_t reserved;
	const char *why;
	size_t need;

	if (len < DESC_HDR_LEN)
		return wire_refuse("descriptor truncated (%zu bytes)", len);
	out->incarnation = get_le64(buf);
	out->n_nics = get_le16(buf + 8);
	reserved = get_le16(buf + 10);
	out->n_regions = get_le32(buf + 12);

	if (reserved)
		return wire_refuse("descriptor: reserved field 0x%04x not zero", reserved);
	why = desc_counts_invalid(out->n_nics, out->n_regions);
	if (why)
		return wire_refuse("descriptor: %s (%u NICs, %u regions)", why, out->n_nics,
				   out->n_regions);
	if (!desc_size_for(out->n_nics, out->n_regions, &need) || need != len)
		return wire_refuse("descriptor: %zu bytes, counts imply %zu", len, need);
	return 0;
}

static int desc_decode_body(const uint8_t *buf, struct seg_desc *out)
{
	const uint8_t *p = buf + DESC_HDR_LEN;
	bool reserved = false;
	uint32_t i;
	int rc;

	for (i = 0; i < out->n_nics; i++, p += DESC_NIC_LEN) {
		rc = desc_decode_nic(p, i, &out->nics[i]);
		if (rc)
			return rc;
	}
	if (out->n_regions) {
		/* Safe to allocate: the length check proved the bytes are there. */
		out->regions = calloc(out->n_regions, sizeof(*out->regions));
		if (!out->regions)
			return -ENOMEM;
	}
	for (i = 0; i < out->n_regions; i++)
		p = desc_decode_region(p, out->n_nics, &out->regions[i], &reserved);
	if (reserved)
		return wire_refuse("descriptor: a region's reserved field is not zero");
	return desc_check(out);
}

int wire_desc_decode(const uint8_t *buf, size_t len, struct seg_desc *out)
{
	int rc;

	/* Zeroed first, so seg_desc_free is safe whatever happens below. */
	memset(out, 0, sizeof(*out));
	rc = desc_decode_hdr(buf, len, out);
	if (!rc)
		rc = desc_decode_body(buf, out);
	if (rc)
		seg_desc_free(out);
	return rc;
}

void seg_desc_free(struct seg_desc *d)
{
	if (!d)
		return;
	free(d->regions);
	/* The NICs it has, not the whole array: a kept copy ends after its
	 * n_nics (segment/open.c).  A refused decode may hold any count. */
	memset(d->nics, 0,
	       (d->n_nics < WIRE_MAX_NICS ? d->n_nics : WIRE_MAX_NICS) * sizeof(d->nics[0]));
	memset(d, 0, offsetof(struct seg_desc, nics));
}

/* ---- endpoint handshake ---------------------------------------------- */

static const char *n_qps_invalid(uint16_t n_qps)
{
	if (n_qps == 0)
		return "no QP";
	if (n_qps > WIRE_MAX_EP_QPS)
		return "too many QPs";
	return NULL;
}

static void qps_encode(const struct nic_qp_info *qps, uint16_t n, uint8_t *p)
{
	uint16_t i;

	for (i = 0; i < n; i++, p += QP_INFO_LEN) {
		put_le32(p, qps[i].qpn);
		put_le32(p + 4, qps[i].psn);
		memcpy(p + 8, qps[i].secret, NIC_QP_SECRET_LEN);
	}
}

static void qps_decode(const uint8_t *p, uint16_t n, struct nic_qp_info *qps)
{
	uint16_t i;

	for (i = 0; i < n; i++, p += QP_INFO_LEN) {
		qps[i].qpn = get_le32(p);
		qps[i].psn = get_le32(p + 4);
		memcpy(qps[i].secret, p + 8, NIC_QP_SECRET_LEN);
	}
}

size_t wire_connect_req_size(const struct wire_connect_req *r)
{
	return CONN_REQ_FIXED_LEN + (size_t)r->n_qps * QP_INFO_LEN;
}

/* What the decoder checks on the values themselves; -EPROTO after logging. */
static int connect_req_check(const struct wire_connect_req *r)
{
	const char *why = n_qps_invalid(r->n_qps);

	if (why)
		return wire_refuse("connect request: %s (n_qps %u)", why, r->n_qps);
	why = name_invalid(r->nic.provider);
	if (why)
		return wire_refuse("connect request: provider name %s", why);
	return 0;
}

int wire_connect_req_encode(const struct wire_connect_req *r, uint8_t *buf, size_t cap)
{
	if (connect_req_check(r))
		return -EINVAL;
	if (wire_connect_req_size(r) > cap)
		return -ENOSPC;
	put_le64(buf, r->incarnation);
	put_le64(buf + 8, r->token);
	put_le64(buf + 16, r->target_incarnation);
	put_le16(buf + 24, r->target_nic);
	put_le16(buf + 26, r->n_qps);
	put_le32(buf + 28, 0); /* reserved */
	nic_encode(&r->nic, buf + CONN_REQ_HDR_LEN);
	qps_encode(r->qps, r->n_qps, buf + CONN_REQ_FIXED_LEN);
	return 0;
}

/*
 * target_nic is not range-checked here: only the target knows how many NICs
 * it has, and it answers an unknown one with a WIRE_ERROR the initiator can
 * report, where a refusal here would only close the connection.
 */
static int connect_req_decode(const uint8_t *buf, size_t len, struct wire_connect_req *r)
{
	uint32_t reserved;
	const char *why;

	if (len < CONN_REQ_FIXED_LEN)
		return wire_refuse("connect request truncated (%zu bytes)", len);
	r->incarnation = get_le64(buf);
	r->token = get_le64(buf + 8);
	r->target_incarnation = get_le64(buf + 16);
	r->target_nic = get_le16(buf + 24);
	r->n_qps = get_le16(buf + 26);
	reserved = get_le32(buf + 28);

	if (reserved)
		return wire_refuse("connect request: reserved field 0x%08x not zero", reserved);
	why = n_qps_invalid(r->n_qps);
	if (why)
		return wire_refuse("connect request: %s (n_qps %u)", why, r->n_qps);
	if (len != wire_connect_req_size(r))
		return wire_refuse("connect request: %zu bytes, n_qps %u implies %zu", len,
				   r->n_qps, wire_connect_req_size(r));
	why = provider_invalid(buf + CONN_REQ_HDR_LEN);
	if (why)
		return wire_refuse("connect request: provider name %s", why);
	nic_decode(buf + CONN_REQ_HDR_LEN, &r->nic);
	qps_decode(buf + CONN_REQ_FIXED_LEN, r->n_qps, r->qps);
	return 0;
}

int wire_connect_req_decode(const uint8_t *buf, size_t len, struct wire_connect_req *out)
{
	struct wire_connect_req r;
	int rc;

	/* Decoded aside, so a refusal leaves *out all zero, never half-filled. */
	memset(&r, 0, sizeof(r));
	memset(out, 0, sizeof(*out));
	rc = connect_req_decode(buf, len, &r);
	if (!rc)
		*out = r;
	return rc;
}

size_t wire_connect_rep_size(const struct wire_connect_rep *r)
{
	return CONN_REP_FIXED_LEN + (size_t)r->n_qps * QP_INFO_LEN;
}

int wire_connect_rep_encode(const struct wire_connect_rep *r, uint8_t *buf, size_t cap)
{
	const char *why = n_qps_invalid(r->n_qps);

	if (why) {
		(void)wire_refuse("connect reply: %s (n_qps %u)", why, r->n_qps);
		return -EINVAL;
	}
	if (wire_connect_rep_size(r) > cap)
		return -ENOSPC;
	put_le64(buf, r->token);
	put_le16(buf + 8, r->n_qps);
	put_le16(buf + 10, 0); /* reserved */
	put_le32(buf + 12, 0); /* reserved */
	qps_encode(r->qps, r->n_qps, buf + CONN_REP_FIXED_LEN);
	return 0;
}

static int connect_rep_decode(const uint8_t *buf, size_t len, struct wire_connect_rep *r)
{
	uint16_t reserved16;
	uint32_t reserved32;
	const char *why;

	if (len < CONN_REP_FIXED_LEN)
		return wire_refuse("connect reply truncated (%zu bytes)", len);
	r->token = get_le64(buf);
	r->n_qps = get_le16(buf + 8);
	reserved16 = get_le16(buf + 10);
	reserved32 = get_le32(buf + 12);

	if (reserved16 || reserved32)
		return wire_refuse("connect reply: reserved fields 0x%04x 0x%08x not zero",
				   reserved16, reserved32);
	why = n_qps_invalid(r->n_qps);
	if (why)
		return wire_refuse("connect reply: %s (n_qps %u)", why, r->n_qps);
	if (len != wire_connect_rep_size(r))
		return wire_refuse("connect reply: %zu bytes, n_qps %u implies %zu", len,
				   r->n_qps, wire_connect_rep_size(r));
	qps_decode(buf + CONN_REP_FIXED_LEN, r->n_qps, r->qps);
	return 0;
}

int wire_connect_rep_decode(const uint8_t *buf, size_t len, struct wire_connect_rep *out)
{
	struct wire_connect_rep r;
	int rc;

	memset(&r, 0, sizeof(r));
	memset(out, 0, sizeof(*out));
	rc = connect_rep_decode(buf, len, &r);
	if (!rc)
		*out = r;
	return rc;
}

int wire_disconnect_encode(const struct wire_disconnect *d, uint8_t *buf, size_t cap)
{
	if (cap < WIRE_DISCONNECT_LEN)
		return -ENOSPC;
	put_le64(buf, d->incarnation);
	put_le64(buf + 8, d->token);
	return 0;
}

int wire_disconnect_decode(const uint8_t *buf, size_t len, struct wire_disconnect *out)
{
	memset(out, 0, sizeof(*out));
	if (len != WIRE_DISCONNECT_LEN)
		return wire_refuse("disconnect: %zu bytes, want %d", len, WIRE_DISCONNECT_LEN);
	out->incarnation = get_le64(buf);
	out->token = get_le64(buf + 8);
	return 0;
}

/* ---- notifications --------------------------------------------------- */

static bool notify_from_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '-' || ch == ':';
}

/* from's length if it is a valid sender, else 0. */
static size_t notify_from_len(const char *from, size_t max)
{
	size_t n = 0;

	while (n < max && from[n]) {
		if (!notify_from_char(from[n]))
			return 0;
		n++;
	}
	return n <= WIRE_NOTIFY_FROM_MAX ? n : 0;
}

size_t wire_notify_size(const struct wire_notify *n)
{
	return WIRE_NOTIFY_FIXED_LEN + strnlen(n->from, sizeof(n->from)) + n->len;
}

int wire_notify_encode(const struct wire_notify *n, uint8_t *buf, size_t cap)
{
	size_t flen = notify_from_len(n->from, sizeof(n->from));

	if (flen == 0 || n->len > WIRE_NOTIFY_MAX)
		return -EINVAL;
	if (cap < WIRE_NOTIFY_FIXED_LEN + flen + n->len)
		return -ENOSPC;
	buf[0] = (uint8_t)flen;
	buf[1] = 0; /* reserved */
	put_le16(buf + 2, n->len);
	put_le32(buf + 4, 0); /* reserved */
	memcpy(buf + WIRE_NOTIFY_FIXED_LEN, n->from, flen);
	if (n->len)
		memcpy(buf + WIRE_NOTIFY_FIXED_LEN + flen, n->msg, n->len);
	return 0;
}

int wire_notify_decode(const uint8_t *buf, size_t len, struct wire_notify *out)
{
	size_t flen, mlen;

	memset(out, 0, sizeof(*out));
	if (len < WIRE_NOTIFY_FIXED_LEN)
		return wire_refuse("notify: %zu bytes, at least %u", len, WIRE_NOTIFY_FIXED_LEN);
	flen = buf[0];
	mlen = get_le16(buf + 2);
	if (buf[1] || get_le32(buf + 4))
		return wire_refuse("notify: reserved bytes set");
	if (flen == 0 || flen > WIRE_NOTIFY_FROM_MAX || mlen > WIRE_NOTIFY_MAX)
		return wire_refuse("notify: from of %zu or message of %zu bytes", flen, mlen);
	if (len != WIRE_NOTIFY_FIXED_LEN + flen + mlen)
		return wire_refuse("notify: %zu bytes, want %zu", len, WIRE_NOTIFY_FIXED_LEN + flen + mlen);
	memcpy(out->from, buf + WIRE_NOTIFY_FIXED_LEN, flen);
	if (notify_from_len(out->from, flen) != flen) {
		memset(out, 0, sizeof(*out));
		return wire_refuse("notify: the sender's name has a bad character");
	}
	out->len = (uint16_t)mlen;
	if (mlen)
		memcpy(out->msg, buf + WIRE_NOTIFY_FIXED_LEN + flen, mlen);
	return 0;
}

size_t wire_notify_to_size(const struct wire_notify *n)
{
	return 8 + wire_notify_size(n);
}

int wire_notify_to_encode(const struct wire_notify *n, uint8_t *buf, size_t cap)
{
	if (!n->to_incarnation)
		return -EINVAL;
	if (cap < 8)
		return -ENOSPC;
	put_le64(buf, n->to_incarnation);
	return wire_notify_encode(n, buf + 8, cap - 8);
}

int wire_notify_to_decode(const uint8_t *buf, size_t len, struct wire_notify *out)
{
	uint64_t inc;
	int rc;

	memset(out, 0, sizeof(*out));
	if (len < 8)
		return wire_refuse("notify_to: %zu bytes, at least %u", len, 8 + WIRE_NOTIFY_FIXED_LEN);
	inc = get_le64(buf);
	if (!inc)
		return wire_refuse("notify_to: incarnation 0");
	rc = wire_notify_decode(buf + 8, len - 8, out);
	if (!rc)
		out->to_incarnation = inc;
	return rc;
}

/* ---- authentication ------------------------------------------------- */

int wire_auth_hello_encode(const struct wire_auth_hello *h, uint8_t *buf, size_t cap)
{
	if (h->alg != WIRE_AUTH_ALG && h->alg != WIRE_AUTH_ALG_V1)
		return -EINVAL;
	if (cap < WIRE_AUTH_HELLO_LEN)
		return -ENOSPC;
	put_le16(buf, h->alg);
	put_le16(buf + 2, 0); /* reserved */
	put_le32(buf + 4, 0); /* reserved */
	memcpy(buf + 8, h->nonce, WIRE_AUTH_NONCE_LEN);
	return 0;
}

static int auth_hello_decode(const uint8_t *buf, size_t len, struct wire_auth_hello *h)
{
	uint16_t reserved16;
	uint32_t reserved32;

	if (len != WIRE_AUTH_HELLO_LEN)
		return wire_refuse("auth hello: %zu bytes, want %d", len, WIRE_AUTH_HELLO_LEN);
	h->alg = get_le16(buf);
	reserved16 = get_le16(buf + 2);
	reserved32 = get_le32(buf + 4);
	/* Version 1 decodes, so that the caller can say "upgrade it". */
	if (h->alg != WIRE_AUTH_ALG && h->alg != WIRE_AUTH_ALG_V1)
		return wire_refuse("auth hello: algorithm %u, this side knows %d", h->alg,
				   WIRE_AUTH_ALG);
	if (reserved16 || reserved32)
		return wire_refuse("auth hello: reserved fields 0x%04x 0x%08x not zero", reserved16,
				   reserved32);
	memcpy(h->nonce, buf + 8, WIRE_AUTH_NONCE_LEN);
	return 0;
}

int wire_auth_hello_decode(const uint8_t *buf, size_t len, struct wire_auth_hello *out)
{
	struct wire_auth_hello h;
	int rc;

	memset(&h, 0, sizeof(h));
	memset(out, 0, sizeof(*out));
	rc = auth_hello_decode(buf, len, &h);
	if (!rc)
		*out = h;
	return rc;
}

int wire_auth_proof_encode(const struct wire_auth_proof *p, uint8_t *buf, size_t cap)
{
	if (cap < WIRE_AUTH_PROOF_LEN)
		return -ENOSPC;
	memcpy(buf, p->mac, WIRE_AUTH_MAC_LEN);
	return 0;
}

int wire_auth_proof_decode(const uint8_t *buf, size_t len, struct wire_auth_proof *out)
{
	memset(out, 0, sizeof(*out));
	if (len != WIRE_AUTH_PROOF_LEN)
		return wire_refuse("auth proof: %zu bytes, want %d", len, WIRE_AUTH_PROOF_LEN);
	memcpy(out->mac, buf, WIRE_AUTH_MAC_LEN);
	return 0;
}

/* True if [addr, addr + len) lies inside r; written to not overflow. */
static bool region_contains(const struct seg_region *r, uint64_t addr, uint64_t len)
{
	uint64_t off;

	if (addr < r->addr)
		return false;
	off = addr - r->addr;
	return off < r->len && len <= r->len - off;
}

const struct seg_region *seg_desc_find(const struct seg_desc *d, uint64_t addr, uint64_t len)
{
	uint32_t lo = 0, hi, mid;

	if (!d || !d->regions || len == 0 || len > UINT64_MAX - addr)
		return NULL;
	/* Find the last region starting at or before addr. */
	hi = d->n_regions;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (d->regions[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	return region_contains(&d->regions[lo - 1], addr, len) ? &d->regions[lo - 1] : NULL;
}
