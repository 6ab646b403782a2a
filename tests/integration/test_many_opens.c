/* SPDX-License-Identifier: MIT */
/*
 * 256 initiator engines (one process, loop NIC, one core each) open one
 * target at once, while a client trickles one byte per second on the
 * target's control port the whole time (reconnecting whenever the target
 * cuts it off at its request deadline): every open succeeds.  The wall
 * time of the 256 opens is printed, not judged.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness/harness.h"

#define N_INIT 256

struct opener {
	struct ferry_engine *e;
	const char *address;
	pthread_barrier_t *go;
	ferry_seg_t seg;
	int rc;
};

static void *open_one(void *arg)
{
	struct opener *o = arg;

	pthread_barrier_wait(o->go);
	o->rc = ferry_segment_open(o->e, o->address, &o->seg);
	return NULL;
}

struct trickler {
	struct sockaddr_in sin;
	int stop;  /* atomic */
	int bytes; /* atomic: sent, over all its connections */
	int conns;
};

/* One byte a second, a header that never ends; a new connection when cut. */
static void *trickle(void *arg)
{
	struct trickler *t = arg;

	while (!__atomic_load_n(&t->stop, __ATOMIC_RELAXED)) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0 || connect(fd, (struct sockaddr *)&t->sin, sizeof(t->sin))) {
			if (fd >= 0)
				close(fd);
			sleep(1);
			continue;
		}
		t->conns++;
		while (!__atomic_load_n(&t->stop, __ATOMIC_RELAXED) &&
		       send(fd, "F", 1, MSG_NOSIGNAL) == 1) {
			__atomic_fetch_add(&t->bytes, 1, __ATOMIC_RELAXED);
			sleep(1);
		}
		close(fd);
	}
	return NULL;
}

static void trickler_start(struct trickler *t, const char *address, pthread_t *th)
{
	char host[32];
	const char *colon = strrchr(address, ':');

	memset(t, 0, sizeof(*t));
	snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
	t->sin.sin_family = AF_INET;
	t->sin.sin_port = htons((uint16_t)atoi(colon + 1));
	assert_int_equal(inet_pton(AF_INET, host, &t->sin.sin_addr), 1);
	assert_int_equal(pthread_create(th, NULL, trickle, t), 0);
	/* It is connected and has sent its first byte before the opens start. */
	WAIT_UNTIL(__atomic_load_n(&t->bytes, __ATOMIC_RELAXED) > 0, WAIT_DEADLINE_MS,
		   "the trickler's first byte");
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct ferry_engine *small_engine(const char *cores)
{
	struct ferry_engine *e;
	struct ferry_opts o;

	pair_opts(&o, cores);
	o.cqes = 256;
	o.wrs_per_qp = 64;
	o.signal_every = 16;
	o.ring_size = 64;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	return e;
}

static void test_256_opens(void **state)
{
	static struct opener o[N_INIT];
	static pthread_t th[N_INIT];
	struct ferry_engine *t = small_engine("1");
	pthread_barrier_t go;
	struct trickler tr;
	pthread_t tth;
	double t0, dt;

	(void)state;
	for (int i = 0; i < N_INIT; i++)
		o[i] = (struct opener){ small_engine("0"), ferry_engine_address(t), &go, 0, 1 };
	trickler_start(&tr, ferry_engine_address(t), &tth);
	assert_int_equal(pthread_barrier_init(&go, NULL, N_INIT + 1), 0);
	for (int i = 0; i < N_INIT; i++)
		assert_int_equal(pthread_create(&th[i], NULL, open_one, &o[i]), 0);
	pthread_barrier_wait(&go);
	t0 = now_s();
	for (int i = 0; i < N_INIT; i++)
		pthread_join(th[i], NULL);
	dt = now_s() - t0;
	for (int i = 0; i < N_INIT; i++)
		assert_int_equal(o[i].rc, 0);
	printf("%d initiators opened one target at once in %.3f s (wall), a client "
	       "trickling 1 byte/s on its control port throughout (%d bytes on %d "
	       "connections so far); target served %llu requests\n",
	       N_INIT, dt, __atomic_load_n(&tr.bytes, __ATOMIC_RELAXED), tr.conns,
	       (unsigned long long)READ_ONCE(t->ctl.served));
	assert_int_equal(passive_count(t), N_INIT * 2);
	__atomic_store_n(&tr.stop, 1, __ATOMIC_RELAXED);
	pthread_join(tth, NULL);
	pthread_barrier_destroy(&go);
	for (int i = 0; i < N_INIT; i++) {
		assert_int_equal(ferry_segment_close(o[i].e, o[i].seg), 0);
		ferry_engine_destroy(o[i].e);
	}
	assert_int_equal(passive_count(t), 0);
	ferry_engine_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_256_opens),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
