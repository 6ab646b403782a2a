/* SPDX-License-Identifier: MIT */
/*
 * Engines of a cluster, on the software NIC:
 *  - the cluster key (secret_file): the same key both sides opens and moves
 *    bytes; another key, no key on the initiator, or a key on the
 *    initiator only are refused -EACCES, and the target hands out nothing
 *    (no responder QP, no descriptor served); a key file readable by
 *    others or too short stops the engine at create;
 *  - one CONNECT_REQ per endpoint, over one kept connection: opening a
 *    2-core initiator with 4 QPs per endpoint costs the target one
 *    GET_DESC and two CONNECT_REQs, the initiator one dial;
 *  - no engine lock across a round trip: an open stuck on a peer that never
 *    answers does not hold up the open of another peer; engine destroy
 *    ends the stuck open (-ECANCELED);
 *  - opens of the same address at once share one segment, each counted;
 *  - an open that checked an open segment against its peer just before
 *    the peer restarted does not take that old answer for news about the
 *    segment a later open made to the new incarnation.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "tests/harness/harness.h"
#include "tests/harness/proxy.h"

#define BUF (1u << 20)

static char keydir[] = "/tmp/ferry-cluster-XXXXXX";
static char key_a[64], key_b[64], key_open[64], key_short[64];

static void write_key(char *path, const char *name, const char *content, mode_t mode)
{
	int fd;

	snprintf(path, 64, "%s/%s", keydir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int keys_setup(void **state)
{
	(void)state;
	if (!mkdtemp(keydir))
		return -1;
	write_key(key_a, "a", "c2VjcmV0IGNsdXN0ZXIga2V5IG9mIGZlcnJ5LCBjbHVzdGVyIEE=\n", 0600);
	write_key(key_b, "b", "c2VjcmV0IGNsdXN0ZXIga2V5IG9mIGZlcnJ5LCBjbHVzdGVyIEI=\n", 0600);
	write_key(key_open, "open", "c2VjcmV0IGNsdXN0ZXIga2V5IG9mIGZlcnJ5LCBjbHVzdGVyIEE=\n", 0644);
	write_key(key_short, "short", "too short\n", 0600);
	return 0;
}

static int keys_teardown(void **state)
{
	(void)state;
	unlink(key_a);
	unlink(key_b);
	unlink(key_open);
	unlink(key_short);
	rmdir(keydir);
	return 0;
}

static struct ferry_engine *engine(const char *cores, const char *secret, uint32_t qps)
{
	struct ferry_engine *e;
	struct ferry_opts o;

	pair_opts(&o, cores);
	o.keepalive_ms = 0; /* the counts of requests below are the opens' alone */
	o.secret_file = secret;
	if (qps)
		o.qps_per_ep = qps;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	return e;
}

static int try_open(struct ferry_engine *init, struct ferry_engine *t, ferry_seg_t *seg)
{
	return ferry_segment_open(init, ferry_engine_address(t), seg);
}

/* WRITE a pattern into the target, READ it back. */
static void move_bytes(struct ferry_engine *init, ferry_seg_t seg, uint8_t *lbuf, uint8_t *rbuf)
{
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_req r;

	fill_pattern(lbuf, BUF, 7);
	assert_int_equal(ferry_port_create(init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	r = mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, BUF);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, 10000), 0);
	assert_memory_equal(lbuf, rbuf, BUF);
	ferry_batch_destroy(b);
	ferry_port_destroy(port);
}

static void test_cluster_key(void **state)
{
	struct ferry_engine *t = engine("0", key_a, 0), *plain = engine("0", NULL, 0), *init, *e;
	uint8_t *lbuf = aligned_alloc(4096, BUF), *rbuf = aligned_alloc(4096, BUF);
	struct ferry_opts o;
	ferry_seg_t seg;
	uint64_t served;

	(void)state;
	assert_int_equal(ferry_mem_register(t, rbuf, BUF), 0);
	/* The same key: open, and the bytes move. */
	init = engine("1", key_a, 0);
	assert_int_equal(ferry_mem_register(init, lbuf, BUF), 0);
	assert_int_equal(try_open(init, t, &seg), 0);
	move_bytes(init, seg, lbuf, rbuf);
	assert_int_equal(ferry_segment_close(init, seg), 0);
	/* A key on the initiator only. */
	assert_int_equal(try_open(init, plain, &seg), -EACCES);
	assert_int_equal(READ_ONCE(plain->ctl.denied), 1);
	assert_int_equal(READ_ONCE(plain->ctl.served), 0);
	ferry_mem_unregister(init, lbuf);
	ferry_engine_destroy(init);
	/* Another key; no key.  Nothing served, no QP made. */
	served = READ_ONCE(t->ctl.served);
	init = engine("1", key_b, 0);
	assert_int_equal(try_open(init, t, &seg), -EACCES);
	ferry_engine_destroy(init);
	init = engine("1", NULL, 0);
	assert_int_equal(try_open(init, t, &seg), -EACCES);
	ferry_engine_destroy(init);
	WAIT_UNTIL(READ_ONCE(t->ctl.denied) == 2, WAIT_DEADLINE_MS, "two refusals");
	assert_int_equal(READ_ONCE(t->ctl.served), served);
	assert_int_equal(passive_count(t), 0);
	/* Key files that stop an engine. */
	pair_opts(&o, "1");
	o.secret_file = key_open;
	assert_int_equal(ferry_engine_create(&o, &e), -EPERM);
	o.secret_file = key_short;
	assert_int_equal(ferry_engine_create(&o, &e), -EINVAL);
	o.secret_file = "/nonexistent/ferry.key";
	assert_int_equal(ferry_engine_create(&o, &e), -ENOENT);
	ferry_mem_unregister(t, rbuf);
	ferry_engine_destroy(t);
	ferry_engine_destroy(plain);
	free(lbuf);
	free(rbuf);
}

/* One CONNECT_REQ per endpoint (all its QPs), one kept connection. */
static void test_one_connect_per_endpoint(void **state)
{
	struct ferry_engine *t = engine("0", NULL, 0), *init = engine("0-1", NULL, 4);
	ferry_seg_t seg;

	(void)state;
	assert_int_equal(try_open(init, t, &seg), 0);
	WAIT_UNTIL(READ_ONCE(t->ctl.served) == 3, WAIT_DEADLINE_MS, "GET_DESC and 2 CONNECT_REQs");
	assert_int_equal(passive_count(t), 8); /* 2 endpoints x 4 QPs */
	assert_int_equal(READ_ONCE(init->client.dials), 1);
	assert_int_equal(READ_ONCE(t->ctl.n_conns), 1);
	/* Closing frees each QP's half by its own token. */
	assert_int_equal(ferry_segment_close(init, seg), 0);
	assert_int_equal(passive_count(t), 0);
	assert_int_equal(READ_ONCE(init->client.dials), 1);
	ferry_engine_destroy(init);
	ferry_engine_destroy(t);
}

/* A peer whose kernel accepts connections that nobody ever answers. */
static int mute_peer(char *address, size_t len)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	snprintf(address, len, "127.0.0.1:%u", ntohs(sin.sin_port));
	return fd;
}

struct opener {
	struct ferry_engine *e;
	const char *address;
	ferry_seg_t seg;
	int rc;
	int done; /* atomic */
};

static void *do_open(void *arg)
{
	struct opener *o = arg;

	o->rc = ferry_segment_open(o->e, o->address, &o->seg);
	__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_open_does_not_wait_for_another(void **state)
{
	struct ferry_engine *t = engine("0", NULL, 0), *init = engine("1", NULL, 0);
	struct opener stuck = { .e = init };
	char mute[64];
	ferry_seg_t seg;
	pthread_t th;
	int lfd, fd;

	(void)state;
	lfd = mute_peer(mute, sizeof(mute));
	stuck.address = mute;
	assert_int_equal(pthread_create(&th, NULL, do_open, &stuck), 0);
	fd = accept(lfd, NULL, NULL); /* the stuck open is waiting on its peer now */
	assert_true(fd >= 0);
	assert_int_equal(try_open(init, t, &seg), 0);
	assert_int_equal(__atomic_load_n(&stuck.done, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(ferry_segment_close(init, seg), 0);
	/* Destroy ends the stuck open, which undoes its reservation. */
	ferry_engine_destroy(init);
	pthread_join(th, NULL);
	assert_int_equal(stuck.rc, -ECANCELED);
	close(fd);
	close(lfd);
	assert_int_equal(passive_count(t), 0);
	ferry_engine_destroy(t);
}

static void test_same_address_at_once(void **state)
{
	struct ferry_engine *t = engine("0", NULL, 0), *init = engine("1", NULL, 0);
	struct opener o[8];
	pthread_t th[8];

	(void)state;
	for (int i = 0; i < 8; i++) {
		o[i] = (struct opener){ .e = init, .address = ferry_engine_address(t) };
		assert_int_equal(pthread_create(&th[i], NULL, do_open, &o[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(o[i].rc, 0);
		assert_int_equal(o[i].seg, o[0].seg);
	}
	assert_int_equal(passive_count(t), 2); /* one endpoint of 2 QPs */
	/* Eight opens, eight closes: the last one closes (the peer frees its QPs). */
	for (int i = 0; i < 7; i++)
		assert_int_equal(ferry_segment_close(init, o[i].seg), 0);
	assert_int_equal(passive_count(t), 2);
	assert_int_equal(ferry_segment_close(init, o[7].seg), 0);
	assert_int_equal(passive_count(t), 0);
	assert_int_equal(ferry_segment_close(init, o[0].seg), -ENOENT);
	ferry_engine_destroy(init);
	ferry_engine_destroy(t);
}

/*
 * An open of an address open already fetches the peer's descriptor
 * without the engine lock.  Here that fetch is answered by the old
 * incarnation (t1), whose reply the relay in front of it holds; t1 then
 * "restarts" as t2 on the same address (the relay now leads there), and
 * another open sees the restart: the old handle goes stale, a new one is
 * made to t2.  Then the held reply arrives.  It says nothing about the new
 * segment, fetched before it existed: the late open must not mark it
 * stale (before, it compared t1's incarnation with t2's, marked the live
 * segment stale, its requests failing -ESTALE, and failed itself trying
 * to open t1's descriptor again).
 */
static void test_late_answer_beside_restart(void **state)
{
	struct ferry_engine *t1 = engine("0", NULL, 0), *t2 = engine("0", NULL, 0);
	struct ferry_engine *init = engine("1", NULL, 0);
	uint8_t *lbuf = aligned_alloc(4096, BUF), *rbuf = aligned_alloc(4096, BUF);
	struct ferry_req_status st;
	struct opener late = { .e = init };
	struct ferry_port *port;
	ferry_seg_t old, seg;
	struct proxy px;
	pthread_t th;

	(void)state;
	assert_int_equal(ferry_mem_register(init, lbuf, BUF), 0);
	assert_int_equal(ferry_mem_register(t1, rbuf, BUF), 0);
	assert_int_equal(ferry_mem_register(t2, rbuf, BUF), 0);
	assert_int_equal(ferry_port_create(init, &port), 0);
	proxy_start(&px, ferry_engine_address(t1));
	assert_int_equal(ferry_segment_open(init, px.addr, &old), 0);
	assert_int_equal(run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, old, rbuf, 4096), 10000).state,
			 FERRY_DONE);
	/* The late open's check: t1 answers, the answer waits in the relay. */
	proxy_hold(&px, ferry_engine_address(t1));
	late.address = px.addr;
	assert_int_equal(pthread_create(&th, NULL, do_open, &late), 0);
	WAIT_UNTIL(proxy_held(&px) == 1, WAIT_DEADLINE_MS, "t1's answer to the late open held");
	/* The peer restarts on the same address; an open sees it. */
	proxy_point(&px, ferry_engine_address(t2));
	ferry_engine_destroy(t1);
	assert_int_equal(ferry_segment_open(init, px.addr, &seg), 0);
	assert_true(seg != old);
	assert_refused(run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, old, rbuf, 4096), 10000),
		       -ESTALE);
	assert_int_equal(run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, 4096), 10000).state,
			 FERRY_DONE);
	/* The old answer arrives. */
	proxy_hold(&px, NULL);
	pthread_join(th, NULL);
	st = run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, 4096), 10000);
	print_message("late open: %d (%s), handle %s the new one; a WRITE to the new one: %s %d\n",
		      late.rc, strerror(-late.rc), late.seg == seg ? "is" : "is not",
		      ferry_state_name(st.state), st.error);
	assert_int_equal(st.state, FERRY_DONE);
	assert_int_equal(late.rc, 0);
	assert_true(late.seg == seg);
	assert_int_equal(ferry_segment_close(init, late.seg), 0);
	assert_int_equal(ferry_segment_close(init, seg), 0);
	assert_int_equal(ferry_segment_close(init, old), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	ferry_engine_destroy(init);
	ferry_engine_destroy(t2);
	proxy_stop(&px);
	free(lbuf);
	free(rbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cluster_key),
		cmocka_unit_test(test_one_connect_per_endpoint),
		cmocka_unit_test(test_open_does_not_wait_for_another),
		cmocka_unit_test(test_same_address_at_once),
		cmocka_unit_test(test_late_answer_beside_restart),
	};

	return cmocka_run_group_tests(tests, keys_setup, keys_teardown);
}
