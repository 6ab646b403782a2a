/* SPDX-License-Identifier: MIT */
/*
 * Engines across fork().  A forked child gets a copy of every engine of
 * the parent but none of its threads; the parent still owns the engines'
 * connections, QPs and peers.
 *  - fds: the child's copies would keep the parent's connections and
 *    listeners open after the parent closed them (peers see no FIN, a
 *    destroyed or killed engine's port still accepts), so the child closes
 *    them as it is born: ferry marks each fd it opens (ring/base/fd.h) and
 *    the child handler closes the marked ones.  The parent's side is
 *    covered too: sock_close() shuts a socket down before closing it, for
 *    the instant between fork and the child's handler.
 *  - calls: the child handler marks every live engine forked; each public
 *    call then answers -EOWNERDEAD without touching anything (a call that
 *    drove a core's pass in the child would write into the parent's tcp
 *    streams and QPs), and ferry_engine_destroy leaks the copy.
 * Nothing here touches an rdma-core object: the child's copies of the
 * verbs contexts stay as they are (see qp/verbs for ibv_fork_init).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include "ring/base/fd.h"
#include "runtime/engine/engine.h"

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int fork_rc;
/* The live engines.  Held across fork() (prepare to parent/child), so that
 * the child's list is whole: taken elsewhere only around a link change. */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_engine *fork_engines;
/* This process was forked while engines lived: liburcu-qsbr here still
 * lists their threads (online ones never pass a quiescent state again),
 * so an engine of our own would hang at its first grace period. */
static bool fork_had_engines;

static void fork_prepare(void)
{
	pthread_mutex_lock(&fork_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&fork_lock);
}

/* Runs in the child before fork() returns there, alone: async-signal-safe
 * work only (the parent's other threads may have held any other lock). */
static void fork_child(void)
{
	struct ferry_engine *e;

	fd_close_tracked();
	engine_log_fork_child(); /* ferry_log_set is the child's to call */
	for (e = fork_engines; e; e = e->fork_next)
		e->forked = true;
	fork_had_engines |= fork_engines != NULL;
	fork_engines = NULL; /* the child's own engines start a new list */
	pthread_mutex_unlock(&fork_lock); /* this thread took it in fork_prepare */
}

static void fork_register(void)
{
	fork_rc = -pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int engine_fork_add(struct ferry_engine *e)
{
	pthread_once(&fork_once, fork_register);
	if (fork_rc)
		return fork_rc;
	pthread_mutex_lock(&fork_lock);
	if (fork_had_engines) {
		pthread_mutex_unlock(&fork_lock);
		log_err("ferry_engine_create: this process was forked from one whose engines "
			"were running; their threads stay registered with liburcu here, so an "
			"engine of this process would hang: start it with exec "
			"(multiprocessing 'spawn' or 'forkserver'), or fork before any engine");
		return -EOWNERDEAD;
	}
	e->fork_next = fork_engines;
	fork_engines = e;
	pthread_mutex_unlock(&fork_lock);
	return 0;
}

void engine_fork_del(struct ferry_engine *e)
{
	struct ferry_engine **pp;

	pthread_mutex_lock(&fork_lock);
	for (pp = &fork_engines; *pp; pp = &(*pp)->fork_next)
		if (*pp == e) {
			*pp = e->fork_next;
			break;
		}
	pthread_mutex_unlock(&fork_lock);
}
