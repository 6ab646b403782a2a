/* SPDX-License-Identifier: MIT */
/*
 * The file descriptors ferry opens, so that a forked child can close its
 * copies (runtime/engine/fork.c).  A child that keeps a copy of a socket
 * keeps the connection open after the parent closed it (no FIN reaches
 * the peer) and a copy of a listener keeps accepting after the engine is
 * gone.  Every fd ferry makes is marked with fd_track() right after the
 * call that made it, and every fd ferry closes goes through fd_close() or
 * sock_close(): the mark is cleared before the close, so that a child
 * never closes a number the application got back from the kernel
 * meanwhile.  One bit per fd in a static bitmap (untouched pages cost
 * nothing): marking is an atomic or, safe on a core (no lock, no malloc).
 */
#ifndef FERRY_BASE_FD_H
#define FERRY_BASE_FD_H

/* fds at or above this are not tracked: a child keeps them (sock_close's
 * shutdown still ends their connections when the parent closes them). */
#define FD_TRACK_MAX (1 << 20)

/* Mark fd (< 0 ignored) as ferry's: a forked child closes it.  Returns fd. */
int fd_track(int fd);

/* Unmark fd without closing it: one a library we use closes itself
 * (hiredis's redisFree), unmarked just before it does. */
void fd_untrack(int fd);

/* Unmark fd and close it (< 0 ignored).  Any fd ferry opened itself. */
void fd_close(int fd);

/*
 * Unmark, shutdown(SHUT_RDWR) and close a socket whose close must end the
 * connection (or stop a listener) even while a forked child still holds a
 * copy of it: the peer gets its FIN, a listener refuses new connections.
 * On a socket without a copy elsewhere it changes nothing (unread data
 * still makes the close a reset, as with close alone).
 */
void sock_close(int fd);

/* The forked child, before it returns from fork: close every marked fd and
 * clear the marks.  Async-signal-safe (close and plain stores only). */
void fd_close_tracked(void);

#endif /* FERRY_BASE_FD_H */
