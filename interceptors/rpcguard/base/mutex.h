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
// absl::Mutex where contention cannot matter (sinks, stats registration,
// test doubles). Internal to rpcguard.

#ifndef RPCGUARD_BASE_MUTEX_H_
#define RPCGUARD_BASE_MUTEX_H_

#include <mutex>

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

// Holds `mu` for the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_MUTEX_H_
