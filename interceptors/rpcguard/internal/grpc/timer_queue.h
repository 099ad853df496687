// Copyright rpcguard authors.
//
// TimerQueue: many short timers on one grpc::Alarm. Every hedged call needs a
// timer for its next copy, and nearly every one is cancelled because the first
// copy answers in time. A grpc::Alarm per call costs an allocation, gRPC's
// timer heap twice, and a hop to an executor thread for the cancellation
// callback: about 10% of a no-failure call (bench/callgrind.sh, issue 14).
// Here a timer is one ordered-map entry, cancelling it erases the entry, and
// one Alarm, armed for the earliest entry, serves them all. Erased entries'
// nodes are kept for the next timers (at most kSpareNodes of them), so a
// steady stream of hedged calls allocates nothing for its timers.
//
// Timers fire on gRPC's alarm thread, at their time or up to `granularity`
// later, never earlier: the alarm is armed on granularity boundaries, so a
// busy factory sets at most one Alarm per granularity step whatever its call
// rate. Times are on gRPC's monotonic clock (Clock::Real()->MonotonicNow()),
// not the injected one: callers convert with OnGrpcClock (deadline.h). A
// wall-clock step moves no timer.

#ifndef RPCGUARD_INTERNAL_GRPC_TIMER_QUEUE_H_
#define RPCGUARD_INTERNAL_GRPC_TIMER_QUEUE_H_

#include <grpcpp/alarm.h>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace internal {

class TimerQueue : public std::enable_shared_from_this<TimerQueue> {
 public:
  // Identifies a scheduled timer, for Cancel.
  using Handle = std::pair<absl::Time, uint64_t>;

  // Use Create: alarms hold the queue weakly. `real_clock`'s monotonic time
  // must be gRPC's: the queue's alarms run on it.
  TimerQueue(Clock* real_clock, absl::Duration granularity);
  static std::shared_ptr<TimerQueue> Create(
      Clock* real_clock = Clock::Real(),
      absl::Duration granularity = absl::Milliseconds(1));

  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // What a timer runs: `run(target)`, if `target` is still alive then.
  using Run = void (*)(void* target);

  // Runs `run` on `target` once, on gRPC's alarm thread, at `when` (gRPC's
  // monotonic clock) or within `granularity` after it, unless cancelled first
  // or `target` is gone by then (it is held weakly). `run` must not block; it
  // may schedule and cancel timers. A function pointer and a weak
  // reference, not a std::function: a timer is set for every hedged call,
  // and this way setting one allocates only its map entry.
  Handle Schedule(absl::Time when, std::weak_ptr<void> target, Run run)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops a timer that has not run yet. Returns whether it was dropped
  // (false: it ran, is running, or was cancelled already).
  bool Cancel(const Handle& handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Timers waiting to run.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // The most erased entries kept for reuse: one per hedged call in flight
  // up to this many; past it, nodes are freed as usual.
  static constexpr size_t kSpareNodes = 64;

 private:
  // Arms a new alarm for `when` if no alarm is armed at or before it. Returns
  // the alarm to Set outside mu_, or null.
  std::shared_ptr<grpc::Alarm> ArmLocked(absl::Time when, uint64_t* generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetAlarm(std::shared_ptr<grpc::Alarm> alarm, absl::Time when,
                uint64_t generation);
  void OnAlarm(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Time RoundUp(absl::Time t) const;

  Clock* const clock_;
  const int64_t granularity_ns_;
  mutable Mutex mu_;
  struct Timer {
    std::weak_ptr<void> target;
    Run run;
  };
  using Timers = std::map<Handle, Timer>;
  // Keeps `node`'s memory for a later Schedule, if there is room; returns
  // what is left to free (outside mu_).
  Timers::node_type Recycle(Timers::node_type node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Timers timers_ ABSL_GUARDED_BY(mu_);
  std::vector<Timers::node_type> spare_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The armed alarm, the time it fires and its generation (an older
  // alarm's firing is ignored).
  std::shared_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  absl::Time armed_for_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_TIMER_QUEUE_H_
