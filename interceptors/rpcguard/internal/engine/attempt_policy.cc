// Copyright rpcguard authors.

#include "rpcguard/internal/engine/attempt_policy.h"

#include <algorithm>
#include <utility>

namespace rpcguard {
namespace internal {
namespace {

// The call ends, for `reason`.
PolicyStep Done(GiveUpReason reason) {
  PolicyStep step;
  step.done = true;
  step.reason = reason;
  return step;
}

}  // namespace

SendTerms AttemptPolicy::TermsFor(bool first,
                                  std::optional<RetryCharge> /*replaces*/,
                                  RetryCharge next_charge,
                                  bool next_waits) const {
  SendTerms terms;
  if (!first) {
    terms.charge = next_charge;
    terms.waits = next_waits;
  }
  return terms;
}

PolicyStep RetryAttemptPolicy::OnAttemptEnd(const EndFacts& facts,
                                            absl::BitGenRef gen) {
  const Decision raw =
      controller_->OnAttemptEnd(facts.end, facts.pushback, gen, facts.ended_at);
  const RetryCharge charge = RetryChargeFor(raw.outcome, facts.server_pushback);
  // The destination's veto comes after the call's own checks (retry_gate.h).
  Decision d = GateRetry(raw, facts.throttle_allows, gates_, charge,
                         facts.server_pushback);
  if (facts.committed && (d.action == Decision::Action::kRetry ||
                          d.action == Decision::Action::kRefreshAuth)) {
    // What would have been retried is the call's end: the application has
    // had some of this attempt's answer.
    d.action = Decision::Action::kGiveUp;
    d.reason = GiveUpReason::kCommitted;
  }
  PolicyStep step;
  step.outcome = d.outcome;
  step.status_class = d.status_class;
  step.decision = TraceDecision::kRetry;
  switch (d.action) {
    case Decision::Action::kRetry:
      step.timer = controller_->Now() + d.delay;
      step.trace_backoff = d.delay;
      step.retrying = true;
      step.defer_failure = true;
      step.next_charge = charge;
      step.next_waits = d.wait_for_connection;
      step.idle = true;
      break;
    case Decision::Action::kRefreshAuth:
      step.refresh = true;
      step.idle = true;
      break;
    case Decision::Action::kDone:
    case Decision::Action::kGiveUp:
      step.done = true;
      step.reason = d.reason;
      break;
  }
  return step;
}

PolicyStep RetryAttemptPolicy::OnTimer() {
  // The backoff is over.
  PolicyStep step;
  step.send = true;
  return step;
}

PolicyStep RetryAttemptPolicy::OnRefused(GiveUpReason refused,
                                         bool /*replaces*/) {
  return Done(refused);
}

PolicyStep SentOnceAttemptPolicy::OnAttemptEnd(const EndFacts& facts,
                                               absl::BitGenRef gen) {
  const Decision d =
      controller_->OnAttemptEnd(facts.end, facts.pushback, gen, facts.ended_at);
  PolicyStep step;
  step.outcome = d.outcome;
  step.status_class = d.status_class;
  step.done = true;
  step.reason = d.reason;
  // A failure a retry could have changed, on a call that may repeat: the
  // controller would go on (or name a later limit); the plan said once.
  if (d.status_class == StatusClass::kRetriable && may_repeat_ &&
      facts.pushback.kind != Pushback::Kind::kStop) {
    step.reason = why_;
  }
  return step;
}

PolicyStep SentOnceAttemptPolicy::OnTimer() { return Done(why_); }

PolicyStep SentOnceAttemptPolicy::OnRefused(GiveUpReason refused,
                                            bool /*replaces*/) {
  return Done(refused);
}

HedgeAttemptPolicy::HedgeAttemptPolicy(const HedgingPolicy& policy,
                                       absl::Duration delay,
                                       const RetryController* controller,
                                       Clock* clock,
                                       absl::Duration min_attempt_time,
                                       RetryBudget* hedge_budget)
    : policy_(policy),
      hedge_budget_(hedge_budget),
      controller_(controller),
      clock_(clock),
      hedge_(policy, delay, controller->deadline(), clock, min_attempt_time) {}

Started HedgeAttemptPolicy::Start(absl::Time first_sent) {
  Started started;
  started.timer = hedge_.Start(first_sent);
  started.keep_deadline = started.timer == absl::InfiniteFuture();
  return started;
}

SendTerms HedgeAttemptPolicy::TermsFor(bool first,
                                       std::optional<RetryCharge> replaces,
                                       RetryCharge /*next_charge*/,
                                       bool /*next_waits*/) const {
  SendTerms terms;
  if (first) {
    terms.counts_first = hedge_budget_;
    return terms;
  }
  terms.traced = true;
  if (replaces.has_value()) {
    terms.charge = *replaces;
  } else {
    terms.budget = hedge_budget_;
  }
  return terms;
}

void HedgeAttemptPolicy::Annotate(TraceEvent& terminal, int decided_by) const {
  terminal.copy = decided_by;
  std::sort(terminal.cancelled.begin(), terminal.cancelled.end());
}

std::optional<CallSummary> HedgeAttemptPolicy::Summary(int attempts, bool ok,
                                                       int decided_by) const {
  CallSummary summary;
  summary.copies = attempts;
  summary.later_won = ok && decided_by > 1;
  summary.delay = hedge_.delay();
  return summary;
}

PolicyStep HedgeAttemptPolicy::OnAttemptEnd(const EndFacts& facts,
                                            absl::BitGenRef /*gen*/) {
  const HedgeController::Step s =
      hedge_.OnCopyEnd(facts.number, facts.end.code, facts.pushback,
                       facts.cancelled, /*allowed=*/true);
  // The server stopped the copies, or asked for a delay that cannot be
  // waited out: that is why the call ends, once nothing is in flight.
  if (hedge_.server_stop() != GiveUpReason::kNone) {
    stop_ = hedge_.server_stop();
  }
  PolicyStep step;
  step.outcome = facts.outcome;
  step.status_class = facts.status_class;
  step.decision = TraceDecision::kHedge;
  if (s.done) {
    step.done = true;
    if (facts.end.code != grpc::StatusCode::OK) {
      if (facts.outcome.caller_deadline_expired) {
        step.reason = GiveUpReason::kDeadline;
      } else if (facts.status_class != StatusClass::kRetriable ||
                 !policy_.non_fatal_codes.Contains(facts.end.code)) {
        step.reason = facts.outcome.local_error ? GiveUpReason::kLocalError
                                                : GiveUpReason::kFatal;
      } else {
        step.reason = stop_;
      }
    }
    return step;
  }
  // A failure the call goes on from: the final copy's result speaks for it.
  step.retrying = true;
  step.send = s.send;
  if (s.send)
    step.replaces = RetryChargeFor(facts.outcome, facts.server_pushback);
  step.timer = s.next_timer;
  if (!s.send && s.next_timer != absl::InfiniteFuture()) {
    step.trace_backoff = s.next_timer - clock_->MonotonicNow();
    step.idle = hedge_.in_flight() == 0;
  }
  return step;
}

PolicyStep HedgeAttemptPolicy::OnTimer() {
  const HedgeController::Step s = hedge_.OnTimer(/*allowed=*/true);
  PolicyStep step;
  if (s.done) {
    step.done = true;
    step.reason = controller_->Remaining() <= absl::ZeroDuration()
                      ? GiveUpReason::kDeadline
                      : stop_;
    return step;
  }
  step.send = s.send;
  step.timer = s.next_timer;
  return step;
}

PolicyStep HedgeAttemptPolicy::OnRefused(GiveUpReason refused, bool replaces) {
  stop_ = refused;
  const HedgeController::Step s = hedge_.OnRefused(/*hedge=*/!replaces);
  // Other copies may still run; when none does, the last failure stands.
  PolicyStep step;
  step.done = s.done;
  step.reason = refused;
  step.last_failure_stands = true;
  return step;
}

}  // namespace internal
}  // namespace rpcguard
