// Copyright rpcguard authors.
//
// Hedging decisions under a fake clock (decision/hedging.h): the policy's
// validation, the adaptive delay estimate, and one call's copies: when the
// next goes, which ending wins, what is cancelled, server pushback, the
// destination's refusal. No gRPC call is made.

#include "rpcguard/decision/hedging.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::grpc::StatusCode;
using ::rpcguard::testing::FakeClock;

HedgingPolicy Policy(int max_attempts, absl::Duration delay) {
  HedgingPolicy p;
  p.max_attempts = max_attempts;
  p.delay = delay;
  p.non_fatal_codes = StatusCodeSet{StatusCode::UNAVAILABLE};
  return p;
}

const Pushback kNone{};

TEST(HedgingPolicyTest, ValidationNamesTheField) {
  const std::string path = "methodConfig[0]";
  struct Case {
    void (*mutate)(HedgingPolicy&);
    std::string message;
  };
  const Case cases[] = {
      {[](HedgingPolicy& p) { p.max_attempts = 1; },
       path + ".hedgingPolicy.maxAttempts: must be at least 2"},
      {[](HedgingPolicy& p) { p.max_attempts = 11; },
       path + ".hedgingPolicy.maxAttempts: must be at most 10"},
      {[](HedgingPolicy& p) { p.delay = absl::Milliseconds(-1); },
       path + ".hedgingPolicy.hedgingDelay: must be 0 or more, and finite"},
      {[](HedgingPolicy& p) { p.non_fatal_codes.Add(StatusCode::OK); },
       path + ".hedgingPolicy.nonFatalStatusCodes: must not contain OK"},
      {[](HedgingPolicy& p) { p.adaptive_percentile = 1.0; },
       path + ".rpcguard.hedgingDelayPercentile: must be in (0, 1)"},
      {[](HedgingPolicy& p) { p.min_samples = 0; },
       path + ".rpcguard.hedgingMinSamples: must be in [1, 1000000]"},
      {[](HedgingPolicy& p) { p.min_samples = 1000001; },
       path + ".rpcguard.hedgingMinSamples: must be in [1, 1000000]"},
      {[](HedgingPolicy& p) { p.max_extra_load = 0; },
       path + ".rpcguard.maxExtraLoad: must be in (0, 1]"},
  };
  for (const Case& c : cases) {
    HedgingPolicy p = Policy(3, absl::Milliseconds(30));
    c.mutate(p);
    const absl::Status s = p.Validate(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
  }
  EXPECT_TRUE(Policy(3, absl::ZeroDuration()).Validate(path).ok());
}

// A .proto option's policy is held to the same rules, with the reasons
// worded alike, but names its fields as the option does.
TEST(HedgingPolicyTest, ValidateNamesProtoFields) {
  const std::string path = "pkg.Svc.M: (rpcguard.v1.method)";
  const HedgingPolicy::FieldNames proto = HedgingPolicy::FieldNames::kProto;
  HedgingPolicy p = Policy(11, absl::Milliseconds(30));
  EXPECT_EQ(p.Validate(path, proto).message(),
            path + ".hedging.max_attempts: must be at most 10");
  p = Policy(3, absl::Milliseconds(-1));
  EXPECT_EQ(p.Validate(path, proto).message(),
            path + ".hedging.hedging_delay: must be 0 or more, and finite");
  p = Policy(3, absl::Milliseconds(30));
  p.non_fatal_codes.Add(StatusCode::OK);
  EXPECT_EQ(p.Validate(path, proto).message(),
            path + ".hedging.non_fatal_status_codes: must not contain OK");
  p = Policy(3, absl::Milliseconds(30));
  p.adaptive_floor = absl::Milliseconds(-1);
  EXPECT_EQ(p.Validate(path, proto).message(),
            path + ".hedging.delay_floor: must be 0 or more, and finite");
  p = Policy(3, absl::Milliseconds(30));
  p.max_extra_load = 1.5;
  EXPECT_EQ(p.Validate(path, proto).message(),
            path + ".hedging.max_extra_load: must be in (0, 1]");
}

// --- The adaptive delay ---

TEST(LatencyEstimatorTest, NoEstimateBeforeMinSamples) {
  LatencyEstimator e(0.95);
  for (int i = 1; i <= 99; ++i) e.Record(absl::Milliseconds(i));
  EXPECT_FALSE(e.Estimate(100).has_value());
  e.Record(absl::Milliseconds(100));
  ASSERT_TRUE(e.Estimate(100).has_value());
  // Nearest rank: 95 of 100 samples are at or below 95 ms.
  EXPECT_EQ(*e.Estimate(100), absl::Milliseconds(95));
}

TEST(LatencyEstimatorTest, FollowsRecentSamplesOnly) {
  LatencyEstimator e(0.5);
  for (int i = 0; i < LatencyEstimator::kSamples; ++i) {
    e.Record(absl::Milliseconds(100));
  }
  EXPECT_EQ(*e.Estimate(1), absl::Milliseconds(100));
  // A full ring of faster samples replaces the old ones.
  for (int i = 0; i < LatencyEstimator::kSamples; ++i) {
    e.Record(absl::Milliseconds(10));
  }
  EXPECT_EQ(*e.Estimate(1), absl::Milliseconds(10));
  EXPECT_EQ(e.samples(), 2 * LatencyEstimator::kSamples);
}

TEST(LatencyEstimatorTest, ConcurrentRecordsAreAllCounted) {
  LatencyEstimator e(0.9);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&e] {
      for (int i = 0; i < 1000; ++i) e.Record(absl::Microseconds(i));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(e.samples(), 8000);
  EXPECT_TRUE(e.Estimate(8000).has_value());
}

TEST(HedgeDelayTest, FixedUntilEnoughSamplesThenTheEstimateAboveTheFloor) {
  HedgingPolicy p = Policy(2, absl::Milliseconds(30));
  p.adaptive_percentile = 0.9;
  p.min_samples = 10;
  p.adaptive_floor = absl::Milliseconds(5);
  LatencyEstimator e(0.9);
  EXPECT_EQ(HedgeDelay(p, &e), absl::Milliseconds(30));
  for (int i = 0; i < 10; ++i) e.Record(absl::Milliseconds(12));
  EXPECT_EQ(HedgeDelay(p, &e), absl::Milliseconds(12));
  LatencyEstimator fast(0.9);
  for (int i = 0; i < 10; ++i) fast.Record(absl::Milliseconds(1));
  EXPECT_EQ(HedgeDelay(p, &fast), absl::Milliseconds(5));  // the floor
  // Without adaptive settings the estimator is not asked.
  EXPECT_EQ(HedgeDelay(Policy(2, absl::Milliseconds(7)), &e),
            absl::Milliseconds(7));
  EXPECT_EQ(HedgeDelay(p, nullptr), absl::Milliseconds(30));
}

// --- One call's copies ---

class HedgeControllerTest : public ::testing::Test {
 protected:
  absl::Time Deadline(absl::Duration d) { return clock_.MonotonicNow() + d; }
  FakeClock clock_;
};

// Hedge timers and the deadline run on the monotonic clock: a wall-clock
// step while a hedge is pending moves neither.
TEST_F(HedgeControllerTest, AWallClockStepMovesNoHedgeTimer) {
  for (absl::Duration step : {absl::Hours(-1), absl::Seconds(30)}) {
    const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
    HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
    const absl::Time start = clock_.MonotonicNow();
    EXPECT_EQ(c.Start(clock_.MonotonicNow()), start + absl::Milliseconds(30));
    clock_.StepWall(step);
    clock_.Advance(absl::Milliseconds(30));
    const HedgeController::Step s = c.OnTimer(true);
    EXPECT_TRUE(s.send) << step;
    EXPECT_EQ(s.next_timer, start + absl::Milliseconds(60)) << step;
    EXPECT_EQ(c.started(), 2) << step;
  }
}

TEST_F(HedgeControllerTest, NextCopyAfterTheDelayThenTheFirstOkWins) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  EXPECT_EQ(c.Start(clock_.MonotonicNow()),
            clock_.MonotonicNow() + absl::Milliseconds(30));
  clock_.Advance(absl::Milliseconds(30));
  HedgeController::Step s = c.OnTimer(true);
  EXPECT_TRUE(s.send);
  EXPECT_EQ(c.started(), 2);
  EXPECT_EQ(s.next_timer, clock_.MonotonicNow() + absl::Milliseconds(30));
  // Copy 2 answers OK first: the call is decided, copy 1 is cancelled.
  clock_.Advance(absl::Milliseconds(5));
  s = c.OnCopyEnd(2, StatusCode::OK, kNone, false, true);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.cancel_others);
  EXPECT_FALSE(s.send);
  // The cancelled copy's end changes nothing; the timer sends nothing.
  s = c.OnCopyEnd(1, StatusCode::CANCELLED, kNone, false, true);
  EXPECT_FALSE(s.done);
  EXPECT_FALSE(s.send);
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_FALSE(c.OnTimer(true).send);
  EXPECT_EQ(c.in_flight(), 0);
}

TEST_F(HedgeControllerTest, NoHedgeWhenTheFirstCopyEndsInTime) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(10));
  const HedgeController::Step s =
      c.OnCopyEnd(1, StatusCode::OK, kNone, false, true);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.cancel_others);
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_FALSE(c.OnTimer(true).send);
  EXPECT_EQ(c.started(), 1);
}

TEST_F(HedgeControllerTest, NonFatalFailureStartsTheNextAtOnce) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(5));
  HedgeController::Step s =
      c.OnCopyEnd(1, StatusCode::UNAVAILABLE, kNone, false, true);
  EXPECT_TRUE(s.send);
  EXPECT_FALSE(s.done);
  EXPECT_EQ(s.next_timer, clock_.MonotonicNow() + absl::Milliseconds(30));
  s = c.OnCopyEnd(2, StatusCode::UNAVAILABLE, kNone, false, true);
  EXPECT_TRUE(s.send);
  // maxAttempts reached: the last failure ends the call.
  s = c.OnCopyEnd(3, StatusCode::UNAVAILABLE, kNone, false, true);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.send);
  EXPECT_EQ(c.started(), 3);
}

TEST_F(HedgeControllerTest, FatalFailureEndsTheCallAndCancelsTheRest) {
  const HedgingPolicy p = Policy(3, absl::ZeroDuration());
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  EXPECT_TRUE(c.OnTimer(true).send);  // delay 0: every copy at once
  EXPECT_TRUE(c.OnTimer(true).send);
  EXPECT_FALSE(c.OnTimer(true).send);  // maxAttempts 3
  const HedgeController::Step s =
      c.OnCopyEnd(2, StatusCode::INVALID_ARGUMENT, kNone, false, true);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.cancel_others);
}

TEST_F(HedgeControllerTest, CallerCancelEndsEverything) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(10));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(10));
  ASSERT_TRUE(c.OnTimer(true).send);
  const HedgeController::Step s = c.OnCopyEnd(1, StatusCode::CANCELLED, kNone,
                                              /*caller_cancelled=*/true, true);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.cancel_others);
}

TEST_F(HedgeControllerTest, PushbackDelaysTheNextCopyOrStopsThem) {
  const HedgingPolicy p = Policy(4, absl::Milliseconds(30));
  {
    HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
    c.Start(clock_.MonotonicNow());
    Pushback wait;
    wait.kind = Pushback::Kind::kRetryAfter;
    wait.delay = absl::Milliseconds(200);
    HedgeController::Step s =
        c.OnCopyEnd(1, StatusCode::UNAVAILABLE, wait, false, true);
    EXPECT_FALSE(s.send);
    EXPECT_FALSE(s.done);
    EXPECT_EQ(s.next_timer, clock_.MonotonicNow() + absl::Milliseconds(200));
    // An early timer (the old one at 30 ms) sends nothing.
    clock_.Advance(absl::Milliseconds(30));
    s = c.OnTimer(true);
    EXPECT_FALSE(s.send);
    EXPECT_EQ(s.next_timer, clock_.MonotonicNow() + absl::Milliseconds(170));
    clock_.Advance(absl::Milliseconds(170));
    EXPECT_TRUE(c.OnTimer(true).send);
  }
  {
    HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
    c.Start(clock_.MonotonicNow());
    clock_.Advance(absl::Milliseconds(30));
    ASSERT_TRUE(c.OnTimer(true).send);
    Pushback stop;
    stop.kind = Pushback::Kind::kStop;
    HedgeController::Step s =
        c.OnCopyEnd(2, StatusCode::UNAVAILABLE, stop, false, true);
    EXPECT_FALSE(s.send);
    EXPECT_FALSE(s.done);  // copy 1 is still out
    EXPECT_TRUE(c.stopped());
    clock_.Advance(absl::Milliseconds(30));
    EXPECT_FALSE(c.OnTimer(true).send);
    s = c.OnCopyEnd(1, StatusCode::UNAVAILABLE, kNone, false, true);
    EXPECT_TRUE(s.done);  // nothing left: the last failure stands
  }
}

// An open breaker or an exhausted hedge budget: no more copies, never a
// wait; the copy in flight carries on, and the call ends with it.
TEST_F(HedgeControllerTest, RefusedHedgesAreNotRetried) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(30));
  HedgeController::Step s = c.OnTimer(/*allowed=*/false);
  EXPECT_FALSE(s.send);
  EXPECT_EQ(s.next_timer, absl::InfiniteFuture());
  EXPECT_TRUE(c.hedges_stopped());
  s = c.OnCopyEnd(1, StatusCode::OK, kNone, false, true);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(c.started(), 1);
}

// The glue could not send the copy a step asked for: no more copies, and
// with nothing in flight the call ends.
TEST_F(HedgeControllerTest, ARefusedCopyStopsTheCopies) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  HedgeController::Step s =
      c.OnCopyEnd(1, StatusCode::UNAVAILABLE, kNone, false, true);
  ASSERT_TRUE(s.send);
  s = c.OnRefused(/*hedge=*/false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(c.started(), 1);
  EXPECT_TRUE(c.stopped());
}

// A refused hedge (the timer's copy) stops hedges only: the first copy's
// non-fatal failure still sends its replacement.
TEST_F(HedgeControllerTest, ARefusedHedgeStillLetsAFailureBeReplaced) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Seconds(1)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(30));
  ASSERT_TRUE(c.OnTimer(true).send);
  HedgeController::Step s = c.OnRefused(/*hedge=*/true);
  EXPECT_FALSE(s.done);
  EXPECT_TRUE(c.hedges_stopped());
  EXPECT_FALSE(c.stopped());
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_FALSE(c.OnTimer(true).send);  // no more hedges
  s = c.OnCopyEnd(1, StatusCode::UNAVAILABLE, kNone, false, true);
  EXPECT_TRUE(s.send);  // the replacement of a failed copy
  EXPECT_EQ(s.next_timer, absl::InfiniteFuture());
  s = c.OnCopyEnd(2, StatusCode::OK, kNone, false, true);
  EXPECT_TRUE(s.done);
}

TEST_F(HedgeControllerTest, NoCopyAfterTheDeadline) {
  const HedgingPolicy p = Policy(3, absl::Milliseconds(30));
  HedgeController c(p, p.delay, Deadline(absl::Milliseconds(20)), &clock_);
  c.Start(clock_.MonotonicNow());
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_FALSE(c.OnTimer(true).send);
  const HedgeController::Step s =
      c.OnCopyEnd(1, StatusCode::DEADLINE_EXCEEDED, kNone, false, true);
  EXPECT_TRUE(s.done);
}

// A server's delay is judged as a retry's is (CheckServerDelay): with a
// deadline, the deadline alone bounds it; without one, more than
// kMaxServerDelay stops the copies. A delay that cannot be waited out ends
// the call at once when no copy is in flight.
class HedgeServerDelayTest : public ::testing::Test {
 protected:
  // The step after the first copy failed UNAVAILABLE with `hint`, on a call
  // with `time_to_deadline` (infinite: no deadline) and a minimal attempt
  // time of 2 ms. `c_` holds the controller.
  HedgeController::Step After(const Pushback& hint,
                              absl::Duration time_to_deadline) {
    c_.emplace(policy_, policy_.delay, clock_.MonotonicNow() + time_to_deadline,
               &clock_, absl::Milliseconds(2));
    c_->Start(clock_.MonotonicNow());
    return c_->OnCopyEnd(1, StatusCode::UNAVAILABLE, hint, false, true);
  }

  // The step waits out `wait` before the next copy, and nothing stopped.
  void ExpectWaits(const HedgeController::Step& s, absl::Duration wait) {
    EXPECT_FALSE(s.done);
    EXPECT_FALSE(s.send);
    EXPECT_EQ(s.next_timer, clock_.MonotonicNow() + wait);
    EXPECT_FALSE(c_->stopped());
    EXPECT_EQ(c_->server_stop(), GiveUpReason::kNone);
  }

  // The call ended at once, for `reason`: no copy, no timer.
  void ExpectEndsAtOnce(const HedgeController::Step& s, GiveUpReason reason) {
    EXPECT_TRUE(s.done);
    EXPECT_FALSE(s.send);
    EXPECT_EQ(s.next_timer, absl::InfiniteFuture());
    EXPECT_TRUE(c_->stopped());
    EXPECT_EQ(c_->server_stop(), reason);
  }

  static Pushback RetryAfter(absl::Duration d) {
    Pushback p;
    p.kind = Pushback::Kind::kRetryAfter;
    p.delay = d;
    return p;
  }
  static Pushback Floor(absl::Duration d) {
    Pushback p;
    p.min_delay = d;
    return p;
  }

  const HedgingPolicy policy_ = Policy(3, absl::Milliseconds(30));
  FakeClock clock_;
  std::optional<HedgeController> c_;
};

TEST_F(HedgeServerDelayTest, WithADeadlineAPushbackThatFitsDelaysTheNextCopy) {
  // 998 ms plus the 2 ms minimal attempt time is exactly the second left.
  ExpectWaits(After(RetryAfter(absl::Milliseconds(998)), absl::Seconds(1)),
              absl::Milliseconds(998));
}

TEST_F(HedgeServerDelayTest,
       WithADeadlineAPushbackThatDoesNotFitEndsTheCallAsDeadline) {
  ExpectEndsAtOnce(After(RetryAfter(absl::Milliseconds(999)), absl::Seconds(1)),
                   GiveUpReason::kDeadline);
}

TEST_F(HedgeServerDelayTest,
       WithADeadlineARetryInfoFloorThatFitsDelaysTheNextCopy) {
  ExpectWaits(After(Floor(absl::Milliseconds(998)), absl::Seconds(1)),
              absl::Milliseconds(998));
}

TEST_F(HedgeServerDelayTest,
       WithADeadlineARetryInfoFloorThatDoesNotFitEndsTheCallAsDeadline) {
  ExpectEndsAtOnce(After(Floor(absl::Milliseconds(999)), absl::Seconds(1)),
                   GiveUpReason::kDeadline);
}

TEST_F(HedgeServerDelayTest, WithADeadlineADelayOver60sThatFitsIsHonoured) {
  for (const Pushback& hint :
       {RetryAfter(absl::Seconds(90)), Floor(absl::Seconds(90))}) {
    ExpectWaits(After(hint, absl::Minutes(5)), absl::Seconds(90));
  }
}

TEST_F(HedgeServerDelayTest,
       WithADeadlineADelayOver60sThatDoesNotFitEndsTheCallAsDeadline) {
  for (const Pushback& hint :
       {RetryAfter(absl::Seconds(90)), Floor(absl::Seconds(90))}) {
    ExpectEndsAtOnce(After(hint, absl::Seconds(30)), GiveUpReason::kDeadline);
  }
}

TEST_F(HedgeServerDelayTest, WithoutADeadlineADelayUpTo60sIsHonoured) {
  for (const Pushback& hint :
       {RetryAfter(kMaxServerDelay), Floor(kMaxServerDelay)}) {
    ExpectWaits(After(hint, absl::InfiniteDuration()), kMaxServerDelay);
  }
}

TEST_F(HedgeServerDelayTest, WithoutADeadlineADelayOver60sStops) {
  const absl::Duration over = kMaxServerDelay + absl::Milliseconds(1);
  for (const Pushback& hint : {RetryAfter(over), Floor(over)}) {
    ExpectEndsAtOnce(After(hint, absl::InfiniteDuration()),
                     GiveUpReason::kPushbackStop);
  }
}

TEST_F(HedgeServerDelayTest, ANegativePushbackStopsWithOrWithoutADeadline) {
  for (absl::Duration left : {absl::Seconds(1), absl::InfiniteDuration()}) {
    ExpectEndsAtOnce(After(ParsePushback("-1"), left),
                     GiveUpReason::kPushbackStop);
  }
}

// A delay that cannot be waited out stops further copies; a copy already in
// flight carries on, and the call ends with it.
TEST_F(HedgeServerDelayTest, ADelayThatDoesNotFitLetsTheCopiesInFlightEnd) {
  c_.emplace(policy_, policy_.delay, clock_.MonotonicNow() + absl::Seconds(30),
             &clock_, absl::Milliseconds(2));
  c_->Start(clock_.MonotonicNow());
  clock_.Advance(policy_.delay);
  ASSERT_TRUE(c_->OnTimer(true).send);
  HedgeController::Step s = c_->OnCopyEnd(
      2, StatusCode::UNAVAILABLE, RetryAfter(absl::Seconds(90)), false, true);
  EXPECT_FALSE(s.done);  // copy 1 is still out
  EXPECT_FALSE(s.send);
  EXPECT_TRUE(c_->stopped());
  EXPECT_EQ(c_->server_stop(), GiveUpReason::kDeadline);
  clock_.Advance(policy_.delay);
  EXPECT_FALSE(c_->OnTimer(true).send);
  s = c_->OnCopyEnd(1, StatusCode::OK, kNone, false, true);
  EXPECT_TRUE(s.done);
}

// With every copy spent, a server's delay is moot: the call ends as out of
// attempts, not for the delay (as a retry's last attempt does).
TEST_F(HedgeServerDelayTest, WithTheCopiesSpentTheDelayIsNotJudged) {
  const HedgingPolicy two = Policy(2, absl::Milliseconds(30));
  HedgeController c(two, two.delay, clock_.MonotonicNow() + absl::Seconds(1),
                    &clock_, absl::Milliseconds(2));
  c.Start(clock_.MonotonicNow());
  ASSERT_TRUE(c.OnCopyEnd(1, StatusCode::UNAVAILABLE, kNone, false, true).send);
  const HedgeController::Step s = c.OnCopyEnd(
      2, StatusCode::UNAVAILABLE, RetryAfter(absl::Seconds(90)), false, true);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(c.server_stop(), GiveUpReason::kNone);
}

}  // namespace
}  // namespace rpcguard
