// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/deadline.h"

#include <algorithm>

namespace rpcguard {
namespace internal {

namespace {

bool IsInfiniteFuture(gpr_timespec ts) {
  return gpr_time_cmp(ts, gpr_inf_future(ts.clock_type)) == 0;
}

absl::Time FromTimespec(gpr_timespec ts) {
  timespec t;
  t.tv_sec = ts.tv_sec;
  t.tv_nsec = ts.tv_nsec;
  return absl::TimeFromTimespec(t);
}

}  // namespace

absl::Time OnGrpcClock(absl::Time t, Clock* clock, Clock* grpc_clock) {
  if (clock == grpc_clock || t == absl::InfiniteFuture()) return t;
  // Time left, never negative: a time in the past is now.
  const absl::Duration left =
      std::max(t - clock->MonotonicNow(), absl::ZeroDuration());
  return grpc_clock->MonotonicNow() + left;
}

gpr_timespec MonotonicTimespec(absl::Time t) {
  // gpr_timespec holds 64-bit seconds; beyond them is "no deadline".
  if (t >= absl::FromUnixSeconds(gpr_inf_future(GPR_CLOCK_MONOTONIC).tv_sec)) {
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  }
  if (t < absl::UnixEpoch()) return gpr_time_0(GPR_CLOCK_MONOTONIC);
  const timespec ts = absl::ToTimespec(t);
  gpr_timespec out;
  out.tv_sec = ts.tv_sec;
  out.tv_nsec = static_cast<int32_t>(ts.tv_nsec);
  out.clock_type = GPR_CLOCK_MONOTONIC;
  return out;
}

gpr_timespec GrpcDeadline(absl::Time t, Clock* clock, absl::Time cap,
                          Clock* grpc_clock) {
  return MonotonicTimespec(std::min(OnGrpcClock(t, clock, grpc_clock), cap));
}

CallDeadline CallerDeadline(const grpc::ClientContext& context, Clock* clock,
                            Clock* grpc_clock) {
  CallDeadline out;
  const gpr_timespec raw = context.raw_deadline();
  if (IsInfiniteFuture(raw)) return out;
  // The monotonic clocks are read first: a thread preempted between the
  // reads then sees less time left, never more.
  const absl::Time now = clock->MonotonicNow();
  const absl::Time grpc_now =
      clock == grpc_clock ? now : grpc_clock->MonotonicNow();
  absl::Duration left;
  switch (raw.clock_type) {
    case GPR_CLOCK_MONOTONIC:
      left = FromTimespec(raw) - grpc_now;
      break;
    case GPR_TIMESPAN:
      // gRPC reads a span as "from now".
      left = FromTimespec(raw) - absl::UnixEpoch();
      break;
    default:  // GPR_CLOCK_REALTIME (GPR_CLOCK_PRECISE is read as it)
      left = FromTimespec(raw) - grpc_clock->WallNow();
      break;
  }
  out.on_clock = now + left;
  out.on_grpc = grpc_now + left;
  return out;
}

}  // namespace internal
}  // namespace rpcguard
