// Copyright rpcguard authors.
//
// Clock: the one way rpcguard reads time, so that every decision (deadline
// arithmetic, backoff, breaker windows) can be tested with a fake clock.

#ifndef RPCGUARD_CLOCK_H_
#define RPCGUARD_CLOCK_H_

#include "absl/time/time.h"

namespace rpcguard {

// A source of the current time. Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Returns the current time.
  virtual absl::Time Now() = 0;

  // Returns the process-wide real-time clock (absl::Now()). Never null, never
  // destroyed.
  static Clock* Real();
};

}  // namespace rpcguard

#endif  // RPCGUARD_CLOCK_H_
