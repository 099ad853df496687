// Copyright rpcguard authors.
//
// Reading retry declarations from .proto files: rpcguard's own options
// (proto/rpcguard/v1/options.proto) and protobuf's `idempotency_level`, from
// the generated descriptor pool.

#ifndef RPCGUARD_INTERNAL_PROTO_OPTIONS_H_
#define RPCGUARD_INTERNAL_PROTO_OPTIONS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/config.h"

namespace rpcguard {

// What a method's .proto says, one entry per source; an entry with no
// fields set says nothing.
struct ProtoPolicies {
  Config::Entry method;             // (rpcguard.v1.method)
  Config::Entry service;            // (rpcguard.v1.service)
  Config::Entry idempotency_level;  // NO_SIDE_EFFECTS / IDEMPOTENT
};

// Reads the options of `service` ("pkg.Svc") and its `method` ("M") from
// the generated pool. A service or method that is not there (no generated
// code linked, or a generic caller's made-up name) yields empty entries.
// Errors: InvalidArgument naming the method, the option field and the
// reason, e.g. "pkg.Svc.M: (rpcguard.v1.method).retry.max_attempts: must be
// at least 2".
absl::StatusOr<ProtoPolicies> ReadProtoPolicies(absl::string_view service,
                                                absl::string_view method);

}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_PROTO_OPTIONS_H_
