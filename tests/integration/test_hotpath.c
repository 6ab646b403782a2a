/* SPDX-License-Identifier: MIT */
/*
 * The core loop never mallocs, locks or logs: this test interposes malloc &
 * co., the pthread lock functions and write(2), and counts calls made from
 * worker-core threads while requests stream through two engines.  After the
 * warm-up the counts must stay at zero.  (Plain build only: the sanitizers
 * interpose the same functions themselves.)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "tests/harness/harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INTERPOSE 0
#else
#define INTERPOSE 1
#endif

#define MAX_WATCHED 8

static pthread_t watched[MAX_WATCHED];
static int n_watched;
static int armed;
static unsigned long n_alloc, n_lock, n_write;

static __attribute__((unused)) int on_core(void)
{
	if (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE))
		return 0;
	for (int i = 0; i < n_watched; i++)
		if (pthread_equal(watched[i], pthread_self()))
			return 1;
	return 0;
}

#if INTERPOSE
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);

static void count(unsigned long *c)
{
	if (on_core())
		__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t size)
{
	count(&n_alloc);
	return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
	count(&n_alloc);
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
	count(&n_alloc);
	return __libc_realloc(p, size);
}

void *aligned_alloc(size_t align, size_t size)
{
	count(&n_alloc);
	return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
	count(&n_alloc);
	*out = __libc_memalign(align, size);
	return *out ? 0 : ENOMEM;
}

#define FORWARD(ret, name, proto, args)                                   \
	ret name proto                                                    \
	{                                                                 \
		static ret(*real) proto;                                  \
		if (!real)                                                \
			real = (ret(*) proto)dlsym(RTLD_NEXT, #name);     \
		count(&n_lock);                                           \
		return real args;                                         \
	}

FORWARD(int, pthread_mutex_lock, (pthread_mutex_t * m), (m))
FORWARD(int, pthread_mutex_trylock, (pthread_mutex_t * m), (m))
FORWARD(int, pthread_rwlock_rdlock, (pthread_rwlock_t * l), (l))
FORWARD(int, pthread_rwlock_wrlock, (pthread_rwlock_t * l), (l))
FORWARD(int, pthread_spin_lock, (pthread_spinlock_t * l), (l))

ssize_t write(int fd, const void *buf, size_t len)
{
	static ssize_t (*real)(int, const void *, size_t);

	if (!real)
		real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	count(&n_write);
	return real(fd, buf, len);
}
#endif

static void watch_cores(struct ferry_engine *e)
{
	for (unsigned i = 0; i < ferry_engine_cores(e); i++)
		watched[n_watched++] = e->cores[i]->thread;
}

/* rounds of 16 requests; arm: count from the second round to the last only
 * (the port and batch are made and freed outside, and the port's first
 * request looks its region up under the registry's lock: they may allocate
 * or lock, and are not a loop pass). */
static void stream_armed(struct pair *p, unsigned rounds, bool arm)
{
	struct ferry_port *port;
	struct ferry_batch *b;
	uint64_t seed = 5;

	assert_int_equal(ferry_port_create(p->init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 16, &b), 0);
	for (unsigned r = 0; r < rounds; r++) {
		if (arm && r == 1)
			__atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
		struct ferry_req reqs[16];

		for (unsigned i = 0; i < 16; i++) {
			uint64_t len = 1 + splitmix(&seed) % (1u << 20);

			reqs[i] = mkreq(i & 1 ? FERRY_OP_READ : FERRY_OP_WRITE,
					p->lbuf + i * (1u << 20), p->seg, p->rbuf + i * (1u << 20), len);
		}
		assert_int_equal(ferry_submit(b, reqs, 16), 0);
		assert_int_equal(ferry_batch_wait(b, 10000), 0);
		assert_int_equal(ferry_batch_reset(b), 0);
	}
	if (arm)
		__atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
}

static void stream(struct pair *p, unsigned rounds)
{
	stream_armed(p, rounds, false);
}

/* The positive control: a watched thread's malloc is seen. */
static void test_counting_works(void **state)
{
	void *volatile p;
	unsigned long seen;

	(void)state;
	if (!INTERPOSE)
		skip();
	n_watched = 0;
	watched[n_watched++] = pthread_self();
	__atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
	p = malloc(16);
	__atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
	free(p);
	seen = n_alloc;
	n_alloc = 0;
	n_watched = 0;
	assert_int_equal(seen, 1);
}

static void test_core_loop_is_clean(void **state)
{
	struct ferry_opts o;
	struct pair p;

	(void)state;
	if (!INTERPOSE)
		skip();
	n_watched = 0;
	pair_opts(&o, "0-1");
	pair_setup(&p, &o, &o, 16u << 20);
	stream(&p, 20); /* warm-up: first touches, thread registration */
	watch_cores(p.init);
	watch_cores(p.target);
	__atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
	stream(&p, 300);
	__atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
	print_message("core threads: %lu allocations, %lu lock calls, %lu writes\n", n_alloc,
		      n_lock, n_write);
	assert_int_equal(n_alloc, 0);
	assert_int_equal(n_lock, 0);
	assert_int_equal(n_write, 0);
	n_watched = 0;
	pair_teardown(&p);
}

/*
 * Idle policy caller: the application's thread runs the passes inside
 * ferry_batch_wait (and its submits, resets in between): it is watched
 * too, from its first request to its last.
 */
static void test_caller_passes_are_clean(void **state)
{
	struct ferry_opts o;
	struct pair p;
	uint64_t passes = 0;

	(void)state;
	if (!INTERPOSE)
		skip();
	n_watched = 0;
	pair_opts(&o, "0-1");
	o.idle = FERRY_IDLE_CALLER;
	pair_setup(&p, &o, &o, 16u << 20);
	stream(&p, 20); /* warm-up: first touches, this thread's RCU registration */
	watch_cores(p.init);
	watch_cores(p.target);
	watched[n_watched++] = pthread_self();
	stream_armed(&p, 300, true);
	for (unsigned i = 0; i < ferry_engine_cores(p.init); i++) {
		struct ferry_core_stats st;

		assert_int_equal(ferry_core_stats(p.init, i, &st), 0);
		passes += st.caller_passes;
	}
	print_message("caller + core threads: %lu allocations, %lu lock calls, %lu writes; "
		      "%llu caller passes\n", n_alloc, n_lock, n_write, (unsigned long long)passes);
	assert_true(passes > 0);
	assert_int_equal(n_alloc, 0);
	assert_int_equal(n_lock, 0);
	assert_int_equal(n_write, 0);
	n_watched = 0;
	pair_teardown(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counting_works),
		cmocka_unit_test(test_core_loop_is_clean),
		cmocka_unit_test(test_caller_passes_are_clean),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
