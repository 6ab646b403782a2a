/* SPDX-License-Identifier: MIT */
/* Compiler and memory helpers: the ground every module stands on. */
#ifndef FERRY_BASE_COMPILER_H
#define FERRY_BASE_COMPILER_H

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define FERRY_CACHE_LINE 64
#define ferry_cache_aligned __attribute__((aligned(FERRY_CACHE_LINE)))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN 1
#endif
#endif


/* Zeroed memory starting on a cache line (C11 wants size % alignment == 0). */
static inline void *ferry_zalloc_lines(size_t size)
{
	size_t rounded = (size + FERRY_CACHE_LINE - 1) & ~(size_t)(FERRY_CACHE_LINE - 1);
	void *p = aligned_alloc(FERRY_CACHE_LINE, rounded ? rounded : FERRY_CACHE_LINE);

	if (p)
		memset(p, 0, rounded);
	return p;
}

/*
 * ThreadSanitizer cannot see the ordering that an RCU grace period gives;
 * readers release at each quiescent state and the updater acquires after
 * synchronize_rcu(), which is exactly the happens-before a grace period
 * guarantees.  No-ops outside TSan builds.
 */
#ifdef FERRY_TSAN
#include <sanitizer/tsan_interface.h>
#define ferry_tsan_release(p) __tsan_release((void *)(p))
#define ferry_tsan_acquire(p) __tsan_acquire((void *)(p))
#else
#define ferry_tsan_release(p) ((void)(p))
#define ferry_tsan_acquire(p) ((void)(p))
#endif

static inline void ferry_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif /* FERRY_BASE_COMPILER_H */
