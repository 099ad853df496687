// Copyright rpcguard authors.

#include "rpcguard/internal/engine/engine_env.h"

#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace internal {

grpc::Status ThrottledStatus(absl::string_view key) {
  // RESOURCE_EXHAUSTED, the answer the destination itself was giving: the
  // throttle sheds on its behalf. UNAVAILABLE would read, to a caller above
  // that receives this failure from a middle, as the middle being down
  // (breakers, outlier ejection, and most retry policies count it); Envoy's
  // rate limiter offers the same choice for the same reason
  // (rate_limited_as_resource_exhausted). docs/fleet.md.
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("rpcguard: the adaptive throttle of \"", key,
                   "\" refused the call: the destination is rejecting calls "
                   "as overloaded"));
}

grpc::Status CancelledByCaller() {
  return grpc::Status(grpc::StatusCode::CANCELLED,
                      "call cancelled by the caller");
}

}  // namespace internal
}  // namespace rpcguard
