/* SPDX-License-Identifier: MIT */
/*
 * ferry - move large buffers (LLM KV cache blocks) between processes and
 * machines with one-sided RDMA READ/WRITE.
 *
 * Threading model, in one paragraph: an engine owns one pinned worker thread
 * per core; each worker owns one NIC context and runs a run-to-completion
 * loop.  Application threads talk to the workers through ports: a port is
 * owned by exactly one application thread at a time (it is the producer side
 * of lock-free SPSC rings), and so are the batches created on it.  Control
 * functions (memory registration, segments, ports) may be called from any
 * application thread; they serialise among themselves internally and may
 * block.  No function may be called from inside a worker.
 *
 * Errors: every function returning int returns 0 (or a count) on success and
 * a negative errno on failure.  Messages go to the sink set with
 * ferry_log_set() (stderr by default), never straight to stderr.
 *
 * Growth: struct ferry_opts, struct ferry_core_stats and struct
 * ferry_engine_stats gain fields at their end only.  ferry_opts_default()
 * records the size the caller was compiled with (opts_size) and
 * ferry_core_stats() / ferry_engine_stats() pass it, so a library newer
 * than the caller's header reads and writes only the fields the caller
 * knows.  Only ferry_* functions are exported.
 *
 * fork(): a child forked while engines exist (Python multiprocessing's
 * default start method on Linux) gets copies of them but none of their
 * threads; the parent keeps owning the engines, their connections, QPs
 * and peers, and goes on as if there were no child.  Before fork()
 * returns in the child, ferry closes the child's copies of every fd it
 * opened (connections, listeners, eventfds; not those that rdma-core,
 * hiredis or libcurl opened), so that a close, a destroy or a crash of
 * the parent ends its connections and stops its listeners while the
 * child lives; ferry also shuts a socket down before closing it, for the
 * instant before the child's handler has run.  In the child, every call
 * that takes an inherited engine or one of its ports, batches, prepared
 * sets or segments returns -EOWNERDEAD and does nothing -- it neither
 * hangs nor runs a core's pass, which would write into the parent's tcp
 * streams and QPs (ferry_segment_transport returns NULL).  EOWNERDEAD
 * (the state's owner is gone, from this process) rather than ECHILD,
 * which means "no child to wait for" (Python: ChildProcessError); no
 * other ferry call returns it.  Only reading the copy is left:
 * ferry_engine_address, ferry_engine_cores, ferry_core_nic,
 * ferry_batch_size and ferry_req_status (the state as of the fork; it is
 * not checked, being per request); ferry_log_set, no engine's call, works
 * there too (a parent thread inside the sink at the fork holds nothing in
 * the child).  ferry_engine_destroy of an inherited
 * engine returns at once: it tells no peer, joins no thread and frees
 * nothing (the copy's pages stay shared with the parent's until written).
 * RDMA: before opening its first verbs device ferry calls ibv_fork_init()
 * (process-wide, once): on kernels before 5.13, where a registered page
 * would become copy-on-write at a fork and the NIC keep the child's copy,
 * rdma-core then marks every registration MADV_DONTFORK -- a child has
 * no mapping of the parent's registered memory (touching it faults); from
 * 5.13 the kernel copies pinned pages for the child and the call does
 * nothing.  If the application registered memory through rdma-core
 * before, the call fails and ferry says so (set RDMAV_FORK_SAFE=1).
 * An engine of the child's own is refused: ferry_engine_create returns
 * -EOWNERDEAD (and says why) in a process forked while engines ran,
 * since liburcu-qsbr there still lists their threads and the new engine
 * would hang in its first RCU grace period.  A child that needs an engine
 * of its own is started by exec (multiprocessing "spawn" or
 * "forkserver"), or forked before any engine exists.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 5

/** Marks the library's exported functions (everything else is hidden). */
#if defined(__GNUC__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

/** Segments an engine can have open at once (their slots are allocated as
 *  needed; the endpoints, which hold QPs, are bounded per core by ep_cache). */
#define FERRY_MAX_SEGMENTS 4096

/** Handle of an opened remote segment (a peer engine's registered memory). */
typedef uint64_t ferry_seg_t;

/** Idle policy of the worker cores. */
enum ferry_idle {
	FERRY_IDLE_ADAPTIVE = 0, /**< spin while busy, then yield, then sleep; a
	                          *   thread in ferry_batch_wait runs the pass of
	                          *   a core asleep with nothing in flight */
	FERRY_IDLE_SPIN = 1,     /**< never yield: for dedicated cores */
	FERRY_IDLE_CALLER = 2,   /**< the application's threads run the cores' passes
	                          *   (ferry_batch_wait, ferry_progress) while they
	                          *   call in; a core's own thread stays asleep then
	                          *   and takes over 1 ms after the last such pass */
};

/** Engine options: call ferry_opts_default() first, then change fields. */
struct ferry_opts {
	size_t opts_size;      /**< sizeof the struct the caller was compiled with: set by
	                        *   ferry_opts_default(), leave it alone */
	const char *cores;     /**< "0-3,8" or "0xf" (a mask of up to 64 bits); at most 64
	                        *   cores, each online and listed once; NULL/"" = first
	                        *   online core */
	const char *nics;      /**< "auto" (default): every transport this host has -- the
	                        *   RDMA device of each core's NUMA node (if any), tcp
	                        *   and cma; segments pick per peer (see
	                        *   ferry_segment_transport).  Or a comma list: device
	                        *   names ("rxe0,rxe1", "loop" = software NIC) dealt to
	                        *   the cores round robin, and the words "tcp" and "cma"
	                        *   (every core gets that transport); one context per
	                        *   transport ("tcp@127.0.0.1,tcp": -EINVAL).  A device
	                        *   "tcp@ip[:port]" listens there; a fixed port binds
	                        *   once, so list one per core ("tcp@ip:7000,
	                        *   tcp@ip:7001"): dealt to two cores it is -EINVAL */
	const char *listen;    /**< control address "ip:port", at most 63 characters;
	                        *   port 0 = any */
	/* ferry_engine_create refuses a numeric knob outside its range -EINVAL. */
	uint32_t slice_size;   /**< bytes per work request, 4096..2^30 (default 65536) */
	uint32_t qps_per_ep;   /**< QPs per endpoint, 1..16 (default 2) */
	uint32_t wrs_per_qp;   /**< send queue depth per QP, 1..32768 (default 256) */
	uint32_t cqes;         /**< completion queue entries per core and transport,
	                        *   wrs_per_qp..2^20 (default 4096) */
	uint32_t signal_every; /**< signal at least every Nth WR, 1..wrs_per_qp (default 16) */
	uint32_t ring_size;    /**< SPSC ring slots per (port, core), a power of 2 in
	                        *   4..2^20 (default 1024) */
	uint32_t retries;      /**< retries per failed slice, other QP first, then other
	                        *   rails, 0..100 (default 9) */
	uint32_t timeout_ms;   /**< slice timeout; 0 = off (default 10000) */
	uint32_t rail_errors;  /**< errors within rail_window_ms that pause a rail,
	                        *   1..1000000 (default 3) */
	uint32_t rail_window_ms; /**< rail health window, 1..3600000 (default 100) */
	uint32_t rail_pause_ms;  /**< first pause of a failing rail, 1..rail_pause_max_ms;
	                          *   doubles while it keeps failing, ends early on a
	                          *   success (default 10) */
	uint32_t rail_pause_max_ms; /**< longest pause, 1..3600000 (default 2000) */
	uint32_t keepalive_ms; /**< tell every open segment's peer we are alive this often, so
	                        *   it keeps our QPs (default 5000; 0 = never); also a
	                        *   closing one's, while its last close waits for requests */
	uint32_t lease_ms;     /**< free the QPs of an initiator silent this long (crashed
	                        *   without disconnecting); >= 3x the peers' keepalive_ms
	                        *   (default 30000; 0 = never).  Also how long a DISCONNECT
	                        *   that cannot reach its peer is tried again (standing in
	                        *   for the peer's lease on us), never more than 32 sends;
	                        *   when 0 (the peer likely has no lease to free them
	                        *   either), until the 32 sends are used: ~2 min when each
	                        *   connect fails at once, ~7 min when each times out */
	uint32_t ep_cache;     /**< endpoints kept per core, 1..FERRY_MAX_SEGMENTS (default 128);
	                        *   beyond, the least useful idle one is evicted (SIEVE).
	                        *   At most 1024 / qps_per_ep - 1 are kept (the QPs a core's
	                        *   context holds, one spare for a repair): a larger value
	                        *   is lowered to that (said when verbose) */
	enum ferry_idle idle;  /**< idle policy (default adaptive) */
	int verbose;           /**< log start-up decisions (to the log sink: ferry_log_set) */
	int counters;          /**< 1 (default): per-core latency histogram and hardware
	                        *   counters; 0: off (software counters stay; used to
	                        *   measure what the others cost) */
	/* Added in 0.2 (ferry_opts_default records which fields a caller has). */
	const char *name;      /**< this engine's name in the metadata store,
	                        *   [A-Za-z0-9._-]+, at most 63 characters; NULL = none
	                        *   (peers reach it by "host:port" only) */
	const char *metadata;  /**< where names are published: "p2p" (default: no store,
	                        *   "host:port" addresses only), "redis://host:port" or
	                        *   "etcd://host:port"; at most 127 characters */
	const char *secret_file; /**< the cluster key: a regular file of 32 bytes (not
	                        *   counting trailing whitespace) to 64 KiB, mode 0600
	                        *   (group/other-readable is refused); every control
	                        *   and tcp data connection proves both sides hold it.
	                        *   NULL = no authentication */
	/* Added in 0.3. */
	uint32_t idle_linger_us; /**< adaptive idle: after its last work a core keeps polling
	                        *   (spinning, yielding now and then) this long before it
	                        *   sleeps, so that the next request of a ping-pong or of
	                        *   a serving loop's next step finds it awake; 0 = sleep at
	                        *   once; at most 1000000 (default 50) */
};

/** Operation of a request, seen from the initiator. */
enum ferry_op {
	FERRY_OP_READ = 0,  /**< remote -> local */
	FERRY_OP_WRITE = 1, /**< local -> remote */
};

/** One transfer: len bytes between local and remote (peer virtual address). */
struct ferry_req {
	enum ferry_op op;
	void *local;      /**< inside a region registered with this engine */
	ferry_seg_t seg;  /**< from ferry_segment_open() */
	uint64_t remote;  /**< inside a region the peer registered */
	uint64_t len;     /**< > 0 */
};

/** Final or current state of a request. */
enum ferry_state {
	FERRY_PENDING = 0,
	FERRY_DONE = 1,
	FERRY_FAILED = 2,
	FERRY_TIMEOUT = 3,
};

struct ferry_req_status {
	enum ferry_state state;
	int error;      /**< negative errno when FAILED/TIMEOUT, else 0 */
	uint64_t bytes; /**< bytes transferred successfully */
};

#define FERRY_LAT_BUCKETS 48

/** Per-core counters; single writer (the core), readable from any thread.
 *  New counters are added at the end (see ferry_core_stats()). */
struct ferry_core_stats {
	unsigned cpu;              /**< CPU the worker is pinned to */
	int numa_node;             /**< NUMA node of its memory, -1 unknown */
	uint64_t wrs_posted;       /**< work requests handed to the NIC */
	uint64_t completions;      /**< work requests retired (signalled or not) */
	uint64_t cqes;             /**< completion entries polled */
	uint64_t bytes;            /**< bytes moved successfully */
	uint64_t doorbells;        /**< post calls (one per QP per pass) */
	uint64_t polls;            /**< CQ polls */
	uint64_t empty_polls;      /**< CQ polls that returned nothing */
	uint64_t qp_full;          /**< times a QP had no room for pending work (its
	                            *   depth, or its RDMA READ credits used up) */
	uint64_t cq_full;          /**< times the CQ quota had no room */
	uint64_t pool_empty;       /**< times the slice pool ran dry */
	uint64_t slices_in_flight; /**< slices cut and not yet retired (gauge) */
	uint64_t wr_errors;        /**< completions with an error status */
	uint64_t retries;          /**< slices posted again after an error */
	uint64_t qp_resets;        /**< broken QPs replaced through a new handshake */
	uint64_t handovers;        /**< failed slices handed to another core's rail */
	uint64_t rail_pauses;      /**< times a rail was paused for its error rate */
	uint64_t ep_evictions;     /**< endpoints evicted from this core's cache (SIEVE) */
	uint64_t reqs_done;        /**< request parts finished by this core */
	uint64_t provider_errors;  /**< post/poll failures: always a bug, should be 0 */
	uint64_t sleeps;           /**< times the core went to sleep when idle */
	uint64_t wakeups;          /**< futex wakes of application threads sleeping in ferry_batch_wait */
	uint64_t busy_ns;          /**< time in loop passes that did work */
	uint64_t idle_ns;          /**< time in passes that did nothing (incl. sleep) */
	uint64_t loops;            /**< loop passes */
	/* Hardware counters of the worker thread (perf_event_open); UINT64_MAX
	 * when the kernel does not allow or have them.  Read at most every
	 * 100 ms per core (a read interrupts the worker's CPU). */
	uint64_t cycles;
	uint64_t instructions;
	uint64_t cache_misses;
	uint64_t ctx_switches;
	/* Slice latency (post to completion), log2 buckets of clock ticks:
	 * bucket k counts latencies in [2^(k-1), 2^k) ticks; lat_hz ticks/s. */
	uint64_t lat_hz;
	uint64_t lat[FERRY_LAT_BUCKETS];
	/* Added in 0.2. */
	uint64_t nic_events;       /**< device events handled: port down/up, device fatal, QP fatal */
	/* Added in 0.4. */
	uint64_t caller_passes;    /**< loop passes run by application threads
	                            *   (FERRY_IDLE_CALLER; adaptive: a waiter's pass
	                            *   of a sleeping core), counted in loops too */
	/* Added in 0.5. */
	uint64_t qp_abandons;      /**< broken QPs whose WRs never came back (a dead
	                            *   device): given up, their slices retried or failed */
};

/** Engine-wide counters of the control plane; readable from any thread.
 *  Added in 0.5.  New counters are added at the end (see ferry_engine_stats()). */
struct ferry_engine_stats {
	uint64_t disconnects_dropped;  /**< DISCONNECTs (one per QP a peer holds for us) dropped
	                                *   unsent: the queue full (65536, the oldest go), or
	                                *   beyond the 256 that engine destroy sends once more;
	                                *   the peer's lease frees those QPs */
	uint64_t disconnects_given_up; /**< DISCONNECTs that never reached their peer (cut off)
	                                *   and whose tries ended: lease_ms after the first
	                                *   failure (none when 0), or 32 sends; the peer's lease
	                                *   frees those QPs */
};

struct ferry_engine;
struct ferry_port;
struct ferry_batch;

/** Severity of a library message. */
enum ferry_log_level {
	FERRY_LOG_ERROR = 0, /**< a call failed or a peer misbehaved: the message says why */
	FERRY_LOG_WARN = 1,  /**< something the operator should know (a peer restarted, ...) */
	FERRY_LOG_INFO = 2,  /**< start-up decisions (opts.verbose, GID choice) */
	FERRY_LOG_DEBUG = 3,
};

/** A message sink: msg is one line without its newline, valid during the call. */
typedef void (*ferry_log_fn)(void *arg, enum ferry_log_level level, const char *msg);

/**
 * Send every message of the library to fn(arg, level, msg) instead of
 * stderr (NULL: back to stderr, "ferry: " prefixed).  Process-wide.  Once
 * it returns, the previous sink is no longer called (its arg may be freed).
 * fn may be called from any ferry thread (never from a core's loop: a
 * core's messages reach fn from the repair thread, "core N: " prefixed,
 * up to about a second later), one call at a time per thread, and must
 * not call into ferry.  Any thread.
 */
FERRY_API void ferry_log_set(ferry_log_fn fn, void *arg);

/**
 * Fill o (size bytes, the caller's sizeof(struct ferry_opts)) with the
 * defaults and record size in o->opts_size.  Use ferry_opts_default().
 * Any thread.
 */
FERRY_API void ferry_opts_init(struct ferry_opts *o, size_t size);

/** Fill o with the defaults.  Any thread. */
FERRY_API void ferry_opts_default(struct ferry_opts *o);
#define ferry_opts_default(o) ferry_opts_init((o), sizeof(*(o)))

/**
 * Override fields of o from the environment: FERRY_CORES, FERRY_NICS,
 * FERRY_LISTEN, FERRY_SLICE_SIZE, FERRY_QPS_PER_EP, FERRY_WRS_PER_QP,
 * FERRY_CQES, FERRY_SIGNAL_EVERY, FERRY_RING_SIZE, FERRY_RETRIES,
 * FERRY_TIMEOUT_MS, FERRY_RAIL_ERRORS, FERRY_RAIL_WINDOW_MS, FERRY_RAIL_PAUSE_MS,
 * FERRY_RAIL_PAUSE_MAX_MS, FERRY_KEEPALIVE_MS, FERRY_LEASE_MS, FERRY_EP_CACHE,
 * FERRY_IDLE (adaptive|spin|caller), FERRY_IDLE_LINGER_US, FERRY_VERBOSE (0|1),
 * FERRY_COUNTERS (0|1), FERRY_NAME, FERRY_METADATA, FERRY_SECRET_FILE.
 * Numbers are plain decimal up to 4294967295; K/M/G (binary) only on
 * FERRY_SLICE_SIZE, FERRY_WRS_PER_QP, FERRY_CQES and FERRY_RING_SIZE.  A
 * number's range is checked by ferry_engine_create, not here.
 * Returns -EINVAL (and names each bad variable in a message to the log
 * sink, see ferry_log_set) on a malformed value (an empty one too, but
 * FERRY_CORES="" means the first online core); o is left unchanged then.
 * String fields point into the environment.  Read by the transports, not
 * here (README): FERRY_GID_INDEX, FERRY_IB_TIMEOUT,
 * FERRY_IB_RETRY_CNT, FERRY_IB_RD_ATOMIC, FERRY_IB_TC, FERRY_IB_SL (verbs),
 * FERRY_CMA_ALLOW_ANY (cma).
 * Any thread.
 */
FERRY_API int ferry_opts_from_env(struct ferry_opts *o);

/**
 * Create an engine: parse and check options, open the NICs, start one pinned
 * worker per core and the control thread listening on o->listen; with
 * o->name, publish the name in the o->metadata store (create-if-absent,
 * under a 10 s lease the engine renews).
 * -EINVAL on bad options (a message to the log sink names the culprit); -ENODEV
 * when a NIC of o->nics does not exist, -EPROTONOSUPPORT when a transport
 * is not built in; a NIC's own error when it cannot be opened or cannot
 * make a CQ of o->cqes entries (rdma-core's errno with verbs; the log says
 * which NIC); -ENOMEM; bind's errors for o->listen (-EADDRINUSE,
 * -EADDRNOTAVAIL); the key file's (open's: -ENOENT, -EACCES; -EPERM when
 * others may read it, -EINVAL when it is too short or not a regular file,
 * -EFBIG past 64 KiB); -EEXIST when a live engine holds o->name; the store's
 * errors (-ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT, ...) when the name
 * cannot be published.  On failure nothing is left behind (no thread, no
 * descriptor) and *out is not written.
 * Any thread; blocks for the store (a few seconds at most).
 */
FERRY_API int ferry_engine_create(const struct ferry_opts *o, struct ferry_engine **out);

/**
 * Stop the workers and the control thread and free what the engine holds
 * (the name, if any, is removed from the metadata store); batches and
 * prepared sets the application did not destroy are not freed (destroy
 * them, then ports, first: README "Lifetimes").  Requests
 * still in flight end FAILED (-ECANCELED) first.  Segments still open are
 * closed, however many of their opens were not closed.  The peers of the
 * segments still open are asked to free their halves of the QPs, up to 64
 * peers at once: ~10 s for each 64 that do not answer (and ~250 ms more
 * for the QPs of handshakes it cut short).  Must not race
 * with any other call on the engine.  NULL is ignored.  In a forked
 * child, an engine inherited from the parent is left alone: no peer is
 * told, no thread joined, nothing freed (see fork() above).
 */
FERRY_API void ferry_engine_destroy(struct ferry_engine *e);

/** The control address peers pass to ferry_segment_open(), "host:port". Any thread. */
FERRY_API const char *ferry_engine_address(const struct ferry_engine *e);

/**
 * Names of the NIC contexts that core `core` owns, comma-joined in the
 * order device, tcp, cma ("loop", "rxe0", "rxe0,tcp,cma", "tcp,cma"), NULL
 * for a bad core.  With nics "auto" the device is the NUMA-matched choice.
 * Any thread.
 */
FERRY_API const char *ferry_core_nic(const struct ferry_engine *e, unsigned core);

/** Number of worker cores of the engine.  Any thread. */
FERRY_API unsigned ferry_engine_cores(const struct ferry_engine *e);

/**
 * Register [addr, addr+len) for transfers on every NIC of the engine, local
 * and remote.  Regions may not overlap (-EEXIST).  -EINVAL on NULL, len 0
 * or a range past the address space; -EFAULT when the range is not all
 * mapped readable (and writable, when peers may write) on an engine
 * without verbs (with verbs, rdma-core's registration decides and its
 * errno is returned); -ENOSPC past 16384 regions; -ENOMEM when a
 * transport's key table is full (the loop NIC's is shared by the whole
 * process: 65536 registrations, one per region and core of every loop
 * engine).  Any thread; may block.
 */
FERRY_API int ferry_mem_register(struct ferry_engine *e, void *addr, size_t len);

/** What a peer may do to a registered region (local use is always allowed,
 *  but a READ into memory this process may not write is refused -EFAULT). */
#define FERRY_ACCESS_REMOTE_READ 0x1u
#define FERRY_ACCESS_REMOTE_WRITE 0x2u

/**
 * ferry_mem_register with the remote accesses a peer gets: a bitwise or of
 * FERRY_ACCESS_REMOTE_READ and FERRY_ACCESS_REMOTE_WRITE (0: local use
 * only).  ferry_mem_register allows both.  A peer's WRITE into a region
 * without REMOTE_WRITE is refused before posting (-EACCES in the request's
 * status), and the transport refuses it too (the RDMA registration lacks
 * remote write; tcp and cma targets check).  Read-only memory (PROT_READ)
 * registers for REMOTE_READ (or 0): it can be the local side of a WRITE,
 * while a READ into it ends FAILED -EFAULT (ferry_prep_create refuses one
 * -EFAULT), as on a NIC.  -EINVAL on unknown bits.  Any thread; may block.
 */
FERRY_API int ferry_mem_register_access(struct ferry_engine *e, void *addr, size_t len,
					unsigned access);

/**
 * Unregister the region that starts at addr.  -ENOENT if there is none,
 * -EBUSY while requests of this engine still use it.  Peers that opened this
 * engine before keep a stale descriptor: their requests to the region end
 * FAILED.  Any thread; may block.
 */
FERRY_API int ferry_mem_unregister(struct ferry_engine *e, void *addr);

/**
 * Open the segment of the engine listening at address ("host:port"), or of
 * the engine that published the name address ("prefill-0": no colon) in
 * this engine's metadata store: the store gives its control address and
 * incarnation (asked for at most 2 s; -ENOENT no such name, -EINVAL a name
 * with metadata "p2p", -ECONNREFUSED/-EHOSTUNREACH/-ETIMEDOUT store
 * unreachable, -EPROTO a malformed record, -ESTALE when the engine there
 * is not the incarnation the store names).  Then: fetch
 * its descriptor (registered regions) over TCP and set up endpoints from
 * every local core (at most opts.ep_cache per core: beyond, idle endpoints
 * of other segments are evicted; -EBUSY when every cached one is busy).
 * Opening an address that is open already ("localhost:port" counts as the
 * a.b.c.d:port localhost resolves to; other spellings of one engine, such
 * as 0.0.0.0:port beside 127.0.0.1:port, open separate segments) costs one round trip (the peer's
 * incarnation is checked) and returns the same handle, or, when the peer
 * process restarted, a new handle: the old one is stale (its requests fail,
 * -ESTALE) and should be closed; likewise, a name that a new incarnation
 * holds now makes the handles opened under it stale.  Keep handles rather
 * than reopening per transfer.
 *
 * Opens are counted, like dup/close: every successful open, the first or
 * one that returned a handle open already, is to be matched by one
 * ferry_segment_close of that handle, and only the last of those closes
 * the segment.  So independent parts of an application may each open the
 * same peer and close it when they are done without breaking the others.
 * An open by name and an open by address that reach the same engine (same
 * control address, same incarnation) return the same handle and add to
 * the same count.  A handle that went stale keeps the count it had: each
 * open that returned it still closes it once (its requests fail -ESTALE
 * whatever the count), and opens after the restart return the new handle,
 * counted on its own.  More than UINT32_MAX opens of one handle not
 * closed: -EOVERFLOW.  ferry_engine_destroy closes every segment still
 * open, whatever its count.
 *
 * -EINVAL (NULL, an address of 64 characters or more, not "a.b.c.d:port"
 * or "localhost:port"), -ECONNREFUSED (nothing listens there), -ECONNRESET
 * (the peer closed
 * the connection mid-call), -EHOSTUNREACH (no route to it), -ETIMEDOUT,
 * -EPROTO on control-plane failures; -EPROTONOSUPPORT when no transport of
 * ours reaches the peer (the log lists ours); -EMFILE, -ENFILE or -ENOMEM
 * when our QPs cannot connect for want of descriptors (tcp dials one per
 * QP) or memory here; -ENOSPC past FERRY_MAX_SEGMENTS
 * open segments; -EACCES when authentication failed (another
 * cluster key, or a key on one side only: the log says which); -EBUSY also
 * when the peer is at its connection cap; -ECANCELED when
 * ferry_engine_destroy began meanwhile.  Any thread; blocks for the round
 * trips, but opens of different peers proceed in parallel (no engine lock
 * is held across a round trip).
 */
FERRY_API int ferry_segment_open(struct ferry_engine *e, const char *address, ferry_seg_t *out);

/**
 * Refetch the descriptor of an opened segment (after the peer registered
 * more memory).  -ESTALE when the peer restarted (the segment is then
 * stale: open the address again); -ENOENT for an unknown or closed handle;
 * the round trip's errors as ferry_segment_open's.  A refresh that finds the regions
 * unchanged keeps nothing (call it as often as needed); -ENOSPC once they
 * changed 8 times since the open (the replaced descriptors stay while
 * requests and prepared sets may use them: close and open again).  Any
 * thread; blocks for the round trip.
 */
FERRY_API int ferry_segment_refresh(struct ferry_engine *e, ferry_seg_t seg);

/**
 * Close a segment: drop one open of it (see ferry_segment_open).  While
 * other opens of the handle are not closed yet, this returns 0 at once and
 * the segment stays open for them: its handle, requests and endpoints are
 * untouched.  The last close closes it: later submissions to it fail with
 * -EBADF; requests in flight on it end before this returns: DONE, or
 * FAILED -ECANCELED (not posted yet), or as they would have anyway (a
 * posted slice's error or timeout: FAILED -EIO, -EHOSTDOWN, TIMEOUT).  -ENOENT for an unknown handle, or one closed as
 * often as it was opened (closed for good: a later open of the address
 * returns a new handle).  Any thread; the last close may block: for those
 * requests, and for the peer to free its halves of the QPs (one round
 * trip; at most ~10 s for a peer that does not answer, whose lease on
 * them then frees them).  The wait for the requests is as long as theirs:
 * with opts.timeout_ms set, a posted slice that makes no progress ends
 * after timeout_ms on each of its tries (retries + 1 at most); with
 * timeout_ms 0 nothing of ferry's ends a posted slice whose peer stops
 * serving it (a peer stopped with SIGSTOP, whose kernel keeps its tcp
 * connection alive; a dead device), and the last close waits for it with
 * no bound.  To bound a close, set timeout_ms: ferry_batch_cancel ends
 * only the slices not posted yet.  Meanwhile the keepalives go on (the
 * peer keeps our QPs).  A notification queued to the segment
 * (ferry_notify) is not such a request: the close neither waits for it
 * nor cancels it; it goes on to the peer it was queued for (by address
 * and incarnation, not by handle) and its slot ends on its own, possibly
 * after this returned: wait for its batch (ferry_batch_wait), or
 * ferry_batch_cancel it.
 */
FERRY_API int ferry_segment_close(struct ferry_engine *e, ferry_seg_t seg);

/**
 * The transport an open segment goes over: "cma" (same host: copies
 * between the two address spaces), "verbs" (RDMA), "tcp", or "loop"; NULL
 * for an unknown or closed handle.  ferry_segment_open picks the first of
 * that order that both engines offer and that reaches the peer (see
 * opts.nics).  The string is static.  Any thread.
 */
FERRY_API const char *ferry_segment_transport(struct ferry_engine *e, ferry_seg_t seg);

/** A region a peer registered, as ferry_segment_regions lists it. */
struct ferry_region_info {
	uint64_t addr;   /**< the peer's virtual address: a request's remote */
	uint64_t len;
	unsigned access; /**< FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE */
};

/**
 * The regions the peer of seg registered, sorted by address, as of the
 * last open or ferry_segment_refresh: up to max of them into out.  Returns
 * how many the peer has (more than max: call again with more room), or
 * -ENOENT (unknown or closed handle), -EINVAL.  Any thread.
 */
FERRY_API int ferry_segment_regions(struct ferry_engine *e, ferry_seg_t seg,
				    struct ferry_region_info *out, uint32_t max);

/**
 * Create a port: the submission channel of one application thread.  Only one
 * thread may use a port (and its batches) at a time.  -ENOSPC past 64 ports
 * of the engine at once, -ENOMEM, -EINVAL.  Any thread.
 */
FERRY_API int ferry_port_create(struct ferry_engine *e, struct ferry_port **out);

/**
 * Destroy a port.  Its batches and prepared sets must have been destroyed
 * (else -EBUSY and nothing happens).  The owning thread.
 */
FERRY_API int ferry_port_destroy(struct ferry_port *p);

/**
 * Create a batch of up to capacity requests on port p: capacity 1..2^24
 * (16777216), else -EINVAL; -ENOMEM.  The port's thread.
 */
FERRY_API int ferry_batch_create(struct ferry_port *p, uint32_t capacity, struct ferry_batch **out);

/** Destroy a batch: -EBUSY while any of its requests is PENDING.  The port's thread. */
FERRY_API int ferry_batch_destroy(struct ferry_batch *b);

/**
 * Forget the requests of a batch whose requests have all ended, so that its
 * slots can be used again.  -EBUSY while any is PENDING.  The port's thread.
 */
FERRY_API int ferry_batch_reset(struct ferry_batch *b);

/**
 * Append n requests to batch b and hand them to the cores.  Requests are
 * validated first: a bad one (NULL local, len 0, bad op, unknown or closed
 * segment, local range outside a registered region, remote range outside
 * the peer's regions, a peer's region that does not allow the op, a stale
 * segment) is not posted and ends FAILED at once with the reason (-EINVAL,
 * -EBADF, -EFAULT, -EACCES, -ESTALE) in its status; the others go on.  Returns the
 * index of the first request in the batch, or -ENOSPC when the batch has
 * fewer than n free slots (nothing submitted), -EINVAL on NULL arguments.
 * When a ring to a core is full the call waits for room (back-pressure,
 * never loss).  The port's thread.
 */
FERRY_API int ferry_submit(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n);

/**
 * Like ferry_submit, but never waits: requests are taken in order until one
 * would wait for room on a core's ring (or the batch is full), and the
 * call returns how many it took, 0..n (-EINVAL on NULL arguments).  The
 * ones taken occupy the batch's next slots, as with ferry_submit; a bad one
 * counts as taken and ends FAILED at once.  A serving loop calls it again
 * with the rest later.  The port's thread.
 */
FERRY_API int ferry_try_submit(struct ferry_batch *b, const struct ferry_req *reqs, uint32_t n);

/**
 * Cancel what b has not moved yet: slices not yet posted are dropped and
 * their requests end FAILED (-ECANCELED) once their posted slices are back;
 * posted slices finish (a request that completes meanwhile is DONE).  Once
 * ferry_batch_wait returns 0 or -EIO afterwards, no byte of the batch
 * moves any more.  0, or -EINVAL.  The port's thread.
 */
FERRY_API int ferry_batch_cancel(struct ferry_batch *b);

struct ferry_prep;

/**
 * Prepare n requests to segment seg (their seg fields are ignored) once:
 * every local and remote range is validated now, so that
 * ferry_prep_submit can queue entries by index with no per-request
 * checks.  The local regions it uses cannot be unregistered while it
 * exists (-EBUSY).  -EINVAL (NULL, n == 0 or above 2^24, a bad op or length), -EBADF
 * (unknown or closed segment), -ESTALE (the peer restarted: open its
 * address again), -EFAULT (a range outside registered memory,
 * with the index in the log), -EACCES (a peer's region that does not allow
 * the op: FERRY_ACCESS_REMOTE_*), -ENOMEM.  The port's thread.
 */
FERRY_API int ferry_prep_create(struct ferry_port *p, ferry_seg_t seg, const struct ferry_req *reqs,
				uint32_t n, struct ferry_prep **out);

/**
 * Submit entries idx[0..n) of pr into b's next slots (like ferry_submit:
 * waits for room on a full ring).  Returns the slot of the first, or
 * -ENOSPC (batch too small), -EINVAL (NULL, pr of another port, an index
 * out of range: nothing submitted).  If the segment was closed, the
 * requests end FAILED -EBADF; if it is stale (the peer restarted),
 * -ESTALE, as with ferry_submit.  The set uses the peer's regions as the
 * segment's last open or ferry_segment_refresh saw them, as ferry_submit
 * does: after a refresh that found them changed, the first submit of the
 * set checks its entries again (once per change): an entry whose remote
 * range no longer lies in a region of the peer ends FAILED -EFAULT (or
 * -EACCES, when the region no longer allows its op) without anything
 * posted, while the others go on, with the region's current keys (a
 * region the peer registered again works again).  n == 0 submits nothing
 * and returns the next slot (idx may be NULL), as ferry_submit does.  The
 * port's thread.
 */
FERRY_API int ferry_prep_submit(struct ferry_batch *b, const struct ferry_prep *pr,
				const uint32_t *idx, uint32_t n);

/** Free a prepared set (its requests in flight are not affected).  The port's thread. */
FERRY_API int ferry_prep_destroy(struct ferry_prep *pr);

/**
 * Wait for every submitted request of b to end.  0 when all are DONE, -EIO
 * when all ended but some did not succeed, -ETIMEDOUT when timeout_ms ran
 * out with requests still pending (they go on).  timeout_ms < 0 waits
 * forever, 0 only checks.  It may run loop passes of the cores meanwhile
 * (FERRY_IDLE_CALLER; adaptive: of a core asleep with nothing in flight),
 * registering the thread with liburcu-qsbr on its first (adaptive: only
 * until it returns) -- never a thread the application registered itself,
 * which only waits.  The port's thread.
 */
FERRY_API int ferry_batch_wait(struct ferry_batch *b, int64_t timeout_ms);

/**
 * FERRY_IDLE_CALLER: run one loop pass of every core of e that no other
 * thread is running (post, poll, serve peers' frames); returns how much
 * work it did (0: nothing to do, or another thread had the cores).  With
 * other idle policies the cores' threads do this and it returns 0.  A
 * thread the application registered with liburcu-qsbr runs no pass (0);
 * one that ferry registered must not be registered by the application
 * afterwards.  Any thread.
 */
FERRY_API int ferry_progress(struct ferry_engine *e);

/** Number of requests submitted to b since creation or the last reset. */
FERRY_API uint32_t ferry_batch_size(const struct ferry_batch *b);

/**
 * Status of request i of batch b.  -ERANGE if i was never submitted.  Any
 * thread (the values are read atomically; bytes may lag state by nothing:
 * once state is final, bytes and error are final).  In a forked child, the
 * copy of a parent's batch reads as it was at the fork.
 */
FERRY_API int ferry_req_status(const struct ferry_batch *b, uint32_t i, struct ferry_req_status *st);

/**
 * Snapshot of core's counters (core = 0..ferry_engine_cores()-1) into out,
 * of size bytes (the caller's sizeof(struct ferry_core_stats)): the fields
 * that fit are filled.  -EINVAL, -ERANGE.  Use ferry_core_stats().  Any thread.
 */
FERRY_API int ferry_core_stats_get(const struct ferry_engine *e, unsigned core,
				   struct ferry_core_stats *out, size_t size);

/** Snapshot of core's counters (core = 0..ferry_engine_cores()-1).  Any thread. */
FERRY_API int ferry_core_stats(const struct ferry_engine *e, unsigned core,
			       struct ferry_core_stats *out);
#define ferry_core_stats(e, core, out) ferry_core_stats_get((e), (core), (out), sizeof(*(out)))

/**
 * Snapshot of the engine-wide counters into out, of size bytes (the
 * caller's sizeof(struct ferry_engine_stats)): the fields that fit are
 * filled.  -EINVAL (size smaller than 0.5's struct), -EOWNERDEAD in a
 * forked child.  Use ferry_engine_stats().  Any thread.  Added in 0.5.
 */
FERRY_API int ferry_engine_stats_get(const struct ferry_engine *e, struct ferry_engine_stats *out,
				     size_t size);

/** Snapshot of the engine-wide counters.  Any thread.  Added in 0.5. */
FERRY_API int ferry_engine_stats(const struct ferry_engine *e, struct ferry_engine_stats *out);
#define ferry_engine_stats(e, out) ferry_engine_stats_get((e), (out), sizeof(*(out)))

/**
 * Why core's hardware counters are missing, in plain words ("all counting"
 * when none is): copied into buf (NUL-terminated, truncated to len).  0 or
 * -EINVAL / -ERANGE.  Any thread.
 */
FERRY_API int ferry_core_counters_note(const struct ferry_engine *e, unsigned core, char *buf, size_t len);

/** A buffer size that always holds ferry_stats_format_prometheus's text of
 *  ncores cores (every counter at 20 digits, every histogram bucket). */
#define FERRY_PROM_BYTES(ncores) (4096 + 14336 * (size_t)(ncores))

/**
 * Every core's counters in the Prometheus text exposition format, labelled
 * with the engine's address and the core, then (added in 0.5) the
 * engine-wide ones of ferry_engine_stats(), labelled with the address
 * only: bytes written (without the NUL),
 * or -ENOSPC (buf then holds "").  About 3.5 KiB + 6.5 KiB per core; a
 * buffer of FERRY_PROM_BYTES(ferry_engine_cores(e)) bytes always suffices.
 * Any thread.
 */
FERRY_API int ferry_stats_format_prometheus(const struct ferry_engine *e, char *buf, size_t len);

/** Largest notification message, bytes. */
#define FERRY_NOTIF_MAX 256

/** A notification a peer sent with ferry_notify, as ferry_notif_poll hands it out. */
struct ferry_notif {
	char from[64];   /**< the sender's opts.name, or its control address "host:port" */
	uint32_t len;    /**< bytes of msg used, 0..FERRY_NOTIF_MAX */
	unsigned char msg[FERRY_NOTIF_MAX];
};

/**
 * Queue a notification of len bytes (0..FERRY_NOTIF_MAX) to the peer of seg,
 * delivered only after every WRITE submitted to seg earlier in b has landed
 * in the peer's memory.  It takes b's next slot (polled like a request:
 * ferry_req_status, ferry_batch_wait, ferry_batch_cancel), which ends DONE
 * once the peer queued it (bytes = len), TIMEOUT (-ETIMEDOUT: the peer's
 * queue stayed full for opts.timeout_ms (0: it waits for room for ever),
 * or the peer did not answer within 2 s, or the engine was destroyed while waiting for its answer: it may
 * still get it; other peers' notifications do not wait), or
 * FAILED: -EMSGSIZE (len too big), -EINVAL (NULL msg with len > 0), -EBADF
 * (unknown or closed seg), -ESTALE (the peer restarted), -EIO (an earlier
 * WRITE to seg did not succeed: the peer is not told), -ECONNREFUSED or
 * -ECONNRESET (peer gone), -EHOSTUNREACH (no route to it), -EACCES (authentication), -EBUSY
 * (the peer at its connection cap), -ENOMEM (no memory here or at the peer: not
 * queued there), -EPROTO (a malformed answer), -EPROTONOSUPPORT (a keyed peer of
 * an older protocol), -ECANCELED (batch cancel, engine destroy).  Returns the slot, or -ENOSPC (batch full),
 * -EINVAL (NULL b).  A close of seg does not end it (see
 * ferry_segment_close): it is still delivered, and its slot may end after
 * the last close returned.  The port's thread.
 */
FERRY_API int ferry_notify(struct ferry_batch *b, ferry_seg_t seg, const void *msg, uint32_t len);

/**
 * Take up to max notifications that peers sent to this engine, oldest first,
 * into out: returns how many (0 if none), -EINVAL.  Never blocks.  Any thread.
 */
FERRY_API int ferry_notif_poll(struct ferry_engine *e, struct ferry_notif *out, uint32_t max);

/** Human name of a state ("pending", "done", "failed", "timeout"). */
FERRY_API const char *ferry_state_name(enum ferry_state s);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_H */
