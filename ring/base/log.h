/* SPDX-License-Identifier: MIT */
/*
 * The library's messages.  Nothing in ferry writes to stderr itself: every
 * message goes through flog() to one process-wide sink, the application's
 * callback (ferry_log_set in ferry.h) or, by default, stderr with a
 * "ferry: " prefix.  A core's thread (and an application thread while it
 * runs a core's pass) defers: its flog() only leaves the message in the
 * core's mailbox (struct log_box), and a control thread hands it to the
 * sink later, so an error path on a core never takes the sink's lock nor
 * waits in the application's callback.
 */
#ifndef FERRY_BASE_LOG_H
#define FERRY_BASE_LOG_H

#include <pthread.h>
#include <stdint.h>

#define LOG_MSG_MAX 512
#define LOG_BOX_SLOTS 32 /* a power of two */

/* The same values as enum ferry_log_level in ferry.h. */
enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* The sink: fn(arg, level, message without a trailing newline). */
typedef void (*log_sink_fn)(void *arg, int level, const char *msg);

/* Route messages to fn (NULL: back to stderr); once it returns, no thread
 * calls the previous sink any more.  Any thread, never from inside a sink. */
void log_set_sink(log_sink_fn fn, void *arg);

/* The forked child, alone, before fork() returns there: a parent thread
 * that was inside the sink holds its lock for reading in the child's copy,
 * and the child's log_set_sink would wait for it for good; nobody is
 * inside the sink here, so the lock starts afresh.  Async-signal-safe. */
void log_fork_child(void);

/* At most per_sec messages a second from the calling thread (0: no limit),
 * for a thread that logs what remote peers make it log: those over the
 * limit are dropped, and the next one that goes says how many were. */
void log_thread_limit(unsigned per_sec);

/*
 * A core's mailbox: bounded, lock-free on the side that fills it (any
 * thread running the core's passes: its own thread, an application thread
 * in idle caller mode, so several producers, each a claim by CAS), drained
 * by one control thread at a time (drain_lock).  What finds it full is
 * counted, and the count said at the next drain.
 */
struct log_slot {
	uint32_t full;                 /* store_release by the filler, the drainer clears */
	int level;
	char msg[LOG_MSG_MAX];
};

struct log_box {
	uint32_t head;                 /* next index to claim (cas_relaxed) */
	uint32_t tail;                 /* next index to drain (store_release by the drainer) */
	uint64_t dropped;              /* messages that found it full (relaxed) */
	pthread_mutex_t drain_lock;    /* one drainer at a time; never taken by a filler */
	char name[32];                 /* the prefix of its messages ("core 0") */
	struct log_slot slot[LOG_BOX_SLOTS];
};

/* Set b up (empty, its messages prefixed "<name> <index>: "); before
 * anyone defers into it. */
void log_box_init(struct log_box *b, const char *name, unsigned index);
void log_box_fini(struct log_box *b);
/* From now on, the calling thread's messages go to b (NULL: to the sink
 * again); returns the box it deferred to before.  No lock, no call. */
struct log_box *log_defer(struct log_box *b);
/* Hand what b holds to the sink, each message prefixed with b's name; how
 * many.  A thread that does not defer (the repair thread, engine destroy). */
unsigned log_box_drain(struct log_box *b);
/* Whether b holds a message ready to drain (any thread: a hint). */
int log_box_pending(const struct log_box *b);

/* Format and hand one message to the sink (truncated at 511 bytes). */
void flog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* err's (positive errno) English text, for messages a core may write:
 * strerror() translates through gettext, which takes glibc's locale lock;
 * this reads a constant table (strerrordesc_np), never locks or allocates. */
const char *log_errstr(int err);

#define log_err(...) flog(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) flog(LOG_WARN, __VA_ARGS__)
#define log_info(...) flog(LOG_INFO, __VA_ARGS__)

#endif /* FERRY_BASE_LOG_H */
