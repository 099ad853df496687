// Copyright rpcguard authors.
//
// internal::Mutex: the lock of rpcguard's per-call paths (breaker, budget,
// registry). A std::mutex with abseil's thread-safety annotations, rather
// than absl::Mutex, because of how Debian builds abseil:
//
//   - Its absl::Mutex runs the deadlock detector on every Lock(), under one
//     process-wide spin lock (Debian's libabsl is not built with NDEBUG), so
//     unrelated mutexes on different threads contend with each other;
//     std::mutex does not (//bench:decision_bench measures the paths that
//     lock). absl::SetMutexDeadlockDetectionMode(kIgnore) would remove the
//     cost, but that is the application's call, not a library's.
//   - It is not built with -fsanitize=thread, so ThreadSanitizer cannot see
//     its locking and reports every field it guards as a race; TSan sees
//     std::mutex (pthread) natively.
//
// Which lock for new code: internal::Mutex on any path a call takes;
// internal::SpinLock for a section of a few instructions that never calls
// out (a sliding window's stripe); absl::Mutex where contention cannot
// matter (sinks, stats registration, test doubles). Internal to rpcguard.

#ifndef RPCGUARD_BASE_MUTEX_H_
#define RPCGUARD_BASE_MUTEX_H_

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace rpcguard {
namespace internal {

// An exclusive lock. Thread-safe; not reentrant. Hold it only for short,
// non-blocking sections: a waiter spins briefly (as absl::Mutex does),
// since the sections it guards last nanoseconds and sleeping in the kernel
// costs microseconds, then sleeps.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      Pause();
    }
    mu_.lock();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class SpinLock;

  // About a microsecond of spinning before sleeping.
  static constexpr int kSpins = 64;

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::mutex mu_;
};

// A lock for sections of a few instructions that never call out: a
// sliding window's stripe, taken twice on every attempt's end. Uncontended,
// it costs one atomic exchange and one store, where Mutex's pthread calls
// cost about 60 instructions (issue 31, bench/RESULTS.md). A waiter spins,
// then yields its core until the holder lets go; it never sleeps on a
// futex, so hold it only where the holder cannot block.
class ABSL_LOCKABLE SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    held_.store(false, std::memory_order_release);
  }

 private:
  void LockSlow() {
    for (int i = 0;; ++i) {
      // Read before writing, so that waiters do not bounce the line.
      if (!held_.load(std::memory_order_relaxed) &&
          !held_.exchange(true, std::memory_order_acquire)) {
        return;
      }
      if (i < Mutex::kSpins) {
        Mutex::Pause();
      } else {
        std::this_thread::yield();  // the holder may have lost its core
      }
    }
  }

  std::atomic<bool> held_{false};
};

// Holds `mu` for the scope.
template <typename Lock>
class ABSL_SCOPED_LOCKABLE ScopedLock {
 public:
  explicit ScopedLock(Lock* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~ScopedLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  ScopedLock(const ScopedLock&) = delete;
  ScopedLock& operator=(const ScopedLock&) = delete;

 private:
  Lock* const mu_;
};

// Holds a Mutex for the scope.
using MutexLock = ScopedLock<Mutex>;

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_MUTEX_H_
