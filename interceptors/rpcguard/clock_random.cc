// Copyright rpcguard authors.

#include <grpc/support/time.h>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "rpcguard/clock.h"
#include "rpcguard/random.h"

namespace rpcguard {
namespace {

class RealClock final : public Clock {
 public:
  // gRPC's monotonic clock itself, so that a time read here is one gRPC's
  // timers and deadlines understand without conversion (deadline.h).
  absl::Time MonotonicNow() override {
    const gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    // On every call's path: built directly, with no Duration arithmetic.
    timespec ts;
    ts.tv_sec = now.tv_sec;
    ts.tv_nsec = now.tv_nsec;
    return absl::TimeFromTimespec(ts);
  }
  absl::Time WallNow() override { return absl::Now(); }
};

class ThreadLocalRandom final : public Random {
 public:
  uint64_t Next64() override {
    // One generator per thread: no lock on the call path.
    thread_local absl::BitGen gen;
    return gen();
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

Random* Random::Default() {
  static ThreadLocalRandom* random = new ThreadLocalRandom();
  return random;
}

}  // namespace rpcguard
