// Copyright rpcguard authors.
//
// HijackedCall: the engine's seam to gRPC. The design is in the header; the
// state machine in call_engine.h.

#include "rpcguard/internal/grpc/hijacked_call.h"

#include <grpcpp/alarm.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpcguard/base/block_pool.h"
#include "rpcguard/internal/grpc/attempt_call.h"
#include "rpcguard/internal/grpc/deadline.h"
#include "rpcguard/internal/grpc/sending_scope.h"
#include "rpcguard/internal/grpc/timer_queue.h"

namespace rpcguard {
namespace internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

bool Replaced(const Metadata& replacements, const std::string& key) {
  for (const auto& kv : replacements) {
    if (kv.first == key) return true;
  }
  return false;
}

grpc::ClientContext* ContextOf(const std::shared_ptr<void>& context) {
  return static_cast<grpc::ClientContext*>(context.get());
}

// Each timer kind's entry point (TimerQueue takes a function pointer).
template <TimerKind kKind>
void Fire(void* call) {
  static_cast<CallEngine*>(call)->OnTimer(kKind);
}

TimerQueue::Run RunFor(TimerKind kind) {
  switch (kind) {
    case TimerKind::kNext:
      return &Fire<TimerKind::kNext>;
    case TimerKind::kDeadline:
      return &Fire<TimerKind::kDeadline>;
    case TimerKind::kRefreshDeadline:
      return &Fire<TimerKind::kRefreshDeadline>;
    case TimerKind::kCancel:
      break;
  }
  return &Fire<TimerKind::kCancel>;
}

}  // namespace

HijackedCall::HijackedCall(std::shared_ptr<const FactoryState> factory,
                           const MethodState& method, absl::Time deadline,
                           bool may_repeat, bool hedging,
                           std::optional<CallOverride> call_override,
                           std::optional<GiveUpReason> sent_once)
    : factory_(std::move(factory)),
      method_(method),
      call_override_(std::move(call_override)),
      policy_(call_override_ ? call_override_->policy : method.resolved.policy),
      sent_once_(sent_once.has_value()),
      engine_(this, factory_->EngineEnvFor(method, this), policy_,
              call_override_ ? call_override_->verbosity : std::nullopt,
              deadline, may_repeat, hedging, factory_->random()->Next64(),
              sent_once) {}

void HijackedCall::Trace(TraceEvent& event,
                         absl::FunctionRef<void(TraceEvent&)> fill,
                         std::optional<TraceVerbosity> verbosity) const {
  factory_->Trace(
      method_, event,
      [&](TraceEvent& e) {
        e.method = method_.name;
        fill(e);
        FactoryState::FillBreaker(method_, e);
      },
      verbosity);
}

void HijackedCall::AttemptStarted() const {
  Stats::RecordAttemptStarted(method_.stats);
}

void HijackedCall::AttemptEnded(grpc::StatusCode code,
                                absl::Duration duration) const {
  Stats::RecordAttemptEnded(method_.stats, code, duration);
}

void HijackedCall::Retried(absl::Duration delay) const {
  Stats::RecordRetry(method_.stats, delay);
}

void HijackedCall::CallEnded(const Stats::CallEnd& end) const {
  Stats::RecordCallEnded(method_.stats, end);
}

void HijackedCall::HedgedCall(int copies, bool later_won, int cancelled,
                              absl::Duration delay) const {
  factory_->stats()->RecordHedgedCall(method_.stats, copies, later_won,
                                      cancelled, delay);
}

void HijackedCall::MakeStream(grpc::internal::RpcMethod::RpcType type,
                              InterceptorBatchMethods* first_batch) {
  stream_ = std::make_unique<StreamFlow>(
      this, &engine_.serializer(), method_.name, type,
      factory_->stream_buffer_bytes(), factory_->channel_stream_bytes());
  stream_->TakeFirstBatch(first_batch);
  transport_ = stream_.get();
}

void HijackedCall::OnAttemptEnded(EngineAttempt* attempt, grpc::Status status) {
  // No hold of its own: the engine hands the drain its hold of this object
  // when it lets go of the last attempt (Serializer::KeepAlive).
  engine_.OnAttemptDone(
      attempt,
      ReadEnd(std::move(status),
              ContextOf(attempt->context)->GetServerTrailingMetadata(),
              *ContextOf(attempt->context)),
      nullptr);
}

void HijackedCall::RideFirstAttempt(std::optional<Admission> admission,
                                    void* response_object, absl::Time sent,
                                    bool running) {
  response_object_ = response_object;
  // The handle points at the application's context and owns nothing: the
  // context outlives the call's end, which the engine waits for.
  std::shared_ptr<void> handle;
  if (running) handle = std::shared_ptr<void>(handle, setup_.app_context);
  ride_ =
      engine_.RideFirstAttempt(std::move(admission), sent, std::move(handle));
}

void HijackedCall::OnFirstAttemptDone(InterceptorBatchMethods* batch,
                                      const grpc::ChannelInterface* channel) {
  grpc::Status status = *batch->GetRecvStatus();
  // A call sent once gets what gRPC makes of it: nothing follows.
  if (!sent_once_ && status.ok() &&
      batch->QueryInterceptionHookPoint(
          InterceptionHookPoints::POST_RECV_MESSAGE) &&
      batch->GetRecvMessage() == nullptr) {
    // gRPC hides a response it could not parse (or none at all) and
    // reports OK; a hijacked call would say so, and so does this one.
    status = grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("rpcguard: cannot parse the response of ", method_.name,
                     ": the server sent none, or one not of the "
                     "application's response type"));
  }
  if (!status.ok() && !sent_once_ && setup_.channel.get() == nullptr) {
    // What later attempts need, only now that there may be any. Written
    // before the engine lets a canceller or a timer send one. (A riding
    // hedged call's are set already, and copies use them.)
    setup_.channel = ChannelBelowRef(batch->GetInterceptedChannel());
    setup_.rpc_method = &method_.RpcMethodFor(channel);
  }
  AttemptReport report =
      ReadEnd(std::move(status), *batch->GetRecvTrailingMetadata(),
              *setup_.app_context);
  // Held to the end: the engine lets go of it.
  std::shared_ptr<EngineAttempt> attempt = std::move(ride_);
  // `batch` is the engine's now: filled and proceeded when the call is
  // decided (at once, or after the attempts that follow).
  engine_.OnAttemptDone(attempt.get(), std::move(report), batch);
}

void HijackedCall::Park(InterceptorBatchMethods* batch) { engine_.Park(batch); }

AttemptReport ReadAttemptEnd(
    grpc::Status status,
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
    std::optional<bool> reached_transport, grpc::ChannelInterface* channel,
    bool may_wait) {
  AttemptReport r;
  if (!status.ok()) {
    auto it = trailers.find(kPushbackTrailer);
    if (it != trailers.end()) {
      r.pushback = ParsePushback(
          absl::string_view(it->second.data(), it->second.size()));
    }
    r.pushback.downstream_gave_up = r.pushback.kind == Pushback::Kind::kStop &&
                                    trailers.count(kGaveUpTrailer) > 0;
    r.pushback.min_delay = ParseRetryInfo(status.error_details());
    r.local_error = IsLocalError(status.error_code(), status.error_message());
    if (reached_transport.has_value()) {
      // Credentials are asked for before a transport takes the headers: the
      // plugin's words on an attempt a transport took are a server's,
      // relaying its own client's failure.
      if (*reached_transport &&
          IsCredentialsPluginError(status.error_message())) {
        r.local_error = false;
      }
      // A failed pick (no connection, no address, a balancer's refusal) is
      // gRPC's UNAVAILABLE, whatever words it comes with.
      r.not_sent = !r.local_error && !*reached_transport &&
                   status.error_code() == grpc::StatusCode::UNAVAILABLE;
    } else {
      // The words alone could be a server's; a READY channel had a
      // connection to send on.
      r.not_sent = !r.local_error &&
                   IsNotSent(status.error_code(), status.error_message()) &&
                   channel != nullptr &&
                   channel->GetState(false) != GRPC_CHANNEL_READY;
    }
  }
  r.may_wait = may_wait;
  r.status = std::move(status);
  return r;
}

AttemptReport HijackedCall::ReadEnd(
    grpc::Status status,
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
    const grpc::ClientContext& context) const {
  // Read only for a failure: a success needs no evidence.
  std::optional<bool> reached;
  if (!status.ok()) reached = ReachedTransport(context, setup_.app_channel);
  // An explicit fail-fast, the caller's or the config's, is kept.
  // The channel's state is the application's channel's: a call sent once
  // never gets the channel below, and its no-connection check needs one.
  return ReadAttemptEnd(std::move(status), trailers, reached,
                        setup_.app_channel,
                        policy_.wait_for_ready.value_or(true) &&
                            setup_.caller.wait_for_ready.value_or(true));
}

std::shared_ptr<EngineAttempt> HijackedCall::NewAttempt() {
  return transport_->NewAttempt();
}

void HijackedCall::Send(const std::shared_ptr<EngineAttempt>& attempt,
                        const std::optional<RefreshedCredentials>& refreshed) {
  PrepareContext(
      *ContextOf(attempt->context), *attempt,
      transport_->RunsToCallDeadline() ? engine_.deadline() : attempt->deadline,
      refreshed);
  transport_->Send(attempt, setup_.channel.get());
}

namespace {
thread_local bool cancelling_own_call = false;
}  // namespace

bool CancellingOwnCall() { return cancelling_own_call; }

void HijackedCall::Cancel(const std::shared_ptr<void>& context) {
  if (context.get() == setup_.app_context) {
    // A riding hedged call's first copy lost. gRPC runs the interceptors'
    // PRE_SEND_CANCEL inside TryCancel, on this thread: rpcguard's own
    // knows it by the mark. Its end comes back through the application's
    // call (OnFirstAttemptDone), and the engine, done, serves its batch
    // from the winner.
    cancelling_own_call = true;
    setup_.app_context->TryCancel();
    cancelling_own_call = false;
    return;
  }
  transport_->Cancel(context);
}

std::shared_ptr<EngineAttempt> HijackedCall::Unary::NewAttempt() {
  auto attempt =
      std::allocate_shared<GrpcAttempt>(PoolAllocator<GrpcAttempt>());
  attempt->context = std::allocate_shared<grpc::ClientContext>(
      PoolAllocator<grpc::ClientContext>());
  return attempt;
}

void HijackedCall::Unary::Send(const std::shared_ptr<EngineAttempt>& attempt,
                               grpc::ChannelInterface* channel) {
  grpc::ClientContext* context = ContextOf(attempt->context);
  auto* grpc_attempt = static_cast<GrpcAttempt*>(attempt.get());
  // The callback captures two raw pointers, which std::function stores
  // without allocating; the engine holds the call (Hold) and the attempt
  // until it runs.
  SendingScope sending(context);
  HijackedCall* call = call_;
  StartAttemptCall(channel, *call->setup_.rpc_method, context,
                   &call->setup_.request, &grpc_attempt->response,
                   [call, grpc_attempt](grpc::Status status) {
                     call->OnAttemptEnded(grpc_attempt, std::move(status));
                   });
}

void HijackedCall::Unary::Cancel(const std::shared_ptr<void>& context) {
  if (context != nullptr) ContextOf(context)->TryCancel();
}

void HijackedCall::Unary::TakeResponse(EngineAttempt& last, FinalOutcome* out) {
  out->response.Swap(&static_cast<GrpcAttempt&>(last).response);
}

void HijackedCall::Release(std::shared_ptr<EngineAttempt> attempt) {
  // Dropped on one of gRPC's executor threads: the attempt's context may
  // hold the last reference to the application's channel, and a channel
  // destroyed on the callback thread running the attempt's completion can
  // take gRPC's callback queue, and the threads that serve it, down from
  // under that thread (ASan: double free in grpc_cq_internal_unref). Only
  // attempts cancelled or outrun pay for this alarm.
  std::shared_ptr<void> context = std::move(attempt->context);
  attempt.reset();
  // The application's own call's handle owns nothing.
  if (context == nullptr || context.get() == setup_.app_context) return;
  auto* alarm = new grpc::Alarm;
  // A deadline in the past: runs at once. The alarm's own state outlives
  // its callback, which may delete it.
  alarm->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC),
             [alarm, context = std::move(context)](bool) mutable {
               context.reset();
               delete alarm;
             });
}

TimerHandle HijackedCall::Schedule(absl::Time when, TimerKind kind) {
  // The queue runs on gRPC's monotonic clock: on the real clock (the usual
  // case) `when` is on it already. Nothing waits past the caller.
  const absl::Time at =
      std::min(OnGrpcClock(when, factory_->clock()), setup_.grpc_deadline);
  // The engine is a member: alive exactly as long as this object.
  std::shared_ptr<void> target(shared_from_this(), &engine_);
  return factory_->hedge_timers()->Schedule(at, target, RunFor(kind));
}

void HijackedCall::CancelTimer(const TimerHandle& handle) {
  factory_->hedge_timers()->Cancel(handle);
}

bool HijackedCall::KeepsDeadline() const {
  return factory_->clock() == Clock::Real() &&
         setup_.grpc_deadline != absl::InfiniteFuture();
}

void HijackedCall::Refresh() {
  std::weak_ptr<HijackedCall> weak = weak_from_this();
  // Held weakly: a refresher that answers after the call ended finds
  // nothing to do.
  factory_->refresher()(method_.name,
                        [weak](absl::StatusOr<RefreshedCredentials> result) {
                          if (auto self = weak.lock()) {
                            self->engine_.OnRefreshed(std::move(result));
                          }
                        });
}

void HijackedCall::WatchParent() {
  // Called from the engine's events (CallIo), one at a time, as Conclude
  // is: no lock.
  if (setup_.caller.parent == nullptr || parent_watched_ || concluded_) return;
  parent_watched_ = true;
  std::weak_ptr<HijackedCall> weak = weak_from_this();
  parent_watch_ = ParentWatch::Start(setup_.core_channel, setup_.caller.parent,
                                     setup_.caller.propagation.c_bitmask(),
                                     [weak](grpc::StatusCode code) {
                                       if (auto self = weak.lock())
                                         self->OnParentEnded(code);
                                     });
}

void HijackedCall::PrepareContext(
    grpc::ClientContext& ctx, const EngineAttempt& attempt, absl::Time deadline,
    const std::optional<RefreshedCredentials>& refreshed) {
  // From the monotonic time left, never the caller's wall-clock deadline:
  // gRPC would read that at the attempt's start, after any step since the
  // call's. On the real clock this is a conversion, not a clock read.
  ctx.set_deadline(
      GrpcDeadline(deadline, factory_->clock(), setup_.grpc_deadline));
  if (refreshed && refreshed->credentials) {
    ctx.set_credentials(refreshed->credentials);
  } else if (setup_.credentials) {
    ctx.set_credentials(setup_.credentials);
  }
  if (setup_.compression != GRPC_COMPRESS_NONE) {
    ctx.set_compression_algorithm(setup_.compression);
  }
  // Waiting for the connection is rpcguard's own choice for a retry of an
  // attempt that found none; the config's and the caller's explicit
  // waitForReady, applied after it, win.
  if (attempt.wait_for_connection) ctx.set_wait_for_ready(true);
  if (policy_.wait_for_ready) ctx.set_wait_for_ready(*policy_.wait_for_ready);
  // After the config's waitForReady: the caller's own choice wins over it,
  // as over a service config's in gRPC.
  ApplyCallerSettings(setup_.caller, &ctx);
  for (const auto& kv : setup_.metadata) {
    if (refreshed && Replaced(refreshed->metadata, kv.first)) continue;
    ctx.AddMetadata(kv.first, kv.second);
  }
  if (refreshed) {
    for (const auto& kv : refreshed->metadata) {
      ctx.AddMetadata(kv.first, kv.second);
    }
  }
  ctx.AddMetadata(HeaderString<kIdempotencyKeyHeader>(),
                  setup_.idempotency_key);
  ctx.AddMetadata(HeaderString<kAttemptHeader>(), absl::StrCat(attempt.number));
}

void HijackedCall::TakeResult(EngineAttempt& last, FinalOutcome* out) {
  grpc::ClientContext* context = ContextOf(last.context);
  transport_->TakeResponse(last, out);
  CopyMetadata(context->GetServerInitialMetadata(), &out->initial_metadata);
  CopyMetadata(context->GetServerTrailingMetadata(), &out->trailing_metadata);
  // Before the application's call completes, which is when it may read. A
  // riding call's is written when its status batch is served: a hedged
  // one's own call may still run, and gRPC writes its context as it ends.
  if (response_object_ != nullptr) {
    description_ =
        std::make_unique<AttemptDescription>(ReadAttemptDescription(*context));
  } else if (setup_.app_context != nullptr) {
    DescribeFinalAttempt(*context, setup_.app_context);
  }
}

void HijackedCall::DescribeToApplication(const Batches& batches) {
  if (description_ != nullptr && !batches.empty() &&
      setup_.app_context != nullptr) {
    WriteAttemptDescription(*description_, setup_.app_context);
  }
}

void HijackedCall::Conclude(const FinalOutcome& outcome,
                            const TraceEvent& terminal,
                            const Batches& batches) {
  // Without a parent call nothing was watched (WatchParent).
  if (setup_.caller.parent != nullptr) {
    concluded_ = true;
    std::shared_ptr<ParentWatch> watch = std::move(parent_watch_);
    if (watch != nullptr) watch->Stop();
  }
  if (terminal.decision == TraceDecision::kGiveUp) {
    // Before the application has the result: a handler that fails its own
    // call then finds it marked.
    ServerCalls::Get().Mark(
        setup_.server_link,
        TravellingReason(terminal.reason, outcome.attempts));
    factory_->ReportGiveUp(method_, terminal, outcome.attempts,
                           setup_.idempotency_key, setup_.request);
  }
  transport_->Conclude(outcome);
  // The application's batches that waited in the engine (a unary call's).
  DescribeToApplication(batches);
  ServeBatches(batches, outcome, method_.name, response_object_);
}

void HijackedCall::ServeDecided(const FinalOutcome& outcome,
                                const Batches& batches) {
  DescribeToApplication(batches);
  ServeBatches(batches, outcome, method_.name, response_object_);
}

}  // namespace internal
}  // namespace rpcguard
