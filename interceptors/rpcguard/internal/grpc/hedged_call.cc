// Copyright rpcguard authors.
//
// HijackedCall, continued: a hedged call (CallPlan::hedge). Copies of the
// call run side by side under the method's hedgingPolicy; the decisions are
// HedgeController's (decision/hedging.h), and this file only carries them
// out: send a copy, arm the hedge timer, end the call with the copy that
// decided it and cancel the others. The machinery shared with retried calls
// (the attempts' contexts, the outcome, the parked batches, the caller's
// cancel) is in hijacked_call.cc and hijacked_call_interrupts.cc.
//
// What the destination hears: the first copy is admitted by the breaker and
// earns retry and hedge budget as a first attempt does; every further copy
// needs the breaker's admission and a budget's grant, and is refused, never
// delayed, without them: a copy sent while others run is extra load, paid
// by the hedge budget (maxExtraLoad); one that replaces a failed copy is a
// retry in all but name, paid by the retry budget (refunded if it works). A
// copy cancelled because another decided the call tells the breaker nothing; a
// copy that failed while the call went on is left to the call's final result,
// as a retried failure is. Only the first copy's latency feeds the adaptive
// delay (see OnCopyDone).

#include <grpcpp/alarm.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpcguard/internal/grpc/attempt_call.h"
#include "rpcguard/internal/grpc/deadline.h"
#include "rpcguard/internal/grpc/hijacked_call.h"
#include "rpcguard/internal/grpc/sending_scope.h"

namespace rpcguard {
namespace internal {
namespace {

// Drops a copy that ended after its call did, on one of gRPC's executor
// threads. The copy's context may hold the last reference to the
// application's channel, and a channel destroyed on the callback thread
// running the copy's completion can take gRPC's callback queue, and the
// threads that serve it, down from under that thread (ASan: double free in
// grpc_cq_internal_unref). Only copies cancelled or outrun pay for this
// alarm.
void ReleaseOnExecutor(std::shared_ptr<grpc::ClientContext> context) {
  if (context == nullptr) return;
  auto* alarm = new grpc::Alarm;
  // A deadline in the past: runs at once. The alarm's own state outlives
  // its callback, which may delete it.
  alarm->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC),
             [alarm, context = std::move(context)](bool) mutable {
               context.reset();
               delete alarm;
             });
}

}  // namespace

void HijackedCall::StartHedged() {
  bool cancelled;
  absl::Duration remaining;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
    const HedgingPolicy& policy = *policy_.hedging;
    hedge_.emplace(policy, HedgeDelay(policy, method_.latency.get()),
                   controller_.deadline(), factory_->clock(),
                   policy_.min_attempt_time);
    cancelled = cancelled_;
    remaining = controller_.Remaining();
  }
  // Outside mu_: the breaker may call transition listeners.
  AttemptStart start = BeforeAttempt(1, cancelled, remaining, method_.gates());
  if (start.refused != GiveUpReason::kNone) {
    Ending ending;
    {
      internal::MutexLock lock(&mu_);
      ending = RefusedLocked(start.refused, start);
    }
    Conclude(ending);
    return;
  }
  if (method_.hedge_budget != nullptr) {
    method_.hedge_budget->RecordFirstAttempt();
  }
  absl::Time timer;
  {
    internal::MutexLock lock(&mu_);
    timer = hedge_->Start();
  }
  SendCopy(1, std::move(start.admission), std::nullopt);
  if (timer != absl::InfiniteFuture()) {
    // The deadline timer waits for the first hedge timer (which never fires
    // after the deadline): most calls end before it, and pay for neither.
    ArmHedgeTimer(timer);
  } else {
    ArmDeadlineTimer();
  }
}

void HijackedCall::ArmDeadlineTimer() {
  // Core ends each copy at the caller's deadline, but a copy's ending reaches
  // rpcguard through gRPC's callback queue, whose threads (gRPC 1.51's
  // CallbackAlternativeCQ) sleep 100 ms after a second without events: the
  // call would end that much late. A timer on the real clock keeps the
  // deadline instead (with an injected clock, the copies' endings do).
  if (factory_->clock() != Clock::Real() ||
      setup_.grpc_deadline == absl::InfiniteFuture()) {
    return;
  }
  {
    internal::MutexLock lock(&mu_);
    if (deadline_timer_armed_ || phase_ == Phase::kDone) return;
    deadline_timer_armed_ = true;
  }
  {
    TimerQueue* timers = factory_->hedge_timers();
    const TimerQueue::Handle handle = timers->Schedule(
        setup_.grpc_deadline, weak_from_this(), [](void* call) {
          static_cast<HijackedCall*>(call)->OnHedgedDeadline();
        });
    bool done;
    {
      internal::MutexLock lock(&mu_);
      done = phase_ == Phase::kDone;
      if (!done) hedge_timers_.push_back(handle);
    }
    if (done) timers->Cancel(handle);
  }
}

void HijackedCall::OnHedgedDeadline() {
  const Attempt* keep;
  {
    internal::MutexLock lock(&mu_);
    // No copy out (waiting out a pushback): the hedge timer, which never
    // fires after the deadline, ends the call.
    if (phase_ == Phase::kDone || cancelled_ || copies_.empty()) return;
    // The oldest copy is left to end by its own deadline and to be counted
    // as the call's failure, as when its ending decides the call; the others
    // are cancelled as losers.
    keep = copies_.front().get();
  }
  EndHedged(
      grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
      GiveUpReason::kDeadline, nullptr, StatusClass::kRetriable, keep);
}

bool HijackedCall::SendCopy(int number, std::optional<Admission> admission,
                            std::optional<RetryCharge> charge) {
  auto copy = std::make_shared<Attempt>();
  copy->context = std::make_shared<grpc::ClientContext>();
  copy->admission = std::move(admission);
  copy->charge = charge;
  copy->number = number;
  bool send = false;
  {
    internal::MutexLock lock(&mu_);
    // No copy after the caller's cancel (its deferred half ends the call).
    if (phase_ != Phase::kDone && !cancelled_) {
      copy->deadline = controller_.StartAttempt();
      copy->sent = factory_->clock()->MonotonicNow();
      if (number == 1) first_copy_sent_ = copy->sent;
      copies_.push_back(copy);
      ++copies_sending_;
      phase_ = Phase::kAttempting;
      // Held while any copy runs: each copy's callback has a raw pointer.
      if (in_flight_ == nullptr) in_flight_ = shared_from_this();
      send = true;
    }
  }
  if (!send) {
    // Decided meanwhile (another copy won): the admission and the grant go
    // back.
    AttemptOutcome never_sent;
    never_sent.code = grpc::StatusCode::CANCELLED;
    never_sent.caller_cancelled = true;  // tells the breaker nothing
    SettleAttempt(method_.gates(), copy->charge, StatusClass::kFatal,
                  never_sent, /*server_said_stop=*/false);
    RecordAttemptEnd(method_.gates(), copy->admission, StatusClass::kFatal,
                     never_sent, /*retrying=*/false);
    return false;
  }
  std::shared_ptr<grpc::ClientContext> context = copy->context;
  PrepareContext(*context, *copy, number);
  Attempt* raw = copy.get();
  {
    SendingScope sending(context.get());
    StartAttemptCall(setup_.channel.get(), *setup_.rpc_method, context.get(),
                     &setup_.request, &copy->response,
                     [this, raw](grpc::Status status) {
                       OnCopyDone(raw, std::move(status));
                     });
  }
  bool cancel_now;
  std::optional<Ending> ending;
  {
    internal::MutexLock lock(&mu_);
    // The call was decided, or cancelled, while this copy was started.
    cancel_now = cancelled_ || phase_ == Phase::kDone;
    if (cancel_now) copy->loser = !cancelled_;
    if (--copies_sending_ == 0) ending.swap(deferred_ending_);
  }
  if (cancel_now) context->TryCancel();
  if (ending.has_value()) {
    // Decided while this copy was being started: its context now holds the
    // channel, so the application may have the result. Not through this
    // frame's references: the copy may end, and be released, meanwhile.
    context.reset();
    copy.reset();
    Conclude(*ending);
  }
  return true;
}

void HijackedCall::TraceHedgeSent(int number) {
  TraceEvent event;
  event.kind = TraceEvent::Kind::kHedge;
  event.time = factory_->clock()->WallNow();
  event.call_id = call_id_;
  event.attempt = number;
  event.decision = TraceDecision::kHedge;
  const absl::Time now = factory_->clock()->MonotonicNow();
  {
    internal::MutexLock lock(&mu_);
    event.backoff = now - first_copy_sent_;
    event.deadline_left = controller_.Remaining();
  }
  factory_->Emit(method_, event, [&](TraceEvent& e) {
    e.method = method_.name;
    e.idempotency_key = setup_.idempotency_key;
    FactoryState::FillBreaker(method_, e);
  });
}

void HijackedCall::OnCopyDone(Attempt* raw, grpc::Status status) {
  std::shared_ptr<HijackedCall> self;
  std::shared_ptr<Attempt> copy;
  Pushback pushback;
  if (!status.ok()) {
    const auto& trailers = raw->context->GetServerTrailingMetadata();
    auto it = trailers.find(kPushbackTrailer);
    if (it != trailers.end()) {
      pushback = ParsePushback(
          absl::string_view(it->second.data(), it->second.size()));
    }
    pushback.min_delay = ParseRetryInfo(status.error_details());
  }
  HedgeController::Step step;
  AttemptOutcome outcome;
  StatusClass status_class = StatusClass::kOk;
  bool decided_before = false;
  {
    internal::MutexLock lock(&mu_);
    // Held to the end of this function: while this copy was in copies_,
    // in_flight_ kept the call alive, but once it is out another copy's
    // ending (or the application's call completing) may drop the rest.
    self = in_flight_;
    auto it = std::find_if(copies_.begin(), copies_.end(),
                           [raw](const auto& c) { return c.get() == raw; });
    if (it != copies_.end()) {
      copy = std::move(*it);
      copies_.erase(it);
    }
    if (copies_.empty()) in_flight_.reset();
    AttemptEnd end;
    end.code = status.error_code();
    end.caller_cancelled = cancelled_;
    end.local_error = IsLocalError(end.code, status.error_message());
    outcome = controller_.OutcomeOf(end);
    // A copy rpcguard cancelled because another decided the call says
    // nothing of the server.
    if (copy != nullptr && copy->loser) outcome.caller_cancelled = true;
    status_class = policy_.MakeClassifier().Classify(outcome);
    decided_before = phase_ == Phase::kDone;
    if (!decided_before && hedge_.has_value()) {
      step = hedge_->OnCopyEnd(copy != nullptr ? copy->number : 0,
                               status.error_code(), pushback, cancelled_,
                               /*allowed=*/true);
      // The server stopped the copies, or asked for a delay that cannot be
      // waited out: that is why the call ends, once nothing is in flight.
      if (hedge_->server_stop() != GiveUpReason::kNone) {
        hedge_stop_ = hedge_->server_stop();
      }
    }
  }
  if (copy == nullptr) return;
  // The destination: a grant on credit is settled, the A6 throttle counts
  // the copy; the final copy's result is the call's, and a failure the call
  // goes on from is left to what follows, as a retried failure is.
  SettleAttempt(method_.gates(), copy->charge, status_class, outcome,
                pushback.kind == Pushback::Kind::kStop);
  RecordAttemptEnd(method_.gates(), copy->admission, status_class, outcome,
                   /*retrying=*/!decided_before && !step.done);
  // The adaptive delay learns from each call's first copy only (a later
  // copy's latency, counted from its own start, says nothing of when to
  // hedge): its latency when it won, or, when another copy won and this one
  // was cancelled, how long it had run (a lower bound, RecordAtLeast).
  if (copy->number == 1 && method_.latency != nullptr) {
    const absl::Duration ran = factory_->clock()->MonotonicNow() - copy->sent;
    if (decided_before && copy->loser) {
      method_.latency->RecordAtLeast(ran);
    } else if (!decided_before && step.done && status.ok()) {
      method_.latency->Record(ran);
    }
  }
  if (decided_before) {
    ReleaseOnExecutor(std::move(copy->context));
    return;
  }
  if (step.done) {
    GiveUpReason reason = GiveUpReason::kNone;
    if (!status.ok()) {
      internal::MutexLock lock(&mu_);
      reason = cancelled_                        ? cancel_reason_
               : outcome.caller_deadline_expired ? GiveUpReason::kDeadline
               : status_class != StatusClass::kRetriable ||
                       !policy_.hedging->non_fatal_codes.Contains(
                           status.error_code())
                   ? (outcome.local_error ? GiveUpReason::kLocalError
                                          : GiveUpReason::kFatal)
                   : hedge_stop_;
    }
    EndHedged(status, reason, copy, status_class);
    return;
  }
  {
    internal::MutexLock lock(&mu_);
    // The call goes on: this failure stands if nothing better comes.
    last_status_ = status;
    last_attempt_ = copy;
  }
  // The copy's end, for the trace: the call goes on with other copies.
  TraceEvent event;
  event.time = factory_->clock()->WallNow();
  event.call_id = call_id_;
  event.attempt = copy->number;
  event.code = status.error_code();
  event.status_class = status_class;
  event.decision = TraceDecision::kHedge;
  event.backoff = step.send || step.next_timer == absl::InfiniteFuture()
                      ? absl::ZeroDuration()
                      : step.next_timer - factory_->clock()->MonotonicNow();
  {
    internal::MutexLock lock(&mu_);
    event.deadline_left = controller_.Remaining();
  }
  factory_->Emit(method_, event, [&](TraceEvent& e) {
    e.method = method_.name;
    e.idempotency_key = setup_.idempotency_key;
    e.message = status.error_message();
    FactoryState::FillBreaker(method_, e);
  });
  if (step.send) {
    SendAskedCopy(
        RetryChargeFor(outcome, pushback.kind != Pushback::Kind::kNone ||
                                    pushback.min_delay.has_value()));
  }
  if (step.next_timer != absl::InfiniteFuture()) {
    ArmHedgeTimer(step.next_timer);
    bool idle;
    {
      internal::MutexLock lock(&mu_);
      idle = copies_.empty() && phase_ != Phase::kDone;
    }
    // Waiting out a pushback with no copy in flight: no copy carries the
    // parent call (core would end it with the parent), so watch the parent
    // directly, as a retried call does in its backoff.
    if (idle) WatchParent();
  }
}

void HijackedCall::SendAskedCopy(std::optional<RetryCharge> replaces) {
  int number;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone || !hedge_.has_value()) return;
    number = hedge_->started();
  }
  // The destination's say: the breaker admits it, and a budget grants it,
  // or it is not sent (hedges never wait). A copy sent while others run is
  // extra load: the hedge budget pays. A copy that replaces a failed one is
  // a retry in all but name: the retry budget pays, as `replaces` says
  // (refunded if it succeeds).
  std::optional<Admission> admission;
  GiveUpReason refused = GiveUpReason::kNone;
  if (method_.breaker != nullptr) {
    admission = method_.breaker->Admit();
    if (!admission->allowed()) refused = GiveUpReason::kBreakerOpen;
  }
  RetryBudget* budget =
      replaces.has_value() ? method_.budget.get() : method_.hedge_budget.get();
  const RetryCharge charge = replaces.value_or(RetryCharge::kUpFront);
  if (refused == GiveUpReason::kNone && budget != nullptr &&
      !budget->TryAcquireRetry(charge)) {
    refused = GiveUpReason::kBudgetExhausted;
    if (admission.has_value()) {
      method_.breaker->Record(*admission, AttemptResult::kIgnored);
    }
  }
  if (refused == GiveUpReason::kNone) {
    std::optional<RetryCharge> retry_charge;
    if (replaces.has_value() && budget != nullptr) retry_charge = charge;
    if (SendCopy(number, std::move(admission), retry_charge)) {
      TraceHedgeSent(number);
    }
    return;
  }
  HedgeController::Step step;
  grpc::Status last;
  std::shared_ptr<Attempt> last_copy;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
    hedge_stop_ = refused;
    step = hedge_->OnRefused(/*hedge=*/!replaces.has_value());
    last = last_status_;
    last_copy = last_attempt_;
  }
  if (step.done) EndHedged(last, refused, last_copy, StatusClass::kRetriable);
}

void HijackedCall::OnHedgeTimer() {
  ArmDeadlineTimer();
  HedgeController::Step step;
  grpc::Status last;
  std::shared_ptr<Attempt> last_copy;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone || !hedge_.has_value() || cancelled_) return;
    step = hedge_->OnTimer(/*allowed=*/true);
    last = last_status_;
    last_copy = last_attempt_;
  }
  if (step.done) {
    GiveUpReason reason;
    {
      internal::MutexLock lock(&mu_);
      reason = controller_.Remaining() <= absl::ZeroDuration()
                   ? GiveUpReason::kDeadline
                   : hedge_stop_;
    }
    EndHedged(last, reason, last_copy, StatusClass::kRetriable);
    return;
  }
  if (step.send) SendAskedCopy(std::nullopt);
  if (step.next_timer != absl::InfiniteFuture()) ArmHedgeTimer(step.next_timer);
}

void HijackedCall::ArmHedgeTimer(absl::Time when) {
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
  }
  // The queue runs on gRPC's monotonic clock: on the real clock (the usual
  // case) `when` is on it already.
  const absl::Time at =
      std::min(OnGrpcClock(when, factory_->clock()), setup_.grpc_deadline);
  TimerQueue* timers = factory_->hedge_timers();
  const TimerQueue::Handle handle = timers->Schedule(
      at, weak_from_this(),
      [](void* call) { static_cast<HijackedCall*>(call)->OnHedgeTimer(); });
  bool done;
  {
    internal::MutexLock lock(&mu_);
    done = phase_ == Phase::kDone;
    if (!done) hedge_timers_.push_back(handle);
  }
  // Decided meanwhile: EndHedged did not see this timer.
  if (done) timers->Cancel(handle);
}

void HijackedCall::EndHedged(const grpc::Status& status, GiveUpReason reason,
                             const std::shared_ptr<Attempt>& copy,
                             StatusClass status_class, const Attempt* keep) {
  Ending ending;
  std::vector<std::shared_ptr<grpc::ClientContext>> losers;
  absl::InlinedVector<TimerQueue::Handle, 2> timers;
  int copies = 0;
  absl::Duration delay;
  bool deferred = false;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
    copies = controller_.attempts();
    delay = hedge_.has_value() ? hedge_->delay() : absl::ZeroDuration();
    // The terminal line names the copy that decided the call and those it
    // cancels (FinishLocked leaves these two fields alone).
    final_.terminal.copy = copy != nullptr   ? copy->number
                           : keep != nullptr ? keep->number
                                             : 0;
    final_.terminal.cancelled.clear();
    for (const auto& other : copies_) {
      if (other.get() == keep) continue;
      other->loser = true;
      if (other->context != nullptr) losers.push_back(other->context);
      final_.terminal.cancelled.push_back(other->number);
    }
    std::sort(final_.terminal.cancelled.begin(),
              final_.terminal.cancelled.end());
    timers.swap(hedge_timers_);
    const bool by_cancel = cancelled_ && !status.ok();
    ending = FinishLocked(
        by_cancel ? cancel_status_ : status,
        by_cancel ? cancel_reason_ : reason,
        copy != nullptr && copy->context != nullptr ? copy.get() : nullptr,
        TraceEvent::Kind::kAttempt, status_class);
  }
  // Outside mu_: a cancelled copy may end on this thread.
  for (const auto& context : losers) context->TryCancel();
  // Before the application has the result: see ReleaseOnExecutor.
  const int cancelled = static_cast<int>(losers.size());
  losers.clear();
  for (const auto& timer : timers) factory_->hedge_timers()->Cancel(timer);
  factory_->stats()->RecordHedgedCall(
      method_.stats, copies, status.ok() && copy != nullptr && copy->number > 1,
      cancelled, delay);
  {
    internal::MutexLock lock(&mu_);
    // A copy is being started on the application's channel, to which it
    // holds only a raw pointer until the copy's context has the channel: the
    // application must not have the result (and destroy the channel) before
    // then, so that copy's SendCopy concludes the call.
    if (copies_sending_ > 0) {
      deferred_ending_ = ending;
      deferred = true;
    }
  }
  if (!deferred) Conclude(ending);
}

void HijackedCall::CancelHedged() {
  std::vector<std::shared_ptr<grpc::ClientContext>> copies;
  absl::InlinedVector<TimerQueue::Handle, 2> timers;
  Ending ending;
  bool end_now = false;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ == Phase::kDone) return;
    for (const auto& copy : copies_) copies.push_back(copy->context);
    timers.swap(hedge_timers_);
    // Nothing in flight (waiting out a server's pushback): end it now;
    // otherwise the copies' CANCELLED endings do.
    if (copies_.empty()) {
      ending = FinishLocked(cancel_status_, cancel_reason_, nullptr);
      end_now = true;
    }
  }
  for (const auto& context : copies) context->TryCancel();
  for (const auto& timer : timers) factory_->hedge_timers()->Cancel(timer);
  if (end_now) Conclude(ending);
}

}  // namespace internal
}  // namespace rpcguard
