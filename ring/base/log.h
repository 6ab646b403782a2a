/* SPDX-License-Identifier: MIT */
/*
 * The library's messages.  Nothing in ferry writes to stderr itself: every
 * message goes through flog() to one process-wide sink, the application's
 * callback (ferry_log_set in ferry.h) or, by default, stderr with a
 * "ferry: " prefix.  Never called from a core's loop (the hot path does not
 * log); control paths and start-up only.
 */
#ifndef FERRY_BASE_LOG_H
#define FERRY_BASE_LOG_H

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

/* Format and hand one message to the sink (truncated at 511 bytes). */
void flog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) flog(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) flog(LOG_WARN, __VA_ARGS__)
#define log_info(...) flog(LOG_INFO, __VA_ARGS__)

#endif /* FERRY_BASE_LOG_H */
