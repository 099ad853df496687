// Copyright rpcguard authors.
//
// How a CallPolicy travels from SetCallPolicy to the interceptor: gRPC's
// ClientContext has no slot for user data that an interceptor can read, but
// an interceptor sees (and may edit) the call's initial metadata. So
// SetCallPolicy adds one reserved entry, kCallPolicyHeader (channel.h),
// whose value is the policy in a compact text form, and the interceptor
// takes it out at the call's first batch, before anything is sent:
//
//   max_attempts=3;per_attempt_timeout=250ms;initial_backoff=10ms;
//   max_backoff=1s;backoff_multiplier=2;jitter=FULL;hedging=false;
//   trace_verbosity=ALL
//
// (one line; only the fields that are set, each at most once; durations as
// absl::FormatDuration writes them, "inf" included; names as JitterName and
// TraceVerbosityName write them). The keys are CallPolicy's member names, so
// an error names the field the caller set. An unknown key is an error, not
// skipped: a call never runs under a policy it asked for only in part.
//
// Every call shape calls TakeCallPolicy at its first batch, on every path
// (pass-through included), so that the entry never reaches a server; then
// ApplyCallPolicy (decision/call_policy.h) for the policy it runs under.
// Not API.

#ifndef RPCGUARD_INTERNAL_GRPC_CALL_POLICY_CARRIER_H_
#define RPCGUARD_INTERNAL_GRPC_CALL_POLICY_CARRIER_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/decision/call_policy.h"

namespace rpcguard {
namespace internal {

// The entry's value for `call`. Writes any value, valid or not: the
// interceptor's checks decide (a value out of an enum's range is written so
// that parsing it fails, naming its field).
std::string EncodeCallPolicy(const CallPolicy& call);

// Parses an entry's value. InvalidArgument naming the field ("CallPolicy.
// max_attempts: not an integer: \"x\"") for a malformed value, an unknown or
// repeated key, or an item without '='. Parses only: ranges are
// ApplyCallPolicy's.
absl::StatusOr<CallPolicy> ParseCallPolicy(absl::string_view text);

// Takes the call's policy out of its initial metadata `md`: erases every
// kCallPolicyHeader entry, and returns nullopt when there was none, the
// parsed policy when there was one, InvalidArgument when there were more
// (SetCallPolicy called twice on one context) or it does not parse.
// Cheap when the call has no metadata.
absl::StatusOr<std::optional<CallPolicy>> TakeCallPolicy(
    std::multimap<std::string, std::string>* md);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_CALL_POLICY_CARRIER_H_
