/* SPDX-License-Identifier: MIT */
/*
 * The core loop never mallocs, locks or logs: this test interposes malloc &
 * co., the pthread lock functions and write(2), and counts calls made from
 * worker-core threads while requests stream through two engines.  After the
 * warm-up the counts must stay at zero.  (Plain build only: the sanitizers
 * interpose the same functions themselves.)  Error paths that log on a
 * core (a tcp peer's bogus connection) must not call the log sink there
 * either: the message is left for a control thread to emit.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qp/tcp/tcp.h"
#include "ring/base/clock.h"
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

/* The log sink: counts the refusals it is told about, and the calls made
 * on a watched thread (a core's, or the application's running passes). */
static unsigned long sink_refused, sink_on_core;

static void count_sink(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	(void)level;
	if (on_core())
		__atomic_fetch_add(&sink_on_core, 1, __ATOMIC_RELAXED);
	if (strstr(msg, "refused"))
		__atomic_fetch_add(&sink_refused, 1, __ATOMIC_RELAXED);
}

/* Connect to the tcp data listener of e's core 0 and send it garbage
 * instead of a HELLO: the core refuses the connection and says so. */
static void send_bogus_hello(struct ferry_engine *e)
{
	struct ferry_core *c = e->cores[0];
	int t = core_tx_of(c, "tcp");
	struct sockaddr_in sa = { .sin_family = AF_INET };
	uint8_t junk[64];
	int fd;

	assert_true(t >= 0);
	sa.sin_port = htons(tcp_port(c->tx[t].nic));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(junk, 0xa5, sizeof(junk));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
	close(fd);
}

/*
 * A tcp engine whose core refuses a bogus connection: the refusal is
 * logged, yet the core (or, idle caller, the application thread running
 * its pass) takes no lock and never calls the sink; the message still
 * reaches the sink, from another thread, within a bounded wait.
 */
static void bogus_peer_logs_off_core(enum ferry_idle idle)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	uint64_t deadline;
	bool in_time;

	/* Under a sanitizer (no interposition) the sink's checks still hold. */
	n_watched = 0;
	n_alloc = n_lock = n_write = 0;
	sink_refused = sink_on_core = 0;
	pair_opts(&o, "0");
	o.nics = "tcp";
	o.idle = idle;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	for (int i = 0; i < 50; i++) /* warm-up: this thread's RCU registration */
		(void)ferry_progress(e);
	ferry_log_set(count_sink, NULL);
	watch_cores(e);
	if (idle == FERRY_IDLE_CALLER)
		watched[n_watched++] = pthread_self();
	__atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
	send_bogus_hello(e);
	deadline = ferry_now_ms() + 5000;
	while (!__atomic_load_n(&sink_refused, __ATOMIC_RELAXED) && ferry_now_ms() < deadline)
		if (idle != FERRY_IDLE_CALLER || !ferry_progress(e))
			usleep(100);
	in_time = __atomic_load_n(&sink_refused, __ATOMIC_RELAXED) > 0; /* not destroy's drain */
	__atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
	ferry_engine_destroy(e);
	ferry_log_set(NULL, NULL); /* its lock: every sink call is over and seen */
	n_watched = 0;
	print_message("core threads: %lu allocations, %lu lock calls, %lu writes, %lu sink "
		      "calls; %lu refusals logged\n", n_alloc, n_lock, n_write, sink_on_core,
		      sink_refused);
	assert_true(in_time);
	assert_int_equal(sink_on_core, 0);
	assert_int_equal(n_alloc, 0);
	assert_int_equal(n_lock, 0);
	assert_int_equal(n_write, 0);
}

static void test_core_error_logs_off_core(void **state)
{
	(void)state;
	bogus_peer_logs_off_core(FERRY_IDLE_ADAPTIVE);
}

static void test_caller_error_logs_off_core(void **state)
{
	(void)state;
	bogus_peer_logs_off_core(FERRY_IDLE_CALLER);
}

/*
 * What a core left in its mailbox and no repair round drained yet (the
 * repair thread stops first at destroy, without a last round) still
 * reaches the sink: core_stop drains it once the thread is gone.
 */
static void test_core_log_kept_at_destroy(void **state)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	struct log_box *own;

	(void)state;
	sink_refused = 0;
	pair_opts(&o, "0");
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	ferry_log_set(count_sink, NULL);
	own = log_defer(&e->cores[0]->logbox); /* as the core's thread would */
	flog(LOG_WARN, "a connection refused: its last words");
	log_defer(own);
	ferry_engine_destroy(e);
	ferry_log_set(NULL, NULL);
	assert_int_equal(sink_refused, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counting_works),
		cmocka_unit_test(test_core_loop_is_clean),
		cmocka_unit_test(test_caller_passes_are_clean),
		cmocka_unit_test(test_core_error_logs_off_core),
		cmocka_unit_test(test_caller_error_logs_off_core),
		cmocka_unit_test(test_core_log_kept_at_destroy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
