// Copyright rpcguard authors.
//
// Serializer: one event at a time, in arrival order; an event that comes
// while another runs (from inside it, or from another thread) waits behind
// it and runs on the thread that runs.

#include "rpcguard/internal/engine/serializer.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace internal {
namespace {

TEST(SerializerTest, AnIdleSerializerRunsTheEventOnTheCallersThread) {
  Serializer s;
  std::thread::id ran_on;
  s.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(s.running());
}

TEST(SerializerTest, AnEventFromInsideAnotherRunsAfterItInArrivalOrder) {
  Serializer s;
  std::vector<int> order;
  s.Run([&] {
    order.push_back(1);
    s.Run([&] {
      order.push_back(3);
      s.Run([&] { order.push_back(5); });
      order.push_back(4);
    });
    s.Run([&] { order.push_back(6); });
    order.push_back(2);
  });
  // 1 and 2 run first; then the two it queued, in order (3, 4, then 6);
  // 5, queued by the first of them, after both.
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 6, 5}));
  EXPECT_FALSE(s.running());
}

TEST(SerializerTest, AnEventFromAnotherThreadRunsOnTheRunningThreadAfterIt) {
  Serializer s;
  absl::Notification inside, queued;
  std::thread::id second_ran_on;
  bool first_done = false;
  bool first_done_when_second_ran = false;
  std::thread runner([&] {
    s.Run([&] {
      inside.Notify();
      queued.WaitForNotification();
      first_done = true;
    });
  });
  inside.WaitForNotification();
  // The serializer runs the first event: this one only queues, and returns
  // before it runs.
  s.Run([&] {
    second_ran_on = std::this_thread::get_id();
    first_done_when_second_ran = first_done;
  });
  EXPECT_EQ(second_ran_on, std::thread::id());
  queued.Notify();
  const std::thread::id runner_id = runner.get_id();
  runner.join();
  EXPECT_EQ(second_ran_on, runner_id);
  EXPECT_TRUE(first_done_when_second_ran);
}

TEST(SerializerTest, EventsFromManyThreadsNeverOverlapAndAllRun) {
  Serializer s;
  std::atomic<int> inside{0};
  int overlaps = 0;  // written only inside events
  int ran = 0;
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        s.Run([&] {
          if (inside.fetch_add(1) != 0) ++overlaps;
          ++ran;
          inside.fetch_sub(1);
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps, 0);
  EXPECT_EQ(ran, kThreads * kEach);
  EXPECT_FALSE(s.running());
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
