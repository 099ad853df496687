// Copyright rpcguard authors.
//
// Serializer: runs one call's events one at a time, in the order they
// arrive, without holding a lock while an event runs (the model is gRPC
// core's WorkSerializer). The thread that finds it idle runs its event at
// once, then every event queued meanwhile; any other thread, or the same
// thread re-entering from inside an event (gRPC completing an attempt inline,
// a hook that cancels), only queues its event and returns. So an event's
// handler may call into gRPC freely: whatever gRPC calls back with waits
// behind it.
//
// The no-failure path queues nothing: an event that finds the serializer
// idle costs two short lock sections and no allocation; only a queued event
// is moved into a heap-held closure.

#ifndef RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_
#define RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "rpcguard/base/mutex.h"

namespace rpcguard {
namespace internal {

class Serializer {
 public:
  Serializer() = default;
  Serializer(const Serializer&) = delete;
  Serializer& operator=(const Serializer&) = delete;

  // Runs `work` on this thread now if no event runs, then every event queued
  // meanwhile, and returns when none is left; otherwise queues `work` for
  // the thread that runs and returns at once. The caller keeps alive what
  // the events touch (this serializer included) until Run returns.
  template <typename F>
  void Run(F&& work) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      internal::MutexLock lock(&mu_);
      if (running_) {
        queue_.emplace_back(std::forward<F>(work));
        return;
      }
      running_ = true;
    }
    work();
    Drain();
  }

  // Whether an event is running, on any thread (for tests).
  bool running() const ABSL_LOCKS_EXCLUDED(mu_) {
    internal::MutexLock lock(&mu_);
    return running_;
  }

 private:
  // Runs what was queued, oldest first, until nothing is.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<absl::AnyInvocable<void()>> batch;
    for (;;) {
      {
        internal::MutexLock lock(&mu_);
        if (queue_.empty()) {
          running_ = false;
          return;
        }
        batch.swap(queue_);
      }
      // Events queued while these run land in queue_, after them.
      for (auto& work : batch) work();
      batch.clear();
    }
  }

  mutable internal::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::AnyInvocable<void()>> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_
