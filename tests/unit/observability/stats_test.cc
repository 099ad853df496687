// Copyright rpcguard authors.

#include "rpcguard/observability/stats.h"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

constexpr char kMethod[] = "/pkg.Svc/M";

TraceEvent Attempt(uint64_t call, int attempt, TraceDecision decision,
                   absl::Duration backoff = absl::ZeroDuration(),
                   GiveUpReason reason = GiveUpReason::kNone) {
  TraceEvent e;
  e.call_id = call;
  e.method = kMethod;
  e.attempt = attempt;
  e.decision = decision;
  e.backoff = backoff;
  e.reason = reason;
  return e;
}

TraceEvent FailFast(uint64_t call, int attempt, GiveUpReason reason) {
  TraceEvent e = Attempt(call, attempt, TraceDecision::kGiveUp,
                         absl::ZeroDuration(), reason);
  e.kind = TraceEvent::Kind::kFailFast;
  return e;
}

TraceEvent Transition(const std::string& key, const std::string& from,
                      const std::string& to) {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kBreakerTransition;
  e.breaker_key = key;
  e.from_state = from;
  e.to_state = to;
  return e;
}

// A small, varied history: a call that retried twice and succeeded, one
// that gave up at once, one refused by the breaker, one that succeeded first
// time, one refused by the budget before its second attempt.
void RecordHistory(Stats& stats) {
  using D = TraceDecision;
  stats.Record(Attempt(1, 1, D::kRetry, absl::Milliseconds(3)));
  stats.Record(Attempt(1, 2, D::kRetry, absl::Milliseconds(30)));
  stats.Record(Attempt(1, 3, D::kDone));
  stats.Record(
      Attempt(2, 1, D::kGiveUp, absl::ZeroDuration(), GiveUpReason::kFatal));
  stats.Record(FailFast(3, 1, GiveUpReason::kBreakerOpen));
  stats.Record(Attempt(4, 1, D::kDone));
  stats.Record(Attempt(5, 1, D::kRetry, absl::Microseconds(2500)));
  stats.Record(FailFast(5, 2, GiveUpReason::kBudgetExhausted));
}

TEST(StatsTest, CountsCallsAttemptsRetriesAndOutcomes) {
  Stats stats;
  RecordHistory(stats);
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.methods.size(), 1u);
  const MethodStatsSnapshot& m = snap.methods[0];
  EXPECT_EQ(m.method, kMethod);
  EXPECT_EQ(m.calls, 5u);
  EXPECT_EQ(m.attempts, 6u);
  EXPECT_EQ(m.retries, 3u);
  EXPECT_THAT(m.give_ups, ElementsAre(Pair(GiveUpReason::kFatal, 1),
                                      Pair(GiveUpReason::kBudgetExhausted, 1),
                                      Pair(GiveUpReason::kBreakerOpen, 1)));
  EXPECT_THAT(m.fail_fasts, ElementsAre(Pair(GiveUpReason::kBudgetExhausted, 1),
                                        Pair(GiveUpReason::kBreakerOpen, 1)));
}

// The interceptor counts by typed calls where it decides; Record(event)
// counts an event as those calls would. The same history both ways gives
// the same exposition, every series and bucket.
TEST(StatsTest, TypedCallsCountAsTheirEventsDo) {
  Stats by_event;
  RecordHistory(by_event);
  Stats typed;
  Stats::MethodHandle* h = typed.ForMethod(kMethod, "");
  auto attempt_ended = [h] {
    Stats::RecordAttemptEnded(h, grpc::StatusCode::OK, absl::ZeroDuration());
  };
  auto ended = [h](int attempts, GiveUpReason reason, bool fail_fast) {
    Stats::CallEnd end;
    end.attempts = attempts;
    end.reason = reason;
    end.fail_fast = fail_fast;
    end.retried = true;
    Stats::RecordCallEnded(h, end);
  };
  // Call 1: two retries, then done on attempt 3.
  attempt_ended();
  Stats::RecordRetry(h, absl::Milliseconds(3));
  attempt_ended();
  Stats::RecordRetry(h, absl::Milliseconds(30));
  attempt_ended();
  ended(3, GiveUpReason::kNone, false);
  // Call 2: gave up at once; call 3: refused by the breaker, nothing sent.
  attempt_ended();
  ended(1, GiveUpReason::kFatal, false);
  ended(0, GiveUpReason::kBreakerOpen, true);
  // Call 4: done first time; call 5: a retry the budget then refused.
  attempt_ended();
  ended(1, GiveUpReason::kNone, false);
  attempt_ended();
  Stats::RecordRetry(h, absl::Microseconds(2500));
  ended(1, GiveUpReason::kBudgetExhausted, true);
  EXPECT_EQ(ToPrometheusText(typed.Snapshot()),
            ToPrometheusText(by_event.Snapshot()));
}

// A hedged call: copy 2 failed while the call went on (decision hedge),
// copy 3 was sent (a hedge event) and won. One call, of 3 attempts; the
// failed copy is an attempt, not a call nor a retry.
TEST(StatsTest, AHedgedCopysFailureIsNotACall) {
  using D = TraceDecision;
  Stats stats;
  stats.Record(Attempt(1, 2, D::kHedge));
  TraceEvent sent = Attempt(1, 3, D::kHedge);
  sent.kind = TraceEvent::Kind::kHedge;
  stats.Record(sent);
  // As the engine writes a hedged call's terminal event: the deciding copy.
  TraceEvent done = Attempt(1, 3, D::kDone);
  done.copy = 3;
  stats.Record(done);
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.methods.size(), 1u);
  EXPECT_EQ(snap.methods[0].calls, 1u);
  // Copies are hedges (RecordHedgedCall), not retries.
  EXPECT_EQ(snap.methods[0].retries_per_call.count, 0u);
  EXPECT_EQ(snap.methods[0].attempts, 2u);
  EXPECT_EQ(snap.methods[0].retries, 0u);
  EXPECT_EQ(snap.methods[0].attempts_per_call.count, 1u);
  EXPECT_DOUBLE_EQ(snap.methods[0].attempts_per_call.sum, 3);
}

// A stream's terminal event names why it committed; stats count it under
// that reason's name, every reason of the one list.
TEST(StatsTest, CountsStreamCommitsByReason) {
  using D = TraceDecision;
  Stats stats;
  for (int i = 0; i < kNumCommitReasons; ++i) {
    for (int n = 0; n <= i; ++n) {
      TraceEvent end = Attempt(10 * i + n + 1, 1, D::kGiveUp,
                               absl::ZeroDuration(), GiveUpReason::kCommitted);
      end.commit = static_cast<CommitReason>(i);
      stats.Record(end);
    }
  }
  stats.Record(Attempt(99, 1, D::kDone));  // no commit: not counted
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.methods.size(), 1u);
  EXPECT_THAT(snap.methods[0].commits,
              ElementsAre(Pair(CommitReason::kHeaders, 1),
                          Pair(CommitReason::kMessage, 2),
                          Pair(CommitReason::kBufferLimit, 3),
                          Pair(CommitReason::kChannelBufferLimit, 4)));
  const std::string text = ToPrometheusText(snap);
  EXPECT_NE(text.find("rpcguard_stream_commits_total{method=\"" +
                      std::string(kMethod) +
                      "\",target=\"\",reason=\"channel_buffer_limit\"} 4"),
            std::string::npos)
      << text;
}

TEST(StatsTest, RetryDelayHistogramIsCumulativeInSeconds) {
  Stats stats;
  RecordHistory(stats);
  const StatsSnapshot snap = stats.Snapshot();
  const HistogramSnapshot& h = snap.methods[0].retry_delay;
  EXPECT_THAT(h.bounds,
              ElementsAreArray({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                0.25, 0.5, 1.0, 2.5, 5.0, 10.0}));
  // 2.5 ms falls in le=0.0025 (bounds are inclusive), 3 ms in le=0.005,
  // 30 ms in le=0.05.
  EXPECT_THAT(h.cumulative,
              ElementsAreArray({0, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(h.count, 3u);
  EXPECT_DOUBLE_EQ(h.sum, 0.0355);
}

TEST(StatsTest, AttemptsPerCallHistogramCountsAttemptsSent) {
  Stats stats;
  RecordHistory(stats);
  const StatsSnapshot snap = stats.Snapshot();
  const HistogramSnapshot& h = snap.methods[0].attempts_per_call;
  EXPECT_THAT(h.bounds, ElementsAreArray({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // Sent: 3, 1, 0 (refused before the first), 1, 1 (refused before the
  // second).
  EXPECT_THAT(h.cumulative, ElementsAreArray({4, 4, 5, 5, 5, 5, 5, 5, 5, 5}));
  EXPECT_EQ(h.count, 5u);
  EXPECT_EQ(h.sum, 6);
}

TEST(StatsTest, AttemptsAboveTenGoToTheInfBucket) {
  Stats stats;
  stats.Record(Attempt(1, 10, TraceDecision::kDone));
  stats.Record(Attempt(2, 12, TraceDecision::kDone));
  const StatsSnapshot snap = stats.Snapshot();
  const HistogramSnapshot& h = snap.methods[0].attempts_per_call;
  EXPECT_EQ(h.cumulative[8], 0u);  // le=9
  EXPECT_EQ(h.cumulative[9], 1u);  // le=10
  EXPECT_EQ(h.count, 2u);
  EXPECT_EQ(h.sum, 22);
}

// The breaker's listener records by state (issue 30, §5): the same counts
// as the trace event's names give, and a name that is no state counts
// nothing.
TEST(StatsTest, RecordsBreakerTransitionsByStateWhereTheyAreKnown) {
  Stats stats;
  stats.RecordTransition("b:443", BreakerState::kOpen);
  stats.RecordTransition("b:443", BreakerState::kHalfOpen);
  stats.RecordTransition("b:443", BreakerState::kClosed);
  stats.Record(Transition("b:443", "closed", "opened"));  // not a state
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.breakers.size(), 1u);
  EXPECT_THAT(
      snap.breakers[0].transitions_to,
      ElementsAre(Pair("closed", 1), Pair("half_open", 1), Pair("open", 1)));
  EXPECT_EQ(snap.breakers[0].state, "closed");
}

TEST(StatsTest, CountsBreakerTransitionsPerKeyByStateEntered) {
  Stats stats;
  stats.Record(Transition("b:443", "closed", "open"));
  stats.Record(Transition("b:443", "open", "half_open"));
  stats.Record(Transition("b:443", "half_open", "open"));
  stats.Record(Transition("a:443", "closed", "open"));
  const StatsSnapshot snap = stats.Snapshot();
  EXPECT_THAT(snap.methods, IsEmpty());  // transitions belong to no method
  ASSERT_EQ(snap.breakers.size(), 2u);
  EXPECT_EQ(snap.breakers[0].key, "a:443");
  EXPECT_THAT(snap.breakers[1].transitions_to,
              ElementsAre(Pair("half_open", 1), Pair("open", 2)));
  EXPECT_EQ(snap.FindBreaker("b:443"), &snap.breakers[1]);
  EXPECT_EQ(snap.FindBreaker("c:443"), nullptr);
}

TEST(StatsTest, HandlesAreStableAndSkipTheLookup) {
  Stats stats;
  Stats::MethodHandle* m = stats.ForMethod("/a.S/M");
  for (int i = 0; i < 1000; ++i) stats.ForMethod(absl::StrCat("/x.S/M", i));
  EXPECT_EQ(stats.ForMethod("/a.S/M"), m);
  EXPECT_NE(stats.ForMethod("/b.S/M"), m);
  // The handle decides the method, not the event's field.
  stats.Record(m, Attempt(1, 1, TraceDecision::kDone));
  const StatsSnapshot snap = stats.Snapshot();
  EXPECT_EQ(snap.FindMethod("/a.S/M")->calls, 1u);
  EXPECT_EQ(snap.FindMethod(kMethod), nullptr);
  EXPECT_EQ(snap.methods.front().method, "/a.S/M");  // sorted
}

TEST(StatsTest, ConcurrentRecordingLosesNothing) {
  Stats stats;
  constexpr int kThreads = 8;
  constexpr int kCalls = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&stats, t] {
      // Half the threads look the method up each time, half cache it.
      Stats::MethodHandle* h = stats.ForMethod(kMethod);
      for (int i = 0; i < kCalls; ++i) {
        const TraceEvent retry =
            Attempt(i, 1, TraceDecision::kRetry, absl::Milliseconds(1));
        const TraceEvent done = Attempt(i, 2, TraceDecision::kDone);
        if (t % 2 == 0) {
          stats.Record(retry);
          stats.Record(done);
        } else {
          stats.Record(h, retry);
          stats.Record(h, done);
        }
        if (i % 100 == 0) stats.Record(Transition("k", "closed", "open"));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const StatsSnapshot snap = stats.Snapshot();
  const MethodStatsSnapshot& m = snap.methods[0];
  EXPECT_EQ(m.calls, kThreads * kCalls);
  EXPECT_EQ(m.attempts, 2u * kThreads * kCalls);
  EXPECT_EQ(m.retries, kThreads * kCalls);
  EXPECT_EQ(m.retry_delay.cumulative[0], kThreads * kCalls);
  EXPECT_DOUBLE_EQ(m.retry_delay.sum, kThreads * kCalls * 0.001);
  EXPECT_EQ(m.attempts_per_call.cumulative[1], kThreads * kCalls);
  EXPECT_EQ(snap.breakers[0].transitions_to.at("open"), kThreads * 20u);
}

TEST(PrometheusTextTest, ExactTextForASmallSnapshot) {
  StatsSnapshot snap;
  MethodStatsSnapshot m;
  m.method = "/pkg.Svc/M";
  m.target = "dns:///svc:443";
  m.calls_started = 12;
  m.calls = 12;
  m.calls_by_code = {{0, 9}, {14, 3}};
  m.attempts_started = 20;
  m.attempts = 20;
  m.attempts_by_code = {{0, 9}, {14, 11}};
  m.retries = 8;
  m.give_ups = {{GiveUpReason::kDeadline, 2}, {GiveUpReason::kBreakerOpen, 1}};
  m.fail_fasts = {{GiveUpReason::kBreakerOpen, 1}};
  m.call_duration = {{0.001, 0.01}, {4, 10}, 12, 0.25};
  m.retries_per_call = {{1, 2}, {3, 5}, 6, 8};
  m.retry_delay = {{0.001, 0.0025}, {3, 5}, 8, 0.0371};
  snap.methods.push_back(m);
  snap.breakers.push_back({"q\"uote\\back\nline", {{"open", 2}}, "open"});
  BudgetStatsSnapshot b;
  b.key = "svc:443";
  b.balance = 97.5;
  b.budget.unpaid_in_flight = 1;
  b.budget.refunded = 4;
  b.budget.free = 2;
  b.budget.refused = 3;
  snap.budgets.push_back(b);
  snap.series_overflows = 7;
  EXPECT_EQ(ToPrometheusText(snap),
            R"(# HELP rpcguard_calls_started_total Calls started.
# TYPE rpcguard_calls_started_total counter
rpcguard_calls_started_total{method="/pkg.Svc/M",target="dns:///svc:443"} 12
# HELP rpcguard_calls_total Calls that ended, by final status code.
# TYPE rpcguard_calls_total counter
rpcguard_calls_total{method="/pkg.Svc/M",target="dns:///svc:443",code="OK"} 9
rpcguard_calls_total{method="/pkg.Svc/M",target="dns:///svc:443",code="UNAVAILABLE"} 3
# HELP rpcguard_attempts_started_total Attempts started.
# TYPE rpcguard_attempts_started_total counter
rpcguard_attempts_started_total{method="/pkg.Svc/M",target="dns:///svc:443"} 20
# HELP rpcguard_attempts_total Attempts that ended, by status code.
# TYPE rpcguard_attempts_total counter
rpcguard_attempts_total{method="/pkg.Svc/M",target="dns:///svc:443",code="OK"} 9
rpcguard_attempts_total{method="/pkg.Svc/M",target="dns:///svc:443",code="UNAVAILABLE"} 11
# HELP rpcguard_call_duration_seconds Call duration, from the first attempt's start to the end.
# TYPE rpcguard_call_duration_seconds histogram
rpcguard_call_duration_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="0.001"} 4
rpcguard_call_duration_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="0.01"} 10
rpcguard_call_duration_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="+Inf"} 12
rpcguard_call_duration_seconds_sum{method="/pkg.Svc/M",target="dns:///svc:443"} 0.25
rpcguard_call_duration_seconds_count{method="/pkg.Svc/M",target="dns:///svc:443"} 12
# HELP rpcguard_attempt_duration_seconds Attempt duration, from its start to its status.
# TYPE rpcguard_attempt_duration_seconds histogram
# HELP rpcguard_retries_total Attempts followed by a retry.
# TYPE rpcguard_retries_total counter
rpcguard_retries_total{method="/pkg.Svc/M",target="dns:///svc:443"} 8
# HELP rpcguard_call_retries Retries per call that retried.
# TYPE rpcguard_call_retries histogram
rpcguard_call_retries_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="1"} 3
rpcguard_call_retries_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="2"} 5
rpcguard_call_retries_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="+Inf"} 6
rpcguard_call_retries_sum{method="/pkg.Svc/M",target="dns:///svc:443"} 8
rpcguard_call_retries_count{method="/pkg.Svc/M",target="dns:///svc:443"} 6
# HELP rpcguard_retry_delay_seconds Backoff before each retry.
# TYPE rpcguard_retry_delay_seconds histogram
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="0.001"} 3
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="0.0025"} 5
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",target="dns:///svc:443",le="+Inf"} 8
rpcguard_retry_delay_seconds_sum{method="/pkg.Svc/M",target="dns:///svc:443"} 0.0371
rpcguard_retry_delay_seconds_count{method="/pkg.Svc/M",target="dns:///svc:443"} 8
# HELP rpcguard_attempts_per_call Attempts sent per call.
# TYPE rpcguard_attempts_per_call histogram
# HELP rpcguard_give_ups_total Calls that gave up, by reason.
# TYPE rpcguard_give_ups_total counter
rpcguard_give_ups_total{method="/pkg.Svc/M",target="dns:///svc:443",reason="deadline"} 2
rpcguard_give_ups_total{method="/pkg.Svc/M",target="dns:///svc:443",reason="breaker_open"} 1
# HELP rpcguard_stream_commits_total Streams that ended committed to an attempt, by why.
# TYPE rpcguard_stream_commits_total counter
# HELP rpcguard_fail_fasts_total Calls ended without sending their next attempt, by reason.
# TYPE rpcguard_fail_fasts_total counter
rpcguard_fail_fasts_total{method="/pkg.Svc/M",target="dns:///svc:443",reason="breaker_open"} 1
# HELP rpcguard_call_hedges Copies sent after the first, per hedged call that sent one.
# TYPE rpcguard_call_hedges histogram
# HELP rpcguard_hedges_total Hedged copies sent after the first.
# TYPE rpcguard_hedges_total counter
# HELP rpcguard_hedges_won_total Hedged calls decided by a copy after the first.
# TYPE rpcguard_hedges_won_total counter
# HELP rpcguard_copies_cancelled_total Hedged copies cancelled because another decided the call.
# TYPE rpcguard_copies_cancelled_total counter
# HELP rpcguard_hedge_delay_seconds The hedge delay the series' last hedged call used.
# TYPE rpcguard_hedge_delay_seconds gauge
# HELP rpcguard_breaker_state 1 for the state a circuit breaker is in (its last transition's).
# TYPE rpcguard_breaker_state gauge
rpcguard_breaker_state{breaker="q\"uote\\back\nline",state="open"} 1
# HELP rpcguard_breaker_transitions_total Circuit breaker state changes, by the state entered.
# TYPE rpcguard_breaker_transitions_total counter
rpcguard_breaker_transitions_total{breaker="q\"uote\\back\nline",to="open"} 2
# HELP rpcguard_retry_budget_balance Paid retries the budget still allows in its window.
# TYPE rpcguard_retry_budget_balance gauge
rpcguard_retry_budget_balance{budget="svc:443"} 97.5
# HELP rpcguard_retry_budget_retries_in_flight Retries on credit (paid only if they fail) not yet ended.
# TYPE rpcguard_retry_budget_retries_in_flight gauge
rpcguard_retry_budget_retries_in_flight{budget="svc:443"} 1
# HELP rpcguard_retry_budget_refunds_total Retries on credit that succeeded, so cost nothing.
# TYPE rpcguard_retry_budget_refunds_total counter
rpcguard_retry_budget_refunds_total{budget="svc:443"} 4
# HELP rpcguard_retry_budget_free_retries_total Retries granted free (e.g. never sent to the server).
# TYPE rpcguard_retry_budget_free_retries_total counter
rpcguard_retry_budget_free_retries_total{budget="svc:443"} 2
# HELP rpcguard_retry_budget_refusals_total Retries the budget refused.
# TYPE rpcguard_retry_budget_refusals_total counter
rpcguard_retry_budget_refusals_total{budget="svc:443"} 3
# HELP rpcguard_stats_series_overflows_total Lookups of a new (method, target) series counted under "other" because Stats held max_series.
# TYPE rpcguard_stats_series_overflows_total counter
rpcguard_stats_series_overflows_total 7
)");
}

TEST(PrometheusTextTest, EmptySnapshotHasEveryFamilyAndNoSamples) {
  const std::string text = ToPrometheusText(StatsSnapshot());
  EXPECT_THAT(text, HasSubstr("# TYPE rpcguard_calls_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE rpcguard_retry_delay_seconds histogram\n"));
  // The overflow counter is the one sample: always there, 0 here.
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line == "rpcguard_stats_series_overflows_total 0") continue;
    EXPECT_EQ(line[0], '#') << line;
  }
}

TEST(PrometheusTextTest, LabelValuesOfRealMethodsAreEscaped) {
  Stats stats;
  stats.Record(Attempt(1, 1, TraceDecision::kDone));
  TraceEvent odd = Attempt(2, 1, TraceDecision::kDone);
  odd.method = "/we\"ird\\";
  stats.Record(odd);
  const std::string text = ToPrometheusText(stats.Snapshot());
  EXPECT_THAT(text, HasSubstr("rpcguard_calls_total{method=\"/we\\\"ird\\\\\","
                              "target=\"\",code=\"OK\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rpcguard_call_duration_seconds_bucket{method=\"/"
                              "pkg.Svc/M\",target=\"\",le=\"0.0025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rpcguard_attempts_per_call_bucket{method=\"/"
                              "pkg.Svc/M\",target=\"\",le=\"10\"} 1\n"));
  // A series that never retried has no retry-delay histogram.
  EXPECT_THAT(text, Not(HasSubstr("rpcguard_retry_delay_seconds_bucket{")));
}

TEST(StatsTest, DurationsFillTheirHistogramsInSeconds) {
  Stats stats;
  Stats::MethodHandle* h = stats.ForMethod(kMethod, "svc:443");
  TraceEvent retry = Attempt(1, 1, TraceDecision::kRetry);
  retry.code = grpc::StatusCode::UNAVAILABLE;
  retry.attempt_duration = absl::Milliseconds(4);
  stats.Record(h, retry);
  TraceEvent done = Attempt(1, 2, TraceDecision::kDone);
  done.attempt_duration = absl::Milliseconds(30);
  done.call_duration = absl::Milliseconds(40);
  stats.Record(h, done);
  const StatsSnapshot snap = stats.Snapshot();
  const MethodStatsSnapshot* m = snap.FindSeries(kMethod, "svc:443");
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(m->attempt_duration.bounds,
              ElementsAreArray(kDurationBucketsSeconds));
  // 4 ms in le=0.005, 30 ms in le=0.05.
  EXPECT_THAT(m->attempt_duration.cumulative,
              ElementsAreArray({0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(m->attempt_duration.sum, 0.034);
  EXPECT_EQ(m->call_duration.count, 1u);
  EXPECT_EQ(m->call_duration.cumulative[4], 0u);  // le=0.025
  EXPECT_EQ(m->call_duration.cumulative[5], 1u);  // le=0.05
  EXPECT_DOUBLE_EQ(m->call_duration.sum, 0.04);
  EXPECT_THAT(m->attempts_by_code, ElementsAre(Pair(0, 1), Pair(14, 1)));
  EXPECT_THAT(m->calls_by_code, ElementsAre(Pair(0, 1)));
}

TEST(StatsTest, RetriesPerCallCountsOnlyCallsThatRetried) {
  Stats stats;
  RecordHistory(stats);
  const StatsSnapshot snap = stats.Snapshot();
  const HistogramSnapshot& h = snap.methods[0].retries_per_call;
  // Call 1 retried twice; call 5 once before the budget refused its second
  // attempt (a fail-fast after one attempt: no retry sent). The others sent
  // one attempt or none: A96 reports no zeros.
  EXPECT_THAT(h.bounds, ElementsAreArray(kPerCallBuckets));
  EXPECT_EQ(h.count, 1u);
  EXPECT_THAT(h.cumulative, ElementsAre(0, 1, 1, 1, 1));
  EXPECT_EQ(h.sum, 2);
}

TEST(StatsTest, HedgesPerCallFromHedgedCalls) {
  Stats stats;
  Stats::MethodHandle* h = stats.ForMethod(kMethod);
  stats.RecordHedgedCall(h, 1, false, 0, absl::Milliseconds(10));
  stats.RecordHedgedCall(h, 3, true, 1, absl::Milliseconds(10));
  const StatsSnapshot snap = stats.Snapshot();
  const MethodStatsSnapshot& m = snap.methods[0];
  EXPECT_EQ(m.hedged_calls, 2u);
  EXPECT_EQ(m.hedges_per_call.count, 1u);  // the call that sent none: not
  EXPECT_THAT(m.hedges_per_call.cumulative, ElementsAre(0, 1, 1, 1, 1));
  EXPECT_EQ(m.hedges, 2u);
}

TEST(StatsTest, StartsAreCountedApart) {
  Stats stats;
  Stats::MethodHandle* h = stats.ForMethod(kMethod);
  Stats::RecordCallStarted(h);
  Stats::RecordAttemptStarted(h);
  Stats::RecordAttemptStarted(h);
  const StatsSnapshot snap = stats.Snapshot();
  const MethodStatsSnapshot& m = snap.methods[0];
  EXPECT_EQ(m.calls_started, 1u);
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.calls, 0u);  // still in flight
}

TEST(StatsTest, TargetsAreSeparateSeries) {
  Stats stats;
  Stats::MethodHandle* a = stats.ForMethod(kMethod, "a:443");
  Stats::MethodHandle* b = stats.ForMethod(kMethod, "b:443");
  EXPECT_NE(a, b);
  EXPECT_EQ(stats.ForMethod(kMethod, "a:443"), a);
  // The old one-argument lookup is the empty target.
  EXPECT_EQ(stats.ForMethod(kMethod), stats.ForMethod(kMethod, ""));
  EXPECT_NE(stats.ForMethod(kMethod), a);
  stats.Record(a, Attempt(1, 1, TraceDecision::kDone));
  const StatsSnapshot snap = stats.Snapshot();
  EXPECT_EQ(snap.FindSeries(kMethod, "a:443")->calls, 1u);
  EXPECT_EQ(snap.FindSeries(kMethod, "b:443")->calls, 0u);
  EXPECT_THAT(ToPrometheusText(snap),
              HasSubstr("rpcguard_calls_total{method=\"/pkg.Svc/M\","
                        "target=\"a:443\",code=\"OK\"} 1\n"));
}

TEST(StatsTest, SeriesBeyondTheCapCountUnderOther) {
  StatsOptions options;
  options.max_series = 3;
  Stats stats(options);
  std::vector<Stats::MethodHandle*> handles;
  for (int i = 0; i < 5; ++i) {
    handles.push_back(stats.ForMethod(absl::StrCat("/s.S/M", i), "t"));
  }
  // The fourth and fifth share the `other` series; the first three are
  // their own, and stay so.
  EXPECT_EQ(handles[3], handles[4]);
  EXPECT_NE(handles[2], handles[3]);
  EXPECT_EQ(stats.ForMethod("/s.S/M0", "t"), handles[0]);
  EXPECT_EQ(stats.ForMethod("/s.S/M9", "t"), handles[3]);
  for (Stats::MethodHandle* h : handles) {
    stats.Record(h, Attempt(1, 1, TraceDecision::kDone));
  }
  const StatsSnapshot snap = stats.Snapshot();
  EXPECT_EQ(snap.methods.size(), 4u);
  EXPECT_EQ(stats.method_keys(), 4u);
  const MethodStatsSnapshot* other =
      snap.FindSeries(Stats::kOther, Stats::kOther);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->calls, 2u);  // counted, not dropped
  EXPECT_EQ(snap.series_overflows, 3u);
  uint64_t calls = 0;
  for (const MethodStatsSnapshot& m : snap.methods) calls += m.calls;
  EXPECT_EQ(calls, 5u);
}

// A GenericStub caller inventing method names: the text stays bounded.
TEST(StatsTest, FiftyThousandMethodsStayUnderOneMegabyteOfText) {
  Stats stats;
  for (int i = 0; i < 50000; ++i) {
    Stats::MethodHandle* h =
        stats.ForMethod(absl::StrCat("/attacker.v1.Service/Method", i),
                        "dns:///payments.internal:443");
    Stats::RecordCallStarted(h);
    Stats::RecordAttemptStarted(h);
    TraceEvent retry =
        Attempt(i, 1, TraceDecision::kRetry, absl::Milliseconds(20));
    retry.code = grpc::StatusCode::UNAVAILABLE;
    retry.attempt_duration = absl::Milliseconds(3);
    stats.Record(h, retry);
    Stats::RecordAttemptStarted(h);
    TraceEvent done = Attempt(i, 2, TraceDecision::kDone);
    done.attempt_duration = absl::Milliseconds(3);
    done.call_duration = absl::Milliseconds(26);
    stats.Record(h, done);
  }
  const StatsSnapshot snap = stats.Snapshot();
  const std::string text = ToPrometheusText(snap);
  std::printf("50000 methods, %zu series kept: %zu bytes of text\n",
              snap.methods.size(), text.size());
  EXPECT_EQ(snap.methods.size(), StatsOptions().max_series + 1);
  EXPECT_LT(text.size(), 1u << 20);
  EXPECT_EQ(snap.FindSeries(Stats::kOther, Stats::kOther)->calls,
            50000u - StatsOptions().max_series);
}

TEST(StatsTest, WatchedBudgetsReportBalanceRefundsAndCredit) {
  Stats stats;
  RetryBudgetOptions options;
  options.min_retries_per_second = 1;  // 10 s window: 10 paid retries
  std::shared_ptr<RetryBudget> budget = *RetryBudget::Create(options);
  stats.WatchBudget("svc:443", budget);
  // Credit in flight is capped by the first attempts seen.
  for (int i = 0; i < 3; ++i) budget->RecordFirstAttempt();
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kOnFailure));
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kOnFailure));
  budget->RecordRetryEnd(RetryCharge::kOnFailure, /*failed=*/false);
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kFree));
  StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.budgets.size(), 1u);
  const BudgetStatsSnapshot& b = snap.budgets[0];
  EXPECT_EQ(b.key, "svc:443");
  EXPECT_EQ(b.budget.refunded, 1u);
  EXPECT_EQ(b.budget.free, 1u);
  EXPECT_EQ(b.budget.unpaid_in_flight, 1);
  EXPECT_DOUBLE_EQ(b.balance, b.budget.allowance - b.budget.retries);
  EXPECT_THAT(ToPrometheusText(snap),
              HasSubstr("rpcguard_retry_budget_refunds_total{budget="
                        "\"svc:443\"} 1\n"));
  budget.reset();  // held weakly: gone from the next snapshot
  EXPECT_THAT(stats.Snapshot().budgets, IsEmpty());
}

TEST(StatsTest, BreakerStateIsItsLastTransition) {
  Stats stats;
  stats.Record(Transition("b:443", "closed", "open"));
  stats.Record(Transition("b:443", "open", "half_open"));
  const std::string text = ToPrometheusText(stats.Snapshot());
  EXPECT_THAT(text, HasSubstr("rpcguard_breaker_state{breaker=\"b:443\","
                              "state=\"half_open\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("state=\"open\"")));
}

}  // namespace
}  // namespace rpcguard
