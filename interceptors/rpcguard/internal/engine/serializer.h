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
// idle costs two atomic operations, no lock and no allocation; only a
// queued event makes the queue (once a call), takes its lock and is moved
// into a heap-held closure.
//
// An event may also Defer a call into gRPC that needs no exclusivity (a
// stream's write, which can reach the socket): the thread runs it once it
// has let the serializer go, so that events of other threads need not
// queue behind it. Made inside the event, such a call held every other
// event of the call back, and the thread that found the serializer busy
// handed its work to the one running it (a stream's application then
// wrote from gRPC's thread, one message per flush; bench/RESULTS.md,
// "The stream floor").

#ifndef RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_
#define RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "rpcguard/base/mutex.h"

namespace rpcguard {
namespace internal {

class Serializer {
 public:
  Serializer() = default;
  ~Serializer() { delete queue_.load(std::memory_order_acquire); }
  Serializer(const Serializer&) = delete;
  Serializer& operator=(const Serializer&) = delete;

  // Runs `work` on this thread now if no event runs, then every event queued
  // meanwhile, and returns when none is left; otherwise queues `work` for
  // the thread that runs and returns at once. The caller keeps the
  // serializer alive until Run returns, or an event hands it KeepAlive.
  template <typename F>
  void Run(F&& work) {
    // Counted before it is queued: the running thread, seeing the count,
    // waits for the event to appear rather than going idle without it.
    if (pending_.fetch_add(1, std::memory_order_acq_rel) != 0) {
      Enqueue(std::forward<F>(work));
      return;
    }
    RunTaken(work);
  }

  // As Run, but when another thread's event runs, first waits a moment
  // (at most `spins` checks of a few dozen nanoseconds each; never for I/O:
  // events make their calls into gRPC after the serializer is let go) for
  // it to end, and then runs `work` here. For an application's stream
  // write: queued, it would be served by gRPC's thread, which then has to
  // wake a blocking application (sync and CQ-async stubs; bench/RESULTS.md,
  // "Streams near the floor: an application's write on its own thread").
  // On the thread that runs this serializer's event already, it queues at
  // once, as Run does.
  template <typename F>
  void RunHere(F&& work, int spins) {
    if (running_here_ != this) {
      for (int i = 0; i < spins; ++i) {
        size_t idle = 0;
        if (pending_.load(std::memory_order_relaxed) == 0 &&
            pending_.compare_exchange_weak(idle, 1,
                                           std::memory_order_acq_rel)) {
          RunTaken(work);
          return;
        }
        CpuRelax();
      }
    }
    Run(std::forward<F>(work));
  }

  // From inside an event: `call` runs on the thread running the event once
  // it has drained the queue and let the serializer go, after the calls
  // deferred before it, with `keep` (KeepAlive) still held. For a call into
  // gRPC whose order against other events the event has already settled
  // (a stream operation under a hold of its own): it may then run beside
  // the next events, on another thread, and must touch no state of theirs.
  void Defer(absl::AnyInvocable<void()> call) {
    deferred_->push_back(std::move(call));
  }

  // From inside an event: `owner` stays alive until the running thread has
  // drained the queue. For an event after which the serializer's owner may
  // be destroyed (the application's last batch served, the last attempt's
  // hold let go), so that the drain never runs on freed memory. Only the
  // first reference of a drain is kept (all are to the same owner); `owner`
  // is let go of either way, so that a member handed over cannot keep its
  // own object alive.
  void KeepAlive(std::shared_ptr<void>&& owner) {
    if (*keep_ == nullptr) {
      *keep_ = std::move(owner);
    } else {
      owner.reset();
    }
  }
  // From inside an event: whether the drain keeps its owner alive already.
  bool keeping_alive() const { return *keep_ != nullptr; }

  // Whether an event runs or waits, on any thread (for tests).
  bool running() const { return pending_.load(std::memory_order_acquire) != 0; }

 private:
  // The calls a drain defers: a stream's event defers one at most.
  using Deferred = absl::InlinedVector<absl::AnyInvocable<void()>, 2>;

  // Runs `work` and then the queue, once this thread has counted itself
  // from idle.
  template <typename F>
  void RunTaken(F& work) {
    std::shared_ptr<void> keep;
    Deferred deferred;
    keep_ = &keep;
    deferred_ = &deferred;
    const Serializer* const outer = running_here_;
    running_here_ = this;
    work();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) DrainQueued();
    running_here_ = outer;
    // `keep` may hold the last reference to this serializer's owner: nothing
    // of `this` is touched past the drain. Deferred calls run without the
    // serializer, beside other threads' events.
    for (auto& call : deferred) call();
  }

  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // Where events wait; made by the first event that has to (none on the
  // no-failure path), kept until the serializer goes.
  struct Queue {
    internal::Mutex mu;
    std::vector<absl::AnyInvocable<void()>> events ABSL_GUARDED_BY(mu);
  };

  void Enqueue(absl::AnyInvocable<void()> work) {
    Queue* queue = queue_.load(std::memory_order_acquire);
    if (queue == nullptr) {
      auto* made = new Queue;
      if (queue_.compare_exchange_strong(queue, made,
                                         std::memory_order_acq_rel)) {
        queue = made;
      } else {
        delete made;  // another thread's won; `queue` is it
      }
    }
    internal::MutexLock lock(&queue->mu);
    queue->events.push_back(std::move(work));
  }

  // Runs what was queued, oldest first, until nothing is counted: the
  // running thread's work once its own event found others counted.
  void DrainQueued() {
    std::vector<absl::AnyInvocable<void()>> batch;
    size_t ran = 0;  // events run and not yet taken off the count
    do {
      // Others were counted; each is queued, or about to be.
      for (;;) {
        Queue* queue = queue_.load(std::memory_order_acquire);
        if (queue != nullptr) {
          internal::MutexLock lock(&queue->mu);
          batch.swap(queue->events);
        }
        if (!batch.empty()) break;
        std::this_thread::yield();
      }
      // Events queued while these run wait in the queue, after them.
      for (auto& work : batch) work();
      ran = batch.size();
      batch.clear();
    } while (pending_.fetch_sub(ran, std::memory_order_acq_rel) != ran);
  }

  // The serializer whose event this thread runs, if any (RunHere).
  static inline thread_local const Serializer* running_here_ = nullptr;
  // Events running or queued: the one atomic an idle event touches.
  std::atomic<size_t> pending_{0};
  std::atomic<Queue*> queue_{nullptr};
  // The running thread's keep-alive (Run's local), set before each drain.
  std::shared_ptr<void>* keep_ = nullptr;
  // The running thread's deferred calls (Run's local), set likewise.
  Deferred* deferred_ = nullptr;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ENGINE_SERIALIZER_H_
