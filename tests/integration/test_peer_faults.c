/* SPDX-License-Identifier: MIT */
/*
 * Faults of a peer in another process (tests/harness/target.h), on tcp and
 * cma:
 *
 *   tcp  the target is killed (SIGKILL) mid-transfer: every request ends
 *        (DONE, FAILED or TIMEOUT, with an error), later ones fail, and a
 *        target restarted on the same address is reached again after a
 *        reopen (a new handle; the old one stays dead);
 *   tcp  connections cut mid-stream (shutdown() of the initiator's data
 *        sockets, duplicated from /proc/self/fd with pidfd_getfd): one of
 *        an endpoint's two, then all; every request ends DONE, every byte
 *        checked, the broken QPs are replaced;
 *   tcp  a target that stops reading (SIGSTOP): requests end TIMEOUT or
 *        FAILED, nothing hangs; after SIGCONT the peer is used again;
 *   cma  the target exits (SIGKILL) mid-transfer: requests end FAILED with
 *        a reason, nothing hangs.
 *
 * Only conditions decide; the waits have generous deadlines, and how long
 * each fault took to surface is printed, not checked.
 */
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "tests/harness/target.h"

#define BUF (64u << 20)
#define NREQ 16

static struct target T;
static struct ferry_engine *E;
static struct ferry_port *port;
static uint8_t *lbuf; /* BUF bytes, registered */
static ferry_seg_t seg;

static void engine_up(const char *nics, unsigned timeout_ms, unsigned retries)
{
	struct ferry_opts o;

	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = nics;
	o.timeout_ms = timeout_ms;
	o.retries = retries;
	assert_int_equal(ferry_engine_create(&o, &E), 0);
	lbuf = aligned_alloc(4096, BUF);
	assert_non_null(lbuf);
	memset(lbuf, 0, BUF);
	assert_int_equal(ferry_mem_register(E, lbuf, BUF), 0);
	assert_int_equal(ferry_port_create(E, &port), 0);
}

static void engine_down(void)
{
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_mem_unregister(E, lbuf), 0);
	ferry_engine_destroy(E);
	free(lbuf);
}

static uint64_t stat_of(size_t field)
{
	struct ferry_core_stats st;

	assert_int_equal(ferry_core_stats(E, 0, &st), 0);
	return *(const uint64_t *)((const char *)&st + field);
}
#define STAT(f) stat_of(offsetof(struct ferry_core_stats, f))

static void *remote(uint64_t off)
{
	return (void *)(uintptr_t)(T.buf + off);
}

/* n requests of len bytes, op (or alternating if op < 0), spread over BUF. */
static void submit_n(struct ferry_batch *b, unsigned n, uint64_t len, int op, struct ferry_req *r)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t off = (i * len) % (BUF - len + 1);
		enum ferry_op o = op >= 0 ? (enum ferry_op)op : i & 1 ? FERRY_OP_WRITE : FERRY_OP_READ;

		r[i] = mkreq(o, lbuf + off, seg, remote(off), len);
	}
	assert_int_equal(ferry_submit(b, r, n), 0);
}

/* Every request of b has ended: DONE with all its bytes, or FAILED/TIMEOUT
 * with an error.  Returns how many did not succeed. */
static unsigned check_final(struct ferry_batch *b, const struct ferry_req *r, unsigned n,
			    const char *what)
{
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		if (st.state == FERRY_DONE) {
			assert_int_equal(st.bytes, r[i].len);
			continue;
		}
		assert_true(st.state == FERRY_FAILED || st.state == FERRY_TIMEOUT);
		assert_true(st.error < 0);
		if (!bad++ || i == n - 1)
			print_message("%s: request %u ended %s: %s\n", what, i,
				      st.state == FERRY_FAILED ? "FAILED" : "TIMEOUT",
				      strerror(-st.error));
	}
	return bad;
}

/* Wait for a batch: it must end (0 or -EIO) well within the deadline. */
static int wait_end(struct ferry_batch *b, const char *what)
{
	int64_t t0 = wait_now_ms();
	int rc = ferry_batch_wait(b, 120000);

	print_message("%s: the batch ended after %lld ms (rc %d)\n", what,
		      (long long)(wait_now_ms() - t0), rc);
	assert_true(rc == 0 || rc == -EIO);
	return rc;
}

/* One request, waited for; its status. */
static struct ferry_req_status run_one(struct ferry_req r)
{
	return run_one_on(port, r, 120000);
}

/* WRITE pattern seed over the whole target, check by its hash, READ it back. */
static void whole_round_trip(uint64_t seed)
{
	fill_pattern(lbuf, BUF, seed);
	assert_int_equal(run_one(mkreq(FERRY_OP_WRITE, lbuf, seg, remote(0), BUF)).state, FERRY_DONE);
	assert_true(target_hash(&T) == fnv1a(lbuf, BUF));
	memset(lbuf, 0, BUF);
	assert_int_equal(run_one(mkreq(FERRY_OP_READ, lbuf, seg, remote(0), BUF)).state, FERRY_DONE);
	assert_true(fnv1a(lbuf, BUF) == target_hash(&T));
}

/* -------------------------------------------------------- the peer dies */

static void peer_dies(const char *nics)
{
	struct ferry_req r[NREQ];
	struct ferry_batch *b;
	uint64_t posted;
	unsigned bad;

	assert_int_equal(target_start(&T, nics, "127.0.0.1:0", BUF, 1), 0);
	engine_up(nics, 2000, 9);
	assert_int_equal(ferry_segment_open(E, T.addr, &seg), 0);
	assert_string_equal(ferry_segment_transport(E, seg), nics);
	assert_int_equal(ferry_batch_create(port, NREQ, &b), 0);

	/* Mid-transfer: the core has posted work of this batch. */
	posted = STAT(wrs_posted);
	submit_n(b, NREQ, BUF, -1, r);
	WAIT_UNTIL(STAT(wrs_posted) > posted, WAIT_DEADLINE_MS, "the first WRs to be posted");
	target_kill(&T);
	wait_end(b, "killed mid-transfer");
	bad = check_final(b, r, NREQ, "killed mid-transfer");
	print_message("%u of %u requests did not complete\n", bad, NREQ);
	assert_int_equal(ferry_batch_reset(b), 0);

	/* The peer is gone: every new request fails, none hangs. */
	submit_n(b, 4, 1 << 20, -1, r);
	assert_int_equal(wait_end(b, "after the kill"), -EIO);
	assert_int_equal(check_final(b, r, 4, "after the kill"), 4);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_segment_close(E, seg), 0);
	engine_down();
}

static void test_tcp_peer_killed(void **state)
{
	(void)state;
	peer_dies("tcp");
}

static void test_cma_peer_exits(void **state)
{
	(void)state;
	peer_dies("cma");
}

/* Killed, then restarted on the same address: a reopen reaches it. */
static void test_tcp_peer_restarted(void **state)
{
	struct ferry_req_status st;
	ferry_seg_t old;
	char addr[64];

	(void)state;
	assert_int_equal(target_start(&T, "tcp", "127.0.0.1:0", BUF, 1), 0);
	engine_up("tcp", 2000, 9);
	assert_int_equal(ferry_segment_open(E, T.addr, &seg), 0);
	whole_round_trip(10);
	snprintf(addr, sizeof(addr), "%s", T.addr);
	target_kill(&T);
	st = run_one(mkreq(FERRY_OP_READ, lbuf, seg, remote(0), 4096));
	assert_int_not_equal(st.state, FERRY_DONE);

	/* Same address (SO_REUSEADDR: the old port is free at once). */
	assert_int_equal(target_start(&T, "tcp", addr, BUF, 2), 0);
	assert_string_equal(T.addr, addr);
	old = seg;
	assert_int_equal(ferry_segment_open(E, addr, &seg), 0);
	assert_true(seg != old);
	assert_string_equal(ferry_segment_transport(E, seg), "tcp");
	/* The new incarnation's bytes, then a full round trip. */
	memset(lbuf, 0, BUF);
	assert_int_equal(run_one(mkreq(FERRY_OP_READ, lbuf, seg, remote(0), BUF)).state, FERRY_DONE);
	assert_true(fnv1a(lbuf, BUF) == target_hash(&T));
	whole_round_trip(11);
	/* The old handle stays dead. */
	st = run_one(mkreq(FERRY_OP_READ, lbuf, old, remote(0), 4096));
	assert_int_equal(st.state, FERRY_FAILED);
	print_message("old handle: %s\n", strerror(-st.error));
	ferry_segment_close(E, old);
	assert_int_equal(ferry_segment_close(E, seg), 0);
	target_stop(&T);
	engine_down();
}

/* ------------------------------------------------ connections cut */

/*
 * The harness reaches the initiator's sockets without racing the library,
 * which closes and opens them on its own threads: it takes its own
 * duplicate of each descriptor (pidfd_getfd: a new descriptor of the same
 * socket, whatever the library does to its number meanwhile) and works on
 * the duplicate only, with raw system calls (shutdown() acts on the socket,
 * so the library's descriptor sees the cut).  Raw calls also keep
 * ThreadSanitizer's descriptor bookkeeping out of it: nothing of the
 * library's memory is touched.
 */
static int sock_port(int fd, bool peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	if (syscall(peer ? SYS_getpeername : SYS_getsockname, fd, &a, &l) || a.sin_family != AF_INET)
		return -1;
	return ntohs(a.sin_port);
}

static bool is_tcp(int fd, int *listening)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) || v != IPPROTO_TCP)
		return false;
	l = sizeof(*listening);
	return syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_ACCEPTCONN, listening, &l) == 0;
}

/* Established: not one we cut, nor one its peer closed. */
static bool is_established(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);

	return syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
	       ti.tcpi_state == TCP_ESTABLISHED;
}

/*
 * The initiator's live data connections: established TCP sockets of this
 * process that it dialled (local port not one of its listeners) to a port
 * that is not the target's control port.  Up to max duplicates of them into dups (close
 * them with dups_close); how many.
 */
static unsigned data_sockets(int *dups, unsigned max)
{
	int listeners[64], nl = 0, ctl = atoi(strrchr(T.addr, ':') + 1);
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	unsigned n = 0;
	struct dirent *d;
	DIR *dir;

	assert_true(pidfd >= 0);
	for (int pass = 0; pass < 2; pass++) {
		dir = opendir("/proc/self/fd");
		assert_non_null(dir);
		while ((d = readdir(dir))) {
			int dup, lis = 0, lp, pp;
			bool keep = false;

			if (d->d_name[0] == '.' || atoi(d->d_name) == dirfd(dir))
				continue;
			dup = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(d->d_name), 0);
			if (dup < 0)
				continue; /* closed meanwhile */
			if (is_tcp(dup, &lis)) {
				lp = sock_port(dup, false);
				pp = sock_port(dup, true);
				if (pass == 0 && lis && nl < 64)
					listeners[nl++] = lp;
				if (pass == 1 && !lis && pp > 0 && pp != ctl && n < max &&
				    is_established(dup)) {
					keep = true;
					for (int i = 0; i < nl; i++)
						keep &= listeners[i] != lp;
				}
			}
			if (keep)
				dups[n++] = dup;
			else
				syscall(SYS_close, dup);
		}
		closedir(dir);
	}
	syscall(SYS_close, pidfd);
	return n;
}

static void dups_close(const int *dups, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		syscall(SYS_close, dups[i]);
}

static unsigned live_data_sockets(void)
{
	int fds[16];
	unsigned n = data_sockets(fds, 16);

	dups_close(fds, n);
	return n;
}

/* A round of NREQ requests of BUF/NREQ bytes, each to its own range; cut
 * cut_all ? every data connection : one, once the first WRs are out;
 * every request must end DONE, checked against the shadow. */
static void cut_round(struct ferry_batch *b, uint8_t *shadow, int op, bool cut_all, uint64_t seed)
{
	const uint64_t len = BUF / NREQ;
	struct ferry_req r[NREQ];
	uint64_t posted = STAT(wrs_posted);
	int fds[16];
	unsigned n;

	/* The cuts of the last round are repaired: both QPs connected again. */
	WAIT_UNTIL(live_data_sockets() == 2, WAIT_DEADLINE_MS,
		   "the endpoint's two connections (qps_per_ep) to be up");
	if (op == FERRY_OP_WRITE)
		fill_pattern(lbuf, BUF, seed);
	else
		poison(lbuf, shadow, BUF);
	submit_n(b, NREQ, len, op, r);
	WAIT_UNTIL(STAT(wrs_posted) > posted, WAIT_DEADLINE_MS, "the first WRs to be posted");
	n = data_sockets(fds, 16);
	assert_true(n >= 1);
	for (unsigned i = 0; i < (cut_all ? n : 1); i++)
		assert_int_equal(syscall(SYS_shutdown, fds[i], SHUT_RDWR), 0);
	dups_close(fds, n);
	print_message("cut %u of %u data connections\n", cut_all ? n : 1, n);
	assert_int_equal(wait_end(b, cut_all ? "all cut" : "one cut"), 0);
	assert_int_equal(check_final(b, r, NREQ, "cut"), 0);
	if (op == FERRY_OP_WRITE)
		memcpy(shadow, lbuf, BUF);
	else
		assert_memory_equal(lbuf, shadow, BUF);
	assert_true(target_hash(&T) == fnv1a(shadow, BUF));
	assert_int_equal(ferry_batch_reset(b), 0);
}

static void test_tcp_connections_cut(void **state)
{
	uint8_t *shadow = aligned_alloc(4096, BUF);
	struct ferry_batch *b;

	(void)state;
	assert_non_null(shadow);
	assert_int_equal(target_start(&T, "tcp", "127.0.0.1:0", BUF, 3), 0);
	fill_pattern(shadow, BUF, 3);
	engine_up("tcp", 5000, 9);
	assert_int_equal(ferry_segment_open(E, T.addr, &seg), 0);
	assert_int_equal(ferry_batch_create(port, NREQ, &b), 0);
	cut_round(b, shadow, FERRY_OP_WRITE, false, 20);
	cut_round(b, shadow, FERRY_OP_READ, false, 0);
	cut_round(b, shadow, FERRY_OP_WRITE, true, 21);
	cut_round(b, shadow, FERRY_OP_READ, true, 0);
	/* Every cut connection broke its QP; the repair thread replaced them. */
	WAIT_UNTIL(STAT(qp_resets) >= 2, WAIT_DEADLINE_MS, "the broken QPs to be replaced");
	print_message("qp_resets %llu, retries %llu, wr_errors %llu\n",
		      (unsigned long long)STAT(qp_resets), (unsigned long long)STAT(retries),
		      (unsigned long long)STAT(wr_errors));
	/* And the endpoint works on new connections. */
	cut_round(b, shadow, FERRY_OP_WRITE, false, 22);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_segment_close(E, seg), 0);
	target_stop(&T);
	engine_down();
	free(shadow);
}

/* ------------------------------------------- a peer that stops reading */

static bool probe_done(void)
{
	return run_one(mkreq(FERRY_OP_READ, lbuf, seg, remote(0), 4096)).state == FERRY_DONE;
}

static void test_tcp_peer_stops_reading(void **state)
{
	struct ferry_req r[NREQ];
	struct ferry_batch *b;
	uint64_t posted;
	unsigned bad;

	(void)state;
	assert_int_equal(target_start(&T, "tcp", "127.0.0.1:0", BUF, 4), 0);
	engine_up("tcp", 1000, 2);
	assert_int_equal(ferry_segment_open(E, T.addr, &seg), 0);
	assert_int_equal(ferry_batch_create(port, NREQ, &b), 0);
	/* Stopped mid-transfer: 16 x 64 MiB of WRITEs, far more than the
	 * sockets hold; every request ends, whatever it is. */
	posted = STAT(wrs_posted);
	submit_n(b, NREQ, BUF, FERRY_OP_WRITE, r);
	WAIT_UNTIL(STAT(wrs_posted) > posted, WAIT_DEADLINE_MS, "the first WRs to be posted");
	assert_int_equal(kill(T.pid, SIGSTOP), 0);
	wait_end(b, "target stopped mid-transfer");
	bad = check_final(b, r, NREQ, "target stopped mid-transfer");
	print_message("%u of %u requests did not complete\n", bad, NREQ);
	assert_int_equal(ferry_batch_reset(b), 0);
	/* While it stays stopped, no WRITE can be acknowledged: all time out
	 * or fail, and the wait returns. */
	submit_n(b, NREQ, BUF, FERRY_OP_WRITE, r);
	assert_int_equal(wait_end(b, "target stopped"), -EIO);
	assert_int_equal(check_final(b, r, NREQ, "target stopped"), NREQ);
	assert_int_equal(ferry_batch_reset(b), 0);
	/* A READ too. */
	assert_int_not_equal(run_one(mkreq(FERRY_OP_READ, lbuf, seg, remote(0), 4096)).state,
			     FERRY_DONE);

	assert_int_equal(kill(T.pid, SIGCONT), 0);
	WAIT_UNTIL(probe_done(), 60000, "the continued target to answer again");
	whole_round_trip(30);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_segment_close(E, seg), 0);
	target_stop(&T);
	engine_down();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_peer_killed),
		cmocka_unit_test(test_tcp_peer_restarted),
		cmocka_unit_test(test_tcp_connections_cut),
		cmocka_unit_test(test_tcp_peer_stops_reading),
		cmocka_unit_test(test_cma_peer_exits),
	};

	target_main_if(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
