/* SPDX-License-Identifier: MIT */
/* What every fuzz target shares: libFuzzer's entry points and CHECK. */
#ifndef FERRY_TESTS_FUZZ_FUZZ_H
#define FERRY_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* stderr is closed under -close_fd_mask=2: the abort's stack says which. */
#define CHECK(cond)                 \
	do {                        \
		if (!(cond))        \
			abort();    \
	} while (0)

#endif /* FERRY_TESTS_FUZZ_FUZZ_H */
