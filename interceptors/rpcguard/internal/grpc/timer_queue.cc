// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/timer_queue.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "rpcguard/internal/grpc/deadline.h"

namespace rpcguard {
namespace internal {

TimerQueue::TimerQueue(Clock* real_clock, absl::Duration granularity)
    : clock_(real_clock),
      granularity_ns_(
          std::max<int64_t>(1, absl::ToInt64Nanoseconds(granularity))) {
  spare_.reserve(kSpareNodes);
}

std::shared_ptr<TimerQueue> TimerQueue::Create(Clock* real_clock,
                                               absl::Duration granularity) {
  return std::make_shared<TimerQueue>(real_clock, granularity);
}

absl::Time TimerQueue::RoundUp(absl::Time t) const {
  if (t == absl::InfiniteFuture() || t == absl::InfinitePast()) return t;
  // Integer nanoseconds: absl::Floor on Durations costs a division of
  // 128-bit values, on every hedged call.
  const int64_t ns = absl::ToUnixNanos(t);
  const int64_t g = granularity_ns_;
  if (ns > std::numeric_limits<int64_t>::max() - g) return t;
  const int64_t rem = ns % g;
  if (rem == 0) return t;
  return absl::FromUnixNanos(ns - rem + (ns > 0 ? g : 0));
}

TimerQueue::Handle TimerQueue::Schedule(absl::Time when,
                                        std::weak_ptr<void> target, Run run) {
  Handle handle;
  std::shared_ptr<grpc::Alarm> set;
  std::shared_ptr<grpc::Alarm> dropped;
  uint64_t generation = 0;
  absl::Time at;
  {
    MutexLock lock(&mu_);
    handle = Handle(when, ++next_id_);
    if (spare_.empty()) {
      timers_.emplace(handle, Timer{std::move(target), run});
    } else {
      Timers::node_type node = std::move(spare_.back());
      spare_.pop_back();
      node.key() = handle;
      node.mapped().target = std::move(target);
      node.mapped().run = run;
      timers_.insert(std::move(node));
    }
    // RoundUp(when) >= when: a timer due at or after the armed alarm needs
    // no earlier one, and most are (a hedge delay is mostly the same).
    if (when < armed_for_) {
      at = RoundUp(when);
      if (at < armed_for_) {
        dropped = std::move(alarm_);
        set = ArmLocked(at, &generation);
      }
    }
  }
  // Outside mu_: setting or destroying an alarm may run alarm callbacks.
  dropped.reset();
  if (set != nullptr) SetAlarm(std::move(set), at, generation);
  return handle;
}

std::shared_ptr<grpc::Alarm> TimerQueue::ArmLocked(absl::Time when,
                                                   uint64_t* generation) {
  armed_for_ = when;
  *generation = ++generation_;
  alarm_ = std::make_shared<grpc::Alarm>();
  return alarm_;
}

void TimerQueue::SetAlarm(std::shared_ptr<grpc::Alarm> alarm, absl::Time when,
                          uint64_t generation) {
  std::weak_ptr<TimerQueue> weak = weak_from_this();
  alarm->Set(MonotonicTimespec(when), [weak, generation](bool fired) {
    if (!fired) return;  // replaced by an earlier alarm, or the queue is gone
    if (auto self = weak.lock()) self->OnAlarm(generation);
  });
}

void TimerQueue::OnAlarm(uint64_t generation) {
  std::vector<Timer> due;
  std::shared_ptr<grpc::Alarm> fired;
  std::shared_ptr<grpc::Alarm> set;
  uint64_t next_generation = 0;
  absl::Time at;
  {
    MutexLock lock(&mu_);
    if (generation != generation_) return;
    fired = std::move(alarm_);
    armed_for_ = absl::InfiniteFuture();
    const absl::Time now = clock_->MonotonicNow();
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      Timers::node_type node = timers_.extract(timers_.begin());
      due.push_back(std::move(node.mapped()));
      // A node Recycle has no room for is freed here, under mu_: it holds
      // nothing but an empty weak reference by now.
      Recycle(std::move(node));
    }
    if (!timers_.empty()) {
      at = RoundUp(timers_.begin()->first.first);
      set = ArmLocked(at, &next_generation);
    }
  }
  if (set != nullptr) SetAlarm(std::move(set), at, next_generation);
  for (const Timer& timer : due) {
    if (std::shared_ptr<void> target = timer.target.lock()) {
      timer.run(target.get());
    }
  }
  // `fired` is the alarm running this callback; gRPC holds its own
  // reference while it runs, so dropping ours here is safe.
}

TimerQueue::Timers::node_type TimerQueue::Recycle(Timers::node_type node) {
  // Emptied now: a kept node must not keep its target's memory.
  node.mapped().target.reset();
  if (spare_.size() < kSpareNodes) spare_.push_back(std::move(node));
  return node;
}

bool TimerQueue::Cancel(const Handle& handle) {
  Timers::node_type freed;
  {
    MutexLock lock(&mu_);
    Timers::node_type node = timers_.extract(handle);
    if (node.empty()) return false;
    freed = Recycle(std::move(node));
  }
  // The armed alarm stays: firing once for nothing is cheaper than
  // cancelling it, which costs a hop to an executor thread.
  return true;
}

size_t TimerQueue::size() const {
  MutexLock lock(&mu_);
  return timers_.size();
}

}  // namespace internal
}  // namespace rpcguard
