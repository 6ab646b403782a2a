/* SPDX-License-Identifier: MIT */
/*
 * cma: who we are on this host, and whether the kernel lets us at a peer.
 *
 * Same host means the same boot id (/proc/sys/kernel/random/boot_id: a new
 * one every boot, different on every machine or VM) and the same PID
 * namespace (st_ino/st_dev of /proc/self/ns/pid): a pid means a process
 * only inside its namespace, and process_vm_readv takes a pid.  The start
 * time (field 22 of /proc/<pid>/stat) tells a peer from a later process
 * that got its pid.
 *
 * reachable() then reads one byte of the peer (its probe byte, a static of
 * this file whose address the peer publishes) with process_vm_readv: the
 * kernel applies exactly the checks the data path will meet (same uid and
 * gid or CAP_SYS_PTRACE, the peer dumpable, Yama's ptrace_scope, seccomp,
 * LSMs).  When it refuses, the reason is worked out from /proc (uids,
 * ptrace_scope, our capabilities and seccomp mode) and written in why, so
 * that the runtime can say it once and use another transport.
 */
#include "qp/cma/objects.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ring/base/log.h"

#define CAP_SYS_PTRACE_BIT 19

/* Read by peers' reachable(); never written. */
static const volatile uint8_t cma_probe_byte __attribute__((used)) = CMA_PROBE_VALUE;

/* Where the explanations read /proc (tests point it at a fake tree). */
static const char *proc_root = "/proc";

void cma_host_set_proc_root(const char *root)
{
	proc_root = root ? root : "/proc";
}

/* ------------------------------------------------------------ small helpers */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The whole (small) file at path into buf, NUL-terminated; length or -errno. */
static int read_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	return (int)n;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "d6b81816-8c2b-41e4-a654-c4fe062fe78c" -> 16 bytes. */
static int read_boot_id(uint8_t out[16])
{
	char buf[64];
	int n = read_file("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)), k = 0;

	if (n < 0)
		return n;
	for (const char *p = buf; *p && k < 32; p++) {
		int v = hexval((unsigned char)*p);

		if (*p == '-')
			continue;
		if (v < 0)
			break;
		out[k / 2] = (uint8_t)(k & 1 ? out[k / 2] | v : v << 4);
		k++;
	}
	return k == 32 ? 0 : -EINVAL;
}

/* Start time of pid (clock ticks since boot), field 22 of /proc/<pid>/stat. */
static int read_start_time(const char *pid, uint64_t *out)
{
	char path[64], buf[1024];
	const char *p;
	int n, field = 2;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	n = read_file(path, buf, sizeof(buf));
	if (n < 0)
		return n;
	p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (!p)
		return -EINVAL;
	for (p++; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22)
		return -EINVAL;
	*out = strtoull(p, NULL, 10);
	return 0;
}

/* ------------------------------------------------------- identity, address */

int cma_id_self(struct cma_id *out, uint64_t table)
{
	struct stat st;
	int rc;

	memset(out, 0, sizeof(*out));
	out->pid = (uint32_t)getpid();
	out->uid = (uint32_t)getuid();
	if (stat("/proc/self/ns/pid", &st) != 0) {
		rc = -errno;
		log_err("cma: cannot stat /proc/self/ns/pid (our PID namespace): %s", strerror(-rc));
		return rc;
	}
	out->ns_ino = (uint64_t)st.st_ino;
	out->ns_dev = (uint32_t)st.st_dev;
	rc = read_boot_id(out->boot);
	if (rc) {
		log_err("cma: cannot read the boot id (/proc/sys/kernel/random/boot_id): %s",
			strerror(-rc));
		return rc;
	}
	rc = read_start_time("self", &out->start);
	if (rc) {
		log_err("cma: cannot read our start time (/proc/self/stat): %s", strerror(-rc));
		return rc;
	}
	out->probe = (uint64_t)(uintptr_t)&cma_probe_byte;
	out->table = table;
	return 0;
}

/*
 * The address, 64 bytes, little endian:
 *   0 "CMA1"   4 pid u32   8 pid-ns inode u64   16 pid-ns device u32
 *  20 uid u32  24 boot id 16 bytes   40 probe address u64
 *  48 table address u64   56 start time u64
 */
void cma_addr_encode(const struct cma_id *id, struct nic_addr *out)
{
	uint8_t *p = out->bytes;

	_Static_assert(NIC_ADDR_LEN == 64, "the cma address fills 64 bytes");
	memcpy(p, "CMA1", 4);
	put32(p + 4, id->pid);
	put64(p + 8, id->ns_ino);
	put32(p + 16, id->ns_dev);
	put32(p + 20, id->uid);
	memcpy(p + 24, id->boot, 16);
	put64(p + 40, id->probe);
	put64(p + 48, id->table);
	put64(p + 56, id->start);
}

int cma_addr_decode(const struct nic_addr *a, struct cma_id *out)
{
	const uint8_t *p = a->bytes;

	if (memcmp(p, "CMA1", 4) != 0)
		return -EINVAL;
	out->pid = get32(p + 4);
	out->ns_ino = get64(p + 8);
	out->ns_dev = get32(p + 16);
	out->uid = get32(p + 20);
	memcpy(out->boot, p + 24, 16);
	out->probe = get64(p + 40);
	out->table = get64(p + 48);
	out->start = get64(p + 56);
	return out->pid && out->table && out->probe ? 0 : -EINVAL;
}

static void boot_str(const uint8_t b[16], char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

int cma_same_host(const struct cma_id *self, const struct cma_id *peer, char *why, size_t len)
{
	char a[33], b[33];

	if (memcmp(self->boot, peer->boot, 16) != 0) {
		boot_str(peer->boot, a);
		boot_str(self->boot, b);
		snprintf(why, len, "the peer runs on another host (boot id %s, ours %s)", a, b);
		return -EHOSTUNREACH;
	}
	if (self->ns_ino != peer->ns_ino || self->ns_dev != peer->ns_dev) {
		snprintf(why, len,
			 "the peer is in another PID namespace (pid:[%" PRIu64 "] dev %u, ours "
			 "pid:[%" PRIu64 "] dev %u): its pid %u means nothing here",
			 peer->ns_ino, peer->ns_dev, self->ns_ino, self->ns_dev, peer->pid);
		return -EHOSTUNREACH;
	}
	return 0;
}

/* ------------------------------------------------------------- explanations */

struct ids {
	long uid[3]; /* real, effective, saved */
	long gid[3];
	unsigned long long capeff;
	int seccomp;
	bool ok;
};

/* Uid:, Gid:, CapEff:, Seccomp: of <proc_root>/<who>/status. */
static void read_ids(const char *who, struct ids *o)
{
	char path[256], buf[4096];
	const char *p;

	memset(o, 0, sizeof(*o));
	o->seccomp = -1;
	snprintf(path, sizeof(path), "%s/%s/status", proc_root, who);
	if (read_file(path, buf, sizeof(buf)) < 0)
		return;
	p = strstr(buf, "\nUid:");
	o->ok = p && sscanf(p + 5, "%ld %ld %ld", &o->uid[0], &o->uid[1], &o->uid[2]) == 3;
	p = strstr(buf, "\nGid:");
	o->ok = o->ok && p && sscanf(p + 5, "%ld %ld %ld", &o->gid[0], &o->gid[1], &o->gid[2]) == 3;
	p = strstr(buf, "\nCapEff:");
	if (p)
		sscanf(p + 8, "%llx", &o->capeff);
	p = strstr(buf, "\nSeccomp:");
	if (p)
		sscanf(p + 9, "%d", &o->seccomp);
}

static int ptrace_scope(void)
{
	char path[256], buf[16];

	snprintf(path, sizeof(path), "%s/sys/kernel/yama/ptrace_scope", proc_root);
	return read_file(path, buf, sizeof(buf)) > 0 ? atoi(buf) : -1; /* -1: no Yama */
}

/* Appends "; " then fmt to why (which holds *used bytes). */
__attribute__((format(printf, 4, 5)))
static void say(char *why, size_t len, size_t *used, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*used + 3 >= len)
		return;
	if (*used) {
		memcpy(why + *used, "; ", 3);
		*used += 2;
	}
	va_start(ap, fmt);
	n = vsnprintf(why + *used, len - *used, fmt, ap);
	va_end(ap);
	if (n > 0)
		*used = *used + (size_t)n < len ? *used + (size_t)n : len - 1;
}

/* Why the kernel said EPERM to process_vm_readv of pid. */
static void explain_eperm(uint32_t pid, char *why, size_t len)
{
	struct ids me, peer;
	char who[16];
	size_t used = 0;
	bool cap, uid_ok, gid_ok;
	int scope = ptrace_scope();

	snprintf(who, sizeof(who), "%u", pid);
	read_ids("self", &me);
	read_ids(who, &peer);
	cap = me.capeff >> CAP_SYS_PTRACE_BIT & 1;
	say(why, len, &used, "the kernel refuses process_vm_readv of pid %u (EPERM)", pid);
	uid_ok = peer.uid[0] == me.uid[0] && peer.uid[1] == me.uid[0] && peer.uid[2] == me.uid[0];
	gid_ok = peer.gid[0] == me.gid[0] && peer.gid[1] == me.gid[0] && peer.gid[2] == me.gid[0];
	if (me.ok && peer.ok && !cap && (!uid_ok || !gid_ok))
		say(why, len, &used,
		    "different users: the peer runs as uid %ld/%ld/%ld gid %ld/%ld/%ld (real/"
		    "effective/saved), we as uid %ld gid %ld, and without CAP_SYS_PTRACE the kernel "
		    "wants all of them equal to ours",
		    peer.uid[0], peer.uid[1], peer.uid[2], peer.gid[0], peer.gid[1], peer.gid[2],
		    me.uid[0], me.gid[0]);
	else if (me.ok && !peer.ok)
		say(why, len, &used, "cannot read /proc/%u/status to compare users", pid);
	if (scope == 1)
		say(why, len, &used,
		    "Yama ptrace_scope is 1: only an ancestor of the peer, or a process the peer "
		    "named with prctl(PR_SET_PTRACER), may; start the peer with %s=1 (it then "
		    "allows any process of its uid) or set kernel.yama.ptrace_scope=0",
		    CMA_ENV_ALLOW_ANY);
	else if (scope == 2)
		say(why, len, &used, "Yama ptrace_scope is 2: only with CAP_SYS_PTRACE%s",
		    cap ? "" : ", which we lack");
	else if (scope >= 3)
		say(why, len, &used, "Yama ptrace_scope is %d: no process may, until reboot", scope);
	if (me.seccomp == 2)
		say(why, len, &used,
		    "a seccomp filter is active here (container runtimes' default profiles refuse "
		    "process_vm_readv without CAP_SYS_PTRACE)");
	if (used && !strchr(why, ';'))
		say(why, len, &used,
		    "the peer may be non-dumpable (set-uid or prctl(PR_SET_DUMPABLE, 0)) or an LSM "
		    "(AppArmor, SELinux) refused%s", cap ? "" : "; we lack CAP_SYS_PTRACE");
}

void cma_explain(int err, const struct cma_id *peer, char *why, size_t len)
{
	switch (err) {
	case EPERM:
	case EACCES:
		explain_eperm(peer->pid, why, len);
		break;
	case ESRCH:
		snprintf(why, len, "process %u has exited", peer->pid);
		break;
	case ENOSYS:
		snprintf(why, len,
			 "process_vm_readv is missing: a kernel without CONFIG_CROSS_MEMORY_ATTACH, or "
			 "a seccomp filter that hides it");
		break;
	case EFAULT:
		snprintf(why, len,
			 "the probe address 0x%" PRIx64 " is not mapped in pid %u: not the process "
			 "that published this address", peer->probe, peer->pid);
		break;
	default:
		snprintf(why, len, "process_vm_readv of pid %u: %s", peer->pid, strerror(err));
	}
}

/* ---------------------------------------------------------------- reachable */

/*
 * WRITEs need process_vm_writev, which a seccomp filter may refuse while
 * it lets readv through (profilers need readv).  A call that moves nothing
 * asks the filter and nothing else: the kernel returns 0 for an empty copy
 * before it looks at the peer, so no byte of it is touched.
 */
static int probe_writev(const struct cma_id *p, char *why, size_t len)
{
	struct iovec none = { NULL, 0 };
	int err;

	if (process_vm_writev((pid_t)p->pid, &none, 0, &none, 0, 0) == 0)
		return 0;
	err = errno;
	if (err == EPERM || err == EACCES)
		snprintf(why, len, "process_vm_writev is refused here (EPERM) though "
			 "process_vm_readv is not: a seccomp filter that allows reads only");
	else
		snprintf(why, len, "process_vm_writev: %s", strerror(err));
	return -err;
}

int cma_reachable(const struct nic *n, const struct nic_addr *peer, char *why, size_t len)
{
	const struct cma_ctx *ctx = cma_cctx_of(n);
	struct cma_id p;
	char pid[16], spare[8];
	uint64_t start;
	uint8_t byte = 0;
	struct iovec l = { &byte, 1 }, r;
	int rc;

	if (!why || !len) {
		why = spare;
		len = sizeof(spare);
	}
	why[0] = '\0';
	if (cma_addr_decode(peer, &p) != 0) {
		snprintf(why, len, "not a cma address");
		return -EINVAL;
	}
	rc = cma_same_host(&ctx->self, &p, why, len);
	if (rc)
		return rc;
	snprintf(pid, sizeof(pid), "%u", p.pid);
	if (read_start_time(pid, &start) == 0 && start != p.start) {
		snprintf(why, len, "process %u has exited (its pid now names a process started later)",
			 p.pid);
		return -ESRCH;
	}
	r.iov_base = (void *)(uintptr_t)p.probe;
	r.iov_len = 1;
	if (process_vm_readv((pid_t)p.pid, &l, 1, &r, 1, 0) != 1) {
		rc = errno ? errno : EIO;
		cma_explain(rc, &p, why, len);
		return -rc;
	}
	if (byte != CMA_PROBE_VALUE) {
		snprintf(why, len, "pid %u holds 0x%02x, not the cma probe byte, at 0x%" PRIx64
			 ": not the process that published this address", p.pid, byte, p.probe);
		return -EPROTO;
	}
	return probe_writev(&p, why, len);
}

/* ------------------------------------------------------- FERRY_CMA_ALLOW_ANY */

static pthread_mutex_t allow_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t allowed_pid; /* the process that did it: a fork()ed child has not */

/*
 * Under Yama ptrace_scope 1 a process may read only its descendants, or a
 * process that named it with prctl(PR_SET_PTRACER).  A target serving
 * several initiators cannot name them all (the call keeps one pid), so the
 * only way is PR_SET_PTRACER_ANY: done at open, once per process, only when
 * asked, and said loudly, since it opens this process to every process of
 * its uid (debuggers, and anything that runs as this user), not only to
 * ferry.
 */
void cma_allow_any(void)
{
	const char *v = getenv(CMA_ENV_ALLOW_ANY);

	if (!v || !*v || !strcmp(v, "0"))
		return;
	pthread_mutex_lock(&allow_lock);
	if (allowed_pid == getpid())
		goto out;
	allowed_pid = getpid();
	if (strcmp(v, "1") != 0)
		log_warn("cma: %s=%s ignored (1 allows, 0 or unset does not)", CMA_ENV_ALLOW_ANY, v);
	else if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
		log_warn("cma: %s=1: any process of uid %u may now read and write this process's "
			 "memory (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)), not only ferry peers",
			 CMA_ENV_ALLOW_ANY, (unsigned)getuid());
	else
		log_info("cma: %s=1: nothing to allow (prctl(PR_SET_PTRACER): %s: no Yama here; the "
			 "uid rules apply)", CMA_ENV_ALLOW_ANY, strerror(errno));
out:
	pthread_mutex_unlock(&allow_lock);
}
