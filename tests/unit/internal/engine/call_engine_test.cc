// Copyright rpcguard authors.
//
// The one attempt engine on fake attempts and a fake clock: every
// transition and race of retried and hedged calls (a cancel while sending,
// an attempt ending after the call was decided, a timer firing after the
// end), with no server and no sleep. FakeIo stands in for gRPC: it records
// what the engine asks of it, and the test ends attempts and fires timers
// by hand.

#include "rpcguard/internal/engine/call_engine.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/policy.h"
#include "rpcguard/destination/adaptive_throttle.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/observability/stats.h"
#include "rpcguard/random.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace internal {
namespace {

constexpr char kMethod[] = "/pkg.Svc/Get";

class FakeIo final : public CallIo {
 public:
  struct Timer {
    absl::Time when;
    TimerKind kind;
    bool active = true;
  };

  std::shared_ptr<EngineAttempt> NewAttempt() override {
    auto a = std::make_shared<EngineAttempt>();
    a->context = std::make_shared<int>(++contexts_);
    // Runs inside the send's event, before the gate is asked: where another
    // thread's cancel could land.
    if (on_new_attempt) {
      auto hook = std::move(on_new_attempt);
      on_new_attempt = nullptr;
      hook();
    }
    return a;
  }
  std::function<void()> on_new_attempt;
  std::shared_ptr<void> Hold() override { return hold_; }
  void Send(const std::shared_ptr<EngineAttempt>& attempt,
            const std::optional<RefreshedCredentials>& refreshed) override {
    sent.push_back(attempt);
    sent_refreshed.push_back(refreshed.has_value());
    if (during_send) {
      auto hook = std::move(during_send);
      during_send = nullptr;
      hook(attempt);
    }
  }
  void Cancel(const std::shared_ptr<void>& context) override {
    if (context != nullptr)
      cancelled.push_back(*static_cast<int*>(context.get()));
  }
  void Release(std::shared_ptr<EngineAttempt> attempt) override {
    released.push_back(attempt->number);
  }
  TimerHandle Schedule(absl::Time when, TimerKind kind) override {
    const uint64_t id = timers.size();
    timers.push_back({when, kind});
    return {when, id};
  }
  void CancelTimer(const TimerHandle& handle) override {
    timers[handle.second].active = false;
  }
  bool KeepsDeadline() const override { return keeps_deadline; }
  void Refresh() override { ++refreshes; }
  void WatchParent() override { ++parent_watches; }
  void TakeResult(EngineAttempt& last, FinalOutcome* out) override {
    took_result_of = last.number;
    static_cast<void>(out);
  }
  const std::string& key() const override { return key_; }
  void Conclude(const FinalOutcome& outcome, const TraceEvent& terminal,
                const Batches& batches) override {
    ++concluded;
    status = outcome.status;
    attempts_text = outcome.attempts_text;
    this->terminal = terminal;
    concluded_batches = batches.size();
    if (on_conclude) {
      auto hook = std::move(on_conclude);
      on_conclude = nullptr;
      hook();
    }
  }
  std::function<void()> on_conclude;
  void ServeDecided(const FinalOutcome& outcome,
                    const Batches& batches) override {
    served_attempts_text = outcome.attempts_text;
    served_from_app_call = outcome.from_app_call;
    served_decided += batches.size();
  }

  // The active timers of `kind`.
  std::vector<size_t> Active(TimerKind kind) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < timers.size(); ++i) {
      if (timers[i].active && timers[i].kind == kind) out.push_back(i);
    }
    return out;
  }

  std::vector<std::shared_ptr<EngineAttempt>> sent;
  std::vector<bool> sent_refreshed;
  std::vector<int> cancelled;  // context ids: attempt n has id n
  std::vector<int> released;
  std::vector<Timer> timers;
  std::function<void(const std::shared_ptr<EngineAttempt>&)> during_send;
  bool keeps_deadline = false;
  int refreshes = 0;
  int parent_watches = 0;
  int took_result_of = 0;
  int concluded = 0;
  // The rpcguard-attempts trailer of the concluded call, and of a batch
  // served after it.
  std::string attempts_text;
  std::string served_attempts_text;
  size_t concluded_batches = 0;
  size_t served_decided = 0;
  bool served_from_app_call = false;
  grpc::Status status;
  TraceEvent terminal;

 private:
  int contexts_ = 0;
  std::shared_ptr<void> hold_ = std::make_shared<int>(0);
  std::string key_ = "key-1";
};

// The engine's recorder: the counters go to a real Stats (what the glue
// records), every line to `lines` (traced at every verbosity).
class FakeRecorder final : public EngineRecorder {
 public:
  FakeRecorder(Stats* stats, Stats::MethodHandle* handle,
               std::vector<TraceEvent>* lines)
      : stats_(stats), handle_(handle), lines_(lines) {}
  void Trace(TraceEvent& event, absl::FunctionRef<void(TraceEvent&)> fill,
             std::optional<TraceVerbosity> /*verbosity*/) const override {
    event.method = kMethod;
    fill(event);
    lines_->push_back(event);
  }
  void AttemptStarted() const override { Stats::RecordAttemptStarted(handle_); }
  void AttemptEnded(grpc::StatusCode code,
                    absl::Duration duration) const override {
    Stats::RecordAttemptEnded(handle_, code, duration);
  }
  void Retried(absl::Duration delay) const override {
    Stats::RecordRetry(handle_, delay);
  }
  void CallEnded(const Stats::CallEnd& end) const override {
    Stats::RecordCallEnded(handle_, end);
  }
  void HedgedCall(int copies, bool later_won, int cancelled,
                  absl::Duration delay) const override {
    stats_->RecordHedgedCall(handle_, copies, later_won, cancelled, delay);
  }

 private:
  Stats* const stats_;
  Stats::MethodHandle* const handle_;
  std::vector<TraceEvent>* const lines_;
};

// A retried method: 3 attempts, backoff 100 ms to 1 s, UNAVAILABLE
// retriable, declared idempotent.
MethodPolicy Retry() {
  MethodPolicy p;
  p.idempotency = Idempotency::kIdempotent;
  p.retry.max_attempts = 3;
  p.retry.backoff.initial = absl::Milliseconds(100);
  p.retry.backoff.max = absl::Seconds(1);
  p.retry.backoff.multiplier = 2;
  p.retry.retryable_codes = StatusCodeSet{grpc::StatusCode::UNAVAILABLE};
  return p;
}

// A hedged method: 3 copies 50 ms apart, UNAVAILABLE non-fatal.
MethodPolicy Hedge() {
  MethodPolicy p;
  p.idempotency = Idempotency::kIdempotent;
  HedgingPolicy h;
  h.max_attempts = 3;
  h.delay = absl::Milliseconds(50);
  h.non_fatal_codes = StatusCodeSet{grpc::StatusCode::UNAVAILABLE};
  p.hedging = h;
  return p;
}

class CallEngineTest : public ::testing::Test {
 protected:
  // The engine's environment by hand, on the fake clock: the destination's
  // breaker, retry budget and adaptive throttle with their defaults (as a
  // channel gets them), and a hedged method's hedge budget. `refresher`: a
  // credential refresher is configured (the engine only asks
  // FakeIo::Refresh).
  void Make(MethodPolicy policy, bool refresher = false) {
    policy_ = std::move(policy);
    breaker_ = *CircuitBreaker::Create("dest", BreakerOptions{}, &clock_);
    budget_ = *RetryBudget::Create(RetryBudgetOptions{}, &clock_);
    adaptive_ = *AdaptiveThrottle::Create(AdaptiveThrottleOptions{}, &clock_,
                                          Random::Default());
    if (policy_.hedging.has_value()) {
      RetryBudgetOptions cap;
      cap.ratio = policy_.hedging->max_extra_load;
      cap.min_retries_per_second = 1;
      hedge_budget_ = *RetryBudget::Create(cap, &clock_);
    }
    env_.clock = &clock_;
    env_.random = Random::Default();
    env_.can_refresh = refresher;
    env_.gates = {breaker_.get(), budget_.get(), nullptr, adaptive_.get(),
                  &clock_};
    env_.hedge_budget = hedge_budget_.get();
    env_.destination = "dest";
    env_.recorder = &recorder_;
  }

  void NewCall(absl::Duration deadline = absl::Seconds(10),
               bool hedging = false) {
    engine_ = std::make_unique<CallEngine>(
        &io_, env_, policy_, std::nullopt, clock_.MonotonicNow() + deadline,
        /*may_repeat=*/true, hedging, /*call_id=*/7);
  }

  // Ends sent attempt `n` (1-based, in send order) with `code`.
  void End(int n, grpc::StatusCode code, bool not_sent = false) {
    AttemptReport r;
    r.status = code == grpc::StatusCode::OK
                   ? grpc::Status::OK
                   : grpc::Status(code, absl::StrCat("attempt ", n));
    r.not_sent = not_sent;
    engine_->OnAttemptDone(io_.sent[n - 1].get(), r, nullptr);
  }

  // Fires timer `i` at its time.
  void Fire(size_t i) {
    const absl::Time now = clock_.MonotonicNow();
    if (io_.timers[i].when > now) clock_.Advance(io_.timers[i].when - now);
    io_.timers[i].active = false;
    engine_->OnTimer(io_.timers[i].kind);
  }

  BreakerSnapshot Breaker() { return breaker_->Snapshot(); }

  // The method's counters (this test's own Stats).
  MethodStatsSnapshot Counted() {
    const StatsSnapshot snap = stats_->Snapshot();
    const MethodStatsSnapshot* m = snap.FindMethod(kMethod);
    return m != nullptr ? *m : MethodStatsSnapshot{};
  }

  testing::FakeClock clock_;
  FakeIo io_;
  std::vector<TraceEvent> lines_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  FakeRecorder recorder_{stats_.get(), stats_->ForMethod(kMethod), &lines_};
  MethodPolicy policy_;
  std::shared_ptr<CircuitBreaker> breaker_;
  std::shared_ptr<RetryBudget> budget_;
  std::shared_ptr<AdaptiveThrottle> adaptive_;
  std::shared_ptr<RetryBudget> hedge_budget_;
  EngineEnv env_;
  std::unique_ptr<CallEngine> engine_;
};

TEST_F(CallEngineTest, ARetriableFailureWaitsOutItsBackoffThenRetries) {
  Make(Retry());
  NewCall();
  engine_->Start();
  ASSERT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.sent[0]->number, 1);
  End(1, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(io_.concluded, 0);
  const std::vector<size_t> backoff = io_.Active(TimerKind::kNext);
  ASSERT_EQ(backoff.size(), 1u);
  EXPECT_LE(io_.timers[backoff[0]].when,
            clock_.MonotonicNow() + absl::Milliseconds(100));
  EXPECT_EQ(io_.sent.size(), 1u);    // nothing before the timer
  EXPECT_EQ(io_.parent_watches, 1);  // nothing in flight carries the parent
  Fire(backoff[0]);
  ASSERT_EQ(io_.sent.size(), 2u);
  EXPECT_EQ(io_.sent[1]->number, 2);
  End(2, grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_TRUE(io_.status.ok());
  EXPECT_EQ(io_.took_result_of, 2);
  EXPECT_EQ(engine_->attempts(), 2);
  // One line per event: the retry, then the terminal one.
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[0].decision, TraceDecision::kRetry);
  EXPECT_EQ(lines_[1].decision, TraceDecision::kDone);
  EXPECT_EQ(lines_[1].idempotency_key, "key-1");
}

// The state is one field that every transition assigns; with
// RPCGUARD_TRACE=engine each change is one line naming the call, the
// attempt and the event.
TEST_F(CallEngineTest, EveryTransitionAssignsTheStateAndIsTraced) {
  std::vector<std::string> trace;
  SetEngineTraceForTest(
      [&trace](absl::string_view line) { trace.emplace_back(line); });
  Make(Retry(), /*refresher=*/true);
  NewCall();
  EXPECT_EQ(engine_->state(), EngineState::kIdle);
  EngineState during_send = EngineState::kIdle;
  io_.during_send = [&](const std::shared_ptr<EngineAttempt>&) {
    during_send = engine_->state();
  };
  engine_->Start();
  EXPECT_EQ(during_send, EngineState::kSending);
  EXPECT_EQ(engine_->state(), EngineState::kInFlight);
  End(1, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(engine_->state(), EngineState::kRefreshing);
  engine_->OnRefreshed(RefreshedCredentials{});
  EXPECT_EQ(engine_->state(), EngineState::kInFlight);
  End(2, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(engine_->state(), EngineState::kWaiting);
  Fire(io_.Active(TimerKind::kNext).at(0));
  EXPECT_EQ(engine_->state(), EngineState::kInFlight);
  End(3, grpc::StatusCode::OK);
  EXPECT_EQ(engine_->state(), EngineState::kDone);
  SetEngineTraceForTest(nullptr);
  const std::vector<std::string> want = {
      "rpcguard engine: call=7 attempt=1 idle -> sending on send",
      "rpcguard engine: call=7 attempt=1 sending -> in_flight on sent",
      "rpcguard engine: call=7 attempt=1 in_flight -> refreshing on "
      "attempt_end",
      "rpcguard engine: call=7 attempt=0 refreshing -> waiting on refreshed",
      "rpcguard engine: call=7 attempt=2 waiting -> sending on send",
      "rpcguard engine: call=7 attempt=2 sending -> in_flight on sent",
      "rpcguard engine: call=7 attempt=2 in_flight -> waiting on attempt_end",
      "rpcguard engine: call=7 attempt=3 waiting -> sending on send",
      "rpcguard engine: call=7 attempt=3 sending -> in_flight on sent",
      "rpcguard engine: call=7 attempt=3 in_flight -> done on finish",
  };
  EXPECT_EQ(trace, want);
}

// A riding call's attempt 1 is in flight from the start; a cancel with
// nothing in flight ends the call.
TEST_F(CallEngineTest, ARideStartsInFlightAndACancelWhileWaitingEndsIt) {
  Make(Retry());
  NewCall();
  std::shared_ptr<EngineAttempt> ride =
      engine_->RideFirstAttempt(std::nullopt, clock_.MonotonicNow());
  EXPECT_EQ(engine_->state(), EngineState::kInFlight);
  AttemptReport r;
  r.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
  engine_->OnAttemptDone(ride.get(), r, nullptr);
  EXPECT_EQ(engine_->state(), EngineState::kWaiting);
  engine_->Cancel();
  Fire(io_.Active(TimerKind::kCancel).at(0));
  EXPECT_EQ(engine_->state(), EngineState::kDone);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
}

TEST_F(CallEngineTest, AFatalFailureEndsTheCallAtOnce) {
  Make(Retry());
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kFatal);
  EXPECT_TRUE(io_.Active(TimerKind::kNext).empty());
}

// A stream that committed to its attempt ends with that attempt: the
// failure that would have been retried gives up, and the line says why.
TEST_F(CallEngineTest, ACommittedCallEndsWithItsAttempt) {
  Make(Retry());
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::UNAVAILABLE);
  Fire(io_.Active(TimerKind::kNext).at(0));
  ASSERT_EQ(io_.sent.size(), 2u);
  engine_->Commit(CommitReason::kHeaders);
  engine_->Commit(CommitReason::kMessage);  // the first counts
  EXPECT_EQ(engine_->commit(), CommitReason::kHeaders);
  End(2, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.sent.size(), 2u);
  EXPECT_TRUE(io_.Active(TimerKind::kNext).empty());
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCommitted);
  EXPECT_EQ(io_.terminal.commit, CommitReason::kHeaders);
  EXPECT_EQ(lines_.back().commit, CommitReason::kHeaders);
}

// A commit changes nothing of a success, nor of a fatal failure, but the
// line.
TEST_F(CallEngineTest, ACommittedCallsFatalFailureIsFatal) {
  Make(Retry());
  NewCall();
  engine_->Start();
  engine_->Commit(CommitReason::kBufferLimit);
  End(1, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kFatal);
  EXPECT_EQ(io_.terminal.commit, CommitReason::kBufferLimit);
}

// A call decided while the gate was asked for its next attempt (here a
// cancel during the backoff's end) sends nothing: an attempt sent then would
// be in no list, and its context freed while gRPC still used it (ASan, the
// chaos test).
TEST_F(CallEngineTest, ACallDecidedWhileTheGateIsAskedSendsNothing) {
  Make(Retry());
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::UNAVAILABLE);
  const size_t backoff = io_.Active(TimerKind::kNext).at(0);
  io_.on_new_attempt = [this] {
    engine_->Cancel();
    Fire(io_.Active(TimerKind::kCancel).at(0));
  };
  Fire(backoff);
  EXPECT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
}

// A retry the budget refuses when its backoff ends (another call spent the
// budget meanwhile) ends the call with the last failure. That attempt is
// the engine's last_attempt_, freed as the call finishes: an ASan run of
// the chain benchmark caught the finish reading it after.
TEST_F(CallEngineTest, ARetryTheBudgetRefusesAtItsSendEndsWithTheLastFailure) {
  Make(Retry());
  RetryBudgetOptions one;
  one.ratio = 0;
  one.min_retries_per_second = 0.1;  // one retry in the 10 s window
  budget_ = *RetryBudget::Create(one, &clock_);
  env_.gates.budget = budget_.get();
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::UNAVAILABLE);
  io_.sent[0].reset();  // as the glue: an ended attempt is the engine's
  const std::vector<size_t> backoff = io_.Active(TimerKind::kNext);
  ASSERT_EQ(backoff.size(), 1u);
  ASSERT_TRUE(budget_->TryAcquireRetry());  // another call's retry
  Fire(backoff[0]);
  EXPECT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GiveUpReasonName(io_.terminal.reason),
            GiveUpReasonName(GiveUpReason::kBudgetExhausted));
}

TEST_F(CallEngineTest, MaxAttemptsEndsTheCallWithTheLastFailure) {
  Make(Retry());
  NewCall();
  engine_->Start();
  for (int n = 1; n <= 2; ++n) {
    End(n, grpc::StatusCode::UNAVAILABLE);
    Fire(io_.Active(TimerKind::kNext).at(0));
  }
  End(3, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(io_.terminal.attempt, 3);
  EXPECT_EQ(io_.took_result_of, 3);
}

// Issue 30's first chaos violation ("an attempt 57 ms after a cancel") was
// a cancel the chaos caller issued before its call existed. The engine's
// side of it: a call cancelled before its first event sends nothing, ends
// CANCELLED with a trailer of 0 attempts, and its later events do nothing.
TEST_F(CallEngineTest, ACancelBeforeTheFirstAttemptSendsNothing) {
  Make(Retry());
  NewCall();
  engine_->Cancel();
  engine_->Start();
  EXPECT_TRUE(io_.sent.empty());
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  EXPECT_EQ(io_.terminal.kind, TraceEvent::Kind::kFailFast);
  EXPECT_EQ(io_.attempts_text, "0");
  for (size_t timer : io_.Active(TimerKind::kCancel)) Fire(timer);
  engine_->OnTimer(TimerKind::kNext);
  EXPECT_TRUE(io_.sent.empty());
  EXPECT_EQ(io_.concluded, 1);
}

TEST_F(CallEngineTest, ACancelDuringTheBackoffEndsTheCallAndTheTimerLater) {
  Make(Retry());
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::UNAVAILABLE);
  const size_t backoff = io_.Active(TimerKind::kNext).at(0);
  engine_->Cancel();
  engine_->Cancel();            // any number of times
  EXPECT_EQ(io_.concluded, 0);  // deferred: Cancel may run under gRPC's lock
  const std::vector<size_t> cancel = io_.Active(TimerKind::kCancel);
  ASSERT_EQ(cancel.size(), 1u);
  Fire(cancel[0]);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  EXPECT_EQ(io_.terminal.kind, TraceEvent::Kind::kFailFast);
  EXPECT_FALSE(io_.timers[backoff].active);  // cancelled by the finish
  // A timer that fires after the end does nothing.
  engine_->OnTimer(TimerKind::kNext);
  EXPECT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.concluded, 1);
}

TEST_F(CallEngineTest, ACancelWhileAnAttemptIsBeingSentCancelsItOnceSent) {
  Make(Retry());
  NewCall();
  io_.during_send = [this](const std::shared_ptr<EngineAttempt>&) {
    engine_->Cancel();
    Fire(io_.Active(TimerKind::kCancel).at(0));
  };
  engine_->Start();
  // Cancelled by the deferred cancel, and again once its start returned.
  ASSERT_GE(io_.cancelled.size(), 1u);
  EXPECT_EQ(io_.cancelled.back(), 1);
  EXPECT_EQ(io_.concluded, 0);  // its CANCELLED end decides the call
  End(1, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  EXPECT_EQ(io_.sent.size(), 1u);
  // The attempt was sent: the trailer counts it (the chaos test's "trailer
  // 0, attempts seen 1" was a cancel deciding the call between the gate
  // and the send, when they were two lock sections).
  EXPECT_EQ(io_.attempts_text, "1");
}

TEST_F(CallEngineTest, ARideCancelledCountsItselfInItsTrailer) {
  Make(Retry());
  NewCall();
  std::shared_ptr<EngineAttempt> ride =
      engine_->RideFirstAttempt(std::nullopt, clock_.MonotonicNow());
  engine_->Cancel();
  Fire(io_.Active(TimerKind::kCancel).at(0));
  // The application's own call is cancelled; its end decides the call.
  EXPECT_EQ(io_.concluded, 0);
  AttemptReport r;
  r.status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  int batch_storage = 0;  // a batch FakeIo only counts, never reads
  auto* batch = reinterpret_cast<grpc::experimental::InterceptorBatchMethods*>(
      &batch_storage);
  engine_->OnAttemptDone(ride.get(), r, batch);
  ASSERT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  EXPECT_EQ(io_.concluded_batches, 1u);
  EXPECT_EQ(io_.attempts_text, "1");
}

TEST_F(CallEngineTest, TheRefresherIsAskedOnceThenTheCallRetriesWithIt) {
  Make(Retry(), /*refresher=*/true);
  NewCall();
  engine_->Start();
  End(1, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(io_.refreshes, 1);
  EXPECT_EQ(io_.Active(TimerKind::kRefreshDeadline).size(), 1u);
  engine_->OnRefreshed(RefreshedCredentials{});
  ASSERT_EQ(io_.sent.size(), 2u);
  EXPECT_TRUE(io_.sent_refreshed[1]);
  EXPECT_TRUE(io_.Active(TimerKind::kRefreshDeadline).empty());
  End(2, grpc::StatusCode::OK);
  EXPECT_TRUE(io_.status.ok());
}

TEST_F(CallEngineTest, ARefreshThatOutlivesTheDeadlineEndsTheCall) {
  Make(Retry(), /*refresher=*/true);
  NewCall(absl::Seconds(1));
  engine_->Start();
  clock_.Advance(absl::Milliseconds(30));
  End(1, grpc::StatusCode::UNAUTHENTICATED);
  Fire(io_.Active(TimerKind::kRefreshDeadline).at(0));
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kDeadline);
  // The line reports the attempt it ends with: its own 30 ms, not the wait
  // for the refresher after it.
  EXPECT_EQ(io_.terminal.attempt_duration, absl::Milliseconds(30));
  EXPECT_EQ(io_.terminal.call_duration, absl::Seconds(1));
  // The refresher's late answer finds nothing to do.
  engine_->OnRefreshed(RefreshedCredentials{});
  EXPECT_EQ(io_.sent.size(), 1u);
}

TEST_F(CallEngineTest, AttemptsInFlightAtTheDeadlineEndTheCallOnTime) {
  Make(Retry());
  io_.keeps_deadline = true;
  NewCall(absl::Seconds(1));
  engine_->Start();
  // No deadline timer before the first wait: most calls pay for none.
  EXPECT_TRUE(io_.Active(TimerKind::kDeadline).empty());
  End(1, grpc::StatusCode::UNAVAILABLE);
  Fire(io_.Active(TimerKind::kNext).at(0));
  const std::vector<size_t> deadline = io_.Active(TimerKind::kDeadline);
  ASSERT_EQ(deadline.size(), 1u);
  Fire(deadline[0]);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kDeadline);
  // Attempt 2 is left to end by its own deadline, and counted then.
  EXPECT_TRUE(io_.cancelled.empty());
  End(2, grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(io_.released, std::vector<int>{2});
  EXPECT_EQ(io_.concluded, 1);
  // Counted once each: attempt 2 by the terminal line, not again at its end.
  const MethodStatsSnapshot m = Counted();
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.attempts, 2u);
  EXPECT_EQ(m.attempt_duration.count, 2u);
}

TEST_F(CallEngineTest, AHedgeGoesAfterTheDelayAndTheWinnerCancelsTheRest) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  engine_->Start();
  ASSERT_EQ(io_.sent.size(), 1u);
  const size_t hedge = io_.Active(TimerKind::kNext).at(0);
  EXPECT_EQ(io_.timers[hedge].when,
            clock_.MonotonicNow() + absl::Milliseconds(50));
  Fire(hedge);
  ASSERT_EQ(io_.sent.size(), 2u);
  EXPECT_EQ(io_.sent[1]->number, 2);
  End(2, grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.took_result_of, 2);
  EXPECT_EQ(io_.cancelled, std::vector<int>{1});
  EXPECT_EQ(io_.terminal.copy, 2);
  EXPECT_EQ(io_.terminal.cancelled, std::vector<int>{1});
  // The loser's end comes later: released, not concluded again, and no
  // evidence for the breaker.
  End(1, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.released, std::vector<int>{1});
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(Breaker().window_failures, 0);
  // Yet it ended (A66): started minus ended is back to zero.
  const MethodStatsSnapshot m = Counted();
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.attempts, 2u);
  EXPECT_EQ(
      m.attempts_by_code.at(static_cast<int>(grpc::StatusCode::CANCELLED)), 1u);
}

// A hedged call whose last copy failed, waiting out a server's delay that
// outlasts the deadline, ends at the timer without another copy: a
// fail-fast, and the last copy, counted at its own end, is not counted
// again by the call's end (it used to be: a second kAttempt line).
TEST_F(CallEngineTest, AHedgedCallEndingAtItsTimerCountsItsLastCopyOnce) {
  Make(Hedge());
  NewCall(absl::Seconds(1), /*hedging=*/true);
  engine_->Start();
  AttemptReport r;
  r.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "attempt 1");
  r.pushback.kind = Pushback::Kind::kRetryAfter;
  r.pushback.delay = absl::Milliseconds(500);
  engine_->OnAttemptDone(io_.sent[0].get(), r, nullptr);
  ASSERT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.concluded, 0);
  clock_.Advance(absl::Milliseconds(1100));  // the timer runs late
  engine_->OnTimer(TimerKind::kNext);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(io_.terminal.kind, TraceEvent::Kind::kFailFast);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kDeadline);
  const MethodStatsSnapshot m = Counted();
  EXPECT_EQ(m.attempts_started, 1u);
  EXPECT_EQ(m.attempts, 1u);
  EXPECT_EQ(m.calls, 1u);
  EXPECT_EQ(m.retries_per_call.count, 0u);  // copies are not retries
}

TEST_F(CallEngineTest, ANonFatalFailureSendsTheNextCopyAtOnce) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  engine_->Start();
  End(1, grpc::StatusCode::UNAVAILABLE);
  ASSERT_EQ(io_.sent.size(), 2u);
  EXPECT_EQ(io_.sent[1]->number, 2);
  End(2, grpc::StatusCode::INVALID_ARGUMENT);  // fatal
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kFatal);
}

TEST_F(CallEngineTest, ACallDecidedWhileACopyIsSentConcludesAfterTheSend) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  engine_->Start();
  int concluded_during_send = -1;
  io_.during_send = [&](const std::shared_ptr<EngineAttempt>&) {
    End(1, grpc::StatusCode::OK);  // copy 1 wins while copy 2 starts
    concluded_during_send = io_.concluded;
  };
  Fire(io_.Active(TimerKind::kNext).at(0));
  // Until copy 2 holds the channel the application must not have the
  // result; then the call concludes, and copy 2 is cancelled as a loser.
  EXPECT_EQ(concluded_during_send, 0);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_TRUE(io_.status.ok());
  EXPECT_EQ(io_.cancelled, std::vector<int>{2});
  EXPECT_TRUE(io_.sent[1]->loser);
}

// Events run one at a time: an attempt's end that another thread reports
// while a copy is being sent only queues (the reporting thread returns at
// once), and the thread sending runs it after the send, so that nothing
// concludes while a copy's context does not yet hold the channel.
TEST_F(CallEngineTest, AnEndFromAnotherThreadDuringASendRunsAfterTheSend) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  engine_->Start();
  int concluded_during_send = -1;
  io_.during_send = [&](const std::shared_ptr<EngineAttempt>&) {
    std::thread other([&] { End(1, grpc::StatusCode::OK); });
    other.join();  // returned: it queued, it did not wait for the send
    concluded_during_send = io_.concluded;
  };
  Fire(io_.Active(TimerKind::kNext).at(0));
  EXPECT_EQ(concluded_during_send, 0);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_TRUE(io_.status.ok());
  EXPECT_EQ(io_.cancelled, std::vector<int>{2});
}

// A batch that waits for the outcome, arriving from another thread while
// the deciding event runs, is served once, by the thread that decides.
TEST_F(CallEngineTest, ABatchParkedWhileTheCallIsDecidedIsServedOnce) {
  Make(Retry());
  NewCall();
  engine_->Start();
  io_.on_conclude = [&] {
    std::thread other([&] { engine_->Park(nullptr); });
    other.join();
  };
  End(1, grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.concluded_batches, 0u);
  EXPECT_EQ(io_.served_decided, 1u);
}

TEST_F(CallEngineTest, AHedgedCopyThatFoundNoConnectionIsNoEvidence) {
  Make(Hedge());
  for (int call = 0; call < 5; ++call) {
    io_ = FakeIo();
    NewCall(absl::Seconds(10), /*hedging=*/true);
    engine_->Start();
    for (int n = 1; n <= 3; ++n) {
      End(n, grpc::StatusCode::UNAVAILABLE, /*not_sent=*/true);
    }
    ASSERT_EQ(io_.concluded, 1);
  }
  // Never reached the server: the breaker heard nothing of them.
  EXPECT_EQ(Breaker().window_attempts, 0);
  EXPECT_EQ(Breaker().window_failures, 0);
}

// Each judge hears only its own evidence, on every shape of call: an
// end's origin (OriginOf) decides what the breaker and the adaptive
// throttle hear. Every call below ends after all its attempts failed the
// same way.
struct OriginRow {
  const char* name;
  grpc::StatusCode code;
  bool not_sent = false;
  bool stop = false;              // grpc-retry-pushback-ms: -1
  bool gave_up = false;           // ... with rpcguard's gave-up trailer
  bool breaker_fails = false;     // the breaker counts failures
  bool throttle_rejects = false;  // the adaptive throttle counts rejections
  bool throttle_hears = false;    // it counts the answers at all
};

TEST_F(CallEngineTest, EachOriginFeedsOnlyItsOwnJudge) {
  const std::vector<OriginRow> rows = {
      {"server", grpc::StatusCode::UNAVAILABLE, false, false, false, true,
       false, true},
      {"no_server", grpc::StatusCode::UNAVAILABLE, true},
      {"overload", grpc::StatusCode::RESOURCE_EXHAUSTED, false, false, false,
       false, true, true},
      {"below", grpc::StatusCode::UNAVAILABLE, false, true, true, false, false,
       true},
      {"below_overloaded", grpc::StatusCode::RESOURCE_EXHAUSTED, false, true,
       true, false, false, true},
      {"stop", grpc::StatusCode::UNAVAILABLE, false, true, false, false, false,
       true},
  };
  enum Shape { kRetried, kHedged, kSentOnce };
  for (const OriginRow& row : rows) {
    for (Shape shape : {kRetried, kHedged, kSentOnce}) {
      SCOPED_TRACE(absl::StrCat(row.name, " shape ", shape));
      Make(shape == kHedged ? Hedge() : Retry());
      int attempts = 0;
      for (int call = 0; call < 3; ++call) {
        io_ = FakeIo();
        engine_ = std::make_unique<CallEngine>(
            &io_, env_, policy_, std::nullopt,
            clock_.MonotonicNow() + absl::Seconds(10), /*may_repeat=*/true,
            shape == kHedged, /*call_id=*/7,
            shape == kSentOnce
                ? std::optional<GiveUpReason>(GiveUpReason::kNotIdempotent)
                : std::nullopt);
        engine_->Start();
        // Ends each attempt as it is sent, firing timers until the call is
        // decided.
        size_t n = 0;
        for (int step = 0; io_.concluded == 0 && step < 40; ++step) {
          if (n < io_.sent.size()) {
            AttemptReport r;
            r.status = grpc::Status(row.code, "failed");
            r.not_sent = row.not_sent;
            if (row.stop) r.pushback.kind = Pushback::Kind::kStop;
            r.pushback.downstream_gave_up = row.gave_up;
            engine_->OnAttemptDone(io_.sent[n++].get(), r, nullptr);
            ++attempts;
            continue;
          }
          const std::vector<size_t> due = io_.Active(TimerKind::kNext);
          if (due.empty()) break;
          Fire(due[0]);
        }
        ASSERT_EQ(io_.concluded, 1);
      }
      const BreakerSnapshot b = Breaker();
      if (row.breaker_fails) {
        EXPECT_GT(b.window_failures, 0);
      } else {
        EXPECT_EQ(b.window_failures, 0);
        EXPECT_EQ(b.window_attempts, 0);
      }
      EXPECT_NE(b.state, BreakerState::kOpen);
      const AdaptiveThrottleSnapshot t = adaptive_->Snapshot();
      if (!row.throttle_hears) {
        // Nothing but the throttle's own count of attempts it admitted.
        EXPECT_EQ(t.accepts, 0);
      } else if (row.throttle_rejects) {
        EXPECT_EQ(t.accepts, 0);
        EXPECT_GT(t.requests, 0);
      } else {
        EXPECT_EQ(t.accepts, attempts);
      }
    }
  }
}

TEST_F(CallEngineTest, AHedgedCallCancelledEndsEveryCopy) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  engine_->Start();
  Fire(io_.Active(TimerKind::kNext).at(0));
  ASSERT_EQ(io_.sent.size(), 2u);
  engine_->Cancel();
  Fire(io_.Active(TimerKind::kCancel).at(0));
  EXPECT_EQ(io_.cancelled, (std::vector<int>{1, 2}));
  EXPECT_TRUE(io_.Active(TimerKind::kNext).empty());  // no more hedges
  End(1, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  End(2, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.released, std::vector<int>{2});
}

// A hedged call riding its first copy (the application's own call, whose
// handle cancels with id 100), entered when its hedge is due.
class RidingHedgeTest : public CallEngineTest {
 protected:
  void RideIn() {
    Make(Hedge());
    NewCall(absl::Seconds(10), /*hedging=*/true);
    const absl::Time sent = clock_.MonotonicNow();
    clock_.Advance(absl::Milliseconds(50));  // the hedge delay
    ride_ = engine_->RideFirstAttempt(std::nullopt, sent, app_);
  }
  // The application's call ends with `code`; its status batch waits.
  void AppEnds(grpc::StatusCode code) {
    AttemptReport r;
    r.status = code == grpc::StatusCode::OK ? grpc::Status::OK
                                            : grpc::Status(code, "app");
    engine_->OnAttemptDone(ride_.get(), r, app_batch_);
  }

  std::shared_ptr<void> app_ = std::make_shared<int>(100);
  std::shared_ptr<EngineAttempt> ride_;
  int batch_storage_ = 0;
  Batches::value_type app_batch_ =
      reinterpret_cast<Batches::value_type>(&batch_storage_);
};

// The hedge goes at once (the delay has passed since the first copy was
// sent); it wins; the application's call is cancelled through its handle;
// its end, even an OK that came after all (a cancel is best effort), is
// served from the winner, and counted as an attempt that ended.
TEST_F(RidingHedgeTest, ALaterCopysWinCancelsTheFirstAndServesItFromTheWinner) {
  RideIn();
  EXPECT_EQ(engine_->state(), EngineState::kInFlight);
  EXPECT_TRUE(io_.sent.empty());  // nothing before the timer says so
  engine_->OnTimer(TimerKind::kNext);
  ASSERT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.sent[0]->number, 2);
  engine_->OnAttemptDone(io_.sent[0].get(), AttemptReport{}, nullptr);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.concluded_batches, 0u);
  EXPECT_EQ(io_.took_result_of, 2);
  EXPECT_EQ(io_.cancelled, std::vector<int>{100});
  EXPECT_EQ(io_.terminal.copy, 2);
  EXPECT_EQ(io_.terminal.cancelled, std::vector<int>{1});
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kNone);
  AppEnds(grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.served_decided, 1u);
  EXPECT_FALSE(io_.served_from_app_call);
  EXPECT_EQ(io_.served_attempts_text, "2");
  EXPECT_EQ(Counted().attempts, 2u);
}

// The first copy wins: the hedge is cancelled, the application's own
// answer stands (nothing is taken from an attempt of rpcguard's).
TEST_F(RidingHedgeTest, AFirstCopyThatWinsCancelsTheHedge) {
  RideIn();
  engine_->OnTimer(TimerKind::kNext);
  ASSERT_EQ(io_.sent.size(), 1u);
  AppEnds(grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.concluded_batches, 1u);
  EXPECT_EQ(io_.took_result_of, 0);
  EXPECT_EQ(io_.cancelled, std::vector<int>{1});  // copy 2's context
  EXPECT_EQ(io_.terminal.copy, 1);
  EXPECT_EQ(io_.terminal.cancelled, std::vector<int>{2});
}

// The caller's cancel reaches the application's own call through gRPC:
// rpcguard cancels only its copies, and a cancel before the hedge is due
// sends none.
TEST_F(RidingHedgeTest, TheCallersCancelIsNotSentTwice) {
  RideIn();
  engine_->OnTimer(TimerKind::kNext);
  ASSERT_EQ(io_.sent.size(), 1u);
  engine_->Cancel();
  Fire(io_.Active(TimerKind::kCancel).at(0));
  EXPECT_EQ(io_.cancelled, std::vector<int>{1});
  engine_->OnAttemptDone(io_.sent[0].get(),
                         AttemptReport{grpc::Status::CANCELLED}, nullptr);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.terminal.reason, GiveUpReason::kCancelled);
  EXPECT_EQ(io_.cancelled, std::vector<int>{1});  // still not the app's
  AppEnds(grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.served_decided, 1u);
}

TEST_F(RidingHedgeTest, ACancelBeforeTheHedgeIsDueSendsNoCopy) {
  RideIn();
  engine_->Cancel();
  engine_->OnTimer(TimerKind::kNext);
  EXPECT_TRUE(io_.sent.empty());
  AppEnds(grpc::StatusCode::CANCELLED);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.attempts_text, "1");
}

// A first copy that failed before its hedge was due (the glue enters then,
// without a handle): the hedging policy sends the next copy at once.
TEST_F(RidingHedgeTest, AFirstCopyFailedBeforeItsHedgeSendsTheNextAtOnce) {
  Make(Hedge());
  NewCall(absl::Seconds(10), /*hedging=*/true);
  ride_ = engine_->RideFirstAttempt(std::nullopt, clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(5));
  AppEnds(grpc::StatusCode::UNAVAILABLE);
  ASSERT_EQ(io_.sent.size(), 1u);
  EXPECT_EQ(io_.sent[0]->number, 2);
  engine_->OnAttemptDone(io_.sent[0].get(), AttemptReport{}, nullptr);
  EXPECT_EQ(io_.concluded, 1);
  EXPECT_EQ(io_.concluded_batches, 1u);
  EXPECT_TRUE(io_.cancelled.empty());
}

TEST_F(CallEngineTest, ABatchParkedBeforeTheEndIsServedAtTheEnd) {
  Make(Retry());
  NewCall();
  engine_->Start();
  engine_->Park(nullptr);  // parked
  EXPECT_EQ(io_.concluded, 0);
  End(1, grpc::StatusCode::OK);
  EXPECT_EQ(io_.concluded_batches, 1u);  // served at the end
  engine_->Park(nullptr);                // decided: served at once
  EXPECT_EQ(io_.served_decided, 1u);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
