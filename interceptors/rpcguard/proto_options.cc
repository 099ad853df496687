// Copyright rpcguard authors.

#include "rpcguard/proto_options.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "proto/rpcguard/v1/options.pb.h"
#include "rpcguard/config_reader/json_fields.h"    // private to :config
#include "rpcguard/config_reader/policy_fields.h"  // private to :config

namespace rpcguard {
absl::StatusOr<ProtoPolicies> ReadProtoPolicies(
    const google::protobuf::ServiceDescriptor& service,
    const google::protobuf::MethodDescriptor* method) {
  ProtoPolicies out;
  // Every problem of both options, the service's first.
  internal::ConfigErrors errors;
  const google::protobuf::ServiceDescriptor* sd = &service;
  if (sd->options().HasExtension(::rpcguard::v1::service)) {
    ReadPolicyOption(sd->options().GetExtension(::rpcguard::v1::service),
                     absl::StrCat(sd->full_name(), ": (rpcguard.v1.service)"),
                     errors, &out.service);
  }
  const google::protobuf::MethodDescriptor* md = method;
  if (md == nullptr) {
    if (!errors.empty()) return errors.ToStatus();
    return out;
  }
  const google::protobuf::MethodOptions& options = md->options();
  if (options.HasExtension(::rpcguard::v1::method)) {
    ReadPolicyOption(options.GetExtension(::rpcguard::v1::method),
                     absl::StrCat(md->full_name(), ": (rpcguard.v1.method)"),
                     errors, &out.method);
  }
  if (!errors.empty()) return errors.ToStatus();
  switch (options.idempotency_level()) {
    case google::protobuf::MethodOptions::NO_SIDE_EFFECTS:
      out.idempotency_level.policy.idempotency = Idempotency::kNoSideEffects;
      out.idempotency_level.fields = kFieldIdempotency;
      break;
    case google::protobuf::MethodOptions::IDEMPOTENT:
      out.idempotency_level.policy.idempotency = Idempotency::kIdempotent;
      out.idempotency_level.fields = kFieldIdempotency;
      break;
    default:
      break;
  }
  return out;
}

absl::StatusOr<ProtoPolicies> ReadProtoPolicies(absl::string_view service,
                                                absl::string_view method) {
  const google::protobuf::ServiceDescriptor* sd =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(service));
  if (sd == nullptr) return ProtoPolicies();
  return ReadProtoPolicies(*sd, sd->FindMethodByName(std::string(method)));
}

}  // namespace rpcguard
