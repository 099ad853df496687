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
          std::max<int64_t>(1, absl::ToInt64Nanoseconds(granularity))) {}

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
    timers_.emplace(handle, Timer{std::move(target), run});
    at = RoundUp(when);
    if (at < armed_for_) {
      dropped = std::move(alarm_);
      set = ArmLocked(at, &generation);
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
      due.push_back(std::move(timers_.begin()->second));
      timers_.erase(timers_.begin());
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

bool TimerQueue::Cancel(const Handle& handle) {
  {
    MutexLock lock(&mu_);
    if (timers_.erase(handle) == 0) return false;
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
