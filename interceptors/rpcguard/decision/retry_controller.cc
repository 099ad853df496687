// Copyright rpcguard authors.

#include "rpcguard/decision/retry_controller.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rpcguard {

RetryController::RetryController(const MethodPolicy& policy, bool may_repeat,
                                 absl::Time deadline, Clock* clock)
    : policy_(policy),
      classifier_(policy.MakeClassifier()),
      may_repeat_(may_repeat),
      clock_(clock),
      deadline_(deadline),
      backoff_(policy.retry.backoff) {
  if (policy.timeout != absl::InfiniteDuration()) {
    deadline_ = std::min(deadline_, clock_->MonotonicNow() + policy.timeout);
  }
}

absl::Time RetryController::StartAttempt() {
  ++attempts_;
  attempt_deadline_ = deadline_;
  if (policy_.per_attempt_timeout != absl::InfiniteDuration()) {
    attempt_deadline_ =
        std::min(attempt_deadline_,
                 clock_->MonotonicNow() + policy_.per_attempt_timeout);
  }
  return attempt_deadline_;
}

AttemptOutcome RetryController::OutcomeOf(const AttemptEnd& end) const {
  return OutcomeAt(end, clock_->MonotonicNow());
}

AttemptOutcome RetryController::OutcomeAt(const AttemptEnd& end,
                                          absl::Time now) const {
  AttemptOutcome outcome;
  outcome.code = end.code;
  outcome.caller_cancelled = end.caller_cancelled;
  outcome.local_error = end.local_error && end.code != grpc::StatusCode::OK;
  outcome.not_sent =
      end.not_sent && end.code != grpc::StatusCode::OK && !outcome.local_error;
  outcome.server_said_stop =
      end.server_said_stop && end.code != grpc::StatusCode::OK;
  outcome.downstream_gave_up =
      end.downstream_gave_up && outcome.server_said_stop;
  const bool deadline_code = end.code == grpc::StatusCode::DEADLINE_EXCEEDED;
  // The attempt's deadline was its own timeout only if it came before the
  // call's deadline.
  outcome.per_attempt_timeout_expired =
      deadline_code && attempt_deadline_ < deadline_;
  outcome.caller_deadline_expired =
      now >= deadline_ ||
      (deadline_code && !outcome.per_attempt_timeout_expired &&
       deadline_ != absl::InfiniteFuture() &&
       deadline_ - now <= kDeadlineSlack);
  return outcome;
}

Decision RetryController::OnAttemptEnd(const AttemptEnd& end,
                                       const Pushback& pushback,
                                       absl::BitGenRef gen, absl::Time now) {
  const AttemptOutcome outcome = OutcomeAt(end, now);
  const grpc::StatusCode code = end.code;
  const bool caller_cancelled = end.caller_cancelled;

  Decision d;
  d.outcome = outcome;
  d.status_class = classifier_.Classify(outcome);
  switch (d.status_class) {
    case StatusClass::kOk:
      d.action = Decision::Action::kDone;
      return d;
    case StatusClass::kAuth:
      // PERMISSION_DENIED is final: new credentials of the same principal
      // would be denied again.
      if (can_refresh_ && may_repeat_ &&
          code == grpc::StatusCode::UNAUTHENTICATED &&
          Remaining() > policy_.min_attempt_time) {
        can_refresh_ = false;  // one refresh per call
        d.action = Decision::Action::kRefreshAuth;
        return d;
      }
      d.action = Decision::Action::kGiveUp;
      d.reason = GiveUpReason::kAuth;
      return d;
    case StatusClass::kFatal:
      d.action = Decision::Action::kGiveUp;
      d.reason = caller_cancelled                  ? GiveUpReason::kCancelled
                 : outcome.caller_deadline_expired ? GiveUpReason::kDeadline
                 : outcome.local_error             ? GiveUpReason::kLocalError
                                                   : GiveUpReason::kFatal;
      return d;
    case StatusClass::kRetriable:
      break;
  }

  d.action = Decision::Action::kGiveUp;
  // The server's "do not retry" names the give-up whether or not this call
  // may repeat: it then travels up through calls sent once too (server.h).
  if (pushback.kind == Pushback::Kind::kStop) {
    d.reason = pushback.StopReason();
    return d;
  }
  if (!may_repeat_) {
    d.reason = GiveUpReason::kNotIdempotent;
    return d;
  }
  const bool wait =
      outcome.not_sent && end.may_wait && deadline_ != absl::InfiniteFuture();
  if (wait) ++not_sent_;
  if (attempts_ - not_sent_ >= policy_.retry.max_attempts ||
      attempts_ >= kMaxAttemptsCap) {
    d.reason = GiveUpReason::kMaxAttempts;
    return d;
  }
  absl::Duration delay;
  bool server_chose = false;
  if (pushback.kind == Pushback::Kind::kRetryAfter) {
    // A6: the server's delay is used exactly, and backoff starts over.
    delay = pushback.delay;
    backoff_.Reset();
    server_chose = true;
  } else {
    delay = backoff_.Next(gen);
  }
  // RetryInfo sets a floor under whichever delay was chosen.
  if (pushback.min_delay.has_value() && *pushback.min_delay > delay) {
    delay = *pushback.min_delay;
    server_chose = true;
  }
  // The deadline bounds a server's delay; without one, kMaxServerDelay does.
  if (server_chose) {
    d.reason =
        CheckServerDelay(delay, deadline_ - now - policy_.min_attempt_time);
    if (d.reason != GiveUpReason::kNone) return d;
  }
  if (deadline_ != absl::InfiniteFuture() &&
      now + delay + policy_.min_attempt_time > deadline_) {
    d.reason = GiveUpReason::kDeadline;
    return d;
  }
  d.action = Decision::Action::kRetry;
  d.delay = delay;
  d.wait_for_connection = wait;
  return d;
}

std::string AnnotateMessage(absl::string_view message, int attempts,
                            GiveUpReason reason) {
  const bool retry_decision =
      reason != GiveUpReason::kNone && reason != GiveUpReason::kFatal &&
      reason != GiveUpReason::kAuth && reason != GiveUpReason::kCancelled &&
      reason != GiveUpReason::kLocalError;
  if (attempts <= 1 && !retry_decision) return std::string(message);
  std::string out(message);
  absl::StrAppend(&out, out.empty() ? "" : " ", "[rpcguard: ", attempts,
                  attempts == 1 ? " attempt" : " attempts");
  if (reason != GiveUpReason::kNone) {
    absl::StrAppend(&out, ", gave up: ", GiveUpReasonName(reason));
  }
  out += "]";
  return out;
}

}  // namespace rpcguard
