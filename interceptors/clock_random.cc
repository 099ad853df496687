// Copyright rpcguard authors.

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "rpcguard/clock.h"
#include "rpcguard/random.h"

namespace rpcguard {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
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
