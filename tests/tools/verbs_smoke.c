/* SPDX-License-Identifier: MIT */
/*
 * verbs_smoke: the verbs provider end to end on two real devices, through
 * the provider interface only (qp/nic.h), in one process.  Not a cmocka
 * test: it needs RDMA devices, which the build host does not have.
 *
 *   make build/verbs_smoke
 *   ../shared/softroce/vm-run --timeout 120 -- ./build/verbs_smoke rxe0 rxe1
 *
 * Exit 0: every check passed; 1: a check failed; 2: a device did not open
 * (e.g. FERRY_GID_INDEX refused), the provider's message is on stderr.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "qp/nic.h"
#include "qp/verbs/verbs.h"

#define BUF_LEN (1u << 20)
#define WR_LEN (64u << 10)
#define NWR ((int)(BUF_LEN / WR_LEN))
#define SIGNAL_EVERY 4
#define CQ_LEN 256u
#define QP_LEN 128u
#define WAIT_SEC 30

#define CHECK(c)                                                                  \
	do {                                                                      \
		if (!(c)) {                                                       \
			fprintf(stderr, "verbs_smoke: FAIL %s:%d: %s\n", __FILE__, \
				__LINE__, #c);                                    \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

struct side {
	const char *name;
	const struct nic_provider *p;
	struct nic *nic;
	struct nic_cq *cq;
	uint8_t *buf;
	struct nic_mr mr;
};

struct pair {
	struct side *a, *b;
	struct nic_qp *qa, *qb; /* qa posts; qb only responds */
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

static void side_open(struct side *s, const char *name)
{
	struct nic_caps caps;
	char desc[256];
	int rc;

	s->name = name;
	s->p = nic_provider_for(name);
	CHECK(s->p == &nic_verbs_provider);
	rc = s->p->open(name, &s->nic);
	if (rc) {
		fprintf(stderr, "verbs_smoke: open %s: %s\n", name, strerror(-rc));
		exit(2);
	}
	s->p->describe(s->nic, desc, sizeof(desc));
	s->p->caps(s->nic, &caps);
	printf("verbs_smoke: %s: %s; max_qp_wr %u max_cqe %u max_inline %u max_rd_atomic %u\n",
	       name, desc, caps.max_qp_wr, caps.max_cqe, caps.max_inline, caps.max_rd_atomic);
	s->buf = aligned_alloc(4096, BUF_LEN);
	CHECK(s->buf);
	CHECK(s->p->reg_mr(s->nic, s->buf, BUF_LEN, NIC_ACCESS_ALL, &s->mr) == 0);
	CHECK(s->mr.priv != NULL);
	CHECK(s->p->cq_create(s->nic, CQ_LEN, &s->cq) == 0);
}

static void side_close(struct side *s)
{
	CHECK(s->p->dereg_mr(s->nic, &s->mr) == 0);
	CHECK(s->p->dereg_mr(s->nic, &s->mr) == -EINVAL); /* twice: refused */
	s->p->cq_destroy(s->cq);
	s->p->close(s->nic);
	free(s->buf);
}

static void pair_connect(struct pair *pr, struct side *a, struct side *b)
{
	struct nic_qp_info ia, ib;
	struct nic_addr aa, ab;

	pr->a = a;
	pr->b = b;
	CHECK(a->p->qp_create(a->nic, a->cq, QP_LEN, &pr->qa) == 0);
	CHECK(b->p->qp_create(b->nic, b->cq, QP_LEN, &pr->qb) == 0);
	a->p->qp_info(pr->qa, &ia);
	b->p->qp_info(pr->qb, &ib);
	CHECK(ia.qpn == a->p->qp_num(pr->qa) && ia.psn < (1u << 24));
	a->p->addr(a->nic, &aa);
	b->p->addr(b->nic, &ab);
	CHECK(a->p->qp_connect(pr->qa, &ab, &ib) == 0);
	CHECK(b->p->qp_connect(pr->qb, &aa, &ia) == 0);
	CHECK(a->p->qp_connect(pr->qa, &ab, &ib) == -EISCONN);
}

static void pair_destroy(struct pair *pr)
{
	pr->a->p->qp_destroy(pr->qa);
	pr->b->p->qp_destroy(pr->qb);
}

/* Poll a's CQ until the CQE of last_id arrives; returns the CQEs seen. */
static int wait_for(struct side *a, uint64_t last_id, struct nic_wc *out, int max)
{
	double deadline = now_ms() + WAIT_SEC * 1e3;
	int n = 0;

	for (;;) {
		int got = a->p->poll(a->cq, max - n, out + n);

		CHECK(got >= 0);
		n += got;
		if (n && out[n - 1].wr_id == last_id)
			return n;
		CHECK(n < max);
		if (now_ms() > deadline) {
			fprintf(stderr, "verbs_smoke: FAIL: no CQE for wr_id %llu after %d s (%d seen)\n",
				(unsigned long long)last_id, WAIT_SEC, n);
			exit(1);
		}
		if (!got)
			sched_yield();
	}
}

/*
 * n WRs of 64 KiB over the 1 MiB buffers (wrapping), every SIGNAL_EVERY-th
 * signalled, and the last one too unless more follow (last_signalled 0).
 */
static void post_bulk(struct pair *pr, int op, uint64_t id0, int n, int last_signalled)
{
	struct nic_wr wr[4 * NWR];
	struct nic_wr *bad = NULL;

	CHECK(n > 0 && n <= 4 * NWR);
	for (int i = 0; i < n; i++) {
		uint64_t off = (uint64_t)(i % NWR) * WR_LEN;

		wr[i] = (struct nic_wr){
			.next = &wr[i + 1],
			.wr_id = id0 + (uint64_t)i,
			.local = (uintptr_t)pr->a->buf + off,
			.remote = (uintptr_t)pr->b->buf + off,
			.len = WR_LEN,
			.lkey = pr->a->mr.lkey,
			.rkey = pr->b->mr.rkey,
			.op = (uint8_t)op,
			.signaled = i % SIGNAL_EVERY == SIGNAL_EVERY - 1,
		};
	}
	wr[n - 1].signaled = (uint8_t)last_signalled;
	wr[n - 1].next = NULL;
	CHECK(pr->a->p->post(pr->qa, wr, &bad) == 0);
}

static void check_bulk_cqes(struct pair *pr, const struct nic_wc *wc, int n, uint64_t id0,
			    int op)
{
	uint32_t qpn = pr->a->p->qp_num(pr->qa);

	CHECK(n == NWR / SIGNAL_EVERY);
	for (int i = 0; i < n; i++) {
		CHECK(wc[i].status == NIC_WC_SUCCESS);
		CHECK(wc[i].op == op);
		CHECK(wc[i].qp_num == qpn);
		CHECK(wc[i].wr_id == id0 + (uint64_t)(i + 1) * SIGNAL_EVERY - 1);
	}
}

static void test_write(struct pair *pr)
{
	struct nic_wc wc[64];
	double t0 = now_ms();
	int n;

	fill(pr->a->buf, BUF_LEN, 1);
	memset(pr->b->buf, 0, BUF_LEN);
	post_bulk(pr, NIC_OP_WRITE, 1000, NWR, 1);
	n = wait_for(pr->a, 1000 + NWR - 1, wc, 64);
	check_bulk_cqes(pr, wc, n, 1000, NIC_OP_WRITE);
	CHECK(memcmp(pr->a->buf, pr->b->buf, BUF_LEN) == 0);
	printf("verbs_smoke: WRITE %u KiB %s -> %s in %d WRs of %u KiB, %d signalled: verified (%.1f ms)\n",
	       BUF_LEN >> 10, pr->a->name, pr->b->name, NWR, WR_LEN >> 10, n, now_ms() - t0);
}

static void test_read(struct pair *pr)
{
	struct nic_wc wc[64];
	double t0 = now_ms();
	int n;

	fill(pr->b->buf, BUF_LEN, 2);
	memset(pr->a->buf, 0, BUF_LEN);
	post_bulk(pr, NIC_OP_READ, 2000, NWR, 1);
	n = wait_for(pr->a, 2000 + NWR - 1, wc, 64);
	check_bulk_cqes(pr, wc, n, 2000, NIC_OP_READ);
	CHECK(memcmp(pr->a->buf, pr->b->buf, BUF_LEN) == 0);
	printf("verbs_smoke: READ  %u KiB %s <- %s in %d WRs of %u KiB, %d signalled: verified (%.1f ms)\n",
	       BUF_LEN >> 10, pr->a->name, pr->b->name, NWR, WR_LEN >> 10, n, now_ms() - t0);
}

/* A small WRITE (inline when the QP allows it), then a zero-length one. */
static void test_small_and_empty(struct pair *pr)
{
	struct nic_wr w[2] = {
		{ .next = &w[1], .wr_id = 3000, .local = (uintptr_t)pr->a->buf,
		  .remote = (uintptr_t)pr->b->buf + 100, .len = 48, .lkey = pr->a->mr.lkey,
		  .rkey = pr->b->mr.rkey, .op = NIC_OP_WRITE, .signaled = 1 },
		{ .wr_id = 3001, .op = NIC_OP_WRITE, .signaled = 1 }, /* a drain marker */
	};
	struct nic_wr *bad = NULL;
	struct nic_wc wc[8];
	int n;

	fill(pr->a->buf, 48, 3);
	memset(pr->b->buf, 0, 256);
	CHECK(pr->a->p->post(pr->qa, w, &bad) == 0);
	n = wait_for(pr->a, 3001, wc, 8);
	CHECK(n == 2 && wc[0].wr_id == 3000);
	CHECK(wc[0].status == NIC_WC_SUCCESS && wc[1].status == NIC_WC_SUCCESS);
	CHECK(memcmp(pr->a->buf, pr->b->buf + 100, 48) == 0);
	printf("verbs_smoke: 48-byte WRITE + zero-length WRITE: both completed, data verified\n");
}

/* Sleep on the completion channel instead of spinning. */
static void test_channel(struct pair *pr)
{
	struct side *a = pr->a;
	struct nic_wr w = { .wr_id = 4000, .local = (uintptr_t)a->buf,
			    .remote = (uintptr_t)pr->b->buf, .len = WR_LEN, .lkey = a->mr.lkey,
			    .rkey = pr->b->mr.rkey, .op = NIC_OP_WRITE, .signaled = 1 };
	struct pollfd pfd = { .fd = a->p->cq_fd(a->cq), .events = POLLIN };
	struct nic_wr *bad = NULL;
	struct nic_wc wc[4];
	int n;

	CHECK(pfd.fd >= 0);
	CHECK(a->p->cq_arm(a->cq) == 0);
	CHECK(a->p->post(pr->qa, &w, &bad) == 0);
	CHECK(poll(&pfd, 1, WAIT_SEC * 1000) == 1);
	a->p->cq_ack(a->cq);
	a->p->cq_ack(a->cq); /* nothing left: must not block */
	n = wait_for(a, 4000, wc, 4);
	CHECK(n == 1 && wc[0].status == NIC_WC_SUCCESS);
	printf("verbs_smoke: completion channel: armed, fd readable, events acked, CQE polled\n");
}

/*
 * Move a busy QP to the error state: every WR not yet executed completes
 * FLUSH_ERR, signalled or not, and so do WRs posted after the transition.
 */
static void test_flush(struct pair *pr)
{
	const int nb = 4 * NWR; /* 4 MiB: still in flight when the QP fails */
	struct nic_wr late[2] = {
		{ .next = &late[1], .wr_id = 5000 + (uint64_t)nb, .op = NIC_OP_WRITE },
		{ .wr_id = 5000 + (uint64_t)nb + 1, .op = NIC_OP_WRITE, .signaled = 1 },
	};
	struct nic_wr *bad = NULL;
	struct nic_wc wc[4 * NWR + 8];
	int n, first_flush = -1, ok = 0, unsig = 0;

	post_bulk(pr, NIC_OP_WRITE, 5000, nb, 0);
	CHECK(pr->a->p->qp_set_error(pr->qa) == 0);
	CHECK(pr->a->p->post(pr->qa, late, &bad) == 0);
	n = wait_for(pr->a, 5000 + (uint64_t)nb + 1, wc, (int)(sizeof(wc) / sizeof(wc[0])));
	for (int i = 0; i < n; i++) {
		if (i)
			CHECK(wc[i].wr_id > wc[i - 1].wr_id); /* RC: in order */
		if (wc[i].status == NIC_WC_SUCCESS) {
			CHECK(first_flush < 0);
			ok++;
			continue;
		}
		CHECK(wc[i].status == NIC_WC_FLUSH_ERR);
		if (first_flush < 0)
			first_flush = i;
		/* From the first flushed WR on, every WR reports, signalled or not. */
		CHECK(wc[i].wr_id == wc[first_flush].wr_id + (uint64_t)(i - first_flush));
		if (wc[i].wr_id != 5000 + (uint64_t)nb + 1 &&
		    (wc[i].wr_id - 5000) % SIGNAL_EVERY != SIGNAL_EVERY - 1)
			unsig++;
	}
	CHECK(first_flush >= 0);
	printf("verbs_smoke: qp_set_error with %d WRs posted + 2 after: %d signalled successes, "
	       "then %d FLUSH_ERR in order (wr %llu..%llu, %d of them unsignalled)\n",
	       nb, ok, n - first_flush, (unsigned long long)wc[first_flush].wr_id,
	       (unsigned long long)wc[n - 1].wr_id, unsig);
}

/* A WRITE with a wrong rkey fails with REM_ACCESS_ERR. */
static void test_bad_rkey(struct side *a, struct side *b)
{
	struct pair pr;
	struct nic_wr w;
	struct nic_wr *bad = NULL;
	struct nic_wc wc[4];
	int n;

	pair_connect(&pr, a, b);
	w = (struct nic_wr){ .wr_id = 6000, .local = (uintptr_t)a->buf,
			     .remote = (uintptr_t)b->buf, .len = WR_LEN, .lkey = a->mr.lkey,
			     .rkey = b->mr.rkey ^ 0x5a5a00, .op = NIC_OP_WRITE, .signaled = 1 };
	CHECK(a->p->post(pr.qa, &w, &bad) == 0);
	n = wait_for(a, 6000, wc, 4);
	CHECK(n == 1 && wc[0].status == NIC_WC_REM_ACCESS_ERR);
	printf("verbs_smoke: WRITE with a wrong rkey: NIC_WC_REM_ACCESS_ERR\n");
	pair_destroy(&pr);
}

/*
 * A peer GID that nobody owns (the classic wrong-GID-index failure): either
 * the transition to RTR fails, with the provider naming both GIDs, or the
 * first WRITE exhausts its retries.
 */
static void test_wrong_gid(struct side *a, struct side *b, const char *gid4)
{
	struct nic_qp_info ib;
	struct nic_addr ab;
	struct fv_addr fa;
	struct nic_qp *qa, *qb;
	struct nic_wr w, *bad = NULL;
	struct nic_wc wc[4];
	double t0;
	int rc, n;

	CHECK(a->p->qp_create(a->nic, a->cq, QP_LEN, &qa) == 0);
	CHECK(b->p->qp_create(b->nic, b->cq, QP_LEN, &qb) == 0);
	b->p->qp_info(qb, &ib);
	b->p->addr(b->nic, &ab);
	CHECK(fv_addr_unpack(&ab, &fa) == 0);
	memset(fa.gid, 0, 10);
	fa.gid[10] = fa.gid[11] = 0xff;
	CHECK(sscanf(gid4, "%hhu.%hhu.%hhu.%hhu", &fa.gid[12], &fa.gid[13], &fa.gid[14],
		     &fa.gid[15]) == 4);
	fv_addr_pack(&fa, &ab);
	rc = a->p->qp_connect(qa, &ab, &ib);
	if (rc) {
		printf("verbs_smoke: peer GID ::ffff:%s: qp_connect refused (%s), logged\n", gid4,
		       strerror(-rc));
	} else {
		t0 = now_ms();
		w = (struct nic_wr){ .wr_id = 7000, .local = (uintptr_t)a->buf,
				     .remote = (uintptr_t)b->buf, .len = 4096, .lkey = a->mr.lkey,
				     .rkey = b->mr.rkey, .op = NIC_OP_WRITE, .signaled = 1 };
		CHECK(a->p->post(qa, &w, &bad) == 0);
		n = wait_for(a, 7000, wc, 4);
		CHECK(n == 1 && wc[0].status == NIC_WC_RETRY_EXC_ERR);
		printf("verbs_smoke: peer GID ::ffff:%s: connected, WRITE failed "
		       "NIC_WC_RETRY_EXC_ERR after %.0f ms\n", gid4, now_ms() - t0);
	}
	a->p->qp_destroy(qa);
	b->p->qp_destroy(qb);
}

/*
 * Read-only memory (a file mapped PROT_READ, MAP_PRIVATE): registered for remote READ
 * only, a peer READs it and it is the source of a local WRITE.
 */
static void test_readonly(struct side *a, struct side *b)
{
	char path[] = "/tmp/verbs_smoke_roXXXXXX";
	struct nic_wr w, *bad = NULL;
	struct nic_wc wc[4];
	struct nic_mr mr;
	struct pair ba, ab;
	uint8_t *ro;
	int fd, rc, n;

	fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	fill(b->buf, WR_LEN, 8);
	CHECK(write(fd, b->buf, WR_LEN) == (ssize_t)WR_LEN);
	ro = mmap(NULL, WR_LEN, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(ro != MAP_FAILED);
	rc = a->p->reg_mr(a->nic, ro, WR_LEN, NIC_ACCESS_REMOTE_READ, &mr);
	if (rc)
		fprintf(stderr, "verbs_smoke: FAIL: a read-only mapping: reg_mr %s\n", strerror(-rc));
	CHECK(rc == 0);
	/* The peer READs it. */
	pair_connect(&ba, b, a);
	memset(b->buf, 0, WR_LEN);
	w = (struct nic_wr){ .wr_id = 8000, .local = (uintptr_t)b->buf, .remote = (uintptr_t)ro,
			     .len = WR_LEN, .lkey = b->mr.lkey, .rkey = mr.rkey,
			     .op = NIC_OP_READ, .signaled = 1 };
	CHECK(b->p->post(ba.qa, &w, &bad) == 0);
	n = wait_for(b, 8000, wc, 4);
	CHECK(n == 1 && wc[0].status == NIC_WC_SUCCESS);
	CHECK(memcmp(b->buf, ro, WR_LEN) == 0);
	/* It is the source of our WRITE. */
	pair_connect(&ab, a, b);
	memset(b->buf, 0, WR_LEN);
	w = (struct nic_wr){ .wr_id = 8001, .local = (uintptr_t)ro, .remote = (uintptr_t)b->buf,
			     .len = WR_LEN, .lkey = mr.lkey, .rkey = b->mr.rkey,
			     .op = NIC_OP_WRITE, .signaled = 1 };
	CHECK(a->p->post(ab.qa, &w, &bad) == 0);
	n = wait_for(a, 8001, wc, 4);
	CHECK(n == 1 && wc[0].status == NIC_WC_SUCCESS);
	CHECK(memcmp(b->buf, ro, WR_LEN) == 0);
	pair_destroy(&ab);
	pair_destroy(&ba);
	CHECK(a->p->dereg_mr(a->nic, &mr) == 0);
	munmap(ro, WR_LEN);
	close(fd);
	printf("verbs_smoke: read-only mapping: registered for remote READ, READ by the peer "
	       "and WRITTEN from: verified\n");
}

/* A loop address is refused; close() frees what the caller left. */
static void test_misc(struct side *a)
{
	const struct nic_provider *lp = nic_provider_for("loop3");
	struct nic *ln, *vn;
	struct nic_cq *cq;
	struct nic_qp *qp;
	struct nic_qp_info info = { .qpn = 1 };
	struct nic_addr la;
	struct nic_mr mr;

	CHECK(lp == &nic_loop_provider);
	CHECK(nic_provider_for("") == NULL && nic_provider_for("mlx5_0:1") == &nic_verbs_provider);
	CHECK(lp->open("loop", &ln) == 0);
	lp->addr(ln, &la);
	CHECK(a->p->open(a->name, &vn) == 0);
	CHECK(a->p->cq_create(vn, 16, &cq) == 0);
	CHECK(a->p->qp_create(vn, cq, 8, &qp) == 0);
	CHECK(a->p->qp_connect(qp, &la, &info) == -EINVAL);
	CHECK(a->p->reg_mr(vn, a->buf, 4096, NIC_ACCESS_ALL, &mr) == 0);
	a->p->close(vn); /* QP, CQ, MR still there */
	lp->close(ln);
	printf("verbs_smoke: loop address refused; close() with a QP, CQ and MR left: clean\n");
}

static void test_discover(void)
{
	struct nic_dev_info d[8];
	int n = nic_verbs_discover(d, 8);

	CHECK(n >= 1);
	for (int i = 0; i < n; i++)
		printf("verbs_smoke: discover: %s port %u link %s MTU %u NUMA %d\n", d[i].name,
		       d[i].port, d[i].link_layer == 2 ? "Ethernet" : "IB", d[i].active_mtu,
		       d[i].numa_node);
}

int main(int argc, char **argv)
{
	struct side a = { 0 }, b = { 0 };
	struct pair pr;

	setvbuf(stdout, NULL, _IOLBF, 0);
	test_discover();
	side_open(&a, argc > 1 ? argv[1] : "rxe0");
	side_open(&b, argc > 2 ? argv[2] : "rxe1");
	pair_connect(&pr, &a, &b);
	test_write(&pr);
	test_read(&pr);
	test_channel(&pr);
	test_small_and_empty(&pr);
	test_flush(&pr);
	pair_destroy(&pr);
	test_bad_rkey(&a, &b);
	test_readonly(&a, &b);
	if (!getenv("FERRY_GID_INDEX")) {
		test_wrong_gid(&a, &b, "10.99.0.99");  /* on the subnet, no such host */
		test_wrong_gid(&a, &b, "192.0.2.1");   /* no route */
	}
	test_misc(&a);
	side_close(&a);
	side_close(&b);
	printf("verbs_smoke: all checks passed\n");
	return 0;
}
