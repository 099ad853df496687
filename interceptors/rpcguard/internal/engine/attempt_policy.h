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
// Both are thread-compatible: the engine calls them under its lock. Neither
// touches gRPC call objects; time comes from the injected clock.

#ifndef RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_
#define RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_

#include <optional>

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
  // As the classifier saw it (RetryController::OutcomeOf), and its class.
  AttemptOutcome outcome;
  StatusClass status_class = StatusClass::kOk;
  Pushback pushback;
  bool server_pushback = false;  // the server named a delay or said stop
  bool throttle_allows = true;   // SettleAttempt's answer
  bool cancelled = false;        // by the caller
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
};

class AttemptPolicy {
 public:
  virtual ~AttemptPolicy() = default;
  // Attempt 1 was sent: when to ask again (InfiniteFuture: never).
  virtual absl::Time Start() = 0;
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
  // Whether the call sends copies side by side (hedging).
  virtual bool hedging() const = 0;
  // A stream committed to the attempt in flight (gRFC A6): from now on its
  // end is the call's, never retried. Streams are not hedged: a hedging
  // policy ignores it.
  virtual void Commit() {}
};

class RetryAttemptPolicy final : public AttemptPolicy {
 public:
  // `controller`, `gates` must outlive the policy.
  RetryAttemptPolicy(RetryController* controller, DestinationGates gates)
      : controller_(controller), gates_(gates) {}

  absl::Time Start() override { return absl::InfiniteFuture(); }
  int NextNumber() const override { return controller_->attempts() + 1; }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;
  bool hedging() const override { return false; }
  void Commit() override { committed_ = true; }

 private:
  RetryController* const controller_;
  const DestinationGates gates_;
  bool committed_ = false;
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

  absl::Time Start() override { return absl::InfiniteFuture(); }
  int NextNumber() const override { return controller_->attempts() + 1; }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  // Never asked: a call sent once sets no timer and sends nothing more.
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;
  bool hedging() const override { return false; }

 private:
  RetryController* const controller_;
  const bool may_repeat_;
  const GiveUpReason why_;
};

class HedgeAttemptPolicy final : public AttemptPolicy {
 public:
  // `policy`, `controller` (for the deadline) and `clock` must outlive it.
  HedgeAttemptPolicy(const HedgingPolicy& policy, absl::Duration delay,
                     const RetryController* controller, Clock* clock,
                     absl::Duration min_attempt_time);

  absl::Time Start() override { return hedge_.Start(); }
  int NextNumber() const override { return hedge_.started(); }
  PolicyStep OnAttemptEnd(const EndFacts& facts, absl::BitGenRef gen) override;
  PolicyStep OnTimer() override;
  PolicyStep OnRefused(GiveUpReason refused, bool replaces) override;
  bool hedging() const override { return true; }

  absl::Duration delay() const { return hedge_.delay(); }

 private:
  const HedgingPolicy& policy_;
  const RetryController* const controller_;
  Clock* const clock_;
  HedgeController hedge_;
  // Why no more copies go, if that ends the call (pushback, refusal).
  GiveUpReason stop_ = GiveUpReason::kMaxAttempts;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ATTEMPT_POLICY_H_
