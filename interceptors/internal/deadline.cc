// Copyright rpcguard authors.

#include "rpcguard/internal/deadline.h"

#include <grpcpp/support/time.h>

#include <algorithm>

namespace rpcguard {
namespace internal {

namespace {

// `ts` on the wall clock, read through `grpc_clock` only.
absl::Time WallTime(gpr_timespec ts) {
  // A monotonic deadline (set through gpr_timespec) is first put on the
  // wall clock the way gRPC itself does it.
  if (ts.clock_type != GPR_CLOCK_REALTIME) {
    ts = gpr_convert_clock_type(ts, GPR_CLOCK_REALTIME);
  }
  return absl::FromUnixSeconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
}

}  // namespace

std::chrono::system_clock::time_point ToSystemTime(absl::Time t, Clock* clock,
                                                   Clock* grpc_clock) {
  const absl::Duration left = t - clock->Now();
  const auto now = absl::ToChronoTime(grpc_clock->Now());
  // A caller's deadline may lie beyond system_clock's range (gRPC takes any
  // gpr_timespec): adding it would overflow.
  if (left >=
      absl::FromChrono(std::chrono::system_clock::time_point::max() - now)) {
    return std::chrono::system_clock::time_point::max();
  }
  return now +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             absl::ToChronoNanoseconds(std::max(left, absl::ZeroDuration())));
}

gpr_timespec NoLaterThanCaller(absl::Time t, Clock* clock, gpr_timespec caller,
                               Clock* grpc_clock) {
  gpr_timespec converted;
  grpc::Timepoint2Timespec(ToSystemTime(t, clock, grpc_clock), &converted);
  caller = gpr_convert_clock_type(caller, GPR_CLOCK_REALTIME);
  return gpr_time_cmp(converted, caller) <= 0 ? converted : caller;
}

absl::Time WallTimeOf(gpr_timespec ts) {
  if (gpr_time_cmp(ts, gpr_inf_future(ts.clock_type)) == 0) {
    return absl::InfiniteFuture();
  }
  return WallTime(ts);
}

absl::Time CallerDeadline(const grpc::ClientContext& context, Clock* clock,
                          Clock* grpc_clock) {
  const gpr_timespec raw = context.raw_deadline();
  if (gpr_time_cmp(raw, gpr_inf_future(raw.clock_type)) == 0) {
    return absl::InfiniteFuture();
  }
  return clock->Now() + (WallTime(raw) - grpc_clock->Now());
}

}  // namespace internal
}  // namespace rpcguard
