// Copyright rpcguard authors.
//
// RetryBudget (ratio over a window plus a floor) and RetryThrottle (gRFC A6
// token arithmetic), under a fake clock; and what each does to a total
// outage under steady load. Tagged for the ThreadSanitizer run: the threaded
// tests at the end create no gRPC objects.

#include "rpcguard/destination/retry_budget.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpcguard/destination/retry_throttle.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::FakeClock;

std::shared_ptr<RetryBudget> MakeBudget(const RetryBudgetOptions& options,
                                        Clock* clock) {
  absl::StatusOr<std::shared_ptr<RetryBudget>> budget =
      RetryBudget::Create(options, clock);
  EXPECT_TRUE(budget.ok()) << budget.status();
  return *budget;
}

std::shared_ptr<RetryThrottle> MakeThrottle(double max_tokens,
                                            double token_ratio) {
  absl::StatusOr<std::shared_ptr<RetryThrottle>> throttle =
      RetryThrottle::Create(RetryThrottleOptions{max_tokens, token_ratio});
  EXPECT_TRUE(throttle.ok()) << throttle.status();
  return *throttle;
}

// Retries granted until the first refusal.
int DrainRetries(RetryBudget& budget) {
  int granted = 0;
  while (budget.TryAcquireRetry()) ++granted;
  return granted;
}

void RecordFirstAttempts(RetryBudget& budget, int n) {
  for (int i = 0; i < n; ++i) budget.RecordFirstAttempt();
}

RetryBudgetOptions RatioOnly(double ratio) {
  RetryBudgetOptions o;
  o.ratio = ratio;
  o.min_retries_per_second = 0;
  return o;
}

// ---------------------------------------------------------------------------
// RetryBudget

TEST(RetryBudgetOptionsTest, Defaults) {
  const RetryBudgetOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.window, absl::Seconds(10));
  EXPECT_EQ(o.buckets, 10);
  EXPECT_EQ(o.ratio, 0.2);
  EXPECT_EQ(o.min_retries_per_second, 10);
}

TEST(RetryBudgetOptionsTest, EachBadFieldIsNamedExactly) {
  struct Case {
    void (*mutate)(RetryBudgetOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](RetryBudgetOptions& o) { o.window = absl::ZeroDuration(); },
       "retryBudget.window: must be greater than 0"},
      {[](RetryBudgetOptions& o) { o.window = absl::InfiniteDuration(); },
       "retryBudget.window: must be finite"},
      {[](RetryBudgetOptions& o) { o.buckets = 0; },
       "retryBudget.buckets: must be in [1, 1000]"},
      {[](RetryBudgetOptions& o) { o.window = absl::Microseconds(9999); },
       "retryBudget.window: must be at least 1ms per bucket"},
      {[](RetryBudgetOptions& o) { o.ratio = -0.1; },
       "retryBudget.ratio: must be in [0, 1]"},
      {[](RetryBudgetOptions& o) { o.ratio = 1.5; },
       "retryBudget.ratio: must be in [0, 1]"},
      {[](RetryBudgetOptions& o) { o.ratio = std::nan(""); },
       "retryBudget.ratio: must be in [0, 1]"},
      {[](RetryBudgetOptions& o) { o.min_retries_per_second = -1; },
       "retryBudget.minRetriesPerSecond: must be a finite number, at least 0"},
      {[](RetryBudgetOptions& o) {
         o.min_retries_per_second = std::numeric_limits<double>::infinity();
       },
       "retryBudget.minRetriesPerSecond: must be a finite number, at least 0"},
      {[](RetryBudgetOptions& o) {
         o.ratio = 0;
         o.min_retries_per_second = 0;
       },
       "retryBudget: ratio and minRetriesPerSecond are both 0, which forbids "
       "every retry"},
  };
  for (const Case& c : cases) {
    RetryBudgetOptions o;
    c.mutate(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(RetryBudget::Create(o).status(), s);
  }
}

TEST(RetryBudgetTest, FloorAloneAllowsMinRetriesPerSecondTimesWindow) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  EXPECT_EQ(DrainRetries(*budget), 100);  // 10/s x 10 s, no first attempts
  const RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(s.retries, 100);
  EXPECT_EQ(s.first_attempts, 0);
  EXPECT_EQ(s.allowance, 100);
  EXPECT_EQ(s.refused, 1u);
}

TEST(RetryBudgetTest, RatioOfFirstAttempts) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);
  EXPECT_FALSE(budget->TryAcquireRetry());
  RecordFirstAttempts(*budget, 100);
  EXPECT_EQ(DrainRetries(*budget), 20);
  RecordFirstAttempts(*budget, 4);
  EXPECT_FALSE(budget->TryAcquireRetry());  // 20.8: not a whole retry yet
  RecordFirstAttempts(*budget, 1);
  EXPECT_TRUE(budget->TryAcquireRetry());  // 21
  EXPECT_FALSE(budget->TryAcquireRetry());
}

// The floor is a minimum under the ratio, not added to it: with traffic,
// retries stay within the ratio.
TEST(RetryBudgetTest, FloorIsAMinimumNotAnAddition) {
  FakeClock clock;
  auto busy = MakeBudget({}, &clock);
  RecordFirstAttempts(*busy, 1000);
  EXPECT_EQ(DrainRetries(*busy), 200);  // max(0.2 x 1000, 100)
  auto quiet = MakeBudget({}, &clock);
  RecordFirstAttempts(*quiet, 100);
  EXPECT_EQ(DrainRetries(*quiet), 100);  // max(0.2 x 100, 100)
}

// --- How retries are paid for (RetryCharge) ---

TEST(RetryBudgetTest, ARetryThatSucceedsIsRefunded) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);
  RecordFirstAttempts(*budget, 10);  // allowance 2
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kOnFailure)) << i;
    budget->RecordRetryEnd(RetryCharge::kOnFailure, /*failed=*/false);
  }
  RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(s.retries, 0);
  EXPECT_EQ(s.refunded, 50u);
  EXPECT_EQ(s.unpaid_in_flight, 0);
  // Failed ones are paid: two fit, the third is refused.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kOnFailure));
    budget->RecordRetryEnd(RetryCharge::kOnFailure, /*failed=*/true);
  }
  EXPECT_FALSE(budget->TryAcquireRetry(RetryCharge::kOnFailure));
  EXPECT_FALSE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  s = budget->Snapshot();
  EXPECT_EQ(s.retries, 2);
  EXPECT_EQ(s.refused, 2u);
}

// A burst of calls that each fail once: every retry may be in flight at
// once, unpaid, but never more of them than first attempts.
TEST(RetryBudgetTest, UnpaidRetriesInFlightAreBoundedByFirstAttempts) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  RecordFirstAttempts(*budget, 200);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(budget->CanAcquireRetry(RetryCharge::kOnFailure)) << i;
    ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kOnFailure)) << i;
  }
  EXPECT_EQ(budget->Snapshot().unpaid_in_flight, 200);
  EXPECT_FALSE(budget->CanAcquireRetry(RetryCharge::kOnFailure));
  EXPECT_FALSE(budget->TryAcquireRetry(RetryCharge::kOnFailure));
  // Paid retries are not bounded by that: the floor still has 100.
  EXPECT_TRUE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  for (int i = 0; i < 200; ++i) {
    budget->RecordRetryEnd(RetryCharge::kOnFailure, /*failed=*/false);
  }
  EXPECT_EQ(budget->Snapshot().unpaid_in_flight, 0);
  EXPECT_EQ(budget->Snapshot().retries, 1);
  // Ending more than were granted never goes below zero.
  budget->RecordRetryEnd(RetryCharge::kOnFailure, false);
  EXPECT_EQ(budget->Snapshot().unpaid_in_flight, 0);
}

TEST(RetryBudgetTest, UpFrontRetriesAreNeverRefunded) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);
  RecordFirstAttempts(*budget, 10);
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  budget->RecordRetryEnd(RetryCharge::kUpFront, /*failed=*/false);
  ASSERT_TRUE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  EXPECT_FALSE(budget->TryAcquireRetry(RetryCharge::kUpFront));
  EXPECT_EQ(budget->Snapshot().retries, 2);
  EXPECT_EQ(budget->Snapshot().refunded, 0u);
}

TEST(RetryBudgetTest, FreeRetriesAlwaysPassAndCostNothing) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);  // allowance 0
  EXPECT_FALSE(budget->CanAcquireRetry(RetryCharge::kUpFront));
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(budget->CanAcquireRetry(RetryCharge::kFree));
    EXPECT_TRUE(budget->TryAcquireRetry(RetryCharge::kFree));
  }
  const RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(s.retries, 0);
  EXPECT_EQ(s.free, 10u);
  EXPECT_EQ(RetryChargeName(RetryCharge::kFree), "free");
  EXPECT_EQ(RetryChargeName(RetryCharge::kOnFailure), "on_failure");
  EXPECT_EQ(RetryChargeName(RetryCharge::kUpFront), "up_front");
}

// The window runs on the monotonic clock: a wall-clock step forward (NTP, a
// resumed VM) neither empties it nor, stepped back, keeps it full.
TEST(RetryBudgetTest, AWallClockStepLeavesTheWindowAlone) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);
  RecordFirstAttempts(*budget, 100);
  EXPECT_EQ(DrainRetries(*budget), 20);
  clock.StepWall(absl::Hours(1));
  EXPECT_EQ(budget->Snapshot().first_attempts, 100);
  EXPECT_EQ(budget->Snapshot().retries, 20);
  EXPECT_FALSE(budget->TryAcquireRetry());
  clock.StepWall(absl::Hours(-2));
  clock.Advance(absl::Seconds(11));  // the window has passed, really
  EXPECT_EQ(budget->Snapshot().first_attempts, 0);
  EXPECT_EQ(budget->Snapshot().retries, 0);
}

TEST(RetryBudgetTest, RetriesEarnedLongAgoExpireWithTheWindow) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.2), &clock);
  RecordFirstAttempts(*budget, 100);
  EXPECT_EQ(DrainRetries(*budget), 20);
  clock.Advance(absl::Seconds(5));
  RecordFirstAttempts(*budget, 50);
  EXPECT_EQ(DrainRetries(*budget), 10);
  // The first bucket (100 first attempts, 20 retries) leaves the window;
  // the 50 and their 10 retries remain.
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(budget->Snapshot().first_attempts, 50);
  EXPECT_EQ(budget->Snapshot().retries, 10);
  EXPECT_FALSE(budget->TryAcquireRetry());
  clock.Advance(absl::Seconds(5));  // all gone
  const RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(s.first_attempts, 0);
  EXPECT_EQ(s.retries, 0);
  EXPECT_FALSE(budget->TryAcquireRetry());
  RecordFirstAttempts(*budget, 5);
  EXPECT_TRUE(budget->TryAcquireRetry());
}

TEST(RetryBudgetTest, SpentRetriesAlsoExpire) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  EXPECT_EQ(DrainRetries(*budget), 100);
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(DrainRetries(*budget), 100);  // the floor is back
}

// ---------------------------------------------------------------------------
// RetryThrottle: gRFC A6

TEST(RetryThrottleOptionsTest, EachBadFieldIsNamedExactly) {
  struct Case {
    RetryThrottleOptions options;
    const char* message;
  };
  const Case cases[] = {
      {{0, 0.1}, "retryThrottling.maxTokens: must be greater than 0"},
      {{-1, 0.1}, "retryThrottling.maxTokens: must be greater than 0"},
      {{1000.5, 0.1}, "retryThrottling.maxTokens: must be at most 1000"},
      {{0.0009, 0.1}, "retryThrottling.maxTokens: must be at least 0.001"},
      {{10, 0}, "retryThrottling.tokenRatio: must be greater than 0"},
      {{10, std::numeric_limits<double>::infinity()},
       "retryThrottling.tokenRatio: must be finite"},
      {{10, 0.0009},
       "retryThrottling.tokenRatio: must be at least 0.001 (3 decimal places "
       "are kept)"},
  };
  for (const Case& c : cases) {
    const absl::Status s = c.options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(RetryThrottle::Create(c.options).status(), s);
  }
  EXPECT_TRUE((RetryThrottleOptions{1000, 0.001}).Validate().ok());
}

TEST(RetryThrottleTest, KeepsThreeDecimalPlaces) {
  EXPECT_EQ(internal::ToThousandths(0.1), 100);
  EXPECT_EQ(internal::ToThousandths(0.29), 290);  // 0.28999... in binary
  EXPECT_EQ(internal::ToThousandths(0.1239), 123);
  EXPECT_EQ(internal::ToThousandths(0.0009), 0);
  EXPECT_EQ(internal::ToThousandths(10), 10000);
  EXPECT_EQ(internal::ToThousandths(1000), 1000000);
  EXPECT_EQ(MakeThrottle(10, 0.1239)->milli_token_ratio(), 123);
}

TEST(RetryThrottleTest, A6TokenArithmetic) {
  // A6's example: maxTokens 10, tokenRatio 0.1; threshold 5.
  auto t = MakeThrottle(10, 0.1);
  EXPECT_EQ(t->max_milli_tokens(), 10000);
  EXPECT_EQ(t->milli_tokens(), 10000);  // starts full
  EXPECT_TRUE(t->RetryAllowed());
  EXPECT_TRUE(t->RecordFailure());  // 9
  EXPECT_TRUE(t->RecordFailure());  // 8
  EXPECT_TRUE(t->RecordFailure());  // 7
  EXPECT_TRUE(t->RecordFailure());  // 6 > 5
  EXPECT_EQ(t->milli_tokens(), 6000);
  EXPECT_FALSE(t->RecordFailure());  // 5 <= 5: retries stop
  EXPECT_EQ(t->milli_tokens(), 5000);
  EXPECT_FALSE(t->RetryAllowed());
  t->RecordSuccess();  // 5.1 > 5: allowed again
  EXPECT_EQ(t->milli_tokens(), 5100);
  EXPECT_TRUE(t->RetryAllowed());
  EXPECT_FALSE(t->RecordFailure());  // 4.1
  EXPECT_EQ(t->milli_tokens(), 4100);
}

TEST(RetryThrottleTest, NeverBelowZeroNorAboveMax) {
  auto t = MakeThrottle(10, 0.1);
  for (int i = 0; i < 25; ++i) t->RecordFailure();
  EXPECT_EQ(t->milli_tokens(), 0);
  t->RecordSuccess();
  EXPECT_EQ(t->milli_tokens(), 100);
  for (int i = 0; i < 200; ++i) t->RecordSuccess();
  EXPECT_EQ(t->milli_tokens(), 10000);
  // It takes 51 successes from empty to rise above the threshold again.
  for (int i = 0; i < 25; ++i) t->RecordFailure();
  for (int i = 0; i < 50; ++i) t->RecordSuccess();
  EXPECT_FALSE(t->RetryAllowed());  // exactly 5
  t->RecordSuccess();
  EXPECT_TRUE(t->RetryAllowed());
}

TEST(RetryThrottleTest, ThresholdWithOddAndFractionalMaxTokens) {
  auto three = MakeThrottle(3, 1);       // threshold 1.5
  EXPECT_TRUE(three->RecordFailure());   // 2
  EXPECT_FALSE(three->RecordFailure());  // 1
  auto one = MakeThrottle(1, 0.1);       // threshold 0.5
  EXPECT_FALSE(one->RecordFailure());    // 0
  for (int i = 0; i < 5; ++i) one->RecordSuccess();
  EXPECT_FALSE(one->RetryAllowed());  // 0.5
  one->RecordSuccess();
  EXPECT_TRUE(one->RetryAllowed());     // 0.6
  auto frac = MakeThrottle(2.5, 0.25);  // threshold 1.25
  EXPECT_TRUE(frac->RecordFailure());   // 1.5
  EXPECT_FALSE(frac->RecordFailure());  // 0.5
  frac->RecordSuccess();
  frac->RecordSuccess();
  frac->RecordSuccess();  // 1.25
  EXPECT_FALSE(frac->RetryAllowed());
  frac->RecordSuccess();  // 1.5
  EXPECT_TRUE(frac->RetryAllowed());
}

TEST(RetryThrottleTest, ANewConfigStartsFromTheOldFill) {
  auto old_throttle = MakeThrottle(10, 0.1);
  for (int i = 0; i < 3; ++i) old_throttle->RecordFailure();  // 7 of 10
  auto t =
      *RetryThrottle::Create(RetryThrottleOptions{20, 0.5}, old_throttle.get());
  EXPECT_EQ(t->milli_tokens(), 14000);
  EXPECT_EQ((*RetryThrottle::Create(RetryThrottleOptions{20, 0.5}, nullptr))
                ->milli_tokens(),
            20000);
}

// ---------------------------------------------------------------------------
// A total outage under steady load: 100 calls/s for 60 s, each call wanting
// up to 4 attempts, every attempt failing. The fake clock starts on a whole
// second, so the run is exactly 6 windows of 10 buckets.

struct OutageFigures {
  double attempts_per_call = 0;         // the whole run
  double steady_attempts_per_call = 0;  // after the first window
};

// `budget` and `throttle` may be null.
OutageFigures RunOutage(FakeClock& clock, RetryBudget* budget,
                        RetryThrottle* throttle,
                        RetryCharge charge = RetryCharge::kUpFront) {
  constexpr int kCallsPerSecond = 100;
  constexpr int kSeconds = 60;
  constexpr int kMaxAttempts = 4;
  constexpr int kWarmupCalls = 10 * kCallsPerSecond;
  int64_t calls = 0, attempts = 0, steady_calls = 0, steady_attempts = 0;
  for (int i = 0; i < kCallsPerSecond * kSeconds; ++i) {
    if (budget != nullptr) budget->RecordFirstAttempt();
    int n = 0;
    while (true) {
      ++n;  // an attempt, failing
      // A retry granted on credit fails: it is paid now.
      if (n > 1 && budget != nullptr) budget->RecordRetryEnd(charge, true);
      // A6 counts every failed attempt, and decides on it.
      const bool throttle_allows =
          throttle == nullptr || throttle->RecordFailure();
      if (n == kMaxAttempts || !throttle_allows) break;
      if (budget != nullptr && !budget->TryAcquireRetry(charge)) break;
    }
    ++calls;
    attempts += n;
    if (i >= kWarmupCalls) {
      ++steady_calls;
      steady_attempts += n;
    }
    clock.Advance(absl::Seconds(1) / kCallsPerSecond);
  }
  return {static_cast<double>(attempts) / calls,
          static_cast<double>(steady_attempts) / steady_calls};
}

TEST(RetryStormTest, WithoutABudgetEveryCallMakesMaxAttempts) {
  FakeClock clock;
  const OutageFigures f = RunOutage(clock, nullptr, nullptr);
  EXPECT_EQ(f.attempts_per_call, 4.0);
  EXPECT_EQ(f.steady_attempts_per_call, 4.0);
}

TEST(RetryStormTest, BudgetHoldsAttemptsPerCallToOnePlusRatio) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  const OutageFigures f = RunOutage(clock, budget.get(), nullptr);
  // 1 + max(0.2, (10 retries/s) / (100 calls/s)).
  const double bound = 1 + 0.2;
  EXPECT_LE(f.attempts_per_call, bound + 1e-9);
  EXPECT_LE(f.steady_attempts_per_call, bound + 1e-9);
  // And the budget is spent, not wasted.
  EXPECT_GE(f.steady_attempts_per_call, bound - 0.01);
  ::testing::Test::RecordProperty("attempts_per_call",
                                  std::to_string(f.attempts_per_call));
  ::testing::Test::RecordProperty("steady_attempts_per_call",
                                  std::to_string(f.steady_attempts_per_call));
}

// Retries paid only when they fail are paid in an outage, where they all
// fail: the same bound holds.
TEST(RetryStormTest, RetriesPaidOnFailureAreHeldTheSame) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  const OutageFigures f =
      RunOutage(clock, budget.get(), nullptr, RetryCharge::kOnFailure);
  EXPECT_LE(f.steady_attempts_per_call, 1.2 + 1e-9);
  EXPECT_GE(f.steady_attempts_per_call, 1.2 - 0.01);
}

// A brownout: 30% of attempts fail at random, maxAttempts 2, 100 calls/s.
// Retries that succeed are refunded, so the budget pays only for the 9% of
// calls whose retry fails too, and lets every retry through: success 91%,
// as with no budget at all, at 1.3 attempts per call.
TEST(RetryStormTest, BrownoutRetriesAreAllAllowed) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  std::mt19937 gen(42);  // seeded: the same run every time
  std::bernoulli_distribution fails(0.3);
  int64_t calls = 0, attempts = 0, ok = 0, refused = 0;
  for (int i = 0; i < 100 * 60; ++i) {
    budget->RecordFirstAttempt();
    ++calls;
    ++attempts;
    bool failed = fails(gen);
    if (failed) {
      if (budget->TryAcquireRetry(RetryCharge::kOnFailure)) {
        ++attempts;
        failed = fails(gen);
        budget->RecordRetryEnd(RetryCharge::kOnFailure, failed);
      } else {
        ++refused;
      }
    }
    if (!failed) ++ok;
    clock.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(refused, 0);
  EXPECT_NEAR(static_cast<double>(ok) / calls, 0.91, 0.02);
  EXPECT_NEAR(static_cast<double>(attempts) / calls, 1.3, 0.03);
}

TEST(RetryStormTest, BudgetWithoutFloorHoldsToOnePlusRatio) {
  FakeClock clock;
  auto budget = MakeBudget(RatioOnly(0.1), &clock);  // the SRE book's 10%
  const OutageFigures f = RunOutage(clock, budget.get(), nullptr);
  EXPECT_LE(f.attempts_per_call, 1.1 + 1e-9);
  EXPECT_GE(f.steady_attempts_per_call, 1.1 - 0.01);
}

TEST(RetryStormTest, A6ThrottleStopsRetryingAfterHalfTheTokens) {
  FakeClock clock;
  auto throttle = MakeThrottle(10, 0.1);
  const OutageFigures f = RunOutage(clock, nullptr, throttle.get());
  // The first call's 4 attempts take the count from 10 to 6; the next
  // failure takes it to 5, the threshold, and no success ever refills it.
  EXPECT_EQ(f.steady_attempts_per_call, 1.0);
  EXPECT_EQ(f.attempts_per_call, (6000.0 + 3) / 6000);
}

TEST(RetryStormTest, BudgetNeverLimitsALightlyFailingDestination) {
  // 10% of attempts fail: every failure is retried.
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  int attempt = 0;
  int64_t failed_calls = 0;
  for (int i = 0; i < 6000; ++i) {
    clock.Advance(absl::Milliseconds(10));
    budget->RecordFirstAttempt();
    for (int n = 1; n <= 4; ++n) {
      const bool failed = ++attempt % 10 == 0;
      if (!failed) break;
      if (n == 4) {
        ++failed_calls;
      } else {
        ASSERT_TRUE(budget->TryAcquireRetry()) << i;
      }
    }
  }
  EXPECT_EQ(budget->Snapshot().refused, 0u);
  EXPECT_EQ(failed_calls, 0);
}

TEST(RetryStormTest, AQuietClientCanStillRetryEverything) {
  // One call a second, all failing: the floor covers every retry.
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  for (int i = 0; i < 120; ++i) {
    clock.Advance(absl::Seconds(1));
    budget->RecordFirstAttempt();
    for (int n = 1; n < 4; ++n) ASSERT_TRUE(budget->TryAcquireRetry()) << i;
  }
}

// ---------------------------------------------------------------------------
// Threads (for ThreadSanitizer; the clock does not move while they run).

TEST(RetryBudgetThreadsTest, ConcurrentCallersNeverExceedTheAllowance) {
  FakeClock clock;
  auto budget = MakeBudget({}, &clock);
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 1000;
  std::vector<int64_t> granted(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        budget->RecordFirstAttempt();
        for (int n = 0; n < 3; ++n) {
          if (budget->TryAcquireRetry()) ++granted[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t total = 0;
  for (int64_t g : granted) total += g;
  const RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(s.first_attempts, kThreads * kCallsPerThread);
  EXPECT_EQ(s.retries, total);
  // Interleaving decides when retries are granted, never how many in all:
  // at most the final allowance, 0.2 x 8000 + 100.
  EXPECT_LE(total, 1700);
  EXPECT_EQ(s.refused,
            static_cast<uint64_t>(kThreads * kCallsPerThread * 3 - total));
}

TEST(RetryThrottleThreadsTest, ConcurrentUpdatesAreExact) {
  auto throttle = MakeThrottle(1000, 0.5);
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  // Failures only, from full: order cannot matter.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) throttle->RecordFailure();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(throttle->milli_tokens(), (1000 - 800) * 1000);
  threads.clear();
  // Successes only: 8 x 100 x 0.5 = 400 more.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) throttle->RecordSuccess();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(throttle->milli_tokens(), 600 * 1000);
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// Grants on credit from many threads at once, half of them failing: every
// grant is settled exactly once, and only the failed ones are paid.
TEST(RetryBudgetConcurrencyTest, CreditIsSettledExactlyOnce) {
  FakeClock clock;
  RetryBudgetOptions o;
  o.ratio = 1;
  auto budget = *RetryBudget::Create(o, &clock);
  for (int i = 0; i < 100000; ++i) budget->RecordFirstAttempt();
  constexpr int kThreads = 8;
  constexpr int kEach = 2000;
  std::atomic<int64_t> granted{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!budget->TryAcquireRetry(RetryCharge::kOnFailure)) continue;
        ++granted;
        const bool fails = (i + t) % 2 == 0;
        if (fails) ++failed;
        budget->RecordRetryEnd(RetryCharge::kOnFailure, fails);
      }
    });
  }
  for (auto& t : threads) t.join();
  const RetryBudgetSnapshot s = budget->Snapshot();
  EXPECT_EQ(granted.load(), kThreads * kEach);
  EXPECT_EQ(s.unpaid_in_flight, 0);
  EXPECT_EQ(s.retries, failed.load());
  EXPECT_EQ(s.refunded, static_cast<uint64_t>(granted - failed));
}

}  // namespace
}  // namespace rpcguard
