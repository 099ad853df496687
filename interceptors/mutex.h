// Copyright rpcguard authors.
//
// internal::Mutex: absl::Mutex, visible to ThreadSanitizer.
//
// Debian's abseil is built without -fsanitize=thread, so its Mutex carries no
// TSan annotations and a TSan build of rpcguard sees every absl::Mutex-guarded
// field as a data race. This wrapper tells TSan about each lock and unlock
// itself (the same __tsan_mutex_* calls abseil makes when it is built with
// TSan). Without TSan it compiles to a plain absl::Mutex.
//
// Internal to rpcguard: use absl::Mutex in code of your own.

#ifndef RPCGUARD_INTERCEPTORS_MUTEX_H_
#define RPCGUARD_INTERCEPTORS_MUTEX_H_

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#ifdef ABSL_HAVE_THREAD_SANITIZER
#include <sanitizer/tsan_interface.h>
#endif

namespace rpcguard {
namespace internal {

// An exclusive lock. Thread-safe; not reentrant.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() {
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_create(this, 0);
#endif
  }
  ~Mutex() {
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_destroy(this, 0);
#endif
  }
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_pre_lock(this, 0);
#endif
    mu_.Lock();
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_post_lock(this, 0, 0);
#endif
  }

  void Unlock() ABSL_UNLOCK_FUNCTION() {
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_pre_unlock(this, 0);
#endif
    mu_.Unlock();
#ifdef ABSL_HAVE_THREAD_SANITIZER
    __tsan_mutex_post_unlock(this, 0);
#endif
  }

 private:
  absl::Mutex mu_;
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

#endif  // RPCGUARD_INTERCEPTORS_MUTEX_H_
