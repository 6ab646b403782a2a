/* SPDX-License-Identifier: MIT */
/*
 * Two engines in two processes: a forked target registers a buffer filled
 * with a known pattern; the initiator reads it and checks every byte, writes
 * its own pattern, reads it back and checks again.  Twice: over the NICs
 * FERRY_TEST_INIT_NICS / FERRY_TEST_TARGET_NICS name (RDMA devices; the
 * software NIC cannot cross processes: skipped, with a message, without),
 * and over cma (same host; skipped, with the kernel's reason, where it
 * refuses process_vm_readv).
 */
#include <errno.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness/harness.h"

#define BUF (8u << 20)
#define TARGET_SEED 77

static const char *target_nics; /* the forked target's */

static int target_main(int to_parent, int from_parent)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	uint8_t *buf = aligned_alloc(4096, BUF);
	char addr[64] = { 0 }, done;

	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = target_nics;
	if (!buf || ferry_engine_create(&o, &e))
		return 1;
	fill_pattern(buf, BUF, TARGET_SEED);
	if (ferry_mem_register(e, buf, BUF))
		return 2;
	snprintf(addr, sizeof(addr), "%s %llu", ferry_engine_address(e),
		 (unsigned long long)(uintptr_t)buf);
	if (write(to_parent, addr, sizeof(addr)) != sizeof(addr))
		return 3;
	if (read(from_parent, &done, 1) != 1)
		return 4;
	ferry_mem_unregister(e, buf);
	ferry_engine_destroy(e);
	free(buf);
	return 0;
}

static pid_t start_target(int *to_child, char *addr, uint64_t *remote)
{
	int up[2], down[2];
	char msg[64];
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		_exit(target_main(up[1], down[0]));
	}
	close(up[1]);
	close(down[0]);
	assert_int_equal(read(up[0], msg, sizeof(msg)), sizeof(msg));
	close(up[0]);
	unsigned long long r;
	assert_int_equal(sscanf(msg, "%63s %llu", addr, &r), 2);
	*remote = r;
	*to_child = down[1];
	return pid;
}

static void run(struct ferry_batch *b, struct ferry_req *r, uint32_t n)
{
	assert_int_equal(ferry_submit(b, r, n), 0);
	assert_int_equal(ferry_batch_wait(b, 60000), 0);
	assert_int_equal(ferry_batch_reset(b), 0);
}

/* Can we read the target at all?  (A container or Yama may say no.) */
static int probe(pid_t pid, uint64_t remote)
{
	uint8_t byte;
	struct iovec l = { &byte, 1 }, r = { (void *)(uintptr_t)remote, 1 };

	return process_vm_readv(pid, &l, 1, &r, 1, 0) == 1 ? 0 : -errno;
}

static void two_processes(const char *init_nics, const char *tnics, const char *transport)
{
	uint8_t *lbuf, *expect;
	struct ferry_engine *e;
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_opts o;
	char addr[64];
	uint64_t remote, seed = 9;
	int to_child, status;
	ferry_seg_t seg;
	pid_t pid;

	target_nics = tnics;
	lbuf = aligned_alloc(4096, 2 * BUF);
	expect = aligned_alloc(4096, BUF);
	pid = start_target(&to_child, addr, &remote);
	if (transport && !strcmp(transport, "cma") && probe(pid, remote) != 0) {
		print_message("cma: the kernel refuses process_vm_readv of our child (%s)\n",
			      strerror(-probe(pid, remote)));
		assert_int_equal(write(to_child, "x", 1), 1);
		waitpid(pid, &status, 0);
		free(lbuf);
		free(expect);
		skip();
	}
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = init_nics;
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	memset(lbuf, 0, 2 * BUF);
	assert_int_equal(ferry_mem_register(e, lbuf, 2 * BUF), 0);
	assert_int_equal(ferry_segment_open(e, addr, &seg), 0);
	if (transport)
		assert_string_equal(ferry_segment_transport(e, seg), transport);
	assert_int_equal(ferry_port_create(e, &port), 0);
	assert_int_equal(ferry_batch_create(port, 8, &b), 0);

	/* 1. READ the target's pattern in random pieces. */
	fill_pattern(expect, BUF, TARGET_SEED);
	for (uint64_t off = 0; off < BUF;) {
		uint64_t len = 1 + splitmix(&seed) % (BUF / 4);
		struct ferry_req r;

		if (off + len > BUF)
			len = BUF - off;
		r = mkreq(FERRY_OP_READ, lbuf + off, seg, (void *)(uintptr_t)(remote + off), len);
		run(b, &r, 1);
		off += len;
	}
	assert_memory_equal(lbuf, expect, BUF);

	/* 2. WRITE our pattern, READ it back into the second half. */
	fill_pattern(lbuf, BUF, 1234);
	struct ferry_req w = mkreq(FERRY_OP_WRITE, lbuf, seg, (void *)(uintptr_t)remote, BUF);
	run(b, &w, 1);
	struct ferry_req r = mkreq(FERRY_OP_READ, lbuf + BUF, seg, (void *)(uintptr_t)remote, BUF);
	run(b, &r, 1);
	assert_memory_equal(lbuf, lbuf + BUF, BUF);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	assert_int_equal(ferry_segment_close(e, seg), 0);
	assert_int_equal(write(to_child, "x", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(ferry_mem_unregister(e, lbuf), 0);
	ferry_engine_destroy(e);
	free(lbuf);
	free(expect);
}

static void test_two_processes(void **state)
{
	(void)state;
	if (!getenv("FERRY_TEST_INIT_NICS") || !getenv("FERRY_TEST_TARGET_NICS")) {
		print_message("two-process test needs NICs that cross processes "
			      "(FERRY_TEST_INIT_NICS/TARGET_NICS: RDMA devices, or cma)\n");
		skip();
	}
	two_processes(getenv("FERRY_TEST_INIT_NICS"), getenv("FERRY_TEST_TARGET_NICS"), NULL);
}

/* Same host, no RDMA: cma (process_vm_readv/writev), on any host that allows it. */
static void test_two_processes_cma(void **state)
{
	(void)state;
	two_processes("cma", "cma", "cma");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_processes),
		cmocka_unit_test(test_two_processes_cma),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
