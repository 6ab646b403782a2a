/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the verbs provider (qp/verbs/verbs.c) without an RDMA device:
 * GID choice on hand-made tables, address packing, the attributes of the
 * QP state transitions, WR translation and error mapping on post, and
 * completion mapping on poll.  The verbs calls are stubbed through
 * fv_set_ops(); provider objects are built by hand around fake ibv objects
 * (the stubs never dereference them).  tests/tools/verbs_smoke.c runs the real
 * thing in the Soft-RoCE VM.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qp/nic.h"
#include "qp/verbs/verbs.h"
#include "ring/base/log.h"
#include "tests/harness/nic_wr.h"

static const struct nic_provider *P = &nic_verbs_provider;

/* ------------------------------------------------------------ GID tables */

static const uint8_t GID_LL[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff,
				    0xfe, 0x33, 0x44, 0x55 };
static const uint8_t GID_V4[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1 };
static const uint8_t GID_V6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7 };
static const uint8_t GID_ZERO[16];

static struct fv_gid ent(int index, const uint8_t *gid, int type)
{
	struct fv_gid g = { .index = index, .type = type };

	memcpy(g.gid, gid, 16);
	return g;
}

/* The GID index chosen from tbl, or the negative error. */
static int choose(const struct fv_gid *tbl, int n, int forced, char *why)
{
	int pos = fv_choose_gid(tbl, n, forced, why, 256);

	return pos < 0 ? pos : tbl[pos].index;
}

static void test_gid_link_local_only(void **state)
{
	struct fv_gid t[] = { ent(0, GID_LL, IBV_GID_TYPE_ROCE_V2) };
	char why[256];

	(void)state;
	assert_int_equal(choose(t, 1, -1, why), 0);
	assert_non_null(strstr(why, "link-local"));
	assert_string_equal(fv_gid_kind(GID_LL, IBV_GID_TYPE_ROCE_V2), "RoCE v2, link-local");
}

static void test_gid_v1_only(void **state)
{
	struct fv_gid t[] = {
		ent(0, GID_ZERO, IBV_GID_TYPE_ROCE_V1),
		ent(2, GID_V4, IBV_GID_TYPE_ROCE_V1),
		ent(1, GID_LL, IBV_GID_TYPE_ROCE_V1),
	};
	char why[256];

	(void)state;
	/* Zero entries never; among equals the lowest index. */
	assert_int_equal(choose(t, 3, -1, why), 1);
	assert_non_null(strstr(why, "RoCE v1"));
}

/* Every order of v2 IPv4, v2 IPv6, v2 link-local (plus v1 and noise): IPv4 wins. */
static void test_gid_v2_every_order(void **state)
{
	static const int perm[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
					{ 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
	const struct fv_gid base[3] = {
		ent(4, GID_V4, IBV_GID_TYPE_ROCE_V2),
		ent(5, GID_V6, IBV_GID_TYPE_ROCE_V2),
		ent(6, GID_LL, IBV_GID_TYPE_ROCE_V2),
	};
	char why[256];

	(void)state;
	for (int p = 0; p < 6; p++) {
		struct fv_gid t[6];

		t[0] = ent(0, GID_V4, IBV_GID_TYPE_ROCE_V1);
		for (int i = 0; i < 3; i++)
			t[1 + i] = base[perm[p][i]];
		t[4] = ent(1, GID_ZERO, IBV_GID_TYPE_ROCE_V2);
		t[5] = ent(2, GID_V6, IBV_GID_TYPE_IB); /* never on RoCE */
		assert_int_equal(choose(t, 6, -1, why), 4);
		assert_non_null(strstr(why, "IPv4-mapped"));
		/* Without the IPv4 one: the global IPv6 one, then link-local. */
		for (int i = 1; i < 6; i++)
			if (t[i].index == 4)
				t[i] = ent(4, GID_ZERO, IBV_GID_TYPE_ROCE_V2);
		assert_int_equal(choose(t, 6, -1, why), 5);
		assert_non_null(strstr(why, "IPv6"));
		for (int i = 1; i < 6; i++)
			if (t[i].index == 5)
				t[i].type = IBV_GID_TYPE_ROCE_V1;
		assert_int_equal(choose(t, 6, -1, why), 6);
	}
}

static void test_gid_ties_and_empty(void **state)
{
	struct fv_gid t[] = {
		ent(9, GID_V4, IBV_GID_TYPE_ROCE_V2),
		ent(3, GID_V4, IBV_GID_TYPE_ROCE_V2),
	};
	struct fv_gid z[] = { ent(0, GID_ZERO, IBV_GID_TYPE_ROCE_V2) };
	char why[256];

	(void)state;
	assert_int_equal(choose(t, 2, -1, why), 3);
	assert_int_equal(choose(z, 1, -1, why), -ENOENT);
	assert_int_equal(choose(NULL, 0, -1, why), -ENOENT);
}

static void test_gid_forced(void **state)
{
	struct fv_gid t[] = {
		ent(0, GID_LL, IBV_GID_TYPE_ROCE_V2),
		ent(1, GID_V4, IBV_GID_TYPE_ROCE_V2),
		ent(2, GID_ZERO, IBV_GID_TYPE_ROCE_V2),
	};
	char why[256];

	(void)state;
	assert_int_equal(choose(t, 3, 0, why), 0);
	assert_non_null(strstr(why, "FERRY_GID_INDEX=0"));
	assert_int_equal(choose(t, 3, 1, why), 1);
	assert_int_equal(choose(t, 3, 7, why), -ENOENT);
	assert_non_null(strstr(why, "no such GID"));
	assert_int_equal(choose(t, 3, 2, why), -EINVAL);
	assert_non_null(strstr(why, "empty"));
}

/*
 * An IPv4 link-local address (169.254.0.0/16: a netdev's autoconfigured
 * fallback next to its real address) is no more routable than fe80::/10:
 * a routable IPv4 GID wins over it, whatever the indexes.  It still comes
 * before IPv6 ones: a port with any IPv4 GID picks an IPv4 one, which is
 * what keeps both ends of a mixed-family pair on one pair (roce_gids).
 */
static void test_gid_v4_link_local(void **state)
{
	static const uint8_t GID_V4LL[16] = { 0, 0, 0, 0, 0, 0, 0, 0,
					      0, 0, 0xff, 0xff, 169, 254, 7, 9 };
	struct fv_gid t[] = {
		ent(0, GID_LL, IBV_GID_TYPE_ROCE_V2),
		ent(1, GID_V4LL, IBV_GID_TYPE_ROCE_V2),
		ent(2, GID_V4, IBV_GID_TYPE_ROCE_V2),
	};
	struct fv_gid six[] = {
		ent(0, GID_LL, IBV_GID_TYPE_ROCE_V2),
		ent(1, GID_V4LL, IBV_GID_TYPE_ROCE_V2),
		ent(3, GID_V6, IBV_GID_TYPE_ROCE_V2),
	};
	char why[256];

	(void)state;
	assert_int_equal(choose(t, 3, -1, why), 2);
	assert_int_equal(choose(six, 3, -1, why), 1);
	assert_non_null(strstr(why, "link-local"));
	/* For IPv6-only peers: the global IPv6 one, not fe80:: */
	assert_int_equal(fv_choose_alt_gid(six, 3, 1), 2);
	assert_int_equal(choose(six, 2, -1, why), 1);
	assert_string_equal(fv_gid_kind(GID_V4LL, IBV_GID_TYPE_ROCE_V2),
			    "RoCE v2, IPv4-mapped, link-local");
}

/* The alternate GID: the best RoCE v2 one of the other IP family. */
static void test_gid_alt(void **state)
{
	struct fv_gid t[] = {
		ent(0, GID_LL, IBV_GID_TYPE_ROCE_V2),
		ent(1, GID_V4, IBV_GID_TYPE_ROCE_V2),
		ent(2, GID_V6, IBV_GID_TYPE_ROCE_V1),
		ent(3, GID_V6, IBV_GID_TYPE_ROCE_V2),
		ent(4, GID_ZERO, IBV_GID_TYPE_ROCE_V2),
	};
	struct fv_gid only4[] = { ent(1, GID_V4, IBV_GID_TYPE_ROCE_V2) };
	struct fv_gid v1[] = { ent(0, GID_V4, IBV_GID_TYPE_ROCE_V1),
			       ent(1, GID_V6, IBV_GID_TYPE_ROCE_V1) };

	(void)state;
	assert_int_equal(fv_choose_alt_gid(t, 5, 1), 3);  /* IPv4 chosen: global IPv6 */
	assert_int_equal(fv_choose_alt_gid(t, 5, 3), 1);  /* IPv6 chosen: the IPv4 one */
	t[3] = ent(3, GID_ZERO, IBV_GID_TYPE_ROCE_V2);
	assert_int_equal(fv_choose_alt_gid(t, 5, 1), 0);  /* then link-local, never v1 */
	assert_int_equal(fv_choose_alt_gid(only4, 1, 0), -ENOENT);
	assert_int_equal(fv_choose_alt_gid(v1, 2, 0), -ENOENT); /* v1: not IP-routed */
}

/* ------------------------------------------------------------ stubs */

#define MAX_CALLS 8
#define MAX_WRS 512

static struct {
	/* modify_qp */
	int nmod;
	struct ibv_qp_attr attr[MAX_CALLS];
	int mask[MAX_CALLS];
	int mod_fail_at; /* call index that fails, -1 none */
	int mod_rc;
	/* post_send: every WR seen, flattened; the chain heads per call */
	int nposts;
	int nwr;
	struct ibv_send_wr wr[MAX_WRS];
	struct ibv_sge sge[MAX_WRS];
	int post_fail_call;  /* -1 none */
	int post_fail_index; /* bad WR within that call; -1: *bad left NULL */
	int post_rc;
	/* poll_cq */
	const struct ibv_wc *wcs;
	int nwcs;
	int wc_pos;
	int poll_rc; /* < 0: fail */
	int npolls;
	/* query_gid_ex */
	const struct ibv_gid_entry *gids;
	int ngids;
	int gid_rc; /* != 0: every query fails so */
} S;

static int stub_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	(void)qp;
	assert_true(S.nmod < MAX_CALLS);
	S.attr[S.nmod] = *attr;
	S.mask[S.nmod] = mask;
	return S.nmod++ == S.mod_fail_at ? S.mod_rc : 0;
}

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int call = S.nposts++, i = 0;

	(void)qp;
	for (; wr; wr = wr->next, i++) {
		assert_true(S.nwr < MAX_WRS);
		if (call == S.post_fail_call && i == S.post_fail_index) {
			*bad = wr;
			return S.post_rc;
		}
		S.wr[S.nwr] = *wr;
		if (wr->num_sge)
			S.sge[S.nwr] = wr->sg_list[0];
		S.nwr++;
	}
	return call == S.post_fail_call ? S.post_rc : 0;
}

/* reg_mr: every registration succeeds, with the access flags recorded. */
static struct ibv_mr stub_mrs[4];
static int stub_nmr, stub_mr_access[4];

static struct ibv_mr *stub_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	struct ibv_mr *mr = &stub_mrs[stub_nmr];

	assert_true(stub_nmr < 4);
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = 0x100u + (uint32_t)stub_nmr;
	mr->rkey = 0x200u + (uint32_t)stub_nmr;
	stub_mr_access[stub_nmr++] = access;
	return mr;
}

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int k = 0;

	(void)cq;
	S.npolls++;
	if (S.poll_rc < 0)
		return S.poll_rc;
	while (k < n && S.wc_pos < S.nwcs)
		wc[k++] = S.wcs[S.wc_pos++];
	return k;
}

static int stub_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags)
{
	(void)ctx;
	(void)flags;
	assert_int_equal(port, 1);
	if (S.gid_rc)
		return S.gid_rc;
	for (int i = 0; i < S.ngids; i++)
		if (S.gids[i].gid_index == index) {
			*entry = S.gids[i];
			return 0;
		}
	return ENODATA;
}

/* query_port: the port's attributes as the stub reports them. */
static struct ibv_port_attr stub_pa;
static int stub_port_rc, stub_nport;

static int stub_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa)
{
	(void)ctx;
	assert_int_equal(port, 1);
	stub_nport++;
	if (stub_port_rc)
		return stub_port_rc;
	*pa = stub_pa;
	return 0;
}

/* Device events the stub hands out, in order; then EAGAIN. */
static struct ibv_async_event stub_events[4];
static unsigned stub_nevents, stub_acked;

static int stub_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	(void)ctx;
	if (!stub_nevents) {
		errno = EAGAIN;
		return -1;
	}
	*ev = stub_events[0];
	memmove(&stub_events[0], &stub_events[1], --stub_nevents * sizeof(stub_events[0]));
	return 0;
}

static void stub_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
	stub_acked++;
}

static const struct fv_ops stub_ops = {
	.get_async_event = stub_get_async_event,
	.ack_async_event = stub_ack_async_event,
	.post_send = stub_post_send,
	.reg_mr = stub_reg_mr,
	.poll_cq = stub_poll_cq,
	.modify_qp = stub_modify_qp,
	.query_gid_ex = stub_query_gid_ex,
	.query_port = stub_query_port,
};

/* A RoCE NIC, a CQ and a QP around fake ibv objects. */
static struct ibv_qp fake_ibqp;
static struct ibv_cq fake_ibcq;
static struct fv_nic nic;
static struct fv_cq cq;
static struct fv_qp qp;

static int setup(void **state)
{
	(void)state;
	memset(&S, 0, sizeof(S));
	S.mod_fail_at = -1;
	S.post_fail_call = -1;
	fv_set_ops(&stub_ops);

	memset(&nic, 0, sizeof(nic));
	snprintf(nic.name, sizeof(nic.name), "fake0");
	nic.port = 1;
	nic.link_layer = IBV_LINK_LAYER_ETHERNET;
	nic.active_mtu = IBV_MTU_4096;
	nic.gid_type = IBV_GID_TYPE_ROCE_V2;
	nic.gid_index = 3;
	memcpy(nic.gid.raw, GID_V4, 16);
	nic.max_rd_atomic = 16;
	nic.max_dest_rd_atomic = 16;
	nic.numa_node = -1;
	memset(&stub_pa, 0, sizeof(stub_pa));
	stub_port_rc = 0;
	stub_nport = 0;

	memset(&fake_ibqp, 0, sizeof(fake_ibqp));
	fake_ibqp.qp_num = 0x123;
	memset(&cq, 0, sizeof(cq));
	cq.cq = &fake_ibcq;
	cq.nic = &nic;
	memset(&qp, 0, sizeof(qp));
	qp.qp = &fake_ibqp;
	qp.nic = &nic;
	qp.cq = &cq;
	qp.psn = 0xabcdef;
	qp.max_inline = 64;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fv_set_ops(NULL);
	unsetenv("FERRY_GID_INDEX");
	unsetenv("FERRY_IB_RD_ATOMIC");
	return 0;
}

static struct nic_qp *nqp(void)
{
	return (struct nic_qp *)(void *)&qp;
}

static struct nic_cq *ncq(void)
{
	return (struct nic_cq *)(void *)&cq;
}

/* ------------------------------------------------------------ GID selection */

static void test_select_gid_from_port(void **state)
{
	struct ibv_gid_entry g[3];

	(void)state;
	memset(g, 0, sizeof(g));
	g[0].gid_index = 0;
	memcpy(g[0].gid.raw, GID_LL, 16);
	g[0].gid_type = IBV_GID_TYPE_ROCE_V2;
	g[1].gid_index = 2; /* index 1 is a hole: ENODATA */
	memcpy(g[1].gid.raw, GID_V4, 16);
	g[1].gid_type = IBV_GID_TYPE_ROCE_V2;
	g[2].gid_index = 3;
	memcpy(g[2].gid.raw, GID_V6, 16);
	g[2].gid_type = IBV_GID_TYPE_ROCE_V1;
	S.gids = g;
	S.ngids = 3;

	assert_int_equal(fv_select_gid(&nic, 8), 0);
	assert_int_equal(nic.gid_index, 2);
	assert_memory_equal(nic.gid.raw, GID_V4, 16);
	assert_int_equal(nic.gid_type, IBV_GID_TYPE_ROCE_V2);
	/* For IPv6-only peers: the link-local one (index 3 is RoCE v1). */
	assert_true(nic.has_alt);
	assert_int_equal(nic.alt_gid_index, 0);
	assert_memory_equal(nic.alt_gid.raw, GID_LL, 16);

	setenv("FERRY_GID_INDEX", "0", 1);
	assert_int_equal(fv_select_gid(&nic, 8), 0);
	assert_int_equal(nic.gid_index, 0);
	assert_memory_equal(nic.gid.raw, GID_LL, 16);
	assert_false(nic.has_alt); /* forced: that one only */

	setenv("FERRY_GID_INDEX", "1", 1); /* the hole */
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	setenv("FERRY_GID_INDEX", "7", 1);
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	setenv("FERRY_GID_INDEX", "2x", 1);
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	/* Digits only, as the FERRY_* options: strtol took these as index 0. */
	setenv("FERRY_GID_INDEX", " 0", 1);
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	setenv("FERRY_GID_INDEX", "+0", 1);
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	setenv("FERRY_GID_INDEX", "-0", 1);
	assert_int_equal(fv_select_gid(&nic, 8), -EINVAL);
	setenv("FERRY_GID_INDEX", "", 1); /* empty: automatic */
	assert_int_equal(fv_select_gid(&nic, 8), 0);
	assert_int_equal(nic.gid_index, 2);

	S.ngids = 0; /* nothing usable */
	unsetenv("FERRY_GID_INDEX");
	assert_int_equal(fv_select_gid(&nic, 8), -EADDRNOTAVAIL);
}

/*
 * A QP names its source GID by an 8-bit index (ibv_global_route's
 * sgid_index): an entry past 255 in a longer table (rxe has 1024) cannot be
 * used, and cast down it would be another GID.  It is never chosen, and
 * FERRY_GID_INDEX cannot force it.
 */
static void test_select_gid_index_8bit(void **state)
{
	struct ibv_gid_entry g[2];

	(void)state;
	memset(g, 0, sizeof(g));
	g[0].gid_index = 2;
	memcpy(g[0].gid.raw, GID_V6, 16);
	g[0].gid_type = IBV_GID_TYPE_ROCE_V2;
	g[1].gid_index = 300; /* 300 & 0xff == 44: someone else's, or nothing */
	memcpy(g[1].gid.raw, GID_V4, 16);
	g[1].gid_type = IBV_GID_TYPE_ROCE_V2;
	S.gids = g;
	S.ngids = 2;

	assert_int_equal(fv_select_gid(&nic, 1024), 0);
	assert_int_equal(nic.gid_index, 2);
	assert_memory_equal(nic.gid.raw, GID_V6, 16);
	assert_false(nic.has_alt);

	setenv("FERRY_GID_INDEX", "300", 1);
	assert_int_equal(fv_select_gid(&nic, 1024), -EINVAL);
}

/* ------------------------------------------------------------ addresses */

static void test_addr_round_trip(void **state)
{
	struct fv_addr a = { .lid = 0xbeef, .port = 2, .mtu = IBV_MTU_1024,
			     .link_layer = IBV_LINK_LAYER_ETHERNET, .gid_index = 1, .rd_atomic = 8 };
	struct fv_addr b;
	struct nic_addr na, out;

	(void)state;
	memcpy(a.gid, GID_V4, 16);
	fv_addr_pack(&a, &na);
	assert_memory_equal(na.bytes, "VRBS", 4);
	assert_int_equal(na.bytes[4], VERBS_ADDR_VERSION);
	assert_memory_equal(na.bytes + 8, GID_V4, 16);
	assert_int_equal(na.bytes[24], 0xef); /* LID little endian */
	assert_int_equal(na.bytes[25], 0xbe);
	for (int i = 28; i < NIC_ADDR_LEN; i++)
		assert_int_equal(na.bytes[i], 0);
	memset(&b, 0x55, sizeof(b));
	assert_int_equal(fv_addr_unpack(&na, &b), 0);
	assert_memory_equal(b.gid, a.gid, 16);
	assert_int_equal(b.lid, a.lid);
	assert_int_equal(b.port, a.port);
	assert_int_equal(b.mtu, a.mtu);
	assert_int_equal(b.link_layer, a.link_layer);
	assert_int_equal(b.gid_index, a.gid_index);
	assert_int_equal(b.rd_atomic, a.rd_atomic);

	/* The provider's own addr() packs the NIC's fields. */
	P->addr((const struct nic *)(const void *)&nic, &out);
	assert_int_equal(fv_addr_unpack(&out, &b), 0);
	assert_memory_equal(b.gid, GID_V4, 16);
	assert_int_equal(b.gid_index, 3);
	assert_int_equal(b.mtu, IBV_MTU_4096);
	assert_int_equal(b.rd_atomic, 16);
}

static void test_addr_magic(void **state)
{
	struct fv_addr a = { .mtu = IBV_MTU_4096, .port = 1,
			     .link_layer = IBV_LINK_LAYER_ETHERNET }, b;
	struct nic_addr na;

	(void)state;
	memcpy(a.gid, GID_V4, 16);
	fv_addr_pack(&a, &na);
	memcpy(na.bytes, "LOOP", 4);
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	fv_addr_pack(&a, &na);
	na.bytes[4] = VERBS_ADDR_VERSION + 1;
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	fv_addr_pack(&a, &na);
	na.bytes[7] = 0; /* no such MTU */
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	na.bytes[7] = IBV_MTU_4096 + 1;
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	/* What the layout leaves zero must be zero: a peer's bytes are read strictly. */
	for (int i = 28; i < NIC_ADDR_LEN; i++) {
		fv_addr_pack(&a, &na);
		na.bytes[i] = i == 48 ? 2 : 1;
		assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	}
	fv_addr_pack(&a, &na);
	na.bytes[48] = 1; /* an alternate GID flagged, all zero */
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	na.bytes[32] = 0xfe; /* one that is there */
	assert_int_equal(fv_addr_unpack(&na, &b), 0);
	assert_true(b.has_alt);
}

/*
 * Only what a port of ours could say decodes, and a refusal leaves nothing
 * decoded (before, the fields read so far stayed in the output): a link
 * layer we know, a port number, on InfiniBand a unicast LID, on Ethernet
 * a GID.  Before, all of these decoded (a zero GID reached the RTR as the
 * destination, a LID 0 or multicast one as the DLID).
 */
static void test_addr_strict(void **state)
{
	static const uint16_t bad_lids[] = { 0, 0xc000, 0xfffe, 0xffff };
	struct fv_addr a = { .mtu = IBV_MTU_4096, .port = 1, .lid = 0xbfff,
			     .link_layer = IBV_LINK_LAYER_INFINIBAND }, b, zero;
	struct nic_addr na;

	(void)state;
	memset(&zero, 0, sizeof(zero));
	fv_addr_pack(&a, &na); /* IB: the GID is carried, not used */
	assert_int_equal(fv_addr_unpack(&na, &b), 0);
	assert_int_equal(b.lid, 0xbfff);
	for (unsigned i = 0; i < sizeof(bad_lids) / sizeof(bad_lids[0]); i++) {
		a.lid = bad_lids[i];
		fv_addr_pack(&a, &na);
		memset(&b, 0x55, sizeof(b));
		assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
		assert_memory_equal(&b, &zero, sizeof(b));
	}
	a.lid = 1;
	a.port = 0;
	fv_addr_pack(&a, &na);
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	a.port = 1;
	a.link_layer = IBV_LINK_LAYER_ETHERNET; /* RoCE: a GID, any LID */
	fv_addr_pack(&a, &na);
	memset(&b, 0x55, sizeof(b));
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	assert_memory_equal(&b, &zero, sizeof(b));
	memcpy(a.gid, GID_V6, 16);
	fv_addr_pack(&a, &na);
	assert_int_equal(fv_addr_unpack(&na, &b), 0);
	for (unsigned ll = 0; ll < 256; ll++) {
		if (ll == IBV_LINK_LAYER_ETHERNET || ll == IBV_LINK_LAYER_INFINIBAND)
			continue;
		a.link_layer = (uint8_t)ll;
		fv_addr_pack(&a, &na);
		assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	}
	/* A refusal for the magic: the output is zeroed too. */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	fv_addr_pack(&a, &na);
	na.bytes[0] = 'X';
	memset(&b, 0x55, sizeof(b));
	assert_int_equal(fv_addr_unpack(&na, &b), -EINVAL);
	assert_memory_equal(&b, &zero, sizeof(b));
}

/* ------------------------------------------------------------ QP transitions */

static void remote_addr(struct nic_addr *na, uint8_t mtu, uint8_t rd, uint8_t ll)
{
	struct fv_addr a = { .lid = 0x42, .port = 1, .mtu = mtu, .link_layer = ll,
			     .gid_index = 1, .rd_atomic = rd };

	memcpy(a.gid, GID_V6, 16);
	fv_addr_pack(&a, na);
}

static void test_qp_init_attr(void **state)
{
	const struct ibv_qp_attr *a = &S.attr[0];

	(void)state;
	assert_int_equal(fv_qp_to_init(&qp), 0);
	assert_int_equal(S.nmod, 1);
	assert_int_equal(S.mask[0], IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
	assert_int_equal(a->qp_state, IBV_QPS_INIT);
	assert_int_equal(a->pkey_index, 0);
	assert_int_equal(a->port_num, 1);
	assert_int_equal(a->qp_access_flags, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_LOCAL_WRITE);
	S.mod_fail_at = 1;
	S.mod_rc = EINVAL;
	assert_int_equal(fv_qp_to_init(&qp), -EINVAL);
}

static void test_qp_connect_roce(void **state)
{
	struct nic_qp_info r = { .qpn = 0x456, .psn = 0x123456 };
	const struct ibv_qp_attr *rtr = &S.attr[0], *rts = &S.attr[1];
	struct nic_addr na;

	(void)state;
	nic.active_mtu = IBV_MTU_4096;
	remote_addr(&na, IBV_MTU_1024, 8, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.nmod, 2);

	assert_int_equal(S.mask[0], IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					    IBV_QP_MIN_RNR_TIMER);
	assert_int_equal(rtr->qp_state, IBV_QPS_RTR);
	assert_int_equal(rtr->path_mtu, IBV_MTU_1024); /* min(4096, 1024) */
	assert_int_equal(rtr->dest_qp_num, 0x456);
	assert_int_equal(rtr->rq_psn, 0x123456);
	assert_int_equal(rtr->max_dest_rd_atomic, 16);
	assert_int_equal(rtr->min_rnr_timer, 12);
	assert_int_equal(rtr->ah_attr.is_global, 1);
	assert_memory_equal(rtr->ah_attr.grh.dgid.raw, GID_V6, 16);
	assert_int_equal(rtr->ah_attr.grh.sgid_index, 3);
	assert_int_equal(rtr->ah_attr.grh.hop_limit, 64);
	assert_int_equal(rtr->ah_attr.port_num, 1);
	assert_int_equal(rtr->ah_attr.dlid, 0);

	assert_int_equal(S.mask[1], IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC);
	assert_int_equal(rts->qp_state, IBV_QPS_RTS);
	assert_int_equal(rts->timeout, 14);
	assert_int_equal(rts->retry_cnt, 6); /* 7 is "for ever" on rxe */
	assert_int_equal(rts->rnr_retry, 7);
	assert_int_equal(rts->sq_psn, 0xabcdef);
	assert_int_equal(rts->max_rd_atomic, 8); /* what the peer grants */

	assert_int_equal(rtr->ah_attr.grh.traffic_class, 0);
	assert_int_equal(rtr->ah_attr.sl, 0);

	/* RC connects once. */
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EISCONN);
	assert_int_equal(S.nmod, 2);
}

/* How often a bad FERRY_IB_TC and FERRY_IB_SL were reported. */
static struct {
	unsigned tc, sl;
} env_said;

static void env_sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	env_said.tc += strstr(msg, "FERRY_IB_TC=") != NULL;
	env_said.sl += strstr(msg, "FERRY_IB_SL=") != NULL;
}

/* FERRY_IB_TC / FERRY_IB_SL reach the address vector; out of range: 0. */
static void test_qp_connect_tc_sl(void **state)
{
	struct nic_qp_info r = { .qpn = 0x456, .psn = 0x123456 };
	const struct ibv_qp_attr *rtr = &S.attr[0];
	struct nic_addr na;

	(void)state;
	nic.active_mtu = IBV_MTU_4096;
	remote_addr(&na, IBV_MTU_1024, 8, IBV_LINK_LAYER_ETHERNET);
	setenv("FERRY_IB_TC", "106", 1); /* DSCP 26 (AF31) << 2 */
	setenv("FERRY_IB_SL", "3", 1);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(rtr->ah_attr.grh.traffic_class, 106);
	assert_int_equal(rtr->ah_attr.sl, 3);

	qp.connected = false;
	S.nmod = 0;
	setenv("FERRY_IB_TC", "256", 1);
	setenv("FERRY_IB_SL", "16", 1);
	memset(&env_said, 0, sizeof(env_said));
	log_set_sink(env_sink, NULL);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(rtr->ah_attr.grh.traffic_class, 0);
	assert_int_equal(rtr->ah_attr.sl, 0);
	/* Each bad variable reported, once (README): one flag for all of
	 * them said nothing of the second, nor of any after another's. */
	qp.connected = false;
	S.nmod = 0;
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	log_set_sink(NULL, NULL);
	assert_int_equal(env_said.tc, 1);
	assert_int_equal(env_said.sl, 1);
	unsetenv("FERRY_IB_TC");
	unsetenv("FERRY_IB_SL");
}

/*
 * IPv4 and IPv6 on this port, IPv6 only at the peer (or the reverse): both
 * ends use the IPv6 pair -- an IPv4 source with an IPv6 destination cannot
 * be carried (rxe refuses the RTR).
 */
static void test_qp_connect_family(void **state)
{
	struct nic_qp_info r = { .qpn = 0x456, .psn = 1 };
	struct fv_addr ra = { .port = 1, .mtu = IBV_MTU_4096, .link_layer = IBV_LINK_LAYER_ETHERNET,
			      .gid_index = 1, .rd_atomic = 8 }, back;
	struct nic_addr na;

	(void)state;
	nic.has_alt = true;
	nic.alt_gid_index = 5;
	memcpy(nic.alt_gid.raw, GID_V6, 16);
	memcpy(ra.gid, GID_LL, 16);
	fv_addr_pack(&ra, &na);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].ah_attr.grh.sgid_index, 5); /* our IPv6 one */
	assert_memory_equal(S.attr[0].ah_attr.grh.dgid.raw, GID_LL, 16);

	/* Our address carries the alternate for the peer's side. */
	P->addr((const struct nic *)(const void *)&nic, &na);
	assert_int_equal(fv_addr_unpack(&na, &back), 0);
	assert_true(back.has_alt);
	assert_int_equal(back.alt_gid_index, 5);
	assert_memory_equal(back.alt_gid, GID_V6, 16);

	/* The peer's side: IPv6 only, we (now the remote) offer IPv4 + IPv6. */
	qp.connected = false;
	S.nmod = 0;
	nic.has_alt = false;
	memcpy(nic.gid.raw, GID_LL, 16);
	nic.gid_index = 0;
	memcpy(ra.gid, GID_V4, 16);
	ra.has_alt = true;
	memcpy(ra.alt_gid, GID_V6, 16);
	fv_addr_pack(&ra, &na);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].ah_attr.grh.sgid_index, 0);
	assert_memory_equal(S.attr[0].ah_attr.grh.dgid.raw, GID_V6, 16);

	/* One family each and no alternate: nothing to fix, the primaries. */
	qp.connected = false;
	S.nmod = 0;
	ra.has_alt = false;
	fv_addr_pack(&ra, &na);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_memory_equal(S.attr[0].ah_attr.grh.dgid.raw, GID_V4, 16);
}

static void test_qp_connect_mtu_and_caps(void **state)
{
	struct nic_qp_info r = { .qpn = 1, .psn = 2 };
	struct nic_addr na;

	(void)state;
	nic.active_mtu = IBV_MTU_2048;
	nic.max_rd_atomic = 4;
	nic.max_dest_rd_atomic = 6;
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].path_mtu, IBV_MTU_2048);
	/* We grant our responder resources, we initiate no more than our depth. */
	assert_int_equal(S.attr[0].max_dest_rd_atomic, 6);
	assert_int_equal(S.attr[1].max_rd_atomic, 4);
}

/* What nic tells the core (caps: the per-QP READ bound, qp/post/post.c)
 * and what it publishes to peers (the responder resources it grants). */
static void assert_rd_atomic_seen(uint32_t depth, uint32_t grant)
{
	struct nic_caps caps;
	struct nic_addr out;
	struct fv_addr b;

	P->caps((const struct nic *)(const void *)&nic, &caps);
	assert_int_equal(caps.max_rd_atomic, depth);
	P->addr((const struct nic *)(const void *)&nic, &out);
	assert_int_equal(fv_addr_unpack(&out, &b), 0);
	assert_int_equal(b.rd_atomic, grant);
}

/* caps fills every field: the core reads flags from a struct it did not
 * clear (core.c: serves), so stale bytes must not show. */
static void test_caps_filled(void **state)
{
	struct nic_caps caps;

	(void)state;
	memset(&caps, 0xff, sizeof(caps));
	P->caps((const struct nic *)(const void *)&nic, &caps);
	assert_int_equal(caps.flags, 0); /* not NIC_CAP_SERVES, not NIC_CAP_SAME_HOST */
	assert_int_equal(caps.max_rd_atomic, 16);
}

/* qp_info's half of the handshake: the QP's number and PSN, and (nic.h)
 * a zero secret, whatever the caller's struct held. */
static void test_qp_info_filled(void **state)
{
	static const uint8_t zero[NIC_QP_SECRET_LEN];
	struct nic_qp_info qi;

	(void)state;
	memset(&qi, 0xff, sizeof(qi));
	P->qp_info(nqp(), &qi);
	assert_int_equal(qi.qpn, 0x123);
	assert_int_equal(qi.psn, 0xabcdef);
	assert_memory_equal(qi.secret, zero, sizeof(qi.secret));
}

/*
 * The READ bound: FERRY_IB_RD_ATOMIC=0 lets a QP keep as many READs in
 * flight as the device allows (rxe: 128), never more than the peer grants;
 * by default at most VERBS_DEFAULT_RD_ATOMIC (16), what we grant peers
 * staying the device's.
 */
static void test_rd_atomic_bound(void **state)
{
	struct nic_qp_info r = { .qpn = 1, .psn = 2 };
	struct ibv_device_attr da;
	struct nic_addr na;

	(void)state;
	setenv("FERRY_IB_RD_ATOMIC", "0", 1); /* the device's depth, up to the default's test below */
	/* rxe's limits: max_qp_rd_atom = max_qp_init_rd_atom = 128. */
	memset(&da, 0, sizeof(da));
	da.max_qp_wr = 1 << 20;
	da.max_cqe = 1 << 22;
	da.max_qp_rd_atom = 128;
	da.max_qp_init_rd_atom = 128;
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_qp_wr, 1 << 20);
	assert_int_equal(nic.max_cqe, 1 << 22);
	assert_int_equal(nic.max_rd_atomic, 128);
	assert_int_equal(nic.max_dest_rd_atomic, 128);
	assert_rd_atomic_seen(128, 128);

	/* Two rxe ends: 128 both ways. */
	remote_addr(&na, IBV_MTU_4096, 128, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].max_dest_rd_atomic, 128);
	assert_int_equal(S.attr[1].max_rd_atomic, 128);

	/* A peer that grants 16 (an older ferry, or a NIC with 16): 16. */
	qp.connected = false;
	S.nmod = 0;
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].max_dest_rd_atomic, 128);
	assert_int_equal(S.attr[1].max_rd_atomic, 16);
	assert_int_equal(fv_qp_rd_atomic(&nic, 16), 16);
	assert_int_equal(fv_qp_rd_atomic(&nic, 255), 128);

	/* Initiator depth and responder resources are separate device limits. */
	da.max_qp_rd_atom = 64;
	da.max_qp_init_rd_atom = 32;
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 32);
	assert_int_equal(nic.max_dest_rd_atomic, 64);
	assert_int_equal(fv_qp_rd_atomic(&nic, 128), 32);

	/* ibv_qp_attr carries a uint8_t: larger device values clip to 255. */
	da.max_qp_rd_atom = 1024;
	da.max_qp_init_rd_atom = 256;
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, VERBS_MAX_RD_ATOMIC);
	assert_int_equal(nic.max_dest_rd_atomic, VERBS_MAX_RD_ATOMIC);
	assert_int_equal(VERBS_MAX_RD_ATOMIC, 255);
	/* FERRY_IB_RD_ATOMIC lowers the initiator depth, never raises it. */
	da.max_qp_rd_atom = 128;
	da.max_qp_init_rd_atom = 128;
	setenv("FERRY_IB_RD_ATOMIC", "16", 1);
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 16);
	assert_int_equal(nic.max_dest_rd_atomic, 128); /* what we grant stays */
	setenv("FERRY_IB_RD_ATOMIC", "200", 1);
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 128);
	setenv("FERRY_IB_RD_ATOMIC", "0", 1);
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 128);
	setenv("FERRY_IB_RD_ATOMIC", "256", 1); /* out of range: the default (logged once) */
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, VERBS_DEFAULT_RD_ATOMIC);
	/* Digits only, as the FERRY_* options: strtol took these as 8. */
	setenv("FERRY_IB_RD_ATOMIC", "+8", 1);
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, VERBS_DEFAULT_RD_ATOMIC);
	setenv("FERRY_IB_RD_ATOMIC", " 8", 1);
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, VERBS_DEFAULT_RD_ATOMIC);
	/* Unset: the default, 16, what ConnectX reports itself; rxe's 128 lost
	 * packets and went into go-back-N retries (README). */
	unsetenv("FERRY_IB_RD_ATOMIC");
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(VERBS_DEFAULT_RD_ATOMIC, 16);
	assert_int_equal(nic.max_rd_atomic, 16);
	assert_int_equal(nic.max_dest_rd_atomic, 128);
	assert_rd_atomic_seen(16, 128); /* we still grant the device's */
	da.max_qp_init_rd_atom = 8; /* a device below the default keeps its own */
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 8);
	da.max_qp_init_rd_atom = 128;

	/* A device without READ resources reports 0: so do we. */
	da.max_qp_rd_atom = 0;
	da.max_qp_init_rd_atom = -1;
	fv_nic_set_limits(&nic, &da);
	assert_int_equal(nic.max_rd_atomic, 0);
	assert_int_equal(nic.max_dest_rd_atomic, 0);
}

static void test_qp_connect_ib(void **state)
{
	struct nic_qp_info r = { .qpn = 7, .psn = 8 };
	struct nic_addr na;

	(void)state;
	nic.link_layer = IBV_LINK_LAYER_INFINIBAND;
	nic.gid_index = 0;
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_INFINIBAND);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].ah_attr.is_global, 0);
	assert_int_equal(S.attr[0].ah_attr.dlid, 0x42);
	assert_int_equal(S.attr[0].ah_attr.port_num, 1);
}

/* The last error the verbs provider logged. */
static char addr_said[256];

static void addr_sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(addr_said, sizeof(addr_said), "%s", msg);
}

/*
 * A refused peer address is told apart in the log: another provider's
 * (its magic is not ours) from a verbs address with a bad field.  Before,
 * both said "not a verbs address ... another NIC provider?", which sent
 * whoever read it after the wrong cause for a port 0 or a LID 0.
 */
static void test_qp_connect_addr_said(void **state)
{
	struct nic_qp_info r = { .qpn = 7, .psn = 8 };
	struct fv_addr a = { .lid = 0, .port = 1, .mtu = IBV_MTU_4096,
			     .link_layer = IBV_LINK_LAYER_INFINIBAND };
	struct nic_addr na;

	(void)state;
	log_set_sink(addr_sink, NULL);
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_ETHERNET);
	memcpy(na.bytes, "LOOP", 4);
	addr_said[0] = 0;
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	assert_non_null(strstr(addr_said, "another NIC provider"));
	fv_addr_pack(&a, &na); /* IB with LID 0 */
	addr_said[0] = 0;
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	log_set_sink(NULL, NULL);
	print_message("%s\n", addr_said);
	assert_null(strstr(addr_said, "another NIC provider"));
	assert_non_null(strstr(addr_said, "verbs address is invalid"));
	assert_non_null(strstr(addr_said, "LID 0x0"));
	fv_addr_pack(&a, &na);
	na.bytes[4] = VERBS_ADDR_VERSION + 1;
	log_set_sink(addr_sink, NULL);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	log_set_sink(NULL, NULL);
	assert_non_null(strstr(addr_said, "layout version 2"));
	assert_int_equal(S.nmod, 0);
}

static void test_qp_connect_refused(void **state)
{
	struct nic_qp_info r = { .qpn = 7, .psn = 8 };
	struct nic_addr na;

	(void)state;
	/* Not a verbs address, or another link layer: no modify at all. */
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_ETHERNET);
	memcpy(na.bytes, "LOOP", 4);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_INFINIBAND);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	assert_int_equal(P->qp_connect(nqp(), &na, NULL), -EINVAL);
	assert_int_equal(S.nmod, 0);

	/* A failing transition: its errno, positive or negative from the provider. */
	remote_addr(&na, IBV_MTU_4096, 16, IBV_LINK_LAYER_ETHERNET);
	S.mod_fail_at = 0;
	S.mod_rc = EINVAL;
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -EINVAL);
	S.nmod = 0;
	S.mod_fail_at = 1;
	S.mod_rc = -ETIMEDOUT;
	assert_int_equal(P->qp_connect(nqp(), &na, &r), -ETIMEDOUT);
	assert_false(qp.connected);
}

static void test_qp_set_error(void **state)
{
	(void)state;
	assert_int_equal(P->qp_set_error(nqp()), 0);
	assert_int_equal(S.nmod, 1);
	assert_int_equal(S.mask[0], IBV_QP_STATE);
	assert_int_equal(S.attr[0].qp_state, IBV_QPS_ERR);
	S.mod_fail_at = 1;
	S.mod_rc = EINVAL;
	assert_int_equal(P->qp_set_error(nqp()), -EINVAL);
}

/* ------------------------------------------------------------ post */

static void test_post_translation(void **state)
{
	struct nic_wr w[6] = {
		{ .wr_id = 10, .local = 0x1000, .remote = 0x9000, .len = 32, .lkey = 1, .rkey = 2,
		  .op = NIC_OP_WRITE, .signaled = 1 },
		{ .wr_id = 11, .local = 0x1100, .remote = 0x9100, .len = 64, .lkey = 1, .rkey = 2,
		  .op = NIC_OP_WRITE },
		{ .wr_id = 12, .local = 0x1200, .remote = 0x9200, .len = 65, .lkey = 1, .rkey = 2,
		  .op = NIC_OP_WRITE },
		{ .wr_id = 13, .local = 0x1300, .remote = 0x9300, .len = 16, .lkey = 3, .rkey = 4,
		  .op = NIC_OP_READ, .signaled = 1 },
		{ .wr_id = 14, .local = 0x1400, .remote = 0x9400, .len = 65536, .lkey = 5,
		  .rkey = 6, .op = NIC_OP_READ },
		{ .wr_id = 15, .op = NIC_OP_WRITE, .signaled = 1 }, /* drain marker */
	};
	static const int opcode[6] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE,
				       IBV_WR_RDMA_READ, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE };
	static const unsigned flags[6] = { IBV_SEND_SIGNALED | IBV_SEND_INLINE, IBV_SEND_INLINE,
					   0, IBV_SEND_SIGNALED, 0, IBV_SEND_SIGNALED };
	struct nic_wr *bad = NULL;

	(void)state;
	nic_wr_chain(w, 6);
	assert_int_equal(P->post(nqp(), w, &bad), 0);
	assert_null(bad);
	assert_int_equal(S.nposts, 1); /* one doorbell */
	assert_int_equal(S.nwr, 6);
	for (int i = 0; i < 6; i++) {
		const struct ibv_send_wr *x = &S.wr[i];

		assert_int_equal(x->wr_id, w[i].wr_id);
		assert_int_equal(x->opcode, opcode[i]);
		assert_int_equal(x->send_flags, flags[i]);
		assert_int_equal(x->wr.rdma.remote_addr, w[i].remote);
		assert_int_equal(x->wr.rdma.rkey, w[i].rkey);
		assert_int_equal(x->imm_data, 0);
		if (!w[i].len) {
			assert_int_equal(x->num_sge, 0);
			continue;
		}
		assert_int_equal(x->num_sge, 1);
		assert_int_equal(S.sge[i].addr, w[i].local);
		assert_int_equal(S.sge[i].length, w[i].len);
		assert_int_equal(S.sge[i].lkey, w[i].lkey);
	}

	/* No inline on a QP that got none. */
	qp.max_inline = 0;
	S.nwr = 0;
	w[0].next = NULL;
	assert_int_equal(P->post(nqp(), w, &bad), 0);
	assert_int_equal(S.wr[0].send_flags, IBV_SEND_SIGNALED);
}

static void test_post_errors(void **state)
{
	struct nic_wr w[5];
	struct nic_wr *bad = NULL;

	(void)state;
	memset(w, 0, sizeof(w));
	nic_wr_chain(w, 5);

	/* A positive errno and the bad WR: negative, and the matching nic_wr. */
	S.post_fail_call = 0;
	S.post_fail_index = 2;
	S.post_rc = ENOMEM;
	assert_int_equal(P->post(nqp(), w, &bad), -ENOMEM);
	assert_ptr_equal(bad, &w[2]);

	/* Providers that return -errno are mapped the same way. */
	S.nposts = 0;
	S.post_rc = -EINVAL;
	S.post_fail_index = 4;
	assert_int_equal(P->post(nqp(), w, &bad), -EINVAL);
	assert_ptr_equal(bad, &w[4]);

	/* A bad op: what precedes it is posted, it is not. */
	S.nposts = 0;
	S.nwr = 0;
	S.post_fail_call = -1;
	w[3].op = 7;
	assert_int_equal(P->post(nqp(), w, &bad), -EINVAL);
	assert_ptr_equal(bad, &w[3]);
	assert_int_equal(S.nwr, 3);
}

static void test_post_long_chain(void **state)
{
	static struct nic_wr w[300];
	struct nic_wr *bad = NULL;

	(void)state;
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 300; i++)
		w[i].wr_id = (uint64_t)i;
	nic_wr_chain(w, 300);
	assert_int_equal(P->post(nqp(), w, &bad), 0);
	assert_int_equal(S.nposts, 2); /* 256 + 44 */
	assert_int_equal(S.nwr, 300);
	for (int i = 0; i < 300; i++)
		assert_int_equal(S.wr[i].wr_id, i);

	S.nposts = 0;
	S.nwr = 0;
	S.post_fail_call = 1;
	S.post_fail_index = 10;
	S.post_rc = EAGAIN;
	assert_int_equal(P->post(nqp(), w, &bad), -EAGAIN);
	assert_ptr_equal(bad, &w[266]);

	/* A provider that names no bad WR may have queued the whole failed
	 * call (the stub did): *bad is past it, here the chain's end. */
	S.nposts = 0;
	S.nwr = 0;
	S.post_fail_index = -1;
	assert_int_equal(P->post(nqp(), w, &bad), -EAGAIN);
	assert_null(bad);
	assert_int_equal(S.nwr, 300);
}

/*
 * librxe queues every WR of a chain and then rings its doorbell; when that
 * fails it returns the error with *bad_wr NULL, the WRs still in its queue
 * (they run, or flush once the QP is set to error).  They count as posted:
 * *bad is past the failed call, so the caller's CQ quota covers their
 * completions.  The calls after it were not made.
 */
static void test_post_unknown_bad(void **state)
{
	static struct nic_wr w[300];
	struct nic_wr *bad = &w[0];

	(void)state;
	memset(w, 0, sizeof(w));
	nic_wr_chain(w, 5);
	S.post_fail_call = 0;
	S.post_fail_index = -1;
	S.post_rc = EIO;
	assert_int_equal(P->post(nqp(), w, &bad), -EIO);
	assert_null(bad); /* all five may have gone */
	assert_int_equal(S.nwr, 5);

	/* In the first of two calls: the second chain's head, never posted. */
	nic_wr_chain(w, 300);
	S.nposts = 0;
	S.nwr = 0;
	bad = NULL;
	assert_int_equal(P->post(nqp(), w, &bad), -EIO);
	assert_ptr_equal(bad, &w[256]);
	assert_int_equal(S.nposts, 1);
	assert_int_equal(S.nwr, 256);
}

/*
 * A device's memory (a GPU's: not readable by the CPU) registered on verbs
 * is reached by the NIC's DMA only.  An inline WRITE is a CPU copy inside
 * ibv_post_send (it would fault there): once the NIC holds such an MR, no
 * WRITE goes inline.
 */
static void test_post_no_inline_opaque(void **state)
{
	static uint8_t host[4096];
	struct nic *n = (struct nic *)(void *)&nic;
	struct nic_mr mr, dev;
	struct nic_wr w = { .wr_id = 1, .remote = 0x9000, .len = 32, .rkey = 2,
			    .op = NIC_OP_WRITE, .signaled = 1 };
	struct nic_wr *bad = NULL;

	(void)state;
	stub_nmr = 0;
	assert_int_equal(P->reg_mr(n, host, sizeof(host), NIC_ACCESS_ALL, &mr), 0);
	w.local = (uintptr_t)host;
	w.lkey = mr.lkey;
	assert_int_equal(P->post(nqp(), &w, &bad), 0);
	assert_int_equal(S.wr[0].send_flags, IBV_SEND_SIGNALED | IBV_SEND_INLINE);

	/* Never dereferenced: the stub NIC does not copy. */
	assert_int_equal(P->reg_mr(n, (void *)(uintptr_t)0x7f0000000000ull, 1 << 20,
				   NIC_ACCESS_ALL | NIC_REG_CPU_OPAQUE, &dev), 0);
	/* Not an ibv access flag: rdma-core sees the usual ones. */
	assert_int_equal(stub_mr_access[1], stub_mr_access[0]);
	w.local = 0x7f0000000000ull;
	w.lkey = dev.lkey;
	assert_int_equal(P->post(nqp(), &w, &bad), 0);
	assert_int_equal(S.nwr, 2);
	assert_int_equal(S.wr[1].send_flags, IBV_SEND_SIGNALED);
	assert_int_equal(S.sge[1].lkey, dev.lkey);
	free(nic.mrs);
	nic.mrs = NULL;
	nic.nmr = nic.mr_cap = 0;
}

/* ------------------------------------------------------------ poll */

static void test_poll_mapping(void **state)
{
	static const struct {
		enum ibv_wc_status in;
		uint16_t out;
	} m[] = {
		{ IBV_WC_SUCCESS, NIC_WC_SUCCESS },
		{ IBV_WC_SUCCESS, NIC_WC_SUCCESS },
		{ IBV_WC_LOC_PROT_ERR, NIC_WC_LOC_PROT_ERR },
		{ IBV_WC_REM_ACCESS_ERR, NIC_WC_REM_ACCESS_ERR },
		{ IBV_WC_WR_FLUSH_ERR, NIC_WC_FLUSH_ERR },
		{ IBV_WC_RETRY_EXC_ERR, NIC_WC_RETRY_EXC_ERR },
		{ IBV_WC_RNR_RETRY_EXC_ERR, NIC_WC_RETRY_EXC_ERR },
		{ IBV_WC_LOC_LEN_ERR, NIC_WC_GENERAL_ERR },
		{ IBV_WC_REM_OP_ERR, NIC_WC_GENERAL_ERR },
		{ IBV_WC_GENERAL_ERR, NIC_WC_GENERAL_ERR },
	};
	enum { N = sizeof(m) / sizeof(m[0]) };
	struct ibv_wc in[N];
	struct nic_wc out[16];

	(void)state;
	memset(in, 0, sizeof(in));
	for (int i = 0; i < N; i++) {
		in[i].wr_id = 100 + (uint64_t)i;
		in[i].status = m[i].in;
		in[i].qp_num = 0x77;
		in[i].opcode = i == 1 ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
		in[i].vendor_err = 0x81;
	}
	S.wcs = in;
	S.nwcs = N;
	assert_int_equal(P->poll(ncq(), 16, out), N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(out[i].wr_id, 100 + i);
		assert_int_equal(out[i].qp_num, 0x77);
		assert_int_equal(out[i].status, m[i].out);
	}
	assert_int_equal(out[0].op, NIC_OP_WRITE);
	assert_int_equal(out[1].op, NIC_OP_READ);
	assert_true(cq.err_logged); /* the cause (non-flush error) was logged */

	assert_int_equal(P->poll(ncq(), 16, out), 0);
	assert_int_equal(P->poll(ncq(), 0, out), 0);
	assert_int_equal(P->poll(ncq(), -1, out), -EINVAL);
	S.poll_rc = -1;
	assert_int_equal(P->poll(ncq(), 16, out), -EIO);
}

static void test_poll_chunks(void **state)
{
	static struct ibv_wc in[100];
	static struct nic_wc out[128];

	(void)state;
	memset(in, 0, sizeof(in));
	for (int i = 0; i < 100; i++)
		in[i].wr_id = (uint64_t)i;
	S.wcs = in;
	S.nwcs = 100;
	/* More than one stack chunk per call; stops at the first short poll. */
	assert_int_equal(P->poll(ncq(), 128, out), 100);
	assert_int_equal(S.npolls, 2);
	for (int i = 0; i < 100; i++)
		assert_int_equal(out[i].wr_id, i);
}

/* ------------------------------------------------------------ the rest */

/* Device events: this port's down/up, device fatal, QP fatal; another
 * port's and other kinds are acked and skipped; EAGAIN is "none". */
static void test_device_events(void **state)
{
	struct ibv_context ctx = { .async_fd = -1 };
	struct nic_event ev;

	(void)state;
	nic.ctx = &ctx;
	stub_nevents = 0;
	stub_acked = 0;
	stub_events[stub_nevents++] = (struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ERR,
								 .element.port_num = 2 };
	stub_events[stub_nevents++] = (struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ERR,
								 .element.port_num = 1 };
	stub_events[stub_nevents++] = (struct ibv_async_event){ .event_type = IBV_EVENT_QP_FATAL,
								 .element.qp = &fake_ibqp };
	stub_events[stub_nevents++] = (struct ibv_async_event){ .event_type = IBV_EVENT_LID_CHANGE,
								 .element.port_num = 1 };
	fake_ibqp.qp_num = 0x77;
	assert_int_equal(fv_event_next((struct nic *)(void *)&nic, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN); /* port 2's was skipped */
	assert_int_equal(fv_event_next((struct nic *)(void *)&nic, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_QP_FATAL);
	assert_int_equal(ev.qp_num, 0x77);
	/* A LID change on RoCE (no LIDs there): nothing; on InfiniBand it is
	 * the port's address changing (test_device_events_lid). */
	assert_int_equal(fv_event_next((struct nic *)(void *)&nic, &ev), 0);
	assert_int_equal(stub_acked, 4);
	stub_events[0] = (struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ACTIVE,
						    .element.port_num = 1 };
	assert_int_equal(fv_event_kind(&nic, &stub_events[0]), NIC_EV_PORT_UP);
	stub_events[0] = (struct ibv_async_event){ .event_type = IBV_EVENT_DEVICE_FATAL };
	assert_int_equal(fv_event_kind(&nic, &stub_events[0]), NIC_EV_DEVICE_FATAL);
	/* A CQ error (an overrun): no completion comes on this context again. */
	stub_events[0] = (struct ibv_async_event){ .event_type = IBV_EVENT_CQ_ERR,
						    .element.cq = &fake_ibcq };
	stub_nevents = 1;
	assert_int_equal(fv_event_next((struct nic *)(void *)&nic, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_DEVICE_FATAL);
	assert_int_equal(stub_acked, 5);
	assert_int_equal(fv_event_fd((struct nic *)(void *)&nic), -1);
	nic.ctx = NULL;
}

/* One event through the stub; event_next's answer, the event in *ev. */
/* The port's GID table as the stubs show it: index 3 ours (setup: GID_V4),
 * index 4 the IPv6 one (GID_V6), both RoCE v2. */
static void stub_port_gids(struct ibv_gid_entry g[2])
{
	memset(g, 0, 2 * sizeof(*g));
	g[0].gid_index = 3;
	memcpy(g[0].gid.raw, GID_V4, 16);
	g[0].gid_type = IBV_GID_TYPE_ROCE_V2;
	g[1].gid_index = 4;
	memcpy(g[1].gid.raw, GID_V6, 16);
	g[1].gid_type = IBV_GID_TYPE_ROCE_V2;
	S.gids = g;
	S.ngids = 2;
}

static int one_event(struct ibv_async_event e, struct nic_event *ev)
{
	stub_events[0] = e;
	stub_nevents = 1;
	return fv_event_next((struct nic *)(void *)&nic, ev);
}

/*
 * RoCE: peers know the port by the GID our address names.  A GID table
 * change that takes it from our index (the IP address removed or moved)
 * is the port going down, its return the port up; other changes are
 * nothing; the port ACTIVE again while the GID is still gone is not up.
 */
static void test_device_events_gid(void **state)
{
	struct ibv_context ctx = { .async_fd = -1 };
	const struct ibv_async_event change = { .event_type = IBV_EVENT_GID_CHANGE,
						.element.port_num = 1 };
	struct ibv_gid_entry g[2];
	struct nic_event ev;

	(void)state;
	nic.ctx = &ctx;
	stub_port_gids(g);

	assert_int_equal(one_event(change, &ev), 0);    /* another entry changed */
	memcpy(g[0].gid.raw, GID_LL, 16);               /* our index, another address */
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN);
	S.ngids = 1;                                    /* ... then empty */
	g[0].gid_index = 9;
	assert_int_equal(one_event(change, &ev), 0);    /* down already */
	assert_int_equal(one_event((struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ERR,
							      .element.port_num = 1 }, &ev), 0);
	assert_int_equal(one_event((struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ACTIVE,
							      .element.port_num = 1 }, &ev), 0);
	g[0].gid_index = 3;                             /* back: up */
	memcpy(g[0].gid.raw, GID_V4, 16);
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	/* A query that fails (not an empty entry) changes nothing. */
	S.gid_rc = EIO;
	assert_int_equal(one_event(change, &ev), 0);
	S.gid_rc = 0;
	/* A change on another port is not ours. */
	S.ngids = 0;
	assert_int_equal(one_event((struct ibv_async_event){ .event_type = IBV_EVENT_GID_CHANGE,
							      .element.port_num = 2 }, &ev), 0);
	/* InfiniBand routes by LID: a GID change is nothing there. */
	nic.link_layer = IBV_LINK_LAYER_INFINIBAND;
	assert_int_equal(one_event(change, &ev), 0);
	nic.ctx = NULL;
}

/* Our address as a peer gets it. */
static struct fv_addr our_addr(void)
{
	struct nic_addr na;
	struct fv_addr a;

	P->addr((const struct nic *)(const void *)&nic, &na);
	assert_int_equal(fv_addr_unpack(&na, &a), 0);
	return a;
}

/*
 * RoCE: the alternate GID (the other IP family) is what peers of that
 * family know the port by and what our QPs to them send from.  Its index
 * losing it is the port down for them: down then up (rails rebuilt, it no
 * longer advertised); its return the port up again, advertised again.
 */
static void test_device_events_alt_gid(void **state)
{
	struct ibv_context ctx = { .async_fd = -1 };
	const struct ibv_async_event change = { .event_type = IBV_EVENT_GID_CHANGE,
						.element.port_num = 1 };
	struct nic *n = (struct nic *)(void *)&nic;
	struct ibv_gid_entry g[2];
	struct nic_event ev;
	struct nic_qp_info r = { .qpn = 0x456, .psn = 1 };
	struct fv_addr ra = { .port = 1, .mtu = IBV_MTU_4096, .link_layer = IBV_LINK_LAYER_ETHERNET,
			      .gid_index = 1, .rd_atomic = 8 };
	struct nic_addr na;

	(void)state;
	memcpy(ra.gid, GID_LL, 16);
	nic.ctx = &ctx;
	nic.has_alt = true;
	nic.alt_gid_index = 4;
	memcpy(nic.alt_gid.raw, GID_V6, 16);
	stub_port_gids(g);

	assert_int_equal(one_event(change, &ev), 0);    /* both still ours */
	assert_true(our_addr().has_alt);
	S.ngids = 1;                                    /* the IPv6 address went */
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN);
	assert_int_equal(fv_event_next(n, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	assert_int_equal(fv_event_next(n, &ev), 0);
	assert_false(our_addr().has_alt);
	/* Nor does a QP to an IPv6 peer send from its index any more. */
	fv_addr_pack(&ra, &na);
	assert_int_equal(P->qp_connect(nqp(), &na, &r), 0);
	assert_int_equal(S.attr[0].ah_attr.grh.sgid_index, 3);
	assert_int_equal(one_event(change, &ev), 0);    /* still gone: nothing */
	S.ngids = 2;                                    /* back */
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	assert_int_equal(fv_event_next(n, &ev), 0);
	assert_true(our_addr().has_alt);
	/* Both gone at once: the port down, once. */
	S.ngids = 0;
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN);
	assert_int_equal(fv_event_next(n, &ev), 0);
	/* The main one back, the alternate not: up, without it. */
	S.ngids = 1;
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	assert_int_equal(fv_event_next(n, &ev), 0);
	assert_false(our_addr().has_alt);
	nic.ctx = NULL;
}

/*
 * InfiniBand: peers reach the port by the LID our address carries.  A LID
 * change (the subnet manager reassigned it) re-reads the port: the new LID
 * and MTU go into our address, and the port goes down then up so that its
 * rails are rebuilt with them.  The port coming back ACTIVE re-reads them too.
 */
static void test_device_events_lid(void **state)
{
	struct ibv_context ctx = { .async_fd = -1 };
	const struct ibv_async_event change = { .event_type = IBV_EVENT_LID_CHANGE,
						.element.port_num = 1 };
	struct nic *n = (struct nic *)(void *)&nic;
	struct nic_event ev;

	(void)state;
	nic.ctx = &ctx;
	nic.link_layer = IBV_LINK_LAYER_INFINIBAND;
	nic.lid = 0x12;
	stub_pa = (struct ibv_port_attr){ .state = IBV_PORT_ACTIVE, .lid = 0x34,
					  .active_mtu = IBV_MTU_2048,
					  .link_layer = IBV_LINK_LAYER_INFINIBAND };
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN);
	assert_int_equal(fv_event_next(n, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	assert_int_equal(fv_event_next(n, &ev), 0);
	assert_int_equal(our_addr().lid, 0x34);
	assert_int_equal(our_addr().mtu, IBV_MTU_2048);
	/* The same LID again: nothing. */
	assert_int_equal(one_event(change, &ev), 0);
	/* Changed while the port is not ACTIVE: down only; its PORT_ACTIVE
	 * brings it up, with the LID read again. */
	stub_pa.lid = 0x56;
	stub_pa.state = IBV_PORT_INIT;
	assert_int_equal(one_event(change, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_DOWN);
	assert_int_equal(fv_event_next(n, &ev), 0);
	stub_pa.lid = 0x57;
	stub_pa.state = IBV_PORT_ACTIVE;
	assert_int_equal(one_event((struct ibv_async_event){ .event_type = IBV_EVENT_PORT_ACTIVE,
							      .element.port_num = 1 }, &ev), 1);
	assert_int_equal(ev.kind, NIC_EV_PORT_UP);
	assert_int_equal(fv_event_next(n, &ev), 0);
	assert_int_equal(our_addr().lid, 0x57);
	/* A query that fails changes nothing. */
	stub_port_rc = EIO;
	stub_pa.lid = 0x99;
	assert_int_equal(one_event(change, &ev), 0);
	assert_int_equal(our_addr().lid, 0x57);
	stub_port_rc = 0;
	/* Another port's change is not ours, and RoCE has no LID. */
	stub_nport = 0;
	assert_int_equal(one_event((struct ibv_async_event){ .event_type = IBV_EVENT_LID_CHANGE,
							      .element.port_num = 2 }, &ev), 0);
	nic.link_layer = IBV_LINK_LAYER_ETHERNET;
	assert_int_equal(one_event(change, &ev), 0);
	assert_int_equal(stub_nport, 0);
	nic.ctx = NULL;
}

static void test_registry(void **state)
{
	(void)state;
	assert_ptr_equal(nic_provider_for("loop"), &nic_loop_provider);
	assert_ptr_equal(nic_provider_for("loop12"), &nic_loop_provider);
	assert_ptr_equal(nic_provider_for("rxe0"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("mlx5_0:1"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("loopy"), &nic_verbs_provider);
	assert_null(nic_provider_for(""));
	assert_null(nic_provider_for(NULL));
	assert_string_equal(nic_verbs_provider.name, "verbs");
}

static void test_open_missing(void **state)
{
	struct nic *n = NULL;
	struct nic_dev_info d[4];

	(void)state;
	fv_set_ops(NULL);
	assert_int_equal(P->open("ferry_no_such_dev", &n), -ENODEV);
	assert_int_equal(P->open("ferry_no_such_dev:1", &n), -ENODEV);
	assert_int_equal(P->open("rxe0:x", &n), -EINVAL);
	assert_int_equal(P->open("rxe0:0", &n), -EINVAL);
	/* A port is digits only: strtol took these as port 1 (then -ENODEV). */
	assert_int_equal(P->open("ferry_no_such_dev:+1", &n), -EINVAL);
	assert_int_equal(P->open("ferry_no_such_dev: 1", &n), -EINVAL);
	assert_int_equal(P->open("", &n), -ENODEV);
	assert_null(n);
	assert_true(nic_verbs_discover(d, 4) >= 0);
	assert_int_equal(nic_verbs_discover(d, 0), 0);
}

static void test_describe(void **state)
{
	const struct nic *n = (const struct nic *)(const void *)&nic;
	char buf[160];

	(void)state;
	nic.gid_index = 1;
	memcpy(nic.gid.raw, GID_V4, 16);
	snprintf(nic.name, sizeof(nic.name), "rxe0");
	P->describe(n, buf, sizeof(buf));
	assert_string_equal(buf, "rxe0 port 1, RoCE v2, GID[1] ::ffff:10.99.0.1, MTU 4096, NUMA -1");
	assert_int_equal(P->numa_node(n), -1);
	nic.link_layer = IBV_LINK_LAYER_INFINIBAND;
	nic.lid = 0x12;
	P->describe(n, buf, sizeof(buf));
	assert_string_equal(buf, "rxe0 port 1, InfiniBand, LID 0x12, MTU 4096, NUMA -1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gid_link_local_only),
		cmocka_unit_test(test_gid_v1_only),
		cmocka_unit_test(test_gid_v2_every_order),
		cmocka_unit_test(test_gid_ties_and_empty),
		cmocka_unit_test(test_gid_forced),
		cmocka_unit_test(test_gid_alt),
		cmocka_unit_test(test_gid_v4_link_local),
		cmocka_unit_test_setup_teardown(test_select_gid_from_port, setup, teardown),
		cmocka_unit_test_setup_teardown(test_select_gid_index_8bit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_addr_round_trip, setup, teardown),
		cmocka_unit_test(test_addr_magic),
		cmocka_unit_test(test_addr_strict),
		cmocka_unit_test_setup_teardown(test_qp_init_attr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_roce, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_tc_sl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_family, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_mtu_and_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rd_atomic_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_caps_filled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_info_filled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_ib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_connect_addr_said, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qp_set_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_translation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_long_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_unknown_bad, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_no_inline_opaque, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_mapping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_chunks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_events_gid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_events_alt_gid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_events_lid, setup, teardown),
		cmocka_unit_test(test_registry),
		cmocka_unit_test_setup_teardown(test_open_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_describe, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
