// Copyright rpcguard authors.
//
// FakeClock: an rpcguard::Clock that moves only when a test moves it.
//
//   rpcguard::testing::FakeClock clock;
//   rpcguard::Options options;
//   options.clock = &clock;            // rpcguard's decisions read it
//   ...
//   clock.Advance(absl::Seconds(2));   // e.g. past a breaker's open time
//
// rpcguard's decisions (backoff and deadline arithmetic, breaker windows,
// trace timestamps) read the clock they are given; gRPC's own timers and
// deadlines always run on real time. So a fake clock makes the decision
// logic deterministic, while a call through a real channel still waits in
// real time for what gRPC does (see Options::clock in rpcguard/channel.h).

#ifndef RPCGUARD_TESTING_FAKE_CLOCK_H_
#define RPCGUARD_TESTING_FAKE_CLOCK_H_

#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/internal/mutex.h"

namespace rpcguard {
namespace testing {

// A clock that moves only when told. Thread-safe: any thread may read it
// while another advances it. Its lock is one ThreadSanitizer sees, so tests
// under --config=tsan may share it between threads.
class FakeClock final : public Clock {
 public:
  // Starts at `start`: by default an hour after the Unix epoch, so that a
  // test subtracting a few seconds never goes before it.
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}

  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  absl::Time Now() override {
    internal::MutexLock lock(&mu_);
    return now_;
  }

  // Moves the clock forward by `d` (backward if `d` is negative).
  void Advance(absl::Duration d) {
    internal::MutexLock lock(&mu_);
    now_ += d;
  }

  // Sets the clock to `t`, which may be earlier than now: a test may rewind
  // it to check how code copes with a clock that steps back.
  void Set(absl::Time t) {
    internal::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  internal::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTING_FAKE_CLOCK_H_
