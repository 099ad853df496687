// Copyright rpcguard authors.

#include "rpcguard/call_policy.h"

#include "rpcguard/internal/grpc/call_policy_carrier.h"

namespace rpcguard {

absl::Status SetCallPolicy(grpc::ClientContext* context,
                           const CallPolicy& policy) {
  if (context == nullptr) {
    return absl::InvalidArgumentError("SetCallPolicy: context is null");
  }
  context->AddMetadata(kCallPolicyHeader, internal::EncodeCallPolicy(policy));
  return ValidateCallPolicy(policy);
}

}  // namespace rpcguard
