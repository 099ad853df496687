// Copyright rpcguard authors.
//
// AdaptiveThrottle (the SRE book's client-side throttling) on a fake clock
// and a fake random source; and, through the retry gate, how it divides the
// work with the circuit breaker: the breaker for a destination that is down,
// the throttle for one that is overloaded.

#include "rpcguard/destination/adaptive_throttle.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::FakeClock;

// Draws u = value / 2^64 every time: Admit refuses when u < p.
class FixedRandom : public Random {
 public:
  explicit FixedRandom(double u)
      : bits_(static_cast<uint64_t>(std::ldexp(u, 64))) {}
  uint64_t Next64() override {
    ++draws;
    return bits_;
  }
  int draws = 0;

 private:
  uint64_t bits_;
};

std::shared_ptr<AdaptiveThrottle> Make(const AdaptiveThrottleOptions& o,
                                       Clock* clock, Random* random) {
  auto t = AdaptiveThrottle::Create(o, clock, random);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

// The SRE formula alone, without the minimum volume.
AdaptiveThrottleOptions Pure() {
  AdaptiveThrottleOptions o;
  o.min_requests = 1;
  return o;
}

// A seeded source, for statistical tests that must not flake.
class SeededRandom : public Random {
 public:
  uint64_t Next64() override { return gen_(); }

 private:
  std::mt19937_64 gen_{42};
};

TEST(AdaptiveThrottleTest, NeverRefusesWhileTheServerAccepts) {
  FakeClock clock;
  FixedRandom random(0.0);  // would refuse at any p > 0
  auto t = Make({}, &clock, &random);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(t->Admit());
    t->RecordAnswer(/*overloaded=*/false);
    clock.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(random.draws, 0) << "the no-failure path draws nothing";
  EXPECT_TRUE(t->Settled());
  const AdaptiveThrottleSnapshot s = t->Snapshot();
  EXPECT_EQ(s.requests, 1000);
  EXPECT_EQ(s.accepts, 1000);
  EXPECT_EQ(s.reject_probability, 0);
}

TEST(AdaptiveThrottleTest, ProbabilityIsTheSreFormula) {
  FakeClock clock;
  FixedRandom random(0.999);  // admits at any p < 0.999
  auto t = Make(Pure(), &clock, &random);
  // 30 accepts, 70 overload rejections: (100 - 2 x 30) / 101.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(t->Admit());
    t->RecordAnswer(/*overloaded=*/i >= 30);
  }
  AdaptiveThrottleSnapshot s = t->Snapshot();
  EXPECT_EQ(s.requests, 100);
  EXPECT_EQ(s.accepts, 30);
  EXPECT_DOUBLE_EQ(s.reject_probability, 40.0 / 101.0);
  EXPECT_FALSE(t->Settled());

  // K = 1 lets through only what the server accepts: (100 - 30) / 101.
  AdaptiveThrottleOptions one = Pure();
  one.k = 1;
  auto strict = Make(one, &clock, &random);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(strict->Admit());
    strict->RecordAnswer(/*overloaded=*/i >= 30);
  }
  EXPECT_DOUBLE_EQ(strict->Snapshot().reject_probability, 70.0 / 101.0);
}

TEST(AdaptiveThrottleTest, KTwoLetsThroughTwiceWhatTheServerAccepts) {
  FakeClock clock;
  FixedRandom random(0.0);
  auto t = Make(Pure(), &clock, &random);
  // Half accepted: requests = 2 x accepts, p = 0 exactly.
  for (int i = 0; i < 100; ++i) t->RecordAnswer(/*overloaded=*/i % 2 == 0);
  EXPECT_EQ(t->Snapshot().reject_probability, 0);
  EXPECT_TRUE(t->Admit());
  // One more rejection tips it over.
  t->RecordAnswer(/*overloaded=*/true);
  EXPECT_GT(t->Snapshot().reject_probability, 0);
  EXPECT_FALSE(t->Admit());
}

TEST(AdaptiveThrottleTest, RefusalsCountAsRequests) {
  FakeClock clock;
  FixedRandom random(0.0);  // refuses whenever p > 0
  auto t = Make(Pure(), &clock, &random);
  t->RecordAnswer(/*overloaded=*/true);  // p = 1/2
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(t->Admit());
  const AdaptiveThrottleSnapshot s = t->Snapshot();
  EXPECT_EQ(s.requests, 11);
  EXPECT_EQ(s.accepts, 0);
  EXPECT_DOUBLE_EQ(s.reject_probability, 11.0 / 12.0);
}

TEST(AdaptiveThrottleTest, RefusedShareFollowsTheProbability) {
  FakeClock clock;
  SeededRandom random;
  auto t = Make(Pure(), &clock, &random);
  for (int i = 0; i < 1000; ++i) t->RecordAnswer(/*overloaded=*/i >= 400);
  // p = (1000 - 800) / 1001 ~ 0.2 at the start; refusals raise it a little.
  int refused = 0;
  for (int i = 0; i < 1000; ++i) refused += t->Admit() ? 0 : 1;
  EXPECT_GT(refused, 150);
  EXPECT_LT(refused, 400);
}

TEST(AdaptiveThrottleTest, RefusesNothingBelowTheMinimumVolume) {
  FakeClock clock;
  FixedRandom random(0.0);             // would refuse at any p > 0
  auto t = Make({}, &clock, &random);  // minRequests 20
  // A fresh client's first rejections: nothing refused yet.
  for (int i = 0; i < 19; ++i) {
    ASSERT_TRUE(t->Admit()) << i;
    t->RecordAnswer(/*overloaded=*/true);
  }
  EXPECT_EQ(t->Snapshot().reject_probability, 0);
  t->RecordAnswer(/*overloaded=*/true);
  EXPECT_DOUBLE_EQ(t->Snapshot().reject_probability, 20.0 / 21.0);
  EXPECT_FALSE(t->Admit());
}

TEST(AdaptiveThrottleTest, ForgetsAfterTheWindow) {
  FakeClock clock;
  FixedRandom random(0.0);
  auto t = Make(Pure(), &clock, &random);
  for (int i = 0; i < 50; ++i) t->RecordAnswer(/*overloaded=*/true);
  clock.Advance(absl::Minutes(1));
  EXPECT_FALSE(t->Settled()) << "still within two minutes";
  EXPECT_GT(t->Snapshot().reject_probability, 0.9);
  clock.Advance(absl::Minutes(1) + absl::Seconds(3));
  EXPECT_TRUE(t->Settled());
  EXPECT_TRUE(t->Admit());
  EXPECT_EQ(t->Snapshot().requests, 0);
}

TEST(AdaptiveThrottleTest, RecoversAsTheServerAcceptsAgain) {
  FakeClock clock;
  FixedRandom random(0.5);  // admits while p <= 0.5
  auto t = Make(Pure(), &clock, &random);
  // Overloaded: it accepted 30 of 100.
  for (int i = 0; i < 100; ++i) t->RecordAnswer(/*overloaded=*/i >= 30);
  EXPECT_DOUBLE_EQ(t->Snapshot().reject_probability, 40.0 / 101.0);
  // It recovers: every attempt sent is accepted, and each one lowers p.
  int admitted = 0;
  for (int i = 0; i < 100; ++i) {
    clock.Advance(absl::Milliseconds(10));
    if (t->Admit()) {
      ++admitted;
      t->RecordAnswer(/*overloaded=*/false);
    }
  }
  EXPECT_EQ(admitted, 100);
  EXPECT_EQ(t->Snapshot().reject_probability, 0);
}

TEST(AdaptiveThrottleTest, ABurstOfRejectionsIsNotRetried) {
  FakeClock clock;
  FixedRandom random(0.999);
  auto t = Make({}, &clock, &random);  // burstRejections 5
  // A lone rejection now and then (a quota) is retried.
  for (int i = 0; i < 10; ++i) {
    t->RecordAnswer(/*overloaded=*/true);
    EXPECT_TRUE(t->RetryAfterRejectionAllowed()) << i;
    clock.Advance(absl::Milliseconds(400));
  }
  clock.Advance(absl::Milliseconds(1500));  // the lone ones are forgotten
  // Five within a second: the destination is shedding, retries stop.
  for (int i = 0; i < 4; ++i) t->RecordAnswer(/*overloaded=*/true);
  EXPECT_TRUE(t->RetryAfterRejectionAllowed());
  t->RecordAnswer(/*overloaded=*/true);
  EXPECT_FALSE(t->RetryAfterRejectionAllowed());
  // A second later it is forgotten.
  clock.Advance(absl::Milliseconds(1300));
  EXPECT_TRUE(t->RetryAfterRejectionAllowed());
}

TEST(AdaptiveThrottleTest, TheGateVetoesRetriesOfABurstOnly) {
  FakeClock clock;
  FixedRandom random(0.999);
  auto t = Make({}, &clock, &random);
  DestinationGates gates;
  gates.adaptive = t.get();
  Decision retry;
  retry.action = Decision::Action::kRetry;
  retry.outcome.code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  for (int i = 0; i < 5; ++i) t->RecordAnswer(/*overloaded=*/true);
  Decision d = GateRetry(retry, true, gates);
  EXPECT_EQ(d.action, Decision::Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kThrottled);
  // The server named a delay: it asked for the retry.
  d = GateRetry(retry, true, gates, RetryCharge::kUpFront,
                /*server_named_delay=*/true);
  EXPECT_EQ(d.action, Decision::Action::kRetry);
  // Another code is not an overload rejection.
  retry.outcome.code = grpc::StatusCode::UNAVAILABLE;
  EXPECT_EQ(GateRetry(retry, true, gates).action, Decision::Action::kRetry);
}

TEST(AdaptiveThrottleTest, BadOptionsNameTheField) {
  AdaptiveThrottleOptions o;
  o.k = 0.5;
  EXPECT_EQ(o.Validate().message(),
            "adaptiveThrottling.k: must be a finite number, at least 1");
  o.k = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(o.Validate().ok());
  o.k = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(o.Validate().ok());
  o = AdaptiveThrottleOptions();
  o.window = absl::ZeroDuration();
  EXPECT_NE(o.Validate().message().find("adaptiveThrottling.window"),
            absl::string_view::npos)
      << o.Validate();
  o = AdaptiveThrottleOptions();
  o.burst_rejections = 0;
  EXPECT_EQ(o.Validate().message(),
            "adaptiveThrottling.burstRejections: must be at least 1");
  o = AdaptiveThrottleOptions();
  o.min_requests = 0;
  EXPECT_EQ(o.Validate().message(),
            "adaptiveThrottling.minRequests: must be at least 1");
  o = AdaptiveThrottleOptions();
  o.buckets = 0;
  EXPECT_NE(o.Validate().message().find("adaptiveThrottling.buckets"),
            absl::string_view::npos)
      << o.Validate();
  EXPECT_FALSE(AdaptiveThrottle::Create(o, nullptr).ok());
}

// The pair, through the retry gate as every call meets them.
class DownOrOverloadedTest : public ::testing::Test {
 protected:
  DownOrOverloadedTest() {
    BreakerOptions b;
    b.min_attempts = 20;
    breaker_ = *CircuitBreaker::Create("store", b, &clock_);
    throttle_ = Make({}, &clock_, &random_);
    gates_.breaker = breaker_.get();
    gates_.adaptive = throttle_.get();
  }

  // One call of one attempt that ends with `code`; `reached`: the server
  // answered. Returns why it was refused before sending (kNone: sent).
  GiveUpReason Call(grpc::StatusCode code, bool reached) {
    clock_.Advance(absl::Milliseconds(5));
    AttemptStart start =
        BeforeAttempt(1, false, absl::InfiniteDuration(), gates_);
    if (start.refused != GiveUpReason::kNone) return start.refused;
    AttemptOutcome outcome;
    outcome.code = code;
    outcome.not_sent = !reached;
    const StatusClass c = code == grpc::StatusCode::OK
                              ? StatusClass::kOk
                              : StatusClass::kRetriable;
    SettleAttempt(gates_, std::nullopt, c, outcome);
    RecordAttemptEnd(gates_, start.admission, c, outcome, false);
    return GiveUpReason::kNone;
  }

  FakeClock clock_;
  SeededRandom random_;
  std::shared_ptr<CircuitBreaker> breaker_;
  std::shared_ptr<AdaptiveThrottle> throttle_;
  DestinationGates gates_;
};

TEST_F(DownOrOverloadedTest, AnOverloadedServerIsThrottledNotBrokenOff) {
  // 200 calls a second to a server that accepts 50 a second and rejects the
  // rest as overloaded, for a minute.
  int refused = 0, sent = 0, accepted = 0, late_calls = 0, late_refused = 0;
  int accepted_this_second = 0;
  absl::Time second = clock_.MonotonicNow();
  for (int i = 0; i < 200 * 60; ++i) {
    if (clock_.MonotonicNow() - second >= absl::Seconds(1)) {
      second = clock_.MonotonicNow();
      accepted_this_second = 0;
    }
    const bool accept = accepted_this_second < 50;
    const GiveUpReason r = Call(
        accept ? grpc::StatusCode::OK : grpc::StatusCode::RESOURCE_EXHAUSTED,
        /*reached=*/true);
    ASSERT_NE(r, GiveUpReason::kBreakerOpen) << "call " << i;
    const bool late = i >= 200 * 50;  // the last 10 s
    late_calls += late ? 1 : 0;
    if (r == GiveUpReason::kThrottled) {
      ++refused;
      late_refused += late ? 1 : 0;
    } else {
      ++sent;
      if (accept) {
        ++accepted;
        ++accepted_this_second;
      }
    }
  }
  EXPECT_EQ(breaker_->state(), BreakerState::kClosed);
  // K = 2: about twice what the server accepts is still sent (100 of 200 a
  // second), so about half the calls are refused at home.
  const double late_share = static_cast<double>(late_refused) / late_calls;
  EXPECT_GT(late_share, 0.35);
  EXPECT_LT(late_share, 0.65);
  EXPECT_GT(sent, 2 * accepted * 0.8);
}

TEST_F(DownOrOverloadedTest, ADownServerIsBrokenOffNotThrottled) {
  // Connections refused: no answer, so the throttle counts nothing.
  int breaker_refusals = 0;
  for (int i = 0; i < 100; ++i) {
    const GiveUpReason r = Call(grpc::StatusCode::UNAVAILABLE,
                                /*reached=*/i < 25);
    ASSERT_NE(r, GiveUpReason::kThrottled) << "call " << i;
    if (r == GiveUpReason::kBreakerOpen) ++breaker_refusals;
  }
  EXPECT_NE(breaker_->state(), BreakerState::kClosed);
  EXPECT_GT(breaker_refusals, 50);
  EXPECT_TRUE(throttle_->Settled());
  EXPECT_EQ(throttle_->Snapshot().accepts, throttle_->Snapshot().requests);
}

}  // namespace
}  // namespace rpcguard
