/* SPDX-License-Identifier: MIT */
/*
 * Which NIC contexts each core opens, from the nics option:
 *
 *   "auto"        the RDMA device of the core's NUMA node (round robin
 *                 within the node, else over all devices) when there is
 *                 one, then tcp and cma: every transport this host has;
 *   a comma list  device names (verbs devices such as "rxe0" or
 *                 "mlx5_0:1", or "loop") are dealt to the cores round
 *                 robin -- core k gets the (k mod n)-th; all of one
 *                 transport -- and the words "tcp" and "cma" give every
 *                 core that transport.
 *
 * Every core gets the same transports, in the order device, tcp, cma, so
 * that context t of core i is entry i * ntx + t of the segment descriptor;
 * one context per transport ("tcp@a.b.c.d,tcp" is refused), and a tcp@
 * device with a fixed port on one core only.
 */
#include <ctype.h>
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <string.h>

#include "ring/base/log.h"
#include "runtime/engine/engine.h"

#define NIC_NAME_MAX 64

struct nic_words {
	char devs[FERRY_MAX_CORES][NIC_NAME_MAX];
	unsigned ndevs;
	bool tcp, cma;
};

static int cpu_node(unsigned cpu)
{
	return numa_available() >= 0 ? numa_node_of_cpu((int)cpu) : -1;
}

/* Core i's device under "auto": its NUMA node's least used, else any's. */
static int auto_device(const struct nic_dev_info *devs, int n, unsigned *used, int node)
{
	int pick = -1, best = -1;

	for (int d = 0; d < n; d++) {
		if (devs[d].numa_node == node && (pick < 0 || used[d] < used[pick]))
			pick = d;
		if (best < 0 || used[d] < used[best])
			best = d;
	}
	return pick >= 0 ? pick : best;
}

/* A transport word, if this library has the transport. */
static bool transport_built(const char *word)
{
	const struct nic_provider *p = nic_provider_for(word);

	return p && strcmp(p->name, word) == 0;
}

static int add_word(struct nic_words *w, const char *tok, size_t len)
{
	if (len == 0 || len >= NIC_NAME_MAX) {
		log_err("nics: %s NIC name in the list", len ? "too long a" : "an empty");
		return -EINVAL;
	}
	if ((len == 3 && !strncmp(tok, "tcp", 3)) || (len == 3 && !strncmp(tok, "cma", 3))) {
		bool *flag = tok[0] == 't' ? &w->tcp : &w->cma;

		if (*flag) {
			log_err("nics: '%.*s' listed twice", (int)len, tok);
			return -EINVAL;
		}
		if (!transport_built(tok[0] == 't' ? "tcp" : "cma")) {
			log_err("nics: transport '%.*s' is not built into this library", (int)len, tok);
			return -EPROTONOSUPPORT;
		}
		*flag = true;
		return 0;
	}
	if (len == 4 && !strncmp(tok, "auto", 4)) {
		log_err("nics: 'auto' stands alone (it already offers every transport)");
		return -EINVAL;
	}
	if (w->ndevs == FERRY_MAX_CORES) {
		log_err("nics: more than %u devices", FERRY_MAX_CORES);
		return -EINVAL;
	}
	snprintf(w->devs[w->ndevs++], NIC_NAME_MAX, "%.*s", (int)len, tok);
	return 0;
}

/*
 * Blanks around a name are not part of it ("loop, tcp"), as in the core
 * list: kept, ' tcp' was taken for an RDMA device and refused -ENODEV.
 */
static void trim(const char **tok, size_t *len)
{
	while (*len && isspace((unsigned char)**tok)) {
		(*tok)++;
		(*len)--;
	}
	while (*len && isspace((unsigned char)(*tok)[*len - 1]))
		(*len)--;
}

/* The list is the word "auto", blanks around it aside. */
static bool is_auto(const char *list)
{
	size_t len = strlen(list);

	trim(&list, &len);
	return len == 4 && strncmp(list, "auto", 4) == 0;
}

static int parse_list(const char *list, struct nic_words *w)
{
	const char *p = list;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		const char *tok = p;
		int rc;

		trim(&tok, &len);
		rc = add_word(w, tok, len);
		if (rc)
			return rc;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/*
 * The devices of a list are dealt to the cores, so they must be of one
 * transport: "rxe0,loop" gave core 0 verbs and core 1 loop, a segment took
 * core 0's transport, and core 1's handshake failed (-EPROTONOSUPPORT).
 */
static int check_one_transport(const struct nic_words *w)
{
	const struct nic_provider *first = w->ndevs ? nic_provider_for(w->devs[0]) : NULL;

	for (unsigned d = 1; d < w->ndevs; d++) {
		const struct nic_provider *p = nic_provider_for(w->devs[d]);

		if (p == first)
			continue;
		log_err("nics: '%s' (%s) and '%s' (%s) are different transports: the devices "
			"of a list are dealt to the cores, which must all offer the same "
			"transports (list devices of one kind; add 'tcp' or 'cma' as words)",
			w->devs[0], first->name, w->devs[d], p->name);
		return -EINVAL;
	}
	return 0;
}

/*
 * A core opens one context per transport: a tcp@ device and the word
 * "tcp" made each core two tcp contexts (two listeners, two rails to every
 * tcp peer) where the list meant one.
 */
static int check_tcp_twice(const struct nic_words *w)
{
	if (!w->tcp || !w->ndevs || nic_provider_for(w->devs[0]) != nic_provider_for("tcp"))
		return 0;
	log_err("nics: '%s' and 'tcp' are both tcp, and a core opens one context per "
		"transport: list either the tcp@ devices or the word 'tcp'", w->devs[0]);
	return -EINVAL;
}

/*
 * A tcp@addr:port with a port binds once: dealt to two cores (fewer such
 * devices listed than cores, or one listed twice) the second core's bind
 * failed -EADDRINUSE.  Port 0 (or none) lets each core's bind pick.
 */
static int check_fixed_ports(const struct nic_words *w, unsigned ncores)
{
	for (unsigned i = 0; i < ncores; i++) {
		const char *d = w->devs[i % w->ndevs];
		const char *at = strchr(d, '@'), *colon = at ? strchr(at, ':') : NULL;

		if (strncmp(d, "tcp@", 4) || !colon || strspn(colon + 1, "0") == strlen(colon + 1))
			continue;
		for (unsigned j = 0; j < i; j++) {
			if (strcmp(d, w->devs[j % w->ndevs]))
				continue;
			log_err("nics: '%s' is dealt to cores %u and %u, and its fixed port binds "
				"once: list one tcp@addr:port per core (core k gets the (k mod "
				"n)-th), or leave the port out", d, j, i);
			return -EINVAL;
		}
	}
	return 0;
}

/* "auto": the discovered devices (round robin by NUMA node), tcp, cma. */
static void parse_auto(const unsigned *cpus, unsigned ncores, struct nic_words *w)
{
	struct nic_dev_info devs[FERRY_MAX_CORES];
	unsigned used[FERRY_MAX_CORES] = { 0 };
	int n = nic_verbs_discover(devs, FERRY_MAX_CORES);

	for (unsigned i = 0; n > 0 && i < ncores; i++) {
		int d = auto_device(devs, n, used, cpu_node(cpus[i]));

		used[d]++;
		snprintf(w->devs[w->ndevs++], NIC_NAME_MAX, "%s", devs[d].name);
	}
	w->tcp = transport_built("tcp");
	w->cma = transport_built("cma");
	/* A library built without tcp, on a host without RDMA: the software NIC. */
	if (w->ndevs == 0 && !w->tcp && !w->cma)
		snprintf(w->devs[w->ndevs++], NIC_NAME_MAX, "loop");
}

int engine_pick_nics(const char *list, const unsigned *cpus, unsigned ncores,
		     char names[][CORE_MAX_TX][64], unsigned *ntx)
{
	struct nic_words w;
	int rc = 0;

	memset(&w, 0, sizeof(w));
	if (is_auto(list))
		parse_auto(cpus, ncores, &w);
	else
		rc = parse_list(list, &w);
	if (rc == 0)
		rc = check_one_transport(&w);
	if (rc == 0)
		rc = check_tcp_twice(&w);
	if (rc == 0 && w.ndevs)
		rc = check_fixed_ports(&w, ncores);
	if (rc)
		return rc;
	for (unsigned i = 0; i < ncores; i++) {
		unsigned t = 0;

		if (w.ndevs)
			snprintf(names[i][t++], 64, "%s", w.devs[i % w.ndevs]);
		if (w.tcp)
			snprintf(names[i][t++], 64, "tcp");
		if (w.cma)
			snprintf(names[i][t++], 64, "cma");
		*ntx = t;
	}
	return 0;
}
