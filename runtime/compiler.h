/* SPDX-License-Identifier: MIT */
/* Small compiler helpers shared by every module. */
#ifndef FERRY_COMPILER_H
#define FERRY_COMPILER_H

#include <assert.h>

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

#ifdef FERRY_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define ferry_tsan_acquire(p) __tsan_acquire((void *)(p))
#define ferry_tsan_release(p) __tsan_release((void *)(p))
#define ferry_no_tsan __attribute__((no_sanitize_thread))
#else
#define ferry_tsan_acquire(p) ((void)0)
#define ferry_tsan_release(p) ((void)0)
#define ferry_no_tsan
#endif

static inline void ferry_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif /* FERRY_COMPILER_H */
