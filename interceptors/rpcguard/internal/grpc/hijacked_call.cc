// Copyright rpcguard authors.
//
// HijackedCall: the attempts and their decisions. What interrupts a call
// from outside (cancel, parent watch, credential refresh) is in
// hijacked_call_interrupts.cc; the design and state diagram in the header.

#include "rpcguard/internal/grpc/hijacked_call.h"

#include <grpcpp/support/client_callback.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/internal/grpc/attempt_call.h"
#include "rpcguard/internal/grpc/deadline.h"
#include "rpcguard/internal/grpc/sending_scope.h"

namespace rpcguard {
namespace internal {
namespace {

// The outcome of an attempt that was admitted but not sent: it tells the
// breaker and the budget nothing (kIgnored, refunded).
AttemptOutcome NeverSent() {
  AttemptOutcome o;
  o.code = grpc::StatusCode::CANCELLED;
  o.caller_cancelled = true;
  return o;
}

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

bool Replaced(const Metadata& replacements, const std::string& key) {
  for (const auto& kv : replacements) {
    if (kv.first == key) return true;
  }
  return false;
}

}  // namespace

HijackedCall::HijackedCall(std::shared_ptr<const FactoryState> factory,
                           const MethodState& method, absl::Time deadline,
                           bool may_repeat)
    : factory_(std::move(factory)),
      method_(method),
      policy_(method.resolved.policy),
      call_id_(factory_->random()->Next64()),
      caller_deadline_(deadline),
      controller_(policy_, may_repeat, deadline, factory_->clock()) {
  if (factory_->refresher()) controller_.EnableAuthRefresh();
}

void HijackedCall::Start() {
  if (hedging_) {
    StartHedged();
  } else {
    StartAttempt();
  }
}

void HijackedCall::RideFirstAttempt(std::optional<Admission> admission,
                                    void* response_object) {
  response_object_ = response_object;
  auto attempt = std::make_shared<Attempt>();
  attempt->admission = std::move(admission);
  internal::MutexLock lock(&mu_);
  attempt->deadline = controller_.StartAttempt();
  attempt_ = std::move(attempt);
  phase_ = Phase::kAttempting;
}

bool HijackedCall::OnFirstAttemptDone(InterceptorBatchMethods* batch,
                                      const grpc::ChannelInterface* channel) {
  std::shared_ptr<Attempt> attempt;
  {
    internal::MutexLock lock(&mu_);
    attempt = attempt_;
  }
  grpc::Status status = *batch->GetRecvStatus();
  if (status.ok() &&
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
  if (!status.ok()) {
    // What later attempts need, only now that there may be any. Written
    // before Decide lets a canceller or an alarm run StartAttempt.
    setup_.channel = batch->GetInterceptedChannel();
    setup_.rpc_method = &method_.RpcMethodFor(channel);
  }
  Next next = Decide(attempt, status, *batch->GetRecvTrailingMetadata(), batch);
  switch (next.kind) {
    case Next::Kind::kNothing:  // nothing else ends a riding call's attempt
    case Next::Kind::kConclude:
      Conclude(next.ending);  // no parked batch: `batch` is filled here
      FillReceivedBatch(batch, *next.ending.outcome, method_.name,
                        response_object_);
      return false;
    case Next::Kind::kRetry:
    case Next::Kind::kRefresh:
      Continue(next, status);
      return true;
  }
  return false;
}

HijackedCall::Ending HijackedCall::RefusedLocked(GiveUpReason refused,
                                                 const AttemptStart& start) {
  switch (refused) {
    case GiveUpReason::kBreakerOpen:
      return FinishLocked(
          grpc::Status(
              grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("rpcguard: ",
                           method_.breaker->RefusalMessage(*start.admission))),
          refused, nullptr);
    case GiveUpReason::kCancelled:
      return FinishLocked(cancel_status_, cancel_reason_, nullptr);
    case GiveUpReason::kBudgetExhausted:
      // The previous attempt's answer stands, as for any give-up; the
      // terminal event is the attempt that was not sent.
      return FinishLocked(last_status_, refused, last_attempt_.get());
    default:  // kDeadline
      return FinishLocked(
          grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                       absl::StrCat("deadline passed before attempt ",
                                    controller_.attempts() + 1)),
          GiveUpReason::kDeadline, nullptr);
  }
}

void HijackedCall::FailBeforeStart(const grpc::Status& status,
                                   GiveUpReason reason) {
  Ending ending;
  {
    internal::MutexLock lock(&mu_);
    ending = FinishLocked(status, reason, nullptr);
  }
  Conclude(ending);
}

void HijackedCall::Park(InterceptorBatchMethods* batch) {
  const FinalOutcome* outcome;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ != Phase::kDone) {
      parked_.push_back(batch);
      return;
    }
    outcome = outcome_;
  }
  ServeBatches({batch}, *outcome, method_.name, response_object_);
}

void HijackedCall::StartAttempt() {
  int number;
  bool cancelled;
  absl::Duration remaining;
  RetryCharge charge;
  std::optional<Admission> deferred;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
    number = controller_.attempts() + 1;
    cancelled = cancelled_;
    remaining = controller_.Remaining();
    charge = next_charge_;
    deferred = std::move(deferred_failure_);
    deferred_failure_.reset();
  }
  // Outside mu_: the breaker may call transition listeners.
  AttemptStart start =
      BeforeAttempt(number, cancelled, remaining, method_.gates(), charge);
  if (deferred.has_value()) {
    RecordDeferredFailure(method_.gates(), *deferred, start.refused);
  }
  auto attempt = std::make_shared<Attempt>();
  attempt->context = std::make_shared<grpc::ClientContext>();
  Ending ending;
  bool ended = false;
  bool give_back = false;
  bool send = false;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) {
      give_back = start.refused == GiveUpReason::kNone;
    } else {
      GiveUpReason refused = start.refused;
      if (refused == GiveUpReason::kNone && cancelled_) {
        // Cancelled while the gate was asked.
        refused = GiveUpReason::kCancelled;
        give_back = true;
      }
      switch (refused) {
        case GiveUpReason::kNone:
          attempt->admission = std::move(start.admission);
          attempt->charge = start.charge;
          attempt->wait_for_connection = next_waits_for_connection_;
          attempt->deadline = controller_.StartAttempt();
          attempt_ = attempt;
          last_attempt_.reset();
          phase_ = Phase::kSending;
          in_flight_ = shared_from_this();
          send = true;
          break;
        default:
          ending = RefusedLocked(refused, start);
          ended = true;
          break;
      }
    }
  }
  // An admitted attempt that is not sent gives its permit and its grant
  // back.
  if (give_back) {
    SettleAttempt(method_.gates(), start.charge, StatusClass::kFatal,
                  NeverSent(), /*server_said_stop=*/false);
    RecordAttemptEnd(method_.gates(), start.admission, StatusClass::kFatal,
                     NeverSent(), /*retrying=*/false);
  }
  if (ended) Conclude(ending);
  if (!send) return;

  // Held here too: the attempt may end, and release its context, before
  // this function is done with it.
  const std::shared_ptr<grpc::ClientContext> context = attempt->context;
  PrepareContext(*context, *attempt, number);
  // The callback captures only `this`, which std::function stores without
  // allocating; in_flight_ keeps this object alive until it runs.
  {
    SendingScope sending(context.get());
    StartAttemptCall(
        setup_.channel.get(), *setup_.rpc_method, context.get(),
        &setup_.request, &attempt->response,
        [this](grpc::Status status) { OnAttemptDone(std::move(status)); });
  }

  bool cancel_now;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kSending && attempt_ == attempt) {
      phase_ = Phase::kAttempting;
    }
    cancel_now = cancelled_ && attempt_ == attempt;
  }
  // A cancel that came while the attempt was being started found it not
  // yet cancellable; cancel it now.
  if (cancel_now) context->TryCancel();
}

void HijackedCall::PrepareContext(grpc::ClientContext& ctx,
                                  const Attempt& attempt, int number) {
  // From the monotonic time left, never the caller's wall-clock deadline:
  // gRPC would read that at the attempt's start, after any step since the
  // call's. On the real clock this is a conversion, not a clock read.
  ctx.set_deadline(
      GrpcDeadline(attempt.deadline, factory_->clock(), setup_.grpc_deadline));
  std::optional<RefreshedCredentials> refreshed;
  {
    internal::MutexLock lock(&mu_);
    refreshed = refreshed_;
  }
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
  ctx.AddMetadata(HeaderString<kAttemptHeader>(), absl::StrCat(number));
}

void HijackedCall::OnAttemptDone(grpc::Status status) {
  // Declared first, so destroyed last: this object may be otherwise
  // unreferenced once the application's call has been finished below.
  std::shared_ptr<HijackedCall> self;
  std::shared_ptr<Attempt> attempt;
  {
    internal::MutexLock lock(&mu_);
    self = std::move(in_flight_);
    attempt = attempt_;
  }
  Next next = Decide(attempt, status,
                     attempt->context->GetServerTrailingMetadata(), nullptr);
  switch (next.kind) {
    case Next::Kind::kNothing:
      return;
    case Next::Kind::kConclude:
      Conclude(next.ending);
      return;
    case Next::Kind::kRetry:
    case Next::Kind::kRefresh:
      Continue(next, status);
      return;
  }
}

HijackedCall::Next HijackedCall::Decide(
    const std::shared_ptr<Attempt>& attempt, const grpc::Status& status,
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
    InterceptorBatchMethods* hold) {
  Pushback pushback;
  if (!status.ok()) {
    auto it = trailers.find(kPushbackTrailer);
    if (it != trailers.end()) {
      pushback = ParsePushback(
          absl::string_view(it->second.data(), it->second.size()));
    }
    pushback.min_delay = ParseRetryInfo(status.error_details());
  }
  const bool server_said_stop = pushback.kind == Pushback::Kind::kStop;
  const bool server_pushback =
      pushback.kind != Pushback::Kind::kNone || pushback.min_delay.has_value();
  AttemptEnd end;
  end.code = status.error_code();
  end.local_error = IsLocalError(status.error_code(), status.error_message());
  // The words alone could be a server's; a READY channel had a connection
  // to send on.
  end.not_sent = !end.local_error &&
                 IsNotSent(status.error_code(), status.error_message()) &&
                 setup_.channel != nullptr &&
                 setup_.channel->GetState(false) != GRPC_CHANNEL_READY;
  // An explicit fail-fast, the caller's or the config's, is kept.
  end.may_wait = policy_.wait_for_ready.value_or(true) &&
                 setup_.caller.wait_for_ready.value_or(true);
  AttemptOutcome outcome;
  {
    internal::MutexLock lock(&mu_);
    end.caller_cancelled = cancelled_;
    outcome = controller_.OutcomeOf(end);
  }
  const StatusClass status_class = policy_.MakeClassifier().Classify(outcome);
  // Outside mu_: the throttle and budget are shared.
  const bool throttle_allows =
      SettleAttempt(method_.gates(), attempt->charge, status_class, outcome,
                    server_said_stop);

  Next next;
  Decision d;
  d.outcome = outcome;
  d.status_class = status_class;
  {
    internal::MutexLock lock(&mu_);
    attempt_.reset();
    if (phase_ != Phase::kDone) {
      RandomBitGen gen(factory_->random());
      end.caller_cancelled = cancelled_;
      const Decision raw = controller_.OnAttemptEnd(end, pushback, gen);
      const RetryCharge charge = RetryChargeFor(raw.outcome, server_pushback);
      d = GateRetry(raw, throttle_allows, method_.gates(), charge);
      next = NextLocked(d, charge, attempt, status, hold);
    }
  }
  // The destination hears of the attempt now that it is known whether the
  // call retries (retry_gate.h), and before the next attempt can start;
  // outside mu_: a breaker transition calls listeners on this thread.
  RecordAttemptEnd(method_.gates(), attempt->admission, d.status_class,
                   d.outcome, next.kind == Next::Kind::kRetry);
  return next;
}

HijackedCall::Next HijackedCall::NextLocked(
    const Decision& d, RetryCharge charge,
    const std::shared_ptr<Attempt>& attempt, const grpc::Status& status,
    InterceptorBatchMethods* hold) {
  Next next;
  switch (d.action) {
    case Decision::Action::kRefreshAuth:
      next.kind = Next::Kind::kRefresh;
      phase_ = Phase::kRefreshing;
      next.deadline = controller_.deadline();
      if (next.deadline != absl::InfiniteFuture()) {
        refresh_alarm_ = std::make_unique<grpc::Alarm>();
      }
      break;
    case Decision::Action::kRetry:
      next.kind = Next::Kind::kRetry;
      phase_ = Phase::kBackoffPending;
      next.backoff_until = factory_->clock()->MonotonicNow() + d.delay;
      backoff_alarm_ = std::make_unique<grpc::Alarm>();
      next_charge_ = charge;
      next_waits_for_connection_ = d.wait_for_connection;
      deferred_failure_ = attempt->admission;
      break;
    case Decision::Action::kDone:
    case Decision::Action::kGiveUp: {
      const bool by_cancel = cancelled_ && !status.ok();
      next.kind = Next::Kind::kConclude;
      next.ending =
          FinishLocked(by_cancel ? cancel_status_ : status,
                       by_cancel ? cancel_reason_ : d.reason, attempt.get(),
                       TraceEvent::Kind::kAttempt, d.status_class);
      return next;
    }
  }
  // The call goes on: its last answer stands if the next attempt is
  // refused or the refresh fails.
  last_status_ = status;
  last_attempt_ = attempt;
  if (hold != nullptr) parked_.push_back(hold);
  next.event.attempt = controller_.attempts();
  next.event.status_class = d.status_class;
  next.event.backoff = d.delay;
  next.event.deadline_left = controller_.Remaining();
  return next;
}

void HijackedCall::Continue(Next& next, const grpc::Status& status) {
  WatchParent();
  TraceEvent& event = next.event;
  event.time = factory_->clock()->WallNow();
  event.call_id = call_id_;
  event.code = status.error_code();
  event.decision = TraceDecision::kRetry;
  factory_->Emit(method_, event, [&](TraceEvent& e) {
    e.method = method_.name;
    e.idempotency_key = setup_.idempotency_key;
    e.message = status.error_message();
    FactoryState::FillBreaker(method_, e);
  });
  if (next.kind == Next::Kind::kRefresh) {
    BeginRefresh(next.deadline);
    return;
  }

  std::weak_ptr<HijackedCall> weak = weak_from_this();
  grpc::Alarm* alarm = backoff_alarm_.get();
  alarm->Set(
      GrpcDeadline(next.backoff_until, factory_->clock(), setup_.grpc_deadline),
      [weak](bool) {
        if (auto self = weak.lock()) self->StartAttempt();
      });
  bool cancel_now;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kBackoffPending) phase_ = Phase::kBackingOff;
    cancel_now = cancelled_;
  }
  // A cancel during the backoff: end it now rather than when it expires.
  if (cancel_now) alarm->Cancel();
}

HijackedCall::Ending HijackedCall::FinishLocked(const grpc::Status& status,
                                                GiveUpReason reason,
                                                Attempt* last,
                                                TraceEvent::Kind kind,
                                                StatusClass status_class) {
  phase_ = Phase::kDone;
  FinalOutcome* out = &final_;
  const int attempts = controller_.attempts();
  TraceEvent& terminal = out->terminal;
  terminal.kind = kind;
  terminal.attempt =
      kind == TraceEvent::Kind::kAttempt ? attempts : attempts + 1;
  terminal.code = status.error_code();
  terminal.status_class = status.ok() ? StatusClass::kOk : status_class;
  terminal.decision =
      status.ok() ? TraceDecision::kDone : TraceDecision::kGiveUp;
  terminal.reason = status.ok()                     ? GiveUpReason::kNone
                    : reason == GiveUpReason::kNone ? GiveUpReason::kFatal
                                                    : reason;
  terminal.deadline_left = controller_.Remaining();
  terminal.message = status.error_message();
  out->attempts = attempts;
  // A success carries no message; its attempts are in the trailer.
  out->status = status.ok()
                    ? status
                    : grpc::Status(status.error_code(),
                                   AnnotateMessage(status.error_message(),
                                                   attempts, reason),
                                   status.error_details());
  out->attempts_text = absl::StrCat(attempts);
  out->from_app_call = last != nullptr && last->context == nullptr;
  if (last != nullptr && last->context != nullptr) {
    out->response.Swap(&last->response);
    CopyMetadata(last->context->GetServerInitialMetadata(),
                 &out->initial_metadata);
    CopyMetadata(last->context->GetServerTrailingMetadata(),
                 &out->trailing_metadata);
    // Before the application's call completes, which is when it may read.
    if (setup_.app_context != nullptr) {
      DescribeFinalAttempt(*last->context, setup_.app_context);
    }
    // Everything needed is copied: let the attempt's context (and its
    // channel reference) go now, while the application's call still holds
    // the channel (see Attempt::context).
    last->context.reset();
  }
  last_attempt_.reset();
  outcome_ = out;
  Ending ending;
  ending.outcome = out;
  ending.batches.swap(parked_);
  ending.parent_watch = std::move(parent_watch_);
  return ending;
}

void HijackedCall::Conclude(const Ending& ending) {
  if (ending.parent_watch != nullptr) ending.parent_watch->Stop();
  const FinalOutcome& outcome = *ending.outcome;
  TraceEvent e = outcome.terminal;
  e.time = factory_->clock()->WallNow();
  e.call_id = call_id_;
  factory_->Emit(method_, e, [&](TraceEvent& event) {
    event.method = method_.name;
    event.idempotency_key = setup_.idempotency_key;
    FactoryState::FillBreaker(method_, event);
  });
  if (e.decision == TraceDecision::kGiveUp) {
    factory_->ReportGiveUp(method_, e, outcome.attempts, setup_.idempotency_key,
                           setup_.request);
  }
  ServeBatches(ending.batches, outcome, method_.name, response_object_);
}

}  // namespace internal
}  // namespace rpcguard
