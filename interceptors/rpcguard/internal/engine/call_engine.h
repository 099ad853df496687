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
// States (every transition on the call's serializer):
//
//   idle ──Start()──> sending ──Send returned──> in flight ──attempt ends──┐
//    ^                  ^                                                   │
//    │                  └──────── policy: send now ─────────────────────────┤
//    │ timer fires (backoff, hedge delay): policy says send                 │
//   waiting <───────────────────── policy: wake me at T ────────────────────┤
//   refreshing <─────────────────── policy: refresh (UNAUTHENTICATED) ──────┤
//   done <───────────────── policy: done; refused by the gate; cancel ──────┘
//
// Several attempts may be in flight at once (hedging); a retried call never
// has more than one. "done" is final: the outcome is then a FinalOutcome,
// immutable, shared with every batch fill. An attempt that ends after the
// call was decided is settled with the destination and released
// (CallIo::Release); a timer that fires after the end does nothing.
//
// One event at a time. Every event (the start, an attempt's end, a timer,
// the refresher's answer, the parent's end, a stream's commit, a batch
// that waits for the outcome) runs on the call's Serializer
// (serializer.h): one at a time, in arrival order, with no lock held, and
// calls into gRPC made by the running thread after the state has changed.
// Whatever gRPC calls back with from inside such a call (an attempt that
// ends inside Send, a cancel that completes inline) waits behind the event
// that made it. So nothing is decided while an attempt is being started:
// the call concludes, and the application may have the result (and destroy
// its channel), only once every attempt's context holds the channel. The
// thread that runs holds the glue (CallIo::Hold) until the queue is empty:
// the application may destroy its call as soon as its last batch proceeds.
//
// A caller's cancel is a flag, not a state. Cancel() arrives under gRPC's
// lock of the application's context, so it only sets an atomic flag, which
// every event reads first (no attempt is sent after it), and defers the
// rest to a zero-delay timer: cancel every attempt in flight, whose
// CANCELLED endings then end the call, or end the call at once when nothing
// is in flight. The end of a parent call is the same flag (OnParentEnded).

#ifndef RPCGUARD_INTERNAL_CALL_ENGINE_H_
#define RPCGUARD_INTERNAL_CALL_ENGINE_H_

#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/commit_reason.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/internal/engine/attempt_policy.h"
#include "rpcguard/internal/engine/engine_env.h"
#include "rpcguard/internal/engine/outcome.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/internal/engine/serializer.h"
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
  // The glue's handle to cancel the attempt by (its ClientContext). For
  // the application's own call, null unless it still runs beside rpcguard's
  // copies (a hedged call riding); null once the final attempt's answer is
  // taken.
  std::shared_ptr<void> context;
};

// How an attempt ended, read once by the glue (HijackedCall::ReadEnd) from
// its status, trailers and channel, for every kind of call.
struct AttemptReport {
  grpc::Status status;
  Pushback pushback;
  // gRPC's client library made the failure (IsLocalError); the attempt
  // never reached the server (no transport took it: ReadAttemptEnd); its
  // retry may wait for the connection (no explicit fail-fast).
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

// The seam between the engine and gRPC. Every method is called from an
// event running on the call's serializer (none while another runs).
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
  // Copies the final attempt's answer (response, metadata, what the
  // application's context says) into `out`, before anyone can read it.
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
  // Serves `batches`, which came after the call was decided, with
  // `outcome`.
  virtual void ServeDecided(const FinalOutcome& outcome,
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

  // Every event below runs on the call's serializer (Run): now, on this
  // thread, or queued behind the event that runs. None may be called once
  // the glue (CallIo::Hold) is gone.

  // Sends attempt 1 (or ends the call when the gate refuses it).
  void Start();
  // Attempt 1 is the application's own call, already admitted by the
  // breaker and started at `sent` (on the injected clock); returns it, for
  // OnAttemptDone. `app_call`: null once the call has ended (a retry rides
  // in after it failed); a handle for CallIo::Cancel while it still runs (a
  // hedged call riding its first copy, entered when the hedge is due: the
  // glue then fires OnTimer(kNext)).
  std::shared_ptr<EngineAttempt> RideFirstAttempt(
      std::optional<Admission> admission, absl::Time sent,
      std::shared_ptr<void> app_call = nullptr);
  // Ends the call before any attempt.
  void FailBeforeStart(grpc::Status status, GiveUpReason reason);

  // `attempt` ended as `report` says. `hold` (may be null): a batch of the
  // application's call that waits for the outcome: parked if the call goes
  // on, served when it is decided (Conclude, ServeDecided).
  void OnAttemptDone(EngineAttempt* attempt, AttemptReport report,
                     Batches::value_type hold);
  // A timer of kind `kind` fired.
  void OnTimer(TimerKind kind);
  // The refresher answered.
  void OnRefreshed(absl::StatusOr<RefreshedCredentials> result);
  // The caller cancelled: from any thread, any number of times, under
  // gRPC's lock of the application's context (it runs no event itself).
  void Cancel();
  // The parent call ended with `code` (the parent watch).
  void OnParentEnded(grpc::StatusCode code);
  // A stream committed to the attempt in flight, for `reason`: its end is
  // the call's (EndFacts::committed), and the terminal trace line says
  // why. The first commit counts; none after the call is decided. From an
  // event of this call (a stream's, on serializer()): the commit is made
  // before any event queued behind, an attempt's end among them.
  void CommitInEvent(CommitReason reason);
  // The same, from outside the call's events: runs as one.
  void Commit(CommitReason reason);
  // The call's serializer, on which a stream's own events run beside the
  // engine's.
  Serializer& serializer() { return serializer_; }
  // The commit, if the call has committed: the one fact, which a stream
  // reads back (TransportOwner::commit) and the policy and the terminal
  // line read too. From an event of this call, or once the call is over.
  std::optional<CommitReason> commit() const { return commit_; }

  // The call's deadline on the injected clock: the caller's, shortened by
  // a methodConfig timeout.
  absl::Time deadline() const { return deadline_; }

  // A batch that waits for the outcome: parked until the call is decided,
  // or served at once (CallIo::ServeDecided) if it is.
  void Park(Batches::value_type batch);

  // For tests, between events: attempts started, whether the call is
  // decided, its state.
  int attempts() const {
    return attempts_seen_.load(std::memory_order_acquire);
  }
  bool done() const { return decided_.load(std::memory_order_acquire); }
  EngineState state() const { return state_.load(std::memory_order_acquire); }

 private:
  // What starts an attempt: the call's start, a timer, or the policy after
  // an attempt's end.
  enum class SendKind { kFirst, kNext };

  // The call just decided, for Conclude.
  struct Ending {
    const FinalOutcome* outcome = nullptr;
    Batches batches;
  };
  // What to do once an event has changed the state: the calls into gRPC
  // and user code, made last.
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

  // Runs `event` on the serializer, holding the glue while it drains.
  template <typename F>
  void Run(F&& event);
  // The caller's cancel, if it came (Cancel), becomes the call's flag:
  // every event looks first. Returns whether the call is cancelled.
  bool TakeCancel();

  // The events' handlers (on the serializer).
  void HandleAttemptEnd(EngineAttempt* raw, const AttemptReport& report,
                        Batches::value_type hold);
  void HandleTimer(TimerKind kind);
  void HandleParentEnded(grpc::StatusCode code);
  // Asks the gate, then sends the next attempt.
  void SendAttempt(SendKind kind, std::optional<RetryCharge> replaces);
  // Carries out `a`.
  void Act(Actions& a);
  // Arms a timer of `kind` for `when`, remembered to cancel at the end.
  void Arm(absl::Time when, TimerKind kind);
  // The deadline timer, armed with the first kNext timer: a call that ends
  // before any wait pays for none.
  void ArmDeadline();
  void OnDeadline();
  void DoCancel();
  // Serves `batch` now if the call is decided, else parks it.
  void ParkOrServe(Batches::value_type batch);
  // The attempt was refused by the gate for `refused` (`first`: attempt 1;
  // `replaces`: a copy that replaces a failure): the policy's say, and the
  // call's end if it ends.
  void Refused(GiveUpReason refused, const AttemptStart& start, bool first,
               bool replaces, Actions& a);
  // The refresh ended: with credentials (send), an error, the deadline
  // (`timed_out`) or a cancel.
  void EndRefresh(const absl::StatusOr<RefreshedCredentials>& result,
                  bool timed_out);
  // Writes the `event=hedge` line of copy `number`, just sent.
  void TraceHedgeSent(int number);
  // Records the outcome (done); the terminal trace event describes `last`
  // (kAttempt) or the attempt not sent (kFailFast). Cancels whatever is in
  // flight but `keep`, and the timers. `now`: this event's clock reading,
  // when it has taken one (else Finish reads the clock).
  void Finish(const grpc::Status& status, GiveUpReason reason,
              EngineAttempt* last, TraceEvent::Kind kind,
              StatusClass status_class, Actions& a,
              const EngineAttempt* keep = nullptr,
              std::optional<absl::Time> now = std::nullopt);
  // The terminal trace event, the give-up hook, then the batches.
  void Conclude(const Ending& ending);
  // Assigns state_ from the facts just changed by `event` (on `attempt`,
  // 0 for none), and traces the change (RPCGUARD_TRACE=engine).
  void Note(absl::string_view event, int attempt);
  // Counts the call's end, decided by Finish with `terminal` (the attempt
  // that decided it, if any, with it), `attempts` sent.
  void RecordEnd(const TraceEvent& terminal, int attempts) const;
  // Writes a trace line for `event` (time, call id, strings filled here;
  // the message from `status`, if given).
  void Trace(TraceEvent& event, const grpc::Status* status) const;
  absl::Time Now() const { return env_.clock->MonotonicNow(); }
  // Builds the call's policy: from the constructor only.
  AttemptPolicy* ChoosePolicy(bool may_repeat, bool hedging,
                              std::optional<GiveUpReason> sent_once);

  CallIo* const io_;
  const EngineEnv env_;
  const MethodPolicy& policy_;
  const std::optional<TraceVerbosity> verbosity_;  // the call's own, if any
  const uint64_t call_id_;

  // Everything below but the atomics is read and written only by events
  // running on serializer_: one at a time, so without a lock.
  Serializer serializer_;
  // Set by Cancel() from any thread; taken into cancelled_ by the next
  // event (TakeCancel).
  std::atomic<bool> cancel_requested_{false};
  // Mirrors for readers outside the serializer: done_ (Cancel's early out,
  // tests), attempts started and the state (tests).
  std::atomic<bool> decided_{false};
  std::atomic<int> attempts_seen_{0};
  std::atomic<EngineState> state_{EngineState::kIdle};

  RetryController controller_;
  // The call's deadline (the controller's, fixed once it is built).
  const absl::Time deadline_;
  // The policy: one of the three below, chosen at construction.
  std::optional<RetryAttemptPolicy> retry_;
  std::optional<HedgeAttemptPolicy> hedge_;
  std::optional<SentOnceAttemptPolicy> once_;
  AttemptPolicy* const policy_impl_;

  bool done_ = false;
  bool cancelled_ = false;
  // The caller cancelled (not the parent's end): gRPC has cancelled the
  // application's own call already, and rpcguard does not again.
  bool caller_cancelled_ = false;
  bool refreshing_ = false;
  // CallIo::Send is running (the state "sending").
  bool sending_ = false;
  // The commit, one fact: StreamFlow decides it (TransportOwner::Commit)
  // and reads it back (TransportOwner::commit), the policy reads it
  // (EndFacts::committed), the terminal line and the stats carry it.
  std::optional<CommitReason> commit_;
  // What a cancel ends the call with: the caller's, or its parent's end.
  grpc::Status cancel_status_;
  GiveUpReason cancel_reason_ = GiveUpReason::kCancelled;
  // Attempts in flight, oldest first.
  absl::InlinedVector<std::shared_ptr<EngineAttempt>, 2> attempts_;
  // The glue, while attempts are in flight.
  std::shared_ptr<void> in_flight_;
  // The last failure the call went on from: it stands if nothing better
  // comes (the next attempt refused, the refresh failed).
  grpc::Status last_status_;
  std::shared_ptr<EngineAttempt> last_attempt_;
  // For the next attempt, from the policy's last step: how the budget pays
  // for it, whether it waits for the connection, and the admission of the
  // failure it retries, left unrecorded (retry_gate.h) unless the retry is
  // refused for budget or deadline.
  RetryCharge next_charge_ = RetryCharge::kUpFront;
  bool next_waits_ = false;
  std::optional<Admission> deferred_failure_;
  std::optional<RefreshedCredentials> refreshed_;
  absl::Time first_sent_ = absl::InfinitePast();
  absl::InlinedVector<TimerHandle, 2> timers_;
  bool deadline_armed_ = false;
  std::optional<TimerHandle> refresh_timer_;
  Batches parked_;
  // Written once, by Finish, and immutable from then on; outcome_ points
  // to it once it is.
  FinalOutcome final_;
  const FinalOutcome* outcome_ = nullptr;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_CALL_ENGINE_H_
