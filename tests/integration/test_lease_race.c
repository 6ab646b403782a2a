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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_grow_during_round),
		cmocka_unit_test(test_longest_lease_no_spin),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
