// Copyright rpcguard authors.
//
// Reading retry declarations from .proto files: rpcguard's own options
// (proto/rpcguard/v1/options.proto) and protobuf's `idempotency_level`. The
// interceptor reads them from the generated descriptor pool; rpcguard_lint
// from a pool built of FileDescriptorSets, through the same function, so both
// accept and reject the same declarations with the same messages.

#ifndef RPCGUARD_PROTO_OPTIONS_H_
#define RPCGUARD_PROTO_OPTIONS_H_

#include <google/protobuf/descriptor.h>

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

// Reads the options of `service` and, unless it is null, of its `method`.
// The descriptors may come from any pool: options are read through the
// generated extensions, which protobuf's parser fills in whenever this
// library is linked (also for options parsed from a FileDescriptorSet).
// Errors: InvalidArgument naming the method (or the service, for a bad
// service option), the option field and the reason, e.g. "pkg.Svc.M:
// (rpcguard.v1.method).retry.max_attempts: must be at least 2". Every
// problem of both options is reported, joined by "; ", the service's first.
absl::StatusOr<ProtoPolicies> ReadProtoPolicies(
    const google::protobuf::ServiceDescriptor& service,
    const google::protobuf::MethodDescriptor* method);

// Reads the options of `service` ("pkg.Svc") and its `method` ("M") from
// the generated pool. A service or method that is not there (no generated
// code linked, or a generic caller's made-up name) yields empty entries.
// Errors: as above.
absl::StatusOr<ProtoPolicies> ReadProtoPolicies(absl::string_view service,
                                                absl::string_view method);

}  // namespace rpcguard

#endif  // RPCGUARD_PROTO_OPTIONS_H_
