// Copyright rpcguard authors.
//
// CallPolicy: what one call asks for instead of its method's policy (fewer
// or more attempts, another per-attempt timeout or backoff, hedging off or
// on, another trace verbosity), and ApplyCallPolicy, the one step that turns
// a method's policy and a call's CallPolicy into the policy the call runs
// under. Pure: no gRPC objects, so it is tested with no channel and every
// call shape (unary today, streams next) calls the same function.
//
// A CallPolicy never loosens safety: it has no idempotency field, so it
// cannot make a method nobody declared safe to repeat retriable. PlanCall
// (call_plan.h) still decides from the method's idempotency and the caller's
// own idempotency key: a call of an UNKNOWN method with max_attempts 5 and
// no key of its own is sent once.
//
// Users set it with SetCallPolicy (rpcguard/call_policy.h), which carries it
// to the interceptor; this header is the value and its rules.

#ifndef RPCGUARD_DECISION_CALL_POLICY_H_
#define RPCGUARD_DECISION_CALL_POLICY_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpcguard/decision/backoff.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {

// observability/trace.h. Declared, not included: this layer sits below
// observability; a CallPolicy only carries the value, and the interceptor
// hands it to ShouldTrace. (An opaque declaration: the compiler checks that
// it matches trace.h's wherever both are seen.)
enum class TraceVerbosity;
// The number of TraceVerbosity values (0 .. kNumTraceVerbosities - 1), for
// ValidateCallPolicy; trace.cc asserts that it matches the enum.
inline constexpr int kNumTraceVerbosities = 4;

// One call's override of its method's policy. Every field is optional; an
// unset field keeps the method's value.
struct CallPolicy {
  // Attempts in all, the first included: 1 (not retried, not hedged) to
  // kMaxAttemptsCap. Applies to the method's retryPolicy and, on a hedged
  // method, to its hedgingPolicy's copies.
  std::optional<int> max_attempts;
  // Each attempt's own timeout; absl::InfiniteDuration() removes the
  // method's. Must be greater than 0.
  std::optional<absl::Duration> per_attempt_timeout;
  // The retry backoff (BackoffParams): initial and max must be greater than
  // 0 and finite, the resulting max at least the resulting initial;
  // multiplier in (0, 1000].
  std::optional<absl::Duration> initial_backoff;
  std::optional<absl::Duration> max_backoff;
  std::optional<double> backoff_multiplier;
  std::optional<Jitter> jitter;
  // false: the call is retried under the retryPolicy, never hedged. true:
  // it is hedged under the method's hedgingPolicy (which it must have), as
  // if that policy had been written for the method itself; a method of
  // UNKNOWN idempotency is still never hedged (call_plan.h, MayHedge).
  std::optional<bool> hedging;
  // The verbosity of this call's trace events in place of the channel's
  // (Options::trace_verbosity). Stats count every event whatever it says.
  std::optional<TraceVerbosity> trace_verbosity;
};

// The path errors name fields under: "CallPolicy.max_attempts: ...".
inline constexpr char kCallPolicyPath[] = "CallPolicy";

// Checks what can be checked of `call` alone (each field's range, an enum
// field inside its enum, and max_backoff >= initial_backoff when both are
// set), with the rules every
// source of policy uses (policy.h). OK, or InvalidArgument naming the first
// bad field, e.g. "CallPolicy.max_attempts: must be at most 10".
absl::Status ValidateCallPolicy(const CallPolicy& call);

// The policy a call of a method with `method` runs under when it asks for
// `call`: ValidateCallPolicy, then each set field replaces the method's, then
// the checks against the method's values (a max_backoff below the method's
// initial backoff; hedging on for a method with no hedgingPolicy, or with
// max_attempts 1). InvalidArgument naming the field otherwise. Leaves
// idempotency, the retriable codes, timeouts other than the per-attempt one
// and waitForReady alone. trace_verbosity is not part of a MethodPolicy: the
// caller applies it.
absl::StatusOr<MethodPolicy> ApplyCallPolicy(const MethodPolicy& method,
                                             const CallPolicy& call);

// Whether a call's hedging policy counts as written for the method itself
// (CallFacts::hedging_for_method): the method's own config entry or option
// says so, or the call asked for hedging.
inline bool HedgingForMethod(bool method_entry, const CallPolicy* call) {
  return method_entry || (call != nullptr && call->hedging == true);
}

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_CALL_POLICY_H_
