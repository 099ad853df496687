// Copyright rpcguard authors.
//
// CallEngine: the one state machine of a call whose outcome rpcguard owns,
// for retries and hedges alike. A retry is a hedge with at most one attempt
// in flight: every call keeps one list of attempts, ends each through one
// path (OnAttemptDone), asks the gate (retry_gate.h) before every send,
// finishes once (cancelling what is still in flight) and has one cancel
// path. What differs between retrying and hedging is an AttemptPolicy
// (attempt_policy.h), which answers each event with "send now", "wake me
// at T", "refresh the credentials" or "done, for this reason".
//
// The engine reaches gRPC only through CallIo, a narrow seam the glue
// (HijackedCall) implements: start an attempt, cancel it, set and cancel a
// timer, ask the refresher, watch the parent call, copy the final attempt's
// answer, serve the application's batches. Its unit tests drive it with
// fake attempts and a fake clock
// (tests/unit/internal/engine/call_engine_test.cc).
//
// States (every transition under mu_):
//
//   idle ──Start()──> sending ──Send returned──> in flight ──attempt ends──┐
//    ^                  ^                                                   │
//    │                  └──────── policy: send now ─────────────────────────┤
//    │ timer fires (backoff, hedge delay): policy says send                 │
//   waiting <───────────────────── policy: wake me at T ────────────────────┤
//   refreshing <─────────────────── policy: refresh (UNAUTHENTICATED) ──────┤
//   done <───────────────── policy: done; refused by the gate; cancel ──────┘
//
// Several attempts may be sending or in flight at once (hedging); a retried
// call never has more than one. "done" is final: the outcome is then a
// FinalOutcome, immutable, shared with every batch fill. An attempt that
// ends after the call was decided is settled with the destination and
// released (CallIo::Release); a timer that fires after the end does
// nothing. A call decided while an attempt is being started concludes when
// that start returns: until the attempt's context holds the application's
// channel, the application must not have the result (it may destroy the
// channel).
//
// A caller's cancel is a flag, not a state: Cancel() records it and defers
// the work to a zero-delay timer (it arrives under gRPC's lock of the
// application's context); the deferred half cancels every attempt in
// flight, whose CANCELLED endings then end the call, or ends the call at
// once when nothing is in flight. The end of a parent call is the same
// flag (OnParentEnded).
//
// Locking: mu_ is never held across a CallIo call that may call back into
// the engine (Send, Cancel, Schedule, CancelTimer, Refresh, WatchParent,
// Conclude) nor across the breaker (a transition calls listeners).
// TakeResult is the exception: it only copies, under mu_, so that the
// outcome is complete before anyone can read it.

#ifndef RPCGUARD_INTERNAL_CALL_ENGINE_H_
#define RPCGUARD_INTERNAL_CALL_ENGINE_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/commit_reason.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/internal/engine/attempt_policy.h"
#include "rpcguard/internal/engine/engine_env.h"
#include "rpcguard/internal/engine/outcome.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/observability/correlation.h"

namespace rpcguard {
namespace internal {

// One attempt of a call. The glue derives its own (with the attempt's
// ClientContext and response) and creates it in CallIo::NewAttempt.
struct EngineAttempt {
  virtual ~EngineAttempt() = default;

  int number = 0;  // 1-based, in the order attempts are sent
  absl::Time deadline = absl::InfiniteFuture();  // on the injected clock
  absl::Time sent = absl::InfinitePast();        // on the injected clock
  // The breaker's admission (none without a breaker), and how the retry
  // budget granted this attempt (none: nothing to settle).
  std::optional<Admission> admission;
  std::optional<RetryCharge> charge;
  // Sent with wait_for_ready: its predecessor never reached the server.
  bool wait_for_connection = false;
  // The application's own call carried it (a riding call's attempt 1).
  bool app_call = false;
  // CallIo::Send has not returned: not yet cancellable; SendAttempt
  // cancels it once sent if the call was decided or cancelled meanwhile.
  bool sending = false;
  // Its end has come back (OnAttemptDone): nothing to cancel.
  bool ended = false;
  // When it did, on the injected clock: a call that ends later (after a
  // backoff, a refresh) reports the attempt's own duration.
  absl::Time ended_at = absl::InfiniteFuture();
  // Cancelled by rpcguard because another attempt decided the call: its
  // end says nothing of the server.
  bool loser = false;
  // The call's terminal event stands for this attempt's end, which comes
  // later (left to end by its own deadline): its end is counted there, not
  // again when it comes.
  bool ended_by_terminal = false;
  // The glue's handle to cancel the attempt by (its ClientContext): copied
  // under the engine's lock, used outside it. Null for the application's
  // own call, and once the final attempt's answer is taken.
  std::shared_ptr<void> context;
};

// How an attempt ended, read once by the glue (HijackedCall::ReadEnd) from
// its status, trailers and channel, for every kind of call.
struct AttemptReport {
  grpc::Status status;
  Pushback pushback;
  // gRPC's client library made the failure (IsLocalError); the attempt
  // never reached the server (IsNotSent, channel not READY); its retry may
  // wait for the connection (no explicit fail-fast).
  bool local_error = false;
  bool not_sent = false;
  bool may_wait = true;
};

// The engine's timers; each fires CallEngine::OnTimer with its kind.
enum class TimerKind {
  kNext,             // backoff or hedge delay: ask the policy
  kDeadline,         // the caller's deadline, with attempts in flight
  kRefreshDeadline,  // the deadline, during a credential refresh
  kCancel,           // the deferred half of Cancel()
};

using TimerHandle = std::pair<absl::Time, uint64_t>;

// The engine's state, one field (CallEngine::state()), as the diagram
// above draws it: before attempt 1 (idle); an attempt being started
// (sending); attempts in flight, none being started (in flight); nothing in
// flight, a backoff, a hedge delay or the next send pending (waiting); the
// credential refresher asked (refreshing); decided (done). Every transition
// is logged when RPCGUARD_TRACE names "engine" (SetEngineTraceForTest).
enum class EngineState {
  kIdle,
  kSending,
  kInFlight,
  kWaiting,
  kRefreshing,
  kDone
};

// "idle", "sending", "in_flight", "waiting", "refreshing", "done".
absl::string_view EngineStateName(EngineState state);

// RPCGUARD_TRACE (a comma-separated list, read once from the environment,
// as gRPC reads GRPC_TRACE) naming "engine" writes every engine's every
// state change to stderr, one line each:
//   rpcguard engine: call=<id> attempt=<n> <from> -> <to> on <event>
// Off, a change costs one load. For tests: `sink` receives the lines
// instead (and turns the trace on); null restores the environment's
// setting.
void SetEngineTraceForTest(std::function<void(absl::string_view)> sink);

// The seam between the engine and gRPC. Every method but TakeResult is
// called without the engine's lock held.
class CallIo {
 public:
  virtual ~CallIo() = default;
  // A new attempt, not yet sent.
  virtual std::shared_ptr<EngineAttempt> NewAttempt() = 0;
  // Keeps the glue alive while attempts are in flight.
  virtual std::shared_ptr<void> Hold() = 0;
  // Starts `attempt` (its number, deadline and admission set) on the
  // channel, with `refreshed` credentials if any; its end comes back
  // through CallEngine::OnAttemptDone. It may end before Send returns.
  virtual void Send(const std::shared_ptr<EngineAttempt>& attempt,
                    const std::optional<RefreshedCredentials>& refreshed) = 0;
  // Cancels the attempt whose EngineAttempt::context this is (its end
  // still comes back).
  virtual void Cancel(const std::shared_ptr<void>& context) = 0;
  // Lets go of an attempt that ended after the call did.
  virtual void Release(std::shared_ptr<EngineAttempt> attempt) = 0;
  // Runs CallEngine::OnTimer(kind) at `when` (the injected clock's
  // monotonic time), never after the caller's deadline for kNext.
  virtual TimerHandle Schedule(absl::Time when, TimerKind kind) = 0;
  virtual void CancelTimer(const TimerHandle& handle) = 0;
  // Whether the deadline timer is kept by the engine (the real clock):
  // otherwise the attempts' own deadlines end the call.
  virtual bool KeepsDeadline() const = 0;
  // Asks the credential refresher; it answers through OnRefreshed.
  virtual void Refresh() = 0;
  // Starts watching the caller's parent call, if any (idempotent); its end
  // comes back through OnParentEnded.
  virtual void WatchParent() = 0;
  // Under the engine's lock: copies the final attempt's answer (response,
  // metadata, what the application's context says) into `out`. Must not
  // call back into the engine.
  virtual void TakeResult(EngineAttempt& last, FinalOutcome* out) = 0;
  // The call's idempotency key, for trace lines.
  virtual const std::string& key() const = 0;
  // The caller's correlation ids, for trace lines; null for none.
  virtual const CorrelationIds* correlation() const { return nullptr; }
  // The call is decided (its terminal line written): report a give-up to
  // the hook, serve `batches` with `outcome` and stop watching the parent.
  // `terminal` is the terminal line as written.
  virtual void Conclude(const FinalOutcome& outcome, const TraceEvent& terminal,
                        const Batches& batches) = 0;
};

class CallEngine {
 public:
  // `deadline`: the caller's, on the factory clock's monotonic time;
  // `may_repeat`: whether the call is safe to send more than once;
  // `hedging`: copies under the method's hedgingPolicy instead of retries.
  // `policy`: the call's (the method's, or the call's own, SetCallPolicy);
  // `verbosity`: the call's own trace verbosity (nullopt: the method's).
  // `sent_once`: the call is sent once, as the application's own call, and
  // this is the plan's reason (kNone: none); its one attempt ends through
  // the same step as every other (SentOnceAttemptPolicy). `io`, `policy`
  // and what `env` points to must outlive the engine.
  CallEngine(CallIo* io, const EngineEnv& env, const MethodPolicy& policy,
             std::optional<TraceVerbosity> verbosity, absl::Time deadline,
             bool may_repeat, bool hedging, uint64_t call_id,
             std::optional<GiveUpReason> sent_once = std::nullopt);

  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;

  // Sends attempt 1 (or ends the call when the gate refuses it).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Attempt 1 is the application's own call, already admitted by the
  // breaker and started at `sent` (on the injected clock); returns it, for
  // OnAttemptDone.
  std::shared_ptr<EngineAttempt> RideFirstAttempt(
      std::optional<Admission> admission, absl::Time sent)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call before any attempt.
  void FailBeforeStart(const grpc::Status& status, GiveUpReason reason)
      ABSL_LOCKS_EXCLUDED(mu_);

  // `attempt` ended as `report` says. `hold` (may be null): a batch of the
  // application's call that waits for the outcome, parked if the call goes
  // on. Returns whether it was parked (false: the call is decided, or was).
  bool OnAttemptDone(EngineAttempt* attempt, const AttemptReport& report,
                     Batches::value_type hold) ABSL_LOCKS_EXCLUDED(mu_);
  // A timer of kind `kind` fired.
  void OnTimer(TimerKind kind) ABSL_LOCKS_EXCLUDED(mu_);
  // The refresher answered.
  void OnRefreshed(absl::StatusOr<RefreshedCredentials> result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The caller cancelled: from any thread, any number of times.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  // The parent call ended with `code` (the parent watch).
  void OnParentEnded(grpc::StatusCode code) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream committed to the attempt in flight, for `reason`: its end is
  // the call's (EndFacts::committed), and the terminal trace line says
  // why. The first commit counts; none after the call is decided.
  void Commit(CommitReason reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the call has committed (Commit).
  bool committed() const ABSL_LOCKS_EXCLUDED(mu_);

  // The call's deadline on the injected clock: the caller's, shortened by
  // a methodConfig timeout.
  absl::Time deadline() const { return deadline_; }

  // A batch that waits for the outcome: returns the outcome if the call is
  // decided (serve it now), else parks it and returns null.
  const FinalOutcome* Park(Batches::value_type batch) ABSL_LOCKS_EXCLUDED(mu_);

  // For tests: attempts started, whether the call is decided, its state.
  int attempts() const ABSL_LOCKS_EXCLUDED(mu_);
  bool done() const ABSL_LOCKS_EXCLUDED(mu_);
  EngineState state() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What starts an attempt: the call's start, a timer, or the policy after
  // an attempt's end.
  enum class SendKind { kFirst, kNext };

  // The call just decided, for Conclude outside mu_.
  struct Ending {
    const FinalOutcome* outcome = nullptr;
    Batches batches;
  };
  // What to do outside mu_ once an event is handled.
  struct Actions {
    std::optional<Ending> ending;
    // Attempts to cancel (their contexts), timers to cancel.
    absl::InlinedVector<std::shared_ptr<void>, 2> cancel;
    absl::InlinedVector<TimerHandle, 2> cancel_timers;
    // The policy's step: send, wake at `timer`, refresh.
    bool send = false;
    std::optional<RetryCharge> replaces;
    absl::Time timer = absl::InfiniteFuture();
    bool arm_deadline = false;
    bool refresh = false;
    absl::Time refresh_deadline = absl::InfiniteFuture();
    bool watch_parent = false;
    // The call's summary, when its policy keeps one (a hedged call's).
    std::optional<CallSummary> summary;
  };

  // Asks the gate, then sends the next attempt.
  void SendAttempt(SendKind kind, std::optional<RetryCharge> replaces)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Carries out `a`.
  void Act(Actions& a) ABSL_LOCKS_EXCLUDED(mu_);
  // Arms a timer of `kind` for `when`, remembered to cancel at the end.
  void Arm(absl::Time when, TimerKind kind) ABSL_LOCKS_EXCLUDED(mu_);
  // The deadline timer, armed with the first kNext timer: a call that ends
  // before any wait pays for none.
  void ArmDeadline() ABSL_LOCKS_EXCLUDED(mu_);
  void OnDeadline() ABSL_LOCKS_EXCLUDED(mu_);
  void DoCancel() ABSL_LOCKS_EXCLUDED(mu_);
  // The attempt was refused by the gate for `refused` (`first`: attempt 1;
  // `replaces`: a copy that replaces a failure): the policy's say, and the
  // call's end if it ends.
  void RefusedLocked(GiveUpReason refused, const AttemptStart& start,
                     bool first, bool replaces, Actions& a)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refresh ended: with credentials (send), an error, the deadline
  // (`timed_out`) or a cancel.
  void EndRefresh(absl::StatusOr<RefreshedCredentials> result, bool timed_out)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the `event=hedge` line of copy `number`, just sent.
  void TraceHedgeSent(int number) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the outcome (done); the terminal trace event describes `last`
  // (kAttempt) or the attempt not sent (kFailFast). Cancels whatever is in
  // flight but `keep`, and the timers.
  void FinishLocked(const grpc::Status& status, GiveUpReason reason,
                    EngineAttempt* last, TraceEvent::Kind kind,
                    StatusClass status_class, Actions& a,
                    const EngineAttempt* keep = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The terminal trace event, the give-up hook, then the batches.
  void Conclude(const Ending& ending) ABSL_LOCKS_EXCLUDED(mu_);
  // Assigns state_ from the facts just changed by `event` (on `attempt`,
  // 0 for none), and traces the change (RPCGUARD_TRACE=engine).
  void NoteLocked(absl::string_view event, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a trace line for `event` (time, call id, strings filled here;
  // the message from `status`, if given).
  void Trace(TraceEvent& event, const grpc::Status* status) const;
  absl::Time Now() const { return env_.clock->MonotonicNow(); }
  // Builds the call's policy: from the constructor only, before the engine
  // is shared.
  AttemptPolicy* ChoosePolicy(bool may_repeat, bool hedging,
                              std::optional<GiveUpReason> sent_once)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

  CallIo* const io_;
  const EngineEnv env_;
  const MethodPolicy& policy_;
  const std::optional<TraceVerbosity> verbosity_;  // the call's own, if any
  const uint64_t call_id_;

  mutable internal::Mutex mu_;
  RetryController controller_ ABSL_GUARDED_BY(mu_);
  // The call's deadline (the controller's, fixed once it is built), read
  // without the lock.
  const absl::Time deadline_;
  // The policy: one of the three below, chosen at construction.
  std::optional<RetryAttemptPolicy> retry_ ABSL_GUARDED_BY(mu_);
  std::optional<HedgeAttemptPolicy> hedge_ ABSL_GUARDED_BY(mu_);
  std::optional<SentOnceAttemptPolicy> once_ ABSL_GUARDED_BY(mu_);
  // Fixed at construction; the policy itself is called under mu_ (its
  // TermsFor, pure, also outside).
  AttemptPolicy* const policy_impl_;

  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kIdle;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool refreshing_ ABSL_GUARDED_BY(mu_) = false;
  // The commit, one fact: StreamFlow decides it (Commit), the policy reads
  // it (EndFacts::committed), the terminal line and the stats carry it.
  std::optional<CommitReason> commit_ ABSL_GUARDED_BY(mu_);
  // What a cancel ends the call with: the caller's, or its parent's end.
  grpc::Status cancel_status_ ABSL_GUARDED_BY(mu_);
  GiveUpReason cancel_reason_ ABSL_GUARDED_BY(mu_) = GiveUpReason::kCancelled;
  // Attempts in flight (sent or being sent), oldest first.
  absl::InlinedVector<std::shared_ptr<EngineAttempt>, 2> attempts_
      ABSL_GUARDED_BY(mu_);
  // The glue, while attempts are in flight.
  std::shared_ptr<void> in_flight_ ABSL_GUARDED_BY(mu_);
  // Attempts being started (CallIo::Send not returned), and the call's end
  // while there are any.
  int sending_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<Ending> deferred_ending_ ABSL_GUARDED_BY(mu_);
  // The last failure the call went on from: it stands if nothing better
  // comes (the next attempt refused, the refresh failed).
  grpc::Status last_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<EngineAttempt> last_attempt_ ABSL_GUARDED_BY(mu_);
  // For the next attempt, from the policy's last step: how the budget pays
  // for it, whether it waits for the connection, and the admission of the
  // failure it retries, left unrecorded (retry_gate.h) unless the retry is
  // refused for budget or deadline.
  RetryCharge next_charge_ ABSL_GUARDED_BY(mu_) = RetryCharge::kUpFront;
  bool next_waits_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Admission> deferred_failure_ ABSL_GUARDED_BY(mu_);
  std::optional<RefreshedCredentials> refreshed_ ABSL_GUARDED_BY(mu_);
  absl::Time first_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::InlinedVector<TimerHandle, 2> timers_ ABSL_GUARDED_BY(mu_);
  bool deadline_armed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<TimerHandle> refresh_timer_ ABSL_GUARDED_BY(mu_);
  Batches parked_ ABSL_GUARDED_BY(mu_);
  // Written once, by FinishLocked, and immutable from then on; outcome_
  // points to it once it is.
  FinalOutcome final_;
  const FinalOutcome* outcome_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_CALL_ENGINE_H_
