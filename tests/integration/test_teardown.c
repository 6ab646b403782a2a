/* SPDX-License-Identifier: MIT */
/*
 * Endpoint teardown racing with work in flight, many times over (run under
 * ASan/LSan by `make test`: use-after-free, double free and leaks of
 * endpoints, QPs and descriptors show up there):
 *
 *  - a segment closed right after a batch was submitted: close lets the
 *    requests end, so none is PENDING once it returns, every one is DONE
 *    (bytes right) or FAILED for a reason, and the segment reopens;
 *  - the same with faults injected on the initiator's NICs, and with every
 *    completion lost (close waits out the slice timeouts);
 *  - the peer engine destroyed mid-transfer, then started again on the same
 *    address: requests end, new ones fail fast, opening the address again
 *    reaches the new incarnation (the old handle is refused, -ESTALE);
 *  - an initiator that never says it is alive loses its QPs on the target
 *    after the lease, one that keeps alive keeps them;
 *  - engines destroyed with segments still open (both orders);
 *  - threads submitting while another thread closes and reopens the
 *    segment: a closed or stale handle gives -EBADF in the status, never a
 *    crash.
 *
 * Peers that answer late or never: test_slow_peers.c.
 *
 * After each, the initiator's accounting is back at zero: no slice in
 * flight, CQ quota empty, slice pools full.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include "ring/base/clock.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/sock.h"
#include "runtime/ctl/wire.h"
#include "tests/harness/teardown.h"

#ifdef __SANITIZE_THREAD__
/* Half the closes under TSan (~10 s each plain count there; CI's 20
 * minutes): its happens-before check sees a race in any interleaving run,
 * the plain and ASan runs keep the full count for the rare ones. */
#define ITERATIONS 100
#define FAULT_ITERATIONS 50
#define DESTROYS 8  /* each pair ~1.2 s under TSan (0.25 plain): both orders 4 times */
#else
#define ITERATIONS 200
#define FAULT_ITERATIONS 100
#define DESTROYS 20
#endif
#define STALLS 3

static int transport_error(int err)
{
	return err == -EHOSTUNREACH || err == -ENOTCONN || err == -ETIMEDOUT;
}

/* WRs the cores of e have posted, all told. */
static uint64_t wrs_posted(struct ferry_engine *e)
{
	return ENGINE_STAT_SUM(e, wrs_posted);
}

/*
 * The batch is on the wire: the cores have posted k WRs since base was
 * read, or the batch ended before (every request takes a WR at least, but
 * a failed one may not wait for all of its slices).
 */
static bool on_the_wire(struct ferry_batch *b, uint64_t base, unsigned k)
{
	return wrs_posted(P.init) - base >= k || ferry_batch_wait(b, 0) != -ETIMEDOUT;
}

/* Submit a batch, close the segment at once (or nearly), reopen; n times. */
static void close_in_flight(unsigned iterations, const struct loop_faults *f, int (*allowed)(int))
{
	const char *addr = ferry_engine_address(P.target);
	struct ferry_req reqs[BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;
	struct counts c = { 0 };
	uint64_t seed = 2024;
	double t0 = now_s();

	if (f)
		set_faults(P.init, f);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, BATCH, &b), 0);
	for (unsigned it = 0; it < iterations; it++) {
		ferry_seg_t closed = P.seg;
		uint64_t posted = wrs_posted(P.init);

		prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
		assert_int_equal(ferry_submit(b, reqs, BATCH), 0);
		/* Vary the moment: at once, once some WRs are out, after a pass. */
		if (it % 3 == 1) {
			unsigned k = 1 + splitmix(&seed) % BATCH;

			WAIT_UNTIL(on_the_wire(b, posted, k), WAIT_MS,
				   "%u WRs of the batch posted, or the batch to end", k);
		} else if (it % 3 == 2) {
			ferry_batch_wait(b, 0);
			sched_yield();
		}
		assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
		/* Returned: every request has ended; the handle is dead. */
		wait_checked(b, reqs, BATCH, allowed, 0, &c);
		assert_int_equal(ferry_segment_close(P.init, closed), -ENOENT);
		assert_int_equal(ferry_segment_open(P.init, addr, &P.seg), 0);
		assert_true(P.seg != closed);
	}
	if (f)
		set_faults(P.init, NULL);
	print_message("%u closes in flight in %.1f s: done %u, failed %u (ECANCELED %u, "
		      "EHOSTDOWN %u, other %u), timeout %u\n", iterations, now_s() - t0, c.done,
		      c.failed, c.by_err[0], c.by_err[1], c.by_err[2], c.timedout);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_true(c.done > 0);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

static void test_close_in_flight(void **state)
{
	(void)state;
	setup_pair(2000);
	close_in_flight(ITERATIONS, NULL, NULL);
}

/* What the library logged while a test listened (ferry_log_set: any
 * ferry thread, so under a lock). */
static struct {
	pthread_mutex_t lock;
	unsigned repair_failed; /* the repair thread's "cannot replace" */
	unsigned all_down;      /* ... saying that no rail is left */
	unsigned handshake;     /* an open's "endpoint handshake for core" */
	unsigned ctl_connect;   /* the control client's own "ctl: connect:" */
	unsigned bad_address;   /* a call to an address that is not one */
} L = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void log_count(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "ferry: %s\n", msg);
	pthread_mutex_lock(&L.lock);
	L.repair_failed += strstr(msg, "cannot replace the broken QPs") != NULL;
	L.all_down += strstr(msg, "no rail reaches the peer") != NULL;
	L.handshake += strstr(msg, "endpoint handshake for core") != NULL;
	L.ctl_connect += strncmp(msg, "ctl: connect:", 13) == 0;
	L.bad_address += strstr(msg, "bad address") != NULL;
	pthread_mutex_unlock(&L.lock);
}

/* Errors, QP-fatal events and lost completions while segments close: a
 * slice may end on its own error before the close cancels it. */
static void test_close_in_flight_faults(void **state)
{
	struct loop_faults f = { .err_ppm = 10000, .lost_ppm = 500, .qp_fatal_ppm = 2000,
				 .seed = 99 };

	(void)state;
	need_loop();
	setup_pair(100);
	ferry_log_set(log_count, NULL);
	close_in_flight(FAULT_ITERATIONS, &f, transport_error);
	ferry_log_set(NULL, NULL);
	/* A QP repaired while its segment closed: the peer's half of it is
	 * freed at the address it was made at (a closed segment has none). */
	pthread_mutex_lock(&L.lock);
	assert_int_equal(L.bad_address, 0);
	pthread_mutex_unlock(&L.lock);
}

/* Every completion lost: close waits out the slice timeouts (each retry
 * times out too) and the requests end TIMEOUT, not PENDING. */
static void test_close_stalled(void **state)
{
	struct loop_faults f = { .lost_ppm = 1000000, .seed = 3 };

	(void)state;
	need_loop();
	setup_pair(100);
	close_in_flight(STALLS, &f, transport_error);
}

static int peer_gone_error(int err)
{
	return err == -EFAULT || transport_error(err);
}

/* Every rail of seg has been found cut off from its dead peer (the repair
 * thread's verdict): from then on new requests fail fast. */
static bool rails_all_down(struct ferry_engine *e, ferry_seg_t seg)
{
	const struct ferry_seg *s = seg_at(&e->segs, (uint32_t)(seg & 0xffffffffu) - 1);

	for (unsigned i = 0; i < e->ncores; i++)
		if (!rail_unusable(s, i))
			return false;
	return true;
}

/* P's target again, a new incarnation at addr (the address the old one
 * had), on the run's target NICs as pair_setup made it, P.rbuf registered. */
static void target_again(const char *addr)
{
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.listen = addr;
	if (getenv("FERRY_TEST_TARGET_NICS"))
		o.nics = getenv("FERRY_TEST_TARGET_NICS");
	assert_int_equal(ferry_engine_create(&o, &P.target), 0);
	assert_int_equal(ferry_mem_register(P.target, P.rbuf, P.len), 0);
}

/*
 * The peer engine goes away mid-transfer and a new one starts on the same
 * address (the software NIC's version of a restarted peer process): the
 * requests in flight end, new ones to the dead peer fail fast, and after
 * close + open the initiator reaches the new incarnation with fresh keys.
 */
static void test_peer_restart(void **state)
{
	struct ferry_req_status st;
	ferry_seg_t old, again;
	struct ferry_req reqs[BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_prep *pr;
	struct counts c;
	char addr[64];
	uint64_t seed = 11;
	const uint32_t idx0 = 0;
	unsigned probes;
	double t0;

	(void)state;
	setup_pair(200);
	snprintf(addr, sizeof(addr), "%s", ferry_engine_address(P.target));
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, BATCH, &b), 0);
	prepare(reqs, 1, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	assert_int_equal(ferry_prep_create(port, P.seg, reqs, 1, &pr), 0);

	/*
	 * The peer dies with a batch in flight.  The software NIC would finish
	 * it before the peer's teardown is done, so its completions are held
	 * back (lost) until the peer is gone; then the slice timeout fails the
	 * stalled QPs and the retries meet a peer without memory.
	 */
	set_faults(P.init, &(struct loop_faults){ .lost_ppm = 1000000, .seed = 1 });
	prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	assert_int_equal(ferry_submit(b, reqs, BATCH), 0);
	ferry_log_set(log_count, NULL);
	ferry_engine_destroy(P.target);
	P.target = NULL;
	set_faults(P.init, NULL);
	t0 = now_s();
	c = (struct counts){ 0 };
	wait_checked(b, reqs, BATCH, peer_gone_error, WAIT_MS, &c);
	t0 = now_s() - t0;
	print_message("peer gone: in-flight requests ended in %.2f s: done %u, failed %u, "
		      "timeout %u\n", t0, c.done, c.failed, c.timedout);
	/* They ended (wait_checked fails the test past WAIT_MS); how fast is the
	 * bench's business, not a pass/fail here (timing in tests flakes on a
	 * loaded host). */

	/* New requests to the dead peer end at once, badly -- once the repair
	 * thread has marked the rails down (before that, a rail still being
	 * repaired holds its slices until the repair fails or they time out). */
	WAIT_UNTIL(rails_all_down(P.init, P.seg), WAIT_MS, "rails to the dead peer marked down");
	t0 = now_s();
	prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	c = run_checked(b, reqs, BATCH, peer_gone_error);
	t0 = now_s() - t0;
	print_message("dead peer: new requests ended in %.2f s: done %u, failed %u (EHOSTDOWN "
		      "%u), timeout %u\n", t0, c.done, c.failed, c.by_err[1], c.timedout);
	assert_int_equal(c.done, 0);
	/* Fail fast: refused by the dead rail, never left to time out. */
	assert_int_equal(c.timedout, 0);

	/* The repair thread probes the dead peer again and again (per QP, with
	 * back-off): the log says so at the first failure and when the last
	 * rail goes (one line each, or one for both), not three lines a probe. */
	WAIT_UNTIL(repairs_failed(P.init, P.seg) >= 6, WAIT_MS, "the dead peer probed 6 times");
	probes = repairs_failed(P.init, P.seg); /* ctl_lock: not under L.lock (the logger's order) */
	pthread_mutex_lock(&L.lock);
	print_message("dead peer: %u failed repairs, logged %u time(s)\n", probes, L.repair_failed);
	assert_in_range(L.repair_failed, 1, 2);
	assert_int_equal(L.all_down, 1);
	assert_int_equal(L.handshake, 0);
	assert_int_equal(L.ctl_connect, 0);
	pthread_mutex_unlock(&L.lock);
	ferry_log_set(NULL, NULL);

	/* A new incarnation on the same address, the same memory registered
	 * again (new keys): opening the address again (no close) sees the new
	 * incarnation and gives a new handle; the old one is refused with
	 * -ESTALE, nothing of it is reused; every byte through the new one is
	 * right. */
	target_again(addr);
	old = P.seg;
	assert_int_equal(ferry_segment_open(P.init, addr, &P.seg), 0);
	assert_true(P.seg != old);
	assert_int_equal(ferry_segment_open(P.init, addr, &again), 0);
	assert_true(again == P.seg); /* same incarnation: same handle */
	assert_int_equal(ferry_segment_close(P.init, again), 0); /* that open's: still open */
	prepare(reqs, 1, old, P.lbuf, P.rbuf, SLOT, &seed);
	assert_int_equal(ferry_submit(b, reqs, 1), 0);
	ferry_batch_wait(b, WAIT_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ESTALE);
	assert_int_equal(ferry_batch_reset(b), 0);
	/* a prepared set on it says so too (it said -EBADF, as if closed) */
	assert_int_equal(ferry_prep_submit(b, pr, &idx0, 1), 0);
	ferry_batch_wait(b, WAIT_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ESTALE);
	assert_int_equal(ferry_batch_reset(b), 0);
	assert_int_equal(ferry_prep_destroy(pr), 0);
	/* and a new set is not made on it (it was, every submit then -ESTALE) */
	assert_int_equal(ferry_prep_create(port, old, reqs, 1, &pr), -ESTALE);
	assert_int_equal(ferry_segment_close(P.init, old), 0);
	prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	c = run_checked(b, reqs, BATCH, NULL);
	assert_int_equal(c.done, BATCH);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

/*
 * A pair whose segment went stale: used on both cores, the target
 * restarted at its address and opened again (P.seg the new handle).
 * Returns the old, stale handle.
 */
static ferry_seg_t pair_with_stale_segment(void)
{
	ferry_seg_t old;
	char addr[64];

	setup_pair(2000);
	assert_batch_done(5); /* endpoints on both cores, used */
	snprintf(addr, sizeof(addr), "%s", ferry_engine_address(P.target));
	ferry_engine_destroy(P.target);
	target_again(addr);
	old = P.seg;
	assert_int_equal(ferry_segment_open(P.init, addr, &P.seg), 0);
	assert_true(P.seg != old); /* the old handle is stale now */
	return old;
}

/*
 * A segment left open after its peer restarted (stale: "close it when
 * convenient") costs an idle engine nothing.  Its endpoints' QPs are set
 * to error and never repaired (a gone incarnation), so no re-ask is due
 * for them; before, the idle core computed its sleep from their repair
 * time anyway (0 ms: never asked) and spun through zero-timeout sleeps,
 * a CPU each, for as long as the handle stayed open.
 */
static void test_stale_segment_idle(void **state)
{
	ferry_seg_t old;
	uint64_t loops;

	(void)state;
	old = pair_with_stale_segment();
	ferry_sleep_us(300 * 1000); /* the cores take the news and go idle */
	loops = ENGINE_STAT_SUM(P.init, loops);
	ferry_sleep_us(500 * 1000);
	loops = ENGINE_STAT_SUM(P.init, loops) - loops;
	print_message("stale segment open: %llu loop passes in 0.5 s of idle\n",
		      (unsigned long long)loops);
	assert_int_equal(ferry_segment_close(P.init, old), 0);
	assert_batch_done(6); /* the new incarnation works */
	assert_in_range(loops, 0, 2000);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

/* Core i's rail to the segment of handle h, read under ctl_lock: the
 * repair thread's event handling (events_run) has finished with it. */
static uint8_t rail_down_of(struct ferry_engine *e, ferry_seg_t h, unsigned i)
{
	uint8_t d;

	pthread_mutex_lock(&e->ctl_lock);
	d = READ_ONCE(seg_at(&e->segs, (uint32_t)h - 1)->rail_down[i]);
	pthread_mutex_unlock(&e->ctl_lock);
	return d;
}

static uint64_t nic_events_of(struct ferry_engine *e, unsigned core)
{
	struct ferry_core_stats st;

	assert_int_equal(ferry_core_stats(e, core, &st), 0);
	return st.nic_events;
}

/*
 * A port that comes back up says nothing of a peer that restarted: a stale
 * segment's rails stay EP_STALE (its QPs lead to an incarnation that is
 * gone for good; the cores never ask to repair them).  Before, the port-up
 * event set them up again like any rail that went down: the cores took
 * the endpoints for usable and asked for repairs every second that the
 * repair thread then dropped, for as long as the handle stayed open.
 */
static void test_stale_segment_port_up(void **state)
{
	struct nic_event up = { .kind = NIC_EV_PORT_UP };
	ferry_seg_t old;
	uint64_t events;

	(void)state;
	need_loop();
	old = pair_with_stale_segment();
	assert_int_equal(rail_down_of(P.init, old, 0), EP_STALE);
	events = nic_events_of(P.init, 0);
	assert_int_equal(loop_inject_event(ferry_engine_nic(P.init, 0), &up), 0);
	WAIT_UNTIL(nic_events_of(P.init, 0) > events, WAIT_DEADLINE_MS,
		   "the repair thread to take the port-up event");
	assert_int_equal(rail_down_of(P.init, old, 0), EP_STALE);
	assert_int_equal(ferry_segment_close(P.init, old), 0);
	assert_batch_done(6); /* the new incarnation works */
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

/*
 * A peer killed on RDMA answers nothing any more (no completion, no error:
 * its NIC is silent), and its control address refuses connections.  Here
 * the software NIC loses every completion, and one slice is in flight, on
 * one QP of one core's rail: before, only that rail went down when its
 * repair was refused, and the slice's retries -- on the endpoint's other
 * QP, then on the other rail, both still "healthy" -- each waited out a
 * slice timeout until they ran out (TIMEOUT; fault-vm peer_kill on rxe:
 * 2.0-6.0 s after the kill with timeout_ms 2000).  A refused repair now
 * means the peer's process is gone: every rail goes down at once and what
 * the QPs hold is flushed, so the request ends FAILED -EHOSTDOWN.
 */
static void test_peer_killed_silent(void **state)
{
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_req r;
	double t0;

	(void)state;
	need_loop();
	setup_pair(200);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	set_faults(P.init, &(struct loop_faults){ .lost_ppm = 1000000, .silent_peer = 1,
						  .seed = 5 });
	r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, 4096); /* one slice */
	ferry_log_set(log_count, NULL);
	t0 = now_s();
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	WAIT_UNTIL(wrs_posted(P.init) >= 1, WAIT_MS, "the slice posted");
	ferry_engine_destroy(P.target);
	P.target = NULL;
	ferry_batch_wait(b, WAIT_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	print_message("peer killed, silent: a request in flight ended %s (%d) in %.2f s "
		      "(timeout_ms 200)\n", ferry_state_name(st.state), st.error, now_s() - t0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -EHOSTDOWN);
	/* Every rail, not only the one whose QP broke. */
	assert_true(repairs_failed(P.init, P.seg) >= 1);
	assert_true(rails_all_down(P.init, P.seg));
	set_faults(P.init, NULL);
	ferry_log_set(NULL, NULL);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_quiet_and_close(P.init, &P.seg);
	assert_int_equal(ferry_mem_unregister(P.init, P.lbuf), 0);
	ferry_engine_destroy(P.init);
	free(P.lbuf);
	free(P.rbuf);
	P = (struct pair){ 0 };
}

/* reqs[0..n): WRITEs of P's first n slots, each filled with seed + i. */
static void slot_writes(struct ferry_req *reqs, unsigned n, uint64_t seed)
{
	for (unsigned i = 0; i < n; i++) {
		fill_pattern(P.lbuf + i * SLOT, SLOT, seed + i);
		reqs[i] = mkreq(FERRY_OP_WRITE, P.lbuf + i * SLOT, P.seg, P.rbuf + i * SLOT, SLOT);
	}
}

/* P's engines (init already gone when NULL) and buffers, without
 * pair_teardown's close and unregister: a dead device's pair is torn
 * down by the destroys alone. */
static void pair_drop(void)
{
	if (P.init)
		ferry_engine_destroy(P.init);
	ferry_engine_destroy(P.target);
	free(P.lbuf);
	free(P.rbuf);
	P = (struct pair){ 0 };
}

/*
 * A device that dies under its WRs gives nothing back, not even the
 * flushes of the QPs set to error.  ferry_engine_destroy waits 2 s for
 * them, then ends their requests FAILED -ECANCELED like every other
 * request in flight at destroy.  Before, the QPs kept their depth and
 * core_destroy's qpx_destroy asserted it was 0: the process aborted.
 */
static void test_destroy_beside_dead_device(void **state)
{
	struct ferry_req reqs[4];
	struct ferry_port *port;
	struct ferry_batch *b;

	(void)state;
	need_loop();
	setup_pair(0); /* no slice timeout: nothing ends them before destroy */
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	set_faults(P.init, &(struct loop_faults){ .dead = 1 });
	slot_writes(reqs, 4, 1);
	assert_int_equal(ferry_submit(b, reqs, 4), 0);
	WAIT_UNTIL(wrs_posted(P.init) >= 4, WAIT_MS, "the slices posted");
	assert_int_equal(ferry_batch_wait(b, 100), -ETIMEDOUT); /* nothing comes back */
	ferry_log_set(log_count, NULL);
	ferry_engine_destroy(P.init);
	P.init = NULL;
	ferry_log_set(NULL, NULL);
	for (unsigned i = 0; i < 4; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		assert_int_equal(st.state, FERRY_FAILED);
		assert_int_equal(st.error, -ECANCELED);
	}
	/* The batch outlived its engine (its port went with it): its memory only. */
	free(b->rqs);
	free(b);
	pair_drop();
}

/*
 * The dead-device tests give QPs up after 1 s, not the engine's 5 s: the
 * same path, sooner (the timeouts they set are 200 ms).
 */
static const struct ferry_knobs dead_device_knobs = { .abandon_ms = 1000 };

/*
 * The same device dead while the engine runs (core 1's; core 0's works):
 * core 1's QPs time out and are set to error, and no flush ever comes.
 * After 5 s of that (1 s here) the core gives the QPs up (qp_abandons), and their
 * slices go again on core 0's rail: every request ends DONE.  Before,
 * they stayed PENDING for as long as the engine ran.
 */
static void test_dead_device_while_running(void **state)
{
	struct ferry_req reqs[4];
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_core_stats st;

	struct ferry_opts o;

	(void)state;
	need_loop();
	pair_opts(&o, "0-1");
	o.timeout_ms = 200;
	o.slice_size = 16384;
	pair_setup_knobs(&P, &o, &o, BUF, &dead_device_knobs);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	loop_set_faults(ferry_engine_nic(P.init, 1), &(struct loop_faults){ .dead = 1 });
	slot_writes(reqs, 4, 1);
	ferry_log_set(log_count, NULL);
	assert_int_equal(ferry_submit(b, reqs, 4), 0);
	assert_int_equal(ferry_batch_wait(b, 20000), 0);
	ferry_log_set(NULL, NULL);
	for (unsigned i = 0; i < 4; i++)
		assert_memory_equal(P.rbuf + i * SLOT, P.lbuf + i * SLOT, SLOT);
	assert_int_equal(ferry_core_stats(P.init, 1, &st), 0);
	print_message("core 1 dead: %llu QPs given up, %llu handovers\n",
		      (unsigned long long)st.qp_abandons, (unsigned long long)st.handovers);
	assert_true(st.qp_abandons >= 1);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	pair_drop(); /* the device is still dead: its repaired QPs too */
}

/*
 * One rail, its device dead, no retries: the QP times out, no flush comes,
 * and the QP given up ends its slices as their flushes would have: the
 * request TIMEOUT -ETIMEDOUT (its QP timed out).  Before, FAILED -EIO.
 */
static void test_dead_device_request_times_out(void **state)
{
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_opts o;

	(void)state;
	need_loop();
	pair_opts(&o, "0");
	o.timeout_ms = 200;
	o.retries = 0;
	pair_setup_knobs(&P, &o, &o, BUF, &dead_device_knobs);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	loop_set_faults(ferry_engine_nic(P.init, 0), &(struct loop_faults){ .dead = 1 });
	ferry_log_set(log_count, NULL);
	st = run_one_on(port, mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, 65536), 20000);
	ferry_log_set(NULL, NULL);
	assert_int_equal(st.state, FERRY_TIMEOUT);
	assert_int_equal(st.error, -ETIMEDOUT);
	assert_int_equal(ferry_port_destroy(port), 0);
	pair_drop();
}

/* Every rail of seg usable again (repaired, not down, not paused). */
static bool rails_all_up(struct ferry_engine *e, ferry_seg_t seg)
{
	const struct ferry_seg *s = seg_at(&e->segs, (uint32_t)(seg & 0xffffffffu) - 1);

	for (unsigned i = 0; i < e->ncores; i++)
		if (rail_unusable(s, i))
			return false;
	return true;
}

/*
 * A device that gave nothing back while core 1's CQ was full: the QPs
 * given up took the CQ's whole room with them (qpx_abandon shrinks it for
 * good).  The device comes back, the QPs are repaired and the rail is up,
 * but core 1 can post nothing any more: the slices striped to it must not
 * wait there for ever (they move to core 0 after the slice timeout, like
 * slices on an endpoint whose QPs are all broken).  Before, the second
 * batch stayed PENDING.
 */
static void test_dead_device_cq_room_gone(void **state)
{
	struct ferry_req reqs[4];
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_core_stats st;
	struct ferry_opts o;

	(void)state;
	need_loop();
	pair_opts(&o, "0-1");
	o.timeout_ms = 200;
	o.slice_size = 16384;
	o.wrs_per_qp = 8;
	o.signal_every = 4;
	o.cqes = 16; /* two QPs of 8: the dead device holds the whole CQ */
	pair_setup_knobs(&P, &o, &o, BUF, &dead_device_knobs);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	loop_set_faults(ferry_engine_nic(P.init, 1), &(struct loop_faults){ .dead = 1 });
	slot_writes(reqs, 4, 1);
	ferry_log_set(log_count, NULL);
	assert_int_equal(ferry_submit(b, reqs, 4), 0);
	assert_int_equal(ferry_batch_wait(b, 20000), 0);
	assert_int_equal(ferry_core_stats(P.init, 1, &st), 0);
	assert_true(st.qp_abandons >= 1);
	/* The device was only slow: back, its QPs repaired, the rail up. */
	loop_set_faults(ferry_engine_nic(P.init, 1), &(struct loop_faults){ 0 });
	WAIT_UNTIL(ferry_core_stats(P.init, 1, &st) == 0 && st.qp_resets >= 2, WAIT_MS,
		   "core 1's QPs repaired");
	WAIT_UNTIL(rails_all_up(P.init, P.seg), WAIT_MS, "the rails up");
	print_message("core 1: %llu QPs given up, CQ room left %u of 16\n",
		      (unsigned long long)st.qp_abandons,
		      depth_load(&P.init->cores[1]->tx[0].cq_quota.max)); /* the core writes it */
	assert_int_equal(ferry_batch_reset(b), 0);
	slot_writes(reqs, 4, 11);
	assert_int_equal(ferry_submit(b, reqs, 4), 0);
	assert_int_equal(ferry_batch_wait(b, 10000), 0);
	ferry_log_set(NULL, NULL);
	for (unsigned i = 0; i < 4; i++)
		assert_memory_equal(P.rbuf + i * SLOT, P.lbuf + i * SLOT, SLOT);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	pair_drop();
}

/*
 * A peer whose control port refuses for a while though its process lives
 * (the engine's test switch refuses its repairs): the refusal takes every
 * rail down and flushes what was in flight, as for a dead peer; once it
 * answers again the QPs are repaired, the rails come back and requests
 * move.  And the repair jobs that piled up meanwhile (a core asks again
 * each second while a QP stays broken) end: before, a QP replaced by one
 * job made its twins fail -EBUSY and hand-shake again every 2 s until the
 * segment closed.
 */
static void test_peer_refuses_then_answers(void **state)
{
	struct ferry_req reqs[BATCH], r;
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;
	uint64_t seed = 17;
	struct counts c;

	(void)state;
	need_loop();
	setup_pair(200);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, BATCH, &b), 0);
	WRITE_ONCE(P.init->repair.refuse_until_ms, ferry_now_ms() + 1500);
	set_faults(P.init, &(struct loop_faults){ .lost_ppm = 1000000, .seed = 7 });
	r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg, P.rbuf, 4096);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	ferry_batch_wait(b, WAIT_MS);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -EHOSTDOWN);
	assert_true(rails_all_down(P.init, P.seg));
	set_faults(P.init, NULL);
	assert_int_equal(ferry_batch_reset(b), 0);

	WAIT_UNTIL(rails_all_up(P.init, P.seg), WAIT_MS, "the rails back once the peer answers");
	prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
	c = run_checked(b, reqs, BATCH, NULL);
	assert_int_equal(c.done, BATCH);
	WAIT_UNTIL(READ_ONCE(P.init->repair.n_later) == 0, WAIT_MS, "no repair job left");
	print_message("peer refused 1.5 s: %llu repair handshakes in all\n",
		      (unsigned long long)READ_ONCE(P.init->repair.handshakes));

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

/*
 * An initiator that goes away without disconnecting (killed: here, one
 * that never sends keepalives) loses its QPs on the target once its lease
 * runs out; an initiator that keeps sending keeps them and keeps working.
 */
static void test_lease(void **state)
{
	struct ferry_opts io, to, so;
	struct ferry_engine *silent;
	uint64_t seed = 5;
	ferry_seg_t sseg;
	unsigned live;

	(void)state;
	pair_opts(&io, "0-1");
	io.keepalive_ms = 50;
	pair_opts(&to, "0-1");
	to.lease_ms = 400;
	pair_setup(&P, &io, &to, BUF);
	pair_opts(&so, "0");
	so.keepalive_ms = 0;
	if (getenv("FERRY_TEST_INIT_NICS"))
		so.nics = getenv("FERRY_TEST_INIT_NICS");
	assert_int_equal(ferry_engine_create(&so, &silent), 0);
	assert_int_equal(ferry_segment_open(silent, ferry_engine_address(P.target), &sseg), 0);
	live = passive_count_of(P.target, P.init->incarnation);
	assert_true(live > 0);
	assert_true(passive_count_of(P.target, silent->incarnation) > 0);
	WAIT_UNTIL(passive_count_of(P.target, silent->incarnation) == 0, WAIT_DEADLINE_MS,
		   "the target to drop the silent initiator's QPs (lease %u ms)", to.lease_ms);
	assert_int_equal(passive_count_of(P.target, P.init->incarnation), live);

	assert_batch_done(seed);
	assert_int_equal(ferry_segment_close(silent, sseg), 0);
	ferry_engine_destroy(silent);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}

struct closer {
	pthread_t thread;
	struct ferry_engine *e;
	ferry_seg_t seg;
	int rc;
	int returned; /* atomic */
};

static void *closer_main(void *arg)
{
	struct closer *c = arg;

	c->rc = ferry_segment_close(c->e, c->seg);
	__atomic_store_n(&c->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * The last close of a segment waits for its requests in flight (up to
 * retries x timeout_ms each, or for good with timeout_ms 0), and the peer
 * must keep our QPs meanwhile: the keepalives go on for a closing segment.
 * Here a reference held by the test stands for a request the close waits
 * for, three leases long.  Before, keepalives went to open segments only:
 * the peer freed every QP of ours under the requests still in flight
 * (here: 0 of 2 left after 300 ms, lease 100 ms).
 */
static void test_lease_kept_while_closing(void **state)
{
	struct ferry_opts io, to;
	struct closer c = { 0 };
	struct ferry_seg *s;
	uint32_t slot;
	unsigned before, during;
	int early;
	double t0;

	(void)state;
	pair_opts(&io, "0");
	io.keepalive_ms = 20;
	pair_opts(&to, "0");
	to.lease_ms = 100;
	pair_setup(&P, &io, &to, BUF);
	before = passive_count_of(P.target, P.init->incarnation);
	assert_true(before > 0);
	s = seg_acquire(P.init, P.seg, &slot); /* a request in flight */
	assert_non_null(s);
	c.e = P.init;
	c.seg = P.seg;
	assert_int_equal(pthread_create(&c.thread, NULL, closer_main, &c), 0);
	WAIT_UNTIL(load_sc(s->state) == SEG_CLOSING, WAIT_MS, "the close to begin");
	t0 = now_s();
	while (now_s() - t0 < 3 * to.lease_ms / 1000.0)
		usleep(10 * 1000);
	during = passive_count_of(P.target, P.init->incarnation);
	early = __atomic_load_n(&c.returned, __ATOMIC_ACQUIRE);
	seg_release_ref(s); /* before any assert: the closer waits for it */
	assert_int_equal(pthread_join(c.thread, NULL), 0);
	assert_int_equal(c.rc, 0);
	assert_false(early);
	P.seg = 0;
	print_message("QPs the peer kept while the close waited 3 leases: %u of %u\n", during,
		      before);
	assert_int_equal(during, before);
	/* Closed: the DISCONNECTs free them now. */
	WAIT_UNTIL(passive_count_of(P.target, P.init->incarnation) == 0, WAIT_MS,
		   "the peer to free the closed segment's QPs");
	pair_teardown(&P);
}

/* A CONNECT_REQ for the target's loop NIC 0: n_qps QPs named token.. */
static void passive_req(struct ferry_engine *e, uint64_t token, struct wire_connect_req *r)
{
	struct seg_desc d;

	memset(r, 0, sizeof(*r));
	assert_int_equal(engine_describe(e, &d), 0);
	r->incarnation = 0x1234;
	r->token = token;
	r->target_incarnation = e->incarnation;
	r->n_qps = WIRE_MAX_EP_QPS;
	r->nic = d.nics[0];
	for (unsigned k = 0; k < WIRE_MAX_EP_QPS; k++)
		r->qps[k].qpn = 100 + k;
	seg_desc_free(&d);
}

/*
 * At the cap of responder QPs, an initiator that asks again for QPs it
 * holds (its reply was lost) replaces them: the count does not grow, so
 * the cap must not refuse it.  It did (-ENOSPC: the request was counted
 * as new QPs on top of the ones it replaces), and the initiator's old QPs
 * stayed.  QPs of new names are still refused.
 */
static void test_passive_cap_replaces(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	uint64_t token = 1;
	unsigned held;
	int rc = 0;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	for (unsigned i = 0; i < 4096 && !rc; i++, token += WIRE_MAX_EP_QPS) {
		passive_req(e, token, &req);
		rc = passive_connect(e, &req, &rep);
	}
	assert_int_equal(rc, -ENOSPC); /* at the cap */
	held = passive_count(e);
	assert_true(held > WIRE_MAX_EP_QPS);

	passive_req(e, 1, &req); /* the first ones again */
	assert_int_equal(passive_connect(e, &req, &rep), 0);
	assert_int_equal(rep.n_qps, WIRE_MAX_EP_QPS);
	assert_int_equal(passive_count(e), held);
	passive_req(e, token, &req); /* new ones: still refused */
	assert_int_equal(passive_connect(e, &req, &rep), -ENOSPC);
	assert_int_equal(passive_count(e), held);
	ferry_engine_destroy(e);
}

/* DISCONNECTs of tokens token..token + n - 1 of initiator 0x1234, each
 * answered rc. */
static void passive_disc(struct ferry_engine *e, uint64_t token, unsigned n, int rc)
{
	for (unsigned k = 0; k < n; k++) {
		struct wire_disconnect d = { .incarnation = 0x1234, .token = token + k };

		assert_int_equal(passive_disconnect(e, &d), rc);
	}
}

/*
 * An initiator that gave up on a handshake (no answer in time) sends a
 * DISCONNECT for its tokens; nothing orders it after the CONNECT_REQ,
 * which may wait in the target's backlog on a fresh dial while the
 * DISCONNECT comes on a connection already accepted (ctl_pass serves
 * those first).  Played here as the control thread would serve them: the
 * DISCONNECTs first (-ENOENT, nothing held), then the late CONNECT_REQ.
 * Before, it made its QPs, and the initiator's keepalives kept them for
 * its lifetime; now it is refused -ECANCELED and nothing is held.  A
 * request overlapping a single such token is refused too; requests of
 * new tokens, and of the same tokens from another incarnation (a
 * restarted initiator), are made; a name forgotten only after 1024 newer
 * ones (PASSIVE_GONE_MAX), repeats of a DISCONNECT counted once.
 */
static void test_passive_late_connect_after_disconnect(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	const uint64_t n = WIRE_MAX_EP_QPS;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	assert_int_equal(ferry_engine_create(&o, &e), 0);

	passive_disc(e, 1, n, -ENOENT); /* the give-up's DISCONNECTs, first */
	passive_disc(e, 1, n, -ENOENT); /* (retried: counted once) */
	passive_req(e, 1, &req);        /* the late CONNECT_REQ */
	assert_int_equal(passive_connect(e, &req, &rep), -ECANCELED);
	assert_int_equal(rep.n_qps, 0);
	assert_int_equal(passive_count_of(e, 0x1234), 0);
	assert_int_equal(passive_keepalive(e, 0x1234), -ENOENT);

	passive_disc(e, 3 * n, 1, -ENOENT); /* one token inside the next request */
	passive_req(e, 2 * n + 1, &req);
	assert_int_equal(passive_connect(e, &req, &rep), -ECANCELED);
	assert_int_equal(passive_count(e), 0);

	passive_req(e, 4 * n + 1, &req); /* new tokens: made, and freed by name */
	assert_int_equal(passive_connect(e, &req, &rep), 0);
	assert_int_equal(passive_count_of(e, 0x1234), n);
	passive_disc(e, 4 * n + 1, n, 0);
	passive_req(e, 1, &req); /* the same tokens, a restarted initiator */
	req.incarnation = 0x5678;
	assert_int_equal(passive_connect(e, &req, &rep), 0);
	assert_int_equal(passive_count_of(e, 0x5678), n);

	/* The record is bounded: 1024 newer names push token 1 out. */
	passive_disc(e, 1u << 20, 1024, -ENOENT);
	passive_req(e, 1, &req);
	assert_int_equal(passive_connect(e, &req, &rep), 0);
	ferry_engine_destroy(e);
}

/*
 * A CONNECT_REQ whose QPs say "dial me" (tcp's TCP_PSN_LISTEN, bit 31 of
 * the psn), naming a plain listener as the initiator's NIC, sent to a
 * target's control server: a target never dials out, so the answer is an
 * error (-EPROTO), no QP stays and the listener gets no connection.
 * Before, the target's responder QPs dialled whatever address the request
 * named, from the control thread (up to 5 s per QP), and the request
 * succeeded.  A lawful request after it still connects.
 */
static void test_passive_refuses_dial_me(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct ferry_opts o;
	struct ferry_engine *e;
	struct wire_connect_req req;
	struct wire_connect_rep rep;
	struct ctl_client cl;
	int lfd;

	(void)state;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, WIRE_MAX_EP_QPS), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "tcp";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	assert_int_equal(ctl_client_init(&cl, NULL), 0);

	passive_req(e, 1, &req);
	/* The initiator's NIC: the listener (qp/tcp's nic_addr: "TCP1",
	 * IPv4, port, network order). */
	memcpy(req.nic.addr.bytes + 4, &sa.sin_addr.s_addr, 4);
	memcpy(req.nic.addr.bytes + 8, &sa.sin_port, 2);
	for (unsigned k = 0; k < req.n_qps; k++)
		req.qps[k].psn = 0x80000000u | k;
	assert_int_equal(ctl_connect(&cl, ferry_engine_address(e), WAIT_MS, &req, &rep), -EPROTO);
	assert_int_equal(rep.n_qps, 0);
	assert_int_equal(passive_count(e), 0);
	/* A dial would have finished before the answer left: its connection
	 * would be waiting in the backlog now. */
	assert_int_equal(accept(lfd, NULL, NULL), -1);
	assert_int_equal(errno, EAGAIN);

	passive_req(e, 1, &req); /* the initiator's QPs as the engine sends them */
	assert_int_equal(ctl_connect(&cl, ferry_engine_address(e), WAIT_MS, &req, &rep), 0);
	assert_int_equal(rep.n_qps, WIRE_MAX_EP_QPS);
	assert_true(rep.qps[0].psn & 0x80000000u); /* the target's QPs wait to be dialled */
	assert_int_equal(passive_count(e), WIRE_MAX_EP_QPS);
	ctl_client_fini(&cl);
	ferry_engine_destroy(e);
	close(lfd);
}

/*
 * Engines destroyed with segments open in both directions and requests
 * ended (batch destroyed, port left to the engine): the peer's half of
 * every QP, the descriptors and the endpoints must all be freed.  The
 * target goes first every other time: the initiator's disconnects then
 * find nobody.
 */
static void test_destroy_with_open_segments(void **state)
{
	double t0 = now_s();

	(void)state;
	for (unsigned it = 0; it < DESTROYS; it++) {
		struct ferry_req reqs[BATCH];
		struct ferry_port *port;
		struct ferry_batch *b;
		ferry_seg_t back;
		uint64_t seed = it;

		setup_pair(2000);
		assert_int_equal(ferry_segment_open(P.target, ferry_engine_address(P.init), &back), 0);
		assert_int_equal(ferry_port_create(P.init, &port), 0);
		assert_int_equal(ferry_batch_create(port, BATCH, &b), 0);
		prepare(reqs, BATCH, P.seg, P.lbuf, P.rbuf, SLOT, &seed);
		assert_int_equal(ferry_submit(b, reqs, BATCH), 0);
		assert_int_equal(ferry_batch_wait(b, WAIT_MS), 0);
		assert_int_equal(ferry_batch_destroy(b), 0);
		if (it & 1) {
			ferry_engine_destroy(P.target);
			ferry_engine_destroy(P.init);
		} else {
			ferry_engine_destroy(P.init);
			ferry_engine_destroy(P.target);
		}
		free(P.lbuf);
		free(P.rbuf);
	}
	print_message("%u engine pairs destroyed with segments open in %.1f s\n", DESTROYS,
		      now_s() - t0);
}

/* ---- submitting while another thread closes and reopens ---- */

#define SUBMITTERS 2
#define SUB_BATCH 4
#define SUB_SLOT (BUF / (SUBMITTERS * SUB_BATCH)) /* 2 MiB */
#define REOPENS 100

static ferry_seg_t cur_seg; /* atomic: the handle submitters use now (0 while closed) */
static int stop_submitters; /* atomic */

struct submitter {
	pthread_t thread;
	unsigned id;
	struct counts c;
	unsigned rounds;   /* batches finished; atomic (the closer watches it) */
	unsigned refusals; /* atomic: c.refused, published after each batch */
	int exited;        /* atomic: the thread is done, for good or not */
	const char *problem;
	int problem_err;
};

static void submitter_loop(struct submitter *s)
{
	uint8_t *lbase = P.lbuf + (size_t)s->id * SUB_BATCH * SUB_SLOT;
	uint8_t *rbase = P.rbuf + (size_t)s->id * SUB_BATCH * SUB_SLOT;
	struct ferry_req reqs[SUB_BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;
	ferry_seg_t stale = 0;
	uint64_t seed = 77 + s->id;

	if (ferry_port_create(P.init, &port) || ferry_batch_create(port, SUB_BATCH, &b)) {
		s->problem = "no port or batch";
		return;
	}
	while (!__atomic_load_n(&stop_submitters, __ATOMIC_ACQUIRE)) {
		ferry_seg_t h = __atomic_load_n(&cur_seg, __ATOMIC_ACQUIRE);
		int rc;

		/* Now and then an older handle, closed since or not. */
		if (stale && s->rounds % 7 == 3)
			h = stale;
		else if (h && h != stale && s->rounds % 5 == 0)
			stale = h;
		prepare(reqs, SUB_BATCH, h, lbase, rbase, SUB_SLOT, &seed);
		rc = ferry_submit(b, reqs, SUB_BATCH);
		if (rc != 0) {
			s->problem = "ferry_submit refused the batch";
			s->problem_err = rc;
			break;
		}
		rc = ferry_batch_wait(b, WAIT_MS);
		if (rc != 0 && rc != -EIO) {
			s->problem = "batch did not end";
			s->problem_err = rc;
			return; /* pending requests pin the batch */
		}
		for (uint32_t i = 0; i < SUB_BATCH && !s->problem; i++) {
			s->problem = check(b, i, &reqs[i], NULL, &s->c);
			if (s->problem) {
				struct ferry_req_status st;

				ferry_req_status(b, i, &st);
				s->problem_err = st.error;
			}
		}
		__atomic_store_n(&s->refusals, s->c.refused, __ATOMIC_RELEASE);
		if (s->problem)
			break;
		/* A closed handle is refused at once: do not flood the closer's CPU. */
		if (!h)
			sched_yield();
		ferry_batch_reset(b);
		__atomic_fetch_add(&s->rounds, 1, __ATOMIC_RELEASE);
	}
	ferry_batch_destroy(b);
	ferry_port_destroy(port);
}

static void *submitter_main(void *arg)
{
	struct submitter *s = arg;

	submitter_loop(s);
	__atomic_store_n(&s->exited, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * What the closer waits for, each also true once a submitter has stopped:
 * it will not go on, and the join reports why.
 */
static bool submitter_stopped(const struct submitter *s)
{
	for (unsigned i = 0; i < SUBMITTERS; i++)
		if (__atomic_load_n(&s[i].exited, __ATOMIC_ACQUIRE))
			return true;
	return false;
}

static unsigned rounds_of(const struct submitter *s, unsigned i)
{
	return __atomic_load_n(&s[i].rounds, __ATOMIC_ACQUIRE);
}

static unsigned all_rounds(const struct submitter *s)
{
	unsigned n = 0;

	for (unsigned i = 0; i < SUBMITTERS; i++)
		n += rounds_of(s, i);
	return n;
}

static unsigned all_refusals(const struct submitter *s)
{
	unsigned n = 0;

	for (unsigned i = 0; i < SUBMITTERS; i++)
		n += __atomic_load_n(&s[i].refusals, __ATOMIC_ACQUIRE);
	return n;
}

/* The submitters together finished n batches since they had finished base. */
static bool ran(const struct submitter *s, unsigned base, unsigned n)
{
	return submitter_stopped(s) || all_rounds(s) - base >= n;
}

/* Each submitter finished n batches since base[its id]. */
static bool each_ran(const struct submitter *s, const unsigned *base, unsigned n)
{
	if (submitter_stopped(s))
		return true;
	for (unsigned i = 0; i < SUBMITTERS; i++)
		if (rounds_of(s, i) - base[i] < n)
			return false;
	return true;
}

/* A submitter was refused (-EBADF) since there were base refusals. */
static bool refused_since(const struct submitter *s, unsigned base)
{
	return submitter_stopped(s) || all_refusals(s) > base;
}

static void test_submit_while_reopening(void **state)
{
	struct submitter s[SUBMITTERS];
	unsigned last[SUBMITTERS];
	const char *addr;
	uint64_t seed = 5;
	struct counts c = { 0 };
	unsigned rounds = 0;
	double t0 = now_s();

	(void)state;
	setup_pair(2000);
	addr = ferry_engine_address(P.target);
	__atomic_store_n(&cur_seg, P.seg, __ATOMIC_RELEASE);
	__atomic_store_n(&stop_submitters, 0, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < SUBMITTERS; i++) {
		s[i] = (struct submitter){ .id = i };
		assert_int_equal(pthread_create(&s[i].thread, NULL, submitter_main, &s[i]), 0);
	}
	for (unsigned it = 0; it < REOPENS; it++) {
		unsigned base = all_rounds(s), n = splitmix(&seed) % 4;
		ferry_seg_t h;

		/* The open handle in use for 0 to 3 batches, then closed. */
		WAIT_UNTIL(ran(s, base, n), WAIT_MS, "%u batches of the submitters", n);
		/* Submitters may still hold the old value: their requests to it
		 * either got in before the close (and end) or see -EBADF. */
		if (it % 4 == 1)
			__atomic_store_n(&cur_seg, 0, __ATOMIC_RELEASE);
		base = all_refusals(s);
		assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
		/* Every other time, reopen only once a submitter met the closed handle. */
		if (splitmix(&seed) & 1)
			WAIT_UNTIL(refused_since(s, base), WAIT_MS,
				   "a submitter to be refused the closed handle");
		assert_int_equal(ferry_segment_open(P.init, addr, &h), 0);
		P.seg = h;
		__atomic_store_n(&cur_seg, h, __ATOMIC_RELEASE);
	}
	/* Each uses the last handle before stopping: of two batches finished
	 * from now, the second was submitted after the handle was published. */
	for (unsigned i = 0; i < SUBMITTERS; i++)
		last[i] = rounds_of(s, i);
	WAIT_UNTIL(each_ran(s, last, 2), WAIT_MS, "each submitter to finish 2 more batches");
	__atomic_store_n(&stop_submitters, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < SUBMITTERS; i++) {
		pthread_join(s[i].thread, NULL);
		if (s[i].problem)
			fail_msg("submitter %u: %s (%d)", i, s[i].problem, s[i].problem_err);
		c.done += s[i].c.done;
		c.failed += s[i].c.failed;
		c.refused += s[i].c.refused;
		c.timedout += s[i].c.timedout;
		for (unsigned k = 0; k < 3; k++)
			c.by_err[k] += s[i].c.by_err[k];
		rounds += s[i].rounds;
	}
	print_message("%u reopens under %u submitters in %.1f s (%u batches): done %u, refused "
		      "-EBADF %u, failed %u (ECANCELED %u, EHOSTDOWN %u), timeout %u\n", REOPENS,
		      SUBMITTERS, now_s() - t0, rounds, c.done, c.refused, c.failed, c.by_err[0],
		      c.by_err[1], c.timedout);
	assert_true(c.done > 0);
	assert_true(c.refused > 0);
	assert_int_equal(c.timedout + c.by_err[2], 0);
	assert_quiet_and_close(P.init, &P.seg);
	pair_teardown(&P);
}
/* File descriptors this process has open. */
static unsigned fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	unsigned n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1; /* opendir's own */
}

/* An engine on two cores over tcp (whatever FERRY_TEST_*_NICS say: tcp
 * dials a connection per QP), with buf registered. */
static struct ferry_engine *tcp_engine(void *buf, size_t len)
{
	struct ferry_engine *e;
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.nics = "tcp";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	assert_int_equal(ferry_mem_register(e, buf, len), 0);
	return e;
}

/*
 * An open whose QPs cannot connect for want of file descriptors here
 * fails with that reason: -EMFILE, not -EPROTONOSUPPORT ("no transport of
 * ours reaches the peer"), which it was when every failed QP connect was
 * taken for an unreachable NIC.  It leaves no descriptor, and no QP at the
 * peer, behind, and the next open works.  The control connection to the
 * peer is kept from a first open, so only the QPs' dials need new ones.
 */
static void test_open_out_of_fds(void **state)
{
	static uint8_t lbuf[65536], rbuf[65536];
	struct ferry_engine *init = tcp_engine(lbuf, sizeof(lbuf));
	struct ferry_engine *target = tcp_engine(rbuf, sizeof(rbuf));
	const char *addr = ferry_engine_address(target);
	struct ferry_req_status st;
	struct rlimit old, none;
	struct ferry_port *port;
	ferry_seg_t seg;
	unsigned fds;
	int rc, lowest;

	(void)state;
	assert_int_equal(ferry_port_create(init, &port), 0);
	assert_int_equal(ferry_segment_open(init, addr, &seg), 0);
	assert_int_equal(ferry_segment_close(init, seg), 0);
	assert_int_equal(passive_count_of(target, init->incarnation), 0);
	fds = fds_open();
	lowest = dup(0); /* the next descriptor's number: none from it on */
	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	none = old;
	none.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
	rc = ferry_segment_open(init, addr, &seg);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(rc, -EMFILE);
	/* The peer made its halves: freed by the open's DISCONNECTs (or, if
	 * those could not dial either, by their retries). */
	WAIT_UNTIL(passive_count_of(target, init->incarnation) == 0, WAIT_MS,
		   "the peer to free the failed open's QPs");
	assert_int_equal(fds_open(), fds);
	assert_int_equal(ferry_segment_open(init, addr, &seg), 0);
	st = run_one_on(port, mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, 4096), WAIT_MS);
	assert_int_equal(st.state, FERRY_DONE);
	assert_int_equal(ferry_segment_close(init, seg), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_mem_unregister(init, lbuf), 0);
	assert_int_equal(ferry_mem_unregister(target, rbuf), 0);
	ferry_engine_destroy(init);
	ferry_engine_destroy(target);
}

/*
 * "localhost:port" names the same engine as "127.0.0.1:port" (when
 * localhost is 127.0.0.1 here): an open under either spelling of an
 * address open already returns its handle and counts one more open, as
 * ferry.h says of an address open already.  The table was keyed by the
 * string: the second spelling opened a second segment, with endpoints and
 * QPs of its own, and closing it closed nothing of the first.
 */
static void test_open_other_spelling(void **state)
{
	struct sockaddr_in sin;
	char alt[64];
	ferry_seg_t seg;
	const char *port;

	(void)state;
	if (sock_resolve_peer("localhost:1", &sin) || sin.sin_addr.s_addr != htonl(INADDR_LOOPBACK))
		skip(); /* localhost is not 127.0.0.1 on this host */
	setup_pair(2000);
	port = strrchr(ferry_engine_address(P.target), ':');
	assert_non_null(port);
	assert_int_equal(strncmp(ferry_engine_address(P.target), "127.0.0.1:", 10), 0);
	snprintf(alt, sizeof(alt), "localhost%s", port);
	assert_int_equal(ferry_segment_open(P.init, alt, &seg), 0);
	assert_true(seg == P.seg);
	assert_int_equal(ferry_segment_close(P.init, seg), 0); /* one of two opens */
	assert_batch_done(7);
	pair_teardown(&P);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_close_in_flight),
		cmocka_unit_test(test_close_in_flight_faults),
		cmocka_unit_test(test_close_stalled),
		cmocka_unit_test(test_peer_restart),
		cmocka_unit_test(test_stale_segment_idle),
		cmocka_unit_test(test_stale_segment_port_up),
		cmocka_unit_test(test_peer_killed_silent),
		cmocka_unit_test(test_destroy_beside_dead_device),
		cmocka_unit_test(test_dead_device_while_running),
		cmocka_unit_test(test_dead_device_cq_room_gone),
		cmocka_unit_test(test_dead_device_request_times_out),
		cmocka_unit_test(test_peer_refuses_then_answers),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_lease_kept_while_closing),
		cmocka_unit_test(test_passive_cap_replaces),
		cmocka_unit_test(test_passive_late_connect_after_disconnect),
		cmocka_unit_test(test_passive_refuses_dial_me),
		cmocka_unit_test(test_destroy_with_open_segments),
		cmocka_unit_test(test_submit_while_reopening),
		cmocka_unit_test(test_open_out_of_fds),
		cmocka_unit_test(test_open_other_spelling),
	};

	if (getenv("FERRY_TEST_ONLY")) /* one test by name (a pattern) */
		cmocka_set_test_filter(getenv("FERRY_TEST_ONLY"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
