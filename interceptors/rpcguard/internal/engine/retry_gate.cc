// Copyright rpcguard authors.

#include "rpcguard/internal/engine/retry_gate.h"

namespace rpcguard {

bool SettleAttempt(const DestinationGates& dest,
                   std::optional<RetryCharge> charge, StatusClass status_class,
                   const AttemptOutcome& outcome,
                   std::optional<absl::Time> now) {
  const AttemptOrigin origin = OriginOf(outcome);
  // The adaptive throttle hears every answer a server gave, and counts only
  // its own overload rejections against it.
  if (dest.adaptive != nullptr &&
      (origin == AttemptOrigin::kServer || origin == AttemptOrigin::kOverload ||
       origin == AttemptOrigin::kBelow)) {
    const bool overloaded = origin == AttemptOrigin::kOverload;
    if (now.has_value()) {
      dest.adaptive->RecordAnswer(overloaded, *now);
    } else {
      dest.adaptive->RecordAnswer(overloaded);
    }
  }
  if (dest.budget != nullptr && charge.has_value()) {
    dest.budget->RecordRetryEnd(
        *charge,
        AttemptResultFor(status_class, outcome) == AttemptResult::kFailure);
  }
  if (dest.throttle == nullptr) return true;
  // Not the server's answer, whatever trailers came with it.
  if (origin == AttemptOrigin::kNoServer || outcome.local_error) {
    return dest.throttle->RetryAllowed();
  }
  if (status_class == StatusClass::kOk) {
    dest.throttle->RecordSuccess();
    return true;
  }
  // gRFC A6's own rule: a retriable failure, or the server saying stop.
  if (status_class == StatusClass::kRetriable || outcome.server_said_stop) {
    return dest.throttle->RecordFailure();
  }
  return dest.throttle->RetryAllowed();
}

RetryCharge RetryChargeFor(const AttemptOutcome& outcome,
                           bool server_pushback) {
  if (outcome.not_sent) return RetryCharge::kFree;
  if (server_pushback || outcome.per_attempt_timeout_expired ||
      outcome.code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return RetryCharge::kUpFront;
  }
  return RetryCharge::kOnFailure;
}

bool RecordAttemptEnd(const DestinationGates& dest,
                      const std::optional<Admission>& admission,
                      StatusClass status_class, const AttemptOutcome& outcome,
                      bool retrying, std::optional<absl::Time> now) {
  if (dest.breaker == nullptr || !admission.has_value()) return false;
  const AttemptResult result = AttemptResultFor(status_class, outcome);
  if (retrying && result == AttemptResult::kFailure && !admission->probe()) {
    return true;  // the retry speaks for the call
  }
  if (now.has_value()) {
    dest.breaker->Record(*admission, result, *now);
  } else {
    dest.breaker->Record(*admission, result);
  }
  return false;
}

void RecordDeferredFailure(const DestinationGates& dest,
                           const Admission& admission, GiveUpReason refused) {
  if (dest.breaker == nullptr) return;
  if (refused == GiveUpReason::kBudgetExhausted ||
      refused == GiveUpReason::kDeadline) {
    dest.breaker->Record(admission, AttemptResult::kFailure);
  }
}

Decision GateRetry(Decision d, bool throttle_allows,
                   const DestinationGates& dest, RetryCharge charge,
                   bool server_named_delay) {
  if (d.action != Decision::Action::kRetry) return d;
  GiveUpReason veto = GiveUpReason::kNone;
  if (dest.breaker != nullptr &&
      (dest.breaker->state() == BreakerState::kOpen ||
       dest.breaker->state() == BreakerState::kForcedOpen)) {
    veto = GiveUpReason::kBreakerOpen;
  } else if (!throttle_allows) {
    veto = GiveUpReason::kBudgetExhausted;
  } else if (dest.budget != nullptr && !dest.budget->CanAcquireRetry(charge)) {
    veto = GiveUpReason::kBudgetExhausted;
  } else if (dest.adaptive != nullptr && !server_named_delay &&
             d.outcome.code == grpc::StatusCode::RESOURCE_EXHAUSTED &&
             !dest.adaptive->RetryAfterRejectionAllowed()) {
    veto = GiveUpReason::kThrottled;
  }
  if (veto != GiveUpReason::kNone) {
    d.action = Decision::Action::kGiveUp;
    d.reason = veto;
    d.delay = absl::ZeroDuration();
  }
  return d;
}

AttemptStart BeforeAttempt(int number, bool cancelled, absl::Duration remaining,
                           const DestinationGates& dest, RetryCharge charge,
                           std::optional<absl::Time> now) {
  AttemptStart start;
  if (cancelled) {
    start.refused = GiveUpReason::kCancelled;
    return start;
  }
  if (remaining <= absl::ZeroDuration()) {
    start.refused = GiveUpReason::kDeadline;
    return start;
  }
  if (dest.adaptive != nullptr && !(now.has_value() ? dest.adaptive->Admit(*now)
                                                    : dest.adaptive->Admit())) {
    start.refused = GiveUpReason::kThrottled;
    return start;
  }
  if (dest.breaker != nullptr) {
    start.admission = dest.breaker->Admit();
    if (!start.admission->allowed()) {
      start.refused = GiveUpReason::kBreakerOpen;
      return start;
    }
  }
  if (dest.budget != nullptr) {
    if (number <= 1) {
      // Only first attempts that go out earn retry budget.
      dest.budget->RecordFirstAttempt();
    } else if (dest.budget->TryAcquireRetry(charge)) {
      start.charge = charge;
    } else {
      if (start.admission.has_value()) {
        dest.breaker->Record(*start.admission, AttemptResult::kIgnored);
        start.admission.reset();
      }
      start.refused = GiveUpReason::kBudgetExhausted;
    }
  }
  return start;
}

}  // namespace rpcguard
