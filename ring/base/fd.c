/* SPDX-License-Identifier: MIT */
/* The fds ferry opened, closed by a forked child (see fd.h). */
#include "ring/base/fd.h"

#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"

#define FD_WORD_BITS 64

/* 128 KiB of bss: only the pages of fds in use are ever touched. */
static uint64_t fd_bits[FD_TRACK_MAX / FD_WORD_BITS];

int fd_track(int fd)
{
	if (fd >= 0 && fd < FD_TRACK_MAX)
		/* Relaxed: the marks are read only by the forked child, and fork
		 * itself orders every thread's earlier stores before its copy. */
		fetch_or_relaxed(fd_bits[fd / FD_WORD_BITS], 1ull << (fd % FD_WORD_BITS));
	return fd;
}

void fd_untrack(int fd)
{
	if (fd >= 0 && fd < FD_TRACK_MAX)
		fetch_and_relaxed(fd_bits[fd / FD_WORD_BITS], ~(1ull << (fd % FD_WORD_BITS)));
}

void fd_close(int fd)
{
	if (fd < 0)
		return;
	/* Unmarked first: once closed, the number may be the application's. */
	fd_untrack(fd);
	close(fd);
}

void sock_close(int fd)
{
	if (fd < 0)
		return;
	fd_untrack(fd);
	(void)shutdown(fd, SHUT_RDWR); /* ENOTCONN for a socket never connected: fine */
	close(fd);
}

void fd_close_tracked(void)
{
	for (unsigned w = 0; w < FD_TRACK_MAX / FD_WORD_BITS; w++) {
		uint64_t bits = READ_ONCE(fd_bits[w]); /* the child runs alone now */

		if (!bits)
			continue;
		WRITE_ONCE(fd_bits[w], 0);
		for (; bits; bits &= bits - 1)
			close((int)(w * FD_WORD_BITS + (unsigned)__builtin_ctzll(bits)));
	}
}
