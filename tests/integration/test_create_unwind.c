/* SPDX-License-Identifier: MIT */
/*
 * ferry_engine_create undoes what it made when a step fails midway.  This
 * test interposes pthread_create and makes each thread start of a create
 * fail in turn (cores, control server, notifier, repair, lease): every
 * such create must fail, say why, and leave no fd open (and, under ASan,
 * no memory).  A failed repair thread start left its eventfd open: one fd
 * per create; a core's and the lease thread's failed silently.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "tests/harness/harness.h"

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* The test's thread only: the engine's own threads start threads too. */
static __thread bool armed;
static long calls;     /* thread starts seen while armed */
static long fail_at = -1; /* the one to refuse (0-based), -1: none */

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	static create_fn real;

	if (!real)
		real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
	if (armed && calls++ == fail_at)
		return EAGAIN;
	return real(t, a, fn, arg);
}

/* Error lines the library logged (a create that fails says why). */
static unsigned errors_logged;

static void count_errors(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	(void)msg;
	if (level == FERRY_LOG_ERROR)
		errors_logged++;
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

static long create_counting(const struct ferry_opts *o, long refuse, struct ferry_engine **e)
{
	int rc;

	calls = 0;
	fail_at = refuse;
	armed = true;
	rc = ferry_engine_create(o, e);
	armed = false;
	return rc;
}

static void test_thread_start_fails(void **state)
{
	struct ferry_engine *e = NULL;
	struct ferry_opts o;
	long starts;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop,tcp";
	assert_int_equal(create_counting(&o, -1, &e), 0);
	starts = calls;
	ferry_engine_destroy(e);
	assert_true(starts >= 4); /* a core, the control server, notifier, repair, lease */
	ferry_log_set(count_errors, NULL);
	for (long k = 0; k < starts; k++) {
		unsigned before = open_fds();

		e = NULL;
		errors_logged = 0;
		assert_int_equal(create_counting(&o, k, &e), -EAGAIN);
		assert_null(e);
		if (!errors_logged) /* before: a core's and the lease thread's said nothing */
			fail_msg("thread start %ld of %ld refused: create failed without a message",
				 k, starts);
		if (open_fds() != before)
			fail_msg("thread start %ld of %ld refused: %u fds open after, %u before", k,
				 starts, open_fds(), before);
	}
	ferry_log_set(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thread_start_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
