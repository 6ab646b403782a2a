/* SPDX-License-Identifier: MIT */
/*
 * Memory ordering, named.  Every shared field is read and written through
 * one of these (never plainly on one side and atomically on the other), and
 * every acquire or release says on its line which release or acquire it
 * pairs with ("pairs with: ...").  RCU publication uses liburcu's own
 * rcu_assign_pointer / rcu_dereference.
 *
 *   READ_ONCE / WRITE_ONCE   no ordering: hints, counters, flags whose
 *                            readers tolerate a late value
 *   load_acquire /           publication: what was written before the
 *   store_release            release is seen after the acquire
 *   load_sc / store_sc       one side of a Dekker pair (store my flag, then
 *                            load yours): sequentially consistent on both
 *                            sides, or each could miss the other
 *   smp_mb_after_sc /        the fence such a pair needs where the load
 *   smp_mb_before_sc         (or the store) of one side is not seq_cst
 *   fetch_* / *_fetch /      read-modify-write, the suffix names the order
 *   xchg_* / cas_*
 *
 * They take the shared object itself (an lvalue), like the kernel's
 * READ_ONCE.  The __atomic builtins underneath are what ThreadSanitizer
 * understands; liburcu's uatomic_* and fences are not instrumented.
 */
#ifndef FERRY_BASE_ATOMICS_H
#define FERRY_BASE_ATOMICS_H

#include <urcu/pointer.h>

#include "ring/base/compiler.h"

#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

#define load_acquire(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define store_release(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

#define load_sc(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define store_sc(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

#define fetch_add_relaxed(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_RELAXED)
#define fetch_add_release(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_RELEASE)
#define fetch_add_sc(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_SEQ_CST)
#define fetch_sub_relaxed(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_RELAXED)
#define fetch_sub_release(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_RELEASE)
#define fetch_sub_acq_rel(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_ACQ_REL)
#define fetch_sub_sc(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_SEQ_CST)
#define sub_fetch_acq_rel(x, v) __atomic_sub_fetch(&(x), (v), __ATOMIC_ACQ_REL)
#define fetch_or_acq_rel(x, v) __atomic_fetch_or(&(x), (v), __ATOMIC_ACQ_REL)
#define fetch_or_sc(x, v) __atomic_fetch_or(&(x), (v), __ATOMIC_SEQ_CST)
#define fetch_or_relaxed(x, v) __atomic_fetch_or(&(x), (v), __ATOMIC_RELAXED)
#define fetch_and_relaxed(x, v) __atomic_fetch_and(&(x), (v), __ATOMIC_RELAXED)

#define xchg_relaxed(x, v) __atomic_exchange_n(&(x), (v), __ATOMIC_RELAXED)
#define xchg_acquire(x, v) __atomic_exchange_n(&(x), (v), __ATOMIC_ACQUIRE)
#define xchg_release(x, v) __atomic_exchange_n(&(x), (v), __ATOMIC_RELEASE)
#define xchg_acq_rel(x, v) __atomic_exchange_n(&(x), (v), __ATOMIC_ACQ_REL)
#define xchg_sc(x, v) __atomic_exchange_n(&(x), (v), __ATOMIC_SEQ_CST)

/*
 * A Dekker pair whose side's other access is not seq_cst (a ck ring's
 * tail, a work list read relaxed): C11 orders a seq_cst store or
 * read-modify-write against it only through a seq_cst fence, so the flag's
 * store is followed by smp_mb_after_sc() and the kicker's exchange
 * preceded by smp_mb_before_sc().  On x86 the seq_cst store or exchange
 * is a locked instruction (or a store and mfence), a full barrier
 * already: only the compiler is held there -- and ThreadSanitizer, which
 * does not model fences, never meets one.
 */
#if defined(__x86_64__) || defined(__i386__)
#define smp_mb_after_sc() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#define smp_mb_before_sc() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#else
#define smp_mb_after_sc() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define smp_mb_before_sc() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/* Compare-and-swap: true when x held *expected and now holds v; else
 * *expected takes x's value.  The order applies on success. */
#define cas_acquire(x, expected, v) \
	__atomic_compare_exchange_n(&(x), (expected), (v), false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)
#define cas_relaxed(x, expected, v) \
	__atomic_compare_exchange_n(&(x), (expected), (v), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
#define cas_release(x, expected, v) \
	__atomic_compare_exchange_n(&(x), (expected), (v), false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)
#define cas_weak_release(x, expected, v) \
	__atomic_compare_exchange_n(&(x), (expected), (v), true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)
#define cas_acq_rel(x, expected, v) \
	__atomic_compare_exchange_n(&(x), (expected), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/*
 * RCU: liburcu's rcu_assign_pointer is a fence and a volatile store, which
 * ThreadSanitizer reads as a plain racing write; under TSan (only) the C11
 * release store it stands for.  rcu_dereference is liburcu's (an inline
 * consume load once URCU_INLINE_SMALL_FUNCTIONS is set, as the Makefile
 * does).
 */
#ifdef FERRY_TSAN
#undef rcu_assign_pointer
#define rcu_assign_pointer(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)
#endif

#endif /* FERRY_BASE_ATOMICS_H */
