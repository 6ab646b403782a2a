/* SPDX-License-Identifier: MIT */
/*
 * Notifications (ferry_notify, ferry_notif_poll) between two engines in one
 * process, on the software NIC, tcp and cma:
 *  - ordering: the bytes of the WRITEs submitted before a notification are
 *    in the receiver's memory when it polls the notification (many rounds,
 *    several WRITEs each, checked before the sender waits for anything);
 *  - refusals: a message over FERRY_NOTIF_MAX (-EMSGSIZE), a bad segment
 *    (-EBADF), NULL message (-EINVAL), an earlier WRITE that failed (-EIO:
 *    the peer is not told), a full batch (-ENOSPC), a peer gone
 *    (-ECONNREFUSED); an empty message goes;
 *  - back-pressure: a receiver with a queue of 4 takes 4, answers the rest
 *    "full"; they stay pending at the sender and all arrive, once each,
 *    after the receiver polls;
 *  - many senders: threads of two engines, each with its own port, notify
 *    one receiver with a queue of 16 at once while two threads poll it;
 *    every notification arrives exactly once;
 *  - the cluster key: engines with the same key notify; a sender without
 *    the key, or with another, is refused and queues nothing;
 *  - from: a sender with a name (a redis-server the test starts) is named
 *    by it; ferry_batch_cancel ends a notification that waits for room; one
 *    that never gets room ends TIMEOUT after timeout_ms; the segment's last
 *    close neither waits for one that waits for room nor cancels it: it is
 *    delivered after the close;
 *  - in one exchange (ctl_notify_many) the receiver answers a notification
 *    -ENOMEM and queues the next: the next ends DONE, the first FAILED;
 *  - a receiver restarted at the same address (a new incarnation) refuses
 *    a notification on a segment opened to the one before (-ESTALE);
 *  - a mute peer (a target process stopped with SIGSTOP): the sends to it
 *    wait for their reply, and a notification to another peer, queued
 *    after them, arrives while they still wait.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/harness/servers.h"
#include "tests/harness/target.h"

#define BUF (1u << 20)
#define CHUNK (64u << 10)
#define WRITES 4

static struct ferry_engine *mk_engine(const char *cores, const char *nics, const char *secret,
				      uint32_t queue)
{
	struct ferry_knobs k = { .notif_queue = queue };
	struct ferry_engine *e;
	struct ferry_opts o;

	pair_opts(&o, cores);
	o.nics = nics;
	o.secret_file = secret;
	assert_int_equal(ferry_engine_create_knobs(&o, &k, &e), 0);
	return e;
}

struct duo {
	struct ferry_engine *snd, *rcv;
	uint8_t *lbuf, *rbuf;
	ferry_seg_t seg;
	struct ferry_port *port;
	struct ferry_batch *b;
};

/* Receiver on rcv_nics (core 1), sender on snd_nics (cores snd_cores). */
static void duo_up_on(struct duo *d, const char *snd_cores, const char *snd_nics,
		      const char *rcv_nics, const char *secret, uint32_t queue, uint32_t capacity)
{
	memset(d, 0, sizeof(*d));
	d->rcv = mk_engine("1", rcv_nics, secret, queue);
	d->snd = mk_engine(snd_cores, snd_nics, secret, 0);
	d->lbuf = aligned_alloc(4096, BUF);
	d->rbuf = aligned_alloc(4096, BUF);
	memset(d->rbuf, 0, BUF);
	assert_int_equal(ferry_mem_register(d->snd, d->lbuf, BUF), 0);
	assert_int_equal(ferry_mem_register(d->rcv, d->rbuf, BUF), 0);
	assert_int_equal(ferry_segment_open(d->snd, ferry_engine_address(d->rcv), &d->seg), 0);
	assert_int_equal(ferry_port_create(d->snd, &d->port), 0);
	assert_int_equal(ferry_batch_create(d->port, capacity, &d->b), 0);
}

static void duo_up(struct duo *d, const char *nics, const char *secret, uint32_t queue,
		   uint32_t capacity)
{
	duo_up_on(d, "0", nics, nics, secret, queue, capacity);
	assert_string_equal(ferry_segment_transport(d->snd, d->seg), nics);
}

static void duo_down(struct duo *d)
{
	assert_int_equal(ferry_batch_destroy(d->b), 0);
	assert_int_equal(ferry_port_destroy(d->port), 0);
	ferry_engine_destroy(d->snd);
	ferry_engine_destroy(d->rcv);
	free(d->lbuf);
	free(d->rbuf);
}

static void expect_state(struct ferry_batch *b, int slot, enum ferry_state state, int err)
{
	struct ferry_req_status st;

	assert_true(slot >= 0);
	assert_int_equal(ferry_req_status(b, (uint32_t)slot, &st), 0);
	assert_int_equal(st.state, state);
	assert_int_equal(st.error, err);
}

static enum ferry_state slot_state(struct ferry_batch *b, uint32_t slot)
{
	struct ferry_req_status st;

	assert_int_equal(ferry_req_status(b, slot, &st), 0);
	return st.state;
}

/* One notification, waited for (the receiver's queue has room). */
static void poll_one(struct ferry_engine *e, struct ferry_notif *n)
{
	WAIT_UNTIL(ferry_notif_poll(e, n, 1) == 1, WAIT_DEADLINE_MS, "a notification");
}

/* WRITEs, then a notification: when it is polled, the bytes are there.
 * d is up; nics names the run. */
static void ordering_on(struct duo *d0, const char *nics, unsigned rounds)
{
	struct ferry_notif n;
	struct duo d = *d0;

	for (unsigned r = 0; r < rounds; r++) {
		struct ferry_req reqs[WRITES];
		size_t off = (size_t)(r % (BUF / (WRITES * CHUNK))) * WRITES * CHUNK;
		uint32_t tag = r;

		fill_pattern(d.lbuf + off, WRITES * CHUNK, r + 1);
		for (unsigned i = 0; i < WRITES; i++)
			reqs[i] = mkreq(FERRY_OP_WRITE, d.lbuf + off + i * CHUNK, d.seg,
					d.rbuf + off + i * CHUNK, CHUNK);
		assert_int_equal(ferry_submit(d.b, reqs, WRITES), 0);
		assert_int_equal(ferry_notify(d.b, d.seg, &tag, sizeof(tag)), WRITES);
		poll_one(d.rcv, &n); /* nothing waited for on the sender's side */
		assert_memory_equal(d.rbuf + off, d.lbuf + off, WRITES * CHUNK);
		assert_int_equal(n.len, sizeof(tag));
		assert_memory_equal(n.msg, &tag, sizeof(tag));
		assert_string_equal(n.from, ferry_engine_address(d.snd));
		assert_int_equal(ferry_batch_wait(d.b, 10000), 0);
		expect_state(d.b, WRITES, FERRY_DONE, 0);
		assert_int_equal(ferry_batch_reset(d.b), 0);
	}
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	assert_int_equal(READ_ONCE(d.snd->notify.sent), rounds);
	/* Most rounds queued the notification while WRITEs were in flight. */
	print_message("%s: %llu of %u notifications waited for WRITEs (%llu of them seen "
		      "ended by the notifier's clock, not by a core's ring)\n", nics,
		      (unsigned long long)READ_ONCE(d.snd->notify.with_deps), rounds,
		      (unsigned long long)READ_ONCE(d.snd->notify.dep_late));
	assert_true(READ_ONCE(d.snd->notify.with_deps) > 0);
	/* The cores ring when a WRITE it waits for ends: the notifier does not
	 * find them ended on its own clock (without the ring, 104-200 of the
	 * rounds did; with it 0; a few would be a ring racing the clock). */
	assert_true(READ_ONCE(d.snd->notify.dep_late) * 10 <= rounds);
	duo_down(&d);
}

static void ordering(const char *nics, unsigned rounds)
{
	struct duo d;

	duo_up(&d, nics, NULL, 0, WRITES + 1);
	ordering_on(&d, nics, rounds);
}

static void test_order_loop(void **state)
{
	(void)state;
	ordering("loop", 300);
}

static void test_order_tcp(void **state)
{
	(void)state;
	ordering("tcp", 200);
}

static void test_order_cma(void **state)
{
	(void)state;
	ordering("cma", 200);
}

/*
 * FERRY_TEST_INIT_NICS / FERRY_TEST_TARGET_NICS (the verbs suite in the
 * Soft-RoCE VM names RDMA devices, make test-caller tcp and cma): the same
 * ordering over them, the sender's WRITEs striped over its two cores' rails
 * and QPs.  Unset, skipped; the verbs suite runs only this test.
 */
static void test_order_env(void **state)
{
	const char *in = getenv("FERRY_TEST_INIT_NICS"), *tn = getenv("FERRY_TEST_TARGET_NICS");
	const char *want;
	struct duo d;

	(void)state;
	if (!in || !tn)
		skip();
	want = !strcmp(in, "tcp") || !strcmp(in, "cma") ? in : "verbs";
	duo_up_on(&d, "0-1", in, tn, NULL, 0, WRITES + 1);
	assert_string_equal(ferry_segment_transport(d.snd, d.seg), want);
	ordering_on(&d, want, 60);
}

static void test_refusals(void **state)
{
	uint8_t big[FERRY_NOTIF_MAX + 1], *ro = aligned_alloc(4096, 4 * CHUNK);
	struct ferry_req_status st;
	struct ferry_engine *gone;
	struct ferry_notif n;
	struct ferry_req r;
	struct duo d;
	ferry_seg_t seg2;
	int s;

	(void)state;
	memset(big, 0x42, sizeof(big));
	duo_up(&d, "loop", NULL, 0, 8);
	assert_int_equal(ferry_notify(NULL, d.seg, "x", 1), -EINVAL);
	assert_int_equal(ferry_notif_poll(NULL, &n, 1), -EINVAL);
	assert_int_equal(ferry_notif_poll(d.rcv, NULL, 1), -EINVAL);
	assert_int_equal(ferry_notif_poll(d.rcv, NULL, 0), 0);
	expect_state(d.b, ferry_notify(d.b, d.seg, big, sizeof(big)), FERRY_FAILED, -EMSGSIZE);
	expect_state(d.b, ferry_notify(d.b, 12345, "x", 1), FERRY_FAILED, -EBADF);
	expect_state(d.b, ferry_notify(d.b, d.seg, NULL, 3), FERRY_FAILED, -EINVAL);
	/* The largest message and an empty one go. */
	s = ferry_notify(d.b, d.seg, big, FERRY_NOTIF_MAX);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO); /* the three refused */
	expect_state(d.b, s, FERRY_DONE, 0);
	poll_one(d.rcv, &n);
	assert_int_equal(n.len, FERRY_NOTIF_MAX);
	assert_memory_equal(n.msg, big, FERRY_NOTIF_MAX);
	s = ferry_notify(d.b, d.seg, NULL, 0);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, s, FERRY_DONE, 0);
	poll_one(d.rcv, &n);
	assert_int_equal(n.len, 0);
	assert_int_equal(ferry_batch_reset(d.b), 0);
	/* A request refused for an op that is neither (257: its low byte is
	 * WRITE's) was no WRITE: the notification after it goes. */
	r = mkreq((enum ferry_op)257, d.lbuf, d.seg, d.rbuf, CHUNK);
	assert_int_equal(ferry_submit(d.b, &r, 1), 0);
	s = ferry_notify(d.b, d.seg, "op", 2);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, 0, FERRY_FAILED, -EINVAL);
	expect_state(d.b, s, FERRY_DONE, 0);
	poll_one(d.rcv, &n);
	assert_memory_equal(n.msg, "op", 2);
	assert_int_equal(ferry_batch_reset(d.b), 0);
	/* An earlier WRITE to the segment failed: the peer is not told. */
	assert_int_equal(ferry_mem_register_access(d.rcv, ro, 4 * CHUNK, FERRY_ACCESS_REMOTE_READ), 0);
	assert_int_equal(ferry_segment_refresh(d.snd, d.seg), 0);
	r = mkreq(FERRY_OP_WRITE, d.lbuf, d.seg, ro, CHUNK);
	assert_int_equal(ferry_submit(d.b, &r, 1), 0);
	expect_state(d.b, ferry_notify(d.b, d.seg, "x", 1), FERRY_FAILED, -EIO);
	/* A WRITE that failed to another segment does not matter. */
	assert_int_equal(ferry_segment_open(d.snd, ferry_engine_address(d.snd), &seg2), 0);
	s = ferry_notify(d.b, seg2, "self", 4);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, s, FERRY_DONE, 0);
	poll_one(d.snd, &n);
	assert_memory_equal(n.msg, "self", 4);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	/* A full batch. */
	while (ferry_batch_size(d.b) < 8)
		assert_true(ferry_notify(d.b, seg2, "y", 1) >= 0);
	assert_int_equal(ferry_notify(d.b, seg2, "z", 1), -ENOSPC);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	assert_int_equal(ferry_segment_close(d.snd, seg2), 0);
	assert_int_equal(ferry_batch_reset(d.b), 0);
	/* The peer is gone. */
	gone = mk_engine("1", "loop", NULL, 0);
	assert_int_equal(ferry_segment_open(d.snd, ferry_engine_address(gone), &seg2), 0);
	ferry_engine_destroy(gone);
	s = ferry_notify(d.b, seg2, "late", 4);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	assert_int_equal(ferry_req_status(d.b, (uint32_t)s, &st), 0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_true(st.error == -ECONNREFUSED || st.error == -ECONNRESET);
	assert_int_equal(ferry_segment_close(d.snd, seg2), 0);
	assert_int_equal(ferry_mem_unregister(d.rcv, ro), 0);
	duo_down(&d);
	free(ro);
}

#define BP_QUEUE 4
#define BP_SENT 12

static void test_backpressure(void **state)
{
	struct ferry_notif n[BP_SENT + 1];
	unsigned seen[BP_SENT] = { 0 }, pending = 0;
	struct duo d;
	int got = 0;

	(void)state;
	duo_up(&d, "loop", NULL, BP_QUEUE, BP_SENT);
	for (uint32_t i = 0; i < BP_SENT; i++)
		assert_int_equal(ferry_notify(d.b, d.seg, &i, sizeof(i)), (int)i);
	WAIT_UNTIL(READ_ONCE(d.rcv->notify.received) == BP_QUEUE &&
		   READ_ONCE(d.rcv->notify.refused_full) > 0, WAIT_DEADLINE_MS, "a full queue");
	/* The rest wait at the sender, none dropped. */
	for (uint32_t i = 0; i < BP_SENT; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(d.b, i, &st), 0);
		assert_int_not_equal(st.state, FERRY_FAILED);
		pending += st.state == FERRY_PENDING;
	}
	assert_true(pending >= BP_SENT - BP_QUEUE);
	assert_int_equal(ferry_batch_wait(d.b, 0), -ETIMEDOUT);
	/* The receiver polls: they all come, once each. */
	while (got < BP_SENT) {
		int k = ferry_notif_poll(d.rcv, n, BP_SENT + 1);

		/* Not k <= BP_QUEUE: the sender's retries (1 ms, doubling) can fill
		 * cells this poll has just freed, so one poll may return more than
		 * the queue holds (seen once under TSan in CI).  The bound itself
		 * is the WAIT_UNTIL above: received stopped at BP_QUEUE, refusing. */
		assert_true(k >= 0 && k <= BP_SENT - got);
		for (int i = 0; i < k; i++) {
			uint32_t v;

			assert_int_equal(n[i].len, sizeof(v));
			memcpy(&v, n[i].msg, sizeof(v));
			assert_true(v < BP_SENT);
			assert_int_equal(seen[v]++, 0);
		}
		got += k;
		if (!k)
			WAIT_UNTIL(READ_ONCE(d.rcv->notify.received) > (uint64_t)got ||
				   got == BP_SENT, WAIT_DEADLINE_MS, "more notifications");
	}
	assert_int_equal(ferry_batch_wait(d.b, 10000), 0);
	assert_true(READ_ONCE(d.snd->notify.busy_retries) > 0);
	duo_down(&d);
}

#define MS_THREADS 4
#define MS_EACH 150

struct sender {
	struct ferry_engine *e;
	ferry_seg_t seg;
	uint32_t id;
	int rc;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	struct ferry_port *p;
	struct ferry_batch *b;

	s->rc = ferry_port_create(s->e, &p);
	if (s->rc)
		return NULL;
	s->rc = ferry_batch_create(p, MS_EACH, &b);
	for (uint32_t i = 0; s->rc == 0 && i < MS_EACH; i++) {
		uint32_t v[2] = { s->id, i };

		if (ferry_notify(b, s->seg, v, sizeof(v)) != (int)i)
			s->rc = -EPROTO;
	}
	if (s->rc == 0)
		s->rc = ferry_batch_wait(b, 60000);
	if (ferry_batch_destroy(b) && !s->rc)
		s->rc = -EBUSY;
	ferry_port_destroy(p);
	return NULL;
}

struct poller {
	struct ferry_engine *rcv, **snd;
	uint32_t (*seen)[MS_EACH];     /* atomic counts */
	uint32_t *got;                 /* atomic: polled by both */
	int bad;
};

/* Poll until every notification of every sender came (two pollers at once). */
static void *poller_main(void *arg)
{
	struct poller *pl = arg;
	struct ferry_notif n[8];

	while (READ_ONCE(*pl->got) < MS_THREADS * MS_EACH) {
		int k = ferry_notif_poll(pl->rcv, n, 8);

		if (k < 0)
			pl->bad = 1;
		for (int i = 0; i < k; i++) {
			uint32_t v[2];

			memcpy(v, n[i].msg, sizeof(v));
			if (n[i].len != sizeof(v) || v[0] >= MS_THREADS || v[1] >= MS_EACH ||
			    strcmp(n[i].from, ferry_engine_address(pl->snd[v[0] % 2])) ||
			    fetch_add_relaxed(pl->seen[v[0]][v[1]], 1) != 0)
				pl->bad = 1;
		}
		if (k > 0)
			fetch_add_relaxed(*pl->got, (uint32_t)k);
		else
			sched_yield();
	}
	return NULL;
}

static void test_many_senders(void **state)
{
	static uint32_t seen[MS_THREADS][MS_EACH];
	struct ferry_engine *rcv = mk_engine("1", "loop", NULL, 16), *snd[2];
	struct sender s[MS_THREADS];
	pthread_t t[MS_THREADS], pt;
	struct ferry_notif n;
	uint32_t got = 0;
	struct poller pl = { .rcv = rcv, .snd = snd, .seen = seen, .got = &got };
	struct poller pl2;

	(void)state;
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < 2; i++)
		snd[i] = mk_engine("0", "loop", NULL, 0);
	pl2 = pl;
	for (uint32_t i = 0; i < MS_THREADS; i++) {
		s[i] = (struct sender){ .e = snd[i % 2], .id = i };
		assert_int_equal(ferry_segment_open(s[i].e, ferry_engine_address(rcv), &s[i].seg), 0);
		assert_int_equal(pthread_create(&t[i], NULL, sender_main, &s[i]), 0);
	}
	assert_int_equal(pthread_create(&pt, NULL, poller_main, &pl2), 0);
	poller_main(&pl);
	assert_int_equal(pthread_join(pt, NULL), 0);
	assert_false(pl.bad || pl2.bad);
	for (int i = 0; i < MS_THREADS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(s[i].rc, 0);
		for (int j = 0; j < MS_EACH; j++)
			assert_int_equal(seen[i][j], 1);
	}
	assert_int_equal(ferry_notif_poll(rcv, &n, 1), 0);
	/* Whether the queue of 16 filled up depends on how fast the pollers
	 * ran (a timing, not a result): said, not asserted.  test_backpressure
	 * fills a queue for certain. */
	print_message("many senders: the receiver's queue was full %llu times\n",
		      (unsigned long long)READ_ONCE(rcv->notify.refused_full));
	for (int i = 0; i < 2; i++)
		ferry_engine_destroy(snd[i]);
	ferry_engine_destroy(rcv);
}

/* ---- the cluster key ---- */

static char keydir[] = "/tmp/ferry-notify-XXXXXX";
static char key_a[64], key_b[64];

static void write_key(char *path, const char *name, const char *content)
{
	int fd;

	snprintf(path, 64, "%s/%s", keydir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

static void test_cluster_key(void **state)
{
	struct wire_notify w = { .from = "127.0.0.1:1", .len = 3, .msg = "bad" };
	struct ctl_client cl;
	struct auth_key kb;
	struct ferry_notif n;
	char err[320];
	struct duo d;
	uint64_t denied;

	(void)state;
	assert_non_null(mkdtemp(keydir));
	write_key(key_a, "a", "c2VjcmV0IGNsdXN0ZXIga2V5IG9mIGZlcnJ5LCBjbHVzdGVyIEE=\n");
	write_key(key_b, "b", "c2VjcmV0IGNsdXN0ZXIga2V5IG9mIGZlcnJ5LCBjbHVzdGVyIEI=\n");
	duo_up(&d, "loop", key_a, 0, 4);
	/* Same key: delivered. */
	assert_int_equal(ferry_notify(d.b, d.seg, "ok", 2), 0);
	assert_int_equal(ferry_batch_wait(d.b, 10000), 0);
	poll_one(d.rcv, &n);
	assert_memory_equal(n.msg, "ok", 2);
	/* No key, another key: refused, nothing queued. */
	denied = READ_ONCE(d.rcv->ctl.denied);
	assert_int_equal(ctl_notify(NULL, ferry_engine_address(d.rcv), 2000, &w), -EACCES);
	assert_int_equal(ctl_auth_load_key(key_b, &kb, err, sizeof(err)), 0);
	assert_int_equal(ctl_client_init(&cl, &kb), 0);
	assert_int_equal(ctl_notify(&cl, ferry_engine_address(d.rcv), 2000, &w), -EACCES);
	ctl_client_fini(&cl);
	WAIT_UNTIL(READ_ONCE(d.rcv->ctl.denied) == denied + 2, WAIT_DEADLINE_MS, "two refusals");
	assert_int_equal(READ_ONCE(d.rcv->notify.received), 1);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	duo_down(&d);
	unlink(key_a);
	unlink(key_b);
	rmdir(keydir);
}

/* A sender with a name signs with it. */
static void test_from_name(void **state)
{
	struct test_server srv = { .kind = SERVER_REDIS };
	struct ferry_engine *rcv = mk_engine("1", "loop", NULL, 0), *snd;
	int start_rc = server_start(&srv, SERVER_REDIS);
	struct ferry_port *p;
	struct ferry_batch *b;
	struct ferry_notif n;
	struct ferry_opts o;
	ferry_seg_t seg;

	(void)state;
	srv.kind = SERVER_REDIS;
	if (start_rc) {
		ferry_engine_destroy(rcv);
		SERVERS_REQUIRE(&srv, start_rc);
	}
	pair_opts(&o, "0");
	o.name = "prefill-7";
	o.metadata = srv.url;
	assert_int_equal(ferry_engine_create(&o, &snd), 0);
	assert_int_equal(ferry_segment_open(snd, ferry_engine_address(rcv), &seg), 0);
	assert_int_equal(ferry_port_create(snd, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);
	assert_int_equal(ferry_notify(b, seg, "hi", 2), 0);
	assert_int_equal(ferry_batch_wait(b, 10000), 0);
	poll_one(rcv, &n);
	assert_string_equal(n.from, "prefill-7");
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	ferry_engine_destroy(snd);
	ferry_engine_destroy(rcv);
	server_stop(&srv);
}

/* A duo (loop, a receiver queue of 2) whose third notification, "b",
 * waits for room: the first two ("a") fill the queue and nobody polls.
 * Its slot. */
static int duo_up_notif_waiting(struct duo *d)
{
	int s;

	duo_up(d, "loop", NULL, 2, 4);
	assert_int_equal(ferry_notify(d->b, d->seg, "a", 1), 0);
	assert_int_equal(ferry_notify(d->b, d->seg, "a", 1), 1);
	assert_int_equal(ferry_batch_wait(d->b, 10000), 0); /* the queue is full now */
	s = ferry_notify(d->b, d->seg, "b", 1);
	WAIT_UNTIL(READ_ONCE(d->snd->notify.busy_retries) > 0, WAIT_DEADLINE_MS, "a busy answer");
	return s;
}

/* A notification that waits for room ends -ECANCELED on ferry_batch_cancel. */
static void test_cancel(void **state)
{
	struct ferry_notif n;
	struct duo d;
	int s;

	(void)state;
	s = duo_up_notif_waiting(&d);
	assert_int_equal(ferry_batch_cancel(d.b), 0);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, s, FERRY_FAILED, -ECANCELED);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
		assert_memory_equal(n.msg, "a", 1);
	}
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	duo_down(&d);
}

/*
 * The last close of a segment neither waits for nor cancels a notification
 * queued to it (ferry.h): the close returns while it waits for room at the
 * receiver, its slot PENDING, and it is still delivered once the receiver
 * has room, ending DONE -- the notification names its peer by address and
 * incarnation, not by the segment.
 */
static void test_close_leaves_notification(void **state)
{
	struct ferry_notif n;
	struct duo d;
	int s;

	(void)state;
	s = duo_up_notif_waiting(&d);
	assert_int_equal(ferry_segment_close(d.snd, d.seg), 0);
	expect_state(d.b, s, FERRY_PENDING, 0); /* its refusals last up to timeout_ms (2 s) */
	assert_int_equal(ferry_notify(d.b, d.seg, "c", 1), 3); /* closed: refused */
	expect_state(d.b, 3, FERRY_FAILED, -EBADF);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
		assert_memory_equal(n.msg, "a", 1);
	}
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO); /* slot 3's -EBADF */
	expect_state(d.b, s, FERRY_DONE, 0);
	WAIT_UNTIL(ferry_notif_poll(d.rcv, &n, 1) == 1, WAIT_DEADLINE_MS, "the notification");
	assert_memory_equal(n.msg, "b", 1);
	duo_down(&d);
}

/* A KEEPALIVE to the receiver: its control thread then waits for the
 * passive_lock the test holds, and serves nothing else meanwhile. */
static void *keepalive_main(void *arg)
{
	(void)ctl_keepalive(NULL, arg, 10000, 1);
	return NULL;
}

/*
 * A cancel that comes while the notification's send waits for the
 * receiver's answer (its control thread held up): the receiver queues it,
 * so it ends DONE -- a FAILED -ECANCELED one that the receiver has would
 * be sent again by the application, and arrive twice (before: FAILED
 * -ECANCELED, the receiver polled it).
 */
static void test_cancel_during_send(void **state)
{
	struct ferry_notif n;
	pthread_t ka;
	struct duo d;
	int s;

	(void)state;
	duo_up(&d, "loop", NULL, 0, 4);
	pthread_mutex_lock(&d.rcv->passive_lock);
	assert_int_equal(pthread_create(&ka, NULL, keepalive_main,
					(void *)ferry_engine_address(d.rcv)), 0);
	usleep(100 * 1000); /* its control thread waits in the keepalive now */
	s = ferry_notify(d.b, d.seg, "blocks ready", 12);
	WAIT_UNTIL(READ_ONCE(d.snd->notify.sends) >= 1, WAIT_DEADLINE_MS, "the send");
	usleep(20 * 1000);
	assert_int_equal(ferry_batch_cancel(d.b), 0);
	pthread_mutex_unlock(&d.rcv->passive_lock);
	pthread_join(ka, NULL);
	assert_int_equal(ferry_batch_wait(d.b, 10000), 0);
	expect_state(d.b, s, FERRY_DONE, 0);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
	assert_memory_equal(n.msg, "blocks ready", 12);
	duo_down(&d);
}

/* ---- a delivered notification beside a refused one, after a takeover ---- */

static struct {
	struct ferry_engine *snd;   /* whose takeovers end the hold-up */
	int phase;                  /* 0: both refused; 1: one exchange */
	int j0_calls, held, release;
} hq;                               /* atomics */

/* The receiver's NOTIFY handler, wrapped: "j0" and "j1" are refused (as
 * by a full queue) until both wait on the sender's lane; then, in the
 * exchange that carries both, j0's frame holds this thread until the
 * sender's deputy takes the lead over (the leader deposed mid-send), and
 * j0 is refused until the test releases it, while j1 is queued. */
static int held_notify(void *arg, const struct wire_notify *n)
{
	bool j0 = n->len == 2 && !memcmp(n->msg, "j0", 2);
	bool j1 = n->len == 2 && !memcmp(n->msg, "j1", 2);

	if (j0)
		__atomic_add_fetch(&hq.j0_calls, 1, __ATOMIC_SEQ_CST);
	if ((j0 || j1) && !__atomic_load_n(&hq.phase, __ATOMIC_SEQ_CST))
		return -EAGAIN;
	if (j0 && !__atomic_exchange_n(&hq.held, 1, __ATOMIC_SEQ_CST))
		for (int k = 0; k < 2000 && !READ_ONCE(hq.snd->notify.takeovers); k++)
			usleep(1000);
	if (j0 && !__atomic_load_n(&hq.release, __ATOMIC_SEQ_CST))
		return -EAGAIN;
	return notify_receive(arg, n);
}

/* Two jobs on one of the sender's lanes, the first with message first (2
 * bytes): the next exchange takes both. */
static bool lane_holds_two(struct ferry_engine *e, const char *first)
{
	struct notify *nt = &e->notify;
	bool two = false;

	pthread_mutex_lock(&nt->lanes_lock);
	for (struct notify_lane *l = nt->lanes; l; l = l->next) {
		unsigned k = 0;

		for (struct notify_job *j = l->head; j; j = j->next)
			k++;
		two |= k == 2 && !memcmp(l->head->msg.msg, first, 2);
	}
	pthread_mutex_unlock(&nt->lanes_lock);
	return two;
}

/*
 * The deposed leader of an exchange in which the receiver queued j1 and
 * refused j0 (full) ends j1 at once and retries j0 later (found by an
 * audit of the notify path).  Before, it sent j0 again alone until it
 * got in, j1 PENDING meanwhile -- delivered, up to timeout_ms; a cancel
 * then ended it FAILED.
 */
static void test_delivered_beside_refused(void **state)
{
	struct ferry_notif n;
	struct duo d;

	(void)state;
	memset(&hq, 0, sizeof(hq));
	duo_up(&d, "loop", NULL, 0, 4);
	hq.snd = d.snd;
	ctl_set_notify(&d.rcv->ctl, held_notify);
	/* Ordered before the control thread's next read of it (TSan does not
	 * see the sockets): it serves a KEEPALIVE under passive_lock. */
	pthread_mutex_lock(&d.rcv->passive_lock);
	pthread_mutex_unlock(&d.rcv->passive_lock);
	(void)ctl_keepalive(NULL, ferry_engine_address(d.rcv), 10000, 1); /* answered or not */
	assert_int_equal(ferry_notify(d.b, d.seg, "j0", 2), 0);
	WAIT_UNTIL(__atomic_load_n(&hq.j0_calls, __ATOMIC_SEQ_CST) >= 1, WAIT_DEADLINE_MS,
		   "j0 refused");
	assert_int_equal(ferry_notify(d.b, d.seg, "j1", 2), 1);
	WAIT_UNTIL(lane_holds_two(d.snd, "j0"), WAIT_DEADLINE_MS, "j0 and j1 on the lane");
	__atomic_store_n(&hq.phase, 1, __ATOMIC_SEQ_CST);
	WAIT_UNTIL(READ_ONCE(d.rcv->notify.received) >= 1, WAIT_DEADLINE_MS, "j1 queued");
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
	assert_memory_equal(n.msg, "j1", 2);
	WAIT_UNTIL(slot_state(d.b, 1) != FERRY_PENDING || slot_state(d.b, 0) != FERRY_PENDING,
		   WAIT_DEADLINE_MS, "j1's slot to end");
	print_message("takeovers %llu; j1 %s while j0 %s\n",
		      (unsigned long long)READ_ONCE(d.snd->notify.takeovers),
		      ferry_state_name(slot_state(d.b, 1)), ferry_state_name(slot_state(d.b, 0)));
	assert_true(READ_ONCE(d.snd->notify.takeovers) >= 1);
	expect_state(d.b, 1, FERRY_DONE, 0);
	assert_int_equal(slot_state(d.b, 0), FERRY_PENDING); /* still refused */
	__atomic_store_n(&hq.release, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(ferry_batch_wait(d.b, 10000), 0);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
	assert_memory_equal(n.msg, "j0", 2);
	duo_down(&d);
}

/* ---- an answer the receiver gave in an exchange: the others stand ---- */

static struct {
	int phase;                  /* 0: "n0" and "n1" refused; 1: one exchange */
	int n0_calls;
} nq;                               /* atomics */

/* The receiver's NOTIFY handler, wrapped: "n0" and "n1" are refused (as
 * by a full queue) until both wait on the sender's lane; then "n0" is
 * answered -ENOMEM (the receiver could not make its queue: it did not
 * queue it) and "n1", in the same exchange, is queued. */
static int nomem_notify(void *arg, const struct wire_notify *n)
{
	bool n0 = n->len == 2 && !memcmp(n->msg, "n0", 2);
	bool n1 = n->len == 2 && !memcmp(n->msg, "n1", 2);

	if (n0)
		__atomic_add_fetch(&nq.n0_calls, 1, __ATOMIC_SEQ_CST);
	if ((n0 || n1) && !__atomic_load_n(&nq.phase, __ATOMIC_SEQ_CST))
		return -EAGAIN;
	if (n0)
		return -ENOMEM;
	return notify_receive(arg, n);
}

/*
 * In one exchange the receiver answers the first notification -ENOMEM
 * (not queued) and queues the second: the second ends DONE.  Before, the
 * sender took the peer's -ENOMEM answer for its own failure to read it
 * (the connection out of step) and ended every later notification of the
 * exchange FAILED -ENOMEM, "not queued there" -- though the receiver had
 * queued them, so an application would send them again.
 */
static void test_nomem_answer_in_exchange(void **state)
{
	struct ferry_notif n;
	struct duo d;

	(void)state;
	memset(&nq, 0, sizeof(nq));
	duo_up(&d, "loop", NULL, 0, 4);
	ctl_set_notify(&d.rcv->ctl, nomem_notify);
	/* Ordered before the control thread's next read of it (TSan does not
	 * see the sockets): it serves a KEEPALIVE under passive_lock. */
	pthread_mutex_lock(&d.rcv->passive_lock);
	pthread_mutex_unlock(&d.rcv->passive_lock);
	(void)ctl_keepalive(NULL, ferry_engine_address(d.rcv), 10000, 1); /* answered or not */
	assert_int_equal(ferry_notify(d.b, d.seg, "n0", 2), 0);
	WAIT_UNTIL(__atomic_load_n(&nq.n0_calls, __ATOMIC_SEQ_CST) >= 1, WAIT_DEADLINE_MS,
		   "n0 refused");
	assert_int_equal(ferry_notify(d.b, d.seg, "n1", 2), 1);
	WAIT_UNTIL(lane_holds_two(d.snd, "n0"), WAIT_DEADLINE_MS, "n0 and n1 on the lane");
	__atomic_store_n(&nq.phase, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, 0, FERRY_FAILED, -ENOMEM);
	expect_state(d.b, 1, FERRY_DONE, 0);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 1);
	assert_memory_equal(n.msg, "n1", 2);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	duo_down(&d);
}

/* A WRITE to the segment refused at submit for its arguments did not
 * succeed either: its notification ends FAILED -EIO, the peer is not
 * told (before: DONE, delivered). */
static void test_refused_write_holds_notification(void **state)
{
	struct ferry_notif n;
	struct ferry_req r;
	struct duo d;
	int s;

	(void)state;
	duo_up(&d, "loop", NULL, 0, 4);
	r = mkreq(FERRY_OP_WRITE, d.lbuf, d.seg, d.rbuf, 0); /* len 0: -EINVAL */
	assert_int_equal(ferry_submit(d.b, &r, 1), 0);
	expect_state(d.b, 0, FERRY_FAILED, -EINVAL);
	s = ferry_notify(d.b, d.seg, "ready", 5);
	assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
	expect_state(d.b, s, FERRY_FAILED, -EIO);
	assert_int_equal(ferry_notif_poll(d.rcv, &n, 1), 0);
	duo_down(&d);
}

/*
 * A receiver restarted at the same address is a new incarnation that got
 * none of the WRITEs made to the segment (opened to the one before): a
 * notification on that segment ends FAILED -ESTALE and the new receiver
 * queues nothing.  (Before NOTIFY_TO it was delivered; the same holds for
 * one that waited for room across the restart, by the same check.)
 */
static void test_restarted_receiver(void **state)
{
	struct ferry_knobs k = { .notif_queue = 2 };
	struct ferry_engine *rcv2;
	struct ferry_notif n;
	struct ferry_opts o;
	char addr[64];
	struct duo d;
	int s;

	(void)state;
	duo_up(&d, "loop", NULL, 2, 8);
	snprintf(addr, sizeof(addr), "%s", ferry_engine_address(d.rcv));
	ferry_engine_destroy(d.rcv);
	pair_opts(&o, "1");
	o.listen = addr;
	assert_int_equal(ferry_engine_create_knobs(&o, &k, &rcv2), 0);
	d.rcv = rcv2;
	s = ferry_notify(d.b, d.seg, "blocks 0..64K ready", 19);
	assert_true(s >= 0 || s == -ESTALE); /* (-ESTALE: a keepalive told already) */
	if (s >= 0) {
		assert_int_equal(ferry_batch_wait(d.b, 10000), -EIO);
		expect_state(d.b, s, FERRY_FAILED, -ESTALE);
		assert_true(READ_ONCE(rcv2->notify.refused_stale) >= 1);
	}
	assert_int_equal(ferry_notif_poll(rcv2, &n, 1), 0);
	assert_int_equal(READ_ONCE(rcv2->notify.received), 0);
	assert_int_equal(ferry_segment_close(d.snd, d.seg), 0);
	duo_down(&d);
}

/* A receiver that never polls: the notification ends TIMEOUT after timeout_ms of refusals. */
static void test_full_timeout(void **state)
{
	struct duo d;

	(void)state;
	duo_up(&d, "loop", NULL, 2, 4); /* pair_opts: timeout_ms 2000 */
	for (int i = 0; i < 3; i++)
		assert_int_equal(ferry_notify(d.b, d.seg, "t", 1), i);
	assert_int_equal(ferry_batch_wait(d.b, 30000), -EIO);
	expect_state(d.b, 0, FERRY_DONE, 0);
	expect_state(d.b, 1, FERRY_DONE, 0);
	expect_state(d.b, 2, FERRY_TIMEOUT, -ETIMEDOUT);
	assert_int_equal(READ_ONCE(d.rcv->notify.received), 2);
	duo_down(&d);
}

/*
 * A peer that does not answer (stopped: its kernel still accepts and
 * buffers) holds back its own notifications, each up to the send's I/O
 * timeout, and no one else's: a notification to a live peer, queued
 * after two to the stopped one, arrives while they still wait.
 */
static void test_mute_peer(void **state)
{
	struct target t;
	struct ferry_notif n;
	ferry_seg_t mute;
	struct duo d;
	int status;

	(void)state;
	assert_int_equal(target_start(&t, "tcp", "127.0.0.1:0", BUF, 7), 0);
	duo_up(&d, "tcp", NULL, 0, 8);
	assert_int_equal(ferry_segment_open(d.snd, t.addr, &mute), 0);
	assert_int_equal(kill(t.pid, SIGSTOP), 0);
	/* Stopped for sure (kill returns before): else it may answer m0 in time. */
	assert_int_equal(waitpid(t.pid, &status, WUNTRACED), t.pid);
	assert_true(WIFSTOPPED(status));
	assert_int_equal(ferry_notify(d.b, mute, "m0", 2), 0);
	assert_int_equal(ferry_notify(d.b, mute, "m1", 2), 1);
	/* The live peer's comes once the first send to the mute one is under way. */
	WAIT_UNTIL(READ_ONCE(d.snd->notify.sends) >= 1, WAIT_DEADLINE_MS, "the first send");
	assert_int_equal(ferry_notify(d.b, d.seg, "live", 4), 2);
	poll_one(d.rcv, &n);
	assert_int_equal(n.len, 4);
	assert_memory_equal(n.msg, "live", 4);
	/* Its slot ends when the reply comes, just after the receiver queued it. */
	WAIT_UNTIL(slot_state(d.b, 2) == FERRY_DONE, WAIT_DEADLINE_MS, "the live peer's reply");
	assert_true(READ_ONCE(d.snd->notify.senders_peak) >= 2); /* two peers at once */
	assert_true(READ_ONCE(d.snd->notify.takeovers) >= 1); /* the deputy led the live one */
	/* Each send to the stopped peer waits up to its I/O timeout (2 s), one
	 * after the other: the second is still waiting. */
	expect_state(d.b, 1, FERRY_PENDING, 0);
	assert_int_equal(ferry_batch_wait(d.b, 30000), -EIO);
	expect_state(d.b, 0, FERRY_TIMEOUT, -ETIMEDOUT);
	expect_state(d.b, 1, FERRY_TIMEOUT, -ETIMEDOUT);
	target_kill(&t);
	assert_int_equal(ferry_segment_close(d.snd, mute), 0);
	duo_down(&d);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest env_only[] = {
		cmocka_unit_test(test_order_env),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_env),
		cmocka_unit_test(test_order_loop),
		cmocka_unit_test(test_order_tcp),
		cmocka_unit_test(test_order_cma),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_many_senders),
		cmocka_unit_test(test_cluster_key),
		cmocka_unit_test(test_from_name),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_close_leaves_notification),
		cmocka_unit_test(test_cancel_during_send),
		cmocka_unit_test(test_delivered_beside_refused),
		cmocka_unit_test(test_nomem_answer_in_exchange),
		cmocka_unit_test(test_refused_write_holds_notification),
		cmocka_unit_test(test_restarted_receiver),
		cmocka_unit_test(test_full_timeout),
		cmocka_unit_test(test_mute_peer),
	};

	target_main_if(argc, argv);
	/* FERRY_TEST_NOTIFY_ENV_ONLY: only the ordering over those NICs (the VM). */
	if (getenv("FERRY_TEST_NOTIFY_ENV_ONLY"))
		return cmocka_run_group_tests(env_only, NULL, NULL);
	if (getenv("FERRY_TEST_ONLY")) /* one test by name (a pattern) */
		cmocka_set_test_filter(getenv("FERRY_TEST_ONLY"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
