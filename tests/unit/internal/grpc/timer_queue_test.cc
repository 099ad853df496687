// Copyright rpcguard authors.
//
// TimerQueue (the hedge timers' one alarm) with real grpc::Alarms: timers
// run in time order, never early; a cancelled one never runs; an earlier
// timer scheduled after a later one still runs first; a timer may schedule
// another from its callback. Times are on gRPC's monotonic clock, as the
// queue's.

#include "rpcguard/internal/grpc/timer_queue.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace internal {
namespace {

class TimerQueueTest : public ::testing::Test {
 protected:
  // Schedules `fn`, kept alive by the fixture (the queue holds it weakly).
  TimerQueue::Handle Schedule(absl::Time when, std::function<void()> fn) {
    auto target = std::make_shared<std::function<void()>>(std::move(fn));
    {
      absl::MutexLock lock(&mu_);
      targets_.push_back(target);
    }
    return queue_->Schedule(when, target, [](void* f) {
      (*static_cast<std::function<void()>*>(f))();
    });
  }

  // Records (id, when it ran) and notifies `done_` after `expected` runs.
  std::function<void()> Record(int id, int expected) {
    return [this, id, expected] {
      bool last;
      {
        absl::MutexLock lock(&mu_);
        ran_.push_back({id, Clock::Real()->MonotonicNow()});
        last = static_cast<int>(ran_.size()) == expected;
      }
      // After mu_ is released: the test may end, and destroy it, at once.
      if (last) done_.Notify();
    };
  }

  // Schedules timers 0, 1 and 2 at `at` (1 earliest, then 2, then 0),
  // waits for them, and checks they ran in time order, never early.
  void ExpectThreeRunInTimeOrder(const absl::Time (&at)[3]) {
    for (int i = 0; i < 3; ++i) Schedule(at[i], Record(i, 3));
    EXPECT_EQ(queue_->size(), 3u);
    ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
    absl::MutexLock lock(&mu_);
    ASSERT_EQ(ran_.size(), 3u);
    EXPECT_EQ(ran_[0].first, 1);
    EXPECT_EQ(ran_[1].first, 2);
    EXPECT_EQ(ran_[2].first, 0);
    for (const auto& [id, when] : ran_) EXPECT_GE(when, at[id]);
  }

  std::shared_ptr<TimerQueue> queue_ = TimerQueue::Create();
  absl::Mutex mu_;
  std::vector<std::pair<int, absl::Time>> ran_;
  std::vector<std::shared_ptr<std::function<void()>>> targets_;
  absl::Notification done_;
};

TEST_F(TimerQueueTest, RunsInTimeOrderAndNeverEarly) {
  const absl::Time t0 = Clock::Real()->MonotonicNow();
  const absl::Time at[] = {t0 + absl::Milliseconds(60),
                           t0 + absl::Milliseconds(20),
                           t0 + absl::Milliseconds(40)};
  ExpectThreeRunInTimeOrder(at);
  EXPECT_EQ(queue_->size(), 0u);
}

TEST_F(TimerQueueTest, ACancelledTimerNeverRuns) {
  const absl::Time t0 = Clock::Real()->MonotonicNow();
  const TimerQueue::Handle early =
      Schedule(t0 + absl::Milliseconds(10), Record(0, 1));
  Schedule(t0 + absl::Milliseconds(50), Record(1, 1));
  EXPECT_TRUE(queue_->Cancel(early));
  EXPECT_FALSE(queue_->Cancel(early));  // once only
  ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(30));
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ran_.size(), 1u);
  EXPECT_EQ(ran_[0].first, 1);
}

// The alarm is armed for a late timer; an earlier one scheduled next must
// re-arm it, not wait behind it.
TEST_F(TimerQueueTest, AnEarlierTimerReArmsTheAlarm) {
  const absl::Time t0 = Clock::Real()->MonotonicNow();
  Schedule(t0 + absl::Seconds(5), [] {});
  Schedule(t0 + absl::Milliseconds(20), Record(0, 1));
  ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_EQ(queue_->size(), 1u);
}

TEST_F(TimerQueueTest, ATimerMaySchedule) {
  Schedule(Clock::Real()->MonotonicNow() + absl::Milliseconds(5), [this] {
    Schedule(Clock::Real()->MonotonicNow() + absl::Milliseconds(5),
             Record(1, 1));
  });
  ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

// A timer whose target is gone does not run.
TEST_F(TimerQueueTest, ATimerWhoseTargetIsGoneDoesNotRun) {
  std::atomic<int> runs{0};
  auto target = std::make_shared<std::atomic<int>*>(&runs);
  queue_->Schedule(
      Clock::Real()->MonotonicNow() + absl::Milliseconds(5), target,
      [](void* p) { (*static_cast<std::atomic<int>**>(p))->fetch_add(1); });
  target.reset();
  Schedule(Clock::Real()->MonotonicNow() + absl::Milliseconds(20),
           Record(0, 1));
  ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(runs.load(), 0);
}

// Many timers at once, from many threads, every other one cancelled: a
// timer whose Cancel returned true never runs, every other one runs exactly
// once. (A Cancel may come too late, after its timer ran: it returns false.)
TEST_F(TimerQueueTest, ManyTimersFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  constexpr int kTimers = kThreads * kPerThread;
  std::vector<std::atomic<int>> runs(kTimers);
  std::vector<char> cancelled(kTimers, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int id = t * kPerThread + i;
        TimerQueue::Handle h =
            Schedule(Clock::Real()->MonotonicNow() +
                         absl::Milliseconds(1 + (i * 7 + t) % 30),
                     [&runs, id] { runs[id].fetch_add(1); });
        if (i % 2 == 0) cancelled[id] = queue_->Cancel(h) ? 1 : 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto pending = [&] {
    int n = 0;
    for (int id = 0; id < kTimers; ++id) {
      if (!cancelled[id] && runs[id].load() == 0) ++n;
    }
    return n;
  };
  const absl::Time give_up = Clock::Real()->MonotonicNow() + absl::Seconds(10);
  while (pending() > 0 && Clock::Real()->MonotonicNow() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));
  int cancelled_count = 0;
  for (int id = 0; id < kTimers; ++id) {
    EXPECT_EQ(runs[id].load(), cancelled[id] ? 0 : 1) << "timer " << id;
    cancelled_count += cancelled[id];
  }
  // Nearly all cancels come before their timer (at least 1 ms away).
  EXPECT_GT(cancelled_count, kTimers / 4);
  EXPECT_EQ(queue_->size(), 0u);
}

// Cancelled and run entries' nodes are reused (kSpareNodes of them): more
// cancels than the queue keeps, then timers on reused nodes, scheduled out
// of order. Each runs once, in time order, never early; no cancelled
// timer's callback runs through a reused node; nothing is left behind.
TEST_F(TimerQueueTest, ReusedEntriesRunOnlyTheirOwnTimers) {
  const absl::Time t0 = Clock::Real()->MonotonicNow();
  std::atomic<int> stale_runs{0};
  const int cancelled = static_cast<int>(TimerQueue::kSpareNodes) + 36;
  for (int i = 0; i < cancelled; ++i) {
    TimerQueue::Handle h = Schedule(t0 + absl::Milliseconds(5 + i % 7),
                                    [&stale_runs] { stale_runs.fetch_add(1); });
    ASSERT_TRUE(queue_->Cancel(h));
  }
  EXPECT_EQ(queue_->size(), 0u);
  const absl::Time at[] = {t0 + absl::Milliseconds(50),
                           t0 + absl::Milliseconds(10),
                           t0 + absl::Milliseconds(30)};
  ExpectThreeRunInTimeOrder(at);
  // Past every cancelled timer's time, and past the queue's granularity.
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(stale_runs.load(), 0);
  EXPECT_EQ(queue_->size(), 0u);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
