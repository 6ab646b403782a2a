/* SPDX-License-Identifier: MIT */
/* What every fuzz target shares: libFuzzer's entry points, CHECK, and the
 * seed writer. */
#ifndef FERRY_TESTS_FUZZ_FUZZ_H
#define FERRY_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* stderr is closed under -close_fd_mask=2: the abort's stack says which. */
#define CHECK(cond)                 \
	do {                        \
		if (!(cond))        \
			abort();    \
	} while (0)

static inline int fuzz_all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* The seed dir/name: head (hlen bytes, a frame header or a mode byte),
 * then body (blen); exits on any error (a seed left out is a gap). */
static inline void fuzz_seed_write(const char *dir, const char *name, const void *head,
				   size_t hlen, const void *body, size_t blen)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || (hlen && fwrite(head, 1, hlen, f) != hlen) ||
	    (blen && fwrite(body, 1, blen, f) != blen) || fclose(f)) {
		perror(path);
		exit(1);
	}
}

#endif /* FERRY_TESTS_FUZZ_FUZZ_H */
