/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the tcp provider (qp/tcp/) through the provider interface:
 * two contexts in one process on 127.0.0.1, the initiator's QP connected
 * to a target QP the way runtime/ctl/passive.c does it (target first).
 * This test is both cores: it polls the initiator's CQ and the target's.
 *
 * Connect and addresses, WRITE/READ of random sizes with every byte
 * checked, selective signalling, RC errors (bad rkey, access refused,
 * local key) with the flush of what follows, qp_set_error, a peer gone
 * mid-stream, HELLOs that must be refused (wrong secret, a frame before
 * HELLO, a QP that waits for nobody), a malformed frame after a good
 * HELLO, a READ larger than the initiator takes, a target that stops
 * reading (post and poll never block), queue overflows, and a target core in its own thread while the control path
 * destroys QPs and deregisters memory under it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "qp/nic.h"
#include "qp/tcp/frame.h"
#include "qp/tcp/objects.h"
#include "qp/tcp/tcp.h"
#include "tests/harness/nic_wr.h"
#include "tests/harness/pollwatch.h"

#define BUF_LEN (8u << 20)
#define CQ_LEN 1024u
#define QP_LEN 64u

static const struct nic_provider *P = &nic_tcp_provider;

/* Context a posts (the initiator), b is the target; lbuf on a, rbuf on b. */
struct env {
	struct nic *a, *b;
	struct nic_cq *cqa, *cqb;
	struct nic_qp *qa, *qb;
	uint8_t *lbuf, *rbuf;
	struct nic_mr lmr, rmr;
	struct nic_wc wc[CQ_LEN];
	int nwc;
};

static uint64_t rng = 0x7463702d74657374ull;

static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = rng;

	rng = seed;
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)rnd();
	rng = s;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The handshake of runtime/ctl/passive.c: the target's QP first. */
static void handshake(struct nic *ia, struct nic_qp *qa, struct nic *ib, struct nic_qp *qb)
{
	struct nic_addr aa, ab;
	struct nic_qp_info ia_info, ib_info;

	P->addr(ia, &aa);
	P->addr(ib, &ab);
	P->qp_info(qa, &ia_info);
	assert_int_equal(P->qp_connect(qb, &aa, &ia_info), 0);
	P->qp_info(qb, &ib_info);
	assert_int_equal(P->qp_connect(qa, &ab, &ib_info), 0);
}

/* Poll both sides once; the initiator's CQEs are appended to e->wc. */
static int pump_once(struct env *e)
{
	struct nic_wc tmp[64];
	int n = P->poll(e->cqb, 64, tmp), m;

	assert_int_equal(n, 0); /* the target's passive QPs post nothing */
	m = P->poll(e->cqa, 64, e->wc + e->nwc);
	assert_true(m >= 0);
	assert_true(e->nwc + m <= (int)CQ_LEN);
	e->nwc += m;
	return m;
}

/* Poll until want CQEs arrived (or 5 s passed: the test fails, never hangs). */
static void pump_until(struct env *e, int want)
{
	uint64_t end = now_ms() + 5000;

	while (e->nwc < want && now_ms() < end)
		pump_once(e);
	assert_int_equal(e->nwc, want);
}

/* Poll for ms more, checking that nothing else completes. */
static void pump_for(struct env *e, unsigned ms)
{
	uint64_t end = now_ms() + ms;

	while (now_ms() < end)
		pump_once(e);
}

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	assert_int_equal(P->open("tcp@127.0.0.1", &e->a), 0);
	assert_int_equal(P->open("tcp@127.0.0.1", &e->b), 0);
	assert_int_equal(P->cq_create(e->a, CQ_LEN, &e->cqa), 0);
	assert_int_equal(P->cq_create(e->b, CQ_LEN, &e->cqb), 0);
	assert_int_equal(P->qp_create(e->a, e->cqa, QP_LEN, &e->qa), 0);
	assert_int_equal(P->qp_create(e->b, e->cqb, 1, &e->qb), 0);
	handshake(e->a, e->qa, e->b, e->qb);
	e->lbuf = aligned_alloc(4096, BUF_LEN);
	e->rbuf = aligned_alloc(4096, BUF_LEN);
	assert_non_null(e->lbuf);
	assert_non_null(e->rbuf);
	fill(e->lbuf, BUF_LEN, 1);
	fill(e->rbuf, BUF_LEN, 2);
	assert_int_equal(P->reg_mr(e->a, e->lbuf, BUF_LEN, NIC_ACCESS_ALL, &e->lmr), 0);
	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_ALL, &e->rmr), 0);
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	struct tcp_counters c;

	tcp_get_counters(e->a, &c);
	assert_int_equal(c.cq_overflows, 0);
	assert_int_equal(P->dereg_mr(e->a, &e->lmr), 0);
	assert_int_equal(P->dereg_mr(e->b, &e->rmr), 0);
	if (e->qa)
		P->qp_destroy(e->qa);
	if (e->qb)
		P->qp_destroy(e->qb);
	P->cq_destroy(e->cqa);
	P->cq_destroy(e->cqb);
	P->close(e->a);
	P->close(e->b);
	free(e->lbuf);
	free(e->rbuf);
	free(e);
	return 0;
}

/*
 * Cluster keys on the data connections: a WRITE gets through only when
 * both contexts hold the same key, or neither has one; otherwise the
 * target refuses the HELLO (nothing written) and the WR fails as a lost
 * connection would.  ka/kb: the contexts' keys, NULL for none.
 */
static int keyed_write(const uint8_t *ka, const uint8_t *kb, bool *untouched)
{
	struct env e = { 0 };
	struct nic_wr wr;
	struct nic_wr *bad;
	uint8_t snap[4096];
	int status;

	assert_int_equal(P->open("tcp@127.0.0.1", &e.a), 0);
	assert_int_equal(P->open("tcp@127.0.0.1", &e.b), 0);
	assert_int_equal(P->set_key(e.a, (const uint8_t *)"short", 5), -EINVAL);
	if (ka)
		assert_int_equal(P->set_key(e.a, ka, 32), 0);
	if (kb)
		assert_int_equal(P->set_key(e.b, kb, 32), 0);
	assert_int_equal(P->cq_create(e.a, CQ_LEN, &e.cqa), 0);
	assert_int_equal(P->cq_create(e.b, CQ_LEN, &e.cqb), 0);
	assert_int_equal(P->qp_create(e.a, e.cqa, QP_LEN, &e.qa), 0);
	assert_int_equal(P->qp_create(e.b, e.cqb, 1, &e.qb), 0);
	handshake(e.a, e.qa, e.b, e.qb);
	e.lbuf = aligned_alloc(4096, 4096);
	e.rbuf = aligned_alloc(4096, 4096);
	assert_non_null(e.lbuf);
	assert_non_null(e.rbuf);
	fill(e.lbuf, 4096, 11);
	fill(e.rbuf, 4096, 12);
	memcpy(snap, e.rbuf, sizeof(snap));
	assert_int_equal(P->reg_mr(e.a, e.lbuf, 4096, NIC_ACCESS_ALL, &e.lmr), 0);
	assert_int_equal(P->reg_mr(e.b, e.rbuf, 4096, NIC_ACCESS_ALL, &e.rmr), 0);
	wr = (struct nic_wr){ .wr_id = 1, .local = (uintptr_t)e.lbuf, .remote = (uintptr_t)e.rbuf,
			      .len = 4096, .lkey = e.lmr.lkey, .rkey = e.rmr.rkey,
			      .op = NIC_OP_WRITE, .signaled = 1 };
	assert_int_equal(P->post(e.qa, &wr, &bad), 0);
	pump_until(&e, 1);
	status = e.wc[0].status;
	if (status == NIC_WC_SUCCESS)
		assert_memory_equal(e.rbuf, e.lbuf, 4096);
	*untouched = memcmp(e.rbuf, snap, sizeof(snap)) == 0;
	assert_int_equal(P->dereg_mr(e.a, &e.lmr), 0);
	assert_int_equal(P->dereg_mr(e.b, &e.rmr), 0);
	P->qp_destroy(e.qa);
	P->qp_destroy(e.qb);
	P->cq_destroy(e.cqa);
	P->cq_destroy(e.cqb);
	P->close(e.a);
	P->close(e.b);
	free(e.lbuf);
	free(e.rbuf);
	return status;
}

static void test_cluster_key(void **state)
{
	uint8_t k1[32], k2[32];
	bool untouched;

	(void)state;
	memset(k1, 0x11, sizeof(k1));
	memset(k2, 0x11, sizeof(k2));
	k2[31] ^= 1;
	assert_int_equal(keyed_write(k1, k1, &untouched), NIC_WC_SUCCESS);
	assert_int_equal(keyed_write(NULL, NULL, &untouched), NIC_WC_SUCCESS);
	assert_int_equal(keyed_write(k1, k2, &untouched), NIC_WC_RETRY_EXC_ERR);
	assert_true(untouched);
	assert_int_equal(keyed_write(NULL, k1, &untouched), NIC_WC_RETRY_EXC_ERR);
	assert_true(untouched);
	assert_int_equal(keyed_write(k1, NULL, &untouched), NIC_WC_RETRY_EXC_ERR);
	assert_true(untouched);
}

static void post_ok(struct env *e, struct nic_wr *wr)
{
	struct nic_wr *bad = NULL;

	assert_int_equal(P->post(e->qa, wr, &bad), 0);
	assert_null(bad);
}

static void assert_wc(const struct nic_wc *wc, uint64_t id, enum nic_wc_status st)
{
	if (wc->wr_id != id || wc->status != st)
		fail_msg("CQE wr_id %llu status %u, expected wr_id %llu status %u",
			 (unsigned long long)wc->wr_id, wc->status, (unsigned long long)id, st);
}

/* ------------------------------------------------------------------ tests */

static void test_registry(void **state)
{
	(void)state;
	assert_ptr_equal(nic_provider_for("tcp"), &nic_tcp_provider);
	assert_ptr_equal(nic_provider_for("tcp@10.0.0.1"), &nic_tcp_provider);
	assert_ptr_equal(nic_provider_for("tcp@10.0.0.1:7000"), &nic_tcp_provider);
	assert_ptr_equal(nic_provider_for("tcpx"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("loop"), &nic_loop_provider);
	assert_string_equal(nic_tcp_provider.name, "tcp");
}

static void test_open_addr_caps(void **state)
{
	static const char *bad[] = { "tcp@", "tcp@localhost", "tcp@1.2.3.4:", "tcp@1.2.3.4:70000",
				     "tcp@1.2.3.4:x", "tcpfoo",
				     /* a port is digits only: strtoul took these as 0 */
				     "tcp@127.0.0.1:+0", "tcp@127.0.0.1: 0", "tcp@127.0.0.1:-0" };
	struct nic_addr addr;
	struct nic_caps caps;
	struct nic *n;
	char desc[64], want[64];

	(void)state;
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(P->open(bad[i], &n), -EINVAL);
	assert_int_equal(P->open("tcp", &n), 0);
	P->addr(n, &addr);
	assert_memory_equal(addr.bytes, "TCP1", 4);
	assert_memory_equal(addr.bytes + 4, "\x7f\x00\x00\x01", 4);
	assert_int_equal(addr.bytes[8] << 8 | addr.bytes[9], tcp_port(n));
	assert_int_not_equal(tcp_port(n), 0);
	for (unsigned i = 10; i < NIC_ADDR_LEN; i++)
		assert_int_equal(addr.bytes[i], 0);
	P->describe(n, desc, sizeof(desc));
	snprintf(want, sizeof(want), "tcp 127.0.0.1:%u", tcp_port(n));
	assert_string_equal(desc, want);
	P->caps(n, &caps);
	assert_true(caps.flags & NIC_CAP_SERVES);
	assert_true(caps.max_qp_wr >= 256);
	assert_int_equal(caps.max_rd_atomic, caps.max_qp_wr);
	assert_int_equal(P->numa_node(n), -1);
	assert_non_null(P->cq_arm);
	P->close(n);
}

static void test_qp_info_roles(void **state)
{
	struct env *e = *state;
	struct nic_qp_info a, b;
	struct nic_addr ab;

	P->qp_info(e->qa, &a);
	P->qp_info(e->qb, &b);
	/* The target's QP waits for a dial; both have a secret (16 random bytes). */
	assert_false(a.psn & 0x80000000u);
	assert_true(b.psn & 0x80000000u);
	assert_int_equal(a.qpn, P->qp_num(e->qa));
	assert_memory_not_equal(a.secret, b.secret, NIC_QP_SECRET_LEN);
	/* A QP connects once. */
	P->addr(e->b, &ab);
	assert_int_equal(P->qp_connect(e->qa, &ab, &b), -EISCONN);
	/* Not a tcp address. */
	memcpy(ab.bytes, "LOOP", 4);
	assert_int_equal(P->qp_connect(e->qb, &ab, &a), -EINVAL);
}

/* A tcp NIC address: "TCP1", ip and port (host order), the rest zero. */
static void tcp_naddr(struct nic_addr *a, uint32_t ip, uint16_t port)
{
	uint32_t nip = htonl(ip);
	uint16_t nport = htons(port);

	memset(a, 0, sizeof(*a));
	memcpy(a->bytes, "TCP1", 4);
	memcpy(a->bytes + 4, &nip, 4);
	memcpy(a->bytes + 8, &nport, 2);
}

/*
 * A peer's address is one we can dial, or refused with nothing of it
 * decoded: 0.0.0.0/8 (0.0.0.0 reached our own loopback, whatever host
 * said it), multicast and 240/4 (broadcast too) are refused, and so is
 * port 0 (before, that refusal left the family and address filled in).
 * A "dial me" that names 0.0.0.0 reaches nobody: before, the initiator
 * connected to the loopback listener at that port.  A listener on
 * 0.0.0.0 says 127.0.0.1, so peers on this host still reach it.
 */
static void test_addr_dialable(void **state)
{
	static const uint32_t bad[] = { 0, 0x00010203, 0x00ffffff, 0xe0000001, 0xefffffff,
					0xf0000001, 0xffffffff };
	struct env *e = *state;
	struct sockaddr_in sin, zero;
	struct nic_qp_info mine, peer = { .qpn = 1, .psn = 0x80000000u };
	struct nic_addr na;
	struct nic_qp *q, *qt;
	struct nic_cq *cq;
	struct nic *w;
	socklen_t sl = sizeof(sin);
	struct pollfd p;
	int lfd;

	memset(&zero, 0, sizeof(zero));
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tcp_naddr(&na, bad[i], 7000);
		memset(&sin, 0x55, sizeof(sin));
		assert_int_equal(tcp_addr_decode(&na, &sin), -EINVAL);
		assert_memory_equal(&sin, &zero, sizeof(sin));
	}
	tcp_naddr(&na, 0x7f000001, 0);
	memset(&sin, 0x55, sizeof(sin));
	assert_int_equal(tcp_addr_decode(&na, &sin), -EINVAL);
	assert_memory_equal(&sin, &zero, sizeof(sin));
	tcp_naddr(&na, 0xdfffffff, 1); /* the last unicast address */
	assert_int_equal(tcp_addr_decode(&na, &sin), 0);
	assert_int_equal(ntohl(sin.sin_addr.s_addr), 0xdfffffff);

	/* A loopback listener: a dial of 0.0.0.0 at its port reached it. */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
	tcp_naddr(&na, 0, ntohs(sin.sin_port));
	assert_int_equal(P->qp_create(e->a, e->cqa, 4, &q), 0);
	P->qp_info(q, &mine); /* an initiator's: it may dial */
	assert_int_equal(P->qp_connect(q, &na, &peer), -EINVAL);
	p = (struct pollfd){ .fd = lfd, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0); /* nothing in its backlog */
	P->qp_destroy(q);
	close(lfd);

	/* A target on the wildcard: reached at 127.0.0.1, data moves. */
	assert_int_equal(P->open("tcp@0.0.0.0", &w), 0);
	P->addr(w, &na);
	assert_memory_equal(na.bytes + 4, "\x7f\x00\x00\x01", 4);
	assert_int_equal(na.bytes[8] << 8 | na.bytes[9], tcp_port(w));
	assert_int_equal(P->cq_create(w, 16, &cq), 0);
	assert_int_equal(P->qp_create(w, cq, 1, &qt), 0);
	assert_int_equal(P->qp_create(e->a, e->cqa, 4, &q), 0);
	handshake(e->a, q, w, qt);
	P->qp_destroy(q);
	P->qp_destroy(qt);
	P->cq_destroy(cq);
	P->close(w);
}

/*
 * Only the initiator dials.  A QP whose info nobody had before it is
 * connected is the target's (made for a peer's CONNECT_REQ): a peer info
 * that says "dial me" is refused (-EPROTO) and the QP stays new.  Before,
 * it dialled the address it was given.  The same QP, once its info went
 * out, connects as the initiator, as the engine's handshake does it.
 */
static void test_target_does_not_dial(void **state)
{
	struct env *e = *state;
	struct nic_qp_info waiting, mine, t_info;
	struct nic_addr aa, ab;
	struct nic_qp *q, *t;

	P->addr(e->a, &aa);
	P->addr(e->b, &ab);
	P->qp_info(e->qb, &waiting); /* a target QP's info: "dial me" */
	assert_true(waiting.psn & 0x80000000u);
	assert_int_equal(P->qp_create(e->a, e->cqa, 4, &q), 0);
	assert_int_equal(P->qp_connect(q, &ab, &waiting), -EPROTO);

	P->qp_info(q, &mine);
	assert_int_equal(P->qp_create(e->b, e->cqb, 1, &t), 0);
	assert_int_equal(P->qp_connect(t, &aa, &mine), 0);
	P->qp_info(t, &t_info);
	assert_int_equal(P->qp_connect(q, &ab, &t_info), 0);
	P->qp_destroy(q);
	P->qp_destroy(t);
}

static void test_write_read_random(void **state)
{
	struct env *e = *state;
	uint8_t *expect = malloc(BUF_LEN);

	assert_non_null(expect);
	memcpy(expect, e->rbuf, BUF_LEN);
	for (int round = 0; round < 200; round++) {
		uint32_t len = (uint32_t)(rnd() % (round % 10 == 0 ? (2u << 20) : 70000)) + 1;
		size_t loff = rnd() % (BUF_LEN - len), roff = rnd() % (BUF_LEN - len);
		enum nic_op op = rnd() & 1 ? NIC_OP_READ : NIC_OP_WRITE;
		struct nic_wr wr = mkwr(e, op, (uint64_t)round, loff, roff, len, 1);

		if (op == NIC_OP_READ)
			memset(e->lbuf + loff, 0, len);
		else
			fill(e->lbuf + loff, len, (uint64_t)round + 100);
		e->nwc = 0;
		post_ok(e, &wr);
		pump_until(e, 1);
		assert_wc(&e->wc[0], (uint64_t)round, NIC_WC_SUCCESS);
		assert_int_equal(e->wc[0].op, op);
		assert_int_equal(e->wc[0].qp_num, P->qp_num(e->qa));
		if (op == NIC_OP_WRITE)
			memcpy(expect + roff, e->lbuf + loff, len);
		else
			assert_memory_equal(e->lbuf + loff, expect + roff, len);
		/* Every byte of the target: what we wrote, and nothing else. */
		if (round % 20 == 0 || op == NIC_OP_WRITE)
			assert_memory_equal(e->rbuf, expect, BUF_LEN);
	}
	free(expect);
}

/* Chains of mixed WRs, one signalled CQE each; in-order RC completion. */
static void test_selective_signalling(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[QP_LEN];
	struct tcp_counters c;
	uint32_t seg = 32768;

	for (int round = 0; round < 20; round++) {
		int n = 1 + (int)(rnd() % QP_LEN);

		/* WRITE lbuf[i] -> rbuf[i], then READ rbuf[i] -> lbuf[half + i]. */
		for (int i = 0; i < n; i++) {
			bool w = i < n / 2 || n == 1;
			size_t off = (size_t)(w ? i : i - n / 2) * seg;

			fill(e->lbuf + off, seg, (uint64_t)(round * 1000 + i));
			wrs[i] = w ? mkwr(e, NIC_OP_WRITE, (uint64_t)i, off, off, seg, 0)
				   : mkwr(e, NIC_OP_READ, (uint64_t)i, BUF_LEN / 2 + off, off, seg, 0);
		}
		wrs[n - 1].signaled = 1;
		if (n > 4)
			wrs[n / 4].signaled = 1;
		nic_wr_chain(wrs, n);
		e->nwc = 0;
		post_ok(e, wrs);
		pump_until(e, n > 4 ? 2 : 1);
		pump_for(e, 2);
		assert_int_equal(e->nwc, n > 4 ? 2 : 1);
		if (n > 4)
			assert_wc(&e->wc[0], (uint64_t)(n / 4), NIC_WC_SUCCESS);
		assert_wc(&e->wc[e->nwc - 1], (uint64_t)(n - 1), NIC_WC_SUCCESS);
		for (int i = 0; i < n / 2; i++) {
			assert_memory_equal(e->rbuf + (size_t)i * seg, e->lbuf + (size_t)i * seg, seg);
			if (n / 2 + i < n)
				assert_memory_equal(e->lbuf + BUF_LEN / 2 + (size_t)i * seg,
						    e->lbuf + (size_t)i * seg, seg);
		}
	}
	tcp_get_counters(e->b, &c);
	assert_int_equal(c.violations + c.refused + c.broken, 0);
}

/* A READ before a WRITE to the same bytes sees the old bytes (a fence). */
static void test_read_then_write(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[2] = {
		mkwr(e, NIC_OP_READ, 1, 0, 4096, 1 << 20, 0),
		mkwr(e, NIC_OP_WRITE, 2, 2 << 20, 4096, 1 << 20, 1),
	};
	uint8_t *old = malloc(1 << 20);

	assert_non_null(old);
	memcpy(old, e->rbuf + 4096, 1 << 20);
	nic_wr_chain(wrs, 2);
	post_ok(e, wrs);
	pump_until(e, 1);
	assert_memory_equal(e->lbuf, old, 1 << 20);
	assert_memory_equal(e->rbuf + 4096, e->lbuf + (2 << 20), 1 << 20);
	free(old);
}

static void test_zero_length(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[2] = {
		mkwr(e, NIC_OP_WRITE, 1, 0, 0, 0, 1),
		mkwr(e, NIC_OP_READ, 2, 0, 0, 0, 1),
	};

	wrs[0].rkey = 0; /* no memory named: no key checked (as verbs) */
	nic_wr_chain(wrs, 2);
	post_ok(e, wrs);
	pump_until(e, 2);
	assert_wc(&e->wc[0], 1, NIC_WC_SUCCESS);
	assert_wc(&e->wc[1], 2, NIC_WC_SUCCESS);
}

/* RC: the bad WR fails, the ones before succeed, every one after flushes. */
static void check_error_chain(struct env *e, struct nic_wr *bad_wr, enum nic_wc_status st)
{
	struct nic_wr wrs[6];
	uint8_t *snap = malloc(BUF_LEN);

	assert_non_null(snap);
	for (int i = 0; i < 6; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, (uint64_t)i, (size_t)i * 4096, (size_t)i * 4096, 4096,
			      i == 0 || i == 4);
	wrs[2] = *bad_wr;
	wrs[2].wr_id = 2;
	fill(e->lbuf, 6 * 4096, 77);
	memcpy(snap, e->rbuf, BUF_LEN);
	nic_wr_chain(wrs, 6);
	post_ok(e, wrs);
	pump_until(e, 5);
	pump_for(e, 5);
	assert_int_equal(e->nwc, 5);
	assert_wc(&e->wc[0], 0, NIC_WC_SUCCESS);
	assert_wc(&e->wc[1], 2, st);
	for (int i = 3; i < 6; i++)
		assert_wc(&e->wc[i - 1], (uint64_t)i, NIC_WC_FLUSH_ERR);
	/* WRs 0 and 1 landed; 3..5 did not. */
	assert_memory_equal(e->rbuf, e->lbuf, 2 * 4096);
	assert_memory_equal(e->rbuf + 3 * 4096, snap + 3 * 4096, BUF_LEN - 3 * 4096);
	/* The QP is in error: what is posted now flushes at once. */
	e->nwc = 0;
	wrs[0].next = NULL;
	wrs[0].signaled = 0;
	post_ok(e, &wrs[0]);
	pump_until(e, 1);
	assert_wc(&e->wc[0], 0, NIC_WC_FLUSH_ERR);
	free(snap);
}

static void test_bad_rkey(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, 2 * 4096, 4096, 0);

	w.rkey ^= 0x10000; /* another generation of the same slot */
	check_error_chain(e, &w, NIC_WC_REM_ACCESS_ERR);
}

static void test_bad_range(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_READ, 0, 0, BUF_LEN - 100, 4096, 0);

	check_error_chain(e, &w, NIC_WC_REM_ACCESS_ERR);
}

/* A region the peer may read but not write (a second MR over rbuf's top half). */
static void test_write_refused(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, BUF_LEN / 2, 4096, 0);
	struct nic_wr r = mkwr(e, NIC_OP_READ, 1, 0, BUF_LEN / 2, 4096, 1);
	struct nic_mr ro;

	assert_int_equal(P->reg_mr(e->b, e->rbuf + BUF_LEN / 2, BUF_LEN / 2, NIC_ACCESS_ALL, &ro), 0);
	assert_int_equal(tcp_set_mr_access(e->b, &ro, TCP_ACCESS_REMOTE_READ), 0);
	assert_int_equal(tcp_set_mr_access(e->b, &ro, 8), -EINVAL);
	r.rkey = ro.rkey;
	post_ok(e, &r); /* reading it is fine */
	pump_until(e, 1);
	assert_wc(&e->wc[0], 1, NIC_WC_SUCCESS);
	e->nwc = 0;
	w.rkey = ro.rkey;
	check_error_chain(e, &w, NIC_WC_REM_ACCESS_ERR);
	assert_int_equal(P->dereg_mr(e->b, &ro), 0);
}

/*
 * The target refuses a WRITE on its header (a read-only region) while the
 * initiator is still sending its payload (4 MiB: more than the socket
 * takes at once).  As RC: the WRITE before it succeeds, the refused one
 * fails REM_ACCESS_ERR.  Before, the refusal came for a WR not yet sent
 * whole, was taken for a protocol violation, and the executed WRITE got
 * RETRY_EXC_ERR, the refused one FLUSH_ERR (found by an audit of qp/tcp).
 */
static void test_write_refused_while_sending(void **state)
{
	struct env *e = *state;
	struct nic_wr first = mkwr(e, NIC_OP_WRITE, 9, 0, 0, 8, 1);
	struct nic_wr wrs[2] = {
		mkwr(e, NIC_OP_WRITE, 0, 0, 0, 4096, 1),
		mkwr(e, NIC_OP_WRITE, 1, 0, BUF_LEN / 2, BUF_LEN / 2, 1),
	};
	struct tcp_counters c;
	struct nic_mr ro;

	assert_int_equal(P->reg_mr(e->b, e->rbuf + BUF_LEN / 2, BUF_LEN / 2, NIC_ACCESS_ALL, &ro), 0);
	assert_int_equal(tcp_set_mr_access(e->b, &ro, TCP_ACCESS_REMOTE_READ), 0);
	post_ok(e, &first); /* the HELLO round trip first: the next post sends at once */
	pump_until(e, 1);
	e->nwc = 0;
	fill(e->lbuf, 4096, 5);
	wrs[1].rkey = ro.rkey;
	nic_wr_chain(wrs, 2);
	post_ok(e, wrs);
	pump_until(e, 2);
	pump_for(e, 5);
	assert_wc(&e->wc[0], 0, NIC_WC_SUCCESS);
	assert_wc(&e->wc[1], 1, NIC_WC_REM_ACCESS_ERR);
	assert_memory_equal(e->rbuf, e->lbuf, 4096);
	tcp_get_counters(e->a, &c);
	assert_int_equal(c.violations, 0);
	assert_int_equal(P->dereg_mr(e->b, &ro), 0);
}

/* A zero-length READ names no memory (as verbs, as a zero-length WRITE):
 * whatever its key and address, it succeeds.  Before, the target checked
 * the key again when sending the empty response and closed the
 * connection (RETRY_EXC_ERR). */
static void test_zero_read_names_nothing(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[2] = {
		mkwr(e, NIC_OP_READ, 1, 0, 0, 0, 1),
		mkwr(e, NIC_OP_READ, 2, 0, 0, 0, 1),
	};

	wrs[0].rkey ^= 0x30000; /* no such key */
	wrs[1].remote = (uintptr_t)e->rbuf + BUF_LEN + 4096; /* outside the region */
	nic_wr_chain(wrs, 2);
	post_ok(e, wrs);
	pump_until(e, 2);
	assert_wc(&e->wc[0], 1, NIC_WC_SUCCESS);
	assert_wc(&e->wc[1], 2, NIC_WC_SUCCESS);
}

/*
 * After one round trip (the next post sends at once): wrs[0..ahead) READs
 * of 1 MiB from rbuf, wrs[ahead] a READ of the 4 KiB region x at xbuf.
 */
static void reads_then_x(struct env *e, struct nic_wr *wrs, int ahead, uint8_t *xbuf,
			 const struct nic_mr *x)
{
	struct nic_wr first = mkwr(e, NIC_OP_WRITE, 99, 0, 0, 8, 1);

	post_ok(e, &first); /* the HELLO round trip first: the next post sends at once */
	pump_until(e, 1);
	e->nwc = 0;
	for (int i = 0; i < ahead; i++)
		wrs[i] = mkwr(e, NIC_OP_READ, (uint64_t)i, (size_t)(i % 4) << 20,
			      (size_t)(i % 8) << 20, 1 << 20, 1);
	wrs[ahead] = nic_wr_of(NIC_OP_READ, (uint64_t)ahead, e->lbuf + (5u << 20), xbuf, 4096,
			       e->lmr.lkey, x->rkey, 1);
}

/* Poll the target alone until it has read frames frames (200 tries, 1 ms apart). */
static void target_reads(struct env *e, uint64_t frames)
{
	struct tcp_counters c;

	for (int i = 0; i < 200; i++) {
		struct nic_wc tmp[4];

		assert_int_equal(P->poll(e->cqb, 4, tmp), 0);
		tcp_get_counters(e->b, &c);
		if (c.frames_rx >= frames)
			break;
		usleep(1000);
	}
}

/*
 * A READ whose region is deregistered while its response waits behind
 * others: the responses queued ahead of it still go (they were served
 * before the region went); only it and what follows fail.  Before, the
 * target looked at every queued response's region each time it gathered
 * them and closed the connection at once, so the 16 MiB of READs ahead
 * (more than the sockets hold, so still queued) failed too.
 */
static void test_read_region_gone_behind_others(void **state)
{
	enum { AHEAD = 16 };
	struct env *e = *state;
	struct nic_wr wrs[AHEAD + 1];
	uint8_t *xbuf = aligned_alloc(4096, 4096);
	struct tcp_counters c;
	struct nic_mr x;

	assert_non_null(xbuf);
	assert_int_equal(P->reg_mr(e->b, xbuf, 4096, NIC_ACCESS_ALL, &x), 0);
	reads_then_x(e, wrs, AHEAD, xbuf, &x);
	nic_wr_chain(wrs, AHEAD + 1);
	post_ok(e, wrs);
	/* The target alone: it takes every request and queues their responses
	 * (the initiator reads none, so most stay queued). */
	target_reads(e, 1 + AHEAD + 1); /* the first WRITE, the READs */
	tcp_get_counters(e->b, &c);
	assert_true(c.frames_rx >= 1 + AHEAD + 1);
	assert_true(c.frames_tx < 1 + AHEAD); /* most READs' responses still queued */
	assert_int_equal(P->dereg_mr(e->b, &x), 0);
	pump_until(e, AHEAD + 1);
	for (int i = 0; i < AHEAD; i++)
		assert_wc(&e->wc[i], (uint64_t)i, NIC_WC_SUCCESS);
	assert_int_equal(e->wc[AHEAD].wr_id, AHEAD);
	assert_true(e->wc[AHEAD].status != NIC_WC_SUCCESS);
	assert_memory_equal(e->lbuf, e->rbuf + (4u << 20), 1u << 20); /* READ 12: rbuf 4 MiB */
	free(xbuf);
}

/*
 * The same with a WRITE behind the bad READ: its payload waits unread in
 * the target's socket (behind the READs' fence).  The target's close()
 * with unread bytes sent a reset, and the reset dropped what its socket
 * had not sent yet: the tail of the 16 MiB ahead (READs 13..15 failed, 4
 * runs of 6).  The initiator reads now and then, so the target's socket
 * holds responses when the bad one comes up.
 */
static void test_read_region_gone_requests_behind(void **state)
{
	enum { AHEAD = 16, BEHIND = 1 };
	struct env *e = *state;
	struct nic_wr wrs[AHEAD + 1 + BEHIND];
	uint8_t *xbuf = aligned_alloc(4096, 4096);
	struct tcp_counters c;
	struct nic_mr x;
	int ok = 0;

	assert_non_null(xbuf);
	assert_int_equal(P->reg_mr(e->b, xbuf, 4096, NIC_ACCESS_ALL, &x), 0);
	reads_then_x(e, wrs, AHEAD, xbuf, &x);
	for (int i = AHEAD + 1; i < AHEAD + 1 + BEHIND; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, (uint64_t)i, 6u << 20, 6u << 20, 256 << 10, 1);
	nic_wr_chain(wrs, AHEAD + 1 + BEHIND);
	post_ok(e, wrs);
	target_reads(e, 1 + AHEAD + 1);
	usleep(20000); /* and the WRITE behind them */
	for (int i = 0; i < 20; i++) {
		struct nic_wc tmp[4];

		assert_int_equal(P->poll(e->cqb, 4, tmp), 0);
	}
	tcp_get_counters(e->b, &c);
	assert_true(c.frames_tx < 1 + AHEAD);
	assert_int_equal(P->dereg_mr(e->b, &x), 0);
	for (uint64_t end = now_ms() + 5000; e->nwc < AHEAD + 1 + BEHIND && now_ms() < end;) {
		struct nic_wc tmp[4];
		int m = P->poll(e->cqa, 64, e->wc + e->nwc);

		assert_true(m >= 0);
		e->nwc += m;
		for (int i = 0; i < 100; i++) {
			assert_int_equal(P->poll(e->cqb, 4, tmp), 0);
			usleep(50);
		}
	}
	assert_int_equal(e->nwc, AHEAD + 1 + BEHIND);
	for (int i = 0; i < AHEAD; i++)
		ok += e->wc[i].wr_id == (uint64_t)i && e->wc[i].status == NIC_WC_SUCCESS;
	assert_int_equal(ok, AHEAD);
	assert_int_equal(e->wc[AHEAD].wr_id, AHEAD);
	assert_true(e->wc[AHEAD].status != NIC_WC_SUCCESS);
	assert_memory_equal(e->lbuf, e->rbuf + (4u << 20), 1u << 20); /* READ 12: rbuf 4 MiB */
	free(xbuf);
}

static void test_bad_lkey(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, BUF_LEN - 10, 2 * 4096, 4096, 0);

	check_error_chain(e, &w, NIC_WC_LOC_PROT_ERR);
}

static void test_set_error(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[8];

	/* The target is not polled: nothing completes until we say so. */
	for (int i = 0; i < 8; i++)
		wrs[i] = mkwr(e, i & 1 ? NIC_OP_READ : NIC_OP_WRITE, (uint64_t)i, 0, 0, 1 << 20,
			      i == 7);
	nic_wr_chain(wrs, 8);
	post_ok(e, wrs);
	for (int i = 0; i < 50; i++)
		assert_int_equal(P->poll(e->cqa, 64, e->wc), 0);
	assert_int_equal(P->qp_set_error(e->qa), 0);
	e->nwc = 0;
	pump_until(e, 8);
	for (int i = 0; i < 8; i++)
		assert_wc(&e->wc[i], (uint64_t)i, NIC_WC_FLUSH_ERR);
	pump_for(e, 5);
	assert_int_equal(e->nwc, 8);
}

/* The target goes away mid-stream: every WR ends in an error, none hangs. */
static void test_peer_closes(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[QP_LEN];
	int ok = 0;

	for (int i = 0; i < (int)QP_LEN; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, (uint64_t)i, 0, (size_t)(i % 8) << 20, 1 << 20, 1);
	nic_wr_chain(wrs, QP_LEN);
	post_ok(e, wrs);
	for (int i = 0; i < 3; i++)
		pump_once(e);
	P->qp_destroy(e->qb); /* the control path, while the stream is on */
	e->qb = NULL;
	pump_until(e, QP_LEN);
	for (int i = 0; i < (int)QP_LEN; i++) {
		assert_int_equal(e->wc[i].wr_id, (uint64_t)i);
		if (e->wc[i].status == NIC_WC_SUCCESS) {
			assert_int_equal(ok, i); /* successes first, in order */
			ok++;
		} else if (i == ok) {
			assert_int_equal(e->wc[i].status, NIC_WC_RETRY_EXC_ERR);
		} else {
			assert_int_equal(e->wc[i].status, NIC_WC_FLUSH_ERR);
		}
	}
	assert_true(ok < (int)QP_LEN);
}

/* ---- raw peers: what a hostile or broken initiator sends --------------- */

static int dial(struct nic *n)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(tcp_port(n)) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static size_t put_hello_max(uint8_t *buf, uint32_t qpn, const uint8_t *secret, uint32_t max)
{
	struct tcp_frame f = { .type = TCP_F_HELLO, .len = TCP_HELLO_LEN };
	struct tcp_hello h = { .qpn = qpn, .max_frame = max };

	memcpy(h.secret, secret, TCP_SECRET_LEN);
	tcp_frame_encode(&f, buf);
	tcp_hello_encode(&h, buf + TCP_HDR_LEN);
	return TCP_HDR_LEN + TCP_HELLO_LEN;
}

static size_t put_hello(uint8_t *buf, uint32_t qpn, const uint8_t *secret)
{
	return put_hello_max(buf, qpn, secret, TCP_MAX_FRAME);
}

static size_t put_write(uint8_t *buf, uint32_t seq, uint32_t rkey, uint64_t addr, uint32_t len)
{
	struct tcp_frame f = { .type = TCP_F_WRITE, .len = len, .seq = seq, .rkey = rkey, .addr = addr };

	tcp_frame_encode(&f, buf);
	memset(buf + TCP_HDR_LEN, 0xab, len);
	return TCP_HDR_LEN + len;
}

/* Poll the target until the raw peer sees its connection closed; what came
 * before the close is returned in got (at most cap bytes). */
static size_t until_closed(struct env *e, int fd, uint8_t *got, size_t cap)
{
	uint64_t end = now_ms() + 5000;
	size_t n = 0;

	while (now_ms() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint8_t tmp[4096];
		ssize_t r;

		pump_once(e);
		if (poll(&p, 1, 1) <= 0)
			continue;
		r = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
		if (r <= 0)
			return n;
		if (got && n + (size_t)r <= cap)
			memcpy(got + n, tmp, (size_t)r);
		n += (size_t)r;
	}
	fail_msg("the target did not close the connection");
	return n;
}

/* A fresh target QP that waits for an initiator whose QP we play. */
static struct nic_qp *waiting_qp(struct env *e, struct nic_qp_info *info)
{
	struct nic_qp_info fake = { .qpn = 12345, .psn = 7 };
	struct nic_addr aa;
	struct nic_qp *q;

	memset(fake.secret, 0x5a, sizeof(fake.secret));
	assert_int_equal(P->qp_create(e->b, e->cqb, 1, &q), 0);
	P->addr(e->a, &aa);
	assert_int_equal(P->qp_connect(q, &aa, &fake), 0);
	P->qp_info(q, info);
	return q;
}

static void test_hello_wrong_secret(void **state)
{
	struct env *e = *state;
	struct nic_qp_info info;
	struct nic_qp *q = waiting_qp(e, &info);
	uint8_t buf[256], *snap = malloc(BUF_LEN);
	struct tcp_counters c;
	size_t n;
	int fd;

	assert_non_null(snap);
	memcpy(snap, e->rbuf, BUF_LEN);
	info.secret[7] ^= 1;
	fd = dial(e->b);
	n = put_hello(buf, info.qpn, info.secret);
	n += put_write(buf + n, 7, e->rmr.rkey, (uintptr_t)e->rbuf, 64);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	assert_int_equal(until_closed(e, fd, NULL, 0), 0); /* not even a HELLO back */
	close(fd);
	assert_memory_equal(e->rbuf, snap, BUF_LEN);
	tcp_get_counters(e->b, &c);
	assert_int_equal(c.refused, 1);

	/* The right secret now: the QP takes it and answers HELLO with the
	 * initiator's qpn and secret, then takes the WRITE. */
	info.secret[7] ^= 1;
	fd = dial(e->b);
	n = put_hello(buf, info.qpn, info.secret);
	n += put_write(buf + n, 7, e->rmr.rkey, (uintptr_t)e->rbuf, 64);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	shutdown(fd, SHUT_WR);
	n = until_closed(e, fd, buf, sizeof(buf));
	assert_int_equal(n, 2 * TCP_HDR_LEN + TCP_HELLO_LEN); /* HELLO, ACK */
	{
		struct tcp_frame f;
		struct tcp_hello h;

		assert_int_equal(tcp_frame_decode(buf, n, &f), 0);
		assert_int_equal(f.type, TCP_F_HELLO);
		assert_int_equal(tcp_hello_decode(buf + TCP_HDR_LEN, TCP_HELLO_LEN, &h), 0);
		assert_int_equal(h.qpn, 12345);
		assert_int_equal(h.secret[0], 0x5a);
		assert_int_equal(tcp_frame_decode(buf + TCP_HDR_LEN + TCP_HELLO_LEN, TCP_HDR_LEN, &f), 0);
		assert_int_equal(f.type, TCP_F_ACK);
		assert_int_equal(f.seq, 7);
	}
	close(fd);
	for (int i = 0; i < 64; i++)
		assert_int_equal(e->rbuf[i], 0xab);
	/* One connection per QP: a second HELLO for it is refused. */
	fd = dial(e->b);
	n = put_hello(buf, info.qpn, info.secret);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	assert_int_equal(until_closed(e, fd, NULL, 0), 0);
	close(fd);
	tcp_get_counters(e->b, &c);
	assert_int_equal(c.refused, 2);
	P->qp_destroy(q);
	free(snap);
}

static void test_no_hello(void **state)
{
	struct env *e = *state;
	struct nic_qp_info info, ia;
	uint8_t buf[256], *snap = malloc(BUF_LEN);
	struct tcp_counters c;
	size_t n;
	int fd;

	assert_non_null(snap);
	memcpy(snap, e->rbuf, BUF_LEN);
	/* A WRITE as the first frame. */
	fd = dial(e->b);
	n = put_write(buf, 0, e->rmr.rkey, (uintptr_t)e->rbuf, 64);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	assert_int_equal(until_closed(e, fd, NULL, 0), 0);
	close(fd);
	/* A HELLO for a QP that waits for nobody (the initiator's own). */
	P->qp_info(e->qa, &ia);
	fd = dial(e->a);
	n = put_hello(buf, ia.qpn, ia.secret);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	{
		uint64_t end = now_ms() + 5000;
		struct pollfd p = { .fd = fd, .events = POLLIN };

		while (now_ms() < end && poll(&p, 1, 0) == 0)
			pump_once(e);
		assert_int_equal(recv(fd, buf, sizeof(buf), 0), 0);
	}
	close(fd);
	/* Garbage, and a HELLO for no QP at all. */
	P->qp_info(e->qb, &info);
	fd = dial(e->b);
	memset(buf, 0xee, 64);
	assert_int_equal(send(fd, buf, 64, 0), 64);
	assert_int_equal(until_closed(e, fd, NULL, 0), 0);
	close(fd);
	fd = dial(e->b);
	n = put_hello(buf, info.qpn + (1u << 13), info.secret);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	assert_int_equal(until_closed(e, fd, NULL, 0), 0);
	close(fd);
	assert_memory_equal(e->rbuf, snap, BUF_LEN);
	tcp_get_counters(e->b, &c);
	assert_int_equal(c.refused, 3);
	tcp_get_counters(e->a, &c);
	assert_int_equal(c.refused, 1);
	/* The real QPs are untouched. */
	{
		struct nic_wr w = mkwr(e, NIC_OP_WRITE, 9, 0, 0, 4096, 1);

		post_ok(e, &w);
		pump_until(e, 1);
		assert_wc(&e->wc[0], 9, NIC_WC_SUCCESS);
	}
	free(snap);
}

/*
 * Connections that never say HELLO hold the target's waiting slots (32)
 * past their deadline while its core sleeps (nothing polls the CQ to
 * sweep them); the next real connection still gets in: an accept with no
 * slot left sweeps first.  Before, it was refused and its first WR failed
 * RETRY_EXC_ERR.
 */
static void test_silent_dials_past_deadline(void **state)
{
	struct env *e = *state;
	struct nic_qp *qa, *qb;
	struct nic_wr w;
	int fds[32];

	tcp_set_hello_ms(e->b, 100);
	for (int i = 0; i < 32; i++)
		fds[i] = dial(e->b);
	pump_for(e, 50);  /* accepted into the waiting slots */
	usleep(200 * 1000); /* past their deadline, the target not polled */
	assert_int_equal(P->qp_create(e->a, e->cqa, QP_LEN, &qa), 0);
	assert_int_equal(P->qp_create(e->b, e->cqb, 1, &qb), 0);
	handshake(e->a, qa, e->b, qb);
	w = mkwr(e, NIC_OP_WRITE, 5, 0, 0, 64, 1);
	assert_int_equal(P->post(qa, &w, NULL), 0);
	e->nwc = 0;
	pump_until(e, 1);
	assert_wc(&e->wc[0], 5, NIC_WC_SUCCESS);
	for (int i = 0; i < 32; i++)
		close(fds[i]);
	P->qp_destroy(qa);
	P->qp_destroy(qb);
}

/*
 * A target out of file descriptors (EMFILE at accept): the dial is refused
 * at once -- its connection taken with the spare fd and closed -- and a
 * dial after the fds came back is served.  Before, the connection stayed
 * in the backlog, the listener stayed readable and the serving core polled
 * it again at once for as long as the process was out of fds (a core at
 * 100 %), while the peer waited for a HELLO that never came.
 */
static void test_accept_out_of_fds(void **state)
{
	struct env *e = *state;
	struct rlimit old, low;
	struct tcp_counters c;
	struct nic_qp *qa, *qb;
	struct nic_wr w;
	int fd, held[64], n = 0, probe;

	fd = dial(e->b);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	probe = dup(0); /* the lowest free fd: the limit goes just above it */
	assert_true(probe >= 0);
	close(probe);
	low = old;
	low.rlim_cur = (rlim_t)probe + 8;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 64 && (held[n] = dup(0)) >= 0)
		n++;
	assert_int_equal(errno, EMFILE);
	tcp_get_counters(e->b, &c);
	uint64_t refused = c.refused;
	assert_int_equal(until_closed(e, fd, NULL, 0), 0); /* refused, not left hanging */
	tcp_get_counters(e->b, &c);
	assert_true(c.refused > refused);
	close(fd);
	while (n)
		close(held[--n]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	/* fds back: a new QP's dial is served */
	assert_int_equal(P->qp_create(e->a, e->cqa, QP_LEN, &qa), 0);
	assert_int_equal(P->qp_create(e->b, e->cqb, 1, &qb), 0);
	handshake(e->a, qa, e->b, qb);
	w = mkwr(e, NIC_OP_WRITE, 11, 0, 0, 4096, 1);
	assert_int_equal(P->post(qa, &w, NULL), 0);
	e->nwc = 0;
	pump_until(e, 1);
	assert_wc(&e->wc[0], 11, NIC_WC_SUCCESS);
	P->qp_destroy(qa);
	P->qp_destroy(qb);
}

/*
 * qp_set_error on a target QP that waits for its initiator: the QP is in
 * the error state, so the initiator's dial that comes after is refused --
 * no HELLO back, nothing written.  Before, the error state of a QP with no
 * connection yet was nothing: the dial was bound and its WRITE executed.
 */
static void test_set_error_waiting_target(void **state)
{
	struct env *e = *state;
	struct nic_qp_info info;
	struct nic_qp *q = waiting_qp(e, &info);
	uint8_t buf[256];
	struct tcp_counters c0, c1;
	size_t n;
	int fd;

	memset(e->rbuf, 0, 64);
	tcp_get_counters(e->b, &c0);
	assert_int_equal(P->qp_set_error(q), 0);
	fd = dial(e->b);
	n = put_hello(buf, info.qpn, info.secret);
	n += put_write(buf + n, 7, e->rmr.rkey, (uintptr_t)e->rbuf, 64);
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	shutdown(fd, SHUT_WR);
	assert_int_equal(until_closed(e, fd, buf, sizeof(buf)), 0);
	close(fd);
	for (int i = 0; i < 64; i++)
		assert_int_equal(e->rbuf[i], 0);
	tcp_get_counters(e->b, &c1);
	assert_int_equal(c1.refused, c0.refused + 1);
	P->qp_destroy(q);
}

/*
 * A WRITE whose region is deregistered while its payload comes in, with
 * responses ahead of it still in the target's socket: they arrive whole,
 * then the WRITE's refusal (an access error, as its header would have got
 * a moment later), then the FIN.  The raw initiator asks for a READ of 256
 * KiB (its receive buffer is small, and it reads only enough for the
 * target to move on), a WRITE of 64 bytes, then a WRITE of 1 MiB into
 * region x of which it sends 4 KiB; x goes, 4 KiB more come (the target
 * looks at the region when it receives into it).  Before, the target closed at
 * once with the rest of the payload unread: the close sent a reset, which
 * dropped the READ's tail and the first WRITE's ACK that its socket had
 * not sent yet.
 */
static void test_write_region_gone_responses_ahead(void **state)
{
	enum { RLEN = 256 << 10, GOT = TCP_HDR_LEN + TCP_HELLO_LEN + TCP_HDR_LEN + RLEN + 2 * TCP_HDR_LEN };
	struct env *e = *state;
	struct nic_qp_info info;
	struct nic_qp *q = waiting_qp(e, &info);
	struct tcp_frame f = { .type = TCP_F_READ_REQ, .len = RLEN, .seq = 7,
			       .rkey = e->rmr.rkey, .addr = (uintptr_t)e->rbuf };
	struct tcp_counters c;
	uint8_t *xbuf = aligned_alloc(4096, 1 << 20), *got = malloc(GOT + 4096), buf[8192];
	size_t n = 0, have = 0;
	struct nic_mr x;
	int fd, small = 4096;
	ssize_t r;

	assert_non_null(xbuf);
	assert_non_null(got);
	assert_int_equal(P->reg_mr(e->b, xbuf, 1 << 20, NIC_ACCESS_ALL, &x), 0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	{
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(tcp_port(e->b)) };

		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	n = put_hello(buf, info.qpn, info.secret);
	tcp_frame_encode(&f, buf + n);
	n += TCP_HDR_LEN;
	n += put_write(buf + n, 8, e->rmr.rkey, (uintptr_t)e->rbuf + (6u << 20), 64);
	n += put_write(buf + n, 9, x.rkey, (uintptr_t)xbuf, 4096);
	f = (struct tcp_frame){ .type = TCP_F_WRITE, .len = 1 << 20, .seq = 9, .rkey = x.rkey,
				.addr = (uintptr_t)xbuf };
	tcp_frame_encode(&f, buf + n - 4096 - TCP_HDR_LEN); /* 1 MiB, of which 4 KiB are sent */
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	/* Read what the target needs to reach the second WRITE's payload, no more. */
	for (uint64_t end = now_ms() + 5000; now_ms() < end;) {
		pump_once(e);
		tcp_get_counters(e->b, &c);
		if (c.payload_rx >= 64 + 4096)
			break;
		r = recv(fd, got + have, 1024, MSG_DONTWAIT);
		if (r > 0)
			have += (size_t)r;
	}
	tcp_get_counters(e->b, &c);
	assert_true(c.payload_rx >= 64 + 4096);
	assert_true(have < GOT - 2 * TCP_HDR_LEN); /* the READ's tail still on its way */
	assert_int_equal(P->dereg_mr(e->b, &x), 0);
	memset(buf, 0xab, 4096); /* more of the payload: the target finds x gone */
	assert_int_equal(send(fd, buf, 4096, 0), 4096);
	have += until_closed(e, fd, got + have, GOT + 4096 - have);
	close(fd);
	assert_int_equal(have, GOT);
	assert_memory_equal(got + TCP_HDR_LEN + TCP_HELLO_LEN + TCP_HDR_LEN, e->rbuf, RLEN);
	assert_int_equal(tcp_frame_decode(got + GOT - 2 * TCP_HDR_LEN, TCP_HDR_LEN, &f), 0);
	assert_true(f.type == TCP_F_ACK && f.status == TCP_ST_OK && f.seq == 8);
	assert_int_equal(tcp_frame_decode(got + GOT - TCP_HDR_LEN, TCP_HDR_LEN, &f), 0);
	assert_true(f.type == TCP_F_ACK && f.status == TCP_ST_ACCESS && f.seq == 9);
	for (int i = 0; i < 64; i++)
		assert_int_equal(e->rbuf[(6u << 20) + i], 0xab);
	P->qp_destroy(q);
	free(got);
	free(xbuf);
}

/* After a good HELLO, a malformed frame or a wrong sequence closes the connection. */
static void test_violation_after_hello(void **state)
{
	struct env *e = *state;
	static const struct {
		uint8_t byte;  /* which header byte to spoil */
		uint8_t value;
	} spoil[] = { { 0, 9 }, { 2, 1 }, { 1, 1 }, { 8, 8 } /* seq 7 -> 8 */ };

	for (unsigned k = 0; k < sizeof(spoil) / sizeof(spoil[0]); k++) {
		struct nic_qp_info info;
		struct nic_qp *q = waiting_qp(e, &info);
		uint8_t buf[256];
		struct tcp_counters c0, c1;
		size_t n, hello;
		int fd;

		tcp_get_counters(e->b, &c0);
		memset(e->rbuf, 0, 256);
		fd = dial(e->b);
		hello = put_hello(buf, info.qpn, info.secret);
		n = hello + put_write(buf + hello, 7, e->rmr.rkey, (uintptr_t)e->rbuf, 64);
		buf[hello + spoil[k].byte] = spoil[k].value;
		assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
		/* Only the HELLO comes back; nothing is written. */
		assert_int_equal(until_closed(e, fd, buf, sizeof(buf)), TCP_HDR_LEN + TCP_HELLO_LEN);
		close(fd);
		for (int i = 0; i < 256; i++)
			assert_int_equal(e->rbuf[i], 0);
		tcp_get_counters(e->b, &c1);
		assert_int_equal(c1.violations, c0.violations + 1);
		P->qp_destroy(q);
	}
}

/* An initiator that takes frames of 4 KiB at most asks to READ 8 KiB: the
 * target answers with an error status (no payload), then only drains. */
static void test_read_too_big(void **state)
{
	struct env *e = *state;
	struct nic_qp_info info;
	struct nic_qp *q = waiting_qp(e, &info);
	struct tcp_frame f = { .type = TCP_F_READ_REQ, .len = 8192, .seq = 7,
			       .rkey = e->rmr.rkey, .addr = (uintptr_t)e->rbuf };
	uint8_t buf[256];
	size_t n;
	int fd;

	fd = dial(e->b);
	n = put_hello_max(buf, info.qpn, info.secret, 4096);
	tcp_frame_encode(&f, buf + n);
	n += TCP_HDR_LEN;
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
	shutdown(fd, SHUT_WR);
	n = until_closed(e, fd, buf, sizeof(buf));
	assert_int_equal(n, 2 * TCP_HDR_LEN + TCP_HELLO_LEN); /* HELLO, the refusal */
	assert_int_equal(tcp_frame_decode(buf + TCP_HDR_LEN + TCP_HELLO_LEN, TCP_HDR_LEN, &f), 0);
	assert_int_equal(f.type, TCP_F_READ_RESP);
	assert_int_equal(f.status, TCP_ST_TOO_BIG);
	assert_int_equal(f.seq, 7);
	assert_int_equal(f.len, 0);
	close(fd);
	P->qp_destroy(q);
}

/* A target that stops reading: post and poll stay quick; nothing is lost. */
static void test_backpressure(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[QP_LEN];
	struct nic_wr *bad = NULL;
	int max_ms, ran_out;

	/* One round trip first: the initiator sends only once the target's
	 * HELLO is in, so the socket is what pushes back below. */
	wrs[0] = mkwr(e, NIC_OP_WRITE, 99, 0, 0, 64, 1);
	post_ok(e, &wrs[0]);
	pump_until(e, 1);
	for (int i = 0; i < (int)QP_LEN; i++) {
		wrs[i] = mkwr(e, NIC_OP_WRITE, (uint64_t)i, (size_t)(i % 8) << 20,
			      (size_t)(i % 8) << 20, 1 << 20, (i % 16) == 15);
	}
	nic_wr_chain(wrs, QP_LEN);
	/* Neither waits for the socket to drain: no poll() with a timeout
	 * (the sends themselves are MSG_DONTWAIT; a blocking one would hang
	 * here, the target being ours to pump). */
	poll_watch();
	assert_int_equal(P->post(e->qa, wrs, &bad), 0); /* 64 MiB: far more than the socket takes */
	for (int i = 0; i < 200; i++)
		assert_int_equal(P->poll(e->cqa, 64, e->wc), 0);
	poll_watched(&max_ms, &ran_out);
	assert_int_equal(max_ms, 0);
	assert_int_equal(ran_out, 0);
	{
		struct tcp_counters c;

		/* Some went out and then the socket was full. */
		tcp_get_counters(e->a, &c);
		assert_true(c.payload_tx >= (1u << 20) && c.payload_tx < (64u << 20));
	}
	/* A full send queue is the caller's bug: refused, not blocking. */
	wrs[0].next = NULL;
	assert_int_equal(P->post(e->qa, &wrs[0], &bad), -ENOMEM);
	assert_ptr_equal(bad, &wrs[0]);
	/* The target reads again: all of it arrives. */
	e->nwc = 0;
	pump_until(e, QP_LEN / 16);
	for (int i = 0; i < (int)(QP_LEN / 16); i++)
		assert_wc(&e->wc[i], (uint64_t)(16 * i + 15), NIC_WC_SUCCESS);
	assert_memory_equal(e->rbuf, e->lbuf, 8 << 20);
	{
		struct tcp_counters c;

		tcp_get_counters(e->a, &c);
		assert_int_equal(c.sq_overflows, 1);
	}
}

static void test_not_connected_and_limits(void **state)
{
	struct env *e = *state;
	struct nic_qp *q;
	struct nic_cq *cq2;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1);
	struct nic_wr *bad = NULL;
	struct nic_qp_info info = { .qpn = 5 };
	struct nic_addr aa;

	assert_int_equal(P->qp_create(e->a, e->cqa, 4, &q), 0);
	assert_int_equal(P->post(q, &w, &bad), -ENOTCONN);
	assert_ptr_equal(bad, &w);
	P->qp_destroy(q);
	assert_int_equal(P->qp_create(e->a, e->cqa, 0, &q), -EINVAL);
	assert_int_equal(P->qp_create(e->a, e->cqa, 16385, &q), -EINVAL);
	assert_int_equal(P->qp_create(e->b, e->cqa, 4, &q), -EINVAL);
	assert_int_equal(P->cq_create(e->a, 0, &cq2), -EINVAL);
	/* A QP on a second CQ cannot wait for a dial: the first CQ serves. */
	assert_int_equal(P->cq_create(e->b, 16, &cq2), 0);
	assert_int_equal(P->qp_create(e->b, cq2, 1, &q), 0);
	P->addr(e->a, &aa);
	assert_int_equal(P->qp_connect(q, &aa, &info), -EINVAL);
	P->qp_destroy(q);
	P->cq_destroy(cq2);
	/* An unknown op. */
	w.op = 7;
	assert_int_equal(P->post(e->qa, &w, &bad), -EINVAL);
}

/* More signalled CQEs than the CQ holds: counted and said once, never silent. */
static void test_cq_overflow(void **state)
{
	struct nic *a, *b;
	struct nic_cq *small, *cqb;
	struct nic_qp *qa, *qb;
	struct nic_mr lmr, rmr;
	struct nic_wr wrs[8];
	struct nic_wc wc[8];
	struct tcp_counters c;
	uint8_t *lbuf = calloc(1, 4096), *rbuf = calloc(1, 4096);
	int got = 0, ovf = 0;
	uint64_t end = now_ms() + 5000;

	(void)state;
	assert_int_equal(P->open("tcp", &a), 0);
	assert_int_equal(P->open("tcp", &b), 0);
	assert_int_equal(P->cq_create(a, 4, &small), 0);
	assert_int_equal(P->cq_create(b, 16, &cqb), 0);
	assert_int_equal(P->qp_create(a, small, 8, &qa), 0);
	assert_int_equal(P->qp_create(b, cqb, 1, &qb), 0);
	assert_int_equal(P->reg_mr(a, lbuf, 4096, NIC_ACCESS_ALL, &lmr), 0);
	assert_int_equal(P->reg_mr(b, rbuf, 4096, NIC_ACCESS_ALL, &rmr), 0);
	handshake(a, qa, b, qb);
	for (int i = 0; i < 8; i++)
		wrs[i] = (struct nic_wr){ .wr_id = (uint64_t)i, .local = (uintptr_t)lbuf,
					  .remote = (uintptr_t)rbuf, .len = 64, .lkey = lmr.lkey,
					  .rkey = rmr.rkey, .op = NIC_OP_WRITE, .signaled = 1 };
	nic_wr_chain(wrs, 8);
	assert_int_equal(P->post(qa, wrs, NULL), 0);
	while (now_ms() < end) {
		int n;

		P->poll(cqb, 8, wc);
		n = P->poll(small, 1, wc);
		if (n == -EOVERFLOW)
			ovf++;
		else if (n > 0)
			got += n;
		tcp_get_counters(a, &c);
		if (got + (int)c.cq_overflows == 8 && ovf)
			break;
	}
	/* Said at least once, and every CQE either delivered or counted. */
	assert_true(ovf >= 1);
	tcp_get_counters(a, &c);
	assert_int_equal(got + (int)c.cq_overflows, 8);
	P->close(a); /* frees its CQs and QPs */
	P->close(b);
	free(lbuf);
	free(rbuf);
}

/* ---- a target core in its own thread ------------------------------------ */

struct poller {
	struct nic_cq *cq;
	int stop;
	uint64_t polls;
};

static void *poller_main(void *arg)
{
	struct poller *p = arg;
	struct nic_wc wc[16];

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		assert_true(P->poll(p->cq, 16, wc) == 0);
		p->polls++;
	}
	return NULL;
}

/* The control path destroys QPs and deregisters memory while the target's
 * core serves them (TSan checks the orderings). */
static void test_threads(void **state)
{
	(void)state;
	struct nic *a, *b;
	struct nic_cq *cqa, *cqb;
	struct poller pl = { 0 };
	pthread_t t;
	size_t len = 1 << 20;
	uint8_t *lbuf = calloc(1, len), *rbuf = calloc(1, len);

	assert_int_equal(P->open("tcp@127.0.0.1", &a), 0);
	assert_int_equal(P->open("tcp@127.0.0.1", &b), 0);
	assert_int_equal(P->cq_create(a, 256, &cqa), 0);
	assert_int_equal(P->cq_create(b, 256, &cqb), 0);
	pl.cq = cqb;
	assert_int_equal(pthread_create(&t, NULL, poller_main, &pl), 0);
	for (int round = 0; round < 20; round++) {
		struct nic_mr lmr, rmr;
		struct nic_qp *qa, *qb;
		struct nic_wr wrs[16];
		struct nic_wc wc[16];
		int got = 0;
		uint64_t end = now_ms() + 5000;

		memset(lbuf, round + 1, len);
		assert_int_equal(P->reg_mr(a, lbuf, len, NIC_ACCESS_ALL, &lmr), 0);
		assert_int_equal(P->reg_mr(b, rbuf, len, NIC_ACCESS_ALL, &rmr), 0);
		assert_int_equal(P->qp_create(a, cqa, 16, &qa), 0);
		assert_int_equal(P->qp_create(b, cqb, 1, &qb), 0);
		handshake(a, qa, b, qb);
		for (int i = 0; i < 16; i++)
			wrs[i] = (struct nic_wr){ .wr_id = (uint64_t)i,
						  .local = (uintptr_t)lbuf + (size_t)i * 65536,
						  .remote = (uintptr_t)rbuf + (size_t)i * 65536,
						  .len = 65536, .lkey = lmr.lkey, .rkey = rmr.rkey,
						  .op = (uint8_t)(i & 1), .signaled = 1 };
		nic_wr_chain(wrs, 16);
		assert_int_equal(P->post(qa, wrs, NULL), 0);
		if (round % 2 == 0) {
			/* All of it, then tear down. */
			while (got < 16 && now_ms() < end) {
				int n = P->poll(cqa, 16, wc);

				assert_true(n >= 0);
				for (int i = 0; i < n; i++)
					assert_int_equal(wc[i].status, NIC_WC_SUCCESS);
				got += n;
			}
			assert_int_equal(got, 16);
		} else {
			/* Pull the target's memory and QP from under its core. */
			assert_int_equal(P->dereg_mr(b, &rmr), 0);
			P->qp_destroy(qb);
			qb = NULL;
			while (got < 16 && now_ms() < end) {
				int n = P->poll(cqa, 16, wc);

				assert_true(n >= 0);
				got += n;
			}
			assert_int_equal(got, 16);
		}
		P->qp_destroy(qa);
		if (qb) {
			P->qp_destroy(qb);
			assert_int_equal(P->dereg_mr(b, &rmr), 0);
		}
		assert_int_equal(P->dereg_mr(a, &lmr), 0);
	}
	__atomic_store_n(&pl.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	assert_true(pl.polls > 0);
	P->cq_destroy(cqa);
	P->cq_destroy(cqb);
	P->close(a);
	P->close(b);
	free(lbuf);
	free(rbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry),
		cmocka_unit_test(test_open_addr_caps),
		cmocka_unit_test(test_cluster_key),
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
		T(test_qp_info_roles),
		T(test_target_does_not_dial),
		T(test_addr_dialable),
		T(test_write_read_random),
		T(test_selective_signalling),
		T(test_read_then_write),
		T(test_zero_length),
		T(test_bad_rkey),
		T(test_bad_range),
		T(test_write_refused),
		T(test_write_refused_while_sending),
		T(test_zero_read_names_nothing),
		T(test_read_region_gone_behind_others),
		T(test_read_region_gone_requests_behind),
		T(test_bad_lkey),
		T(test_set_error),
		T(test_peer_closes),
		T(test_hello_wrong_secret),
		T(test_no_hello),
		T(test_silent_dials_past_deadline),
		T(test_violation_after_hello),
		T(test_accept_out_of_fds),
		T(test_set_error_waiting_target),
		T(test_write_region_gone_responses_ahead),
		T(test_read_too_big),
		T(test_backpressure),
		T(test_not_connected_and_limits),
#undef T
		cmocka_unit_test(test_cq_overflow),
		cmocka_unit_test(test_threads),
	};

	if (getenv("FERRY_TEST_ONLY")) /* one test (or a glob) */
		cmocka_set_test_filter(getenv("FERRY_TEST_ONLY"));
	/* The provider's messages go to stderr; cmocka's summary to stdout. */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
