// Copyright rpcguard authors.
//
// Serializer: one event at a time, in arrival order; an event that comes
// while another runs (from inside it, or from another thread) waits behind
// it and runs on the thread that runs.

#include "rpcguard/internal/engine/serializer.h"

#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
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

// Defer: a call an event hands over runs on the same thread once the queue
// is drained and the serializer let go, in the order deferred.
TEST(SerializerTest, ADeferredCallRunsAfterTheDrainWithTheSerializerFree) {
  Serializer s;
  std::vector<int> order;
  std::thread::id ran_on;
  bool running_when_deferred_ran = true;
  bool inner_ran_at_once = false;
  s.Run([&] {
    order.push_back(1);
    s.Defer([&] {
      order.push_back(4);
      ran_on = std::this_thread::get_id();
      running_when_deferred_ran = s.running();
      // Free: an event from here runs now, on this thread.
      s.Run([&] { inner_ran_at_once = true; });
      order.push_back(5);
    });
    s.Defer([&] { order.push_back(6); });
    s.Run([&] { order.push_back(3); });  // queued: runs before the calls
    order.push_back(2);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(running_when_deferred_ran);
  EXPECT_TRUE(inner_ran_at_once);
  EXPECT_FALSE(s.running());
}

// The point of Defer: while one thread makes a deferred call (a stream's
// write reaching the socket), another thread's event runs on its own
// thread at once instead of queuing behind it. Were the call still made
// under the serializer, the second event would wait for the first thread,
// which waits for it: the timeout below would expire.
TEST(SerializerTest, AnotherThreadsEventRunsBesideADeferredCall) {
  Serializer s;
  absl::Notification deferred_started, other_ran;
  bool other_ran_in_time = false;
  std::thread::id other_ran_on;
  std::thread runner([&] {
    s.Run([&] {
      s.Defer([&] {
        deferred_started.Notify();
        other_ran_in_time =
            other_ran.WaitForNotificationWithTimeout(absl::Seconds(10));
      });
    });
  });
  deferred_started.WaitForNotification();
  s.Run([&] { other_ran_on = std::this_thread::get_id(); });
  other_ran.Notify();
  runner.join();
  EXPECT_EQ(other_ran_on, std::this_thread::get_id());
  EXPECT_TRUE(other_ran_in_time);
}

// A kept owner (KeepAlive) is held until the deferred calls have run: they
// may touch what it owns.
TEST(SerializerTest, AKeptOwnerOutlivesTheDeferredCalls) {
  bool destroyed = false;
  bool alive_in_deferred = false;
  struct Owner {
    explicit Owner(bool* d) : destroyed(d) {}
    ~Owner() { *destroyed = true; }
    Serializer serializer;
    bool* destroyed;
  };
  auto owner = std::make_shared<Owner>(&destroyed);
  Owner* raw = owner.get();
  raw->serializer.Run([&] {
    raw->serializer.KeepAlive(std::move(owner));
    raw->serializer.Defer([&] { alive_in_deferred = !destroyed; });
  });
  EXPECT_TRUE(alive_in_deferred);
  EXPECT_TRUE(destroyed);
}

// RunHere: an event that finds another thread's event running waits for it
// to end and runs on its own thread, after it.
TEST(SerializerTest, RunHereWaitsForTheRunningEventAndRunsOnItsOwnThread) {
  Serializer s;
  absl::Notification inside;
  std::atomic<bool> waiting{false};
  std::atomic<bool> first_done{false};
  std::thread runner([&] {
    s.Run([&] {
      inside.Notify();
      // Ends only once the other thread is about to wait for it.
      while (!waiting.load()) std::this_thread::yield();
      first_done = true;
    });
  });
  inside.WaitForNotification();
  std::thread::id ran_on;
  bool first_done_when_ran = false;
  waiting = true;
  s.RunHere(
      [&] {
        ran_on = std::this_thread::get_id();
        first_done_when_ran = first_done.load();
      },
      std::numeric_limits<int>::max());
  runner.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(first_done_when_ran);
  EXPECT_FALSE(s.running());
}

// Its wait is bounded: past it, the event is handed to the running thread,
// as Run hands it.
TEST(SerializerTest, RunHereHandsItsEventOverWhenTheWaitRunsOut) {
  Serializer s;
  absl::Notification inside, returned;
  std::thread::id ran_on;
  std::thread runner([&] {
    s.Run([&] {
      inside.Notify();
      returned.WaitForNotification();
    });
  });
  inside.WaitForNotification();
  s.RunHere([&] { ran_on = std::this_thread::get_id(); }, 10);
  EXPECT_EQ(ran_on, std::thread::id());  // not yet: queued
  returned.Notify();
  const std::thread::id runner_id = runner.get_id();
  runner.join();
  EXPECT_EQ(ran_on, runner_id);
}

// From inside one of the serializer's own events it cannot wait for itself:
// it queues at once (with an unbounded wait this test would never end).
TEST(SerializerTest, RunHereFromInsideAnEventQueuesWithoutWaiting) {
  Serializer s;
  std::vector<int> order;
  s.Run([&] {
    order.push_back(1);
    s.RunHere([&] { order.push_back(3); }, std::numeric_limits<int>::max());
    order.push_back(2);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  // Another serializer's event is no reason to queue: it runs at once.
  Serializer other;
  order.clear();
  s.Run([&] {
    other.RunHere([&] { order.push_back(1); }, 10);
    order.push_back(2);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
