// Copyright rpcguard authors.

#include "rpcguard/base/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rpcguard {
namespace internal {
namespace {

// More threads than cores contend, so waiters spin and then yield; every
// increment must still be seen (TSan checks the ordering too).
template <typename Lock>
void CountUnder() {
  constexpr int kThreads = 6;
  constexpr int kEach = 20000;
  Lock mu;
  int64_t count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        ScopedLock<Lock> lock(&mu);
        ++count;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(count, int64_t{kThreads} * kEach);
}

TEST(SpinLockTest, ExcludesEveryOtherHolder) { CountUnder<SpinLock>(); }

TEST(MutexTest, ExcludesEveryOtherHolder) { CountUnder<Mutex>(); }

}  // namespace
}  // namespace internal
}  // namespace rpcguard
