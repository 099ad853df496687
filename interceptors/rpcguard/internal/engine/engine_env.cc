// Copyright rpcguard authors.

#include "rpcguard/internal/engine/engine_env.h"

#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace internal {

grpc::Status ThrottledStatus(absl::string_view key) {
  // UNAVAILABLE, as gRPC's own load-balancer drops: the destination may
  // take the call later.
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
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
