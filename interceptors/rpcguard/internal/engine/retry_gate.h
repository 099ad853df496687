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
//   attempt ends ──> SettleAttempt: A6 throttle counts it; a retry granted
//                    on credit is paid (failed) or refunded
//               ──> RetryController::OnAttemptEnd: cancelled? deadline?
//                    class? idempotent? server pushback? attempts left?
//                    does the backoff fit the deadline?
//               ──> GateRetry: breaker open? throttle? budget affordable
//                    for this retry's charge (RetryChargeFor)?
//               ──> RecordAttemptEnd: breaker and budget hear the result,
//                    knowing whether the call retries
//   backoff ...
//   next attempt ──> BeforeAttempt: cancelled? deadline left? breaker
//                    admits? budget grants (retries only)? then send.
//
// Why this order:
//  - The controller's checks come first: they are the call's own facts and
//    cost nothing; a call that would not retry anyway must not be reported
//    as refused by shared state (its give-up reason names the real cause).
//  - Shared state is read, never spent, before the backoff: an open breaker
//    or an empty budget ends the call now instead of after a useless wait.
//  - The breaker hears of an attempt after the decision, because evidence is
//    the call's, not the attempt's: a failure that the call retries is not
//    recorded (the retry's result speaks for the call), unless the retry is
//    then refused for budget or deadline, when the failure stands
//    (RecordDeferredFailure). So 200 calls that each fail once in a burst
//    and succeed on their retry tell the breaker 200 successes, while calls
//    that fail after their retries are failures. A HALF_OPEN probe is
//    recorded at once: it is the breaker's own question.
//  - The budget is spent only after the breaker admitted the attempt, right
//    before it is sent: a retry the breaker refuses spends no budget, and
//    an admission the budget refuses is given back (kIgnored).

#ifndef RPCGUARD_INTERNAL_ENGINE_RETRY_GATE_H_
#define RPCGUARD_INTERNAL_ENGINE_RETRY_GATE_H_

#include <optional>

#include "absl/time/time.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/destination/adaptive_throttle.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"

namespace rpcguard {

// The shared state of the call's destination; any may be null (disabled).
struct DestinationGates {
  CircuitBreaker* breaker = nullptr;
  RetryBudget* budget = nullptr;
  RetryThrottle* throttle = nullptr;
  AdaptiveThrottle* adaptive = nullptr;
  // The clock they run on (their registry's, BreakerRegistry::clock()); null
  // if not known.
  const Clock* clock = nullptr;
};

// `now`, read from `clock`, for the gates' `now` arguments below when they
// run on that same clock; otherwise none, and they read their own (a
// registry given its own clock, as tests do).
inline std::optional<absl::Time> GateNow(const DestinationGates& dest,
                                         const Clock* clock, absl::Time now) {
  if (clock == nullptr || dest.clock != clock) return std::nullopt;
  return now;
}

// Settles the cost of an attempt, before the call decides what follows (so
// that the decision sees the budget with this attempt settled). Each judge
// reads OriginOf(outcome) (decision/status_class.h): the adaptive throttle
// hears every answer a server gave (kServer, kBelow: accepted; kOverload:
// rejected), never the caller's own ends nor an attempt no server took; the
// A6 throttle counts as gRFC A6 says (a retriable failure, or the server
// saying stop, takes a token; OK adds one back; an error the client made
// itself, or an attempt that never reached a server, tells it nothing);
// and a retry the budget granted as kOnFailure (`charge`, from
// AttemptStart) is paid if it failed (AttemptResultFor says kFailure: the
// server failed itself), refunded otherwise. Returns whether the A6
// throttle still allows a retry. `now`: when the attempt ended, a reading
// of the gates' clock the caller has already taken (else they read it).
bool SettleAttempt(const DestinationGates& dest,
                   std::optional<RetryCharge> charge, StatusClass status_class,
                   const AttemptOutcome& outcome,
                   std::optional<absl::Time> now = std::nullopt);

// How the retry that follows a failure is paid for (retry_budget.h):
// kFree when the failure never reached the server (outcome.not_sent);
// kUpFront when it said overload (RESOURCE_EXHAUSTED, a per-attempt timeout,
// or `server_pushback`: the server named a delay); kOnFailure otherwise.
RetryCharge RetryChargeFor(const AttemptOutcome& outcome, bool server_pushback);

// Tells the breaker how an admitted attempt ended, once the call's decision
// is known: it records it under `admission` (when there is one) as
// AttemptResultFor(status_class, outcome), except a CLOSED-state failure
// that the call retries (`retrying`), which is left unrecorded (see the top
// of this file) and returns true: the caller keeps the admission for
// RecordDeferredFailure. Nothing else is ever deferred, so an attempt that
// was no evidence never becomes a failure later. Call without holding locks
// of your own: a breaker transition calls its listeners on this thread.
// `now` as for SettleAttempt.
bool RecordAttemptEnd(const DestinationGates& dest,
                      const std::optional<Admission>& admission,
                      StatusClass status_class, const AttemptOutcome& outcome,
                      bool retrying,
                      std::optional<absl::Time> now = std::nullopt);

// Records a failure that RecordAttemptEnd left unrecorded because its call
// retried, when that retry was then refused with `refused`: for
// budget_exhausted and deadline the failure stands as the call's evidence;
// for anything else (cancel, breaker_open) nothing is recorded.
void RecordDeferredFailure(const DestinationGates& dest,
                           const Admission& admission, GiveUpReason refused);

// The controller's decision `d`, vetoed when the destination cannot take a
// retry now: an open breaker (breaker_open), a throttle without tokens
// (`throttle_allows`, from SettleAttempt), a budget without allowance
// for a retry paid as `charge` (budget_exhausted), or an overload rejection
// while the destination is rejecting a burst of calls (throttled; not when
// the server named a delay, `server_named_delay`: it asked for the retry).
// Spends nothing. Decisions other than kRetry pass unchanged.
Decision GateRetry(Decision d, bool throttle_allows,
                   const DestinationGates& dest,
                   RetryCharge charge = RetryCharge::kUpFront,
                   bool server_named_delay = false);

// What BeforeAttempt answers.
struct AttemptStart {
  // kNone: send the attempt; otherwise the call ends for this reason
  // (kCancelled, kDeadline, kThrottled, kBreakerOpen, kBudgetExhausted).
  GiveUpReason refused = GiveUpReason::kNone;
  // The breaker's admission of the attempt. On kNone it must be recorded
  // when the attempt ends (RecordAttemptEnd) or given back (kIgnored) if it
  // is not sent after all. On kBreakerOpen it holds the refusal (for
  // CircuitBreaker::RefusalMessage).
  std::optional<Admission> admission;
  // For a retry sent: how the budget granted it, to pass to
  // SettleAttempt. None for a first attempt or without a budget.
  std::optional<RetryCharge> charge;
};

// Decides whether attempt `number` (1 = the first) may be sent now:
// `cancelled` by the caller, `remaining` of the call's deadline. Asks the
// adaptive throttle (before the breaker: a refused attempt takes no
// admission), admits it to the breaker, then, for a retry, asks the budget for
// a grant paid as `charge` (giving the admission back when the budget refuses);
// a first attempt that goes out earns budget instead. A grant taken for an
// attempt that is then not sent must be ended: SettleAttempt with a kIgnored
// outcome, or RetryBudget::RecordRetryEnd(charge, false). Call without
// holding locks of your own. `now`: a reading of the gates' clock the
// caller has already taken (else they read it).
AttemptStart BeforeAttempt(int number, bool cancelled, absl::Duration remaining,
                           const DestinationGates& dest,
                           RetryCharge charge = RetryCharge::kUpFront,
                           std::optional<absl::Time> now = std::nullopt);

}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ENGINE_RETRY_GATE_H_
