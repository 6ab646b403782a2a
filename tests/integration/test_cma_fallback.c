/* SPDX-License-Identifier: MIT */
/*
 * cma refused by the kernel: a target process offers tcp and cma
 * (tests/harness/target.h); an initiator that offers both, in a child the
 * kernel will not let at the target's memory, must open the segment over
 * tcp, say why cma was not taken -- once, through the log callback, with
 * the kernel's reason -- and move every byte over tcp.  Two refusals:
 *
 *   seccomp    the initiator installs a filter that fails process_vm_readv
 *              and process_vm_writev with EPERM (a container's default
 *              profile does the like); works as any user;
 *   other uid  the initiator drops to uid/gid 65534 while the target stays
 *              ours (needs root to drop; skipped, with a message, without).
 *
 * The initiator runs in a fork()ed child (a seccomp filter or a uid cannot
 * be undone), forked while this process has no threads; it reports what it
 * found on stderr and through its exit status.
 */
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "tests/harness/target.h"

#define BUF (8u << 20)

enum refusal { BY_SECCOMP, BY_UID, BY_SECCOMP_WRITES };

/* What the initiator's log callback saw (any thread of the library). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned refusals;    /* "cma does not reach the peer" messages */
static char refusal_msg[1024];

static void capture(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	(void)level;
	pthread_mutex_lock(&log_lock);
	if (strstr(msg, "cma does not reach the peer")) {
		refusals++;
		snprintf(refusal_msg, sizeof(refusal_msg), "%s", msg);
	}
	pthread_mutex_unlock(&log_lock);
}

static unsigned refusals_seen(char *msg, size_t len)
{
	unsigned n;

	pthread_mutex_lock(&log_lock);
	n = refusals;
	snprintf(msg, len, "%s", refusal_msg);
	pthread_mutex_unlock(&log_lock);
	return n;
}

/* process_vm_writev, and process_vm_readv unless reads_ok, fail EPERM;
 * everything else is allowed. */
static int deny_cma(bool reads_ok)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, reads_ok ? ~0u : SYS_process_vm_readv, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) ? -errno : 0;
}

static int drop_uid(void)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		return -errno;
	return 0;
}

/* The child's checks: no cmocka here, a message and an exit status. */
#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "initiator: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                    \
		}                                                                    \
	} while (0)

static int move_bytes(struct ferry_engine *e, ferry_seg_t seg, struct target *t, uint8_t *lbuf)
{
	struct ferry_port *port;
	struct ferry_batch *b;
	uint8_t *want = malloc(BUF);
	struct ferry_req r;

	CHECK(want);
	CHECK(ferry_port_create(e, &port) == 0);
	CHECK(ferry_batch_create(port, 1, &b) == 0);
	/* READ the target's pattern, every byte checked. */
	fill_pattern(want, BUF, t->seed);
	r = mkreq(FERRY_OP_READ, lbuf, seg, (void *)(uintptr_t)t->buf, BUF);
	CHECK(ferry_submit(b, &r, 1) == 0);
	CHECK(ferry_batch_wait(b, 60000) == 0);
	CHECK(memcmp(lbuf, want, BUF) == 0);
	CHECK(ferry_batch_reset(b) == 0);
	/* WRITE ours; the target's own hash says it arrived. */
	fill_pattern(lbuf, BUF, 555);
	r = mkreq(FERRY_OP_WRITE, lbuf, seg, (void *)(uintptr_t)t->buf, BUF);
	CHECK(ferry_submit(b, &r, 1) == 0);
	CHECK(ferry_batch_wait(b, 60000) == 0);
	CHECK(target_hash(t) == fnv1a(lbuf, BUF));
	CHECK(ferry_batch_destroy(b) == 0);
	CHECK(ferry_port_destroy(port) == 0);
	free(want);
	return 0;
}

static int initiator(struct target *t, enum refusal how)
{
	const char *reason = how == BY_UID ? "different users" : "a seccomp filter";
	uint8_t *lbuf = aligned_alloc(4096, BUF);
	struct ferry_engine *e;
	struct ferry_opts o;
	char msg[1024];
	ferry_seg_t seg;
	int rc;

	CHECK(lbuf);
	rc = how == BY_UID ? drop_uid() : deny_cma(how == BY_SECCOMP_WRITES);
	if (rc) {
		fprintf(stderr, "initiator: cannot set up the refusal: %s\n", strerror(-rc));
		return 200;
	}
	ferry_log_set(capture, NULL);
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "tcp,cma";
	CHECK(ferry_engine_create(&o, &e) == 0);
	CHECK(ferry_mem_register(e, lbuf, BUF) == 0);
	CHECK(ferry_segment_open(e, t->addr, &seg) == 0);
	CHECK(strcmp(ferry_segment_transport(e, seg), "tcp") == 0);
	CHECK(refusals_seen(msg, sizeof(msg)) == 1);
	fprintf(stderr, "initiator: the log said: %s\n", msg);
	CHECK(strstr(msg, "Operation not permitted"));
	CHECK(strstr(msg, reason));
	CHECK(move_bytes(e, seg, t, lbuf) == 0);
	/* Moving bytes and refreshing the segment do not say it again. */
	CHECK(ferry_segment_refresh(e, seg) == 0);
	CHECK(strcmp(ferry_segment_transport(e, seg), "tcp") == 0);
	CHECK(refusals_seen(msg, sizeof(msg)) == 1);
	CHECK(ferry_segment_close(e, seg) == 0);
	CHECK(ferry_mem_unregister(e, lbuf) == 0);
	ferry_engine_destroy(e);
	free(lbuf);
	return 0;
}

static void refused(enum refusal how)
{
	struct target t;
	int status;
	pid_t pid;

	if (how == BY_UID && geteuid() != 0) {
		print_message("dropping to another uid needs root: skipped\n");
		skip();
	}
	assert_int_equal(target_start(&t, "tcp,cma", "127.0.0.1:0", BUF, 31), 0);
	pid = fork(); /* this process has no thread of ferry's: the target is another process */
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(initiator(&t, how));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 200) {
		target_stop(&t);
		print_message("the kernel would not install the refusal: skipped\n");
		skip();
	}
	if (WEXITSTATUS(status) != 0)
		fail_msg("the initiator failed (exit %d; its message is above)", WEXITSTATUS(status));
	target_stop(&t);
}

static void test_refused_by_seccomp(void **state)
{
	(void)state;
	refused(BY_SECCOMP);
}

/* Reads allowed, writes refused (a profiler's profile): cma reads would
 * work, every WRITE would fail -EPERM, so the segment goes over tcp
 * (before: cma was taken, its WRITEs failed; found by an audit of qp/cma). */
static void test_writes_refused_by_seccomp(void **state)
{
	(void)state;
	refused(BY_SECCOMP_WRITES);
}

static void test_refused_other_uid(void **state)
{
	(void)state;
	refused(BY_UID);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_by_seccomp),
		cmocka_unit_test(test_writes_refused_by_seccomp),
		cmocka_unit_test(test_refused_other_uid),
	};

	target_main_if(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
