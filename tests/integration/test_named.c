/* SPDX-License-Identifier: MIT */
/*
 * Named segments over a real metadata store (redis-server and etcd, started
 * by tests/harness/servers.h), engines on the software NIC "loop": opening a
 * peer by name, a name held by a live engine refused, a crashed engine's
 * record expiring and its successor's new incarnation making the old handle
 * stale (on a new address and on the same one), and the store killed and
 * restarted while transfers run.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/harness/pollwatch.h"
#include "tests/harness/proxy.h"
#include "tests/harness/servers.h"

#define LEN (256 * 1024)
/* Leases: short where a test waits for one to run out (etcd grants at
 * least ~2 s anyway), else long enough that a starved lease thread on a
 * loaded 2-CPU machine does not lose its record meanwhile. */
#define TTL_SHORT_MS 2000
#define TTL_MS 6000
#define NAME_DEADLINE_MS 20000

struct fixture {
	enum test_server_kind kind;
	struct test_server srv;
	int start_rc;
};

static struct fixture fx_redis = { .kind = SERVER_REDIS };
static struct fixture fx_etcd = { .kind = SERVER_ETCD };

/* ---- log capture: what the lease renewals say while the store is down ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned log_renewals; /* lines about failing renewals */

static void log_capture(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (strstr(msg, "lease renewal"))
		log_renewals++;
	pthread_mutex_unlock(&log_lock);
	fprintf(stderr, "ferry[%d]: %s\n", (int)level, msg);
}

static unsigned renewal_lines(void)
{
	unsigned n;

	pthread_mutex_lock(&log_lock);
	n = log_renewals;
	pthread_mutex_unlock(&log_lock);
	return n;
}

/* ---- engines ------------------------------------------------------------ */

struct node {
	struct ferry_engine *e;
	uint8_t *buf;
};

static int node_try_ttl(struct node *n, const char *name, const char *url, const char *listen,
			uint32_t ttl_ms)
{
	struct ferry_knobs k = { .meta_ttl_ms = ttl_ms };
	struct ferry_opts o;
	int rc;

	memset(n, 0, sizeof(*n));
	pair_opts(&o, "0");
	o.name = name;
	o.metadata = url;
	o.listen = listen;
	rc = ferry_engine_create_knobs(&o, &k, &n->e);
	if (rc)
		return rc;
	n->buf = aligned_alloc(4096, 2 * LEN);
	assert_non_null(n->buf);
	memset(n->buf, 0, 2 * LEN);
	assert_int_equal(ferry_mem_register(n->e, n->buf, 2 * LEN), 0);
	return 0;
}

static int node_try(struct node *n, const char *name, const char *url, const char *listen)
{
	return node_try_ttl(n, name, url, listen, TTL_MS);
}

static void node_create(struct node *n, const char *name, const char *url, const char *listen)
{
	assert_int_equal(node_try(n, name, url, listen), 0);
}

static void node_destroy(struct node *n)
{
	if (!n->e)
		return;
	assert_int_equal(ferry_mem_unregister(n->e, n->buf), 0);
	ferry_engine_destroy(n->e);
	free(n->buf);
	n->e = NULL;
}

/* One thread's way to move bytes: a port and a batch. */
struct mover {
	struct ferry_port *port;
	struct ferry_batch *b;
};

static void mover_init(struct mover *m, struct node *from)
{
	assert_int_equal(ferry_port_create(from->e, &m->port), 0);
	assert_int_equal(ferry_batch_create(m->port, 2, &m->b), 0);
}

static void mover_fini(struct mover *m)
{
	assert_int_equal(ferry_batch_destroy(m->b), 0);
	assert_int_equal(ferry_port_destroy(m->port), 0);
}

/* One request; 0 when it ended DONE, else its error. */
static int move(struct mover *m, enum ferry_op op, void *local, ferry_seg_t seg, void *remote)
{
	struct ferry_req r = mkreq(op, local, seg, remote, LEN);
	struct ferry_req_status st;
	int rc = ferry_submit(m->b, &r, 1);

	if (rc)
		return rc;
	ferry_batch_wait(m->b, WAIT_DEADLINE_MS);
	assert_int_equal(ferry_req_status(m->b, 0, &st), 0);
	assert_int_equal(ferry_batch_reset(m->b), 0);
	return st.state == FERRY_DONE ? 0 : st.error ? st.error : -EIO;
}

/* WRITE a pattern into the target, READ it back: 0 when every byte is right. */
static int roundtrip(struct mover *m, struct node *from, ferry_seg_t seg, struct node *to,
		     uint64_t seed)
{
	uint8_t *out = from->buf, *back = from->buf + LEN;
	int rc;

	fill_pattern(out, LEN, seed);
	poison(back, out, LEN);
	rc = move(m, FERRY_OP_WRITE, out, seg, to->buf);
	if (rc == 0)
		rc = move(m, FERRY_OP_READ, back, seg, to->buf);
	if (rc == 0 && memcmp(out, back, LEN) != 0)
		rc = -EBADMSG;
	return rc;
}

/* The store's answer for name, asked quietly (ferry_segment_open logs
 * every failure: a wait polls the store itself instead). */
static int store_lookup(struct fixture *f, const char *name)
{
	char v[META_VALUE_MAX];
	struct meta *q;
	int rc;

	assert_int_equal(meta_open(f->srv.url, &q), 0);
	rc = meta_resolve(q, name, v, sizeof(v), 10000);
	meta_close(q);
	return rc;
}

/* The same, for a wait: paced at 20 ms rather than WAIT_UNTIL's 1 ms. */
static int store_lookup_paced(struct fixture *f, const char *name)
{
	nanosleep(&(struct timespec){ 0, 20 * 1000000 }, NULL);
	return store_lookup(f, name);
}

/* ---- fixtures ----------------------------------------------------------- */

static int group_setup(void **state)
{
	(void)state;
	ferry_log_set(log_capture, NULL);
	fx_redis.start_rc = server_start(&fx_redis.srv, SERVER_REDIS);
	fx_etcd.start_rc = server_start(&fx_etcd.srv, SERVER_ETCD);
	fx_redis.srv.kind = SERVER_REDIS;
	fx_etcd.srv.kind = SERVER_ETCD;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	server_stop(&fx_redis.srv);
	server_stop(&fx_etcd.srv);
	ferry_log_set(NULL, NULL);
	return 0;
}

static struct fixture *fx(void **state)
{
	struct fixture *f = *state;

	SERVERS_REQUIRE(&f->srv, f->start_rc);
	if (!f->srv.pid) /* an earlier test failed while it was down */
		assert_int_equal(server_restart(&f->srv), 0);
	return f;
}

/* ---- tests -------------------------------------------------------------- */

static void test_open_by_name(void **state)
{
	struct fixture *f = fx(state);
	struct node tgt, init, p2p;
	ferry_seg_t seg, again;
	struct mover m;

	node_create(&tgt, "prefill-0", f->srv.url, NULL);
	node_create(&init, NULL, f->srv.url, NULL); /* resolves names, publishes none */
	assert_int_equal(ferry_segment_open(init.e, "prefill-0", &seg), 0);
	assert_string_equal(ferry_segment_transport(init.e, seg), "loop");
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, seg, &tgt, 1), 0);
	/* The lease thread renews the lease (every TTL_MS / 3): renewals
	 * that find the record in place, none that had to publish it again. */
	WAIT_UNTIL(READ_ONCE(tgt.e->named.renewed) >= 2, WAIT_DEADLINE_MS + 2 * TTL_MS,
		   "two lease renewals");
	assert_int_equal(READ_ONCE(tgt.e->named.republished), 0);
	assert_int_equal(store_lookup(f, "prefill-0"), 0);
	/* the same engine by name or by address: the same handle, once
	 * more to close for each open (below) */
	assert_int_equal(ferry_segment_open(init.e, "prefill-0", &again), 0);
	assert_true(again == seg);
	assert_int_equal(ferry_segment_open(init.e, ferry_engine_address(tgt.e), &again), 0);
	assert_true(again == seg);
	/* unknown names, host names without a port, non-names */
	assert_int_equal(ferry_segment_open(init.e, "decode-9", &again), -ENOENT);
	assert_int_equal(ferry_segment_open(init.e, "db1.example.com", &again), -ENOENT);
	assert_int_equal(ferry_segment_open(init.e, "a/b", &again), -EINVAL);
	assert_int_equal(ferry_segment_open(init.e, "", &again), -EINVAL);
	/* a name on an engine without a store */
	node_create(&p2p, NULL, "p2p", NULL);
	assert_int_equal(ferry_segment_open(p2p.e, "prefill-0", &again), -EINVAL);
	node_destroy(&p2p);
	mover_fini(&m);
	/* three opens, three closes: the first two leave it open */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ferry_segment_close(init.e, seg), 0);
		assert_string_equal(ferry_segment_transport(init.e, seg), "loop");
	}
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), -ENOENT);
	node_destroy(&init);
	node_destroy(&tgt);
}

static void test_same_name_refused(void **state)
{
	struct fixture *f = fx(state);
	struct node a, b, c;
	ferry_seg_t seg;

	node_create(&a, "kv-shard-1", f->srv.url, NULL);
	assert_int_equal(node_try(&b, "kv-shard-1", f->srv.url, NULL), -EEXIST);
	assert_null(b.e);
	/* a destroyed engine removes its record: the name is free at once */
	node_destroy(&a);
	node_create(&c, NULL, f->srv.url, NULL);
	assert_int_equal(ferry_segment_open(c.e, "kv-shard-1", &seg), -ENOENT);
	node_create(&b, "kv-shard-1", f->srv.url, NULL);
	assert_int_equal(ferry_segment_open(c.e, "kv-shard-1", &seg), 0);
	assert_int_equal(ferry_segment_close(c.e, seg), 0);
	node_destroy(&b);
	node_destroy(&c);
}

/* A request on a stale handle is refused with -ESTALE. */
static void assert_stale(struct mover *m, struct node *from, ferry_seg_t seg, struct node *to)
{
	assert_int_equal(move(m, FERRY_OP_READ, from->buf + LEN, seg, to->buf), -ESTALE);
}

/*
 * A named engine dies without removing its record (named_test_crash: no
 * renewals, and destroy leaves the record, as a killed process would).
 * While the record lives, opens by name fail clearly and the name cannot
 * be taken; once it expires the name is free, the successor (a new
 * incarnation) takes it, and an open by name reaches it and makes the old
 * handle stale.  same_addr: the successor listens where the dead one did
 * (the re-open path by address), else anywhere (the name path).
 */
static void crash_and_restart(struct fixture *f, bool same_addr)
{
	struct node tgt, init, other, next;
	char addr[64], taken[64];
	ferry_seg_t old, seg;
	struct mover m;
	int rc;

	assert_int_equal(node_try_ttl(&tgt, "decode-1", f->srv.url, NULL, TTL_SHORT_MS), 0);
	node_create(&init, NULL, f->srv.url, NULL);
	assert_int_equal(ferry_segment_open(init.e, "decode-1", &old), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, old, &tgt, 2), 0);
	snprintf(addr, sizeof(addr), "%s", ferry_engine_address(tgt.e));

	named_test_crash(tgt.e);
	node_destroy(&tgt);
	/* the record outlives the engine for a while: the open says it is gone */
	rc = ferry_segment_open(init.e, "decode-1", &seg);
	if (rc != -ECONNREFUSED && rc != -ENOENT) /* ENOENT: it expired already (slow host) */
		fail_msg("open of a dead engine's record: %d", rc);
	if (same_addr && rc == -ECONNREFUSED) {
		/* another engine on the dead one's address: the store's incarnation
		 * is not the one that answers there -- refused, not connected */
		node_create(&other, NULL, f->srv.url, addr);
		rc = ferry_segment_open(init.e, "decode-1", &seg);
		if (rc != -ESTALE && rc != -ENOENT)
			fail_msg("open with a mismatched incarnation: %d", rc);
		node_destroy(&other);
	}
	WAIT_UNTIL(store_lookup_paced(f, "decode-1") == -ENOENT, NAME_DEADLINE_MS,
		   "the dead engine's record to expire in %s", f->srv.url);
	assert_int_equal(ferry_segment_open(init.e, "decode-1", &seg), -ENOENT);
	/* the successor: a new incarnation under the same name */
	snprintf(taken, sizeof(taken), "%s", same_addr ? addr : "127.0.0.1:0");
	node_create(&next, "decode-1", f->srv.url, taken);
	assert_int_equal(ferry_segment_open(init.e, "decode-1", &seg), 0);
	assert_true(seg != old);
	assert_stale(&m, &init, old, &next);
	assert_int_equal(roundtrip(&m, &init, seg, &next, 3), 0);
	assert_int_equal(ferry_segment_close(init.e, old), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	mover_fini(&m);
	node_destroy(&init);
	node_destroy(&next);
}

static void test_crash_new_address(void **state)
{
	crash_and_restart(fx(state), false);
}

static void test_crash_same_address(void **state)
{
	crash_and_restart(fx(state), true);
}

/* Transfers in a loop on their own thread until told to stop. */
struct streamer {
	pthread_t thread;
	struct node *from, *to;
	ferry_seg_t seg;
	int stop;                      /* load_acquire/store_release */
	unsigned done, failed;         /* one writer (the thread): WRITE_ONCE/READ_ONCE */
	int last_err;
};

static void *stream_main(void *arg)
{
	struct streamer *s = arg;
	struct mover m;
	uint64_t seed = 100;

	mover_init(&m, s->from);
	while (!load_acquire(s->stop)) { /* pairs with: store_release in stream_stop */
		int rc = roundtrip(&m, s->from, s->seg, s->to, seed++);

		if (rc) {
			WRITE_ONCE(s->failed, s->failed + 1);
			s->last_err = rc;
		} else {
			WRITE_ONCE(s->done, s->done + 1);
		}
	}
	mover_fini(&m);
	return NULL;
}

static void stream_stop(struct streamer *s)
{
	store_release(s->stop, 1); /* pairs with: load_acquire in stream_main */
	pthread_join(s->thread, NULL);
}

/*
 * The store dies under running transfers: they go on (nothing on the data
 * path asks the store); opens by name fail clearly within their deadline;
 * the target's lease renewals fail quietly (a line or two, not one per
 * try); once the store is back, names resolve again (Redis lost its data:
 * the target's next renewal publishes the record again).
 */
static void test_store_down(void **state)
{
	struct fixture *f = fx(state);
	struct streamer s = { 0 };
	struct node tgt, init, late;
	unsigned lines, done_before;
	ferry_seg_t seg, again;
	int64_t t0;
	int max_ms, ran_out;
	int rc;

	node_create(&tgt, "prefill-7", f->srv.url, NULL);
	node_create(&init, NULL, f->srv.url, NULL);
	assert_int_equal(ferry_segment_open(init.e, "prefill-7", &seg), 0);
	s.from = &init;
	s.to = &tgt;
	s.seg = seg;
	assert_int_equal(pthread_create(&s.thread, NULL, stream_main, &s), 0);
	WAIT_UNTIL(READ_ONCE(s.done) >= 3, WAIT_DEADLINE_MS, "transfers to start");

	lines = renewal_lines();
	server_kill(&f->srv, SIGKILL);
	t0 = wait_now_ms();
	poll_watch();
	rc = ferry_segment_open(init.e, "prefill-7", &again);
	poll_watched(&max_ms, &ran_out);
	if (rc != -ECONNREFUSED && rc != -ECONNRESET)
		fail_msg("open by name with the store down: %d (%s)", rc, strerror(-rc));
	/* Failed on the refusal: it waited nothing out (its resolve's
	 * NAMED_RESOLVE_TIMEOUT_MS, say), and no wait was longer than that. */
	assert_int_equal(ran_out, 0);
	assert_true(max_ms <= NAMED_RESOLVE_TIMEOUT_MS);
	assert_int_equal(ferry_segment_open(init.e, "nobody", &again), -ECONNREFUSED);
	/* a name cannot be published meanwhile: create says why */
	assert_int_equal(node_try(&late, "prefill-8", f->srv.url, NULL), -ECONNREFUSED);
	assert_null(late.e);
	/* Down for several renewal tries (the first after at most TTL_MS / 3,
	 * then every 250 ms, doubling): they fail, transfers go on. */
	done_before = READ_ONCE(s.done);
	WAIT_UNTIL(READ_ONCE(s.done) >= done_before + 20 &&
		   READ_ONCE(tgt.e->named.failures) >= 4,
		   WAIT_DEADLINE_MS + 2 * TTL_MS, "renewals to fail with the store down");
	assert_true(renewal_lines() - lines >= 1); /* it said so */
	assert_true(renewal_lines() - lines <= 2); /* once, not per try */
	assert_int_equal(READ_ONCE(s.failed), 0);

	assert_int_equal(server_restart(&f->srv), 0);
	WAIT_UNTIL(store_lookup_paced(f, "prefill-7") == 0, NAME_DEADLINE_MS,
		   "the name to resolve again once %s is back", f->srv.url);
	assert_int_equal(ferry_segment_open(init.e, "prefill-7", &again), 0);
	assert_true(again == seg); /* the same engine: the same handle */
	stream_stop(&s);
	print_message("%s down for %lld ms: %u round trips done meanwhile, %u failed\n",
		      f->srv.url, (long long)(wait_now_ms() - t0), s.done - done_before, s.failed);
	assert_int_equal(s.failed, 0);
	assert_int_equal(ferry_segment_close(init.e, again), 0); /* two opens: two closes */
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	node_destroy(&init);
	node_destroy(&tgt);
}

/* ---- engine destroy beside an open by name still asking the store ---- */

/* A store (Redis's protocol) that answers its one GET "no such key" after 1 s. */
static void *slow_store_main(void *arg)
{
	int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
	char buf[4096];

	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf)) > 0) {
			usleep(1000 * 1000); /* within the open's 2 s */
			(void)!write(fd, "$-1\r\n", 5);
		}
		close(fd);
	}
	return NULL;
}

struct named_open {
	struct ferry_engine *e;
	int rc;
};

static void *named_open_main(void *arg)
{
	struct named_open *o = arg;
	ferry_seg_t seg;

	o->rc = ferry_segment_open(o->e, "somebody", &seg);
	return NULL;
}

/*
 * As test_slow_peers' test_destroy_beside_open, with the open by name and
 * still waiting for the store's answer: the destroy waits for it (an open
 * is counted from the store's lookup on).  Before, the destroy freed the
 * store's handle under the lookup (ASan: heap-use-after-free in hiredis;
 * found by an audit of the metadata store clients).
 */
static void test_destroy_beside_named_open(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	struct named_open o = { 0 };
	struct ferry_opts io;
	pthread_t store, th;
	char url[64];
	int lfd;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 8), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(pthread_create(&store, NULL, slow_store_main, &lfd), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", ntohs(a.sin_port));
	pair_opts(&io, "0");
	io.metadata = url; /* no name of its own: it only resolves */
	assert_int_equal(ferry_engine_create(&io, &o.e), 0);
	assert_int_equal(pthread_create(&th, NULL, named_open_main, &o), 0);
	usleep(300 * 1000); /* the GET is out, its answer 0.7 s away */
	ferry_engine_destroy(o.e);
	pthread_join(th, NULL);
	print_message("the open by name beside the destroy: %d\n", o.rc);
	assert_true(o.rc < 0); /* no such name, or cancelled */
	pthread_join(store, NULL);
	close(lfd);
}

/* ---- an old answer of the store beside a newer one ------------------- */

struct late_open {
	struct ferry_engine *e;
	const char *name;
	ferry_seg_t seg;
	int rc;
};

static void *late_open_main(void *arg)
{
	struct late_open *o = arg;

	o->rc = ferry_segment_open(o->e, o->name, &o->seg);
	return NULL;
}

/* The record an engine publishes, naming it at address (its own, or a relay's). */
static void record_of(struct ferry_engine *e, const char *address, char *v, size_t cap)
{
	struct meta_record r = { .incarnation = e->incarnation, .n_tx = 1, .tx = { "loop" } };

	snprintf(r.addr, sizeof(r.addr), "%s", address);
	assert_int_equal(meta_record_encode(&r, v, cap), 0);
}

/* The store names e at address under name, in place of any record
 * there (the test writes the records: the engines publish none). */
static void name_point_at(struct meta *q, const char *name, struct ferry_engine *e,
			  const char *address)
{
	char v[META_VALUE_MAX];

	(void)meta_remove(q, name, 10000);
	record_of(e, address, v, sizeof(v));
	assert_int_equal(meta_publish(q, name, v, TTL_MS, 10000), 0);
}

/* The same at e's own address. */
static void name_point(struct meta *q, const char *name, struct ferry_engine *e)
{
	name_point_at(q, name, e, ferry_engine_address(e));
}

/*
 * Two opens of one name on one engine, each with the store's answer of
 * its moment.  The first is told t1 (reached through a relay that holds
 * t1's answer to the descriptor fetch); the name then moves to t2 and the
 * second open, told so, opens t2.  Then the first open's fetch is answered
 * and its segment to t1 opens.  Its answer is the older one: it must not
 * make the segment to t2, the name's holder now, stale (before, it marked
 * every other incarnation under the name stale, t2's included, whose
 * requests then failed -ESTALE); the late open asks the store again and
 * gets the handle to t2.  The test writes the records itself (each engine
 * publishing none), so that the first names the relay.
 */
static void test_late_name_answer(void **state)
{
	struct fixture *f = fx(state);
	struct late_open late = { .name = "moving" };
	struct node t1, t2, init;
	struct meta *q;
	struct proxy px;
	struct mover m;
	ferry_seg_t seg;
	pthread_t th;
	int rc;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	node_create(&init, NULL, f->srv.url, NULL);
	proxy_start(&px, ferry_engine_address(t1.e));
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point_at(q, "moving", t1.e, px.addr);
	/* the first open: told t1, its descriptor fetch answered and held */
	proxy_hold(&px, ferry_engine_address(t1.e));
	late.e = init.e;
	assert_int_equal(pthread_create(&th, NULL, late_open_main, &late), 0);
	WAIT_UNTIL(proxy_held(&px) == 1, WAIT_DEADLINE_MS, "t1's answer to the first open held");
	/* the name moves to t2; the second open is told so */
	name_point(q, "moving", t2.e);
	assert_int_equal(ferry_segment_open(init.e, "moving", &seg), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, seg, &t2, 4), 0);
	/* the first open's answer arrives */
	proxy_hold(&px, NULL);
	pthread_join(th, NULL);
	rc = roundtrip(&m, &init, seg, &t2, 5);
	print_message("late open: %d, handle %s t2's; t2's handle after it: %d\n", late.rc,
		      late.rc == 0 && late.seg == seg ? "is" : "is not", rc);
	assert_int_equal(rc, 0);
	assert_int_equal(late.rc, 0);
	assert_true(late.seg == seg);
	assert_int_equal(ferry_segment_close(init.e, late.seg), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	mover_fini(&m);
	assert_int_equal(meta_remove(q, "moving", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t1);
	node_destroy(&t2);
	proxy_stop(&px);
}

/*
 * An open by name that reaches the address the store named while the
 * engine there restarts: the store's answer named the old incarnation,
 * the descriptor comes from the new one, which has published the name
 * meanwhile.  The name moved: the open asks the store again and reaches
 * the new incarnation (before, it failed -ESTALE though the store named
 * the engine that answered).  The relay stands for the shared address
 * (it leads to t2 throughout; "old" is t1's incarnation, t1 gone) and
 * holds t2's answer until the store names t2.
 */
static void test_restart_beside_named_open(void **state)
{
	struct fixture *f = fx(state);
	struct late_open late = { .name = "hop" };
	struct node t1, t2, init;
	struct meta *q;
	struct proxy px;
	struct mover m;
	pthread_t th;
	int rc;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	node_create(&init, NULL, f->srv.url, NULL);
	proxy_start(&px, ferry_engine_address(t2.e));
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point_at(q, "hop", t1.e, px.addr); /* t1's record, at the shared address */
	node_destroy(&t1);
	proxy_hold(&px, ferry_engine_address(t2.e));
	late.e = init.e;
	assert_int_equal(pthread_create(&th, NULL, late_open_main, &late), 0);
	WAIT_UNTIL(proxy_held(&px) == 1, WAIT_DEADLINE_MS, "t2's answer to the open held");
	/* t2 takes the name (t1's record removed, as its destroy would) */
	name_point_at(q, "hop", t2.e, px.addr);
	proxy_hold(&px, NULL);
	pthread_join(th, NULL);
	print_message("an open by name beside a restart on the address: %d\n", late.rc);
	assert_int_equal(late.rc, 0);
	mover_init(&m, &init);
	rc = roundtrip(&m, &init, late.seg, &t2, 6);
	assert_int_equal(rc, 0);
	mover_fini(&m);
	assert_int_equal(ferry_segment_close(init.e, late.seg), 0);
	assert_int_equal(meta_remove(q, "hop", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t2);
	proxy_stop(&px);
}

/*
 * As test_late_name_answer, with t1 opened by address (the relay's) before:
 * the first open by name finds that segment open, and its reopen check's
 * descriptor fetch is held while the name moves to t2 and is opened there.
 * The late open is undone (one open of the address segment closed again)
 * and asks the store again: it must leave the address segment as it was,
 * without the name.  Before, the name stayed on it, and the late open's
 * second try, reaching t2, marked the address segment to t1 stale (its
 * requests failed -ESTALE though t1 lives and it was opened by address).
 */
static void test_late_name_on_address_segment(void **state)
{
	struct fixture *f = fx(state);
	struct late_open late = { .name = "drifting" };
	struct node t1, t2, init;
	ferry_seg_t by_addr, seg;
	struct meta *q;
	struct proxy px;
	struct mover m;
	pthread_t th;
	int rc;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	node_create(&init, NULL, f->srv.url, NULL);
	proxy_start(&px, ferry_engine_address(t1.e));
	assert_int_equal(ferry_segment_open(init.e, px.addr, &by_addr), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, by_addr, &t1, 9), 0);
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point_at(q, "drifting", t1.e, px.addr);
	proxy_hold(&px, ferry_engine_address(t1.e));
	late.e = init.e;
	assert_int_equal(pthread_create(&th, NULL, late_open_main, &late), 0);
	WAIT_UNTIL(proxy_held(&px) == 1, WAIT_DEADLINE_MS, "t1's answer to the first open held");
	name_point(q, "drifting", t2.e);
	assert_int_equal(ferry_segment_open(init.e, "drifting", &seg), 0);
	proxy_hold(&px, NULL);
	pthread_join(th, NULL);
	assert_int_equal(late.rc, 0);
	assert_true(late.seg == seg);
	rc = roundtrip(&m, &init, by_addr, &t1, 10);
	print_message("the address segment after the late open by name: %d\n", rc);
	assert_int_equal(rc, 0);
	assert_int_equal(roundtrip(&m, &init, seg, &t2, 11), 0);
	mover_fini(&m);
	assert_int_equal(ferry_segment_close(init.e, late.seg), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	assert_int_equal(ferry_segment_close(init.e, by_addr), 0);
	assert_int_equal(ferry_segment_close(init.e, by_addr), -ENOENT); /* one open of it */
	assert_int_equal(meta_remove(q, "drifting", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t1);
	node_destroy(&t2);
	proxy_stop(&px);
}

/* ---- a handle made stale by its name moving, its engine alive ---------- */

/* init: resolves names only, one core, one endpoint per core (ep_cache 1). */
static void node_create_cache1(struct node *n, const char *url)
{
	struct ferry_opts o;

	memset(n, 0, sizeof(*n));
	pair_opts(&o, "0");
	o.metadata = url;
	o.ep_cache = 1;
	assert_int_equal(ferry_engine_create(&o, &n->e), 0);
	n->buf = aligned_alloc(4096, 2 * LEN);
	assert_non_null(n->buf);
	memset(n->buf, 0, 2 * LEN);
	assert_int_equal(ferry_mem_register(n->e, n->buf, 2 * LEN), 0);
}


/* A reconnect of old's evicted rail, as a parked request asks for one. */
static void reconnect_round(struct ferry_engine *e, struct ferry_seg *s)
{
	uint32_t round = load_acquire(s->connect_round);

	store_release(s->want_eps, 1);
	repair_kick(e);
	WAIT_UNTIL(load_acquire(s->connect_round) != round, WAIT_DEADLINE_MS,
		   "the repair thread's reconnect");
}

/*
 * The name moves from t1 to t2 and is opened again: the handle to t1 goes
 * stale, though t1 lives on at its address.  It stays stale: a refresh
 * fetches t1's descriptor (the same incarnation) and must not install it
 * and say 0 as if the handle were good again; the repair thread's
 * reconnect of its evicted endpoint must not connect one (nor take its
 * rail out of EP_STALE).  Before, the refresh returned 0 and the reconnect
 * published an endpoint to t1 with its rail marked up.  ep_cache 1: t2's
 * open evicts t1's endpoint.
 */
static void test_stale_by_name_stays_stale(void **state)
{
	struct fixture *f = fx(state);
	struct node t1, t2, init;
	ferry_seg_t old, seg;
	struct ferry_seg *s;
	struct ferry_ep *ep;
	struct meta *q;
	struct mover m;
	uint32_t slot;
	int down;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	node_create_cache1(&init, f->srv.url);
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point(q, "shifting", t1.e);
	assert_int_equal(ferry_segment_open(init.e, "shifting", &old), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, old, &t1, 7), 0);
	name_point(q, "shifting", t2.e);
	assert_int_equal(ferry_segment_open(init.e, "shifting", &seg), 0);
	assert_true(seg != old);
	assert_stale(&m, &init, old, &t1);
	s = seg_lookup(init.e, old, &slot);
	assert_non_null(s);
	assert_null(READ_ONCE(s->eps[0])); /* evicted by t2's open */

	assert_int_equal(ferry_segment_refresh(init.e, old), -ESTALE);
	reconnect_round(init.e, s);
	pthread_mutex_lock(&init.e->ctl_lock);
	ep = s->eps[0];
	down = s->rail_down[0];
	pthread_mutex_unlock(&init.e->ctl_lock);
	assert_null(ep);
	assert_int_equal(down, EP_STALE);
	assert_stale(&m, &init, old, &t1);
	assert_int_equal(roundtrip(&m, &init, seg, &t2, 8), 0);

	mover_fini(&m);
	assert_int_equal(ferry_segment_close(init.e, old), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	assert_int_equal(meta_remove(q, "shifting", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t1);
	node_destroy(&t2);
}

/*
 * The engine a segment was opened by name on goes away and its successor
 * takes the name on another address.  The repairs knock at the old
 * address (nothing listens: -EHOSTDOWN); the keepalive refused there has
 * the store asked again, which names another incarnation: the handle goes
 * stale, so the application learns to open the name again (-ESTALE), and
 * that open reaches the successor.  Before, the handle failed -EHOSTDOWN
 * for as long as it stayed open.  keepalive_ms 50: a round at once.
 */
static void test_name_moved_under_open_segment(void **state)
{
	struct fixture *f = fx(state);
	struct node t1, t2, init;
	ferry_seg_t old, seg;
	struct ferry_opts o;
	struct ferry_seg *s;
	struct meta *q;
	struct mover m;
	uint32_t slot;
	int rc;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	memset(&init, 0, sizeof(init));
	pair_opts(&o, "0");
	o.metadata = f->srv.url;
	o.keepalive_ms = 50;
	assert_int_equal(ferry_engine_create(&o, &init.e), 0);
	init.buf = aligned_alloc(4096, 2 * LEN);
	assert_non_null(init.buf);
	memset(init.buf, 0, 2 * LEN);
	assert_int_equal(ferry_mem_register(init.e, init.buf, 2 * LEN), 0);
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point(q, "roaming", t1.e);
	assert_int_equal(ferry_segment_open(init.e, "roaming", &old), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, old, &t1, 12), 0);
	s = seg_lookup(init.e, old, &slot);
	assert_non_null(s);

	node_destroy(&t1);
	name_point(q, "roaming", t2.e);
	WAIT_UNTIL(READ_ONCE(s->stale), WAIT_DEADLINE_MS, "the handle to the gone engine stale");
	rc = move(&m, FERRY_OP_READ, init.buf + LEN, old, t2.buf);
	assert_int_equal(rc, -ESTALE);
	assert_int_equal(ferry_segment_open(init.e, "roaming", &seg), 0);
	assert_true(seg != old);
	assert_int_equal(roundtrip(&m, &init, seg, &t2, 13), 0);

	mover_fini(&m);
	assert_int_equal(ferry_segment_close(init.e, old), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	assert_int_equal(meta_remove(q, "roaming", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t2);
}

/*
 * A repair of a QP of a segment opened by name is under way (its
 * handshake's answer held at the relay) when the name moves and the
 * segment goes stale, its engine alive.  The answer then arrives: the new
 * QP must not go in, nor the rail be taken out of EP_STALE.  Before,
 * repair_install replaced the QP and set rail_down back to 0.
 * keepalive_ms 0: nothing else of init's is held at the relay.
 */
static void test_repair_beside_stale_marking(void **state)
{
	struct loop_faults fatal = { .qp_fatal_ppm = 1000000, .seed = 3 };
	struct fixture *f = fx(state);
	struct node t1, t2, init;
	struct ferry_req r;
	ferry_seg_t old, seg;
	struct ferry_opts o;
	struct ferry_seg *s;
	struct meta *q;
	struct proxy px;
	struct mover m;
	unsigned base;
	uint32_t slot;

	node_create(&t1, NULL, "p2p", NULL);
	node_create(&t2, NULL, "p2p", NULL);
	memset(&init, 0, sizeof(init));
	pair_opts(&o, "0");
	o.metadata = f->srv.url;
	o.keepalive_ms = 0;
	assert_int_equal(ferry_engine_create(&o, &init.e), 0);
	init.buf = aligned_alloc(4096, 2 * LEN);
	assert_non_null(init.buf);
	memset(init.buf, 0, 2 * LEN);
	assert_int_equal(ferry_mem_register(init.e, init.buf, 2 * LEN), 0);
	proxy_start(&px, ferry_engine_address(t1.e));
	assert_int_equal(meta_open(f->srv.url, &q), 0);
	name_point_at(q, "wobbly", t1.e, px.addr);
	assert_int_equal(ferry_segment_open(init.e, "wobbly", &old), 0);
	mover_init(&m, &init);
	assert_int_equal(roundtrip(&m, &init, old, &t1, 14), 0);
	s = seg_lookup(init.e, old, &slot);
	assert_non_null(s);

	/* QPs break; their repairs' answers wait at the relay. */
	base = passive_count(t1.e);
	proxy_hold(&px, ferry_engine_address(t1.e));
	engine_set_faults(init.e, &fatal);
	r = mkreq(FERRY_OP_WRITE, init.buf, old, t1.buf, LEN);
	assert_int_equal(ferry_submit(m.b, &r, 1), 0);
	WAIT_UNTIL(proxy_held(&px) >= 1, WAIT_DEADLINE_MS, "a repair's answer held");
	engine_set_faults(init.e, NULL);
	/* The name moves: the segment to t1 goes stale. */
	name_point(q, "wobbly", t2.e);
	assert_int_equal(ferry_segment_open(init.e, "wobbly", &seg), 0);
	assert_int_equal(READ_ONCE(s->stale), 1);
	proxy_hold(&px, NULL);
	/* Landed: for each, one QP's half freed at t1 (the new one's, or the
	 * one it replaced). */
	WAIT_UNTIL(passive_count(t1.e) == base, WAIT_DEADLINE_MS, "the repairs to land");
	assert_int_equal(READ_ONCE(s->rail_down[0]), EP_STALE);
	ferry_batch_wait(m.b, WAIT_DEADLINE_MS);
	assert_int_equal(ferry_batch_reset(m.b), 0);
	assert_stale(&m, &init, old, &t1);

	mover_fini(&m);
	assert_int_equal(ferry_segment_close(init.e, old), 0);
	assert_int_equal(ferry_segment_close(init.e, seg), 0);
	assert_int_equal(meta_remove(q, "wobbly", 10000), 0);
	meta_close(q);
	node_destroy(&init);
	node_destroy(&t1);
	node_destroy(&t2);
	proxy_stop(&px);
}

#define BOTH(t) { "redis_" #t, t, NULL, NULL, &fx_redis }, { "etcd_" #t, t, NULL, NULL, &fx_etcd }

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_open_by_name),
		BOTH(test_same_name_refused),
		BOTH(test_crash_new_address),
		BOTH(test_crash_same_address),
		BOTH(test_store_down),
		cmocka_unit_test(test_destroy_beside_named_open),
		BOTH(test_late_name_answer),
		BOTH(test_restart_beside_named_open),
		BOTH(test_stale_by_name_stays_stale),
		BOTH(test_late_name_on_address_segment),
		BOTH(test_name_moved_under_open_segment),
		BOTH(test_repair_beside_stale_marking),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
