// Copyright rpcguard authors.
//
// Serializer: one event at a time, in arrival order; an event that comes
// while another runs (from inside it, or from another thread) waits behind
// it and runs on the thread that runs.

#include "rpcguard/internal/engine/serializer.h"

#include <atomic>
#include <memory>
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

// The engine's case: the application lets go of its call during an event
// (its last batch served) while the engine still holds itself (attempts in
// flight), and hands that hold to the drain.
TEST(SerializerTest, AKeptOwnerOutlivesTheDrainAndNothingHandedOverLeaks) {
  bool destroyed = false;
  struct Owner {
    explicit Owner(bool* d) : destroyed(d) {}
    ~Owner() { *destroyed = true; }
    Serializer serializer;
    std::shared_ptr<void> self;  // as the engine's hold while attempts run
    bool* destroyed;
  };
  auto owner = std::make_shared<Owner>(&destroyed);
  owner->self = owner;
  Owner* raw = owner.get();
  bool later_ran = false;
  raw->serializer.Run([&] {
    raw->serializer.KeepAlive(std::shared_ptr<void>(raw->self));
    owner.reset();  // the application lets go of its call
    // Already kept: the hold is let go of all the same, or it would keep
    // its own object alive for ever.
    raw->serializer.KeepAlive(std::move(raw->self));
    EXPECT_EQ(raw->self, nullptr);
    raw->serializer.Run([&] { later_ran = true; });  // queued behind
    EXPECT_FALSE(destroyed);
  });
  EXPECT_TRUE(later_ran);
  EXPECT_TRUE(destroyed);  // by the drain's end, on this thread
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
