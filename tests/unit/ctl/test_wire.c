/* SPDX-License-Identifier: MIT */
/*
 * Wire format: round trips, every malformed case refused with one logged
 * line, seg_desc_find edges, and deterministic mutation loops that must
 * never crash (run them under ASan+UBSan), for the descriptor and for the
 * endpoint handshake messages (CONNECT_REQ, CONNECT_REP, DISCONNECT).
 *
 * Malformed payloads are built by hand (raw_*) rather than with the encoder,
 * so the encoder is checked against an independent writer of the layout.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "runtime/ctl/wire.h"

#define NIC_LEN (WIRE_PROVIDER_LEN + NIC_ADDR_LEN)

/* ---- helpers --------------------------------------------------------- */

static void le(uint8_t *p, uint64_t v, int bytes)
{
	int i;

	for (i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static size_t raw_size(uint32_t n_nics, uint32_t n_regions)
{
	return 16 + (size_t)n_nics * NIC_LEN + (size_t)n_regions * (24 + 4 * (size_t)n_nics);
}

/* Offset of region i's addr field in a raw payload. */
static size_t raw_region_off(uint32_t n_nics, uint32_t i)
{
	return raw_size(n_nics, i);
}

/*
 * A valid payload written by hand: NIC k is "nic<k>", region i is at
 * 0x10000 * (i + 1) with length 0x1000 * (i % 15 + 1), access i & 3, rkey i * 1000 + k.
 */
static uint8_t *raw_build(uint32_t n_nics, uint32_t n_regions, size_t *len)
{
	size_t n = raw_size(n_nics, n_regions);
	uint8_t *b = calloc(1, n), *p;
	uint32_t i, k;

	assert_non_null(b);
	le(b, 0x1122334455667788ull, 8);
	le(b + 8, n_nics, 2);
	le(b + 12, n_regions, 4);
	p = b + 16;
	for (k = 0; k < n_nics; k++, p += NIC_LEN) {
		snprintf((char *)p, WIRE_PROVIDER_LEN, "nic%u", k);
		memset(p + WIRE_PROVIDER_LEN, (int)(0xa0 + k), NIC_ADDR_LEN);
	}
	for (i = 0; i < n_regions; i++) {
		le(p, 0x10000ull * (i + 1), 8);
		le(p + 8, 0x1000ull * (i % 15 + 1), 8);
		le(p + 16, i & 3, 4);
		p += 24;
		for (k = 0; k < n_nics; k++, p += 4)
			le(p, i * 1000 + k, 4);
	}
	*len = n;
	return b;
}

static void make_desc(struct seg_desc *d, uint16_t n_nics, uint32_t n_regions)
{
	uint32_t i, k;

	memset(d, 0, sizeof(*d));
	d->incarnation = 0x1122334455667788ull;
	d->n_nics = n_nics;
	d->n_regions = n_regions;
	for (k = 0; k < n_nics && k < WIRE_MAX_NICS; k++) {
		snprintf(d->nics[k].provider, WIRE_PROVIDER_LEN, "nic%u", k);
		memset(d->nics[k].addr.bytes, (int)(0xa0 + k), NIC_ADDR_LEN);
	}
	d->regions = n_regions ? calloc(n_regions, sizeof(*d->regions)) : NULL;
	for (i = 0; i < n_regions; i++) {
		d->regions[i].addr = 0x10000ull * (i + 1);
		d->regions[i].len = 0x1000ull * (i % 15 + 1);
		d->regions[i].access = i & 3;
		for (k = 0; k < n_nics && k < WIRE_MAX_NICS; k++)
			d->regions[i].rkey[k] = i * 1000 + k;
	}
}

static void assert_desc_equal(const struct seg_desc *a, const struct seg_desc *b)
{
	uint32_t i;

	assert_int_equal(a->incarnation, b->incarnation);
	assert_int_equal(a->n_nics, b->n_nics);
	assert_int_equal(a->n_regions, b->n_regions);
	for (i = 0; i < a->n_nics; i++) {
		assert_string_equal(a->nics[i].provider, b->nics[i].provider);
		assert_memory_equal(a->nics[i].addr.bytes, b->nics[i].addr.bytes, NIC_ADDR_LEN);
	}
	for (i = 0; i < a->n_regions; i++) {
		assert_int_equal(a->regions[i].addr, b->regions[i].addr);
		assert_int_equal(a->regions[i].len, b->regions[i].len);
		assert_int_equal(a->regions[i].access, b->regions[i].access);
		assert_memory_equal(a->regions[i].rkey, b->regions[i].rkey,
				    a->n_nics * sizeof(uint32_t));
	}
}

/* Every payload decoder behind one signature, so refusals are checked alike. */
struct codec {
	const char *name;
	size_t out_size;
	int (*decode)(const uint8_t *buf, size_t len, void *out);
};

static int dec_desc(const uint8_t *buf, size_t len, void *out)
{
	return wire_desc_decode(buf, len, out);
}

static int dec_req(const uint8_t *buf, size_t len, void *out)
{
	return wire_connect_req_decode(buf, len, out);
}

static int dec_rep(const uint8_t *buf, size_t len, void *out)
{
	return wire_connect_rep_decode(buf, len, out);
}

static int dec_disc(const uint8_t *buf, size_t len, void *out)
{
	return wire_disconnect_decode(buf, len, out);
}

static const struct codec DESC = { "desc", sizeof(struct seg_desc), dec_desc };
static const struct codec REQ = { "connect_req", sizeof(struct wire_connect_req), dec_req };
static const struct codec REP = { "connect_rep", sizeof(struct wire_connect_rep), dec_rep };
static const struct codec DISC = { "disconnect", sizeof(struct wire_disconnect), dec_disc };

/* Decode from an exactly-sized heap copy, so ASan sees any over-read. */
static int decode_exact_as(const struct codec *k, const uint8_t *buf, size_t len, void *out)
{
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	memcpy(copy, buf, len);
	rc = k->decode(copy, len, out);
	free(copy);
	return rc;
}

static int decode_exact(const uint8_t *buf, size_t len, struct seg_desc *out)
{
	return decode_exact_as(&DESC, buf, len, out);
}

static int stderr_to(int fd)
{
	int saved;

	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0);
	assert_true(dup2(fd, 2) == 2);
	return saved;
}

static void stderr_restore(int saved)
{
	fflush(stderr);
	assert_true(dup2(saved, 2) == 2);
	close(saved);
}

/* Room for any decoder's output. */
union any_out {
	struct seg_desc desc;
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct wire_disconnect disc;
};

/*
 * Decode buf and expect -EPROTO with exactly one "ferry: wire: refused: "
 * line on stderr, and out left zeroed (safe to free) even though it held
 * garbage before.
 */
static void expect_refused_as(const struct codec *k, const uint8_t *buf, size_t len)
{
	static const union any_out zero;
	static char text[4096];
	union any_out out;
	FILE *tmp = tmpfile();
	size_t n;
	int saved, rc;

	assert_non_null(tmp);
	memset(&out, 0xa5, sizeof(out));
	saved = stderr_to(fileno(tmp));
	rc = decode_exact_as(k, buf, len, &out);
	stderr_restore(saved);
	rewind(tmp);
	n = fread(text, 1, 4095, tmp);
	text[n] = '\0';
	fclose(tmp);

	if (rc != -EPROTO)
		print_error("%s: %zu bytes: rc %d, not refused\n", k->name, len, rc);
	assert_int_equal(rc, -EPROTO);
	assert_memory_equal(&out, &zero, k->out_size);
	assert_true(strncmp(text, "ferry: wire: refused: ", 22) == 0);
	assert_non_null(strchr(text, '\n'));
	assert_true(strchr(text, '\n') == text + n - 1);
}

static void expect_refused(const uint8_t *buf, size_t len)
{
	expect_refused_as(&DESC, buf, len);
}

static void expect_refused_free(uint8_t *buf, size_t len)
{
	expect_refused(buf, len);
	free(buf);
}

/* ---- header ---------------------------------------------------------- */

static void test_hdr_roundtrip(void **state)
{
	uint8_t b[WIRE_HDR_LEN];
	struct wire_hdr h;

	(void)state;
	wire_hdr_encode(b, WIRE_DESC, 1234);
	/* The documented layout, byte for byte. */
	assert_memory_equal(b, "FRY1\x02\x00\x02\x00\xd2\x04\x00\x00", WIRE_HDR_LEN);
	assert_int_equal(wire_hdr_decode(b, sizeof(b), &h), 0);
	assert_int_equal(h.magic, WIRE_MAGIC);
	assert_int_equal(h.version, WIRE_VERSION);
	assert_int_equal(h.type, WIRE_DESC);
	assert_int_equal(h.payload_len, 1234);

	wire_hdr_encode(b, WIRE_GET_DESC, WIRE_MAX_PAYLOAD);
	assert_int_equal(wire_hdr_decode(b, sizeof(b), &h), 0);
	assert_int_equal(h.payload_len, WIRE_MAX_PAYLOAD);

	/* Every type of version 2, by its number on the wire. */
	for (uint16_t t = 1; t <= 11; t++) {
		wire_hdr_encode(b, t, 16);
		assert_int_equal(wire_hdr_decode(b, sizeof(b), &h), 0);
		assert_int_equal(h.type, t);
	}
	assert_int_equal(WIRE_CONNECT_REQ, 4);
	assert_int_equal(WIRE_DISCONNECT_REP, 7);
	assert_int_equal(WIRE_KEEPALIVE_REP, 9);
	assert_int_equal(WIRE_AUTH_HELLO, 10);
	assert_int_equal(WIRE_AUTH_PROOF, 11);
}

static int hdr_decode_quiet(const uint8_t *b, size_t len)
{
	struct wire_hdr h;
	int fd = open("/dev/null", O_WRONLY);
	int saved, rc;

	assert_true(fd >= 0);
	saved = stderr_to(fd);
	rc = wire_hdr_decode(b, len, &h);
	stderr_restore(saved);
	close(fd);
	return rc;
}

static void test_hdr_refused(void **state)
{
	uint8_t b[WIRE_HDR_LEN], m[WIRE_HDR_LEN];
	size_t len;

	(void)state;
	wire_hdr_encode(b, WIRE_GET_DESC, 0);
	for (len = 0; len < WIRE_HDR_LEN; len++)
		assert_int_equal(hdr_decode_quiet(b, len), -EPROTO);

	memcpy(m, b, sizeof(m));
	m[3] ^= 0x01; /* magic */
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);

	memcpy(m, b, sizeof(m));
	le(m + 4, 0, 2); /* version 0 */
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);
	le(m + 4, WIRE_VERSION + 1, 2); /* a newer peer */
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTONOSUPPORT);
	le(m + 4, 0xffff, 2);
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTONOSUPPORT);

	memcpy(m, b, sizeof(m));
	le(m + 6, 0, 2); /* type */
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);
	le(m + 6, WIRE_TYPE_LAST + 1, 2); /* past the last type */
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);
	le(m + 6, 0xffff, 2);
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);

	memcpy(m, b, sizeof(m));
	le(m + 8, WIRE_MAX_PAYLOAD + 1ull, 4);
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);
	le(m + 8, 0xffffffffull, 4);
	assert_int_equal(hdr_decode_quiet(m, sizeof(m)), -EPROTO);
}

/* ---- descriptor round trips ------------------------------------------ */

static void roundtrip(uint16_t n_nics, uint32_t n_regions)
{
	struct seg_desc d, out;
	uint8_t *buf, *raw, *again;
	size_t size, raw_len;

	make_desc(&d, n_nics, n_regions);
	size = wire_desc_size(&d);
	raw = raw_build(n_nics, n_regions, &raw_len);
	assert_int_equal(size, raw_len);

	buf = malloc(size);
	again = malloc(size);
	assert_non_null(buf);
	assert_non_null(again);
	assert_int_equal(wire_desc_encode(&d, buf, size), 0);
	/* The encoder writes exactly the layout the hand-written builder does. */
	assert_memory_equal(buf, raw, size);

	assert_int_equal(decode_exact(buf, size, &out), 0);
	assert_desc_equal(&d, &out);
	/* Canonical: decode then encode gives the same bytes. */
	assert_int_equal(wire_desc_encode(&out, again, size), 0);
	assert_memory_equal(buf, again, size);

	seg_desc_free(&out);
	seg_desc_free(&d);
	free(buf);
	free(again);
	free(raw);
}

static void test_desc_roundtrip(void **state)
{
	(void)state;
	roundtrip(3, 5);
	roundtrip(1, 0);
	roundtrip(1, 1);
	roundtrip(WIRE_MAX_NICS, 17);
	roundtrip(2, 1000);
}

static void test_desc_max_regions(void **state)
{
	static struct seg_desc d;
	struct seg_desc out;
	uint8_t *b;
	size_t len;

	(void)state;
	b = raw_build(1, WIRE_MAX_REGIONS, &len);
	assert_int_equal(decode_exact(b, len, &out), 0);
	assert_int_equal(out.n_regions, WIRE_MAX_REGIONS);
	seg_desc_free(&out);
	free(b);

	b = raw_build(1, WIRE_MAX_REGIONS + 1, &len);
	expect_refused_free(b, len);

	/* The most of both: what WIRE_DESC_MAX_LEN (a reply's limit) says. */
	d.n_nics = WIRE_MAX_NICS;
	d.n_regions = WIRE_MAX_REGIONS;
	assert_int_equal(wire_desc_size(&d), WIRE_DESC_MAX_LEN);
}

static void test_desc_encode_errors(void **state)
{
	struct seg_desc d;
	uint8_t buf[4096];
	size_t size;
	int fd = open("/dev/null", O_WRONLY);
	int saved;

	(void)state;
	assert_true(fd >= 0);
	make_desc(&d, 2, 3);
	size = wire_desc_size(&d);
	assert_true(size <= sizeof(buf));
	assert_int_equal(wire_desc_encode(&d, buf, size - 1), -ENOSPC);
	assert_int_equal(wire_desc_encode(&d, buf, 0), -ENOSPC);

	/* Garbage after the NUL in the caller's buffer is not sent. */
	memset(d.nics[0].provider, 'x', WIRE_PROVIDER_LEN);
	memcpy(d.nics[0].provider, "ab", 3);
	assert_int_equal(wire_desc_encode(&d, buf, size), 0);
	assert_memory_equal(buf + 16, "ab\0\0\0\0\0\0\0\0\0\0\0\0\0\0", WIRE_PROVIDER_LEN);

	saved = stderr_to(fd);
	/* What a peer would refuse is not encoded. */
	memset(d.nics[0].provider, 'x', WIRE_PROVIDER_LEN);
	assert_int_equal(wire_desc_encode(&d, buf, size), -EINVAL);
	d.nics[0].provider[0] = '\0';
	assert_int_equal(wire_desc_encode(&d, buf, size), -EINVAL);
	strcpy(d.nics[0].provider, "loop");
	d.regions[2].addr = d.regions[0].addr;
	assert_int_equal(wire_desc_encode(&d, buf, size), -EINVAL);
	d.regions[2].addr = 0x30000;
	d.regions[1].len = 0;
	assert_int_equal(wire_desc_encode(&d, buf, size), -EINVAL);
	d.regions[1].len = 1;
	{
		struct seg_region *keep = d.regions;

		d.regions = NULL; /* counts say 3, but there is no array */
		assert_int_equal(wire_desc_encode(&d, buf, size), -EINVAL);
		d.regions = keep;
	}
	d.n_nics = 0;
	assert_int_equal(wire_desc_encode(&d, buf, sizeof(buf)), -EINVAL);
	d.n_nics = WIRE_MAX_NICS + 1;
	assert_int_equal(wire_desc_encode(&d, buf, sizeof(buf)), -EINVAL);
	stderr_restore(saved);
	close(fd);
	seg_desc_free(&d);

	/* The largest descriptor the limits allow fits in one frame. */
	make_desc(&d, WIRE_MAX_NICS, WIRE_MAX_REGIONS);
	assert_true(wire_desc_size(&d) <= WIRE_MAX_PAYLOAD);
	seg_desc_free(&d);

	/* Sizes that would overflow are reported as SIZE_MAX, not wrapped. */
	memset(&d, 0, sizeof(d));
	d.n_nics = UINT16_MAX;
	d.n_regions = UINT32_MAX;
	assert_true(wire_desc_size(&d) > WIRE_MAX_PAYLOAD);
}

/* ---- descriptor refusals --------------------------------------------- */

static void test_desc_truncated(void **state)
{
	uint8_t *b;
	size_t len, n;

	(void)state;
	b = raw_build(3, 4, &len);
	for (n = 0; n < len; n++)
		expect_refused(b, n);
	free(b);
}

static void test_desc_trailing(void **state)
{
	uint8_t *b, *big;
	size_t len, extra;

	(void)state;
	b = raw_build(2, 3, &len);
	big = calloc(1, len + 64);
	assert_non_null(big);
	memcpy(big, b, len);
	for (extra = 1; extra <= 64; extra++)
		expect_refused(big, len + extra);
	/* A whole extra region's worth of bytes is refused too. */
	expect_refused(big, len + 16 + 2 * 4);
	free(big);
	free(b);
}

static void test_desc_counts(void **state)
{
	uint8_t *b;
	size_t len;

	(void)state;
	/* n_nics 0: a payload of the implied size (just the fixed part). */
	b = raw_build(1, 0, &len);
	le(b + 8, 0, 2);
	expect_refused(b, 16);
	free(b);

	/* n_nics one above the limit, with a payload of the implied size. */
	b = raw_build(WIRE_MAX_NICS + 1, 2, &len);
	expect_refused_free(b, len);

	b = raw_build(1, 1, &len);
	le(b + 8, 0xffff, 2);
	expect_refused(b, len);
	le(b + 8, 1, 2);
	le(b + 12, 0xffffffffull, 4); /* counts claim far more than is there */
	expect_refused(b, len);
	le(b + 12, 2, 4);
	expect_refused(b, len);
	le(b + 12, 0, 4);
	expect_refused(b, len);
	free(b);
}

static void test_desc_reserved(void **state)
{
	uint8_t *b;
	size_t len;

	(void)state;
	b = raw_build(2, 2, &len);
	le(b + 10, 1, 2);
	expect_refused(b, len);
	le(b + 10, 0x8000, 2);
	expect_refused(b, len);
	free(b);
}

static void test_desc_provider(void **state)
{
	uint8_t *b, *name;
	size_t len;

	(void)state;
	b = raw_build(3, 1, &len);
	name = b + 16 + NIC_LEN; /* NIC 1 */

	memset(name, 'v', WIRE_PROVIDER_LEN); /* no NUL within 16 bytes */
	expect_refused(b, len);
	memset(name, 0, WIRE_PROVIDER_LEN); /* empty */
	expect_refused(b, len);
	memcpy(name, "verbs\0\0\0\0\0\0\0\0\0x", WIRE_PROVIDER_LEN); /* garbage padding */
	expect_refused(b, len);
	memcpy(name, "verbs", 6);
	memset(name + 6, 0, WIRE_PROVIDER_LEN - 6);
	{
		struct seg_desc out;

		assert_int_equal(decode_exact(b, len, &out), 0);
		assert_string_equal(out.nics[1].provider, "verbs");
		seg_desc_free(&out);
	}
	memset(name, 'v', WIRE_PROVIDER_LEN - 1); /* 15 chars + NUL: longest valid */
	name[WIRE_PROVIDER_LEN - 1] = '\0';
	{
		struct seg_desc out;

		assert_int_equal(decode_exact(b, len, &out), 0);
		assert_int_equal(strlen(out.nics[1].provider), WIRE_PROVIDER_LEN - 1);
		seg_desc_free(&out);
	}
	free(b);
}

/* Set region i of a 1-NIC raw payload. */
static void raw_set_region(uint8_t *b, uint32_t i, uint64_t addr, uint64_t len)
{
	size_t off = raw_region_off(1, i);

	le(b + off, addr, 8);
	le(b + off + 8, len, 8);
}

static void expect_regions(uint64_t a0, uint64_t l0, uint64_t a1, uint64_t l1, int ok)
{
	uint8_t *b;
	size_t len;

	b = raw_build(1, 2, &len);
	raw_set_region(b, 0, a0, l0);
	raw_set_region(b, 1, a1, l1);
	if (ok) {
		struct seg_desc out;

		assert_int_equal(decode_exact(b, len, &out), 0);
		seg_desc_free(&out);
	} else {
		expect_refused(b, len);
	}
	free(b);
}

static void test_desc_regions(void **state)
{
	(void)state;
	expect_regions(0x1000, 0x1000, 0x2000, 0x10, 1);  /* adjacent is fine */
	expect_regions(0x2000, 0x1000, 0x1000, 0x10, 0);  /* unsorted */
	expect_regions(0x1000, 0x1001, 0x2000, 0x10, 0);  /* overlapping by one byte */
	expect_regions(0x1000, 0x1000, 0x1000, 0x10, 0);  /* same start */
	expect_regions(0x1000, 0x3000, 0x2000, 0x10, 0);  /* second inside the first */
	expect_regions(0x1000, 0, 0x2000, 0x10, 0);       /* zero length, first */
	expect_regions(0x1000, 0x10, 0x2000, 0, 0);       /* zero length, last */
	expect_regions(0, 1, UINT64_MAX - 9, 9, 1);       /* end is UINT64_MAX */
	expect_regions(0, 1, UINT64_MAX - 9, 10, 0);      /* end is 2^64: wraps to 0 */
	expect_regions(0, 1, UINT64_MAX, UINT64_MAX, 0);  /* wraps */
	expect_regions(UINT64_MAX - 1, 1, 0, 1, 0);       /* unsorted at the top */
	expect_regions(0x1000, UINT64_MAX, 0x2000, 1, 0); /* first wraps */
}

/* ---- seg_desc_find --------------------------------------------------- */

static void test_find(void **state)
{
	struct seg_desc d;
	struct seg_region r[4];

	(void)state;
	memset(&d, 0, sizeof(d));
	memset(r, 0, sizeof(r));
	r[0].addr = 0x1000; r[0].len = 0x1000; /* [0x1000, 0x2000) */
	r[1].addr = 0x3000; r[1].len = 0x800;  /* [0x3000, 0x3800) */
	r[2].addr = 0x3800; r[2].len = 0x800;  /* adjacent: [0x3800, 0x4000) */
	r[3].addr = UINT64_MAX - 0xfff; r[3].len = 0xfff; /* up to the last byte */
	d.n_nics = 1;
	d.regions = r;

	assert_null(seg_desc_find(&d, 0x1000, 1)); /* no regions */
	d.n_regions = 4;

	assert_ptr_equal(seg_desc_find(&d, 0x1000, 1), &r[0]);      /* first byte */
	assert_ptr_equal(seg_desc_find(&d, 0x1fff, 1), &r[0]);      /* last byte */
	assert_ptr_equal(seg_desc_find(&d, 0x1000, 0x1000), &r[0]); /* whole */
	assert_null(seg_desc_find(&d, 0x2000, 1));                  /* one past */
	assert_null(seg_desc_find(&d, 0x0fff, 1));                  /* one before */
	assert_null(seg_desc_find(&d, 0x0fff, 2));                  /* straddles start */
	assert_null(seg_desc_find(&d, 0x1fff, 2));                  /* straddles end */
	assert_null(seg_desc_find(&d, 0x1000, 0x1001));             /* one too long */
	assert_null(seg_desc_find(&d, 0, 1));                       /* below all */
	assert_null(seg_desc_find(&d, 0x2800, 0x10));               /* in a gap */
	assert_ptr_equal(seg_desc_find(&d, 0x3000, 0x800), &r[1]);
	assert_ptr_equal(seg_desc_find(&d, 0x3800, 0x800), &r[2]);
	assert_null(seg_desc_find(&d, 0x37ff, 2));                  /* spans two regions */
	assert_null(seg_desc_find(&d, 0x3000, 0x1000));             /* covers both */
	assert_null(seg_desc_find(&d, 0x1000, 0));                  /* len 0 */
	assert_null(seg_desc_find(&d, 0x1800, 0));

	assert_ptr_equal(seg_desc_find(&d, UINT64_MAX - 0xfff, 0xfff), &r[3]);
	assert_ptr_equal(seg_desc_find(&d, UINT64_MAX - 1, 1), &r[3]); /* last byte */
	assert_null(seg_desc_find(&d, UINT64_MAX, 1));               /* one past, at the top */
	assert_null(seg_desc_find(&d, UINT64_MAX - 1, 2));           /* addr + len = 2^64 */
	assert_null(seg_desc_find(&d, UINT64_MAX - 0x10, UINT64_MAX)); /* overflow */
	assert_null(seg_desc_find(&d, 0x1000, UINT64_MAX));          /* overflow */
	assert_null(seg_desc_find(NULL, 0x1000, 1));
}

/* Against a linear scan over many regions, at every boundary. */
static void test_find_many(void **state)
{
	struct seg_desc d;
	uint32_t i, j;
	uint64_t probes[6];

	(void)state;
	make_desc(&d, 1, 257);
	for (i = 0; i < d.n_regions; i++) {
		const struct seg_region *r = &d.regions[i];

		probes[0] = r->addr - 1;
		probes[1] = r->addr;
		probes[2] = r->addr + 1;
		probes[3] = r->addr + r->len - 1;
		probes[4] = r->addr + r->len;
		probes[5] = r->addr + r->len / 2;
		for (j = 0; j < 6; j++) {
			const struct seg_region *want = NULL;
			uint32_t k;

			for (k = 0; k < d.n_regions; k++)
				if (probes[j] >= d.regions[k].addr &&
				    probes[j] + 1 <= d.regions[k].addr + d.regions[k].len)
					want = &d.regions[k];
			assert_ptr_equal(seg_desc_find(&d, probes[j], 1), want);
		}
		assert_ptr_equal(seg_desc_find(&d, r->addr, r->len), r);
		assert_null(seg_desc_find(&d, r->addr, r->len + 1));
	}
	seg_desc_free(&d);
}

static void test_seg_desc_free(void **state)
{
	static const struct seg_desc zero;
	struct seg_desc d;

	(void)state;
	make_desc(&d, 2, 4);
	seg_desc_free(&d);
	assert_memory_equal(&d, &zero, sizeof(d));
	seg_desc_free(&d); /* twice is harmless */
	seg_desc_free(NULL);
}

/* ---- mutation loop --------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic, so a failure reproduces. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static const uint64_t interesting[] = {
	0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0x10001,
	WIRE_MAX_NICS, WIRE_MAX_NICS + 1, WIRE_MAX_REGIONS, WIRE_MAX_REGIONS + 1,
	0x7fffffff, 0x80000000, 0xffffffff, UINT64_MAX, UINT64_MAX - 1,
};
#define N_INTERESTING (sizeof(interesting) / sizeof(interesting[0]))

/* Apply one random mutation to b (capacity cap); returns the new length. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
	uint64_t r = rnd();
	size_t off = len ? (size_t)(rnd() % len) : 0;
	int width = 1 << (rnd() % 4); /* 1, 2, 4 or 8 bytes */

	switch (r % 6) {
	case 0: /* flip a bit */
		if (len)
			b[off] ^= (uint8_t)(1u << (rnd() % 8));
		return len;
	case 1: /* random byte */
		if (len)
			b[off] = (uint8_t)rnd();
		return len;
	case 2: /* interesting value in a field-sized slot */
		if (off + (size_t)width <= len)
			le(b + off, interesting[rnd() % N_INTERESTING], width);
		return len;
	case 3: /* truncate */
		return len ? (size_t)(rnd() % len) : 0;
	case 4: { /* append random bytes */
		size_t n = (size_t)(rnd() % 32) + 1, i;

		if (len + n > cap)
			n = cap - len;
		for (i = 0; i < n; i++)
			b[len + i] = (uint8_t)rnd();
		return len + n;
	}
	default: /* copy 8 bytes from elsewhere: moves addresses between regions */
		if (len >= 8 && off + 8 <= len)
			memmove(b + off, b + (size_t)(rnd() % (len - 7)), 8);
		return len;
	}
}

/* A successful decode must hold every invariant and re-encode to the same bytes. */
static void check_accepted(const struct seg_desc *d, const uint8_t *buf, size_t len)
{
	uint8_t *again = malloc(len);
	uint32_t i;

	assert_non_null(again);
	assert_true(d->n_nics >= 1 && d->n_nics <= WIRE_MAX_NICS);
	assert_true(d->n_regions <= WIRE_MAX_REGIONS);
	for (i = 0; i < d->n_nics; i++)
		assert_true(strnlen(d->nics[i].provider, WIRE_PROVIDER_LEN) < WIRE_PROVIDER_LEN);
	for (i = 0; i < d->n_regions; i++) {
		assert_true(d->regions[i].len > 0);
		assert_true(d->regions[i].len <= UINT64_MAX - d->regions[i].addr);
		if (i)
			assert_true(d->regions[i].addr >=
				    d->regions[i - 1].addr + d->regions[i - 1].len);
		assert_ptr_equal(seg_desc_find(d, d->regions[i].addr, d->regions[i].len),
				 &d->regions[i]);
	}
	assert_int_equal(wire_desc_size(d), len);
	assert_int_equal(wire_desc_encode(d, again, len), 0);
	assert_memory_equal(again, buf, len);
	free(again);
}

static void test_mutations(void **state)
{
	enum { ITERS = 20000, SLACK = 256 };
	uint8_t *base, *work, *exact;
	size_t base_len, len, cap;
	unsigned accepted = 0, refused = 0, it, m;
	int fd = open("/dev/null", O_WRONLY);
	int saved;

	(void)state;
	assert_true(fd >= 0);
	base = raw_build(3, 6, &base_len);
	cap = base_len + SLACK;
	work = malloc(cap);
	assert_non_null(work);

	saved = stderr_to(fd); /* thousands of refusal lines */
	for (it = 0; it < ITERS; it++) {
		struct seg_desc out;
		struct wire_hdr h;
		unsigned n_mut = 1 + (unsigned)(rnd() % 4);

		memcpy(work, base, base_len);
		len = base_len;
		for (m = 0; m < n_mut; m++)
			len = mutate(work, len, cap);

		exact = malloc(len ? len : 1);
		assert_non_null(exact);
		memcpy(exact, work, len);
		if (wire_desc_decode(exact, len, &out) == 0) {
			accepted++;
			check_accepted(&out, exact, len);
		} else {
			static const struct seg_desc zero;

			refused++;
			assert_memory_equal(&out, &zero, sizeof(out));
		}
		seg_desc_free(&out);
		/* The same bytes as a frame header. */
		if (wire_hdr_decode(exact, len, &h) == 0) {
			assert_true(len >= WIRE_HDR_LEN);
			assert_true(h.payload_len <= WIRE_MAX_PAYLOAD);
		}
		free(exact);
	}
	stderr_restore(saved);
	close(fd);
	print_message("mutations: %u accepted, %u refused\n", accepted, refused);
	/* Both outcomes must occur, or the loop tests nothing. */
	assert_true(accepted > 100);
	assert_true(refused > 100);
	free(work);
	free(base);
}

/* ---- endpoint handshake: CONNECT_REQ, CONNECT_REP, DISCONNECT --------- */

#define REQ_FIXED (32 + WIRE_PROVIDER_LEN + NIC_ADDR_LEN) /* up to and including the NIC entry */
#define QPI (8 + NIC_QP_SECRET_LEN) /* qpn u32, psn u32, secret */
#define REP_FIXED 16

static size_t raw_req_size(uint16_t n_qps)
{
	return REQ_FIXED + QPI * (size_t)n_qps;
}

/*
 * A valid CONNECT_REQ written by hand; make_req() builds the same message as
 * a struct.  QP i is qpn 0x100 + i, psn 0x200000 + i.
 */
static uint8_t *raw_req(uint16_t n_qps, size_t *len)
{
	size_t n = raw_req_size(n_qps);
	uint8_t *b = calloc(1, n);
	uint16_t i;

	assert_non_null(b);
	le(b, 0xa1a2a3a4a5a6a7a8ull, 8);
	le(b + 8, 0xb1b2b3b4b5b6b7b8ull, 8);
	le(b + 16, 0xc1c2c3c4c5c6c7c8ull, 8);
	le(b + 24, 2, 2);
	le(b + 26, n_qps, 2);
	memcpy(b + 32, "verbs", 5);
	memset(b + 48, 0x5a, NIC_ADDR_LEN);
	for (i = 0; i < n_qps; i++) {
		le(b + REQ_FIXED + QPI * i, 0x100 + i, 4);
		le(b + REQ_FIXED + QPI * i + 4, 0x200000 + i, 4);
	}
	*len = n;
	return b;
}

static void make_req(struct wire_connect_req *r, uint16_t n_qps)
{
	uint16_t i;

	memset(r, 0, sizeof(*r));
	r->incarnation = 0xa1a2a3a4a5a6a7a8ull;
	r->token = 0xb1b2b3b4b5b6b7b8ull;
	r->target_incarnation = 0xc1c2c3c4c5c6c7c8ull;
	r->target_nic = 2;
	r->n_qps = n_qps;
	strcpy(r->nic.provider, "verbs");
	memset(r->nic.addr.bytes, 0x5a, NIC_ADDR_LEN);
	for (i = 0; i < n_qps && i < WIRE_MAX_EP_QPS; i++) {
		r->qps[i].qpn = 0x100u + i;
		r->qps[i].psn = 0x200000u + i;
	}
}

static void assert_req_equal(const struct wire_connect_req *a, const struct wire_connect_req *b)
{
	assert_int_equal(a->incarnation, b->incarnation);
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->target_incarnation, b->target_incarnation);
	assert_int_equal(a->target_nic, b->target_nic);
	assert_int_equal(a->n_qps, b->n_qps);
	assert_string_equal(a->nic.provider, b->nic.provider);
	assert_memory_equal(a->nic.addr.bytes, b->nic.addr.bytes, NIC_ADDR_LEN);
	assert_memory_equal(a->qps, b->qps, a->n_qps * sizeof(a->qps[0]));
}

/* A valid CONNECT_REP by hand: token 0xd1.., QP i is qpn 0x300 + i, psn 0x400 + i. */
static uint8_t *raw_rep(uint16_t n_qps, size_t *len)
{
	size_t n = REP_FIXED + QPI * (size_t)n_qps;
	uint8_t *b = calloc(1, n);
	uint16_t i;

	assert_non_null(b);
	le(b, 0xd1d2d3d4d5d6d7d8ull, 8);
	le(b + 8, n_qps, 2);
	for (i = 0; i < n_qps; i++) {
		le(b + REP_FIXED + QPI * i, 0x300 + i, 4);
		le(b + REP_FIXED + QPI * i + 4, 0x400 + i, 4);
	}
	*len = n;
	return b;
}

static void make_rep(struct wire_connect_rep *r, uint16_t n_qps)
{
	uint16_t i;

	memset(r, 0, sizeof(*r));
	r->token = 0xd1d2d3d4d5d6d7d8ull;
	r->n_qps = n_qps;
	for (i = 0; i < n_qps && i < WIRE_MAX_EP_QPS; i++) {
		r->qps[i].qpn = 0x300u + i;
		r->qps[i].psn = 0x400u + i;
	}
}

static void assert_rep_equal(const struct wire_connect_rep *a, const struct wire_connect_rep *b)
{
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->n_qps, b->n_qps);
	assert_memory_equal(a->qps, b->qps, a->n_qps * sizeof(a->qps[0]));
}

static void req_roundtrip(uint16_t n_qps)
{
	struct wire_connect_req r, out;
	uint8_t buf[512], again[512], *raw;
	size_t size, raw_len;

	make_req(&r, n_qps);
	raw = raw_req(n_qps, &raw_len);
	size = wire_connect_req_size(&r);
	assert_int_equal(size, raw_len);
	assert_true(size <= sizeof(buf));
	assert_int_equal(wire_connect_req_encode(&r, buf, size), 0);
	assert_memory_equal(buf, raw, size);
	assert_int_equal(decode_exact_as(&REQ, buf, size, &out), 0);
	assert_req_equal(&r, &out);
	/* Unused QP slots are zero, not left from whatever was there. */
	if (n_qps < WIRE_MAX_EP_QPS)
		assert_int_equal(out.qps[n_qps].qpn, 0);
	assert_int_equal(wire_connect_req_encode(&out, again, size), 0);
	assert_memory_equal(buf, again, size);
	free(raw);
}

static void rep_roundtrip(uint16_t n_qps)
{
	struct wire_connect_rep r, out;
	uint8_t buf[512], again[512], *raw;
	size_t size, raw_len;

	make_rep(&r, n_qps);
	raw = raw_rep(n_qps, &raw_len);
	size = wire_connect_rep_size(&r);
	assert_int_equal(size, raw_len);
	assert_true(size <= sizeof(buf));
	assert_int_equal(wire_connect_rep_encode(&r, buf, size), 0);
	assert_memory_equal(buf, raw, size);
	assert_int_equal(decode_exact_as(&REP, buf, size, &out), 0);
	assert_rep_equal(&r, &out);
	assert_int_equal(wire_connect_rep_encode(&out, again, size), 0);
	assert_memory_equal(buf, again, size);
	free(raw);
}

static void test_ep_roundtrip(void **state)
{
	static const uint8_t disc_raw[WIRE_DISCONNECT_LEN] = {
		8, 7, 6, 5, 4, 3, 2, 1, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
	};
	struct wire_disconnect d = { 0x0102030405060708ull, 0x0123456789abcdefull }, dout;
	uint8_t b[WIRE_DISCONNECT_LEN];
	uint16_t n;

	(void)state;
	for (n = 1; n <= WIRE_MAX_EP_QPS; n++) {
		req_roundtrip(n);
		rep_roundtrip(n);
	}
	assert_int_equal(wire_disconnect_encode(&d, b, sizeof(b)), 0);
	assert_memory_equal(b, disc_raw, sizeof(b));
	assert_int_equal(decode_exact_as(&DISC, b, sizeof(b), &dout), 0);
	assert_int_equal(dout.incarnation, d.incarnation);
	assert_int_equal(dout.token, d.token);
}

static void test_req_fields(void **state)
{
	struct wire_connect_req out;
	uint8_t *b;
	size_t len;

	(void)state;
	/* target_nic is the target's to judge: any value decodes. */
	b = raw_req(1, &len);
	le(b + 24, 0xffff, 2);
	assert_int_equal(decode_exact_as(&REQ, b, len, &out), 0);
	assert_int_equal(out.target_nic, 0xffff);
	/* The longest provider name: 15 characters and the NUL. */
	memset(b + 32, 'p', WIRE_PROVIDER_LEN - 1);
	assert_int_equal(decode_exact_as(&REQ, b, len, &out), 0);
	assert_int_equal(strlen(out.nic.provider), WIRE_PROVIDER_LEN - 1);
	free(b);
}

static void test_req_refused(void **state)
{
	uint8_t *b, *big;
	size_t len, n, k;

	(void)state;
	b = raw_req(3, &len);
	for (n = 0; n < len; n++)
		expect_refused_as(&REQ, b, n); /* truncated anywhere */
	big = calloc(1, len + 16);
	assert_non_null(big);
	memcpy(big, b, len);
	for (n = 1; n <= 16; n++)
		expect_refused_as(&REQ, big, len + n); /* trailing bytes, even a whole QP */
	free(big);

	for (k = 0; k < 4; k++) { /* each byte of the reserved u32 */
		b[28 + k] = 0x01;
		expect_refused_as(&REQ, b, len);
		b[28 + k] = 0;
	}
	le(b + 26, 2, 2); /* n_qps says fewer than there are */
	expect_refused_as(&REQ, b, len);
	le(b + 26, 4, 2); /* more */
	expect_refused_as(&REQ, b, len);
	le(b + 26, 3, 2);

	memset(b + 32, 0, WIRE_PROVIDER_LEN); /* empty provider */
	expect_refused_as(&REQ, b, len);
	memset(b + 32, 'v', WIRE_PROVIDER_LEN); /* not NUL-terminated */
	expect_refused_as(&REQ, b, len);
	memcpy(b + 32, "verbs\0\0\0\0\0\0\0\0\0\0x", WIRE_PROVIDER_LEN); /* garbage padding */
	expect_refused_as(&REQ, b, len);
	memcpy(b + 32, "verbs\0x\0\0\0\0\0\0\0\0\0", WIRE_PROVIDER_LEN);
	expect_refused_as(&REQ, b, len);
	free(b);

	/* n_qps out of range, each with a payload of the size it implies. */
	b = raw_req(0, &len);
	expect_refused_as(&REQ, b, len);
	free(b);
	b = raw_req(WIRE_MAX_EP_QPS + 1, &len);
	expect_refused_as(&REQ, b, len);
	free(b);
	b = raw_req(1, &len);
	le(b + 26, 0xffff, 2);
	expect_refused_as(&REQ, b, len);
	free(b);
}

static void test_rep_refused(void **state)
{
	uint8_t *b, *big;
	size_t len, n, k;

	(void)state;
	b = raw_rep(2, &len);
	for (n = 0; n < len; n++)
		expect_refused_as(&REP, b, n);
	big = calloc(1, len + 16);
	assert_non_null(big);
	memcpy(big, b, len);
	for (n = 1; n <= 16; n++)
		expect_refused_as(&REP, big, len + n);
	free(big);

	for (k = 10; k < 16; k++) { /* each byte of both reserved fields */
		b[k] = 0x80;
		expect_refused_as(&REP, b, len);
		b[k] = 0;
	}
	le(b + 8, 1, 2);
	expect_refused_as(&REP, b, len);
	le(b + 8, 3, 2);
	expect_refused_as(&REP, b, len);
	free(b);

	b = raw_rep(0, &len);
	expect_refused_as(&REP, b, len);
	free(b);
	b = raw_rep(WIRE_MAX_EP_QPS + 1, &len);
	expect_refused_as(&REP, b, len);
	free(b);
}

static void test_disconnect_refused(void **state)
{
	uint8_t b[2 * WIRE_DISCONNECT_LEN];
	size_t n;

	(void)state;
	memset(b, 0x11, sizeof(b));
	for (n = 0; n <= sizeof(b); n++)
		if (n != WIRE_DISCONNECT_LEN)
			expect_refused_as(&DISC, b, n);
}

/* AUTH_HELLO and AUTH_PROOF: exact sizes, a known algorithm, zero reserved
 * words; a refusal leaves the output zeroed. */
static void test_auth_msgs(void **state)
{
	static const struct wire_auth_hello zh;
	static const struct wire_auth_proof zp;
	struct wire_auth_hello h = { .alg = WIRE_AUTH_ALG }, h2;
	struct wire_auth_proof p, p2;
	uint8_t b[WIRE_AUTH_HELLO_LEN + 1], m[sizeof(b)];
	int fd = open("/dev/null", O_WRONLY);
	int saved;
	size_t n;

	(void)state;
	memset(h.nonce, 0x3c, sizeof(h.nonce));
	memset(p.mac, 0xc3, sizeof(p.mac));
	assert_int_equal(wire_auth_hello_encode(&h, b, WIRE_AUTH_HELLO_LEN - 1), -ENOSPC);
	assert_int_equal(wire_auth_hello_encode(&h, b, sizeof(b)), 0);
	assert_int_equal(b[0], WIRE_AUTH_ALG);
	assert_int_equal(wire_auth_hello_decode(b, WIRE_AUTH_HELLO_LEN, &h2), 0);
	assert_memory_equal(&h2, &h, sizeof(h));
	assert_int_equal(wire_auth_proof_encode(&p, b, WIRE_AUTH_PROOF_LEN - 1), -ENOSPC);
	assert_int_equal(wire_auth_proof_encode(&p, b + 1, WIRE_AUTH_PROOF_LEN), 0);
	assert_int_equal(wire_auth_proof_decode(b + 1, WIRE_AUTH_PROOF_LEN, &p2), 0);
	assert_memory_equal(&p2, &p, sizeof(p));
	h2.alg = WIRE_AUTH_ALG + 1;
	assert_int_equal(wire_auth_hello_encode(&h2, b, sizeof(b)), -EINVAL);
	/* Version 1 still decodes, for the caller to say "upgrade the peer". */
	h2.alg = WIRE_AUTH_ALG_V1;
	assert_int_equal(wire_auth_hello_encode(&h2, b, sizeof(b)), 0);
	assert_int_equal(wire_auth_hello_decode(b, WIRE_AUTH_HELLO_LEN, &h2), 0);
	assert_int_equal(h2.alg, WIRE_AUTH_ALG_V1);

	assert_true(fd >= 0);
	saved = stderr_to(fd);
	assert_int_equal(wire_auth_hello_encode(&h, b, sizeof(b)), 0);
	for (n = 0; n <= sizeof(b); n++) {
		if (n == WIRE_AUTH_HELLO_LEN)
			continue;
		memset(&h2, 0xee, sizeof(h2));
		assert_int_equal(wire_auth_hello_decode(b, n, &h2), -EPROTO);
		assert_memory_equal(&h2, &zh, sizeof(zh));
	}
	for (n = 0; n < 8; n++) { /* alg, then each reserved byte */
		memcpy(m, b, sizeof(m));
		m[n] ^= 0x40;
		assert_int_equal(wire_auth_hello_decode(m, WIRE_AUTH_HELLO_LEN, &h2), -EPROTO);
		assert_memory_equal(&h2, &zh, sizeof(zh));
	}
	for (n = 0; n <= sizeof(b); n++) {
		if (n == WIRE_AUTH_PROOF_LEN)
			continue;
		memset(&p2, 0xee, sizeof(p2));
		assert_int_equal(wire_auth_proof_decode(b, n, &p2), -EPROTO);
		assert_memory_equal(&p2, &zp, sizeof(zp));
	}
	stderr_restore(saved);
	close(fd);
}

static void test_ep_encode_errors(void **state)
{
	struct wire_connect_req r;
	struct wire_connect_rep p;
	struct wire_disconnect d = { 1, 2 };
	uint8_t buf[512];
	size_t size;
	int fd = open("/dev/null", O_WRONLY);
	int saved;

	(void)state;
	assert_true(fd >= 0);
	make_req(&r, 4);
	size = wire_connect_req_size(&r);
	assert_int_equal(size, REQ_FIXED + 4 * QPI);
	assert_int_equal(wire_connect_req_encode(&r, buf, size - 1), -ENOSPC);
	assert_int_equal(wire_connect_req_encode(&r, buf, 0), -ENOSPC);
	/* Garbage after the NUL in the caller's name is not sent. */
	memset(r.nic.provider, 'x', WIRE_PROVIDER_LEN);
	memcpy(r.nic.provider, "rxe", 4);
	assert_int_equal(wire_connect_req_encode(&r, buf, size), 0);
	assert_memory_equal(buf + 32, "rxe\0\0\0\0\0\0\0\0\0\0\0\0\0", WIRE_PROVIDER_LEN);

	saved = stderr_to(fd);
	memset(r.nic.provider, 'x', WIRE_PROVIDER_LEN);
	assert_int_equal(wire_connect_req_encode(&r, buf, sizeof(buf)), -EINVAL);
	r.nic.provider[0] = '\0';
	assert_int_equal(wire_connect_req_encode(&r, buf, sizeof(buf)), -EINVAL);
	strcpy(r.nic.provider, "loop");
	r.n_qps = 0;
	assert_int_equal(wire_connect_req_encode(&r, buf, sizeof(buf)), -EINVAL);
	r.n_qps = WIRE_MAX_EP_QPS + 1;
	assert_int_equal(wire_connect_req_encode(&r, buf, sizeof(buf)), -EINVAL);
	r.n_qps = 0xffff; /* refused before its size is compared with cap */
	assert_int_equal(wire_connect_req_encode(&r, buf, 0), -EINVAL);

	make_rep(&p, 5);
	size = wire_connect_rep_size(&p);
	assert_int_equal(size, REP_FIXED + 5 * QPI);
	assert_int_equal(wire_connect_rep_encode(&p, buf, size - 1), -ENOSPC);
	p.n_qps = 0;
	assert_int_equal(wire_connect_rep_encode(&p, buf, sizeof(buf)), -EINVAL);
	p.n_qps = WIRE_MAX_EP_QPS + 1;
	assert_int_equal(wire_connect_rep_encode(&p, buf, sizeof(buf)), -EINVAL);
	stderr_restore(saved);
	close(fd);

	assert_int_equal(wire_disconnect_encode(&d, buf, WIRE_DISCONNECT_LEN - 1), -ENOSPC);
	assert_int_equal(wire_disconnect_encode(&d, buf, 0), -ENOSPC);
	/* The largest request and reply, as the control thread bounds them. */
	make_req(&r, WIRE_MAX_EP_QPS);
	assert_int_equal(wire_connect_req_size(&r), REQ_FIXED + QPI * WIRE_MAX_EP_QPS);
	make_rep(&p, WIRE_MAX_EP_QPS);
	assert_int_equal(wire_connect_rep_size(&p), REP_FIXED + QPI * WIRE_MAX_EP_QPS);
}

/* An accepted message must be valid and re-encode to exactly the same bytes. */
static void check_accepted_ep(const struct codec *k, const union any_out *o,
			      const uint8_t *buf, size_t len)
{
	uint8_t again[512];

	assert_true(len <= sizeof(again));
	if (k == &REQ) {
		assert_true(o->req.n_qps >= 1 && o->req.n_qps <= WIRE_MAX_EP_QPS);
		assert_true(strlen(o->req.nic.provider) >= 1);
		assert_true(strlen(o->req.nic.provider) < WIRE_PROVIDER_LEN);
		assert_int_equal(wire_connect_req_size(&o->req), len);
		assert_int_equal(wire_connect_req_encode(&o->req, again, len), 0);
	} else if (k == &REP) {
		assert_true(o->rep.n_qps >= 1 && o->rep.n_qps <= WIRE_MAX_EP_QPS);
		assert_int_equal(wire_connect_rep_size(&o->rep), len);
		assert_int_equal(wire_connect_rep_encode(&o->rep, again, len), 0);
	} else {
		assert_int_equal(len, WIRE_DISCONNECT_LEN);
		assert_int_equal(wire_disconnect_encode(&o->disc, again, len), 0);
	}
	assert_memory_equal(again, buf, len);
}

static void mutate_ep(const struct codec *k, const uint8_t *base, size_t base_len)
{
	enum { ITERS = 20000, SLACK = 64 };
	static const union any_out zero;
	size_t cap = base_len + SLACK, len;
	uint8_t *work = malloc(cap), *exact;
	unsigned accepted = 0, refused = 0, it, m;

	assert_non_null(work);
	for (it = 0; it < ITERS; it++) {
		union any_out out;
		unsigned n_mut = 1 + (unsigned)(rnd() % 4);

		memcpy(work, base, base_len);
		len = base_len;
		for (m = 0; m < n_mut; m++)
			len = mutate(work, len, cap);
		exact = malloc(len ? len : 1);
		assert_non_null(exact);
		memcpy(exact, work, len);
		memset(&out, 0xa5, sizeof(out));
		if (k->decode(exact, len, &out) == 0) {
			accepted++;
			check_accepted_ep(k, &out, exact, len);
		} else {
			refused++;
			assert_memory_equal(&out, &zero, k->out_size);
		}
		free(exact);
	}
	print_message("%s mutations: %u accepted, %u refused\n", k->name, accepted, refused);
	assert_true(accepted > 100);
	assert_true(refused > 100);
	free(work);
}

static void test_ep_mutations(void **state)
{
	uint8_t *b, d[WIRE_DISCONNECT_LEN];
	size_t len;
	int fd = open("/dev/null", O_WRONLY);
	int saved;

	(void)state;
	assert_true(fd >= 0);
	saved = stderr_to(fd);
	b = raw_req(3, &len);
	mutate_ep(&REQ, b, len);
	free(b);
	b = raw_rep(2, &len);
	mutate_ep(&REP, b, len);
	free(b);
	memset(d, 0x3c, sizeof(d));
	mutate_ep(&DISC, d, sizeof(d));
	stderr_restore(saved);
	close(fd);
}

/* NOTIFY: round trip, and every malformed shape refused with a zeroed output. */
static void test_notify_msgs(void **state)
{
	struct wire_notify n = { .from = "10.0.0.1:7000", .len = 3, .msg = "abc" }, out;
	uint8_t buf[WIRE_NOTIFY_MAX_LEN + 8], bad[WIRE_NOTIFY_MAX_LEN + 8];
	size_t len = wire_notify_size(&n);

	(void)state;
	assert_int_equal(len, 8 + 13 + 3);
	assert_int_equal(wire_notify_encode(&n, buf, len - 1), -ENOSPC);
	assert_int_equal(wire_notify_encode(&n, buf, len), 0);
	assert_int_equal(wire_notify_decode(buf, len, &out), 0);
	assert_string_equal(out.from, "10.0.0.1:7000");
	assert_int_equal(out.len, 3);
	assert_memory_equal(out.msg, "abc", 3);
	/* Truncated, padded, reserved bytes, lengths, characters. */
	assert_int_equal(wire_notify_decode(buf, len - 1, &out), -EPROTO);
	assert_int_equal(out.len, 0);
	assert_int_equal(wire_notify_decode(buf, len + 1, &out), -EPROTO);
	assert_int_equal(wire_notify_decode(buf, 7, &out), -EPROTO);
	memcpy(bad, buf, len);
	bad[1] = 1;
	assert_int_equal(wire_notify_decode(bad, len, &out), -EPROTO);
	memcpy(bad, buf, len);
	bad[7] = 1;
	assert_int_equal(wire_notify_decode(bad, len, &out), -EPROTO);
	memcpy(bad, buf, len);
	bad[0] = 0;
	assert_int_equal(wire_notify_decode(bad, len - 13, &out), -EPROTO);
	memcpy(bad, buf, len);
	bad[8] = ' ';
	assert_int_equal(wire_notify_decode(bad, len, &out), -EPROTO);
	bad[8] = 0;
	assert_int_equal(wire_notify_decode(bad, len, &out), -EPROTO);
	assert_int_equal(out.from[0], 0);
	memcpy(bad, buf, len);
	bad[2] = (uint8_t)(WIRE_NOTIFY_MAX + 1);
	bad[3] = (uint8_t)((WIRE_NOTIFY_MAX + 1) >> 8);
	assert_int_equal(wire_notify_decode(bad, 8 + 13 + WIRE_NOTIFY_MAX + 1, &out), -EPROTO);
	/* The encoder refuses what the decoder would. */
	n.len = WIRE_NOTIFY_MAX + 1;
	assert_int_equal(wire_notify_encode(&n, buf, sizeof(buf)), -EINVAL);
	n.len = 0;
	n.from[0] = 0;
	assert_int_equal(wire_notify_encode(&n, buf, sizeof(buf)), -EINVAL);
	strcpy(n.from, "a b");
	assert_int_equal(wire_notify_encode(&n, buf, sizeof(buf)), -EINVAL);
	/* Largest: a 63-character sender and WIRE_NOTIFY_MAX bytes. */
	memset(n.from, 'x', WIRE_NOTIFY_FROM_MAX);
	n.from[WIRE_NOTIFY_FROM_MAX] = 0;
	n.len = WIRE_NOTIFY_MAX;
	memset(n.msg, 0xee, sizeof(n.msg));
	assert_int_equal(wire_notify_size(&n), WIRE_NOTIFY_MAX_LEN);
	assert_int_equal(wire_notify_encode(&n, buf, WIRE_NOTIFY_MAX_LEN), 0);
	assert_int_equal(wire_notify_decode(buf, WIRE_NOTIFY_MAX_LEN, &out), 0);
	assert_memory_equal(&out, &n, sizeof(n));
}

/* NOTIFY_TO: a NOTIFY after its receiver's incarnation (never 0). */
static void test_notify_to_msgs(void **state)
{
	struct wire_notify n = { .to_incarnation = 0x1122334455667788ull, .from = "h:1",
				 .len = 2, .msg = "ok" }, out;
	uint8_t buf[WIRE_NOTIFY_TO_MAX_LEN], bad[WIRE_NOTIFY_TO_MAX_LEN];
	size_t len = wire_notify_to_size(&n);

	(void)state;
	assert_int_equal(len, 8 + 8 + 3 + 2);
	assert_int_equal(wire_notify_to_encode(&n, buf, len - 1), -ENOSPC);
	assert_int_equal(wire_notify_to_encode(&n, buf, len), 0);
	assert_int_equal(buf[0], 0x88); /* little-endian, first */
	assert_int_equal(wire_notify_to_decode(buf, len, &out), 0);
	assert_memory_equal(&out, &n, sizeof(n));
	/* A plain NOTIFY's decoder leaves the incarnation 0 (not checked). */
	assert_int_equal(wire_notify_decode(buf + 8, len - 8, &out), 0);
	assert_true(out.to_incarnation == 0);
	/* Refused: short, trailing, incarnation 0, a bad NOTIFY inside. */
	assert_int_equal(wire_notify_to_decode(buf, 7, &out), -EPROTO);
	assert_int_equal(wire_notify_to_decode(buf, len - 1, &out), -EPROTO);
	assert_int_equal(wire_notify_to_decode(buf, len + 1, &out), -EPROTO);
	memcpy(bad, buf, len);
	memset(bad, 0, 8);
	assert_int_equal(wire_notify_to_decode(bad, len, &out), -EPROTO);
	assert_true(out.to_incarnation == 0 && out.len == 0);
	memcpy(bad, buf, len);
	bad[8 + 1] = 1; /* a reserved byte */
	assert_int_equal(wire_notify_to_decode(bad, len, &out), -EPROTO);
	assert_true(out.to_incarnation == 0);
	/* The encoder refuses incarnation 0 and what a NOTIFY's refuses. */
	n.to_incarnation = 0;
	assert_int_equal(wire_notify_to_encode(&n, buf, sizeof(buf)), -EINVAL);
	n.to_incarnation = 1;
	n.len = WIRE_NOTIFY_MAX + 1;
	assert_int_equal(wire_notify_to_encode(&n, buf, sizeof(buf)), -EINVAL);
	/* Largest. */
	memset(n.from, 'y', WIRE_NOTIFY_FROM_MAX);
	n.from[WIRE_NOTIFY_FROM_MAX] = 0;
	n.len = WIRE_NOTIFY_MAX;
	assert_int_equal(wire_notify_to_size(&n), WIRE_NOTIFY_TO_MAX_LEN);
	assert_int_equal(wire_notify_to_encode(&n, buf, WIRE_NOTIFY_TO_MAX_LEN), 0);
	assert_int_equal(wire_notify_to_decode(buf, WIRE_NOTIFY_TO_MAX_LEN, &out), 0);
	assert_memory_equal(&out, &n, sizeof(n));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr_roundtrip),
		cmocka_unit_test(test_hdr_refused),
		cmocka_unit_test(test_desc_roundtrip),
		cmocka_unit_test(test_desc_max_regions),
		cmocka_unit_test(test_desc_encode_errors),
		cmocka_unit_test(test_desc_truncated),
		cmocka_unit_test(test_desc_trailing),
		cmocka_unit_test(test_desc_counts),
		cmocka_unit_test(test_desc_reserved),
		cmocka_unit_test(test_desc_provider),
		cmocka_unit_test(test_desc_regions),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_find_many),
		cmocka_unit_test(test_seg_desc_free),
		cmocka_unit_test(test_mutations),
		cmocka_unit_test(test_ep_roundtrip),
		cmocka_unit_test(test_req_fields),
		cmocka_unit_test(test_req_refused),
		cmocka_unit_test(test_rep_refused),
		cmocka_unit_test(test_disconnect_refused),
		cmocka_unit_test(test_auth_msgs),
		cmocka_unit_test(test_notify_msgs),
		cmocka_unit_test(test_notify_to_msgs),
		cmocka_unit_test(test_ep_encode_errors),
		cmocka_unit_test(test_ep_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
