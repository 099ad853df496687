// Copyright rpcguard authors.
//
// The dispatcher. At a call's first batch it gathers the facts an
// interceptor can see (CallFacts), asks PlanCall for the call's mode and
// runs it:
//   kPassThrough   proceed untouched;
//   kMetadataOnly  add rpcguard's metadata, ask the breaker, proceed; a
//                  failure ends through the engine (OwnCallFailed), which
//                  sends nothing more (SentOnceAttemptPolicy);
//   kRide          as kMetadataOnly, keeping what a retry would need; a
//                  failed attempt 1 ends through the engine, which may
//                  retry it;
//   kHijack        hand the call to a HijackedCall and Hijack();
//   kFailFast      end it through a HijackedCall before anything is sent.
// Everything after the first batch is the HijackedCall's (hijacked_call.h)
// or gRPC's. Streams take the same modes but kRide; a hijacked stream's
// every later batch goes to its StreamFlow (stream_flow.h).
//
// Nothing touches `this` after Hijack() or after the last Proceed(): the
// application may destroy its ClientContext, which owns the interceptor, as
// soon as it sees the result.
//
// One file though it is over 600 lines: each mode's code moves the same
// per-call members (the key, the caller's metadata, the request, the
// admission) into a HijackedCall at the moment that mode hands the call
// over, and the hedge ride (HedgeRide, ArmHedge, OnHedgeDue, EngageHedge)
// is one more such moment. Split by mode, those members would need an
// accessor or a friend in each part. Reading order: Intercept and
// OnFirstBatch (the plan), SendOwnCall and the hedge ride, HijackCall,
// then the own call's end (OwnCallSucceeded, OwnCallFailed).

#include "rpcguard/internal/grpc/retry_interceptor.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpcguard/base/block_pool.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/base/uuid.h"
#include "rpcguard/decision/call_plan.h"
#include "rpcguard/decision/call_policy.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/internal/grpc/call_policy_carrier.h"
#include "rpcguard/internal/grpc/channel_below.h"
#include "rpcguard/internal/grpc/deadline.h"
#include "rpcguard/internal/grpc/hijacked_call.h"
#include "rpcguard/internal/grpc/sending_scope.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc/timer_queue.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
#include "rpcguard/observability/correlation.h"

namespace rpcguard {
namespace internal {
namespace {

using grpc::experimental::ClientRpcInfo;
using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

class RetryInterceptor;

// A hedged call riding its first copy: where its hedge timer (on the timer
// queue's thread) and the end of the application's call (on gRPC's) meet,
// one at a time. The timer holds it weakly; the interceptor owns it.
// Nearly every ride ends before its timer: that end is one compare-and-swap
// (kRiding to kEnded), and only a timer that fired takes the lock.
struct HedgeRide {
  enum class State {
    kRiding,    // the first copy runs alone
    kEngaging,  // the timer fired: the engine is being built
    kEngaged,   // the engine owns the call (`call`)
    kEnded,     // the first copy ended riding: the timer does nothing
  };
  internal::Mutex mu;
  // Leaves kRiding by a compare-and-swap: the timer's (to kEngaging, under
  // mu) or the call end's (to kEnded, without it). Every other change is
  // made under mu; the timer may put kEngaging back to kRiding.
  std::atomic<State> state{State::kRiding};
  // Alive while the state is kRiding or kEngaging: the call cannot
  // complete before its end has passed through this object.
  RetryInterceptor* owner = nullptr;
  // The application's call's status batch, come while engaging.
  InterceptorBatchMethods* ended ABSL_GUARDED_BY(mu) = nullptr;
  std::shared_ptr<HijackedCall> call ABSL_GUARDED_BY(mu);
  // Written before the call is proceeded, read at its end.
  TimerQueue::Handle timer;
  // The hedge's delay, and the channel below rpcguard for the copies
  // (moved out by whichever of the timer and the call's end builds the
  // engine). Here, not in the interceptor: a call that is not hedged pays
  // for none of it.
  absl::Duration delay;
  ChannelBelowRef channel;
};

class RetryInterceptor final : public grpc::experimental::Interceptor {
 public:
  // `below` is the factory's, read only during the call's first batch
  // (while its channel, which owns the factory, is alive).
  RetryInterceptor(ClientRpcInfo* info,
                   std::shared_ptr<const FactoryState> factory,
                   ChannelBelow* below)
      : info_(info),
        factory_(std::move(factory)),
        below_(below),
        place_(InterceptorPlace(*info)) {
    // info->method() may point into the caller's string, which a
    // grpc::GenericStub caller may free once the call is created (before
    // its first batch, with the CQ API): read it now, and only now.
    method_ = factory_->FindMethod(info->method());
    if (method_ == nullptr) method_name_ = info->method();
  }

  void Intercept(InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_CANCEL)) {
      // rpcguard's own cancel of a riding hedged call's losing first copy
      // is not the caller's.
      if (!CancellingOwnCall()) OnCancel();
      return;  // gRPC continues a cancel batch by itself.
    }
    // Only the first batch's: gRPC's CQ-async writers reuse one batch for
    // the initial metadata and every write, and a hijacked call never
    // clears its metadata op, so later writes show the hook again.
    if (!started_ && batch->QueryInterceptionHookPoint(
                         InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      started_ = true;
      if (SendingScope::IsSending(info_->client_context())) {
        // rpcguard's own call, come back to rpcguard (sending_scope.h):
        // it is already an attempt.
        batch->Proceed();  // kPassThrough
        return;
      }
      OnFirstBatch(batch);
      return;  // OnFirstBatch may hijack: `this` may be gone.
    }
    switch (mode_) {
      case CallMode::kHijack:
      case CallMode::kFailFast:
        if (stream_) {
          // Every later batch of a hijacked stream, both halves.
          call_for_batches_->Serve(batch);
          return;
        }
        if (batch->QueryInterceptionHookPoint(
                InterceptionHookPoints::PRE_RECV_INITIAL_METADATA) ||
            batch->QueryInterceptionHookPoint(
                InterceptionHookPoints::PRE_RECV_MESSAGE) ||
            batch->QueryInterceptionHookPoint(
                InterceptionHookPoints::PRE_RECV_STATUS)) {
          call_for_batches_->Park(batch);
          return;
        }
        break;
      case CallMode::kRide:
      case CallMode::kMetadataOnly:
        if (batch->QueryInterceptionHookPoint(
                InterceptionHookPoints::POST_RECV_STATUS)) {
          if (hedge_ride_ != nullptr && !OwnCallEndedRiding(batch)) {
            return;  // the hedged call's engine has it: `this` may be gone
          }
          // A riding call's success needs its message: without one gRPC
          // would report OK and the application find nothing.
          const bool failed = mode_ == CallMode::kRide
                                  ? !SucceededWithMessage(batch)
                                  : !batch->GetRecvStatus()->ok();
          if (failed) {
            OwnCallFailed(batch);  // proceeds it, or keeps it for a retry
            return;                // `this` may be gone
          }
          OwnCallSucceeded(batch);
        }
        break;
      case CallMode::kPassThrough:
        break;
    }
    batch->Proceed();
  }

 private:
  // A success with its message: a riding call that needs nothing more.
  static bool SucceededWithMessage(InterceptorBatchMethods* batch) {
    return batch->GetRecvStatus()->ok() &&
           !(batch->QueryInterceptionHookPoint(
                 InterceptionHookPoints::POST_RECV_MESSAGE) &&
             batch->GetRecvMessage() == nullptr);
  }

  void OnCancel() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<HijackedCall> call;
    {
      internal::MutexLock lock(&mu_);
      cancelled_ = true;
      call = call_;
    }
    if (call) call->Cancel();
  }

  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_) {
    internal::MutexLock lock(&mu_);
    return cancelled_;
  }

  void OnFirstBatch(InterceptorBatchMethods* batch) {
    auto* md = batch->GetSendInitialMetadata();
    // Most calls carry no metadata of their own: skip the lookups.
    const bool has_metadata = !md->empty();
    // Taken first, on every path: the entry is never sent.
    absl::StatusOr<std::optional<CallPolicy>> call_policy = TakeCallPolicy(md);
    if (has_metadata && md->erase(HeaderString<kPassThroughHeader>()) > 0) {
      // The link to a server call is this process's private note: it never
      // leaves it, whatever the call's mode.
      md->erase(HeaderString<kServerCallLinkHeader>());
      batch->Proceed();  // kPassThrough
      return;
    }
    if (method_ == nullptr) {
      // The method's first call: resolved once, under the name read when
      // the call was created.
      method_ =
          &factory_->ForMethod(method_name_.c_str(), info_->channel(), batch);
      if (method_->shared) {
        // An undeclared method past the bound: a copy that names the call.
        own_method_ = method_->ForCall(method_name_);
        method_ = own_method_.get();
      }
    }
    const MethodState& method = *method_;
    // rpcguard owns the attempt header: a caller's value would lie.
    if (has_metadata) md->erase(HeaderString<kAttemptHeader>());

    // The server call this one is made for, if any (server.h): explicitly
    // linked, or its parent by FromServerContext (gRPC 1.51).
    if (has_metadata) {
      auto link = md->find(HeaderString<kServerCallLinkHeader>());
      if (link != md->end()) {
        server_link_ = DecodeLink(link->second);
        // Every entry, however many were added: none may be sent.
        md->erase(HeaderString<kServerCallLinkHeader>());
      }
    }
    if (!server_link_.linked()) {
      if (grpc_call* parent = ParentCall(*info_->client_context())) {
        server_link_ = ServerCalls::Get().Find(parent);
      }
    }

    CallFacts facts;
    facts.unary = !stream_;
    facts.no_hedge = server_link_.no_hedge;
    facts.declaration_error = method.resolved.error;
    facts.destination_error = method.setup_error;
    std::string caller_key;
    if (has_metadata) {
      if (!factory_->correlation_keys().empty()) {
        correlation_ = ReadCorrelationIds(*md, factory_->correlation_keys());
      }
      facts.caller_keys =
          static_cast<int>(md->count(HeaderString<kIdempotencyKeyHeader>()));
      if (facts.caller_keys > 0) {
        caller_key = md->find(HeaderString<kIdempotencyKeyHeader>())->second;
        facts.caller_key = caller_key;
      }
    }
    // The call's own policy, if it set one, in place of the method's.
    const CallPolicy* asked = nullptr;
    if (!call_policy.ok()) {
      facts.call_policy_error = call_policy.status();
    } else if (call_policy->has_value()) {
      asked = &**call_policy;
      absl::StatusOr<MethodPolicy> applied =
          ApplyCallPolicy(method.resolved.policy, *asked);
      if (stream_ && asked->hedging == true) {
        facts.call_policy_error = absl::InvalidArgumentError(
            "CallPolicy.hedging: rpcguard does not hedge streams");
      } else if (applied.ok()) {
        call_override_.emplace(
            CallOverride{*std::move(applied), asked->trace_verbosity});
      } else {
        facts.call_policy_error = applied.status();
      }
    }
    const MethodPolicy& policy = this->policy();
    // Probed only when the answer matters: a call that may be retried.
    if (facts.unary &&
        (MayRepeat(policy.idempotency) || facts.caller_keys == 1)) {
      facts.callback_api = IsCallbackUnaryCall(batch, info_->client_context());
      // The CQ API hands the response object over only with Finish.
      const void* response = batch->GetRecvMessage();
      facts.response_may_be_message =
          response == nullptr || IsProtobufMessage(response);
    }
    // The hedging policy's source: the method's own entry, or not.
    facts.hedging_for_method =
        HedgingForMethod(method.resolved.sources[kFieldIndexHedging] ==
                                 PolicySource::kConfigMethod ||
                             method.resolved.sources[kFieldIndexHedging] ==
                                 PolicySource::kProtoMethod,
                         asked);
    plan_ = PlanCall(policy, facts);
    if (facts.no_hedge && facts.unary &&
        MayHedge(policy, policy.idempotency, facts.hedging_for_method)) {
      CountHedgeSuppressed();
    }

    if (plan_.mode == CallMode::kMetadataOnly ||
        plan_.mode == CallMode::kRide) {
      // The application's own call is attempt 1: the gate admits it here,
      // on the clock reading that times the attempt (SendOwnCall).
      own_call_started_ = factory_->clock()->MonotonicNow();
      const DestinationGates gates = method.gates();
      AttemptStart start =
          BeforeAttempt(1, /*cancelled=*/false, absl::InfiniteDuration(), gates,
                        RetryCharge::kUpFront,
                        GateNow(gates, factory_->clock(), own_call_started_));
      if (start.refused == GiveUpReason::kBreakerOpen) {
        plan_ = RefusedByBreaker(
            plan_, method.breaker->RefusalMessage(*start.admission));
      } else if (start.refused == GiveUpReason::kThrottled) {
        plan_ = RefusedByThrottle(plan_, ThrottledStatus(method.breaker_key));
      } else {
        admission_ = std::move(start.admission);
        // A hedged call's first copy earns its hedges, as the engine's
        // first send would count it.
        if (plan_.hedge && method.hedge_budget != nullptr) {
          method.hedge_budget->RecordFirstAttempt();
        }
      }
    }
    mode_ = plan_.mode;
    if (mode_ != CallMode::kPassThrough) Stats::RecordCallStarted(method.stats);
    key_ = facts.caller_keys > 0 ? std::move(caller_key)
                                 : NewUuidV4(*factory_->random());

    switch (mode_) {
      case CallMode::kPassThrough:
        batch->Proceed();
        return;
      case CallMode::kMetadataOnly:
      case CallMode::kRide:
        SendOwnCall(batch, has_metadata, facts.caller_keys == 0);
        return;
      case CallMode::kHijack:
      case CallMode::kFailFast:
        HijackCall(batch, has_metadata);
        return;
    }
  }

  // kMetadataOnly and kRide: the application's own call carries attempt 1.
  void SendOwnCall(InterceptorBatchMethods* batch, bool has_metadata,
                   bool add_key) {
    auto* md = batch->GetSendInitialMetadata();
    // Read now, when the call starts, as gRPC reads it for its own call: a
    // wall-clock step before the call ends changes nothing.
    caller_deadline_ =
        CallerDeadline(*info_->client_context(), factory_->clock());
    Stats::RecordAttemptStarted(method_->stats);
    if (mode_ == CallMode::kRide) {
      // What a retry would need, kept cheaply: the call's state is built
      // only if attempt 1 fails (OwnCallFailed). Shared: the application's
      // call sends the request too.
      KeepRequest(batch);
      ride_response_ = batch->GetRecvMessage();
      if (has_metadata) {
        md->erase(HeaderString<kIdempotencyKeyHeader>());
        caller_metadata_.assign(md->begin(), md->end());
      }
      add_key = true;
    } else if (factory_->give_up_hook() &&
               batch->QueryInterceptionHookPoint(
                   InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      KeepRequest(batch);
    }
    if (add_key) md->emplace(HeaderString<kIdempotencyKeyHeader>(), key_);
    md->emplace(HeaderString<kAttemptHeader>(), "1");
    if (mode_ == CallMode::kRide && plan_.hedge) ArmHedge(batch);
    SendingScope sending(info_->client_context());
    batch->Proceed();
  }

  // A hedged call riding its first copy: the hedge timer, and what the
  // copies will need. Nothing more is built unless the timer fires before
  // the application's call ends (EngageHedge).
  void ArmHedge(InterceptorBatchMethods* batch) {
    const HedgingPolicy& hedging = *policy().hedging;
    if (hedging.max_attempts < 2) return;
    const absl::Duration delay = HedgeDelay(hedging, method_->latency.get());
    // Hedges are timed from the first copy's start, on gRPC's clock for
    // the timer queue; none is due past the caller's deadline.
    const absl::Time due = own_call_started_ + delay;
    if (due >= caller_deadline_.on_clock) return;
    hedge_ride_ = std::make_shared<HedgeRide>();
    hedge_ride_->owner = this;
    hedge_ride_->delay = delay;
    // The channel below rpcguard, which only a batch gives.
    hedge_ride_->channel = ChannelBelowFor(batch);
    hedge_ride_->timer = factory_->hedge_timers()->Schedule(
        OnGrpcClock(due, factory_->clock()), hedge_ride_, &OnHedgeDue);
  }

  // The hedge is due (on the timer queue's thread): unless the application's
  // call has ended or been cancelled, rpcguard takes it over as the engine's
  // attempt 1 and sends the next copy.
  static void OnHedgeDue(void* target) {
    auto* ride = static_cast<HedgeRide*>(target);
    RetryInterceptor* self;
    {
      internal::MutexLock lock(&ride->mu);
      HedgeRide::State riding = HedgeRide::State::kRiding;
      // Won, the interceptor lives until the state leaves kEngaging: the
      // call's end then waits for this lock.
      if (!ride->state.compare_exchange_strong(riding,
                                               HedgeRide::State::kEngaging)) {
        return;  // the call has ended
      }
      self = ride->owner;
      if (self->cancelled()) {
        // Its end ends it: no copy. Back to riding, before the end can
        // look (it takes this lock once its exchange has failed).
        ride->state.store(HedgeRide::State::kRiding);
        return;
      }
    }
    self->EngageHedge(ride);
  }

  void EngageHedge(HedgeRide* ride) {
    std::shared_ptr<HijackedCall> call = NewHijackedCall();
    HijackedCall::Setup& setup = call->setup();
    setup.idempotency_key = std::move(key_);
    setup.correlation = std::move(correlation_);
    setup.metadata = std::move(caller_metadata_);
    RestoreRequest(&setup.request);
    setup.channel = std::move(ride->channel);
    setup.rpc_method = &method_->RpcMethodFor(info_->channel());
    // Joined before anything can cancel it: a cancel then finds attempt 1.
    call->RideFirstAttempt(std::move(admission_), ride_response_,
                           own_call_started_, /*running=*/true);
    admission_.reset();
    bool cancelled;
    {
      internal::MutexLock lock(&mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    if (cancelled) call->Cancel();
    grpc::ChannelInterface* channel = info_->channel();
    InterceptorBatchMethods* ended;
    {
      internal::MutexLock lock(&ride->mu);
      ride->state.store(HedgeRide::State::kEngaged);
      ride->call = call;
      ended = std::exchange(ride->ended, nullptr);
    }
    // From here `this` may be gone (unless `ended` is held).
    call->HedgeDue();
    if (ended != nullptr) call->OnFirstAttemptDone(ended, channel);
  }

  // A riding hedged call's own call ended (`batch`, POST_RECV_STATUS).
  // Returns true when it ended riding (the timer is cancelled and the ride
  // ends as any ride does); false when the engine has taken the batch.
  bool OwnCallEndedRiding(InterceptorBatchMethods* batch) {
    HedgeRide::State riding = HedgeRide::State::kRiding;
    if (!hedge_ride_->state.compare_exchange_strong(riding,
                                                    HedgeRide::State::kEnded)) {
      // The timer has fired: what it left, read under its lock.
      std::shared_ptr<HijackedCall> call;
      {
        internal::MutexLock lock(&hedge_ride_->mu);
        switch (hedge_ride_->state.load()) {
          case HedgeRide::State::kRiding:
            // The timer found the call cancelled and let it ride on.
            hedge_ride_->state.store(HedgeRide::State::kEnded);
            break;
          case HedgeRide::State::kEngaging:
            // Handed to the engine once it is in (EngageHedge).
            hedge_ride_->ended = batch;
            return false;
          case HedgeRide::State::kEngaged:
            call = hedge_ride_->call;
            break;
          case HedgeRide::State::kEnded:
            break;
        }
      }
      if (call != nullptr) {
        call->OnFirstAttemptDone(batch, info_->channel());
        return false;
      }
    }
    factory_->hedge_timers()->Cancel(hedge_ride_->timer);
    return true;
  }

  // kHijack and kFailFast: rpcguard owns the call's outcome.
  void HijackCall(InterceptorBatchMethods* batch, bool has_metadata) {
    auto* md = batch->GetSendInitialMetadata();
    caller_deadline_ =
        CallerDeadline(*info_->client_context(), factory_->clock());
    auto call = NewHijackedCall();
    HijackedCall::Setup& setup = call->setup();
    setup.idempotency_key = std::move(key_);
    setup.correlation = std::move(correlation_);
    if (has_metadata) {
      md->erase(HeaderString<kIdempotencyKeyHeader>());
      setup.metadata.assign(md->begin(), md->end());
    }
    setup.channel = ChannelBelowFor(batch);
    if (stream_) {
      call->MakeStream(StreamType(info_->type()), batch);
    } else {
      setup.rpc_method = &method_->RpcMethodFor(info_->channel());
      // Taken, not copied: a hijacked call never sends its own message.
      setup.request.Swap(batch->GetSerializedSendMessage());
    }
    bool cancelled;
    {
      internal::MutexLock lock(&mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    call_for_batches_ = call.get();
    if (mode_ == CallMode::kFailFast) {
      call->FailBeforeStart(plan_.reject, plan_.reason);
    } else if (cancelled) {
      call->FailBeforeStart(grpc::Status(grpc::StatusCode::CANCELLED,
                                         "call cancelled before it started"),
                            GiveUpReason::kCancelled);
    } else {
      call->Start();
    }
    // Re-enters Intercept() with this batch's receive hooks, which park.
    batch->Hijack();
  }

  // The channel below rpcguard, for the copies or attempts rpcguard sends;
  // `batch` is the call's first.
  ChannelBelowRef ChannelBelowFor(InterceptorBatchMethods* batch) {
    return below_->For(info_->channel(), place_, batch);
  }

  // Keeps the request's slices (references, not bytes): the one slice of
  // most requests without allocating, else all of them. A grpc::ByteBuffer
  // copy would cost as little to make, but destroying one enters gRPC's
  // ExecCtx: about 500 instructions on every call that rides, paid when
  // nothing failed (issue 31, bench/RESULTS.md).
  void KeepRequest(InterceptorBatchMethods* batch) {
    const grpc::ByteBuffer& request = *batch->GetSerializedSendMessage();
    if (request.TrySingleSlice(&request_slice_).ok()) {
      request_kept_ = RequestKept::kOneSlice;
    } else if (request.Dump(&request_slices_).ok()) {
      request_kept_ = RequestKept::kSlices;
    }
  }

  // The kept request as a ByteBuffer for the call's own attempts (a failure
  // needs it): its slices shared again. Nothing kept leaves `out` as it is.
  void RestoreRequest(grpc::ByteBuffer* out) {
    if (request_kept_ == RequestKept::kNothing) return;
    grpc::ByteBuffer kept =
        request_kept_ == RequestKept::kOneSlice
            ? grpc::ByteBuffer(&request_slice_, 1)
            : grpc::ByteBuffer(request_slices_.data(), request_slices_.size());
    out->Swap(&kept);
    request_slice_ = grpc::Slice();
    request_slices_.clear();
    request_kept_ = RequestKept::kNothing;
  }

  // A HijackedCall for this call, with what the application's context says
  // (its deadline as read when the call started: caller_deadline_).
  // `sent_once`: the call is sent once, for this reason of the plan's.
  std::shared_ptr<HijackedCall> NewHijackedCall(
      std::optional<GiveUpReason> sent_once = std::nullopt) {
    grpc::ClientContext* app = info_->client_context();
    auto call = std::allocate_shared<HijackedCall>(
        PoolAllocator<HijackedCall>(), factory_, *method_,
        caller_deadline_.on_clock, plan_.may_repeat, plan_.hedge,
        call_override_, sent_once);
    HijackedCall::Setup& setup = call->setup();
    setup.method_owner = own_method_;
    setup.grpc_deadline = caller_deadline_.on_grpc;
    setup.credentials = app->credentials();
    setup.compression = app->compression_algorithm();
    setup.caller = ReadCallerSettings(*app);
    setup.app_context = app;
    setup.app_channel = info_->channel();
    setup.server_link = server_link_;
    if (setup.caller.parent != nullptr) {
      setup.core_channel = CoreChannel(info_->channel());
    }
    return call;
  }

  // The application's own call (attempt 1, or a call sent once) ended
  // without a clean success in `batch`. It ends through the engine's one
  // step, as every attempt does (read, classify, settle with the
  // destination, record, trace, annotate, give-up hook); a riding call's
  // engine may retry it. Either way the engine keeps `batch` and proceeds
  // it when the call is decided: `this` may then be gone.
  void OwnCallFailed(InterceptorBatchMethods* batch) {
    const bool once = mode_ == CallMode::kMetadataOnly;
    std::shared_ptr<HijackedCall> call = NewHijackedCall(
        once ? std::optional<GiveUpReason>(plan_.reason) : std::nullopt);
    HijackedCall::Setup& setup = call->setup();
    setup.idempotency_key = std::move(key_);
    setup.correlation = std::move(correlation_);
    setup.metadata = std::move(caller_metadata_);
    // kRide: what a retry resends; kMetadataOnly: the give-up hook's copy.
    RestoreRequest(&setup.request);
    if (hedge_ride_ != nullptr && hedge_ride_->channel.get() != nullptr) {
      setup.channel = std::move(hedge_ride_->channel);
      setup.rpc_method = &method_->RpcMethodFor(info_->channel());
    }
    call->RideFirstAttempt(std::move(admission_), ride_response_,
                           own_call_started_);
    admission_.reset();
    bool cancelled;
    {
      internal::MutexLock lock(&mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    // A cancel that came before call_ was set: the call must not retry.
    if (cancelled) call->Cancel();
    // The engine proceeds `batch` once the call is decided.
    call->OnFirstAttemptDone(batch, info_->channel());
  }

  // The application's own call succeeded: it is told to the destination
  // and traced as the engine's success of attempt 1 would be. A success
  // decides nothing (no class to read, no pushback, no message to annotate,
  // no hook), so it takes no engine: every call pays for this path.
  void OwnCallSucceeded(InterceptorBatchMethods* batch) {
    static const grpc::string_ref kOne("1");
    batch->GetRecvTrailingMetadata()->emplace(
        grpc::string_ref(kAttemptsTrailer), kOne);
    const MethodState& method = *method_;
    TraceEvent event;
    event.kind = TraceEvent::Kind::kAttempt;
    event.attempt = 1;
    // One clock read for the durations, the gates and the trace line.
    const absl::Time now = factory_->clock()->MonotonicNow();
    event.attempt_duration = now - own_call_started_;
    event.call_duration = event.attempt_duration;
    const AttemptOutcome ok;
    if (hedge_ride_ != nullptr) {
      // As the engine's hedged call would: copy 1 decided it, alone; the
      // adaptive delay learns its latency.
      event.copy = 1;
      factory_->stats()->RecordHedgedCall(method.stats, 1, false, 0,
                                          hedge_ride_->delay);
      if (method.latency != nullptr) {
        method.latency->Record(event.attempt_duration);
      }
    }
    const DestinationGates gates = method.gates();
    const std::optional<absl::Time> gate_now =
        GateNow(gates, factory_->clock(), now);
    SettleAttempt(gates, /*charge=*/std::nullopt, StatusClass::kOk, ok,
                  gate_now);
    RecordAttemptEnd(gates, admission_, StatusClass::kOk, ok,
                     /*retrying=*/false, gate_now);
    admission_.reset();
    // One attempt, and the call, ended OK.
    Stats::RecordAttemptEnded(method.stats, grpc::StatusCode::OK,
                              event.attempt_duration);
    Stats::CallEnd end;
    end.duration = event.call_duration;
    end.attempts = 1;
    Stats::RecordCallEnded(method.stats, end);
    factory_->Trace(
        method, event,
        [&](TraceEvent& e) {
          e.time = factory_->clock()->WallNow();
          e.call_id = factory_->random()->Next64();
          e.method = method.name;
          e.idempotency_key = key_;
          correlation_.FillIn(e);
          e.deadline_left = caller_deadline_.on_clock - now;
          FactoryState::FillBreaker(method, e);
        },
        call_override_ ? call_override_->verbosity : std::nullopt);
  }

  // How a stream's attempts name their gRPC type.
  static grpc::internal::RpcMethod::RpcType StreamType(ClientRpcInfo::Type t) {
    switch (t) {
      case ClientRpcInfo::Type::CLIENT_STREAMING:
        return grpc::internal::RpcMethod::CLIENT_STREAMING;
      case ClientRpcInfo::Type::SERVER_STREAMING:
        return grpc::internal::RpcMethod::SERVER_STREAMING;
      default:
        return grpc::internal::RpcMethod::BIDI_STREAMING;
    }
  }

  // The policy the call runs under: its own (SetCallPolicy), else its
  // method's. Valid from the first batch on.
  const MethodPolicy& policy() const {
    return call_override_ ? call_override_->policy : method_->resolved.policy;
  }

  ClientRpcInfo* const info_;
  const std::shared_ptr<const FactoryState> factory_;
  ChannelBelow* const below_;
  const int place_;  // InterceptorPlace, read when the call was created
  // A streaming call (every type but UNARY).
  const bool stream_ = info_->type() != ClientRpcInfo::Type::UNARY;
  // Written by the first batch before Hijack()/Proceed(); later batches of
  // the same call are ordered after it by gRPC.
  CallMode mode_ = CallMode::kPassThrough;
  bool started_ = false;  // the first batch was seen
  CallPlan plan_;
  // The method's state, or, until its first call resolves it, its name.
  const MethodState* method_ = nullptr;
  std::string method_name_;
  // A shared entry's copy for this call (MethodState::ForCall), or null.
  std::shared_ptr<const MethodState> own_method_;
  std::string key_;  // the call's idempotency key
  // The call's own policy, when it set one (written by the first batch).
  std::optional<CallOverride> call_override_;
  CorrelationIds correlation_;  // the caller's ids, for trace lines
  // The server call this call is made for (server.h), if any.
  ServerCallLink server_link_;
  // The caller's deadline on the monotonic clocks, read when the call
  // starts (CallerDeadline), for every later decision.
  CallDeadline caller_deadline_;
  // kMetadataOnly, kRide: when attempt 1 started, on the injected clock.
  absl::Time own_call_started_;
  // kMetadataOnly, kRide: the breaker's admission of attempt 1.
  std::optional<Admission> admission_;
  // kRide: the request (also kMetadataOnly, for a give-up hook), the
  // application's response object and the caller's metadata. The request
  // is kept as its slices, shared with the application's call
  // (KeepRequest).
  enum class RequestKept { kNothing, kOneSlice, kSlices };
  RequestKept request_kept_ = RequestKept::kNothing;
  grpc::Slice request_slice_;
  std::vector<grpc::Slice> request_slices_;
  void* ride_response_ = nullptr;
  Metadata caller_metadata_;
  // kHijack, kFailFast: the call that parks this call's batches.
  HijackedCall* call_for_batches_ = nullptr;
  // kRide, hedged (ArmHedge): the hedge's meeting point with the call's
  // end.
  std::shared_ptr<HedgeRide> hedge_ride_;

  // A cancel may come on any thread, before or during the first batch.
  internal::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<HijackedCall> call_ ABSL_GUARDED_BY(mu_);
};

class RetryInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit RetryInterceptorFactory(std::shared_ptr<const FactoryState> state)
      : state_(std::move(state)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* info) override {
    return new RetryInterceptor(info, state_, &below_);
  }

 private:
  // Shared with every interceptor, so calls in flight outlive the factory.
  std::shared_ptr<const FactoryState> state_;
  // The channel below this factory's interceptors, kept for their calls.
  ChannelBelow below_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewRetryInterceptorFactory(std::shared_ptr<const FactoryState> state) {
  return std::make_unique<RetryInterceptorFactory>(std::move(state));
}

}  // namespace internal
}  // namespace rpcguard
