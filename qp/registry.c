/* SPDX-License-Identifier: MIT */
/*
 * NIC name -> provider.  "loop" and "loop<digits>" are the software NIC;
 * "cma" the same-host NIC (process_vm_readv/writev); "tcp" and
 * "tcp@<address>" one-sided operations over TCP; any other name is a
 * verbs device ("rxe0", "mlx5_0", "mlx5_0:1"): the verbs provider's open()
 * says so when no such device exists.
 */
#include "qp/nic.h"

#include <ctype.h>
#include <string.h>

/* "loop" followed by nothing or by decimal digits only ("loop0", "loop12"). */
static int is_loop_name(const char *name)
{
	const char *p;

	if (strncmp(name, "loop", 4) != 0)
		return 0;
	for (p = name + 4; *p; p++)
		if (!isdigit((unsigned char)*p))
			return 0;
	return 1;
}

const struct nic_provider *nic_provider_for(const char *nic_name)
{
	if (!nic_name || !*nic_name)
		return NULL;
	if (is_loop_name(nic_name))
		return &nic_loop_provider;
	if (strcmp(nic_name, "cma") == 0)
		return &nic_cma_provider;
	if (strcmp(nic_name, "tcp") == 0 || strncmp(nic_name, "tcp@", 4) == 0)
		return &nic_tcp_provider;
	return &nic_verbs_provider;
}
