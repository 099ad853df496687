// Copyright rpcguard authors.

#include "rpcguard/decision/call_plan.h"

#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace {

CallPlan FailFast(CallPlan plan, grpc::StatusCode code, std::string message) {
  plan.mode = CallMode::kFailFast;
  plan.reject = grpc::Status(code, std::move(message));
  return plan;
}

}  // namespace

absl::string_view CallModeName(CallMode mode) {
  switch (mode) {
    case CallMode::kPassThrough:
      return "pass_through";
    case CallMode::kMetadataOnly:
      return "metadata_only";
    case CallMode::kRide:
      return "ride";
    case CallMode::kHijack:
      return "hijack";
    case CallMode::kFailFast:
      return "fail_fast";
  }
  return "pass_through";
}

bool MayHedge(const MethodPolicy& policy, Idempotency idempotency,
              bool for_method) {
  if (!policy.hedging.has_value()) return false;
  switch (idempotency) {
    case Idempotency::kNoSideEffects:
      return true;
    case Idempotency::kIdempotent:
    case Idempotency::kKeyed:
      return for_method;
    case Idempotency::kUnknown:
      return false;
  }
  return false;
}

CallPlan PlanCall(const MethodPolicy& policy, const CallFacts& facts) {
  CallPlan plan;
  if (facts.marked_pass_through) return plan;
  plan.idempotency = policy.idempotency;
  if (!facts.declaration_error.ok()) {
    return FailFast(plan, grpc::StatusCode::FAILED_PRECONDITION,
                    absl::StrCat("rpcguard: bad retry declaration: ",
                                 facts.declaration_error.message()));
  }
  if (!facts.destination_error.ok()) {
    return FailFast(
        plan, grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("rpcguard: ", facts.destination_error.message()));
  }
  if (!facts.call_policy_error.ok()) {
    return FailFast(plan, grpc::StatusCode::INVALID_ARGUMENT,
                    absl::StrCat("rpcguard: bad call policy: ",
                                 facts.call_policy_error.message()));
  }
  if (facts.caller_keys > 1) {
    return FailFast(plan, grpc::StatusCode::INVALID_ARGUMENT,
                    "rpcguard: more than one idempotency-key metadata value "
                    "on the call");
  }
  if (facts.caller_keys == 1) {
    if (absl::Status s = ValidateIdempotencyKey(facts.caller_key); !s.ok()) {
      return FailFast(plan, grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat("rpcguard: ", s.message()));
    }
    // A caller's own key says the server deduplicates this call.
    if (plan.idempotency == Idempotency::kUnknown) {
      plan.idempotency = Idempotency::kKeyed;
    }
  }
  plan.may_repeat = MayRepeat(plan.idempotency);
  if (!facts.unary) {
    // A stream is retried until it commits (gRFC A6), never hedged: its
    // copies would each need the application's requests as they come.
    if (policy.hedging.has_value() && facts.hedging_for_method) {
      return FailFast(plan, grpc::StatusCode::FAILED_PRECONDITION,
                      "rpcguard: a hedgingPolicy names this streaming "
                      "method, and rpcguard does not hedge streams; give it "
                      "a retryPolicy instead");
    }
    plan.mode = plan.may_repeat && policy.retry.max_attempts > 1
                    ? CallMode::kHijack
                    : CallMode::kMetadataOnly;
    return plan;
  }
  // Neither a methodConfig timeout (it shortens the caller's deadline) nor
  // waitForReady can be put on the application's own call.
  const bool own_call_unfit = policy.timeout != absl::InfiniteDuration() ||
                              policy.wait_for_ready.has_value();
  if (!facts.no_hedge &&
      MayHedge(policy, policy.idempotency, facts.hedging_for_method)) {
    if (!facts.response_may_be_message) {
      plan.mode = CallMode::kMetadataOnly;
      plan.reason = GiveUpReason::kUnsupportedCall;
      return plan;
    }
    plan.hedge = true;
    // Copies run side by side. On the callback API the first can be the
    // application's own call, as a retried call's attempt 1 is: rpcguard
    // takes over when the hedge is due or the copy fails; elsewhere every
    // copy is a call of rpcguard's own.
    plan.mode = facts.callback_api && !own_call_unfit &&
                        policy.per_attempt_timeout == absl::InfiniteDuration()
                    ? CallMode::kRide
                    : CallMode::kHijack;
    return plan;
  }
  const bool retries = plan.may_repeat && policy.retry.max_attempts > 1;
  if (retries && !facts.response_may_be_message) {
    // No attempt's response could be given to the application.
    plan.mode = CallMode::kMetadataOnly;
    plan.reason = GiveUpReason::kUnsupportedCall;
  } else if (own_call_unfit) {
    plan.mode = CallMode::kHijack;
  } else if (!retries) {
    plan.mode = CallMode::kMetadataOnly;
  } else if (facts.callback_api &&
             policy.per_attempt_timeout == absl::InfiniteDuration()) {
    // An attempt's own deadline cannot be put on the application's call.
    plan.mode = CallMode::kRide;
  } else {
    plan.mode = CallMode::kHijack;
  }
  return plan;
}

CallPlan RefusedByBreaker(CallPlan plan, absl::string_view message) {
  plan = FailFast(plan, grpc::StatusCode::UNAVAILABLE,
                  absl::StrCat("rpcguard: ", message));
  plan.reason = GiveUpReason::kBreakerOpen;
  return plan;
}

CallPlan RefusedByThrottle(CallPlan plan, const grpc::Status& status) {
  plan = FailFast(plan, status.error_code(), status.error_message());
  plan.reason = GiveUpReason::kThrottled;
  return plan;
}

}  // namespace rpcguard
