/* SPDX-License-Identifier: MIT */
/*
 * verbs: the GID a RoCE QP uses.
 *
 * fv_choose_gid ranks the entries of a port's GID table and is pure, so
 * that tests feed it hand-made tables; fv_select_gid reads the table
 * (through fv_calls, stubbable), applies FERRY_GID_INDEX and logs the
 * choice once per device, or the whole table when nothing fits.
 */
#include "qp/verbs/verbs.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/compiler.h"

static bool gid_is_zero(const uint8_t g[16])
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return false;
	return true;
}

static bool gid_is_v4mapped(const uint8_t g[16])
{
	for (int i = 0; i < 10; i++)
		if (g[i])
			return false;
	return g[10] == 0xff && g[11] == 0xff;
}

bool fv_gid_is_v4mapped(const uint8_t g[16])
{
	return gid_is_v4mapped(g);
}

static bool gid_is_link_local(const uint8_t g[16])
{
	return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

/* ::ffff:169.254.0.0/16: an autoconfigured IPv4 address, as unroutable as fe80::. */
static bool gid_is_v4_link_local(const uint8_t g[16])
{
	return gid_is_v4mapped(g) && g[12] == 169 && g[13] == 254;
}

void fv_gid_str(const uint8_t gid[16], char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, gid, buf, (socklen_t)len) && len)
		buf[0] = '\0';
}

const char *fv_gid_kind(const uint8_t gid[16], int type)
{
	switch (type) {
	case IBV_GID_TYPE_IB:
		return "IB";
	case IBV_GID_TYPE_ROCE_V1:
		return gid_is_v4mapped(gid) ? "RoCE v1, IPv4-mapped" : "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2:
		if (gid_is_v4_link_local(gid))
			return "RoCE v2, IPv4-mapped, link-local";
		if (gid_is_v4mapped(gid))
			return "RoCE v2, IPv4-mapped";
		return gid_is_link_local(gid) ? "RoCE v2, link-local" : "RoCE v2, IPv6";
	default:
		return "unknown type";
	}
}

/*
 * Lower is better; GID_RANK_NONE is never chosen automatically.  An IPv4
 * link-local address (169.254/16 sits beside a netdev's real IPv4 address
 * when it once had none) comes after the routable IPv4 ones, yet before
 * IPv6: every port with an IPv4 GID keeps an IPv4 one first, as
 * roce_gids (queue.c) counts on for both ends to pick the same pair.
 */
enum gid_rank {
	GID_RANK_V2_V4,
	GID_RANK_V2_V4_LL,
	GID_RANK_V2_V6,
	GID_RANK_V2_LL,
	GID_RANK_V1,
	GID_RANK_NONE
};

/* A QP names its source GID by an 8-bit index (ibv_global_route's
 * sgid_index): entries past it in a longer table (rxe has 1024) cannot be
 * used, and an index cast down would name another GID. */
#define GID_INDEX_MAX UINT8_MAX

static enum gid_rank gid_rank(const struct fv_gid *g)
{
	if (g->index < 0 || g->index > GID_INDEX_MAX || gid_is_zero(g->gid))
		return GID_RANK_NONE;
	if (g->type == IBV_GID_TYPE_ROCE_V1)
		return GID_RANK_V1;
	if (g->type != IBV_GID_TYPE_ROCE_V2)
		return GID_RANK_NONE;
	if (gid_is_v4mapped(g->gid))
		return gid_is_v4_link_local(g->gid) ? GID_RANK_V2_V4_LL : GID_RANK_V2_V4;
	return gid_is_link_local(g->gid) ? GID_RANK_V2_LL : GID_RANK_V2_V6;
}

static const char *const gid_rank_why[] = {
	[GID_RANK_V2_V4] = "RoCE v2 with an IPv4-mapped address is routable and what IPv4 peers use",
	[GID_RANK_V2_V6] = "no IPv4-mapped RoCE v2 GID; RoCE v2 with a global IPv6 address is routable",
	[GID_RANK_V2_V4_LL] = "no routable IPv4-mapped RoCE v2 GID; a link-local one (169.254/16) "
			      "still before IPv6: IPv4 peers must be on the same L2 network",
	[GID_RANK_V2_LL] = "only link-local RoCE v2 GIDs: peers must be on the same L2 network",
	[GID_RANK_V1] = "no RoCE v2 GID: RoCE v1 is not routable (same L2 network and VLAN only)",
};

static int choose_forced(const struct fv_gid *tbl, int n, int forced, char *why, size_t whylen)
{
	if (forced > GID_INDEX_MAX) {
		snprintf(why, whylen, "FERRY_GID_INDEX=%d: a QP can use GID indexes 0..%d only",
			 forced, GID_INDEX_MAX);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (tbl[i].index != forced)
			continue;
		if (gid_is_zero(tbl[i].gid)) {
			snprintf(why, whylen, "FERRY_GID_INDEX=%d names an empty (all-zero) GID", forced);
			return -EINVAL;
		}
		snprintf(why, whylen, "forced by FERRY_GID_INDEX=%d", forced);
		return i;
	}
	snprintf(why, whylen, "FERRY_GID_INDEX=%d: no such GID on this port", forced);
	return -ENOENT;
}

int fv_choose_gid(const struct fv_gid *tbl, int n, int forced_index, char *why, size_t whylen)
{
	enum gid_rank best_rank = GID_RANK_NONE;
	int best = -1, usable = 0;

	if (forced_index >= 0)
		return choose_forced(tbl, n, forced_index, why, whylen);
	for (int i = 0; i < n; i++) {
		enum gid_rank r = gid_rank(&tbl[i]);

		if (r == GID_RANK_NONE)
			continue;
		usable++;
		if (r < best_rank || (r == best_rank && tbl[i].index < tbl[best].index)) {
			best_rank = r;
			best = i;
		}
	}
	if (best < 0) {
		snprintf(why, whylen,
			 "no usable RoCE GID (%d entries, all empty, not RoCE or past index %d)", n,
			 GID_INDEX_MAX);
		return -ENOENT;
	}
	snprintf(why, whylen, "%s (best of %d usable; FERRY_GID_INDEX overrides)",
		 gid_rank_why[best_rank], usable);
	return best;
}

int fv_choose_alt_gid(const struct fv_gid *tbl, int n, int chosen)
{
	bool v4 = gid_is_v4mapped(tbl[chosen].gid);
	enum gid_rank best_rank = GID_RANK_V1;
	int best = -1;

	if (tbl[chosen].type != IBV_GID_TYPE_ROCE_V2)
		return -ENOENT; /* RoCE v1 is not IP-routed: no family to match */
	for (int i = 0; i < n; i++) {
		enum gid_rank r = gid_rank(&tbl[i]);

		if (r >= GID_RANK_V1 || gid_is_v4mapped(tbl[i].gid) == v4)
			continue;
		if (r < best_rank || (r == best_rank && tbl[i].index < tbl[best].index)) {
			best_rank = r;
			best = i;
		}
	}
	return best < 0 ? -ENOENT : best;
}

/* FERRY_GID_INDEX: *out = -1 when unset or empty. */
static int gid_index_from_env(const struct fv_nic *nic, int *out)
{
	const char *s = getenv("FERRY_GID_INDEX");
	char *end;
	long v;

	*out = -1;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	/* isdigit first: strtol alone would take " 1", "+1" and "-0". */
	if (!isdigit((unsigned char)*s) || errno || *end || v > INT_MAX) {
		vlog(nic, "FERRY_GID_INDEX='%s' is not a GID index (a number >= 0)", s);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

/* Empty entries (ENODATA, or older kernels' EINVAL) are simply not in the table. */
static int read_gid_table(const struct fv_nic *nic, int tbl_len, struct fv_gid *tbl)
{
	int n = 0;

	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;

		memset(&e, 0, sizeof(e));
		if (fv_calls.query_gid_ex(nic->ctx, nic->port, (uint32_t)i, &e, 0))
			continue;
		tbl[n].index = i;
		memcpy(tbl[n].gid, e.gid.raw, 16);
		tbl[n].type = (int)e.gid_type;
		n++;
	}
	return n;
}

/* "[0] fe80::1 (RoCE v2, link-local), [1] ..." so that a refused choice can be fixed. */
static void gid_table_str(const struct fv_gid *tbl, int n, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < n && off < len; i++) {
		char a[INET6_ADDRSTRLEN];

		fv_gid_str(tbl[i].gid, a, sizeof(a));
		off += (size_t)snprintf(buf + off, len - off, "%s[%d] %s (%s)", i ? ", " : "",
					tbl[i].index, a, fv_gid_kind(tbl[i].gid, tbl[i].type));
	}
	if (!n)
		snprintf(buf, len, "empty");
}

bool fv_first_time(const char *key)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char seen[64][96];
	static int nseen;
	bool first = true;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < nseen && first; i++)
		if (strcmp(seen[i], key) == 0)
			first = false;
	if (first && nseen < (int)ARRAY_SIZE(seen))
		snprintf(seen[nseen++], sizeof(seen[0]), "%s", key);
	pthread_mutex_unlock(&lock);
	return first;
}

static void log_gid_choice(const struct fv_nic *nic, const char *why)
{
	char key[96], a[INET6_ADDRSTRLEN];

	snprintf(key, sizeof(key), "%s:%u:%d:%d", nic->name, nic->port, nic->gid_index,
		 nic->has_alt ? nic->alt_gid_index : -1);
	if (!fv_first_time(key))
		return;
	fv_gid_str(nic->gid.raw, a, sizeof(a));
	vinfo(nic, "GID index %d %s (%s) chosen: %s", nic->gid_index, a,
	     fv_gid_kind(nic->gid.raw, nic->gid_type), why);
	if (!nic->has_alt)
		return;
	fv_gid_str(nic->alt_gid.raw, a, sizeof(a));
	vinfo(nic, "GID index %d %s (%s) for peers that have only the other IP family",
	      nic->alt_gid_index, a, fv_gid_kind(nic->alt_gid.raw, IBV_GID_TYPE_ROCE_V2));
}

int fv_select_gid(struct fv_nic *nic, int tbl_len)
{
	struct fv_gid *tbl;
	char why[256], list[768];
	int forced, n, pos;

	pos = gid_index_from_env(nic, &forced);
	if (pos)
		return pos;
	tbl = calloc(tbl_len > 0 ? (size_t)tbl_len : 1, sizeof(*tbl));
	if (!tbl)
		return -ENOMEM;
	n = read_gid_table(nic, tbl_len, tbl);
	pos = fv_choose_gid(tbl, n, forced, why, sizeof(why));
	if (pos < 0) {
		gid_table_str(tbl, n, list, sizeof(list));
		vlog(nic, "cannot use a GID: %s; GID table: %s", why, list);
		free(tbl);
		return forced >= 0 ? -EINVAL : -EADDRNOTAVAIL;
	}
	nic->gid_index = tbl[pos].index;
	nic->gid_type = (uint8_t)tbl[pos].type;
	memcpy(nic->gid.raw, tbl[pos].gid, 16);
	/* A forced index is the only one used. */
	pos = forced >= 0 ? -ENOENT : fv_choose_alt_gid(tbl, n, pos);
	nic->has_alt = pos >= 0;
	if (nic->has_alt) {
		nic->alt_gid_index = tbl[pos].index;
		memcpy(nic->alt_gid.raw, tbl[pos].gid, 16);
	}
	free(tbl);
	log_gid_choice(nic, why);
	return 0;
}
