// Copyright rpcguard authors.
//
// The retry gate under a fake clock: the order of checks around an attempt
// (internal/engine/retry_gate.h), every branch, with the real breaker, budget
// and A6 throttle. No gRPC call is made.

#include "rpcguard/internal/engine/retry_gate.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/time/time.h"
#include "rpcguard/internal/engine/attempt_policy.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::rpcguard::internal::CallSummary;
using ::rpcguard::internal::EndFacts;
using ::rpcguard::internal::HedgeAttemptPolicy;
using ::rpcguard::internal::PolicyStep;
using ::rpcguard::internal::RetryAttemptPolicy;
using ::rpcguard::internal::SendTerms;
using ::rpcguard::internal::SentOnceAttemptPolicy;
using ::rpcguard::internal::Started;
using ::rpcguard::testing::FakeClock;

// A breaker that opens on its first failure and stays open 1 s.
BreakerOptions TripOnFirstFailure() {
  BreakerOptions o;
  o.min_attempts = 1;
  o.failure_ratio = 0.5;
  o.open_time = absl::Seconds(1);
  o.half_open_probes = 1;
  o.half_open_successes = 1;
  return o;
}

// A budget of exactly one retry per 10 s window, whatever the traffic.
RetryBudgetOptions OneRetry() {
  RetryBudgetOptions o;
  o.ratio = 0;
  o.min_retries_per_second = 0.1;
  return o;
}

AttemptOutcome Answer(grpc::StatusCode code) {
  AttemptOutcome o;
  o.code = code;
  return o;
}

// `o` with the server's "do not retry" (a negative pushback).
AttemptOutcome Stopped(AttemptOutcome o, bool stop = true) {
  o.server_said_stop = stop;
  return o;
}

Decision RetryIn(absl::Duration delay) {
  Decision d;
  d.action = Decision::Action::kRetry;
  d.status_class = StatusClass::kRetriable;
  d.delay = delay;
  return d;
}

class RetryGateTest : public ::testing::Test {
 protected:
  // Opens the breaker with one failed attempt.
  void OpenBreaker() {
    Admission a = breaker_->Admit();
    breaker_->Record(a, AttemptResult::kFailure);
    ASSERT_EQ(breaker_->state(), BreakerState::kOpen);
  }

  DestinationGates Gates() {
    return {breaker_.get(), budget_.get(), throttle_.get()};
  }

  FakeClock clock_;
  std::shared_ptr<CircuitBreaker> breaker_ =
      *CircuitBreaker::Create("gate", TripOnFirstFailure(), &clock_);
  std::shared_ptr<RetryBudget> budget_ =
      *RetryBudget::Create(OneRetry(), &clock_);
  std::shared_ptr<RetryThrottle> throttle_ =
      *RetryThrottle::Create(RetryThrottleOptions());
};

// --- RecordAttemptEnd: what the destination learns of an attempt ---

struct RecordRow {
  std::string name;
  AttemptOutcome outcome;
  StatusClass status_class;
  int64_t window_attempts;  // what the breaker counted
  int64_t window_failures;
};

class RecordAttemptEndTest : public RetryGateTest,
                             public ::testing::WithParamInterface<RecordRow> {};

TEST_P(RecordAttemptEndTest, BreakerCountsOnlyTheServersAnswers) {
  const RecordRow& row = GetParam();
  // One that does not trip (a trip clears the window).
  BreakerOptions o = TripOnFirstFailure();
  o.min_attempts = 100;
  breaker_ = *CircuitBreaker::Create("record", o, &clock_);
  std::optional<Admission> admission = breaker_->Admit();
  RecordAttemptEnd(Gates(), admission, row.status_class, row.outcome,
                   /*retrying=*/false);
  const BreakerSnapshot s = breaker_->Snapshot();
  EXPECT_EQ(s.window_attempts, row.window_attempts);
  EXPECT_EQ(s.window_failures, row.window_failures);
}

std::vector<RecordRow> RecordRows() {
  AttemptOutcome caller_cancelled = Answer(grpc::StatusCode::CANCELLED);
  caller_cancelled.caller_cancelled = true;
  AttemptOutcome caller_deadline = Answer(grpc::StatusCode::DEADLINE_EXCEEDED);
  caller_deadline.caller_deadline_expired = true;
  AttemptOutcome attempt_timeout = Answer(grpc::StatusCode::DEADLINE_EXCEEDED);
  attempt_timeout.per_attempt_timeout_expired = true;
  AttemptOutcome local = Answer(grpc::StatusCode::RESOURCE_EXHAUSTED);
  local.local_error = true;
  AttemptOutcome not_sent = Answer(grpc::StatusCode::UNAVAILABLE);
  not_sent.not_sent = true;
  AttemptOutcome below = Stopped(Answer(grpc::StatusCode::UNAVAILABLE));
  below.downstream_gave_up = true;
  AttemptOutcome below_overload = below;
  below_overload.code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  return {
      {"OkIsASuccess", Answer(grpc::StatusCode::OK), StatusClass::kOk, 1, 0},
      {"RetriableIsAFailure", Answer(grpc::StatusCode::UNAVAILABLE),
       StatusClass::kRetriable, 1, 1},
      {"PerAttemptTimeoutIsAFailure", attempt_timeout, StatusClass::kRetriable,
       1, 1},
      {"FatalAnswerIsASuccess", Answer(grpc::StatusCode::INVALID_ARGUMENT),
       StatusClass::kFatal, 1, 0},
      // The server itself said CANCELLED or DEADLINE_EXCEEDED: it answered.
      {"ServerSentCancelledIsASuccess", Answer(grpc::StatusCode::CANCELLED),
       StatusClass::kFatal, 1, 0},
      {"ServerSentDeadlineIsASuccess",
       Answer(grpc::StatusCode::DEADLINE_EXCEEDED), StatusClass::kFatal, 1, 0},
      {"CallerCancelIsIgnored", caller_cancelled, StatusClass::kFatal, 0, 0},
      {"CallerDeadlineIsIgnored", caller_deadline, StatusClass::kFatal, 0, 0},
      // An error the client made itself says nothing of the server, even
      // with a code the policy retries.
      {"LocalErrorIsIgnored", local, StatusClass::kFatal, 0, 0},
      {"LocalErrorIsIgnoredWhateverItsClass", local, StatusClass::kRetriable, 0,
       0},
      // No connection: the server never saw it.
      {"NotSentIsIgnored", not_sent, StatusClass::kRetriable, 0, 0},
      // Overload is the adaptive throttle's evidence, not the breaker's.
      {"OverloadIsIgnored", Answer(grpc::StatusCode::RESOURCE_EXHAUSTED),
       StatusClass::kRetriable, 0, 0},
      // A middle's answer about its store: the middle is up.
      {"AGiveUpFromBelowIsIgnored", below, StatusClass::kRetriable, 0, 0},
      {"AGiveUpFromBelowIsIgnoredWhateverItsCode", below_overload,
       StatusClass::kRetriable, 0, 0},
      {"AStopIsIgnored", Stopped(Answer(grpc::StatusCode::UNAVAILABLE)),
       StatusClass::kRetriable, 0, 0},
  };
}

INSTANTIATE_TEST_SUITE_P(Rows, RecordAttemptEndTest,
                         ::testing::ValuesIn(RecordRows()),
                         [](const ::testing::TestParamInfo<RecordRow>& i) {
                           return i.param.name;
                         });

TEST_F(RetryGateTest, ThrottleCountsEveryAttemptAsA6Says) {
  RetryThrottleOptions o;
  o.max_tokens = 2;  // retries allowed while tokens > 1
  o.token_ratio = 0.5;
  throttle_ = *RetryThrottle::Create(o);
  // A fatal answer costs nothing.
  EXPECT_TRUE(SettleAttempt(Gates(), std::nullopt, StatusClass::kFatal,
                            Answer(grpc::StatusCode::NOT_FOUND)));
  EXPECT_EQ(throttle_->milli_tokens(), 2000);
  // The server saying stop costs a token, as a retriable failure does; at
  // half of maxTokens retries stop.
  EXPECT_FALSE(SettleAttempt(Gates(), std::nullopt, StatusClass::kFatal,
                             Stopped(Answer(grpc::StatusCode::INTERNAL))));
  EXPECT_EQ(throttle_->milli_tokens(), 1000);
  EXPECT_FALSE(SettleAttempt(Gates(), std::nullopt, StatusClass::kRetriable,
                             Answer(grpc::StatusCode::UNAVAILABLE)));
  EXPECT_EQ(throttle_->milli_tokens(), 0);
  // Successes refill it.
  for (int i = 0; i < 3; ++i) {
    SettleAttempt(Gates(), std::nullopt, StatusClass::kOk,
                  Answer(grpc::StatusCode::OK));
  }
  EXPECT_EQ(throttle_->milli_tokens(), 1500);
  EXPECT_TRUE(throttle_->RetryAllowed());
}

// A local error costs no token and earns none, even with a server's "stop"
// in whatever trailers came with it.
TEST_F(RetryGateTest, LocalErrorLeavesTheThrottleAlone) {
  RetryThrottleOptions o;
  o.max_tokens = 2;
  o.token_ratio = 0.5;
  throttle_ = *RetryThrottle::Create(o);
  AttemptOutcome local = Answer(grpc::StatusCode::RESOURCE_EXHAUSTED);
  local.local_error = true;
  for (bool stop : {false, true}) {
    for (StatusClass c : {StatusClass::kFatal, StatusClass::kRetriable}) {
      EXPECT_TRUE(
          SettleAttempt(Gates(), std::nullopt, c, Stopped(local, stop)));
      EXPECT_EQ(throttle_->milli_tokens(), 2000);
    }
  }
}

// --- OriginOf: who failed, and which judge hears it ---

TEST(OriginOfTest, EachEndHasOneOrigin) {
  AttemptOutcome o = Answer(grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(OriginOf(o), AttemptOrigin::kServer);
  EXPECT_EQ(OriginOf(Answer(grpc::StatusCode::OK)), AttemptOrigin::kServer);
  EXPECT_EQ(OriginOf(Answer(grpc::StatusCode::RESOURCE_EXHAUSTED)),
            AttemptOrigin::kOverload);
  EXPECT_EQ(OriginOf(Stopped(o)), AttemptOrigin::kBelow);
  AttemptOutcome below = Stopped(Answer(grpc::StatusCode::RESOURCE_EXHAUSTED));
  // RESOURCE_EXHAUSTED with "do not retry" and no trailer: the server's own
  // shedding (rpcguard::Overloaded without a delay).
  EXPECT_EQ(OriginOf(below), AttemptOrigin::kOverload);
  below.downstream_gave_up = true;
  EXPECT_EQ(OriginOf(below), AttemptOrigin::kBelow);
  AttemptOutcome not_sent = o;
  not_sent.not_sent = true;
  EXPECT_EQ(OriginOf(not_sent), AttemptOrigin::kNoServer);
  // The caller's own end comes first, whatever the server said.
  AttemptOutcome cancelled = below;
  cancelled.caller_cancelled = true;
  EXPECT_EQ(OriginOf(cancelled), AttemptOrigin::kCaller);
  AttemptOutcome local = Answer(grpc::StatusCode::RESOURCE_EXHAUSTED);
  local.local_error = true;
  EXPECT_EQ(OriginOf(local), AttemptOrigin::kCaller);
  EXPECT_EQ(AttemptOriginName(AttemptOrigin::kNoServer), "no_server");
}

// The adaptive throttle hears every answer a server gave and counts only
// its own overload rejections; the caller's ends and attempts no server
// took are no answer.
TEST_F(RetryGateTest, TheAdaptiveThrottleHearsOnlyServersAnswers) {
  std::shared_ptr<AdaptiveThrottle> adaptive =
      *AdaptiveThrottle::Create(AdaptiveThrottleOptions(), &clock_);
  DestinationGates gates;
  gates.adaptive = adaptive.get();
  AttemptOutcome below = Stopped(Answer(grpc::StatusCode::UNAVAILABLE));
  below.downstream_gave_up = true;
  AttemptOutcome not_sent = Answer(grpc::StatusCode::UNAVAILABLE);
  not_sent.not_sent = true;
  AttemptOutcome cancelled = Answer(grpc::StatusCode::CANCELLED);
  cancelled.caller_cancelled = true;
  struct Row {
    AttemptOutcome outcome;
    int64_t requests, accepts;
  };
  for (const Row& row : std::vector<Row>{
           {Answer(grpc::StatusCode::OK), 1, 1},
           {Answer(grpc::StatusCode::UNAVAILABLE), 1, 1},
           {Answer(grpc::StatusCode::RESOURCE_EXHAUSTED), 1, 0},
           {below, 1, 1},
           {not_sent, 0, 0},
           {cancelled, 0, 0},
       }) {
    adaptive = *AdaptiveThrottle::Create(AdaptiveThrottleOptions(), &clock_);
    gates.adaptive = adaptive.get();
    SettleAttempt(gates, std::nullopt, StatusClass::kRetriable, row.outcome);
    const AdaptiveThrottleSnapshot s = adaptive->Snapshot();
    EXPECT_EQ(s.requests, row.requests)
        << AttemptOriginName(OriginOf(row.outcome));
    EXPECT_EQ(s.accepts, row.accepts)
        << AttemptOriginName(OriginOf(row.outcome));
  }
}

TEST_F(RetryGateTest, NoBreakerNoAdmissionRecordsNothing) {
  const DestinationGates none;
  EXPECT_TRUE(SettleAttempt(none, std::nullopt, StatusClass::kRetriable,
                            Answer(grpc::StatusCode::UNAVAILABLE)));
  RecordAttemptEnd(none, std::nullopt, StatusClass::kRetriable,
                   Answer(grpc::StatusCode::UNAVAILABLE), false);
}

// No connection: the throttle hears nothing either.
TEST_F(RetryGateTest, NotSentLeavesTheThrottleAlone) {
  RetryThrottleOptions o;
  o.max_tokens = 2;
  o.token_ratio = 0.5;
  throttle_ = *RetryThrottle::Create(o);
  AttemptOutcome not_sent = Answer(grpc::StatusCode::UNAVAILABLE);
  not_sent.not_sent = true;
  EXPECT_TRUE(
      SettleAttempt(Gates(), std::nullopt, StatusClass::kRetriable, not_sent));
  EXPECT_EQ(throttle_->milli_tokens(), 2000);
}

// --- Evidence: a failure the call retries is not recorded ---

// A breaker that would trip on 2 failures in a row.
BreakerOptions TripOnTwo() {
  BreakerOptions o;
  o.min_attempts = 2;
  o.failure_ratio = 0.5;
  return o;
}

TEST_F(RetryGateTest, AFailureTheCallRetriesIsNotRecorded) {
  breaker_ = *CircuitBreaker::Create("defer", TripOnTwo(), &clock_);
  const AttemptOutcome unavailable = Answer(grpc::StatusCode::UNAVAILABLE);
  for (int call = 0; call < 50; ++call) {
    // Attempt 1 fails and the call retries: nothing recorded.
    std::optional<Admission> first = breaker_->Admit();
    RecordAttemptEnd(Gates(), first, StatusClass::kRetriable, unavailable,
                     /*retrying=*/true);
    // The retry succeeds: one success for the call.
    std::optional<Admission> retry = breaker_->Admit();
    RecordAttemptEnd(Gates(), retry, StatusClass::kOk,
                     Answer(grpc::StatusCode::OK), /*retrying=*/false);
  }
  const BreakerSnapshot s = breaker_->Snapshot();
  EXPECT_EQ(s.state, BreakerState::kClosed);
  EXPECT_EQ(s.window_attempts, 50);
  EXPECT_EQ(s.window_failures, 0);
}

TEST_F(RetryGateTest, ACallThatFailsAfterItsRetriesIsAFailure) {
  breaker_ = *CircuitBreaker::Create("defer", TripOnTwo(), &clock_);
  const AttemptOutcome unavailable = Answer(grpc::StatusCode::UNAVAILABLE);
  for (int call = 0; call < 2; ++call) {
    std::optional<Admission> first = breaker_->Admit();
    RecordAttemptEnd(Gates(), first, StatusClass::kRetriable, unavailable,
                     /*retrying=*/true);
    std::optional<Admission> last = breaker_->Admit();
    RecordAttemptEnd(Gates(), last, StatusClass::kRetriable, unavailable,
                     /*retrying=*/false);
  }
  EXPECT_EQ(breaker_->state(), BreakerState::kOpen);
}

// A HALF_OPEN probe is the breaker's own question: its failure reopens the
// breaker even when the call retries.
TEST_F(RetryGateTest, AProbeIsRecordedEvenWhenTheCallRetries) {
  OpenBreaker();
  clock_.Advance(absl::Seconds(1));
  std::optional<Admission> probe = breaker_->Admit();
  ASSERT_TRUE(probe->probe());
  RecordAttemptEnd(Gates(), probe, StatusClass::kRetriable,
                   Answer(grpc::StatusCode::UNAVAILABLE), /*retrying=*/true);
  EXPECT_EQ(breaker_->state(), BreakerState::kOpen);
}

// The retry of a deferred failure is refused: for budget or deadline the
// failure stands; a cancel says nothing.
TEST_F(RetryGateTest, ADeferredFailureStandsWhenItsRetryIsRefused) {
  BreakerOptions o = TripOnTwo();
  o.min_attempts = 100;  // counts without tripping
  for (GiveUpReason refused :
       {GiveUpReason::kBudgetExhausted, GiveUpReason::kDeadline,
        GiveUpReason::kCancelled, GiveUpReason::kBreakerOpen}) {
    breaker_ = *CircuitBreaker::Create("defer", o, &clock_);
    const Admission a = breaker_->Admit();
    RecordDeferredFailure(Gates(), a, refused);
    const bool stands = refused == GiveUpReason::kBudgetExhausted ||
                        refused == GiveUpReason::kDeadline;
    EXPECT_EQ(breaker_->Snapshot().window_failures, stands ? 1 : 0)
        << GiveUpReasonName(refused);
  }
}

// --- How a retry is paid for ---

TEST(RetryChargeForTest, ByWhatTheFailureSaid) {
  AttemptOutcome o = Answer(grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(RetryChargeFor(o, false), RetryCharge::kOnFailure);
  EXPECT_EQ(RetryChargeFor(Answer(grpc::StatusCode::ABORTED), false),
            RetryCharge::kOnFailure);
  // Overload: paid when sent.
  EXPECT_EQ(RetryChargeFor(o, /*server_pushback=*/true), RetryCharge::kUpFront);
  EXPECT_EQ(RetryChargeFor(Answer(grpc::StatusCode::RESOURCE_EXHAUSTED), false),
            RetryCharge::kUpFront);
  AttemptOutcome timeout = Answer(grpc::StatusCode::DEADLINE_EXCEEDED);
  timeout.per_attempt_timeout_expired = true;
  EXPECT_EQ(RetryChargeFor(timeout, false), RetryCharge::kUpFront);
  // Never reached the server: free, whatever else.
  o.not_sent = true;
  EXPECT_EQ(RetryChargeFor(o, true), RetryCharge::kFree);
}

// A retry granted kOnFailure is paid only when it fails; one that
// succeeds, or is not sent at all, is refunded.
TEST_F(RetryGateTest, OnFailureRetriesArePaidOnlyWhenTheyFail) {
  // The budget alone: a failure must not open a breaker here.
  const DestinationGates gates{nullptr, budget_.get(), nullptr};
  const AttemptStart ok =
      BeforeAttempt(2, false, absl::Seconds(1), gates, RetryCharge::kOnFailure);
  ASSERT_EQ(ok.refused, GiveUpReason::kNone);
  ASSERT_EQ(ok.charge, RetryCharge::kOnFailure);
  SettleAttempt(gates, ok.charge, StatusClass::kOk,
                Answer(grpc::StatusCode::OK));
  EXPECT_EQ(budget_->Snapshot().retries, 0);
  EXPECT_EQ(budget_->Snapshot().refunded, 1u);
  // OneRetry(): one paid retry per window. A failed one pays it...
  const AttemptStart bad =
      BeforeAttempt(2, false, absl::Seconds(1), gates, RetryCharge::kOnFailure);
  ASSERT_EQ(bad.refused, GiveUpReason::kNone);
  SettleAttempt(gates, bad.charge, StatusClass::kRetriable,
                Answer(grpc::StatusCode::UNAVAILABLE));
  EXPECT_EQ(budget_->Snapshot().retries, 1);
  // ...and the next is refused, kOnFailure or not, but a free one passes.
  EXPECT_EQ(
      BeforeAttempt(2, false, absl::Seconds(1), gates, RetryCharge::kOnFailure)
          .refused,
      GiveUpReason::kBudgetExhausted);
  EXPECT_EQ(BeforeAttempt(2, false, absl::Seconds(1), gates, RetryCharge::kFree)
                .refused,
            GiveUpReason::kNone);
}

// --- GateRetry: vetoes before the backoff, spending nothing ---

struct GateRow {
  std::string name;
  bool breaker_open = false;
  bool breaker_forced_open = false;
  bool throttle_allows = true;
  bool budget_spent = false;
  Decision decision;
  Decision::Action action;
  GiveUpReason reason;
};

class GateRetryTest : public RetryGateTest,
                      public ::testing::WithParamInterface<GateRow> {};

TEST_P(GateRetryTest, VetoesInOrder) {
  const GateRow& row = GetParam();
  if (row.breaker_open) OpenBreaker();
  if (row.breaker_forced_open) breaker_->ForceOpen();
  if (row.budget_spent) {
    ASSERT_TRUE(budget_->TryAcquireRetry());
  }
  const RetryBudgetSnapshot before = budget_->Snapshot();
  const Decision d = GateRetry(row.decision, row.throttle_allows, Gates());
  EXPECT_EQ(d.action, row.action);
  EXPECT_EQ(GiveUpReasonName(d.reason), GiveUpReasonName(row.reason));
  if (d.action != Decision::Action::kRetry) {
    EXPECT_EQ(d.delay, absl::ZeroDuration());
  } else {
    EXPECT_EQ(d.delay, row.decision.delay);
  }
  // Nothing is spent before the backoff, whatever the answer.
  const RetryBudgetSnapshot after = budget_->Snapshot();
  EXPECT_EQ(after.retries, before.retries);
  EXPECT_EQ(after.refused, before.refused);
}

std::vector<GateRow> GateRows() {
  using A = Decision::Action;
  const Decision retry = RetryIn(absl::Milliseconds(40));
  Decision max_attempts;
  max_attempts.action = A::kGiveUp;
  max_attempts.reason = GiveUpReason::kMaxAttempts;
  max_attempts.status_class = StatusClass::kRetriable;
  Decision done;
  Decision refresh;
  refresh.action = A::kRefreshAuth;
  refresh.status_class = StatusClass::kAuth;
  std::vector<GateRow> rows;
  rows.push_back({"RetryWhenAllAllow", false, false, true, false, retry,
                  A::kRetry, GiveUpReason::kNone});
  rows.push_back({"OpenBreakerRefuses", true, false, true, false, retry,
                  A::kGiveUp, GiveUpReason::kBreakerOpen});
  rows.push_back({"ForcedOpenBreakerRefuses", false, true, true, false, retry,
                  A::kGiveUp, GiveUpReason::kBreakerOpen});
  rows.push_back({"ThrottleRefuses", false, false, false, false, retry,
                  A::kGiveUp, GiveUpReason::kBudgetExhausted});
  rows.push_back({"EmptyBudgetRefuses", false, false, true, true, retry,
                  A::kGiveUp, GiveUpReason::kBudgetExhausted});
  // The breaker is asked first: the reason names it.
  rows.push_back({"BreakerBeforeThrottleAndBudget", true, false, false, true,
                  retry, A::kGiveUp, GiveUpReason::kBreakerOpen});
  rows.push_back({"ThrottleBeforeBudget", false, false, false, true, retry,
                  A::kGiveUp, GiveUpReason::kBudgetExhausted});
  // A call that would not retry anyway keeps its own reason.
  rows.push_back({"GiveUpKeepsItsReason", true, false, false, true,
                  max_attempts, A::kGiveUp, GiveUpReason::kMaxAttempts});
  rows.push_back({"DoneStaysDone", true, false, false, true, done, A::kDone,
                  GiveUpReason::kNone});
  rows.push_back({"RefreshIsNotVetoed", true, false, false, true, refresh,
                  A::kRefreshAuth, GiveUpReason::kNone});
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Rows, GateRetryTest, ::testing::ValuesIn(GateRows()),
                         [](const ::testing::TestParamInfo<GateRow>& i) {
                           return i.param.name;
                         });

// --- BeforeAttempt: right before an attempt is sent ---

TEST_F(RetryGateTest, CancelledCallSendsNothingAndSpendsNothing) {
  const AttemptStart s =
      BeforeAttempt(2, /*cancelled=*/true, absl::Seconds(1), Gates());
  EXPECT_EQ(s.refused, GiveUpReason::kCancelled);
  EXPECT_FALSE(s.admission.has_value());
  EXPECT_EQ(budget_->Snapshot().retries, 0);
  EXPECT_EQ(breaker_->Snapshot().refused, 0u);
}

TEST_F(RetryGateTest, NoTimeLeftSendsNothing) {
  for (absl::Duration left : {absl::ZeroDuration(), -absl::Milliseconds(1)}) {
    const AttemptStart s = BeforeAttempt(2, false, left, Gates());
    EXPECT_EQ(s.refused, GiveUpReason::kDeadline);
    EXPECT_FALSE(s.admission.has_value());
  }
  EXPECT_EQ(budget_->Snapshot().retries, 0);
}

TEST_F(RetryGateTest, RetryTheBreakerRefusesSpendsNoBudget) {
  OpenBreaker();
  const AttemptStart s = BeforeAttempt(2, false, absl::Seconds(1), Gates());
  EXPECT_EQ(s.refused, GiveUpReason::kBreakerOpen);
  ASSERT_TRUE(s.admission.has_value());
  EXPECT_FALSE(s.admission->allowed());
  const RetryBudgetSnapshot b = budget_->Snapshot();
  EXPECT_EQ(b.retries, 0);
  EXPECT_EQ(b.refused, 0u);
  // The one retry of the window is still there for a call that can use it.
  EXPECT_TRUE(budget_->CanAcquireRetry());
}

TEST_F(RetryGateTest, BudgetRefusalGivesTheProbeBack) {
  OpenBreaker();
  clock_.Advance(absl::Seconds(1));         // HALF_OPEN: one probe at a time
  ASSERT_TRUE(budget_->TryAcquireRetry());  // the window's one retry
  const AttemptStart s = BeforeAttempt(2, false, absl::Seconds(1), Gates());
  EXPECT_EQ(s.refused, GiveUpReason::kBudgetExhausted);
  EXPECT_FALSE(s.admission.has_value());
  EXPECT_EQ(breaker_->Snapshot().probes_in_flight, 0);
  // The probe permit is free again: another call may probe now.
  EXPECT_TRUE(breaker_->Admit().allowed());
}

TEST_F(RetryGateTest, FirstAttemptEarnsBudgetAndRetrySpendsIt) {
  const AttemptStart first = BeforeAttempt(1, false, absl::Seconds(1), Gates());
  EXPECT_EQ(first.refused, GiveUpReason::kNone);
  ASSERT_TRUE(first.admission.has_value());
  EXPECT_TRUE(first.admission->allowed());
  EXPECT_EQ(budget_->Snapshot().first_attempts, 1);
  EXPECT_EQ(budget_->Snapshot().retries, 0);

  const AttemptStart retry = BeforeAttempt(2, false, absl::Seconds(1), Gates());
  EXPECT_EQ(retry.refused, GiveUpReason::kNone);
  EXPECT_EQ(budget_->Snapshot().first_attempts, 1);
  EXPECT_EQ(budget_->Snapshot().retries, 1);
  // A first attempt is never refused for budget.
  budget_ = *RetryBudget::Create(OneRetry(), &clock_);
  ASSERT_TRUE(budget_->TryAcquireRetry());
  EXPECT_EQ(BeforeAttempt(1, false, absl::Seconds(1), Gates()).refused,
            GiveUpReason::kNone);
}

TEST_F(RetryGateTest, WithoutDestinationStateOnlyTheCallDecides) {
  const DestinationGates none;
  EXPECT_EQ(BeforeAttempt(5, false, absl::Seconds(1), none).refused,
            GiveUpReason::kNone);
  EXPECT_EQ(GateRetry(RetryIn(absl::Seconds(1)), true, none).action,
            Decision::Action::kRetry);
}

// --- SentOnceAttemptPolicy: a call sent once ends like a hijacked one ---
//
// The application's own call, sent once, ends through the engine with this
// policy: the reason it gives is the one a RetryController allowed one
// attempt gives, and a repeatable call sent once for a reason of the plan's
// gives that reason.

struct SentOnceRow {
  std::string name;
  Idempotency idempotency;
  int max_attempts;
  grpc::StatusCode code;
  absl::Duration deadline_in;  // from now; infinite for none
  bool cancelled;
  Decision::Action action;
  GiveUpReason reason;
  StatusClass status_class;
  bool local_error = false;
};

class SentOncePolicyTest : public ::testing::TestWithParam<SentOnceRow> {};

// The engine's reading of an end (CallEngine::OnAttemptDone), then the
// policy's step.
PolicyStep EndOnce(RetryController& controller, bool may_repeat,
                   GiveUpReason why, const AttemptEnd& end,
                   const Pushback& pushback = Pushback()) {
  SentOnceAttemptPolicy policy(&controller, may_repeat, why);
  controller.StartAttempt();
  EndFacts facts;
  facts.number = 1;
  facts.end = end;
  facts.ended_at = controller.Now();
  facts.outcome = controller.OutcomeOf(end, facts.ended_at);
  facts.status_class = controller.classifier().Classify(facts.outcome);
  facts.pushback = pushback;
  facts.cancelled = end.caller_cancelled;
  absl::BitGen gen;
  return policy.OnAttemptEnd(facts, gen);
}

TEST_P(SentOncePolicyTest, SameReasonAsTheController) {
  const SentOnceRow& row = GetParam();
  FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = row.idempotency;
  policy.retry.max_attempts = row.max_attempts;
  const absl::Time deadline = row.deadline_in == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : clock.MonotonicNow() + row.deadline_in;
  AttemptEnd end;
  end.code = row.code;
  end.caller_cancelled = row.cancelled;
  end.local_error = row.local_error;
  // One attempt allowed: what the controller itself says, its reference.
  MethodPolicy once = policy;
  once.retry.max_attempts = 1;
  RetryController reference(once, MayRepeat(row.idempotency), deadline, &clock);
  reference.StartAttempt();
  absl::BitGen gen;
  const Decision d = reference.OnAttemptEnd(end, Pushback(), gen);
  EXPECT_EQ(d.action, row.action);
  EXPECT_EQ(GiveUpReasonName(d.reason), GiveUpReasonName(row.reason));

  // The policy, on the method's own policy (any max_attempts).
  RetryController controller(policy, MayRepeat(row.idempotency), deadline,
                             &clock);
  const PolicyStep step =
      EndOnce(controller, MayRepeat(row.idempotency), GiveUpReason::kNone, end);
  EXPECT_TRUE(step.done);
  EXPECT_FALSE(step.retrying);
  EXPECT_EQ(GiveUpReasonName(step.reason), GiveUpReasonName(row.reason));
  EXPECT_EQ(StatusClassName(step.status_class),
            StatusClassName(row.status_class));
  EXPECT_EQ(step.outcome.code, row.code);
  EXPECT_EQ(step.outcome.caller_cancelled, row.cancelled);
  EXPECT_EQ(step.outcome.local_error, row.local_error);
}

TEST(SentOncePolicy, ARepeatableCallSentOnceGivesThePlansReason) {
  FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = Idempotency::kIdempotent;
  policy.retry.max_attempts = 5;
  RetryController controller(policy, /*may_repeat=*/true,
                             clock.MonotonicNow() + absl::Seconds(5), &clock);
  AttemptEnd end;
  end.code = grpc::StatusCode::UNAVAILABLE;
  const PolicyStep step = EndOnce(controller, /*may_repeat=*/true,
                                  GiveUpReason::kUnsupportedCall, end);
  EXPECT_TRUE(step.done);
  EXPECT_EQ(GiveUpReasonName(step.reason),
            GiveUpReasonName(GiveUpReason::kUnsupportedCall));
}

TEST(SentOncePolicy, TheServersStopNamesTheGiveUp) {
  FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = Idempotency::kIdempotent;
  RetryController controller(policy, /*may_repeat=*/true,
                             absl::InfiniteFuture(), &clock);
  AttemptEnd end;
  end.code = grpc::StatusCode::UNAVAILABLE;
  Pushback stop;
  stop.kind = Pushback::Kind::kStop;
  const PolicyStep step =
      EndOnce(controller, /*may_repeat=*/true, GiveUpReason::kNone, end, stop);
  EXPECT_TRUE(step.done);
  EXPECT_EQ(GiveUpReasonName(step.reason), GiveUpReasonName(stop.StopReason()));
}

TEST(SentOncePolicy, AnAuthFailureIsNotRefreshed) {
  // The engine enables no refresh for a call sent once; the policy would
  // not act on one either.
  FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = Idempotency::kIdempotent;
  RetryController controller(policy, /*may_repeat=*/true,
                             absl::InfiniteFuture(), &clock);
  controller.EnableAuthRefresh();
  AttemptEnd end;
  end.code = grpc::StatusCode::UNAUTHENTICATED;
  const PolicyStep step =
      EndOnce(controller, /*may_repeat=*/true, GiveUpReason::kNone, end);
  EXPECT_TRUE(step.done);
  EXPECT_FALSE(step.refresh);
}

std::vector<SentOnceRow> SentOnceRows() {
  using A = Decision::Action;
  using G = GiveUpReason;
  using C = grpc::StatusCode;
  const absl::Duration inf = absl::InfiniteDuration();
  return {
      {"Ok", Idempotency::kUnknown, 3, C::OK, inf, false, A::kDone, G::kNone,
       StatusClass::kOk},
      {"RetriableNotIdempotent", Idempotency::kUnknown, 3, C::UNAVAILABLE, inf,
       false, A::kGiveUp, G::kNotIdempotent, StatusClass::kRetriable},
      {"RetriableIdempotentOneAttempt", Idempotency::kIdempotent, 1,
       C::UNAVAILABLE, inf, false, A::kGiveUp, G::kMaxAttempts,
       StatusClass::kRetriable},
      {"RetriableKeyedOneAttempt", Idempotency::kKeyed, 1, C::UNAVAILABLE, inf,
       false, A::kGiveUp, G::kMaxAttempts, StatusClass::kRetriable},
      {"Fatal", Idempotency::kUnknown, 3, C::NOT_FOUND, inf, false, A::kGiveUp,
       G::kFatal, StatusClass::kFatal},
      {"Auth", Idempotency::kIdempotent, 1, C::UNAUTHENTICATED, inf, false,
       A::kGiveUp, G::kAuth, StatusClass::kAuth},
      {"ServerSentDeadlineIsFatal", Idempotency::kUnknown, 3,
       C::DEADLINE_EXCEEDED, absl::Seconds(5), false, A::kGiveUp, G::kFatal,
       StatusClass::kFatal},
      {"CallerDeadline", Idempotency::kUnknown, 3, C::DEADLINE_EXCEEDED,
       absl::ZeroDuration(), false, A::kGiveUp, G::kDeadline,
       StatusClass::kFatal},
      {"CallerCancel", Idempotency::kUnknown, 3, C::CANCELLED, inf, true,
       A::kGiveUp, G::kCancelled, StatusClass::kFatal},
      // The client's own error, not the method's idempotency, ended it.
      {"LocalErrorNotIdempotent", Idempotency::kUnknown, 3,
       C::RESOURCE_EXHAUSTED, inf, false, A::kGiveUp, G::kLocalError,
       StatusClass::kFatal, true},
      {"LocalErrorOneAttempt", Idempotency::kIdempotent, 1, C::UNAVAILABLE, inf,
       false, A::kGiveUp, G::kLocalError, StatusClass::kFatal, true},
      {"CallerCancelBeatsLocalError", Idempotency::kUnknown, 3, C::UNAVAILABLE,
       inf, true, A::kGiveUp, G::kCancelled, StatusClass::kFatal, true},
  };
}

INSTANTIATE_TEST_SUITE_P(Rows, SentOncePolicyTest,
                         ::testing::ValuesIn(SentOnceRows()),
                         [](const ::testing::TestParamInfo<SentOnceRow>& i) {
                           return i.param.name;
                         });

// What differs between the policies is asked of them, never of the engine
// (issue 30, §3): which budget pays, whether the attempt is traced, what
// the terminal line names and the stats a call leaves.
class AttemptPolicyTerms : public ::testing::Test {
 protected:
  // A hedging policy of `max_attempts` copies `delay` apart.
  static HedgingPolicy Hedging(int max_attempts, absl::Duration delay) {
    HedgingPolicy h;
    h.max_attempts = max_attempts;
    h.delay = delay;
    return h;
  }

  FakeClock clock_;
  MethodPolicy policy_;
  RetryController controller_{policy_, /*may_repeat=*/true,
                              clock_.MonotonicNow() + absl::Seconds(1),
                              &clock_};
};

TEST_F(AttemptPolicyTerms, ARetryIsPaidByTheRetryBudgetAsItsStepSaid) {
  RetryAttemptPolicy retry(&controller_, DestinationGates{});
  const SendTerms first =
      retry.TermsFor(/*first=*/true, std::nullopt, RetryCharge::kOnFailure,
                     /*next_waits=*/true);
  EXPECT_EQ(first.budget, nullptr);
  EXPECT_EQ(first.charge, RetryCharge::kUpFront);
  EXPECT_FALSE(first.waits);
  EXPECT_FALSE(first.traced);
  const SendTerms next =
      retry.TermsFor(/*first=*/false, std::nullopt, RetryCharge::kOnFailure,
                     /*next_waits=*/true);
  EXPECT_EQ(next.budget, nullptr);
  EXPECT_EQ(next.charge, RetryCharge::kOnFailure);
  EXPECT_TRUE(next.waits);
  EXPECT_FALSE(next.traced);
  EXPECT_EQ(next.counts_first, nullptr);
  TraceEvent terminal;
  terminal.cancelled = {1};
  retry.Annotate(terminal, 2);
  EXPECT_EQ(terminal.copy, 0);
  EXPECT_TRUE(terminal.cancelled.empty());
  EXPECT_FALSE(retry.Summary(2, true, 2).has_value());
  EXPECT_FALSE(retry.Start(clock_.MonotonicNow()).keep_deadline);
}

TEST_F(AttemptPolicyTerms,
       AHedgeIsPaidByTheHedgeBudgetAndAReplacementAsARetry) {
  const HedgingPolicy hedging = Hedging(3, absl::Milliseconds(30));
  std::shared_ptr<RetryBudget> hedge_budget =
      *RetryBudget::Create(OneRetry(), &clock_);
  HedgeAttemptPolicy hedge(hedging, hedging.delay, &controller_, &clock_,
                           absl::ZeroDuration(), hedge_budget.get());
  const Started start = hedge.Start(clock_.MonotonicNow());
  EXPECT_EQ(start.timer, clock_.MonotonicNow() + absl::Milliseconds(30));
  EXPECT_FALSE(start.keep_deadline);
  const SendTerms first = hedge.TermsFor(/*first=*/true, std::nullopt,
                                         RetryCharge::kOnFailure, true);
  EXPECT_EQ(first.budget, nullptr);
  EXPECT_EQ(first.counts_first, hedge_budget.get());
  EXPECT_FALSE(first.traced);
  const SendTerms extra = hedge.TermsFor(/*first=*/false, std::nullopt,
                                         RetryCharge::kOnFailure, true);
  EXPECT_EQ(extra.budget, hedge_budget.get());
  EXPECT_EQ(extra.charge, RetryCharge::kUpFront);
  EXPECT_FALSE(extra.waits);
  EXPECT_TRUE(extra.traced);
  const SendTerms replacement = hedge.TermsFor(
      /*first=*/false, RetryCharge::kOnFailure, RetryCharge::kUpFront, true);
  EXPECT_EQ(replacement.budget, nullptr);
  EXPECT_EQ(replacement.charge, RetryCharge::kOnFailure);
  EXPECT_TRUE(replacement.traced);

  TraceEvent terminal;
  terminal.cancelled = {3, 1};
  hedge.Annotate(terminal, 2);
  EXPECT_EQ(terminal.copy, 2);
  EXPECT_EQ(terminal.cancelled, (std::vector<int>{1, 3}));
  const std::optional<CallSummary> won = hedge.Summary(3, /*ok=*/true, 2);
  ASSERT_TRUE(won.has_value());
  EXPECT_EQ(won->copies, 3);
  EXPECT_TRUE(won->later_won);
  EXPECT_EQ(won->delay, absl::Milliseconds(30));
  EXPECT_FALSE(hedge.Summary(3, /*ok=*/false, 2)->later_won);
  EXPECT_FALSE(hedge.Summary(1, /*ok=*/true, 1)->later_won);
}

TEST_F(AttemptPolicyTerms, AHedgeWithoutDelayKeepsTheDeadlineFromTheStart) {
  const HedgingPolicy hedging = Hedging(1, absl::ZeroDuration());
  HedgeAttemptPolicy hedge(hedging, absl::Milliseconds(30), &controller_,
                           &clock_, absl::ZeroDuration(), nullptr);
  const Started start = hedge.Start(clock_.MonotonicNow());
  EXPECT_EQ(start.timer, absl::InfiniteFuture());
  EXPECT_TRUE(start.keep_deadline);
}

TEST_F(AttemptPolicyTerms, ARefusedHedgeLeavesTheLastFailureStanding) {
  const HedgingPolicy hedging = Hedging(2, absl::Milliseconds(30));
  HedgeAttemptPolicy hedge(hedging, hedging.delay, &controller_, &clock_,
                           absl::ZeroDuration(), nullptr);
  hedge.Start(clock_.MonotonicNow());
  const PolicyStep refused =
      hedge.OnRefused(GiveUpReason::kBudgetExhausted, /*replaces=*/false);
  EXPECT_TRUE(refused.last_failure_stands);
  RetryAttemptPolicy retry(&controller_, DestinationGates{});
  const PolicyStep own =
      retry.OnRefused(GiveUpReason::kBudgetExhausted, /*replaces=*/true);
  EXPECT_TRUE(own.done);
  EXPECT_FALSE(own.last_failure_stands);
}

// The commit is the engine's one fact, handed to the policy with the end:
// a failure that would be retried ends a committed call.
TEST(CommittedPolicyTest, ACommittedAttemptsEndIsTheCalls) {
  FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = Idempotency::kIdempotent;
  policy.retry.max_attempts = 5;
  for (bool committed : {false, true}) {
    RetryController controller(policy, /*may_repeat=*/true,
                               clock.MonotonicNow() + absl::Seconds(5), &clock);
    RetryAttemptPolicy retry(&controller, DestinationGates{});
    controller.StartAttempt();
    EndFacts facts;
    facts.number = 1;
    facts.end.code = grpc::StatusCode::UNAVAILABLE;
    facts.ended_at = clock.MonotonicNow();
    facts.outcome = controller.OutcomeOf(facts.end, facts.ended_at);
    facts.status_class = StatusClass::kRetriable;
    facts.committed = committed;
    absl::BitGen gen;
    const PolicyStep step = retry.OnAttemptEnd(facts, gen);
    EXPECT_EQ(step.done, committed);
    if (committed) {
      EXPECT_EQ(GiveUpReasonName(step.reason),
                GiveUpReasonName(GiveUpReason::kCommitted));
    } else {
      EXPECT_NE(step.timer, absl::InfiniteFuture());
    }
  }
}

}  // namespace
}  // namespace rpcguard
