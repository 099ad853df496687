// Copyright rpcguard authors.
//
// RetryGate: the order of every check around an attempt, in one place. Pure:
// it consults the call's RetryController decision and the destination's
// shared breaker, budget and A6 throttle, and never touches gRPC call
// objects. The interceptor (hijacked, riding and sent-once calls alike)
// asks these functions and obeys, so every stub API gets the same answers.
//
// Around each attempt, in this order:
//
//   attempt ends ──> RecordAttemptEnd: breaker records it (AttemptResultFor),
//                    A6 throttle counts it
//               ──> RetryController::OnAttemptEnd: cancelled? deadline?
//                    class? idempotent? server pushback? attempts left?
//                    does the backoff fit the deadline?
//               ──> GateRetry: breaker open? throttle? budget affordable?
//   backoff ...
//   next attempt ──> BeforeAttempt: cancelled? deadline left? breaker
//                    admits? budget pays (retries only)? then send.
//
// Why this order:
//  - The destination hears of an attempt before anything is decided, so a
//    retry decided next sees a breaker this very failure opened.
//  - The controller's checks come first: they are the call's own facts and
//    cost nothing; a call that would not retry anyway must not be reported
//    as refused by shared state (its give-up reason names the real cause).
//  - Shared state is read, never spent, before the backoff: an open breaker
//    or an empty budget ends the call now instead of after a useless wait.
//  - The budget is spent only after the breaker admitted the attempt, right
//    before it is sent: a retry the breaker refuses spends no budget, and
//    an admission the budget refuses is given back (kIgnored).

#ifndef RPCGUARD_DECISION_RETRY_GATE_H_
#define RPCGUARD_DECISION_RETRY_GATE_H_

#include <optional>

#include "absl/time/time.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"

namespace rpcguard {

// The shared state of the call's destination; any may be null (disabled).
struct DestinationGates {
  CircuitBreaker* breaker = nullptr;
  RetryBudget* budget = nullptr;
  RetryThrottle* throttle = nullptr;
};

// Tells the destination how an attempt ended: the breaker records it under
// `admission` (when there is one) as AttemptResultFor(status_class,
// outcome); the A6 throttle counts it (a retriable failure, or the server
// saying stop, takes a token; OK adds one back). An error the client made
// itself (outcome.local_error) tells it nothing: the admission is recorded
// as kIgnored and the throttle is left alone. Returns whether the throttle
// still allows a retry. Call without holding locks of your own: a breaker
// transition calls its listeners on this thread.
bool RecordAttemptEnd(const DestinationGates& dest,
                      const std::optional<Admission>& admission,
                      StatusClass status_class, const AttemptOutcome& outcome,
                      bool server_said_stop);

// The controller's decision `d`, vetoed when the destination cannot take a
// retry now: an open breaker (breaker_open), a throttle without tokens
// (`throttle_allows`, from RecordAttemptEnd) or a budget without allowance
// (budget_exhausted). Spends nothing. Decisions other than kRetry pass
// unchanged.
Decision GateRetry(Decision d, bool throttle_allows,
                   const DestinationGates& dest);

// What BeforeAttempt answers.
struct AttemptStart {
  // kNone: send the attempt; otherwise the call ends for this reason
  // (kCancelled, kDeadline, kBreakerOpen, kBudgetExhausted).
  GiveUpReason refused = GiveUpReason::kNone;
  // The breaker's admission of the attempt. On kNone it must be recorded
  // when the attempt ends (RecordAttemptEnd) or given back (kIgnored) if it
  // is not sent after all. On kBreakerOpen it holds the refusal (for
  // CircuitBreaker::RefusalMessage).
  std::optional<Admission> admission;
};

// Decides whether attempt `number` (1 = the first) may be sent now:
// `cancelled` by the caller, `remaining` of the call's deadline. Admits it
// to the breaker, then, for a retry, spends the budget (giving the
// admission back when the budget refuses); a first attempt that goes out
// earns budget instead. Call without holding locks of your own.
AttemptStart BeforeAttempt(int number, bool cancelled, absl::Duration remaining,
                           const DestinationGates& dest);

// The decision for a call sent once, without rpcguard owning it (CallPlan
// kMetadataOnly, or a riding call that succeeded), that ended as `end`
// says: what a RetryController allowed one attempt would say, so that its
// give-up reason matches a hijacked call's. `deadline` is the caller's.
Decision DecideSentOnce(const MethodPolicy& policy, bool may_repeat,
                        absl::Time deadline, Clock* clock,
                        const AttemptEnd& end);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_RETRY_GATE_H_
