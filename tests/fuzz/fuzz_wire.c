/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the control-plane wire format (`make fuzz`).
 *
 * Every input goes to wire_hdr_decode and to every payload decoder (the
 * descriptor, the handshake, the authentication messages, NOTIFY and
 * NOTIFY_TO, a peer's cma and verbs NIC addresses, a cma peer's rkey
 * table slot), twice:
 * as a whole, and (when it starts with a valid header) as the payload after
 * that header, so seed frames steer mutations towards each decoder.  What a
 * decoder accepts must hold the format's invariants and re-encode to the
 * very same bytes (the encoding is canonical); what it refuses must leave
 * its output zeroed.  A broken invariant aborts, which libFuzzer reports.
 *
 * With FERRY_FUZZ_SEEDS=<dir> in the environment the target writes a few
 * valid messages into <dir> and exits: the seeds follow the encoders, so
 * they never go stale when the format changes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qp/cma/objects.h"
#include "qp/verbs/verbs.h"
#include "runtime/ctl/wire.h"

#include "tests/fuzz/fuzz.h"

/* Re-encode with the exact size (out must equal in) and one byte short. */
typedef int (*encode_fn)(const void *msg, uint8_t *buf, size_t cap);

static void check_reencode(encode_fn enc, const void *msg, const uint8_t *in, size_t len)
{
	uint8_t *again = malloc(len ? len : 1);

	CHECK(again);
	CHECK(enc(msg, again, len) == 0);
	CHECK(memcmp(again, in, len) == 0);
	if (len)
		CHECK(enc(msg, again, len - 1) == -ENOSPC);
	free(again);
}

static int enc_desc(const void *m, uint8_t *b, size_t cap)
{
	return wire_desc_encode(m, b, cap);
}

static int enc_req(const void *m, uint8_t *b, size_t cap)
{
	return wire_connect_req_encode(m, b, cap);
}

static int enc_rep(const void *m, uint8_t *b, size_t cap)
{
	return wire_connect_rep_encode(m, b, cap);
}

static int enc_disc(const void *m, uint8_t *b, size_t cap)
{
	return wire_disconnect_encode(m, b, cap);
}

/* seg_desc_find against a linear scan, at one probe. */
static void check_find(const struct seg_desc *d, uint64_t addr, uint64_t len)
{
	const struct seg_region *want = NULL;
	uint32_t i;

	if (len && len <= UINT64_MAX - addr) {
		for (i = 0; i < d->n_regions; i++) {
			const struct seg_region *r = &d->regions[i];

			if (addr >= r->addr && addr - r->addr < r->len &&
			    len <= r->len - (addr - r->addr))
				want = r;
		}
	}
	CHECK(seg_desc_find(d, addr, len) == want);
}

static void check_desc_find(const struct seg_desc *d, const uint8_t *in, size_t len)
{
	uint64_t a = 0, l = 0;
	uint32_t i;

	for (i = 0; i < d->n_regions; i++) {
		const struct seg_region *r = &d->regions[i];

		CHECK(seg_desc_find(d, r->addr, r->len) == r);
		check_find(d, r->addr, 1);
		check_find(d, r->addr + r->len - 1, 1);
		check_find(d, r->addr + r->len - 1, 2);
		if (r->addr)
			check_find(d, r->addr - 1, 1);
		check_find(d, r->addr + r->len / 2, r->len);
	}
	/* And one probe the fuzzer controls: the input's last 16 bytes. */
	if (len >= 16) {
		memcpy(&a, in + len - 16, 8);
		memcpy(&l, in + len - 8, 8);
		check_find(d, a, l);
	}
}

static void fuzz_desc(const uint8_t *in, size_t len)
{
	struct seg_desc d;
	uint32_t i;

	if (wire_desc_decode(in, len, &d)) {
		CHECK(fuzz_all_zero(&d, sizeof(d)));
		return;
	}
	CHECK(d.n_nics >= 1 && d.n_nics <= WIRE_MAX_NICS);
	CHECK(d.n_regions <= WIRE_MAX_REGIONS);
	for (i = 0; i < d.n_nics; i++)
		CHECK(strnlen(d.nics[i].provider, WIRE_PROVIDER_LEN) < WIRE_PROVIDER_LEN);
	CHECK(wire_desc_size(&d) == len);
	check_reencode(enc_desc, &d, in, len);
	check_desc_find(&d, in, len);
	seg_desc_free(&d);
}

static void fuzz_connect_req(const uint8_t *in, size_t len)
{
	struct wire_connect_req r;

	if (wire_connect_req_decode(in, len, &r)) {
		CHECK(fuzz_all_zero(&r, sizeof(r)));
		return;
	}
	CHECK(r.n_qps >= 1 && r.n_qps <= WIRE_MAX_EP_QPS);
	CHECK(r.nic.provider[0] && strnlen(r.nic.provider, WIRE_PROVIDER_LEN) < WIRE_PROVIDER_LEN);
	CHECK(wire_connect_req_size(&r) == len);
	check_reencode(enc_req, &r, in, len);
}

static void fuzz_connect_rep(const uint8_t *in, size_t len)
{
	struct wire_connect_rep r;

	if (wire_connect_rep_decode(in, len, &r)) {
		CHECK(fuzz_all_zero(&r, sizeof(r)));
		return;
	}
	CHECK(r.n_qps >= 1 && r.n_qps <= WIRE_MAX_EP_QPS);
	CHECK(wire_connect_rep_size(&r) == len);
	check_reencode(enc_rep, &r, in, len);
}

static void fuzz_disconnect(const uint8_t *in, size_t len)
{
	struct wire_disconnect d;

	if (wire_disconnect_decode(in, len, &d)) {
		CHECK(fuzz_all_zero(&d, sizeof(d)));
		return;
	}
	CHECK(len == WIRE_DISCONNECT_LEN);
	check_reencode(enc_disc, &d, in, len);
}

static int enc_hello(const void *m, uint8_t *b, size_t cap)
{
	return wire_auth_hello_encode(m, b, cap);
}

static int enc_proof(const void *m, uint8_t *b, size_t cap)
{
	return wire_auth_proof_encode(m, b, cap);
}

static void fuzz_auth(const uint8_t *in, size_t len)
{
	struct wire_auth_hello h;
	struct wire_auth_proof p;

	if (wire_auth_hello_decode(in, len, &h)) {
		CHECK(fuzz_all_zero(&h, sizeof(h)));
	} else {
		CHECK(len == WIRE_AUTH_HELLO_LEN &&
		      (h.alg == WIRE_AUTH_ALG || h.alg == WIRE_AUTH_ALG_V1));
		check_reencode(enc_hello, &h, in, len);
	}
	if (wire_auth_proof_decode(in, len, &p)) {
		CHECK(fuzz_all_zero(&p, sizeof(p)));
	} else {
		CHECK(len == WIRE_AUTH_PROOF_LEN);
		check_reencode(enc_proof, &p, in, len);
	}
}

static int enc_notify(const void *m, uint8_t *b, size_t cap)
{
	return wire_notify_encode(m, b, cap);
}

static void fuzz_notify(const uint8_t *in, size_t len)
{
	struct wire_notify n;
	size_t flen;

	if (wire_notify_decode(in, len, &n)) {
		CHECK(fuzz_all_zero(&n, sizeof(n)));
		return;
	}
	flen = strnlen(n.from, sizeof(n.from));
	CHECK(flen >= 1 && flen <= WIRE_NOTIFY_FROM_MAX && n.len <= WIRE_NOTIFY_MAX);
	for (size_t i = 0; i < flen; i++)
		CHECK(n.from[i] > ' ' && n.from[i] < 0x7f);
	CHECK(wire_notify_size(&n) == len && len <= WIRE_NOTIFY_MAX_LEN);
	CHECK(n.to_incarnation == 0);
	check_reencode(enc_notify, &n, in, len);
}

static int enc_notify_to(const void *m, uint8_t *b, size_t cap)
{
	return wire_notify_to_encode(m, b, cap);
}

/* NOTIFY_TO: a NOTIFY after a nonzero incarnation, nothing else. */
static void fuzz_notify_to(const uint8_t *in, size_t len)
{
	struct wire_notify n;

	if (wire_notify_to_decode(in, len, &n)) {
		CHECK(fuzz_all_zero(&n, sizeof(n)));
		return;
	}
	CHECK(n.to_incarnation != 0 && len >= 8);
	CHECK(wire_notify_to_size(&n) == len && len <= WIRE_NOTIFY_TO_MAX_LEN);
	check_reencode(enc_notify_to, &n, in, len);
}

/* A peer's cma address (a NIC of its descriptor): what decodes names a
 * process and its table, and encodes back to the same 64 bytes. */
static void fuzz_cma_addr(const uint8_t *in, size_t len)
{
	struct nic_addr a, again;
	struct cma_id id;

	if (len < NIC_ADDR_LEN)
		return;
	memcpy(a.bytes, in, NIC_ADDR_LEN);
	if (cma_addr_decode(&a, &id))
		return;
	CHECK(id.pid && id.table && id.probe);
	cma_addr_encode(&id, &again);
	CHECK(memcmp(again.bytes, in, NIC_ADDR_LEN) == 0);
}

/*
 * A cma peer's rkey table as the initiator reads it (qp/cma/rkey.c): the
 * table sits in our own memory and the "peer" is this process (cma to
 * ourselves).  The input is an rkey (4 bytes), the slot that key names
 * (32 bytes, as the peer would have written it) and a flag byte: bit 0
 * puts the rkey into the slot's key (so mutations get past it), bit 1
 * makes our responder QP's slot another's.  A key taken must be the
 * slot's, as the target's reg_mr writes one (access within
 * NIC_ACCESS_ALL, a non-empty region above 0 that does not wrap), cached
 * as read and marked shared; a refused one is REM_ACCESS_ERR, or
 * RETRY_EXC_ERR when the QP's slot is not ours.
 */
#define FZ_QPN 0x00030005u

static void fuzz_cma_rkey(const uint8_t *in, size_t len)
{
	static const uint8_t secret[NIC_QP_SECRET_LEN] = { 0x5e, 0xc4 };
	static struct cma_table *tab;
	static struct cma_ctx ctx = { .lease_ticks = 100 };
	static struct cma_cq cq;
	static struct cma_qp qp;
	const struct cma_rkey *rk = NULL;
	struct cma_mr_slot *ms, slot;
	enum nic_wc_status st;
	uint64_t fetches;
	uint32_t rkey;

	if (len < 4 + sizeof(slot) + 1)
		return;
	if (!tab)
		CHECK((tab = calloc(1, sizeof(*tab))) != NULL);
	memcpy(&rkey, in, 4);
	memcpy(&slot, in + 4, sizeof(slot));
	if (in[4 + sizeof(slot)] & 1)
		slot.key = rkey;
	ms = &tab->mr[CMA_IDX(rkey)];
	*ms = slot;
	tab->qp[CMA_IDX(FZ_QPN)].qpn = in[4 + sizeof(slot)] & 2 ? FZ_QPN + 0x10000 : FZ_QPN;
	memcpy(tab->qp[CMA_IDX(FZ_QPN)].secret, secret, sizeof(secret));
	memset(&qp, 0, sizeof(qp));
	qp.ctx = &ctx;
	qp.cq = &cq;
	qp.peer_pid = (uint32_t)getpid();
	qp.peer_qpn = FZ_QPN;
	qp.peer_table = (uintptr_t)tab;
	memcpy(qp.peer_secret, secret, sizeof(secret));

	st = cma_rkey_get(&cq, &qp, rkey, 1, &rk);
	if (st != NIC_WC_SUCCESS) {
		CHECK(st == NIC_WC_REM_ACCESS_ERR || st == NIC_WC_RETRY_EXC_ERR);
		CHECK(st == NIC_WC_REM_ACCESS_ERR || (rkey && (in[4 + sizeof(slot)] & 2)));
		CHECK(!cma_rkey_cached(&qp, rkey, 1));
	} else {
		CHECK(rkey && !(in[4 + sizeof(slot)] & 2) && slot.key == rkey);
		CHECK(!(slot.access & ~NIC_ACCESS_ALL) && slot.base && slot.len &&
		      slot.len <= UINT64_MAX - slot.base);
		CHECK(rk && rk->key == rkey && rk->base == slot.base && rk->len == slot.len &&
		      rk->access == slot.access && ms->shared);
		/* Cached for its lease: no system call for the next WR. */
		fetches = cq.cnt[CMA_CNT_FETCHES];
		CHECK(cma_rkey_get(&cq, &qp, rkey, 2, &rk) == NIC_WC_SUCCESS && rk->key == rkey);
		CHECK(cq.cnt[CMA_CNT_FETCHES] == fetches);
	}
	memset(ms, 0, sizeof(*ms));
}

/* A peer's verbs address (a NIC of its descriptor, or of a CONNECT_REQ):
 * what decodes is what a port of ours could say, and encodes back to the
 * same 64 bytes; a refusal leaves nothing decoded. */
static void fuzz_verbs_addr(const uint8_t *in, size_t len)
{
	struct nic_addr a, again;
	struct fv_addr f;

	if (len < NIC_ADDR_LEN)
		return;
	memcpy(a.bytes, in, NIC_ADDR_LEN);
	if (fv_addr_unpack(&a, &f)) {
		CHECK(fuzz_all_zero(&f, sizeof(f)));
		return;
	}
	CHECK(mtu_bytes(f.mtu) && f.port);
	CHECK(f.link_layer == IBV_LINK_LAYER_ETHERNET ? !fuzz_all_zero(f.gid, 16)
						      : f.link_layer == IBV_LINK_LAYER_INFINIBAND &&
							f.lid && f.lid < 0xc000);
	CHECK(!f.has_alt || !fuzz_all_zero(f.alt_gid, 16));
	fv_addr_pack(&f, &again);
	CHECK(memcmp(again.bytes, in, NIC_ADDR_LEN) == 0);
}

static void fuzz_payload(const uint8_t *in, size_t len)
{
	fuzz_cma_addr(in, len);
	fuzz_cma_rkey(in, len);
	fuzz_verbs_addr(in, len);
	fuzz_notify(in, len);
	fuzz_notify_to(in, len);
	fuzz_auth(in, len);
	fuzz_desc(in, len);
	fuzz_connect_req(in, len);
	fuzz_connect_rep(in, len);
	fuzz_disconnect(in, len);
}

/*
 * The other way: the input's bytes taken as a message a caller built.
 * What an encoder accepts, its decoder must take back as the same message
 * (a sender must never emit what its peer refuses); what it refuses
 * (-EINVAL) is what the decoder would refuse.
 */
static void fuzz_encoders(const uint8_t *in, size_t len)
{
	static uint8_t buf[1024];
	struct wire_connect_req req, req2;
	struct wire_connect_rep rep, rep2;
	struct wire_notify n, n2;

	if (len < sizeof(req))
		return;
	memcpy(&req, in, sizeof(req));
	req.n_qps %= WIRE_MAX_EP_QPS + 2; /* 0..17: the limits and past them */
	if (wire_connect_req_encode(&req, buf, sizeof(buf)) == 0) {
		CHECK(wire_connect_req_decode(buf, wire_connect_req_size(&req), &req2) == 0);
		CHECK(req2.token == req.token && req2.n_qps == req.n_qps &&
		      req2.target_nic == req.target_nic && !strcmp(req2.nic.provider, req.nic.provider));
		CHECK(!memcmp(req2.qps, req.qps, req.n_qps * sizeof(req.qps[0])));
	}
	memcpy(&rep, in, sizeof(rep));
	rep.n_qps %= WIRE_MAX_EP_QPS + 2;
	if (wire_connect_rep_encode(&rep, buf, sizeof(buf)) == 0) {
		CHECK(wire_connect_rep_decode(buf, wire_connect_rep_size(&rep), &rep2) == 0);
		CHECK(rep2.token == rep.token && rep2.n_qps == rep.n_qps);
		CHECK(!memcmp(rep2.qps, rep.qps, rep.n_qps * sizeof(rep.qps[0])));
	}
	if (len < sizeof(n))
		return;
	memcpy(&n, in, sizeof(n));
	n.len %= WIRE_NOTIFY_MAX + 2;
	n.to_incarnation |= 1;
	if (wire_notify_to_encode(&n, buf, sizeof(buf)) == 0) {
		CHECK(wire_notify_to_decode(buf, wire_notify_to_size(&n), &n2) == 0);
		CHECK(n2.to_incarnation == n.to_incarnation && n2.len == n.len &&
		      !strcmp(n2.from, n.from) && !memcmp(n2.msg, n.msg, n.len));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t again[WIRE_HDR_LEN];
	struct wire_hdr h;

	fuzz_payload(data, size);
	fuzz_encoders(data, size);
	if (wire_hdr_decode(data, size, &h) == 0) {
		CHECK(size >= WIRE_HDR_LEN && h.magic == WIRE_MAGIC);
		CHECK(h.version == WIRE_VERSION && h.payload_len <= WIRE_MAX_PAYLOAD);
		wire_hdr_encode(again, h.type, h.payload_len); /* canonical, as the payloads */
		CHECK(memcmp(again, data, WIRE_HDR_LEN) == 0);
		fuzz_payload(data + WIRE_HDR_LEN, size - WIRE_HDR_LEN);
	}
	return 0;
}

/* ---- seeds ------------------------------------------------------------ */

static void seed_write(const char *dir, const char *name, uint16_t type, const uint8_t *payload,
		       size_t len)
{
	char file[256];
	uint8_t hdr[WIRE_HDR_LEN];

	/* A frame: the header, then the payload. */
	snprintf(file, sizeof(file), "seed-%s", name);
	wire_hdr_encode(hdr, type, (uint32_t)len);
	fuzz_seed_write(dir, file, hdr, sizeof(hdr), payload, len);
}

static void seed_desc(const char *dir, const char *name, uint16_t n_nics, uint32_t n_regions)
{
	static struct seg_region regions[8];
	static struct seg_desc d;
	uint8_t buf[4096];
	uint32_t i;

	memset(&d, 0, sizeof(d));
	d.incarnation = 0x0123456789abcdefull;
	d.n_nics = n_nics;
	d.n_regions = n_regions;
	d.regions = regions;
	for (i = 0; i < n_nics; i++) {
		snprintf(d.nics[i].provider, WIRE_PROVIDER_LEN, i % 2 ? "verbs" : "loop");
		memset(d.nics[i].addr.bytes, (int)i + 1, NIC_ADDR_LEN);
	}
	for (i = 0; i < n_regions && i < 8; i++) {
		regions[i].addr = 0x10000ull * (i + 1);
		regions[i].len = 0x8000ull + i;
		regions[i].rkey[0] = 0x1000 + i;
		regions[i].rkey[1] = 0x2000 + i;
	}
	if (wire_desc_encode(&d, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, name, WIRE_DESC, buf, wire_desc_size(&d));
}

static void seed_auth(const char *dir)
{
	struct wire_auth_hello h = { .alg = WIRE_AUTH_ALG };
	struct wire_auth_proof p;
	uint8_t buf[64];

	memset(h.nonce, 0x5a, sizeof(h.nonce));
	memset(p.mac, 0xa5, sizeof(p.mac));
	if (wire_auth_hello_encode(&h, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "auth-hello", WIRE_AUTH_HELLO, buf, WIRE_AUTH_HELLO_LEN);
	if (wire_auth_proof_encode(&p, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "auth-proof", WIRE_AUTH_PROOF, buf, WIRE_AUTH_PROOF_LEN);
}

static void seed_notify(const char *dir)
{
	struct wire_notify n = { .from = "127.0.0.1:7000", .len = 5, .msg = "ready" };
	uint8_t buf[WIRE_NOTIFY_TO_MAX_LEN];

	if (wire_notify_encode(&n, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "notify", WIRE_NOTIFY, buf, wire_notify_size(&n));
	snprintf(n.from, sizeof(n.from), "prefill-0");
	n.len = WIRE_NOTIFY_MAX;
	memset(n.msg, 0x7e, sizeof(n.msg));
	if (wire_notify_encode(&n, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "notify-max", WIRE_NOTIFY, buf, wire_notify_size(&n));
	seed_write(dir, "notify-rep", WIRE_NOTIFY_REP, NULL, 0);
	n.to_incarnation = 0x0123456789abcdefull;
	if (wire_notify_to_encode(&n, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "notify-to", WIRE_NOTIFY_TO, buf, wire_notify_to_size(&n));
}

static void seed_ep(const char *dir)
{
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct wire_disconnect d = { 0x1111, 0x2222 };
	uint8_t buf[512];
	uint16_t i;

	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	req.incarnation = 0x1111;
	req.token = 0x2222;
	req.target_incarnation = 0x3333;
	req.target_nic = 1;
	strcpy(req.nic.provider, "verbs");
	memset(req.nic.addr.bytes, 0xfe, NIC_ADDR_LEN);
	rep.token = 0x2222;
	for (i = 0; i < WIRE_MAX_EP_QPS; i++) {
		req.qps[i] = (struct nic_qp_info){ .qpn = 0x100u + i, .psn = 0x200u + i };
		rep.qps[i] = (struct nic_qp_info){ .qpn = 0x300u + i, .psn = 0x400u + i };
	}
	req.n_qps = rep.n_qps = 2;
	if (wire_connect_req_encode(&req, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "connect-req-2", WIRE_CONNECT_REQ, buf, wire_connect_req_size(&req));
	if (wire_connect_rep_encode(&rep, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "connect-rep-2", WIRE_CONNECT_REP, buf, wire_connect_rep_size(&rep));
	req.n_qps = rep.n_qps = WIRE_MAX_EP_QPS;
	if (wire_connect_req_encode(&req, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "connect-req-max", WIRE_CONNECT_REQ, buf, wire_connect_req_size(&req));
	if (wire_connect_rep_encode(&rep, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "connect-rep-max", WIRE_CONNECT_REP, buf, wire_connect_rep_size(&rep));
	if (wire_disconnect_encode(&d, buf, sizeof(buf)))
		exit(1);
	seed_write(dir, "disconnect", WIRE_DISCONNECT, buf, WIRE_DISCONNECT_LEN);
	seed_write(dir, "get-desc", WIRE_GET_DESC, NULL, 0);
	seed_write(dir, "disconnect-rep", WIRE_DISCONNECT_REP, NULL, 0);
	seed_auth(dir);
	seed_notify(dir);
	{
		struct cma_id id = { .pid = 4242, .uid = 1000, .ns_ino = 0xeffffffc, .ns_dev = 4,
				     .boot = { 0xd6, 0xb8 }, .probe = 0x55d0c0de1000,
				     .table = 0x7f0012340000, .start = 123456 };
		struct nic_addr a;

		cma_addr_encode(&id, &a);
		seed_write(dir, "cma-addr", WIRE_DESC, a.bytes, NIC_ADDR_LEN);
	}
	{
		struct fv_addr f = { .port = 1, .mtu = IBV_MTU_4096, .rd_atomic = 16,
				     .link_layer = IBV_LINK_LAYER_ETHERNET, .gid_index = 3,
				     .has_alt = true, .alt_gid_index = 5,
				     .gid = { [10] = 0xff, [11] = 0xff, 10, 0, 0, 1 },
				     .alt_gid = { 0xfe, 0x80, [15] = 1 } };
		struct nic_addr a;

		fv_addr_pack(&f, &a);
		seed_write(dir, "verbs-addr-roce", WIRE_DESC, a.bytes, NIC_ADDR_LEN);
		f = (struct fv_addr){ .port = 1, .mtu = IBV_MTU_2048, .rd_atomic = 16, .lid = 0x42,
				      .link_layer = IBV_LINK_LAYER_INFINIBAND };
		fv_addr_pack(&f, &a);
		seed_write(dir, "verbs-addr-ib", WIRE_DESC, a.bytes, NIC_ADDR_LEN);
	}
	{
		struct cma_mr_slot ms = { .key = 0x00020007, .access = NIC_ACCESS_ALL,
					  .base = 0x7f0012340000, .len = 0x10000 };
		uint8_t b[4 + sizeof(ms) + 1];

		memcpy(b, &ms.key, 4);
		memcpy(b + 4, &ms, sizeof(ms));
		b[4 + sizeof(ms)] = 0; /* the slot's own key: taken */
		seed_write(dir, "cma-rkey", WIRE_DESC, b, sizeof(b));
	}
	buf[0] = (uint8_t)-ESTALE;
	buf[1] = buf[2] = buf[3] = 0xff;
	seed_write(dir, "error", WIRE_ERROR, buf, 4);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FERRY_FUZZ_SEEDS");

	(void)argc;
	(void)argv;
	if (!dir)
		return 0;
	seed_desc(dir, "desc-1x0", 1, 0);
	seed_desc(dir, "desc-2x3", 2, 3);
	seed_desc(dir, "desc-2x8", 2, 8);
	seed_ep(dir);
	exit(0);
}
