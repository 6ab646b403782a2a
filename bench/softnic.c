/* SPDX-License-Identifier: MIT */
/*
 * A hint for Soft-RoCE: rxe (and siw) do both ends' work of a one-sided
 * operation in softirq on the CPU that posted it, so an engine with fewer
 * cores than CPUs leaves the others idle while its own saturate (README,
 * "CPUs on Soft-RoCE").  Said once, on stderr, when that is the set-up.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* Whether RDMA device name, under sysfs root (normally "/sys"), is a
 * software one: its node lives under devices/virtual, a NIC's under its bus. */
bool nic_is_soft(const char *sysfs, const char *name)
{
	char path[PATH_MAX], real[PATH_MAX], root[PATH_MAX];
	int n;

	n = snprintf(path, sizeof(path), "%s/class/infiniband/%s", sysfs, name);
	if (n < 0 || (size_t)n >= sizeof(path) || strchr(name, '/') || !realpath(path, real))
		return false;
	n = snprintf(path, sizeof(path), "%s/devices/virtual", sysfs);
	if (n < 0 || (size_t)n >= sizeof(path) || !realpath(path, root))
		return false;
	n = (int)strlen(root);
	return strncmp(real, root, (size_t)n) == 0 && real[n] == '/';
}

/* The first software RDMA device among e's cores' NICs (comma lists), in
 * buf; false when none. */
static bool engine_soft_nic(struct ferry_engine *e, const char *sysfs, char *buf, size_t len)
{
	for (unsigned k = 0; k < ferry_engine_cores(e); k++) {
		const char *nics = ferry_core_nic(e, k);

		while (nics && *nics) {
			size_t n = strcspn(nics, ",");

			if (n < len) {
				memcpy(buf, nics, n);
				buf[n] = '\0';
				if (nic_is_soft(sysfs, buf))
					return true;
			}
			nics += n + (nics[n] == ',');
		}
	}
	return false;
}

void soft_nic_hint(struct ferry_engine *e, const char *sysfs)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned cores = ferry_engine_cores(e);
	char nic[64];

	if (cpus <= 0 || cores >= (unsigned long)cpus || !engine_soft_nic(e, sysfs, nic, sizeof(nic)))
		return;
	fprintf(stderr,
		"ferry_bench: %s is a software RDMA device: the kernel moves its bytes on the CPU "
		"that posts, and this engine has %u core(s) of %ld online CPUs; more --cores "
		"(FERRY_CORES) let it use them (README, \"CPUs on Soft-RoCE\")\n",
		nic, cores, cpus);
}
