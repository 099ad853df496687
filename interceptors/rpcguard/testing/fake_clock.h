// Copyright rpcguard authors.
//
// FakeClock: an rpcguard::Clock that moves only when a test moves it.
//
//   rpcguard::testing::FakeClock clock;
//   rpcguard::Options options;
//   options.clock = &clock;            // rpcguard's decisions read it
//   ...
//   clock.Advance(absl::Seconds(2));   // e.g. past a breaker's open time
//   clock.StepWall(-absl::Hours(1));   // NTP steps the wall clock back:
//                                      // only trace timestamps change
//
// It keeps both of a Clock's times: the monotonic one every decision reads,
// and the wall one of trace timestamps. Advance moves both, as time passing
// does; StepWall and SetWall move the wall clock alone, as an NTP step, an
// administrator or a resumed VM does, so a test can show that a step changes
// nothing but timestamps.
//
// rpcguard's decisions (backoff and deadline arithmetic, breaker windows,
// hedge timers) read the clock they are given; gRPC's own timers and
// deadlines always run on real time. So a fake clock makes the decision
// logic deterministic, while a call through a real channel still waits in
// real time for what gRPC does (see Options::clock in rpcguard/channel.h).

#ifndef RPCGUARD_TESTING_FAKE_CLOCK_H_
#define RPCGUARD_TESTING_FAKE_CLOCK_H_

#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace testing {

// A clock that moves only when told. Thread-safe: any thread may read it
// while another moves it. Its lock is one ThreadSanitizer sees, so tests
// under --config=tsan may share it between threads.
class FakeClock final : public Clock {
 public:
  // Both times start at `start`: by default an hour after the Unix epoch,
  // so that a test subtracting a few seconds never goes before it.
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : monotonic_(start), wall_(start) {}

  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  absl::Time MonotonicNow() override {
    internal::MutexLock lock(&mu_);
    return monotonic_;
  }

  absl::Time WallNow() override {
    internal::MutexLock lock(&mu_);
    return wall_;
  }

  // Time passes: moves both clocks forward by `d`. A negative `d` is taken
  // as zero: a monotonic clock never goes back (step the wall clock back
  // with StepWall).
  void Advance(absl::Duration d) {
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    internal::MutexLock lock(&mu_);
    monotonic_ += d;
    wall_ += d;
  }

  // Steps the wall clock alone by `d`, forward or back (negative `d`).
  void StepWall(absl::Duration d) {
    internal::MutexLock lock(&mu_);
    wall_ += d;
  }

  // Sets the wall clock alone to `t`, which may be earlier than now.
  void SetWall(absl::Time t) {
    internal::MutexLock lock(&mu_);
    wall_ = t;
  }

 private:
  internal::Mutex mu_;
  absl::Time monotonic_ ABSL_GUARDED_BY(mu_);
  absl::Time wall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTING_FAKE_CLOCK_H_
