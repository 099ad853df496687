// Copyright rpcguard authors.

#include "interceptors/sliding_window.h"

#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace internal {
namespace {

const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1);

TEST(SlidingWindowTest, CountsAgeOutOneBucketAtATime) {
  SlidingWindow w(absl::Seconds(10), 10);
  w.Add(kStart, 1, 0);
  w.Add(kStart + absl::Milliseconds(999), 1, 1);  // same bucket
  w.Add(kStart + absl::Seconds(3), 5, 2);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(9)).a, 7);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(9)).b, 3);
  // Bucket 0 leaves the window at 10 s; bucket 3 at 13 s.
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(10)).a, 5);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(12) + absl::Milliseconds(999)).a, 5);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(13)).a, 0);
}

TEST(SlidingWindowTest, ABucketIsReusedOnlyAfterItExpired) {
  SlidingWindow w(absl::Seconds(10), 10);
  w.Add(kStart, 3, 3);
  w.Add(kStart + absl::Seconds(10), 1, 0);  // same slot, next lap
  const SlidingWindow::Counts c = w.Sum(kStart + absl::Seconds(10));
  EXPECT_EQ(c.a, 1);
  EXPECT_EQ(c.b, 0);
}

TEST(SlidingWindowTest, AnEarlierTimeCountsAsTheLatestSeen) {
  // Callers read the clock before their lock, so they may arrive out of
  // order; a late arrival must not land in an expired bucket.
  SlidingWindow w(absl::Seconds(10), 10);
  w.Add(kStart + absl::Seconds(20), 1, 0);
  w.Add(kStart, 1, 0);  // counted at 20 s
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(29)).a, 2);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(30)).a, 0);
}

TEST(SlidingWindowTest, TimesBeforeTheEpochFloor) {
  SlidingWindow w(absl::Seconds(10), 10);
  const absl::Time t = absl::UnixEpoch() - absl::Milliseconds(500);
  w.Add(t, 1, 0);
  w.Add(absl::UnixEpoch() + absl::Milliseconds(8500), 1, 0);
  EXPECT_EQ(w.Sum(absl::UnixEpoch() + absl::Milliseconds(8500)).a, 2);
  EXPECT_EQ(w.Sum(absl::UnixEpoch() + absl::Seconds(9)).a, 1);  // -1 left
}

TEST(SlidingWindowTest, Clear) {
  SlidingWindow w(absl::Seconds(10), 10);
  w.Add(kStart, 4, 4);
  w.Clear();
  EXPECT_EQ(w.Sum(kStart).a, 0);
}

TEST(StripedWindowTest, SumsEveryThreadsStripe) {
  StripedWindow w(absl::Seconds(10), 10);
  constexpr int kThreads = 12;  // more threads than stripes
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) w.Add(kStart, 1, i % 2);
    });
  }
  for (std::thread& t : threads) t.join();
  const SlidingWindow::Counts c = w.Sum(kStart);
  EXPECT_EQ(c.a, kThreads * 1000);
  EXPECT_EQ(c.b, kThreads * 500);
  w.LockAll();
  w.ClearLocked();
  w.UnlockAll();
  EXPECT_EQ(w.Sum(kStart).a, 0);
}

TEST(StripedWindowTest, AddIfChecksUnderTheStripeLock) {
  StripedWindow w(absl::Seconds(10), 10);
  EXPECT_FALSE(w.AddIf(kStart, 1, 0, [] { return false; }));
  EXPECT_TRUE(w.AddIf(kStart, 1, 0, [] { return true; }));
  EXPECT_EQ(w.Sum(kStart).a, 1);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
