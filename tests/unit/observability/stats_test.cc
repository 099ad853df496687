// Copyright rpcguard authors.

#include "rpcguard/observability/stats.h"

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
  stats.Record(Attempt(1, 3, D::kDone));
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_EQ(snap.methods.size(), 1u);
  EXPECT_EQ(snap.methods[0].calls, 1u);
  EXPECT_EQ(snap.methods[0].attempts, 2u);
  EXPECT_EQ(snap.methods[0].retries, 0u);
  EXPECT_EQ(snap.methods[0].attempts_per_call.count, 1u);
  EXPECT_DOUBLE_EQ(snap.methods[0].attempts_per_call.sum, 3);
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
  m.calls = 12;
  m.attempts = 20;
  m.retries = 8;
  m.give_ups = {{GiveUpReason::kDeadline, 2}, {GiveUpReason::kBreakerOpen, 1}};
  m.fail_fasts = {{GiveUpReason::kBreakerOpen, 1}};
  m.retry_delay = {{0.001, 0.0025}, {3, 5}, 8, 0.0371};
  m.attempts_per_call = {{1, 2}, {6, 9}, 12, 20};
  snap.methods.push_back(m);
  snap.breakers.push_back({"q\"uote\\back\nline", {{"open", 2}}});
  EXPECT_EQ(ToPrometheusText(snap),
            R"(# HELP rpcguard_calls_total Calls that ended.
# TYPE rpcguard_calls_total counter
rpcguard_calls_total{method="/pkg.Svc/M"} 12
# HELP rpcguard_attempts_total Attempts that ended.
# TYPE rpcguard_attempts_total counter
rpcguard_attempts_total{method="/pkg.Svc/M"} 20
# HELP rpcguard_retries_total Attempts followed by a retry.
# TYPE rpcguard_retries_total counter
rpcguard_retries_total{method="/pkg.Svc/M"} 8
# HELP rpcguard_give_ups_total Calls that gave up, by reason.
# TYPE rpcguard_give_ups_total counter
rpcguard_give_ups_total{method="/pkg.Svc/M",reason="deadline"} 2
rpcguard_give_ups_total{method="/pkg.Svc/M",reason="breaker_open"} 1
# HELP rpcguard_fail_fasts_total Calls ended without sending their next attempt, by reason.
# TYPE rpcguard_fail_fasts_total counter
rpcguard_fail_fasts_total{method="/pkg.Svc/M",reason="breaker_open"} 1
# HELP rpcguard_retry_delay_seconds Backoff before each retry.
# TYPE rpcguard_retry_delay_seconds histogram
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",le="0.001"} 3
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",le="0.0025"} 5
rpcguard_retry_delay_seconds_bucket{method="/pkg.Svc/M",le="+Inf"} 8
rpcguard_retry_delay_seconds_sum{method="/pkg.Svc/M"} 0.0371
rpcguard_retry_delay_seconds_count{method="/pkg.Svc/M"} 8
# HELP rpcguard_attempts_per_call Attempts sent per call.
# TYPE rpcguard_attempts_per_call histogram
rpcguard_attempts_per_call_bucket{method="/pkg.Svc/M",le="1"} 6
rpcguard_attempts_per_call_bucket{method="/pkg.Svc/M",le="2"} 9
rpcguard_attempts_per_call_bucket{method="/pkg.Svc/M",le="+Inf"} 12
rpcguard_attempts_per_call_sum{method="/pkg.Svc/M"} 20
rpcguard_attempts_per_call_count{method="/pkg.Svc/M"} 12
# HELP rpcguard_hedges_total Hedged copies sent after the first.
# TYPE rpcguard_hedges_total counter
rpcguard_hedges_total{method="/pkg.Svc/M"} 0
# HELP rpcguard_hedges_won_total Hedged calls decided by a copy after the first.
# TYPE rpcguard_hedges_won_total counter
rpcguard_hedges_won_total{method="/pkg.Svc/M"} 0
# HELP rpcguard_copies_cancelled_total Hedged copies cancelled because another decided the call.
# TYPE rpcguard_copies_cancelled_total counter
rpcguard_copies_cancelled_total{method="/pkg.Svc/M"} 0
# HELP rpcguard_hedge_delay_seconds The hedge delay the method's last hedged call used.
# TYPE rpcguard_hedge_delay_seconds gauge
rpcguard_hedge_delay_seconds{method="/pkg.Svc/M"} 0
# HELP rpcguard_breaker_transitions_total Circuit breaker state changes, by the state entered.
# TYPE rpcguard_breaker_transitions_total counter
rpcguard_breaker_transitions_total{breaker="q\"uote\\back\nline",to="open"} 2
)");
}

TEST(PrometheusTextTest, EmptySnapshotHasEveryFamilyAndNoSamples) {
  const std::string text = ToPrometheusText(StatsSnapshot());
  EXPECT_THAT(text, HasSubstr("# TYPE rpcguard_calls_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE rpcguard_retry_delay_seconds histogram\n"));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
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
  EXPECT_THAT(text,
              HasSubstr("rpcguard_calls_total{method=\"/we\\\"ird\\\\\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("rpcguard_retry_delay_seconds_bucket{method=\"/"
                              "pkg.Svc/M\",le=\"0.0025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("rpcguard_attempts_per_call_bucket{method=\"/"
                              "pkg.Svc/M\",le=\"10\"} 1\n"));
}

}  // namespace
}  // namespace rpcguard
