// Copyright rpcguard authors.
//
// CallEngine: the design and the states are in the header.
//
// One file on purpose, though it is over 600 lines: it is one state machine
// whose events run one at a time on the call's serializer, and its value is
// that every transition (send, an attempt's end, a timer, a refusal, the
// refresh, the cancel, the finish) reads in one place, against the same
// members, in the order the header's diagram draws them. Split by event,
// the copies of a call's rules that the engine replaced would start to grow
// back. A stream's own events run on the same serializer (stream_flow.h)
// and tell the engine one fact, the commit: not a second machine. Reading
// order: Run and TakeCancel (how events run), SendAttempt and Refused
// (sending), HandleAttemptEnd (an attempt's end), HandleTimer, Act, Arm and
// ArmDeadline (timers), Cancel, HandleParentEnded and DoCancel (the
// cancel), EndRefresh, then Finish and Conclude (the one finish).

#include "rpcguard/internal/engine/call_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace rpcguard {
namespace internal {
namespace {

// RPCGUARD_TRACE=engine: on or off, and where lines go (stderr unless a
// test set a sink). Built once; never destroyed.
struct EngineTrace {
  std::atomic<bool> on{false};
  absl::Mutex mu;
  std::function<void(absl::string_view)> sink ABSL_GUARDED_BY(mu);
};

bool EnvironmentSaysEngine() {
  const char* env = std::getenv("RPCGUARD_TRACE");
  if (env == nullptr) return false;
  for (absl::string_view name : absl::StrSplit(env, ',')) {
    if (absl::StripAsciiWhitespace(name) == "engine") return true;
  }
  return false;
}

EngineTrace& GetEngineTrace() {
  static EngineTrace* const trace = [] {
    auto* t = new EngineTrace;
    t->on.store(EnvironmentSaysEngine(), std::memory_order_relaxed);
    return t;
  }();
  return *trace;
}

void WriteEngineTrace(absl::string_view line) {
  EngineTrace& t = GetEngineTrace();
  absl::MutexLock lock(&t.mu);
  if (t.sink) {
    t.sink(line);
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  }
}

}  // namespace

absl::string_view EngineStateName(EngineState state) {
  switch (state) {
    case EngineState::kIdle:
      return "idle";
    case EngineState::kSending:
      return "sending";
    case EngineState::kInFlight:
      return "in_flight";
    case EngineState::kWaiting:
      return "waiting";
    case EngineState::kRefreshing:
      return "refreshing";
    case EngineState::kDone:
      break;
  }
  return "done";
}

void SetEngineTraceForTest(std::function<void(absl::string_view)> sink) {
  EngineTrace& t = GetEngineTrace();
  absl::MutexLock lock(&t.mu);
  t.on.store(sink != nullptr || EnvironmentSaysEngine(),
             std::memory_order_relaxed);
  t.sink = std::move(sink);
}

void CallEngine::Note(absl::string_view event, int attempt) {
  const EngineState next = done_                ? EngineState::kDone
                           : refreshing_        ? EngineState::kRefreshing
                           : sending_           ? EngineState::kSending
                           : !attempts_.empty() ? EngineState::kInFlight
                           : first_sent_ == absl::InfinitePast()
                               ? EngineState::kIdle
                               : EngineState::kWaiting;
  const EngineState from = state_.load(std::memory_order_relaxed);
  if (next == from) return;
  state_.store(next, std::memory_order_release);
  if (!GetEngineTrace().on.load(std::memory_order_relaxed)) return;
  WriteEngineTrace(absl::StrFormat(
      "rpcguard engine: call=%x attempt=%d %s -> %s on %s", call_id_, attempt,
      EngineStateName(from), EngineStateName(next), event));
}

CallEngine::CallEngine(CallIo* io, const EngineEnv& env,
                       const MethodPolicy& policy,
                       std::optional<TraceVerbosity> verbosity,
                       absl::Time deadline, bool may_repeat, bool hedging,
                       uint64_t call_id, std::optional<GiveUpReason> sent_once)
    : io_(io),
      env_(env),
      policy_(policy),
      verbosity_(verbosity),
      call_id_(call_id),
      controller_(policy_, may_repeat, deadline, env.clock),
      deadline_(controller_.deadline()),
      policy_impl_(ChoosePolicy(may_repeat, hedging, sent_once)) {
  // One attempt: no refresh, which would send a second.
  if (env_.can_refresh && !sent_once) controller_.EnableAuthRefresh();
}

AttemptPolicy* CallEngine::ChoosePolicy(bool may_repeat, bool hedging,
                                        std::optional<GiveUpReason> sent_once) {
  if (sent_once) {
    once_.emplace(&controller_, may_repeat, *sent_once);
    return &*once_;
  }
  if (hedging && policy_.hedging.has_value()) {
    const HedgingPolicy& hedge = *policy_.hedging;
    hedge_.emplace(hedge, HedgeDelay(hedge, env_.latency), &controller_,
                   env_.clock, policy_.min_attempt_time, env_.hedge_budget);
    return &*hedge_;
  }
  retry_.emplace(&controller_, env_.gates);
  return &*retry_;
}

template <typename F>
void CallEngine::Run(F&& event) {
  // No hold per event: the caller keeps the glue alive while its event runs
  // (the application's batch not yet served, an attempt's or a timer's
  // callback holding it); an event after which it may go (the last batch
  // served, the last attempt's hold let go) hands the drain a reference
  // (Serializer::KeepAlive).
  serializer_.Run(std::forward<F>(event));
}

bool CallEngine::TakeCancel() {
  if (!cancelled_ && !done_ &&
      cancel_requested_.load(std::memory_order_acquire)) {
    cancelled_ = true;
    caller_cancelled_ = true;
    cancel_status_ = CancelledByCaller();
    cancel_reason_ = GiveUpReason::kCancelled;
  }
  return cancelled_;
}

void CallEngine::CommitInEvent(CommitReason reason) {
  if (done_ || commit_.has_value()) return;
  commit_ = reason;
}

void CallEngine::Commit(CommitReason reason) {
  Run([this, reason] { CommitInEvent(reason); });
}

void CallEngine::Start() {
  Run([this] { SendAttempt(SendKind::kFirst, std::nullopt); });
}

std::shared_ptr<EngineAttempt> CallEngine::RideFirstAttempt(
    std::optional<Admission> admission, absl::Time sent,
    std::shared_ptr<void> app_call) {
  // The application's call has its own context and response: the glue's
  // attempt (NewAttempt) would build both for nothing.
  auto attempt = std::make_shared<EngineAttempt>();
  attempt->admission = std::move(admission);
  attempt->app_call = true;
  attempt->number = 1;
  attempt->sent = sent;
  // Still running: cancelled through this handle if another copy wins.
  attempt->context = std::move(app_call);
  // Its end comes after this event, which joins it to the list.
  Run([this, attempt] {
    attempt->deadline = controller_.StartAttempt();
    attempts_seen_.store(controller_.attempts(), std::memory_order_release);
    first_sent_ = attempt->sent;
    attempts_.push_back(attempt);
    // The policy counts attempt 1 from when it was sent; a hedge it would
    // time from then is asked for by the glue (OnTimer), not armed here.
    policy_impl_->Start(first_sent_);
    Note("ride", 1);
  });
  return attempt;
}

void CallEngine::FailBeforeStart(grpc::Status status, GiveUpReason reason) {
  Run([this, status = std::move(status), reason] {
    if (done_) return;
    Actions a;
    Finish(status, reason, nullptr, TraceEvent::Kind::kFailFast,
           StatusClass::kFatal, a);
    Act(a);
  });
}

void CallEngine::Park(Batches::value_type batch) {
  Run([this, batch] { ParkOrServe(batch); });
}

void CallEngine::ParkOrServe(Batches::value_type batch) {
  if (!done_) {
    parked_.push_back(batch);
    return;
  }
  // The application may destroy its call once this batch is served.
  if (in_flight_ == nullptr && !serializer_.keeping_alive()) {
    serializer_.KeepAlive(io_->Hold());
  }
  io_->ServeDecided(*outcome_, Batches{batch});
}

void CallEngine::SendAttempt(SendKind kind,
                             std::optional<RetryCharge> replaces) {
  if (done_) return;
  const bool first = kind == SendKind::kFirst;
  const int number = first ? 1 : policy_impl_->NextNumber();
  std::optional<Admission> deferred = std::move(deferred_failure_);
  deferred_failure_.reset();
  // Built before the gate is asked, so that a cancel that comes meanwhile
  // is seen by the gate, the last look before the send.
  std::shared_ptr<EngineAttempt> attempt = io_->NewAttempt();
  const bool cancelled = TakeCancel();
  // One clock read for the gate and the attempt's start.
  const absl::Time now = Now();
  const absl::Duration remaining = deadline_ - now;
  // Which budget pays, and how: the policy's terms.
  const SendTerms terms = policy_impl_->TermsFor(
      first, replaces, first ? RetryCharge::kUpFront : next_charge_,
      !first && next_waits_);
  DestinationGates gates = env_.gates;
  if (terms.budget != nullptr) gates.budget = terms.budget;
  // The breaker may call transition listeners: on this thread, with no
  // lock held.
  AttemptStart start =
      BeforeAttempt(number, cancelled, remaining, gates, terms.charge,
                    GateNow(gates, env_.clock, now));
  // Another budget's grant is final; there is nothing to settle.
  if (terms.budget != nullptr) start.charge.reset();
  if (start.refused == GiveUpReason::kNone && terms.counts_first != nullptr) {
    terms.counts_first->RecordFirstAttempt();
  }
  if (deferred.has_value()) {
    RecordDeferredFailure(gates, *deferred, start.refused);
  }
  Actions a;
  if (start.refused != GiveUpReason::kNone) {
    Refused(start.refused, start, first, replaces.has_value(), a);
    Act(a);
    return;
  }
  attempt->number = number;
  attempt->admission = std::move(start.admission);
  attempt->charge = start.charge;
  attempt->wait_for_connection = terms.waits;
  attempt->deadline = controller_.StartAttempt();
  attempt->sent = now;
  attempts_seen_.store(controller_.attempts(), std::memory_order_release);
  if (number == 1) first_sent_ = attempt->sent;
  env_.recorder->AttemptStarted();
  // Joins the list before it starts: its end, even one that comes inside
  // Send, finds it there (after this event).
  attempts_.push_back(attempt);
  sending_ = true;
  Note("send", number);
  if (in_flight_ == nullptr) in_flight_ = io_->Hold();
  if (first) {
    const Started started = policy_impl_->Start(now);
    a.timer = started.timer;
    a.arm_deadline = started.keep_deadline;
  }
  io_->Send(attempt, refreshed_);
  sending_ = false;
  Note("sent", number);
  if (terms.traced) TraceHedgeSent(number);
  Act(a);
}

void CallEngine::Refused(GiveUpReason refused, const AttemptStart& start,
                         bool first, bool replaces, Actions& a) {
  if (refused == GiveUpReason::kCancelled) {
    Finish(cancel_status_, cancel_reason_, nullptr, TraceEvent::Kind::kFailFast,
           StatusClass::kFatal, a);
    return;
  }
  if (!first) {
    const PolicyStep step = policy_impl_->OnRefused(refused, replaces);
    if (!step.done) return;  // other attempts still run
    if (step.last_failure_stands) {
      // The next attempt was not sent: a fail-fast (the last attempt's
      // end was its own line, and counted there).
      Finish(last_status_, refused, last_attempt_.get(),
             TraceEvent::Kind::kFailFast, StatusClass::kRetriable, a);
      return;
    }
  }
  switch (refused) {
    case GiveUpReason::kBreakerOpen:
      Finish(grpc::Status(
                 grpc::StatusCode::UNAVAILABLE,
                 absl::StrCat("rpcguard: ", env_.gates.breaker->RefusalMessage(
                                                *start.admission))),
             refused, nullptr, TraceEvent::Kind::kFailFast, StatusClass::kFatal,
             a);
      return;
    case GiveUpReason::kThrottled:
      if (first || last_attempt_ == nullptr) {
        Finish(ThrottledStatus(env_.destination), refused, nullptr,
               TraceEvent::Kind::kFailFast, StatusClass::kFatal, a);
        return;
      }
      Finish(last_status_, refused, last_attempt_.get(),
             TraceEvent::Kind::kFailFast, StatusClass::kFatal, a);
      return;
    case GiveUpReason::kBudgetExhausted:
      // The previous attempt's answer stands, as for any give-up; the
      // terminal event is the attempt that was not sent.
      Finish(last_status_, refused, last_attempt_.get(),
             TraceEvent::Kind::kFailFast, StatusClass::kFatal, a);
      return;
    default:  // kDeadline
      Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("deadline passed before attempt ",
                                       controller_.attempts() + 1)),
             GiveUpReason::kDeadline, nullptr, TraceEvent::Kind::kFailFast,
             StatusClass::kFatal, a);
      return;
  }
}

void CallEngine::OnAttemptDone(EngineAttempt* attempt, AttemptReport report,
                               Batches::value_type hold) {
  Run([this, attempt, report = std::move(report), hold] {
    HandleAttemptEnd(attempt, report, hold);
  });
}

void CallEngine::HandleAttemptEnd(EngineAttempt* raw,
                                  const AttemptReport& report,
                                  Batches::value_type hold) {
  auto it = std::find_if(attempts_.begin(), attempts_.end(),
                         [raw](const auto& a) { return a.get() == raw; });
  if (it == attempts_.end()) {  // not this call's: cannot be
    if (hold != nullptr) ParkOrServe(hold);
    return;
  }
  TakeCancel();
  std::shared_ptr<EngineAttempt> attempt = std::move(*it);
  attempts_.erase(it);
  attempt->ended = true;
  attempt->ended_at = controller_.Now();
  // The glue stays held until the drain returns.
  if (attempts_.empty()) serializer_.KeepAlive(std::move(in_flight_));
  const grpc::Status& status = report.status;
  EndFacts facts;
  facts.number = attempt->number;
  // The event's one clock reading, for the controller, the gates and the
  // terminal line.
  facts.ended_at = attempt->ended_at;
  facts.end.code = status.error_code();
  facts.end.local_error = report.local_error;
  facts.end.not_sent = report.not_sent;
  facts.end.may_wait = report.may_wait;
  facts.end.server_said_stop = report.pushback.kind == Pushback::Kind::kStop;
  facts.end.downstream_gave_up = report.pushback.downstream_gave_up;
  facts.pushback = report.pushback;
  facts.server_pushback = report.pushback.kind != Pushback::Kind::kNone ||
                          report.pushback.min_delay.has_value();
  facts.end.caller_cancelled = cancelled_;
  facts.cancelled = cancelled_;
  facts.outcome = controller_.OutcomeOf(facts.end, attempt->ended_at);
  // An attempt rpcguard cancelled because another decided the call says
  // nothing of the server.
  if (attempt->loser) facts.outcome.caller_cancelled = true;
  facts.status_class = policy_.MakeClassifier().Classify(facts.outcome);
  const DestinationGates& gates = env_.gates;
  const std::optional<absl::Time> gate_now =
      GateNow(gates, env_.clock, attempt->ended_at);
  facts.throttle_allows = SettleAttempt(
      gates, attempt->charge, facts.status_class, facts.outcome, gate_now);

  if (done_) {
    // Ended after the call did (cancelled as a loser, or outrun): no trace
    // line, but an attempt that ended all the same (A66), so that started
    // minus ended returns to zero.
    RecordAttemptEnd(gates, attempt->admission, facts.status_class,
                     facts.outcome, /*retrying=*/false, gate_now);
    if (!attempt->ended_by_terminal) {
      env_.recorder->AttemptEnded(status.error_code(),
                                  attempt->ended_at - attempt->sent);
    }
    if (attempt->number == 1 && attempt->loser && env_.latency != nullptr) {
      env_.latency->RecordAtLeast(Now() - attempt->sent);
    }
    io_->Release(std::move(attempt));
    if (hold != nullptr) ParkOrServe(hold);
    return;
  }

  Actions a;
  RandomBitGen gen(env_.random);
  facts.committed = commit_.has_value();
  const PolicyStep step = policy_impl_->OnAttemptEnd(facts, gen);
  // Served when the call is decided: now (Finish), or later.
  if (hold != nullptr) parked_.push_back(hold);
  // Built only when the call goes on: most calls end at their first attempt.
  std::optional<TraceEvent> line;
  if (step.done) {
    Finish(status, step.reason, attempt.get(), TraceEvent::Kind::kAttempt,
           step.status_class, a, /*keep=*/nullptr, attempt->ended_at);
  } else {
    // The call goes on: this failure stands if nothing better comes.
    last_status_ = status;
    last_attempt_ = attempt;
    if (step.timer != absl::InfiniteFuture() || step.refresh) {
      next_charge_ = step.next_charge;
      next_waits_ = step.next_waits;
    }
    if (step.refresh) {
      refreshing_ = true;
      a.refresh = true;
      a.refresh_deadline = controller_.deadline();
    }
    a.send = step.send;
    a.replaces = step.replaces;
    a.timer = step.timer;
    a.watch_parent = step.idle;
    line.emplace();
    line->attempt = attempt->number;
    line->code = status.error_code();
    line->status_class = step.status_class;
    line->decision = step.decision;
    line->backoff = step.trace_backoff;
    line->deadline_left = controller_.Remaining();
    line->attempt_duration = controller_.Now() - attempt->sent;
    // Counted here, by what was decided, traced or not.
    env_.recorder->AttemptEnded(line->code, line->attempt_duration);
    if (step.decision == TraceDecision::kRetry) {
      env_.recorder->Retried(step.trace_backoff);
    }
    Note("attempt_end", attempt->number);
  }
  // The destination hears of the attempt now that it is known whether the
  // call retries (retry_gate.h), and before the next attempt can start; a
  // breaker transition calls listeners on this thread.
  // Only a failure the breaker left unrecorded is kept for later: no other
  // attempt becomes evidence when the retry is refused.
  if (RecordAttemptEnd(gates, attempt->admission, step.status_class,
                       step.outcome, step.retrying, gate_now) &&
      step.defer_failure) {
    deferred_failure_ = attempt->admission;
  }
  // The adaptive delay learns from each call's first attempt only (a later
  // copy's latency, counted from its own start, says nothing of when to
  // hedge).
  if (attempt->number == 1 && step.done && status.ok() &&
      env_.latency != nullptr) {
    env_.latency->Record(Now() - attempt->sent);
  }
  if (line.has_value()) Trace(*line, &status);
  Act(a);
}

void CallEngine::OnTimer(TimerKind kind) {
  Run([this, kind] { HandleTimer(kind); });
}

void CallEngine::HandleTimer(TimerKind kind) {
  switch (kind) {
    case TimerKind::kCancel:
      DoCancel();
      return;
    case TimerKind::kDeadline:
      OnDeadline();
      return;
    case TimerKind::kRefreshDeadline:
      EndRefresh(absl::DeadlineExceededError("refresh timed out"),
                 /*timed_out=*/true);
      return;
    case TimerKind::kNext:
      break;
  }
  if (TakeCancel() || done_) return;
  Actions a;
  // From the first wait on, the engine keeps the caller's deadline itself
  // (ArmDeadline).
  a.arm_deadline = true;
  const PolicyStep step = policy_impl_->OnTimer();
  if (step.done) {
    // No copy runs and the next is not sent: a fail-fast (the last copy's
    // end was its own line, and counted there).
    Finish(last_status_, step.reason, last_attempt_.get(),
           TraceEvent::Kind::kFailFast, StatusClass::kRetriable, a);
  } else {
    a.send = step.send;
    a.timer = step.timer;
  }
  Act(a);
}

void CallEngine::Act(Actions& a) {
  // Cancelled before the application has the result: see
  // CallIo::Release.
  for (const auto& context : a.cancel) io_->Cancel(context);
  const int cancelled = static_cast<int>(a.cancel.size());
  a.cancel.clear();
  for (const auto& timer : a.cancel_timers) io_->CancelTimer(timer);
  if (a.summary.has_value()) {
    env_.recorder->HedgedCall(a.summary->copies, a.summary->later_won,
                              cancelled, a.summary->delay);
  }
  if (a.ending.has_value()) Conclude(*a.ending);
  if (a.watch_parent) io_->WatchParent();
  if (a.refresh) {
    if (a.refresh_deadline != absl::InfiniteFuture()) {
      Arm(a.refresh_deadline, TimerKind::kRefreshDeadline);
    }
    io_->Refresh();
  }
  if (a.send) SendAttempt(SendKind::kNext, a.replaces);
  if (a.timer != absl::InfiniteFuture()) Arm(a.timer, TimerKind::kNext);
  if (a.arm_deadline) ArmDeadline();
}

void CallEngine::Arm(absl::Time when, TimerKind kind) {
  if (done_) return;
  const TimerHandle handle = io_->Schedule(when, kind);
  timers_.push_back(handle);
  if (kind == TimerKind::kRefreshDeadline) refresh_timer_ = handle;
}

void CallEngine::ArmDeadline() {
  // Core ends each attempt at the caller's deadline, but an attempt's end
  // reaches rpcguard through gRPC's callback queue, whose threads (gRPC
  // 1.51's CallbackAlternativeCQ) sleep 100 ms after a second without
  // events: the call would end that much late. A timer keeps the deadline
  // instead, on the real clock (with an injected clock, the attempts'
  // endings do).
  if (deadline_armed_ || done_) return;
  const absl::Time deadline = controller_.deadline();
  if (deadline == absl::InfiniteFuture() || !io_->KeepsDeadline()) return;
  deadline_armed_ = true;
  Arm(deadline, TimerKind::kDeadline);
}

void CallEngine::OnDeadline() {
  // Nothing in flight (a wait): the wait's timer, which never fires after
  // the deadline, ends the call.
  if (TakeCancel() || done_ || attempts_.empty()) return;
  Actions a;
  // The oldest attempt is left to end by its own deadline and to be
  // counted as the call's failure, as when its ending decides the call;
  // the others are cancelled.
  const EngineAttempt* keep = attempts_.front().get();
  Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
         GiveUpReason::kDeadline, nullptr, TraceEvent::Kind::kAttempt,
         StatusClass::kRetriable, a, keep);
  Act(a);
}

void CallEngine::Cancel() {
  if (decided_.load(std::memory_order_acquire) ||
      cancel_requested_.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  // Deferred: a caller's cancel arrives while gRPC holds the application
  // context's lock, and cancelling an attempt would take locks an ending
  // attempt holds. Not remembered with the call's timers: one that fires
  // after the end finds the call done.
  io_->Schedule(Now(), TimerKind::kCancel);
}

void CallEngine::OnParentEnded(grpc::StatusCode code) {
  // On the watch's own gRPC thread, which holds no lock of the
  // application's call: no need to defer, as Cancel() must.
  Run([this, code] { HandleParentEnded(code); });
}

void CallEngine::HandleParentEnded(grpc::StatusCode code) {
  if (TakeCancel() || done_) return;
  cancelled_ = true;
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    cancel_status_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                  "the parent call's deadline passed");
    cancel_reason_ = GiveUpReason::kDeadline;
  } else {
    // At its deadline core cancels the parent too, which may reach the
    // watch before the watch's own deadline does.
    cancel_status_ = grpc::Status(grpc::StatusCode::CANCELLED,
                                  "the parent call ended: cancelled, or its "
                                  "deadline passed");
    cancel_reason_ = GiveUpReason::kCancelled;
  }
  DoCancel();
}

void CallEngine::DoCancel() {
  TakeCancel();
  if (done_) return;
  if (refreshing_) {
    // The refresher cannot be stopped; the call ends without it.
    EndRefresh(absl::CancelledError(), /*timed_out=*/false);
    return;
  }
  Actions a;
  if (attempts_.empty()) {
    // Waiting (a backoff, a server's delay): end now.
    Finish(cancel_status_, cancel_reason_, nullptr, TraceEvent::Kind::kFailFast,
           StatusClass::kFatal, a);
  } else {
    // Their CANCELLED endings end the call; no timer may start another.
    // The caller's cancel reaches the application's own call through gRPC
    // already.
    for (const auto& attempt : attempts_) {
      if (attempt->context != nullptr &&
          !(caller_cancelled_ && attempt->app_call)) {
        a.cancel.push_back(attempt->context);
      }
    }
    a.cancel_timers.swap(timers_);
  }
  Act(a);
}

void CallEngine::OnRefreshed(absl::StatusOr<RefreshedCredentials> result) {
  Run([this, result = std::move(result)] {
    EndRefresh(result, /*timed_out=*/false);
  });
}

void CallEngine::EndRefresh(const absl::StatusOr<RefreshedCredentials>& result,
                            bool timed_out) {
  TakeCancel();
  if (!refreshing_ || done_) return;
  refreshing_ = false;
  Note("refreshed", 0);
  Actions a;
  if (refresh_timer_.has_value()) {
    a.cancel_timers.push_back(*refresh_timer_);
    refresh_timer_.reset();
  }
  if (cancelled_) {
    Finish(cancel_status_, cancel_reason_, nullptr, TraceEvent::Kind::kFailFast,
           StatusClass::kFatal, a);
  } else if (timed_out) {
    Finish(last_status_, GiveUpReason::kDeadline, last_attempt_.get(),
           TraceEvent::Kind::kFailFast, StatusClass::kFatal, a);
  } else if (!result.ok()) {
    Finish(grpc::Status(last_status_.error_code(),
                        absl::StrCat(last_status_.error_message(),
                                     " (rpcguard: credential refresh failed: ",
                                     result.status().message(), ")"),
                        last_status_.error_details()),
           GiveUpReason::kAuth, last_attempt_.get(),
           TraceEvent::Kind::kFailFast, StatusClass::kFatal, a);
  } else {
    refreshed_ = *result;
    a.send = true;
  }
  Act(a);
}

void CallEngine::TraceHedgeSent(int number) {
  TraceEvent event;
  event.kind = TraceEvent::Kind::kHedge;
  event.attempt = number;
  event.decision = TraceDecision::kHedge;
  // For a hedge line: the time since the first copy.
  event.backoff = controller_.Now() - first_sent_;
  event.deadline_left = controller_.Remaining();
  Trace(event, nullptr);
}

void CallEngine::Finish(const grpc::Status& given, GiveUpReason reason,
                        EngineAttempt* last, TraceEvent::Kind kind,
                        StatusClass status_class, Actions& a,
                        const EngineAttempt* keep,
                        std::optional<absl::Time> event_now) {
  done_ = true;
  decided_.store(true, std::memory_order_release);
  Note("finish", last != nullptr ? last->number : 0);
  // The caller's cancel (or its parent's end) is why a failure ends it.
  const bool by_cancel = cancelled_ && !given.ok();
  const grpc::Status& status = by_cancel ? cancel_status_ : given;
  if (by_cancel) reason = cancel_reason_;
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
  // One clock read for the terminal line's three durations, or none when
  // the event has one.
  const absl::Time now = event_now.has_value() ? *event_now : controller_.Now();
  terminal.deadline_left = controller_.deadline() - now;
  if (last != nullptr) {
    terminal.attempt_duration = std::min(now, last->ended_at) - last->sent;
  }
  if (first_sent_ != absl::InfinitePast()) {
    terminal.call_duration = now - first_sent_;
  }
  terminal.message = status.error_message();
  if (commit_.has_value()) {
    terminal.commit = *commit_;
  }
  // Whatever is still in flight but `keep` is cancelled: the call is
  // decided. The policy's terminal line may name the attempt that decided
  // it and those it cancels.
  const int decided_by = last != nullptr   ? last->number
                         : keep != nullptr ? keep->number
                                           : 0;
  for (const auto& other : attempts_) {
    if (other.get() == keep) {
      // The terminal attempt line counts the kept attempt's end.
      other->ended_by_terminal = kind == TraceEvent::Kind::kAttempt;
      continue;
    }
    other->loser = true;
    // The caller's cancel reaches the application's own call through gRPC.
    if (other->context != nullptr && !(caller_cancelled_ && other->app_call)) {
      a.cancel.push_back(other->context);
    }
    terminal.cancelled.push_back(other->number);
  }
  policy_impl_->Annotate(terminal, decided_by);
  RecordEnd(terminal, attempts);
  out->attempts = attempts;
  // A success carries no message; its attempts are in the trailer.
  out->status = status.ok()
                    ? status
                    : grpc::Status(status.error_code(),
                                   AnnotateMessage(status.error_message(),
                                                   attempts, reason),
                                   status.error_details());
  out->attempts_text = absl::StrCat(attempts);
  out->from_app_call = last != nullptr && last->app_call;
  if (last != nullptr && !last->app_call && last->context != nullptr) {
    io_->TakeResult(*last, out);
    // Everything needed is copied: let the attempt's context (and its
    // channel reference) go now, while the application's call still holds
    // the channel.
    last->context.reset();
  }
  a.summary = policy_impl_->Summary(attempts, status.ok(),
                                    last != nullptr ? last->number : 0);
  // `last` may be last_attempt_ itself: not read after this.
  last_attempt_.reset();
  a.cancel_timers.swap(timers_);
  refresh_timer_.reset();
  outcome_ = out;
  // No attempt is being started (events run one at a time, and Send has
  // returned): every attempt's context holds the application's channel, so
  // the application may have the result.
  Ending ending;
  ending.outcome = out;
  ending.batches.swap(parked_);
  a.ending = std::move(ending);
}

void CallEngine::Conclude(const Ending& ending) {
  const FinalOutcome& outcome = *ending.outcome;
  // Written in place, not copied: the call concludes once, and batch fills
  // never read the terminal event.
  TraceEvent& e = final_.terminal;
  Trace(e, nullptr);
  // The application may destroy its call once its last batch is served:
  // attempts in flight, or the drain, hold it past that.
  if (in_flight_ == nullptr && !serializer_.keeping_alive()) {
    serializer_.KeepAlive(io_->Hold());
  }
  io_->Conclude(outcome, e, ending.batches);
}

void CallEngine::RecordEnd(const TraceEvent& terminal, int attempts) const {
  // An attempt that decided the call ends with it.
  const bool by_attempt = terminal.kind == TraceEvent::Kind::kAttempt;
  if (by_attempt) {
    env_.recorder->AttemptEnded(terminal.code, terminal.attempt_duration);
  }
  Stats::CallEnd end;
  end.code = terminal.code;
  end.duration = terminal.call_duration;
  end.reason = terminal.reason;
  end.fail_fast = !by_attempt;
  if (by_attempt) end.commit = commit_;
  end.attempts = attempts;
  // A hedged call's copies are hedges, not retries (HedgedCall counts
  // them): the policy marks a copy's line, and a hedged end names the
  // copies it cancelled.
  end.retried =
      terminal.copy == 0 && (!by_attempt || terminal.cancelled.empty());
  env_.recorder->CallEnded(end);
}

void CallEngine::Trace(TraceEvent& event, const grpc::Status* status) const {
  event.call_id = call_id_;
  env_.recorder->Trace(
      event,
      [&](TraceEvent& e) {
        // Read only for a line that is written.
        e.time = env_.clock->WallNow();
        e.idempotency_key = io_->key();
        if (const CorrelationIds* ids = io_->correlation()) ids->FillIn(e);
        if (status != nullptr) e.message = status->error_message();
      },
      verbosity_);
}

}  // namespace internal
}  // namespace rpcguard
