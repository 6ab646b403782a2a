/* SPDX-License-Identifier: MIT */
/*
 * Engines across fork().  A forked child gets a copy of every fd of the
 * parent's engines but none of their threads.  Its copies would keep the
 * parent's connections and listeners open after the parent closed them
 * (peers see no FIN, a destroyed or killed engine's port still accepts),
 * so the child closes them as it is born: ferry marks each fd it opens
 * (ring/base/fd.h) and the child handler closes the marked ones.  The
 * parent's side is covered too: sock_close() shuts a socket down before
 * closing it, for the instant between fork and the child's handler.
 */
#include <errno.h>
#include <pthread.h>

#include "ring/base/fd.h"
#include "runtime/engine/engine.h"

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int fork_rc;

/* Runs in the child before fork() returns there: async-signal-safe only
 * (the parent's other threads may have held any lock at the fork). */
static void fork_child(void)
{
	fd_close_tracked();
}

static void fork_register(void)
{
	fork_rc = -pthread_atfork(NULL, NULL, fork_child);
}

int engine_fork_init(void)
{
	pthread_once(&fork_once, fork_register);
	return fork_rc;
}
