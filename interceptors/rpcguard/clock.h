// Copyright rpcguard authors.
//
// Clock: the one way rpcguard reads time, so that every decision (deadline
// arithmetic, backoff, breaker and budget windows, hedge timers) can be
// tested with a fake clock.
//
// A Clock gives two times, and each reader says which it wants:
//  - MonotonicNow(): for every decision. It never steps: an NTP correction,
//    an administrator's `date -s` or a VM resumed from a snapshot moves the
//    wall clock, not this one. Its epoch is arbitrary, so only differences
//    between two of its readings (and comparisons) mean anything.
//  - WallNow(): for timestamps people read (the `ts` of a trace line, a
//    breaker transition). Never used to measure an interval.
// The caller's gRPC deadline, which gRPC keeps on the wall clock, is put on
// the monotonic clock once, when the call starts (as gRPC core does for its
// own calls); from then on a wall-clock step changes nothing but timestamps.

#ifndef RPCGUARD_CLOCK_H_
#define RPCGUARD_CLOCK_H_

#include "absl/time/time.h"

namespace rpcguard {

// A source of the current time, monotonic and wall. Implementations must be
// thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Monotonic time, for decisions: never goes back, never jumps. An
  // absl::Time on the clock's own arbitrary epoch: compare and subtract
  // readings, never format one or hand it to anything that expects a wall
  // time.
  virtual absl::Time MonotonicNow() = 0;

  // Wall-clock (UTC) time, for timestamps people read. It may jump either
  // way at any moment; never subtract two readings to measure anything.
  virtual absl::Time WallNow() = 0;

  // Returns the process-wide real clock: MonotonicNow() is gRPC's own
  // monotonic clock (gpr_now(GPR_CLOCK_MONOTONIC), which gRPC's timers and
  // deadlines run on), WallNow() is absl::Now(). Never null, never
  // destroyed.
  static Clock* Real();
};

}  // namespace rpcguard

#endif  // RPCGUARD_CLOCK_H_
