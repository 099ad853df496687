// Copyright rpcguard authors.

#ifndef RPCGUARD_TESTS_TESTING_FAKE_CLOCK_H_
#define RPCGUARD_TESTS_TESTING_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace testing {

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_FAKE_CLOCK_H_
