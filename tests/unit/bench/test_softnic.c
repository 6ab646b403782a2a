/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ferry_bench's Soft-RoCE hint (bench/softnic.c): which RDMA
 * devices count as software ones, read from a sysfs tree built in a
 * temporary directory (a virtual device, one on a PCI bus, a missing one,
 * names that would leave the tree), and the hint itself for an engine on
 * the loop NIC dressed up as a software device there, captured from
 * stderr.  The Makefile links tests with libferry.a only, so the file
 * under test is included.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench/softnic.c"

static char root[] = "/tmp/ferry-softnic-XXXXXX";

static void mkdirs(const char *rel)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/%s'", root, rel);
	assert_int_equal(system(cmd), 0);
}

static void link_dev(const char *name, const char *target)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/class/infiniband/%s", root, name);
	assert_int_equal(symlink(target, path), 0);
}

static int tree_setup(void **state)
{
	(void)state;
	if (!mkdtemp(root))
		return -1;
	mkdirs("class/infiniband");
	mkdirs("devices/virtual/infiniband/rxe7");
	mkdirs("devices/virtual/infiniband/loop");
	mkdirs("devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0");
	mkdirs("devices/virtualx/infiniband/odd0");
	link_dev("rxe7", "../../devices/virtual/infiniband/rxe7");
	link_dev("loop", "../../devices/virtual/infiniband/loop");
	link_dev("mlx5_0", "../../devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0");
	link_dev("odd0", "../../devices/virtualx/infiniband/odd0");
	return 0;
}

static int tree_teardown(void **state)
{
	char cmd[512];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd);
}

/* Virtual devices are software ones; a bus's are not; nor is what is not there. */
static void test_nic_is_soft(void **state)
{
	(void)state;
	assert_true(nic_is_soft(root, "rxe7"));
	assert_false(nic_is_soft(root, "mlx5_0"));
	assert_false(nic_is_soft(root, "odd0")); /* devices/virtualx is not devices/virtual */
	assert_false(nic_is_soft(root, "rxe8"));
	assert_false(nic_is_soft(root, "../../devices/virtual/infiniband/rxe7"));
	assert_false(nic_is_soft(root, ""));
	assert_false(nic_is_soft("/nonexistent-sysfs", "rxe7"));
}

/* stderr while fn runs, as a string the caller frees. */
static char *stderr_of(struct ferry_engine *e, const char *sysfs)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO);

	assert_non_null(f);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	soft_nic_hint(e, sysfs);
	fflush(stderr);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	len = (size_t)ftell(f);
	out = calloc(1, len + 1);
	assert_non_null(out);
	rewind(f);
	assert_int_equal(fread(out, 1, len, f), len);
	fclose(f);
	return out;
}

/* One core on a "software" loop NIC: said when the host has another CPU,
 * naming the device and the counts; not on a NIC that is not one. */
static void test_hint(void **state)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	char *out;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = "loop";
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	out = stderr_of(e, root);
	if (cpus > 1) {
		assert_non_null(strstr(out, "ferry_bench: loop is a software RDMA device"));
		assert_non_null(strstr(out, "1 core(s) of"));
	} else {
		assert_string_equal(out, ""); /* one CPU: nothing to spread to */
	}
	free(out);
	out = stderr_of(e, "/nonexistent-sysfs");
	assert_string_equal(out, "");
	free(out);
	ferry_engine_destroy(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nic_is_soft),
		cmocka_unit_test(test_hint),
	};

	return cmocka_run_group_tests(tests, tree_setup, tree_teardown);
}
