// Copyright rpcguard authors.
//
// HijackedCall: one call whose outcome rpcguard owns, as gRPC sees it. The
// call's state machine is the one attempt engine (call_engine.h), for
// retries and hedges alike; this class is its seam to gRPC (CallIo): it
// starts attempts, sets timers, asks the refresher, watches the parent call
// and fills the application's batches.
//
// gRPC's interceptor API has no "retry" operation: once an attempt has
// failed, the application's call has consumed its one response. So rpcguard
// *hijacks* the call: the application's call never reaches gRPC core, and
// every attempt is an asynchronous callback-API call of its own on the
// channel below rpcguard, with its own ClientContext. Batches of the
// application's call that wait for results are *parked* in the engine and
// filled from the final attempt once the call is decided. A riding call
// (CallMode::kRide) is the same machine entered later: its attempt 1 was
// the application's own call, and rpcguard took over when it failed.
//
// Every attempt's context carries what the caller set on its own
// (CallerSettings: authority, wait-for-ready, parent call, census), and
// the caller's context is left describing the final attempt
// (auth_context(), debug_error_string()); see grpc_1_51_context.h.
//
// How the attempts travel is its transport's (attempt_transport.h): one
// RPC an attempt for a unary call (Unary), a StreamFlow for a stream
// (MakeStream); the call itself never asks which.
//
// Lifetime: the call is shared (std::shared_ptr) by the interceptor and,
// while attempts run, by the engine (CallIo::Hold): an attempt's callback
// holds raw pointers, which std::function stores without allocating.
// Timers hold the call weakly (TimerQueue). Every timer is on the
// factory's TimerQueue: backoffs, hedge delays, the deadline, the refresh
// timeout and the deferred cancel.

#ifndef RPCGUARD_INTERNAL_HIJACKED_CALL_H_
#define RPCGUARD_INTERNAL_HIJACKED_CALL_H_

#include <grpcpp/client_context.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/interceptor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "rpcguard/internal/engine/call_engine.h"
#include "rpcguard/internal/grpc/attempt_transport.h"
#include "rpcguard/internal/grpc/channel_below.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/internal/grpc/final_outcome.h"
#include "rpcguard/internal/grpc/parent_watch.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc/stream_flow.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/observability/correlation.h"

namespace rpcguard {
namespace internal {

// Whether this thread is inside rpcguard's own TryCancel of an
// application's call (a riding hedged call's first copy, cancelled because
// another copy won): the interceptor's PRE_SEND_CANCEL is then not the
// caller's.
bool CancellingOwnCall();

// How an attempt ended, from its status, its trailers, whether a transport
// ever took it (ReachedTransport; nullopt: not known) and the channel it ran
// on (null: not known): one reading for every attempt, hijacked or the
// application's own (sent once, or attempt 1 of a ride). What was observed
// comes before gRPC's words: an attempt a transport took reached a server,
// whatever its message says; one no transport took reached none. Only where
// that is not known do the words decide, guarded by the channel's state.
// `may_wait`: its retry may wait for a connection (no explicit fail-fast).
AttemptReport ReadAttemptEnd(
    grpc::Status status,
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
    std::optional<bool> reached_transport, grpc::ChannelInterface* channel,
    bool may_wait);

class HijackedCall final : public CallIo,
                           public EngineRecorder,
                           public TransportOwner,
                           public std::enable_shared_from_this<HijackedCall> {
 public:
  // Everything needed to replay the request, captured from the first batch.
  // Filled in place (setup()) before Start: grpc::ByteBuffer has no move
  // constructor, so moving a Setup would copy the request.
  struct Setup {
    // The channel below rpcguard (ChannelBelow: shared with the factory's
    // other calls), and how attempts name the method on it.
    ChannelBelowRef channel;
    const grpc::internal::RpcMethod* rpc_method = nullptr;
    grpc::ByteBuffer request;
    Metadata metadata;  // the caller's, less rpcguard's own keys
    std::string idempotency_key;
    CorrelationIds correlation;  // the caller's, for trace lines
    std::shared_ptr<grpc::CallCredentials> credentials;
    // The caller's deadline on gRPC's monotonic clock
    // (CallDeadline::on_grpc): no deadline or timer handed to gRPC outlives
    // it.
    absl::Time grpc_deadline = absl::InfiniteFuture();
    grpc_compression_algorithm compression = GRPC_COMPRESS_NONE;
    // What else the caller set, for every attempt.
    CallerSettings caller;
    // The application's context, left describing the final attempt; and
    // the core channel, to watch a parent call (null without one).
    grpc::ClientContext* app_context = nullptr;
    grpc_channel* core_channel = nullptr;
    // The channel the application called (ClientRpcInfo's), whose target
    // tells an attempt a transport took from one none did.
    grpc::ChannelInterface* app_channel = nullptr;
    // The call's own MethodState, when it is a copy of a shared entry
    // (MethodState::ForCall), kept as long as the call; else null.
    std::shared_ptr<const MethodState> method_owner;
    // The server call this call was made for (server.h): its give-up marks
    // it. Unlinked without one.
    ServerCallLink server_link;
  };

  // `deadline` is the caller's, on the factory clock's monotonic time, as
  // read when the call started (CallerDeadline); attempts never outlive it.
  // `may_repeat`: whether the call is safe to send more than once
  // (CallPlan::may_repeat); `hedging`: copies under the method's
  // hedgingPolicy instead of retries (CallPlan::hedge); `call_override`:
  // the call's own policy (SetCallPolicy), which the call keeps, or none;
  // `sent_once`: the call is sent once as the application's own call, for
  // the plan's reason (CallEngine), and this object only ends it.
  HijackedCall(std::shared_ptr<const FactoryState> factory,
               const MethodState& method, absl::Time deadline, bool may_repeat,
               bool hedging = false,
               std::optional<CallOverride> call_override = std::nullopt,
               std::optional<GiveUpReason> sent_once = std::nullopt);

  HijackedCall(const HijackedCall&) = delete;
  HijackedCall& operator=(const HijackedCall&) = delete;

  // What attempts replay; written only before Start, FailBeforeStart or
  // RideFirstAttempt.
  Setup& setup() { return setup_; }

  // Starts attempt 1 (or ends the call at once when it cannot start).
  void Start() { engine_.Start(); }

  // Makes this a streaming call (stream_flow.h), of gRPC type `type`, whose
  // requests are kept for replay within the factory's limits (the call's
  // and the channel's); then `first_batch` gives the first requests. Before
  // Start or FailBeforeStart; Setup::request and rpc_method are not used.
  void MakeStream(grpc::internal::RpcMethod::RpcType type,
                  grpc::experimental::InterceptorBatchMethods* first_batch);

  // A streaming call's later batch (StreamFlow::Serve).
  void Serve(grpc::experimental::InterceptorBatchMethods* batch) {
    stream_->Serve(batch);
  }

  // A streaming call's requests held for replay now, in bytes.
  size_t buffered_bytes() const {
    return stream_ == nullptr ? 0 : stream_->buffered_bytes();
  }

  // Attempt 1 is the application's own call, already admitted by the
  // breaker (`admission`); `response_object` is the application's response
  // message (null for a stream); `sent` when it started. Its end goes
  // through the engine (OnFirstAttemptDone), which may retry it unless the
  // call is sent once. `running`: the call has not ended (a hedged call
  // riding its first copy, entered when its hedge is due, then HedgeDue):
  // if a later copy wins, rpcguard cancels it (TryCancel on the
  // application's context, which CancellingOwnCall marks) and fills its
  // status batch from the winner. Setup::channel and rpc_method must then
  // be set.
  void RideFirstAttempt(std::optional<Admission> admission,
                        void* response_object, absl::Time sent,
                        bool running = false);

  // A riding hedged call's hedge delay has passed (after RideFirstAttempt
  // with `running`): the engine sends the next copy, unless the call is
  // decided or cancelled.
  void HedgeDue() { engine_.OnTimer(TimerKind::kNext); }

  // The application's call, carrying attempt 1 (RideFirstAttempt), received
  // its outcome in `batch` (POST_RECV_STATUS); `channel` is the call's
  // channel. rpcguard keeps `batch`, and fills and proceeds it when the
  // call is decided (perhaps before this returns, perhaps on another
  // thread): the caller must not touch the call again.
  void OnFirstAttemptDone(grpc::experimental::InterceptorBatchMethods* batch,
                          const grpc::ChannelInterface* channel);

  // Ends the call before any attempt, with `status`.
  void FailBeforeStart(const grpc::Status& status, GiveUpReason reason) {
    engine_.FailBeforeStart(status, reason);
  }

  // The caller cancelled. Safe from any thread, any number of times.
  void Cancel() { engine_.Cancel(); }

  // A batch of the application's call that waits for the result: filled
  // now if the call is decided, else when it is.
  void Park(grpc::experimental::InterceptorBatchMethods* batch);

  // CallIo: the engine's seam.
  std::shared_ptr<EngineAttempt> NewAttempt() override;
  std::shared_ptr<void> Hold() override { return shared_from_this(); }
  void Send(const std::shared_ptr<EngineAttempt>& attempt,
            const std::optional<RefreshedCredentials>& refreshed) override;
  void Cancel(const std::shared_ptr<void>& context) override;
  void Release(std::shared_ptr<EngineAttempt> attempt) override;
  TimerHandle Schedule(absl::Time when, TimerKind kind) override;
  void CancelTimer(const TimerHandle& handle) override;
  bool KeepsDeadline() const override;
  void Refresh() override;
  void WatchParent() override;
  void TakeResult(EngineAttempt& last, FinalOutcome* out) override;
  const std::string& key() const override { return setup_.idempotency_key; }
  const CorrelationIds* correlation() const override {
    return &setup_.correlation;
  }
  void Conclude(const FinalOutcome& outcome, const TraceEvent& terminal,
                const Batches& batches) override;
  void ServeDecided(const FinalOutcome& outcome,
                    const Batches& batches) override;
  // A riding call's description of its final attempt (description_),
  // written into the application's context before `batches` are served.
  void DescribeToApplication(const Batches& batches);

  // TransportOwner: the attempts' ends, and a stream's commit.
  void OnAttemptEnded(EngineAttempt* attempt, grpc::Status status) override;
  void Commit(CommitReason reason) override { engine_.CommitInEvent(reason); }
  std::optional<CommitReason> commit() const override {
    return engine_.commit();
  }

 private:
  // A unary call's transport: one RPC an attempt, through gRPC's callback
  // API, into a response buffer of the attempt's own; the final attempt's
  // is handed over (TakeResponse).
  class Unary final : public AttemptTransport {
   public:
    explicit Unary(HijackedCall* call) : call_(call) {}
    std::shared_ptr<EngineAttempt> NewAttempt() override;
    bool RunsToCallDeadline() const override { return false; }
    void Send(const std::shared_ptr<EngineAttempt>& attempt,
              grpc::ChannelInterface* channel) override;
    void Cancel(const std::shared_ptr<void>& context) override;
    void TakeResponse(EngineAttempt& last, FinalOutcome* out) override;
    // The application's batches wait in the engine (served by the call).
    void Conclude(const FinalOutcome& outcome) override {}

   private:
    // An attempt as gRPC runs it: the engine's, with its response buffer
    // (EngineAttempt::context is its grpc::ClientContext).
    struct GrpcAttempt : EngineAttempt {
      grpc::ByteBuffer response;
    };
    HijackedCall* const call_;
  };

  // How an attempt ended, from its status, trailers, its context (its
  // peer) and the channel: one reading for every attempt, hijacked or the
  // application's own.
  AttemptReport ReadEnd(
      grpc::Status status,
      const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
      const grpc::ClientContext& context) const;
  // Fills in the attempt's context from the caller's (Setup), the refreshed
  // credentials and rpcguard's metadata; `deadline` is the attempt's, on
  // the injected clock.
  void PrepareContext(grpc::ClientContext& ctx, const EngineAttempt& attempt,
                      absl::Time deadline,
                      const std::optional<RefreshedCredentials>& refreshed);
  void OnParentEnded(grpc::StatusCode code) { engine_.OnParentEnded(code); }

  // EngineRecorder: the factory's stats and trace sink, for this method.
  void Trace(TraceEvent& event, absl::FunctionRef<void(TraceEvent&)> fill,
             std::optional<TraceVerbosity> verbosity) const override;
  void AttemptStarted() const override;
  void AttemptEnded(grpc::StatusCode code,
                    absl::Duration duration) const override;
  void Retried(absl::Duration delay) const override;
  void CallEnded(const Stats::CallEnd& end) const override;
  void HedgedCall(int copies, bool later_won, int cancelled,
                  absl::Duration delay) const override;

  const std::shared_ptr<const FactoryState> factory_;
  const MethodState& method_;
  // Before policy_ and engine_, which refer to it.
  const std::optional<CallOverride> call_override_;
  const MethodPolicy& policy_;
  Setup setup_;  // read-only once the call has started
  // The application's response object, for a riding call; set before the
  // call is shared.
  void* response_object_ = nullptr;
  // A riding call's attempt 1, from RideFirstAttempt to its end.
  std::shared_ptr<EngineAttempt> ride_;
  // A riding call's: what the application's context is to say of the final
  // attempt, written into it when its status batch is served (TakeResult,
  // Conclude, ServeDecided: engine events, one at a time). On the heap: only
  // a riding call that failed or hedged has one.
  std::unique_ptr<AttemptDescription> description_;
  // Sent once (the constructor's `sent_once`): nothing is ever resent.
  const bool sent_once_;
  // How attempts travel: unary_, or stream_ once MakeStream made one.
  Unary unary_{this};
  std::unique_ptr<StreamFlow> stream_;
  AttemptTransport* transport_ = &unary_;
  CallEngine engine_;

  // Watches the caller's parent call once a wait has begun; stopped when
  // the call is decided. Touched only by the engine's events (WatchParent,
  // Conclude), which run one at a time: no lock.
  bool parent_watched_ = false;
  bool concluded_ = false;
  std::shared_ptr<ParentWatch> parent_watch_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_HIJACKED_CALL_H_
