// Copyright rpcguard authors.
//
// The bridge between rpcguard's injected Clock and gRPC's deadlines and
// timers. Decisions (RetryController, the breaker, the budget) run on the
// injected Clock, so tests can fake time; gRPC's deadlines and grpc::Alarm
// run on the real clock. The two are bridged by the remaining duration: a
// time on the injected clock maps to "now + (t - clock->Now())" on the real
// one. Options::clock therefore governs decision arithmetic, not gRPC's
// timers. The wall clock gRPC runs on is itself a parameter (`grpc_clock`,
// Clock::Real() unless a test gives another), so nothing here reads a clock
// behind the caller's back.

#ifndef RPCGUARD_INTERNAL_DEADLINE_H_
#define RPCGUARD_INTERNAL_DEADLINE_H_

#include <grpc/support/time.h>
#include <grpcpp/client_context.h>

#include <chrono>

#include "absl/time/time.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace internal {

// `t` on `clock` as a real-clock time point, by the time remaining until it.
// A time beyond system_clock's range is time_point::max(), which gRPC reads
// as "no deadline"; a time in the past is now.
std::chrono::system_clock::time_point ToSystemTime(
    absl::Time t, Clock* clock, Clock* grpc_clock = Clock::Real());

// `t` on `clock` as a gRPC deadline, never later than `caller` (the caller's
// own gRPC deadline). Converting reads two clocks one after the other; a
// thread preempted between the reads would shift the result later, which
// must not let an attempt outlive its caller.
gpr_timespec NoLaterThanCaller(absl::Time t, Clock* clock, gpr_timespec caller,
                               Clock* grpc_clock = Clock::Real());

// `ts` as a time on the wall clock gRPC's timers run on
// (absl::InfiniteFuture() for gRPC's infinite future).
absl::Time WallTimeOf(gpr_timespec ts);

// The deadline of `context` on `clock` (absl::InfiniteFuture() for none).
absl::Time CallerDeadline(const grpc::ClientContext& context, Clock* clock,
                          Clock* grpc_clock = Clock::Real());

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_DEADLINE_H_
