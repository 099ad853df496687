// Copyright rpcguard authors.
//
// The bridge between rpcguard's injected Clock and gRPC's deadlines and
// timers. Decisions (RetryController, the breaker, the budget, hedge timers)
// run on the injected Clock's monotonic time, so tests can fake time; gRPC's
// deadlines and grpc::Alarm run on gRPC's own monotonic clock, which is
// Clock::Real()'s. The two are bridged by the time remaining: a time `t` on
// the injected clock is "now + (t - clock->MonotonicNow())" on gRPC's, and
// exactly `t` when the injected clock is the real one (no clock read).
//
// Every deadline or alarm time handed to gRPC is a GPR_CLOCK_MONOTONIC
// gpr_timespec, so a wall-clock step after it is computed changes nothing.
// The only wall-clock read here is CallerDeadline's, once per call: the
// caller's deadline is a wall time (set_deadline with a system_clock time
// point), and it is put on the monotonic clock when the call starts, as
// gRPC core does for its own calls.

#ifndef RPCGUARD_INTERNAL_GRPC_DEADLINE_H_
#define RPCGUARD_INTERNAL_GRPC_DEADLINE_H_

#include <grpc/support/time.h>
#include <grpcpp/client_context.h>

#include "absl/time/time.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace internal {

// `t` on `clock`'s monotonic time, as a time on `grpc_clock`'s (gRPC's),
// by the time remaining until it. `t` itself when the clocks are one, and
// for absl::InfiniteFuture().
absl::Time OnGrpcClock(absl::Time t, Clock* clock,
                       Clock* grpc_clock = Clock::Real());

// `t`, a time on gRPC's monotonic clock (Clock::Real()->MonotonicNow()), as
// the gpr_timespec gRPC's deadlines and alarms take: GPR_CLOCK_MONOTONIC,
// or gRPC's infinite future for absl::InfiniteFuture().
gpr_timespec MonotonicTimespec(absl::Time t);

// `t` on `clock`'s monotonic time as a gRPC deadline or alarm time, never
// later than `cap` (on gRPC's monotonic clock: CallDeadline::on_grpc).
gpr_timespec GrpcDeadline(absl::Time t, Clock* clock,
                          absl::Time cap = absl::InfiniteFuture(),
                          Clock* grpc_clock = Clock::Real());

// A caller's deadline, on both monotonic clocks (absl::InfiniteFuture() for
// none).
struct CallDeadline {
  // On the injected clock: what decisions compare with.
  absl::Time on_clock = absl::InfiniteFuture();
  // On gRPC's: the cap of every deadline and alarm handed to gRPC. With an
  // injected clock other than the real one, converting each attempt's
  // deadline reads two clocks one after the other, and a thread preempted
  // between the reads would shift it later; the cap keeps it within the
  // caller's. The same as on_clock on the real clock.
  absl::Time on_grpc = absl::InfiniteFuture();
};

// The deadline of `context`. A wall-clock deadline (the usual kind) is read
// against `grpc_clock`'s wall time, so call this once, when the call
// starts: a later call would see any wall-clock step since. A monotonic
// deadline (set through gpr_timespec) needs no wall time.
CallDeadline CallerDeadline(const grpc::ClientContext& context, Clock* clock,
                            Clock* grpc_clock = Clock::Real());

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_DEADLINE_H_
