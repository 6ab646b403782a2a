/* SPDX-License-Identifier: MIT */
/*
 * The lease thread sizes its list of peers while an open adds segment
 * slots: it must size it under ctl_lock, as it walks the slots.  (Sized
 * before, an open that grew the table and finished in between made the
 * lease thread write past the list: ASan's heap-buffer-overflow, found by
 * an independent review.)  The open's two steps under ctl_lock
 * (slot_reserve -> seg_table_grow, then SEG_OPEN) are played here by hand
 * while the lease thread waits for the lock, so the window is hit every
 * time.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring/base/clock.h"
#include "tests/harness/harness.h"

static void fake_open(struct ferry_engine *e, uint32_t slot)
{
	struct ferry_seg *s = seg_at(&e->segs, slot);

	/* Port 1 on loopback: refused at once, the rounds stay short. */
	snprintf(s->address, sizeof(s->address), "127.0.0.%u:1", 1 + slot % 250);
	if (slot >= 250)
		snprintf(s->address, sizeof(s->address), "127.0.1.%u:1", 1 + slot % 250);
	s->stale = 0;
	store_sc(s->state, SEG_OPEN);
}

static void test_slots_grow_during_round(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	uint64_t rounds;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	o.keepalive_ms = 10;
	assert_int_equal(ferry_engine_create(&o, &e), 0);

	/* 64 open segments: one full chunk of slots. */
	pthread_mutex_lock(&e->ctl_lock);
	assert_int_equal(seg_table_grow(&e->segs), 0);
	for (uint32_t i = 0; i < SEG_CHUNK; i++)
		fake_open(e, i);
	pthread_mutex_unlock(&e->ctl_lock);
	rounds = READ_ONCE(e->lease.rounds);
	WAIT_UNTIL(READ_ONCE(e->lease.rounds) >= rounds + 2, 10000, "two keepalive rounds");

	/* Hold ctl_lock: the lease thread sizes its buffer for 64 slots, then
	 * waits for the lock; meanwhile an open grows the table and finishes. */
	pthread_mutex_lock(&e->ctl_lock);
	usleep(200 * 1000);
	assert_int_equal(seg_table_grow(&e->segs), 0);
	fake_open(e, SEG_CHUNK);
	pthread_mutex_unlock(&e->ctl_lock);
	rounds = READ_ONCE(e->lease.rounds);
	WAIT_UNTIL(READ_ONCE(e->lease.rounds) >= rounds + 2, 10000, "two keepalive rounds");

	pthread_mutex_lock(&e->ctl_lock);
	for (uint32_t i = 0; i <= SEG_CHUNK; i++)
		store_sc(seg_at(&e->segs, i)->state, SEG_FREE);
	pthread_mutex_unlock(&e->ctl_lock);
	ferry_engine_destroy(e);
}

/* The thread named name: its /proc/self/task entry, or -1. */
static int task_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int tid = -1;

	assert_non_null(d);
	while (tid < 0 && (de = readdir(d))) {
		char path[320], comm[32] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, name, strlen(name)))
			tid = atoi(de->d_name);
		fclose(f);
	}
	closedir(d);
	return tid;
}

/* Thread tid is blocked in poll or ppoll (x86_64: 7, 271). */
static bool task_in_poll(int tid)
{
	char path[96], buf[64] = "";
	FILE *f;
	long nr;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	nr = strtol(buf, NULL, 10);
	return buf[0] >= '0' && buf[0] <= '9' && (nr == 7 || nr == 271);
}

/*
 * lease_ms near UINT32_MAX (accepted: the option has no upper bound): the
 * next expiry was now + (lease_ms + 3) / 4 in 32 bits, which wrapped to
 * now + 0 for 4294967293..4294967295, so the lease thread expired and
 * polled with a zero timeout for ever (a core's worth of CPU).  Once the
 * thread waits in poll (it does only after a round), it is stopped and
 * its next expiry read (the join orders the read after its write).
 */
static void test_longest_lease_no_spin(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	uint64_t next;
	int tid;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	o.keepalive_ms = 0;
	o.lease_ms = UINT32_MAX;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	tid = task_named("ferry-lease");
	assert_true(tid > 0);
	/* Spinning (the bug), it is hardly ever seen in poll: look a while,
	 * then check anyway -- its next expiry is in the past then. */
	for (int i = 0; i < 2000 && !task_in_poll(tid); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	lease_stop(e);
	next = e->lease.next_expire_ms;
	assert_true(next != 0); /* a round ran */
	if (next < ferry_now_ms() + UINT32_MAX / 8)
		fail_msg("next expiry %llu ms, now %llu: the lease thread expires in a loop",
			 (unsigned long long)next, (unsigned long long)ferry_now_ms());
	ferry_engine_destroy(e);
}

/*
 * A target's lease expiry that waited for passive_lock (its control thread
 * serving a CONNECT or a KEEPALIVE, a stall of the test) while a KEEPALIVE
 * of a live initiator renewed its QPs: it read its clock before the lock,
 * so their renewal was later than its "now", now - seen_ns wrapped around
 * and it freed every QP just renewed (or just made) as silent for ages:
 * a live initiator's QPs gone under it.  (test_slow_peers'
 * test_late_handshake_answer holds passive_lock, so an expiry waits there
 * about once in ten runs; the QP its repair had just made was then freed,
 * and the test waited 30 s for the peer's count to come back.)  Here the
 * expiry (a lease of a minute: nothing is that old) waits for the lock we
 * hold, and we renew the lease as we let go: we take the lock again
 * before the woken expiry runs nearly always, and ten rounds make sure.
 */
struct expiry {
	struct ferry_engine *e;
	pid_t tid;
	unsigned freed;
};

static void *expiry_main(void *arg)
{
	struct expiry *x = arg;

	__atomic_store_n(&x->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	x->freed = passive_expire(x->e, 60ull * 1000 * 1000 * 1000);
	return NULL;
}

/* Whether thread tid sleeps (here: waits for the lock, nothing else in
 * passive_expire sleeps). */
static bool task_sleeps(pid_t tid)
{
	char path[64], buf[256], *p;
	FILE *f;
	bool s = false;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		s = p[1] == ' ' && p[2] == 'S';
	if (f)
		fclose(f);
	return s;
}

static void test_expire_beside_renewal(void **state)
{
	struct ferry_opts o;
	struct pair p;
	unsigned base;

	(void)state;
	pair_opts(&o, "0");
	pair_setup(&p, &o, &o, 1 << 16);
	base = passive_count_of(p.target, p.init->incarnation);
	assert_true(base > 0);
	for (int round = 0; round < 10; round++) {
		struct expiry x = { .e = p.target };
		pthread_t t;
		pid_t tid;

		pthread_mutex_lock(&p.target->passive_lock);
		assert_int_equal(pthread_create(&t, NULL, expiry_main, &x), 0);
		WAIT_UNTIL((tid = __atomic_load_n(&x.tid, __ATOMIC_ACQUIRE)) && task_sleeps(tid),
			   10000, "the expiry waiting for passive_lock");
		pthread_mutex_unlock(&p.target->passive_lock);
		assert_int_equal(passive_keepalive(p.target, p.init->incarnation), 0);
		pthread_join(t, NULL);
		assert_int_equal(x.freed, 0);
		assert_int_equal(passive_count_of(p.target, p.init->incarnation), base);
	}
	pair_teardown(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_grow_during_round),
		cmocka_unit_test(test_longest_lease_no_spin),
		cmocka_unit_test(test_expire_beside_renewal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
