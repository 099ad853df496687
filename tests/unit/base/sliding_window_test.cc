// Copyright rpcguard authors.

#include "rpcguard/base/sliding_window.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/random/random.h"
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

// An add before the latest bucket's end takes the fast path (no bucket
// arithmetic); one at that end exactly starts the next bucket.
TEST(SlidingWindowTest, ABucketEndsExactlyAtItsWidth) {
  SlidingWindow w(absl::Seconds(10), 10);
  w.Add(kStart, 1, 0);
  w.Add(kStart + absl::Seconds(1) - absl::Nanoseconds(1), 1, 0);  // bucket 0
  w.Add(kStart + absl::Seconds(1), 1, 1);                         // bucket 1
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(10) - absl::Nanoseconds(1)).a, 3);
  const SlidingWindow::Counts c = w.Sum(kStart + absl::Seconds(10));
  EXPECT_EQ(c.a, 1);
  EXPECT_EQ(c.b, 1);
  // Counts after a Clear still land in the latest bucket and age out.
  w.Clear();
  w.Add(kStart + absl::Seconds(10), 2, 0);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(19) + absl::Milliseconds(999)).a, 2);
  EXPECT_EQ(w.Sum(kStart + absl::Seconds(20)).a, 0);
}

TEST(SlidingWindowTest, TimesBeforeTheEpochFloor) {
  SlidingWindow w(absl::Seconds(10), 10);
  const absl::Time t = absl::UnixEpoch() - absl::Milliseconds(500);
  w.Add(t, 1, 0);
  w.Add(absl::UnixEpoch() + absl::Milliseconds(8500), 1, 0);
  EXPECT_EQ(w.Sum(absl::UnixEpoch() + absl::Milliseconds(8500)).a, 2);
  EXPECT_EQ(w.Sum(absl::UnixEpoch() + absl::Seconds(9)).a, 1);  // -1 left
}

// The window keeps running totals; a model that sums every count still in
// the window must agree after any sequence of adds and sums, times going
// forward by random steps (some past a whole window) and now and then back.
TEST(SlidingWindowTest, RunningTotalsMatchASumOfEveryCount) {
  constexpr int64_t kWidthMs = 100;  // 1 s window, 10 buckets
  SlidingWindow w(absl::Seconds(1), 10);
  struct Entry {
    int64_t epoch;
    int64_t a, b;
  };
  std::vector<Entry> model;
  absl::BitGen gen;
  int64_t now_ms = 3600 * 1000;
  int64_t latest_epoch = INT64_MIN;
  for (int i = 0; i < 20000; ++i) {
    const int step = absl::Uniform(gen, 0, 100);
    if (step < 5) {
      now_ms -= absl::Uniform(gen, 0, 300);  // out of order: counts as latest
    } else if (step < 7) {
      now_ms += absl::Uniform(gen, 1000, 3000);  // past the whole window
    } else {
      now_ms += absl::Uniform(gen, 0, 40);
    }
    const absl::Time now = absl::UnixEpoch() + absl::Milliseconds(now_ms);
    latest_epoch = std::max(latest_epoch, now_ms / kWidthMs);
    if (absl::Bernoulli(gen, 0.7)) {
      const int64_t a = absl::Uniform(gen, 0, 5);
      const int64_t b = absl::Uniform(gen, 0, 5);
      w.Add(now, a, b);
      model.push_back({latest_epoch, a, b});
    } else {
      SlidingWindow::Counts want;
      for (const Entry& e : model) {
        if (e.epoch > latest_epoch - 10) {
          want.a += e.a;
          want.b += e.b;
        }
      }
      const SlidingWindow::Counts got = w.Sum(now);
      ASSERT_EQ(got.a, want.a) << "step " << i;
      ASSERT_EQ(got.b, want.b) << "step " << i;
    }
  }
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
