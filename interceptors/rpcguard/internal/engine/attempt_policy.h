// Copyright rpcguard authors.
//
// AttemptPolicy: what differs between retrying and hedging, as a small pure
// policy the one engine (call_engine.h) asks at each event. For an
// attempt's end, a timer or a refusal it answers a PolicyStep: send another
// attempt now, wake me at T, refresh the credentials, or done (with the
// reason). Everything else (the attempt list, the gate, evidence, traces,
// the finish, the cancel) is the engine's, the same for both.
//
//   RetryAttemptPolicy  RetryController's decisions, vetoed by the
//                       destination (GateRetry): one attempt at a time, a
//                       backoff between them
//   HedgeAttemptPolicy  HedgeController's: copies side by side, the next
//                       after the hedging delay or at once after a non-fatal
//                       failure
//   SentOnceAttemptPolicy  one attempt, the application's own call (a call
//                       sent once): its end is the call's, with the reason a
//                       hijacked call would give
//
// The engine never asks which policy it runs: what differs (which budget
// pays, what the terminal line names, the stats of a hedged call) is asked
// of the policy. All are thread-compatible: the engine calls them under its
// lock (TermsFor, pure, also outside it). Neither
// touches gRPC call objects; time comes from the injected clock.

#ifndef RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_
#define RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_

#include <optional>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {

// An attempt's end, as the engine hands it to the policy.
struct EndFacts {
  int number = 0;  // the attempt's
  AttemptEnd end;
  // When it ended, on the controller's clock: the event's one reading.
  absl::Time ended_at;
  // As the classifier saw it (RetryController::OutcomeOf), and its class.
  AttemptOutcome outcome;
  StatusClass status_class = StatusClass::kOk;
  Pushback pushback;
  bool server_pushback = false;  // the server named a delay or said stop
  bool throttle_allows = true;   // SettleAttempt's answer
  bool cancelled = false;        // by the caller
  // A stream committed to this attempt (gRFC A6): its end is the call's,
  // never retried. The engine's one fact (CallEngine::commit()), read here;
  // streams are not hedged.
  bool committed = false;
};

// What the engine does next.
struct PolicyStep {
  // Send another attempt now; `replaces`: it replaces a failed attempt and
  // is paid by the retry budget as this says (a hedge: by the hedge budget).
  bool send = false;
  std::optional<RetryCharge> replaces;
  // Ask the policy again (OnTimer) at this time.
  absl::Time timer = absl::InfiniteFuture();
  // Ask the credential refresher, then send one more attempt.
  bool refresh = false;
  // The call is decided, for `reason` (kNone: a success).
  bool done = false;
  GiveUpReason reason = GiveUpReason::kNone;

  // After an attempt's end: the outcome and class the destination hears,
  // and whether this failure is retried (the breaker then leaves it to the
  // retry's result, retry_gate.h); `defer_failure`: record it after all if
  // the next attempt is refused for budget or deadline.
  AttemptOutcome outcome;
  StatusClass status_class = StatusClass::kOk;
  bool retrying = false;
  bool defer_failure = false;
  // For the next attempt: how the retry budget pays, and whether it waits
  // for the connection.
  RetryCharge next_charge = RetryCharge::kUpFront;
  bool next_waits = false;
  // The trace line of the attempt's end when the call goes on.
  TraceDecision decision = TraceDecision::kRetry;
  absl::Duration trace_backoff = absl::ZeroDuration();
  // Whether the parent call needs watching now (nothing in flight carries
  // it while the call waits).
  bool idle = false;
  // After OnRefused, done: the last attempt's failure is the call's answer
  // (a fail-fast in the retriable class); otherwise the refusal's own.
  bool last_failure_stands = false;
};

// What follows attempt 1's send (AttemptPolicy::Start).
struct Started {
  // When to ask the policy again (OnTimer); InfiniteFuture: never.
  absl::Time timer = absl::InfiniteFuture();
  // The engine keeps the caller's deadline itself from now on (copies side
  // by side: no one attempt carries it).
  bool keep_deadline = false;
};

// How the next attempt is paid for and traced (AttemptPolicy::TermsFor).
struct SendTerms {
  // Paid by this budget, not the destination's retry budget, its grant
  // final (nothing to settle at the attempt's end); null: the retry budget.
  RetryBudget* budget = nullptr;
  RetryCharge charge = RetryCharge::kUpFront;
  // Whether the attempt waits for the connection (wait_for_ready).
  bool waits = false;
  // Whether its start is traced (a `hedge` line).
  bool traced = false;
  // A budget that counts the call's first attempt as its base, if any.
  RetryBudget* counts_first = nullptr;
};

// A call's summary as the policy sees it, for stats (a hedged call's).
struct CallSummary {
  int copies = 0;
  bool later_won = false;
  absl::Duration delay;
};

class AttemptPolicy {
 public:
  virtual ~AttemptPolicy() = default;
  // Attempt 1 was sent at `first_sent` (on the injected clock: now, or
  // earlier when it is the application's own call, riding).
  virtual Started Start(absl::Time first_sent) = 0;
  // The terms of an attempt about to be sent: the first, or a later one
  // (`replaces`: as the last step said; `next_charge`, `next_waits`: a
  // retry's, from the step that scheduled it). Pure: reads no state that
  // changes.
  virtual SendTerms TermsFor(bool first, std::optional<RetryCharge> replaces,
                             RetryCharge next_charge, bool next_waits) const;
  // The call is decided, by attempt `decided_by` (0: none), and the engine
  // listed the attempts it cancels in `terminal.cancelled`: what the
  // terminal line says of the policy (by default, not the copies).
  virtual void Annotate(TraceEvent& terminal, int /*decided_by*/) const {
    terminal.cancelled.clear();
  }
  // The call's summary for stats, if the policy keeps one.
  virtual std::optional<CallSummary> Summary(int /*attempts*/, bool /*ok*/,
                                             int /*decided_by*/) const {
    return std::nullopt;
  }
  // The number the next attempt gets.
  virtual int NextNumber() const = 0;
  // An attempt ended (not after the call was decided).
  virtual PolicyStep OnAttemptEnd(const EndFacts& facts,
                                  absl::BitGenRef gen) = 0;
  // A timer the policy asked for fired.
  virtual PolicyStep OnTimer() = 0;
  // An attempt after the first, asked for by the last step (`replaces`:
  // whether it replaced a failure), was refused by the gate for `refused`.
  virtual PolicyStep OnRefused(GiveUpReason refused, bool replaces) = 0;
};

class RetryAttemptPolicy final : public AttemptPolicy {
 public:
  // `controller`, `gates` must outlive the policy.
  RetryAttemptPolicy(RetryController* controller, DestinationGates gates)
      : controller_(controller), gates_(gates) {}

  Started Start(absl::Time /*first_sent*/) override { return Started{}; }
  int NextNumber() const override { return controller_->attempts() + 1; }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;

 private:
  RetryController* const controller_;
  const DestinationGates gates_;
};

// A call sent once (CallMode::kMetadataOnly): the application's own call is
// its only attempt. Its end is read, classified and settled like any
// attempt's; this policy only names why nothing follows: the controller's
// reason where the status says why (fatal, auth, the caller's cancel or
// deadline, a local error, the server's stop, not idempotent), else `why`,
// the plan's reason for sending a repeatable call once (kMaxAttempts when
// the plan gave none).
class SentOnceAttemptPolicy final : public AttemptPolicy {
 public:
  // `controller` must outlive the policy; `may_repeat` as the controller's.
  SentOnceAttemptPolicy(RetryController* controller, bool may_repeat,
                        GiveUpReason why)
      : controller_(controller),
        may_repeat_(may_repeat),
        why_(why == GiveUpReason::kNone ? GiveUpReason::kMaxAttempts : why) {}

  Started Start(absl::Time /*first_sent*/) override { return Started{}; }
  int NextNumber() const override { return controller_->attempts() + 1; }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  // Never asked: a call sent once sets no timer and sends nothing more.
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;

 private:
  RetryController* const controller_;
  const bool may_repeat_;
  const GiveUpReason why_;
};

class HedgeAttemptPolicy final : public AttemptPolicy {
 public:
  // `policy`, `controller` (for the deadline) and `clock` must outlive it.
  // `hedge_budget`: pays for each copy beside those in flight (null: none).
  HedgeAttemptPolicy(const HedgingPolicy& policy, absl::Duration delay,
                     const RetryController* controller, Clock* clock,
                     absl::Duration min_attempt_time,
                     RetryBudget* hedge_budget);

  Started Start(absl::Time first_sent) override;
  int NextNumber() const override { return hedge_.started(); }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;
  // A copy beside those in flight is extra load, paid by the hedge budget;
  // one that replaces a failure is a retry in all but name, paid by the
  // retry budget as `replaces` says. Copies never wait for the connection.
  SendTerms TermsFor(bool first, std::optional<RetryCharge> replaces,
                     RetryCharge next_charge, bool next_waits) const override;
  // The terminal line names the deciding copy and those cancelled.
  void Annotate(TraceEvent& terminal, int decided_by) const override;
  std::optional<CallSummary> Summary(int attempts, bool ok,
                                     int decided_by) const override;

 private:
  const HedgingPolicy& policy_;
  RetryBudget* const hedge_budget_;
  const RetryController* const controller_;
  Clock* const clock_;
  HedgeController hedge_;
  // Why no more copies go, if that ends the call (pushback, refusal).
  GiveUpReason stop_ = GiveUpReason::kMaxAttempts;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_
