/* SPDX-License-Identifier: MIT */
/*
 * ferry_engine_create undoes what it made when a step fails midway.  This
 * test interposes pthread_create, eventfd, timerfd_create and the allocator
 * (malloc, calloc, realloc, strdup) and makes each such call of a create
 * fail in turn (cores, control server, notifier, repair, lease): every
 * such create must fail (an allocation: or do without), say why, and
 * leave no fd open (and, under ASan, no memory).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include "tests/harness/harness.h"

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* The test's thread only: the engine's own threads start threads too. */
static __thread bool armed;
static enum { THREADS, FDS, ALLOCS } what; /* the calls counted and refused */
static long calls;     /* such calls seen while armed */
static long fail_at = -1; /* the one to refuse (0-based), -1: none */

static bool refuse(int kind)
{
	return armed && (int)what == kind && calls++ == fail_at;
}

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	static create_fn real;

	if (!real)
		real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
	if (refuse(THREADS))
		return EAGAIN;
	return real(t, a, fn, arg);
}

/* The descriptors a create makes for itself (sockets aside): out of fds. */
int eventfd(unsigned int v, int flags)
{
	static int (*real)(unsigned int, int);

	if (!real)
		real = (int (*)(unsigned int, int))dlsym(RTLD_NEXT, "eventfd");
	if (refuse(FDS)) {
		errno = EMFILE;
		return -1;
	}
	return real(v, flags);
}

int timerfd_create(int clock, int flags)
{
	static int (*real)(int, int);

	if (!real)
		real = (int (*)(int, int))dlsym(RTLD_NEXT, "timerfd_create");
	if (refuse(FDS)) {
		errno = EMFILE;
		return -1;
	}
	return real(clock, flags);
}

/*
 * Out of memory: malloc, calloc, realloc and strdup of the test's thread
 * (the library's and libc's on its behalf).  The real ones are looked up
 * lazily; dlsym may allocate while doing so, from a small static pool
 * that is never freed back.
 */
typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);

static malloc_fn real_malloc;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static char boot_pool[4096];
static size_t boot_used;
static __thread bool resolving;

static void *boot_alloc(size_t n)
{
	size_t at = (boot_used + 15) & ~(size_t)15;

	if (at + n > sizeof(boot_pool))
		return NULL;
	boot_used = at + n;
	return memset(boot_pool + at, 0, n);
}

static bool resolve(void)
{
	if (real_malloc && real_calloc && real_realloc)
		return true;
	if (resolving)
		return false;
	resolving = true;
	real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
	real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
	real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
	resolving = false;
	return real_malloc && real_calloc && real_realloc;
}

void *malloc(size_t n)
{
	if (!resolve())
		return boot_alloc(n);
	if (refuse(ALLOCS)) {
		errno = ENOMEM;
		return NULL;
	}
	return real_malloc(n);
}

void *calloc(size_t k, size_t n)
{
	if (!resolve())
		return boot_alloc(k * n);
	if (refuse(ALLOCS)) {
		errno = ENOMEM;
		return NULL;
	}
	return real_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
	if (!resolve())
		return NULL;
	if (refuse(ALLOCS)) {
		errno = ENOMEM;
		return NULL;
	}
	return real_realloc(p, n);
}

void free(void *p)
{
	static void (*real_free)(void *);

	if ((char *)p >= boot_pool && (char *)p < boot_pool + sizeof(boot_pool))
		return;
	if (!real_free)
		real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	real_free(p);
}

/* Through our malloc: the library's strdup calls count (ASan's own strdup
 * would not call it). */
char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);

	return d ? memcpy(d, s, n) : NULL;
}

/* Error lines the library logged (a create that fails says why). */
static unsigned errors_logged;
static bool listen_blamed; /* a message said listening failed: it never does here */

static void count_errors(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	if (level == FERRY_LOG_ERROR)
		errors_logged++;
	if (strstr(msg, "cannot listen"))
		listen_blamed = true;
}

static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n; /* the same offset (., .., the DIR's own fd) every time */
}

static long create_counting(const struct ferry_opts *o, long at, struct ferry_engine **e)
{
	int rc;

	calls = 0;
	fail_at = at;
	armed = true;
	rc = ferry_engine_create(o, e);
	armed = false;
	return rc;
}

/* Refuse each call of kind k in a create in turn: it fails with errno rc
 * (0: with any, or succeeds: not every allocation is needed), says why,
 * and leaves no fd behind. */
static void refuse_each(int k, int rc, const char *name)
{
	struct ferry_engine *e = NULL;
	struct ferry_opts o;
	long n;

	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop,tcp";
	what = k;
	assert_int_equal(create_counting(&o, -1, &e), 0);
	n = calls;
	ferry_engine_destroy(e);
	assert_true(n >= 4);
	ferry_log_set(count_errors, NULL);
	for (long i = 0; i < n; i++) {
		unsigned before = open_fds();
		long got;

		e = NULL;
		errors_logged = 0;
		listen_blamed = false;
		got = create_counting(&o, i, &e);
		if (!rc && !got) {
			ferry_engine_destroy(e);
			continue;
		}
		if (rc)
			assert_int_equal(got, rc);
		assert_true(got < 0);
		assert_null(e);
		if (!errors_logged)
			fail_msg("%s %ld of %ld refused: create failed (%s) without a message", name,
				 i, n, strerror((int)-got));
		if (listen_blamed)
			fail_msg("%s %ld of %ld refused: the message blames listening", name, i, n);
		if (open_fds() != before)
			fail_msg("%s %ld of %ld refused: %u fds open after, %u before", name, i, n,
				 open_fds(), before);
	}
	ferry_log_set(NULL, NULL);
}

/* Before: the repair thread's eventfd stayed open; a core's and the lease
 * thread's failed starts said nothing. */
static void test_thread_start_fails(void **state)
{
	(void)state;
	refuse_each(THREADS, -EAGAIN, "thread start");
}

/* Out of fds (EMFILE) at each eventfd/timerfd of a create.  Before: seven
 * of them (a core's, the client's, the notifier's three, the repair and
 * lease threads') failed the create without a word. */
static void test_fd_fails(void **state)
{
	(void)state;
	refuse_each(FDS, -EMFILE, "eventfd/timerfd");
}

/* Out of memory at each allocation of a create.  Before: the engine's
 * own calloc and its copy of the nics option failed it without a word. */
static void test_alloc_fails(void **state)
{
	(void)state;
	refuse_each(ALLOCS, 0, "allocation");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thread_start_fails),
		cmocka_unit_test(test_fd_fails),
		cmocka_unit_test(test_alloc_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
