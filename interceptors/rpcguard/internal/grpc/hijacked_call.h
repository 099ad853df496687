// Copyright rpcguard authors.
//
// HijackedCall: one call whose outcome rpcguard owns, and the state machine
// of its attempts.
//
// gRPC's interceptor API has no "retry" operation: once an attempt has
// failed, the application's call has consumed its one response. So rpcguard
// *hijacks* the call: the application's call never reaches gRPC core, and
// every attempt is an asynchronous callback-API call of its own on the
// channel below rpcguard, with its own ClientContext (Attempt). Batches of
// the application's call that wait for results are *parked* here and
// filled from the final attempt once the call is decided. A riding call
// (CallMode::kRide) is the same machine entered later: its attempt 1 was
// the application's own call, and rpcguard took over when it failed.
//
// Phases (every transition under mu_):
//
//                   Start()                 attempt started
//   kStarting ───────────────> kSending ─────────────────> kAttempting
//       ^                                                    │   │
//       │ alarm fires          retry: GateRetry said kRetry  │   │
//       UNAUTHENTICATED, │                                                    v
//       │ refresher given
//   kBackingOff <─── armed ─── kBackoffPending <─────────────┘   v
//       ^                                                    kRefreshing
//       └──────────── credentials refreshed (kStarting) ─────────┘
//
//   Any phase ──> kDone: decided (success, give-up, refusal, cancel). The
//   outcome is then a FinalOutcome, immutable, shared with every batch fill.
//
// RideFirstAttempt enters at kAttempting. A caller's cancel is a flag, not
// a phase: it stops whatever runs (the attempt, the backoff alarm, the
// refresh), and that completion then ends the call as cancelled. The end of
// a parent call (ClientContext::FromServerContext) is the same flag: core
// ends each attempt with its parent, and from the first backoff on a
// ParentWatch tells the call when the parent is cancelled or its deadline
// passes, which then ends it with CANCELLED or DEADLINE_EXCEEDED.
//
// Every attempt's context carries what the caller set on its own
// (CallerSettings: authority, wait-for-ready, parent call, census), and
// the caller's context is left describing the final attempt
// (auth_context(), debug_error_string()); see grpc_1_51/context.h.
//
// Concurrency and lifetime:
//  - The call is shared (std::shared_ptr) by the interceptor and, while an
//    attempt runs, by itself (in_flight_: the attempt's callback holds a raw
//    pointer, which std::function stores without allocating). Alarm
//    callbacks hold it weakly: an Alarm keeps its callback until the Alarm
//    is destroyed, and the call owns its alarms.
//  - mu_ is never held across a gRPC call that may call back (Proceed,
//    Hijack, TryCancel, starting an attempt, setting or cancelling an alarm)
//    nor across the breaker (a transition calls listeners on this thread).
//  - A caller's cancel (PRE_SEND_CANCEL) arrives while gRPC holds the
//    application context's lock, and TryCancel on an attempt would take
//    locks an ending attempt holds: Cancel only records the cancel and
//    defers the work to a zero-delay alarm.

#ifndef RPCGUARD_INTERNAL_GRPC_HIJACKED_CALL_H_
#define RPCGUARD_INTERNAL_GRPC_HIJACKED_CALL_H_

#include <grpcpp/alarm.h>
#include <grpcpp/client_context.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/interceptor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/internal/base/mutex.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/internal/grpc/final_outcome.h"
#include "rpcguard/internal/grpc/parent_watch.h"
#include "rpcguard/internal/grpc/timer_queue.h"
#include "rpcguard/internal/grpc_1_51/context.h"

namespace rpcguard {
namespace internal {

class HijackedCall : public std::enable_shared_from_this<HijackedCall> {
 public:
  // Everything needed to replay the request, captured from the first batch.
  // Filled in place (setup()) before Start: grpc::ByteBuffer has no move
  // constructor, so moving a Setup would copy the request.
  struct Setup {
    // The channel below rpcguard, and how attempts name the method on it.
    std::unique_ptr<grpc::ChannelInterface> channel;
    const grpc::internal::RpcMethod* rpc_method = nullptr;
    grpc::ByteBuffer request;
    Metadata metadata;  // the caller's, less rpcguard's own keys
    std::string idempotency_key;
    std::shared_ptr<grpc::CallCredentials> credentials;
    // The caller's deadline on gRPC's monotonic clock
    // (CallDeadline::on_grpc): no deadline or alarm handed to gRPC outlives
    // it.
    absl::Time grpc_deadline = absl::InfiniteFuture();
    grpc_compression_algorithm compression = GRPC_COMPRESS_NONE;
    // What else the caller set, for every attempt.
    CallerSettings caller;
    // The application's context, left describing the final attempt; and
    // the core channel, to watch a parent call (null without one).
    grpc::ClientContext* app_context = nullptr;
    grpc_channel* core_channel = nullptr;
  };

  // `deadline` is the caller's, on the factory clock's monotonic time, as
  // read when the call started (CallerDeadline); attempts never outlive it.
  // `may_repeat`: whether the call is safe to send more than once
  // (CallPlan::may_repeat).
  HijackedCall(std::shared_ptr<const FactoryState> factory,
               const MethodState& method, absl::Time deadline, bool may_repeat);

  HijackedCall(const HijackedCall&) = delete;
  HijackedCall& operator=(const HijackedCall&) = delete;

  // What attempts replay; written only before Start, FailBeforeStart or
  // RideFirstAttempt.
  Setup& setup() { return setup_; }

  // Hedges the call (CallPlan::hedge): copies of it run side by side under
  // the method's hedgingPolicy instead of retries (hedged_call.cc). Before
  // Start.
  void EnableHedging() { hedging_ = true; }

  // Starts attempt 1 (or ends the call at once when it cannot start).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);

  // Attempt 1 is the application's own call, already admitted by the
  // breaker (`admission`); `response_object` is the application's response
  // message. rpcguard steps in when its outcome calls for a retry
  // (OnFirstAttemptDone).
  void RideFirstAttempt(std::optional<Admission> admission,
                        void* response_object) ABSL_LOCKS_EXCLUDED(mu_);

  // The application's call, carrying attempt 1 (RideFirstAttempt), received
  // its outcome in `batch` (POST_RECV_STATUS); `channel` is the call's
  // channel. Returns false when the call is decided and `batch`, filled,
  // should proceed; true when rpcguard keeps it for the attempts that
  // follow and proceeds it itself: the caller must not touch the call again.
  bool OnFirstAttemptDone(grpc::experimental::InterceptorBatchMethods* batch,
                          const grpc::ChannelInterface* channel)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the call before any attempt, with `status`.
  void FailBeforeStart(const grpc::Status& status, GiveUpReason reason)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The caller cancelled. Safe from any thread, any number of times.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  // A batch of the application's call that waits for the result: filled
  // now if the call is decided, else when it is.
  void Park(grpc::experimental::InterceptorBatchMethods* batch)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Phase {
    kStarting,        // no attempt runs; the next one is about to start
    kSending,         // an attempt is being started (not yet cancellable)
    kAttempting,      // an attempt is in flight
    kBackoffPending,  // a retry is decided; its alarm is not yet armed
    kBackingOff,      // waiting for the backoff alarm
    kRefreshing,      // waiting for the credential refresher
    kDone,            // decided: outcome_ is set
  };

  // One attempt: its own context and response buffer.
  struct Attempt {
    // Shared so that a deferred cancel can hold it while the attempt ends.
    // Let go before the application's call is finished (FinishLocked): it
    // holds a reference to the application's channel, and a channel
    // destroyed last, on a gRPC callback thread, can take down gRPC's
    // callback thread pool from one of its own threads. Null for a first
    // attempt sent on the application's own call.
    std::shared_ptr<grpc::ClientContext> context;
    grpc::ByteBuffer response;
    absl::Time deadline;
    // The breaker's admission of this attempt (none without a breaker).
    std::optional<Admission> admission;
    // How the budget granted this retry (none for a first attempt).
    std::optional<RetryCharge> charge;
    // Sent with wait_for_ready: its predecessor never reached the server.
    bool wait_for_connection = false;
    // Hedging: the copy's number, when it was sent, and whether rpcguard
    // cancelled it because another copy decided the call.
    int number = 0;
    absl::Time sent;
    bool loser = false;
  };

  // The call just decided, and the parked batches to serve.
  struct Ending {
    const FinalOutcome* outcome = nullptr;  // final_, now immutable
    Batches batches;
    std::shared_ptr<ParentWatch> parent_watch;  // to stop
  };

  // What Decide concluded, and what its caller does next.
  struct Next {
    enum class Kind {
      kNothing,   // the call had already ended
      kConclude,  // the call is decided: Conclude(ending)
      kRetry,     // Continue: a backoff, then the next attempt
      kRefresh,   // Continue: a credential refresh, then the next attempt
    };
    Kind kind = Kind::kNothing;
    Ending ending;
    absl::Time backoff_until;
    absl::Time deadline;  // kRefresh: the call's
    TraceEvent event;     // kRetry, kRefresh: the retry decision's
  };

  // Asks the retry gate whether the next attempt may go, then sends it.
  void StartAttempt() ABSL_LOCKS_EXCLUDED(mu_);
  // The callback of an attempt sent by StartAttempt.
  void OnAttemptDone(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Decides what follows `attempt`, which ended with `status` and
  // `trailers`. `hold` (may be null) is a batch of the application's call
  // that waits for the outcome; when the call goes on it is parked in the
  // same critical section, before anything can end the call.
  Next Decide(const std::shared_ptr<Attempt>& attempt,
              const grpc::Status& status,
              const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
              grpc::experimental::InterceptorBatchMethods* hold)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The rest of Decide once `d` is decided (`charge`: how its retry is
  // paid): the call's next phase, and what its caller does next.
  Next NextLocked(const Decision& d, RetryCharge charge,
                  const std::shared_ptr<Attempt>& attempt,
                  const grpc::Status& status,
                  grpc::experimental::InterceptorBatchMethods* hold)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Carries out a kRetry or kRefresh of Decide, for an attempt that ended
  // with `status`.
  void Continue(Next& next, const grpc::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the refresher for credentials; the call's deadline still holds.
  void BeginRefresh(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The refresh ended: with credentials (retry), an error, the deadline
  // (kDeadlineExceeded with an empty message, from the alarm) or a cancel.
  void EndRefresh(absl::StatusOr<RefreshedCredentials> result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The deferred half of Cancel(): stops whatever is running.
  void DoCancel() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts watching the caller's parent call, if it has one, before the
  // first backoff or refresh: no attempt runs then to end with it.
  void WatchParent() ABSL_LOCKS_EXCLUDED(mu_);
  // The parent call ended (ParentWatch), with `code`: the call ends with it.
  void OnParentEnded(grpc::StatusCode code) ABSL_LOCKS_EXCLUDED(mu_);
  // Fills in the attempt's context from the caller's (Setup), the refreshed
  // credentials and rpcguard's metadata.
  void PrepareContext(grpc::ClientContext& ctx, const Attempt& attempt,
                      int number) ABSL_LOCKS_EXCLUDED(mu_);

  // The call's end when its next attempt was refused for `refused` (not
  // kNone; `start` is the gate's answer).
  Ending RefusedLocked(GiveUpReason refused, const AttemptStart& start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Hedging (hedged_call.cc): the first copy and the hedge timer; one more
  // copy, numbered `number`, admitted by the breaker (`admission`) and
  // granted by the retry budget as `charge` (none: no grant to settle); a
  // copy's end; the hedge timer; arming it for `when`. SendCopy returns
  // whether the copy went out (not when the call was decided meanwhile).
  void StartHedged() ABSL_LOCKS_EXCLUDED(mu_);
  bool SendCopy(int number, std::optional<Admission> admission,
                std::optional<RetryCharge> charge) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the `event=hedge` line of copy `number`, just sent.
  void TraceHedgeSent(int number) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCopyDone(Attempt* copy, grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  void OnHedgeTimer() ABSL_LOCKS_EXCLUDED(mu_);
  void ArmHedgeTimer(absl::Time when) ABSL_LOCKS_EXCLUDED(mu_);
  // The caller's deadline, kept by rpcguard rather than by the copies'
  // endings (see ArmDeadlineTimer): ends the call if copies are still out.
  // Armed once, at the first hedge timer (or at the start without one).
  void ArmDeadlineTimer() ABSL_LOCKS_EXCLUDED(mu_);
  void OnHedgedDeadline() ABSL_LOCKS_EXCLUDED(mu_);
  // The deferred half of Cancel() for a hedged call: cancels every copy.
  void CancelHedged() ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the copy a HedgeController step asked for, if the destination
  // admits it (breaker; the hedge budget, or the retry budget paid as
  // `replaces` for a copy that replaces a failed one); tells the controller
  // otherwise.
  void SendAskedCopy(std::optional<RetryCharge> replaces)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a hedged call with `status` from `copy` (null: none), cancelling
  // the other copies but `keep` (if any, left to end and be counted on its
  // own); outside mu_.
  void EndHedged(const grpc::Status& status, GiveUpReason reason,
                 const std::shared_ptr<Attempt>& copy, StatusClass status_class,
                 const Attempt* keep = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Records the outcome (kDone); `kind` and `status_class` describe the
  // terminal trace event: the attempt that ended the call (kAttempt), or
  // the attempt it did not send (kFailFast).
  Ending FinishLocked(const grpc::Status& status, GiveUpReason reason,
                      Attempt* last,
                      TraceEvent::Kind kind = TraceEvent::Kind::kFailFast,
                      StatusClass status_class = StatusClass::kFatal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call: its terminal trace event, the give-up hook, then the
  // application's batches. Once, after FinishLocked, without mu_.
  void Conclude(const Ending& ending) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<const FactoryState> factory_;
  const MethodState& method_;
  const MethodPolicy& policy_;
  Setup setup_;  // read-only once the call has started
  const uint64_t call_id_;
  // The caller's deadline, before any methodConfig `timeout` shortens it.
  const absl::Time caller_deadline_;
  // The application's response object, for a riding call; set before the
  // call is shared.
  void* response_object_ = nullptr;

  internal::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kStarting;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // What a cancel ends the call with: the caller's, or its parent's end.
  grpc::Status cancel_status_ ABSL_GUARDED_BY(mu_);
  GiveUpReason cancel_reason_ ABSL_GUARDED_BY(mu_) = GiveUpReason::kCancelled;
  RetryController controller_ ABSL_GUARDED_BY(mu_);
  // The attempt of kSending and kAttempting.
  std::shared_ptr<Attempt> attempt_ ABSL_GUARDED_BY(mu_);
  // This object, while an attempt runs: the attempt's callback holds only a
  // raw pointer.
  std::shared_ptr<HijackedCall> in_flight_ ABSL_GUARDED_BY(mu_);
  // The attempt before a backoff or refresh, and its status: the call ends
  // with them if the next attempt is refused for budget or the refresh
  // fails.
  grpc::Status last_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Attempt> last_attempt_ ABSL_GUARDED_BY(mu_);
  // For the next attempt, from the decision to retry: how the budget is to
  // pay for it, whether it waits for the connection, and the admission of
  // the failure it retries, left unrecorded (retry_gate.h) unless the retry
  // is refused for budget or deadline.
  RetryCharge next_charge_ ABSL_GUARDED_BY(mu_) = RetryCharge::kUpFront;
  bool next_waits_for_connection_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Admission> deferred_failure_ ABSL_GUARDED_BY(mu_);
  std::optional<RefreshedCredentials> refreshed_ ABSL_GUARDED_BY(mu_);
  // Hedging: set before Start; then the call's copies and their timers.
  bool hedging_ = false;
  std::optional<HedgeController> hedge_ ABSL_GUARDED_BY(mu_);
  // Inline: a hedged call that does not hedge allocates nothing for these.
  absl::InlinedVector<std::shared_ptr<Attempt>, 3> copies_ ABSL_GUARDED_BY(mu_);
  absl::Time first_copy_sent_ ABSL_GUARDED_BY(mu_);
  // This call's hedge timers on the factory's TimerQueue, to cancel.
  absl::InlinedVector<TimerQueue::Handle, 2> hedge_timers_ ABSL_GUARDED_BY(mu_);
  // Copies admitted by SendCopy and not yet started on the application's
  // channel, and the call's end while there are any (EndHedged): the
  // application may destroy its channel as soon as it has the result, so the
  // last of those copies concludes the call once it holds the channel.
  int copies_sending_ ABSL_GUARDED_BY(mu_) = 0;
  bool deadline_timer_armed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Ending> deferred_ending_ ABSL_GUARDED_BY(mu_);
  // Why no more copies go, if that ends the call (pushback, refusal).
  GiveUpReason hedge_stop_ ABSL_GUARDED_BY(mu_) = GiveUpReason::kMaxAttempts;
  Batches parked_ ABSL_GUARDED_BY(mu_);
  // The outcome: written once, by FinishLocked, and immutable from then on;
  // outcome_ points to it once it is. Readers hold it through Ending or
  // read outcome_ under mu_, so the write happens before any read.
  FinalOutcome final_;
  const FinalOutcome* outcome_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Created under mu_, then set or cancelled without it by the thread that
  // created it (and cancelled by DoCancel only once armed).
  std::unique_ptr<grpc::Alarm> backoff_alarm_;
  std::unique_ptr<grpc::Alarm> cancel_alarm_;
  // Ends a refresh at the deadline; created before the refresher is asked.
  std::unique_ptr<grpc::Alarm> refresh_alarm_;
  // Watches the caller's parent call once a backoff or refresh has begun;
  // stopped when the call is decided.
  bool parent_watched_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<ParentWatch> parent_watch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_HIJACKED_CALL_H_
