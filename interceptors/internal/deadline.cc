// Copyright rpcguard authors.

#include "rpcguard/internal/deadline.h"

#include <grpcpp/support/time.h>

#include <algorithm>

namespace rpcguard {
namespace internal {

std::chrono::system_clock::time_point ToSystemTime(absl::Time t, Clock* clock) {
  const absl::Duration left = t - clock->Now();
  const auto now = std::chrono::system_clock::now();
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

gpr_timespec NoLaterThanCaller(absl::Time t, Clock* clock,
                               gpr_timespec caller) {
  gpr_timespec converted;
  grpc::Timepoint2Timespec(ToSystemTime(t, clock), &converted);
  caller = gpr_convert_clock_type(caller, GPR_CLOCK_REALTIME);
  return gpr_time_cmp(converted, caller) <= 0 ? converted : caller;
}

absl::Time CallerDeadline(const grpc::ClientContext& context, Clock* clock) {
  const gpr_timespec raw = context.raw_deadline();
  if (gpr_time_cmp(raw, gpr_inf_future(raw.clock_type)) == 0) {
    return absl::InfiniteFuture();
  }
  const gpr_timespec now = gpr_now(raw.clock_type);
  const gpr_timespec left = gpr_time_sub(raw, now);
  return clock->Now() + absl::Seconds(left.tv_sec) +
         absl::Nanoseconds(left.tv_nsec);
}

}  // namespace internal
}  // namespace rpcguard
