// Copyright rpcguard authors.
//
// The circuit breaker's state machine under a fake clock: every legal
// transition, every illegal one refused, open-time growth and reset, probe
// limits, window expiry, manual control, and what listeners see.

#include "rpcguard/destination/breaker.h"

#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"
#include "rpcguard/testing/fake_clock.h"
#include "tests/testing/breaker_test_peer.h"

namespace rpcguard {

// For readable gtest failures.
void PrintTo(BreakerState state, std::ostream* os) {
  *os << BreakerStateName(state);
}

namespace {

using ::rpcguard::internal::BreakerTestPeer;
using ::rpcguard::internal::IsLegalTransition;
using ::rpcguard::testing::FakeClock;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr BreakerState kClosed = BreakerState::kClosed;
constexpr BreakerState kOpen = BreakerState::kOpen;
constexpr BreakerState kHalfOpen = BreakerState::kHalfOpen;
constexpr BreakerState kForcedOpen = BreakerState::kForcedOpen;
constexpr BreakerState kDisabled = BreakerState::kDisabled;
constexpr BreakerState kAllStates[] = {kClosed, kOpen, kHalfOpen, kForcedOpen,
                                       kDisabled};

constexpr AttemptResult kSuccess = AttemptResult::kSuccess;
constexpr AttemptResult kFailure = AttemptResult::kFailure;
constexpr AttemptResult kIgnored = AttemptResult::kIgnored;

constexpr char kKey[] = "dns:///db:443";

// "closed->open" for compact sequence assertions.
std::string Edge(const BreakerTransition& t) {
  return absl::StrCat(BreakerStateName(t.from), "->", BreakerStateName(t.to));
}

class BreakerTest : public ::testing::Test {
 protected:
  std::shared_ptr<CircuitBreaker> Make(const BreakerOptions& options = {}) {
    absl::StatusOr<std::shared_ptr<CircuitBreaker>> breaker =
        CircuitBreaker::Create(
            kKey, options, &clock_,
            [this](const BreakerTransition& t) { events_.push_back(t); });
    EXPECT_TRUE(breaker.ok()) << breaker.status();
    return *breaker;
  }

  // Admits and records `n` attempts ending in `result`.
  static void RecordN(CircuitBreaker& breaker, int n, AttemptResult result) {
    for (int i = 0; i < n; ++i) {
      const Admission a = breaker.Admit();
      ASSERT_TRUE(a.allowed()) << i;
      breaker.Record(a, result);
    }
  }

  // CLOSED -> OPEN with default options: 20 failures.
  static void Trip(CircuitBreaker& breaker) {
    RecordN(breaker, 20, kFailure);
    ASSERT_EQ(breaker.state(), kOpen);
  }

  // OPEN -> HALF_OPEN: waits out the open time; returns the first probe.
  Admission WaitForProbe(CircuitBreaker& breaker) {
    clock_.Advance(breaker.Snapshot().open_until - clock_.MonotonicNow());
    const Admission probe = breaker.Admit();
    EXPECT_TRUE(probe.allowed());
    EXPECT_TRUE(probe.probe());
    EXPECT_EQ(breaker.state(), kHalfOpen);
    return probe;
  }

  // HALF_OPEN -> CLOSED with default options: the given probe and two more
  // succeed.
  static void CloseWith(CircuitBreaker& breaker, const Admission& probe) {
    breaker.Record(probe, kSuccess);
    RecordN(breaker, 2, kSuccess);
    ASSERT_EQ(breaker.state(), kClosed);
  }

  std::vector<std::string> Edges() const {
    std::vector<std::string> out;
    for (const BreakerTransition& t : events_) out.push_back(Edge(t));
    return out;
  }

  FakeClock clock_;
  std::vector<BreakerTransition> events_;
};

// ---------------------------------------------------------------------------
// Names, classification, options

// One list (RPCGUARD_BREAKER_STATES): every state's name reads back as
// that state, and nothing else does.
TEST(BreakerNamesTest, EveryStateNameParsesBack) {
  for (int i = 0; i < kNumBreakerStates; ++i) {
    const auto state = static_cast<BreakerState>(i);
    EXPECT_EQ(ParseBreakerState(BreakerStateName(state)), state) << i;
  }
  EXPECT_EQ(kNumBreakerStates, 5);
  EXPECT_EQ(ParseBreakerState("unknown"), std::nullopt);
  EXPECT_EQ(ParseBreakerState("Open"), std::nullopt);
  EXPECT_EQ(ParseBreakerState(""), std::nullopt);
}

TEST(BreakerNamesTest, StateAndResultNames) {
  EXPECT_EQ(BreakerStateName(kClosed), "closed");
  EXPECT_EQ(BreakerStateName(kOpen), "open");
  EXPECT_EQ(BreakerStateName(kHalfOpen), "half_open");
  EXPECT_EQ(BreakerStateName(kForcedOpen), "forced_open");
  EXPECT_EQ(BreakerStateName(kDisabled), "disabled");
  EXPECT_EQ(AttemptResultName(kSuccess), "success");
  EXPECT_EQ(AttemptResultName(kFailure), "failure");
  EXPECT_EQ(AttemptResultName(kIgnored), "ignored");
}

TEST(AttemptResultForTest, RetriableFailsServerAnswersSucceedCallerIgnored) {
  const Classifier classifier;
  auto result = [&](AttemptOutcome o) {
    return AttemptResultFor(classifier.Classify(o), o);
  };
  EXPECT_EQ(result({grpc::StatusCode::OK}), kSuccess);
  EXPECT_EQ(result({grpc::StatusCode::UNAVAILABLE}), kFailure);
  // A server shedding load is up: overload is the adaptive throttle's
  // evidence, not the breaker's.
  EXPECT_EQ(result({grpc::StatusCode::RESOURCE_EXHAUSTED}), kIgnored);
  EXPECT_EQ(result({grpc::StatusCode::ABORTED}), kFailure);
  // rpcguard's own per-attempt timeout: the server did not answer in time.
  EXPECT_EQ(result({grpc::StatusCode::DEADLINE_EXCEEDED,
                    /*per_attempt_timeout_expired=*/true}),
            kFailure);
  // Fatal and auth: the server is up and answering.
  EXPECT_EQ(result({grpc::StatusCode::INVALID_ARGUMENT}), kSuccess);
  EXPECT_EQ(result({grpc::StatusCode::NOT_FOUND}), kSuccess);
  EXPECT_EQ(result({grpc::StatusCode::UNAUTHENTICATED}), kSuccess);
  EXPECT_EQ(result({grpc::StatusCode::PERMISSION_DENIED}), kSuccess);
  // The caller's own cancel or deadline, whatever the code.
  EXPECT_EQ(result({grpc::StatusCode::DEADLINE_EXCEEDED, false,
                    /*caller_deadline_expired=*/true}),
            kIgnored);
  EXPECT_EQ(result({grpc::StatusCode::CANCELLED, false, false,
                    /*caller_cancelled=*/true}),
            kIgnored);
  EXPECT_EQ(result({grpc::StatusCode::UNAVAILABLE, false, false,
                    /*caller_cancelled=*/true}),
            kIgnored);
}

TEST(BreakerOptionsTest, DefaultsAreValid) {
  const BreakerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.window, absl::Seconds(10));
  EXPECT_EQ(o.buckets, 10);
  EXPECT_EQ(o.failure_ratio, 0.5);
  EXPECT_EQ(o.min_attempts, 20);
  EXPECT_EQ(o.open_time, absl::Seconds(1));
  EXPECT_EQ(o.max_open_time, absl::Seconds(30));
  EXPECT_EQ(o.healthy_period, absl::Seconds(60));
  EXPECT_EQ(o.half_open_probes, 3);
  EXPECT_EQ(o.half_open_successes, 3);
  EXPECT_EQ(o.probe_timeout, absl::Seconds(10));
}

TEST(BreakerOptionsTest, EachBadFieldIsNamedExactly) {
  struct Case {
    void (*mutate)(BreakerOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](BreakerOptions& o) { o.window = absl::ZeroDuration(); },
       "circuitBreaker.window: must be greater than 0"},
      {[](BreakerOptions& o) { o.window = absl::InfiniteDuration(); },
       "circuitBreaker.window: must be finite"},
      {[](BreakerOptions& o) { o.buckets = 0; },
       "circuitBreaker.buckets: must be in [1, 1000]"},
      {[](BreakerOptions& o) { o.buckets = 1001; },
       "circuitBreaker.buckets: must be in [1, 1000]"},
      {[](BreakerOptions& o) { o.window = absl::Milliseconds(5); },
       "circuitBreaker.window: must be at least 1ms per bucket"},
      {[](BreakerOptions& o) { o.failure_ratio = 0; },
       "circuitBreaker.failureRatio: must be in (0, 1]"},
      {[](BreakerOptions& o) { o.failure_ratio = 1.01; },
       "circuitBreaker.failureRatio: must be in (0, 1]"},
      {[](BreakerOptions& o) { o.failure_ratio = std::nan(""); },
       "circuitBreaker.failureRatio: must be in (0, 1]"},
      {[](BreakerOptions& o) { o.min_attempts = 0; },
       "circuitBreaker.minAttempts: must be at least 1"},
      {[](BreakerOptions& o) { o.open_time = absl::ZeroDuration(); },
       "circuitBreaker.openTime: must be greater than 0"},
      {[](BreakerOptions& o) { o.max_open_time = absl::InfiniteDuration(); },
       "circuitBreaker.maxOpenTime: must be finite"},
      {[](BreakerOptions& o) { o.max_open_time = absl::Milliseconds(999); },
       "circuitBreaker.maxOpenTime: must be at least openTime"},
      {[](BreakerOptions& o) { o.healthy_period = -absl::Seconds(1); },
       "circuitBreaker.healthyPeriod: must not be negative"},
      {[](BreakerOptions& o) { o.half_open_probes = 0; },
       "circuitBreaker.halfOpenProbes: must be at least 1"},
      {[](BreakerOptions& o) { o.half_open_successes = 0; },
       "circuitBreaker.halfOpenSuccesses: must be at least 1"},
      {[](BreakerOptions& o) { o.probe_timeout = -absl::Seconds(1); },
       "circuitBreaker.probeTimeout: must be greater than 0"},
  };
  for (const Case& c : cases) {
    BreakerOptions o;
    c.mutate(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    // Create refuses them too.
    FakeClock clock;
    EXPECT_EQ(CircuitBreaker::Create(kKey, o, &clock).status(), s);
  }
}

TEST(BreakerOptionsTest, ZeroHealthyPeriodIsValid) {
  BreakerOptions o;
  o.healthy_period = absl::ZeroDuration();
  EXPECT_TRUE(o.Validate().ok());
}

// ---------------------------------------------------------------------------
// CLOSED: the window

TEST_F(BreakerTest, StartsClosedAndAdmits) {
  auto breaker = Make();
  EXPECT_EQ(breaker->state(), kClosed);
  const Admission a = breaker->Admit();
  EXPECT_TRUE(a.allowed());
  EXPECT_FALSE(a.probe());
  EXPECT_EQ(a.state(), kClosed);
  EXPECT_EQ(a.next_probe(), absl::InfinitePast());
  EXPECT_EQ(breaker->key(), kKey);
}

TEST_F(BreakerTest, SuccessesNeverTrip) {
  auto breaker = Make();
  RecordN(*breaker, 1000, kSuccess);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_TRUE(events_.empty());
}

TEST_F(BreakerTest, NeverTripsBelowMinAttempts) {
  auto breaker = Make();
  RecordN(*breaker, 19, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().window_failures, 19);
  RecordN(*breaker, 1, kFailure);
  EXPECT_EQ(breaker->state(), kOpen);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(Edge(events_[0]), "closed->open");
  EXPECT_EQ(events_[0].reason,
            "failure ratio 1.00 >= 0.50 over 20 attempts in 10s");
  EXPECT_EQ(events_[0].open_time, absl::Seconds(1));
  EXPECT_FALSE(events_[0].manual);
  EXPECT_EQ(events_[0].key, kKey);
  EXPECT_EQ(events_[0].time, clock_.MonotonicNow());
  EXPECT_EQ(events_[0].wall_time, clock_.WallNow());
}

TEST_F(BreakerTest, TripsWhenFailureRatioReachesThreshold) {
  auto breaker = Make();
  RecordN(*breaker, 10, kSuccess);
  RecordN(*breaker, 9, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
  RecordN(*breaker, 1, kFailure);  // 10 of 20: exactly 0.5
  EXPECT_EQ(breaker->state(), kOpen);
  EXPECT_EQ(events_[0].reason,
            "failure ratio 0.50 >= 0.50 over 20 attempts in 10s");
}

TEST_F(BreakerTest, StaysClosedBelowThreshold) {
  auto breaker = Make();
  RecordN(*breaker, 11, kSuccess);
  RecordN(*breaker, 10, kFailure);  // 10 of 21
  EXPECT_EQ(breaker->state(), kClosed);
  RecordN(*breaker, 1, kFailure);  // 11 of 22
  EXPECT_EQ(breaker->state(), kOpen);
}

TEST_F(BreakerTest, IgnoredResultsCountNowhere) {
  auto breaker = Make();
  RecordN(*breaker, 100, kIgnored);
  RecordN(*breaker, 19, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 19);
}

TEST_F(BreakerTest, OldFailuresAgeOutOfTheWindow) {
  auto breaker = Make();
  RecordN(*breaker, 15, kFailure);
  clock_.Advance(absl::Seconds(10));  // the whole window later
  RecordN(*breaker, 5, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 5);
}

TEST_F(BreakerTest, FailuresInsideTheWindowAddUp) {
  auto breaker = Make();
  RecordN(*breaker, 15, kFailure);
  clock_.Advance(absl::Seconds(9));  // still inside
  RecordN(*breaker, 4, kFailure);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 19);
  RecordN(*breaker, 1, kFailure);
  EXPECT_EQ(breaker->state(), kOpen);
}

TEST_F(BreakerTest, WindowAgesOutOneBucketAtATime) {
  auto breaker = Make();
  RecordN(*breaker, 10, kFailure);  // bucket 0
  clock_.Advance(absl::Seconds(5));
  RecordN(*breaker, 5, kSuccess);  // bucket 5
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(breaker->Snapshot().window_attempts, 15);
  clock_.Advance(absl::Seconds(1));  // bucket 0 leaves
  EXPECT_EQ(breaker->Snapshot().window_attempts, 5);
  EXPECT_EQ(breaker->Snapshot().window_failures, 0);
}

// ---------------------------------------------------------------------------
// OPEN and HALF_OPEN

// Open time runs on the monotonic clock: a wall-clock step (NTP, a resumed
// VM) neither keeps an open breaker open for the step's length nor ends its
// open time early; only the transitions' wall timestamps move.
TEST_F(BreakerTest, AWallClockStepNeitherLengthensNorShortensTheOpenTime) {
  for (absl::Duration step : {absl::Hours(-1), absl::Hours(1)}) {
    events_.clear();
    auto breaker = Make();
    Trip(*breaker);
    const absl::Time tripped = clock_.MonotonicNow();
    clock_.StepWall(step);
    Admission a = breaker->Admit();
    EXPECT_FALSE(a.allowed()) << step;
    EXPECT_EQ(a.next_probe(), tripped + absl::Seconds(1)) << step;
    EXPECT_EQ(breaker->RefusalMessage(a),
              "circuit breaker \"dns:///db:443\" is open; next probe in 1s")
        << step;
    clock_.Advance(absl::Milliseconds(999));
    EXPECT_FALSE(breaker->Admit().allowed()) << step;
    clock_.Advance(absl::Milliseconds(1));
    const Admission probe = breaker->Admit();
    EXPECT_TRUE(probe.allowed()) << step;
    EXPECT_TRUE(probe.probe()) << step;
    ASSERT_EQ(events_.size(), 2u) << step;
    EXPECT_EQ(events_[1].time - events_[0].time, absl::Seconds(1)) << step;
    EXPECT_EQ(events_[1].wall_time - events_[0].wall_time,
              absl::Seconds(1) + step)
        << step;
  }
}

TEST_F(BreakerTest, OpenRefusesUntilTheOpenTimeHasPassed) {
  auto breaker = Make();
  Trip(*breaker);
  const absl::Time tripped = clock_.MonotonicNow();
  Admission a = breaker->Admit();
  EXPECT_FALSE(a.allowed());
  EXPECT_EQ(a.state(), kOpen);
  EXPECT_EQ(a.next_probe(), tripped + absl::Seconds(1));
  EXPECT_EQ(breaker->RefusalMessage(a),
            "circuit breaker \"dns:///db:443\" is open; next probe in 1s");

  clock_.Advance(absl::Milliseconds(150));
  a = breaker->Admit();
  EXPECT_FALSE(a.allowed());
  EXPECT_EQ(breaker->RefusalMessage(a),
            "circuit breaker \"dns:///db:443\" is open; next probe in 850ms");
  clock_.Advance(absl::Milliseconds(849));
  EXPECT_FALSE(breaker->Admit().allowed());
  EXPECT_EQ(breaker->Snapshot().refused, 3u);

  clock_.Advance(absl::Milliseconds(1));
  a = breaker->Admit();
  EXPECT_TRUE(a.allowed());
  EXPECT_TRUE(a.probe());
  EXPECT_EQ(a.state(), kHalfOpen);
  EXPECT_EQ(breaker->state(), kHalfOpen);
  EXPECT_THAT(Edges(), ElementsAre("closed->open", "open->half_open"));
  EXPECT_EQ(events_[1].reason, "open time 1s elapsed");
}

TEST_F(BreakerTest, RecordingARefusalChangesNothing) {
  auto breaker = Make();
  Trip(*breaker);
  const Admission refused = breaker->Admit();
  ASSERT_FALSE(refused.allowed());
  breaker->Record(refused, kSuccess);
  breaker->Record(refused, kFailure);
  EXPECT_EQ(breaker->state(), kOpen);
  EXPECT_EQ(events_.size(), 1u);
}

TEST_F(BreakerTest, HalfOpenAdmitsAtMostNProbes) {
  auto breaker = Make();
  Trip(*breaker);
  const Admission p1 = WaitForProbe(*breaker);
  const Admission p2 = breaker->Admit();
  const Admission p3 = breaker->Admit();
  EXPECT_TRUE(p1.allowed() && p1.probe());
  EXPECT_TRUE(p2.allowed() && p2.probe());
  EXPECT_TRUE(p3.allowed() && p3.probe());
  EXPECT_EQ(breaker->Snapshot().probes_in_flight, 3);

  const Admission p4 = breaker->Admit();  // N + 1
  EXPECT_FALSE(p4.allowed());
  EXPECT_EQ(p4.state(), kHalfOpen);
  EXPECT_EQ(p4.next_probe(), clock_.MonotonicNow());
  EXPECT_EQ(breaker->RefusalMessage(p4),
            "circuit breaker \"dns:///db:443\" is half_open; 3 probes in "
            "flight");
  EXPECT_EQ(breaker->state(), kHalfOpen);
}

TEST_F(BreakerTest, IgnoredProbeGivesItsPermitBack) {
  auto breaker = Make();
  Trip(*breaker);
  const Admission p1 = WaitForProbe(*breaker);
  breaker->Admit();
  breaker->Admit();
  ASSERT_FALSE(breaker->Admit().allowed());

  breaker->Record(p1, kIgnored);  // e.g. the caller cancelled
  EXPECT_EQ(breaker->Snapshot().probes_in_flight, 2);
  EXPECT_EQ(breaker->Snapshot().probe_successes, 0);
  EXPECT_EQ(breaker->state(), kHalfOpen);
  const Admission p4 = breaker->Admit();
  EXPECT_TRUE(p4.allowed() && p4.probe());
  EXPECT_FALSE(breaker->Admit().allowed());
}

TEST_F(BreakerTest, SuccessfulProbeFreesItsPermit) {
  BreakerOptions o;
  o.half_open_probes = 1;
  o.half_open_successes = 3;  // more successes than concurrent probes
  auto breaker = Make(o);
  Trip(*breaker);
  Admission probe = WaitForProbe(*breaker);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(breaker->Admit().allowed());
    breaker->Record(probe, kSuccess);
    EXPECT_EQ(breaker->state(), kHalfOpen);
    probe = breaker->Admit();
    ASSERT_TRUE(probe.allowed());
  }
  breaker->Record(probe, kSuccess);
  EXPECT_EQ(breaker->state(), kClosed);
}

TEST_F(BreakerTest, EnoughProbeSuccessesClose) {
  auto breaker = Make();
  Trip(*breaker);
  const Admission p1 = WaitForProbe(*breaker);
  const Admission p2 = breaker->Admit();
  const Admission p3 = breaker->Admit();
  breaker->Record(p1, kSuccess);
  breaker->Record(p2, kSuccess);
  EXPECT_EQ(breaker->state(), kHalfOpen);
  EXPECT_EQ(breaker->Snapshot().probe_successes, 2);
  breaker->Record(p3, kSuccess);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_THAT(Edges(), ElementsAre("closed->open", "open->half_open",
                                   "half_open->closed"));
  EXPECT_EQ(events_[2].reason, "3 probe successes");

  // A fresh window: the failures that tripped it are forgotten.
  const BreakerSnapshot s = breaker->Snapshot();
  EXPECT_EQ(s.window_attempts, 0);
  EXPECT_EQ(s.probes_in_flight, 0);
  RecordN(*breaker, 19, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
}

TEST_F(BreakerTest, AProbeFailureReopens) {
  auto breaker = Make();
  Trip(*breaker);
  const Admission p1 = WaitForProbe(*breaker);
  const Admission p2 = breaker->Admit();
  breaker->Record(p1, kSuccess);
  breaker->Record(p2, kFailure);
  EXPECT_EQ(breaker->state(), kOpen);
  EXPECT_THAT(Edges(), ElementsAre("closed->open", "open->half_open",
                                   "half_open->open"));
  EXPECT_EQ(events_[2].reason, "probe failed");
  EXPECT_EQ(events_[2].open_time, absl::Seconds(2));
  EXPECT_EQ(breaker->Snapshot().open_until,
            clock_.MonotonicNow() + absl::Seconds(2));
}

TEST_F(BreakerTest, ResultsFromAnEarlierStatePeriodChangeNothing) {
  auto breaker = Make();
  // Admitted in CLOSED, finishing after the trip and the open time.
  const Admission late = breaker->Admit();
  Trip(*breaker);
  const Admission p1 = WaitForProbe(*breaker);
  breaker->Record(late, kSuccess);
  breaker->Record(late, kFailure);
  EXPECT_EQ(breaker->state(), kHalfOpen);
  EXPECT_EQ(breaker->Snapshot().probe_successes, 0);

  // A probe of a HALF_OPEN period that ended does not free a permit of the
  // next one, nor count as its success.
  const Admission p2 = breaker->Admit();
  breaker->Record(p1, kFailure);  // reopens
  const Admission p3 = WaitForProbe(*breaker);
  breaker->Record(p2, kSuccess);
  breaker->Record(p2, kIgnored);
  const BreakerSnapshot s = breaker->Snapshot();
  EXPECT_EQ(s.state, kHalfOpen);
  EXPECT_EQ(s.probes_in_flight, 1);
  EXPECT_EQ(s.probe_successes, 0);
  breaker->Record(p3, kSuccess);
  EXPECT_EQ(breaker->Snapshot().probe_successes, 1);
}

TEST_F(BreakerTest, ProbesThatNeverReportAreReclaimedAfterProbeTimeout) {
  auto breaker = Make();
  Trip(*breaker);
  WaitForProbe(*breaker);
  breaker->Admit();
  breaker->Admit();  // all three permits out, never recorded
  clock_.Advance(absl::Seconds(10) - absl::Nanoseconds(1));
  EXPECT_FALSE(breaker->Admit().allowed());
  EXPECT_EQ(breaker->state(), kHalfOpen);
  clock_.Advance(absl::Nanoseconds(1));
  const Admission a = breaker->Admit();
  EXPECT_FALSE(a.allowed());
  EXPECT_EQ(a.state(), kOpen);
  EXPECT_EQ(a.next_probe(), clock_.MonotonicNow() + absl::Seconds(2));
  EXPECT_EQ(breaker->state(), kOpen);
  EXPECT_EQ(events_.back().reason, "no probe reported within 10s");
  EXPECT_EQ(Edge(events_.back()), "half_open->open");
  // And a fresh HALF_OPEN period after that has all its permits.
  clock_.Advance(absl::Seconds(2));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(breaker->Admit().allowed());
}

// ---------------------------------------------------------------------------
// Open time

TEST_F(BreakerTest, OpenTimeDoublesOnRepeatedTripsUpToTheCap) {
  auto breaker = Make();
  Trip(*breaker);
  for (int i = 0; i < 6; ++i) {
    const Admission probe = WaitForProbe(*breaker);
    breaker->Record(probe, kFailure);
  }
  std::vector<absl::Duration> open_times;
  for (const BreakerTransition& t : events_) {
    if (t.to == kOpen) open_times.push_back(t.open_time);
  }
  EXPECT_THAT(open_times,
              ElementsAre(absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                          absl::Seconds(8), absl::Seconds(16),
                          absl::Seconds(30), absl::Seconds(30)));
  EXPECT_EQ(breaker->Snapshot().consecutive_trips, 7);
}

TEST_F(BreakerTest, TrippingAgainSoonAfterClosingKeepsGrowing) {
  auto breaker = Make();
  Trip(*breaker);
  CloseWith(*breaker, WaitForProbe(*breaker));
  clock_.Advance(absl::Seconds(59));  // less than healthyPeriod
  Trip(*breaker);
  EXPECT_EQ(events_.back().open_time, absl::Seconds(2));
}

TEST_F(BreakerTest, OpenTimeResetsAfterAHealthyPeriod) {
  auto breaker = Make();
  Trip(*breaker);
  breaker->Record(WaitForProbe(*breaker), kFailure);  // 2s
  CloseWith(*breaker, WaitForProbe(*breaker));
  clock_.Advance(absl::Seconds(60));  // healthyPeriod in CLOSED
  Trip(*breaker);
  EXPECT_EQ(events_.back().open_time, absl::Seconds(1));
  EXPECT_EQ(breaker->Snapshot().consecutive_trips, 1);
}

// ---------------------------------------------------------------------------
// Manual control

TEST_F(BreakerTest, ForceOpenRefusesEverythingUntilReset) {
  auto breaker = Make();
  breaker->ForceOpen();
  EXPECT_EQ(breaker->state(), kForcedOpen);
  const Admission a = breaker->Admit();
  EXPECT_FALSE(a.allowed());
  EXPECT_EQ(a.next_probe(), absl::InfiniteFuture());
  EXPECT_EQ(breaker->RefusalMessage(a),
            "circuit breaker \"dns:///db:443\" is forced_open until reset");
  clock_.Advance(absl::Hours(1));
  EXPECT_FALSE(breaker->Admit().allowed());
  breaker->ForceOpen();  // already: no transition
  breaker->Reset();
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_TRUE(breaker->Admit().allowed());
  EXPECT_THAT(Edges(),
              ElementsAre("closed->forced_open", "forced_open->closed"));
  EXPECT_TRUE(events_[0].manual);
  EXPECT_EQ(events_[0].reason, "ForceOpen()");
  EXPECT_EQ(events_[1].reason, "Reset()");
}

TEST_F(BreakerTest, DisableAdmitsEverythingAndCountsNothing) {
  auto breaker = Make();
  RecordN(*breaker, 19, kFailure);
  breaker->Disable();
  EXPECT_EQ(breaker->state(), kDisabled);
  RecordN(*breaker, 100, kFailure);
  EXPECT_EQ(breaker->state(), kDisabled);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 0);
  breaker->Reset();
  EXPECT_EQ(breaker->state(), kClosed);
  RecordN(*breaker, 19, kFailure);  // the 19 before Disable are gone
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_THAT(Edges(), ElementsAre("closed->disabled", "disabled->closed"));
}

TEST_F(BreakerTest, ResetClosesFromAnyStateAndForgetsTrips) {
  auto breaker = Make();
  Trip(*breaker);
  breaker->Record(WaitForProbe(*breaker), kFailure);  // open, 2s
  breaker->Reset();
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().consecutive_trips, 0);
  Trip(*breaker);
  EXPECT_EQ(events_.back().open_time, absl::Seconds(1));

  const Admission probe = WaitForProbe(*breaker);
  breaker->Reset();  // from HALF_OPEN
  EXPECT_EQ(breaker->state(), kClosed);
  breaker->Record(probe, kFailure);  // from the HALF_OPEN period: ignored
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 0);
}

TEST_F(BreakerTest, ResetInClosedClearsTheWindowWithoutATransition) {
  auto breaker = Make();
  const Admission before = breaker->Admit();
  RecordN(*breaker, 15, kFailure);
  breaker->Reset();
  EXPECT_TRUE(events_.empty());
  breaker->Record(before, kFailure);  // admitted before the reset: dropped
  RecordN(*breaker, 19, kFailure);
  EXPECT_EQ(breaker->state(), kClosed);
  EXPECT_EQ(breaker->Snapshot().window_attempts, 19);
}

// ---------------------------------------------------------------------------
// The state machine

TEST(BreakerTransitionTableTest, ExactlyTheDocumentedEdges) {
  for (BreakerState from : kAllStates) {
    for (BreakerState to : kAllStates) {
      const bool automatic = (from == kClosed && to == kOpen) ||
                             (from == kOpen && to == kHalfOpen) ||
                             (from == kHalfOpen && to == kOpen) ||
                             (from == kHalfOpen && to == kClosed);
      const bool manual =
          from != to && (to == kForcedOpen || to == kDisabled || to == kClosed);
      EXPECT_EQ(IsLegalTransition(from, to, /*manual=*/false), automatic)
          << BreakerStateName(from) << "->" << BreakerStateName(to);
      EXPECT_EQ(IsLegalTransition(from, to, /*manual=*/true), manual)
          << BreakerStateName(from) << "->" << BreakerStateName(to);
    }
  }
}

// Brings a fresh breaker into `state` through its public API.
void Enter(CircuitBreaker& breaker, FakeClock& clock, BreakerState state) {
  switch (state) {
    case kClosed:
      return;
    case kOpen:
    case kHalfOpen:
      for (int i = 0; i < 20; ++i) breaker.Record(breaker.Admit(), kFailure);
      if (state == kHalfOpen) {
        clock.Advance(absl::Seconds(1));
        breaker.Admit();
      }
      return;
    case kForcedOpen:
      breaker.ForceOpen();
      return;
    case kDisabled:
      breaker.Disable();
      return;
  }
}

TEST(BreakerIllegalTransitionTest, EveryIllegalEdgeIsRefused) {
  for (BreakerState from : kAllStates) {
    for (BreakerState to : kAllStates) {
      SCOPED_TRACE(
          absl::StrCat(BreakerStateName(from), "->", BreakerStateName(to)));
      FakeClock clock;
      int transitions = 0;
      auto breaker = *CircuitBreaker::Create(
          kKey, BreakerOptions{}, &clock,
          [&](const BreakerTransition&) { ++transitions; });
      Enter(*breaker, clock, from);
      ASSERT_EQ(breaker->state(), from);
      const int before = transitions;
      const absl::Status s = BreakerTestPeer::TryTransition(*breaker, from, to);
      if (IsLegalTransition(from, to, /*manual=*/false)) {
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(breaker->state(), to);
        EXPECT_EQ(transitions, before + 1);
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_EQ(breaker->state(), from);
        EXPECT_EQ(transitions, before);
      }
    }
  }
}

TEST_F(BreakerTest, TransitionsFromAStateTheBreakerIsNotInAreRefused) {
  auto breaker = Make();
  // OPEN -> HALF_OPEN is an edge, but the breaker is CLOSED.
  EXPECT_EQ(
      BreakerTestPeer::TryTransition(*breaker, kOpen, kHalfOpen).message(),
      "refused open -> half_open in state closed");
  EXPECT_EQ(
      BreakerTestPeer::TryTransition(*breaker, kClosed, kHalfOpen).message(),
      "refused closed -> half_open in state closed");
  Trip(*breaker);
  EXPECT_EQ(BreakerTestPeer::TryTransition(*breaker, kOpen, kClosed).message(),
            "refused open -> closed in state open");
  EXPECT_EQ(breaker->state(), kOpen);
  EXPECT_EQ(events_.size(), 1u);
}

TEST_F(BreakerTest, ListenerSeesEveryEdgeExactlyOnceInOrder) {
  auto breaker = Make();
  Trip(*breaker);                                     // closed->open
  breaker->Record(WaitForProbe(*breaker), kFailure);  // open->half_open->open
  CloseWith(*breaker, WaitForProbe(*breaker));        // ...->closed
  breaker->ForceOpen();                               // closed->forced_open
  breaker->Disable();                                 // forced_open->disabled
  breaker->ForceOpen();                               // disabled->forced_open
  breaker->Reset();                                   // forced_open->closed
  breaker->Disable();                                 // closed->disabled
  breaker->Reset();                                   // disabled->closed
  Trip(*breaker);                                     // closed->open
  breaker->ForceOpen();                               // open->forced_open
  breaker->Reset();
  Trip(*breaker);
  breaker->Disable();  // open->disabled
  breaker->Reset();
  Trip(*breaker);
  breaker->Reset();  // open->closed
  Trip(*breaker);
  WaitForProbe(*breaker);
  breaker->ForceOpen();  // half_open->forced_open
  breaker->Reset();
  Trip(*breaker);
  WaitForProbe(*breaker);
  breaker->Disable();  // half_open->disabled
  breaker->Reset();
  Trip(*breaker);
  WaitForProbe(*breaker);
  breaker->Reset();  // half_open->closed

  EXPECT_THAT(Edges(), ElementsAreArray<std::string>(
                           {"closed->open",          "open->half_open",
                            "half_open->open",       "open->half_open",
                            "half_open->closed",     "closed->forced_open",
                            "forced_open->disabled", "disabled->forced_open",
                            "forced_open->closed",   "closed->disabled",
                            "disabled->closed",      "closed->open",
                            "open->forced_open",     "forced_open->closed",
                            "closed->open",          "open->disabled",
                            "disabled->closed",      "closed->open",
                            "open->closed",          "closed->open",
                            "open->half_open",       "half_open->forced_open",
                            "forced_open->closed",   "closed->open",
                            "open->half_open",       "half_open->disabled",
                            "disabled->closed",      "closed->open",
                            "open->half_open",       "half_open->closed"}));
  for (size_t i = 0; i < events_.size(); ++i) {
    EXPECT_EQ(events_[i].sequence, i + 1);
    EXPECT_TRUE(
        IsLegalTransition(events_[i].from, events_[i].to, events_[i].manual))
        << i;
    if (i > 0) {
      EXPECT_EQ(events_[i].from, events_[i - 1].to) << i;
    }
  }
  EXPECT_EQ(breaker->Snapshot().transitions, events_.size());
}

TEST_F(BreakerTest, ListenerMayCallBackIntoTheBreaker) {
  std::vector<std::string> seen;
  std::shared_ptr<CircuitBreaker> breaker;
  // An operator's reflex: hold it open. The listener runs without the lock,
  // and the transition it causes is delivered after the current one.
  auto listener = [&](const BreakerTransition& t) {
    seen.push_back(Edge(t));
    if (t.to == kOpen) breaker->ForceOpen();
  };
  breaker = *CircuitBreaker::Create(kKey, BreakerOptions{}, &clock_, listener);
  RecordN(*breaker, 20, kFailure);
  EXPECT_THAT(seen, ElementsAre("closed->open", "open->forced_open"));
  EXPECT_EQ(breaker->state(), kForcedOpen);
}

// ---------------------------------------------------------------------------
// Registry

class RegistryTest : public ::testing::Test {
 protected:
  std::shared_ptr<BreakerRegistry> Make() {
    BreakerRegistry::Options options;
    options.clock = &clock_;
    absl::StatusOr<std::shared_ptr<BreakerRegistry>> r =
        BreakerRegistry::Create(options);
    EXPECT_TRUE(r.ok());
    return *r;
  }
  FakeClock clock_;
};

TEST_F(RegistryTest, OneBreakerPerKeySharedByEveryLookup) {
  auto registry = Make();
  auto a = registry->Get("dns:///a:443");
  auto b = registry->Get("dns:///b:443");
  EXPECT_NE(a, b);
  EXPECT_EQ(registry->Get("dns:///a:443"), a);
  EXPECT_EQ(a->key(), "dns:///a:443");
  // Tripped through one channel's pointer, open for every other.
  for (int i = 0; i < 20; ++i) a->Record(a->Admit(), kFailure);
  EXPECT_EQ(registry->Get("dns:///a:443")->state(), kOpen);
  EXPECT_EQ(b->state(), kClosed);
  auto breakers = registry->Breakers();
  ASSERT_EQ(breakers.size(), 2u);
  EXPECT_EQ(breakers[0].first, "dns:///a:443");
  EXPECT_EQ(breakers[0].second, a);
}

TEST_F(RegistryTest, TargetPlusServiceKeysAreSeparate) {
  auto registry = Make();
  EXPECT_NE(registry->Get("dns:///a:443/pkg.Svc"),
            registry->Get("dns:///a:443/pkg.Other"));
}

TEST_F(RegistryTest, PerKeyOptions) {
  auto registry = Make();
  BreakerOptions o;
  o.min_attempts = 5;
  absl::StatusOr<std::shared_ptr<CircuitBreaker>> b = registry->Get("k", o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->options(), o);
  EXPECT_EQ(registry->Get("k"), *b);
  EXPECT_EQ(*registry->Get("k", o), *b);  // same options: fine

  BreakerOptions other;
  EXPECT_EQ(registry->Get("k", other).status(),
            absl::FailedPreconditionError(
                "circuit breaker \"k\" already exists with other options"));
  o.failure_ratio = 2;
  EXPECT_EQ(registry->Get("new", o).status().message(),
            "circuitBreaker.failureRatio: must be in (0, 1]");
  // Registry defaults for keys without options.
  EXPECT_EQ(registry->Get("plain")->options(), BreakerOptions{});
}

TEST_F(RegistryTest, CreateValidatesItsDefaults) {
  BreakerRegistry::Options options;
  options.breaker.min_attempts = 0;
  EXPECT_EQ(BreakerRegistry::Create(options).status().message(),
            "circuitBreaker.minAttempts: must be at least 1");
  options = {};
  options.budget.ratio = -1;
  EXPECT_EQ(BreakerRegistry::Create(options).status().message(),
            "retryBudget.ratio: must be in [0, 1]");
}

TEST_F(RegistryTest, DefaultIsOneProcessWideRegistry) {
  auto a = BreakerRegistry::Default();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(BreakerRegistry::Default(), a);
  EXPECT_EQ(a->Get("registry_test_default_key"),
            BreakerRegistry::Default()->Get("registry_test_default_key"));
}

TEST_F(RegistryTest, ListenersSeeEveryBreakerAndCanBeRemoved) {
  auto registry = Make();
  auto early = registry->Get("early");
  std::vector<std::string> seen;
  const BreakerRegistry::ListenerId id =
      registry->AddTransitionListener([&](const BreakerTransition& t) {
        seen.push_back(absl::StrCat(t.key, ":", Edge(t)));
      });
  int second = 0;
  registry->AddTransitionListener([&](const BreakerTransition&) { ++second; });
  auto late = registry->Get("late");
  early->ForceOpen();
  late->Disable();
  EXPECT_THAT(
      seen, ElementsAre("early:closed->forced_open", "late:closed->disabled"));
  registry->RemoveTransitionListener(id);
  early->Reset();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(second, 3);
}

TEST_F(RegistryTest, BudgetsPerKey) {
  auto registry = Make();
  auto a = registry->GetBudget("a");
  EXPECT_EQ(registry->GetBudget("a"), a);
  EXPECT_NE(registry->GetBudget("b"), a);
  EXPECT_EQ(a->options(), RetryBudgetOptions{});
  RetryBudgetOptions o;
  o.ratio = 0.1;
  ASSERT_TRUE(registry->GetBudget("c", o).ok());
  EXPECT_EQ(registry->GetBudget("c"), *registry->GetBudget("c", o));
  EXPECT_EQ(registry->GetBudget("a", o).status(),
            absl::FailedPreconditionError(
                "retry budget \"a\" already exists with other options"));
  // A breaker and a budget under one key are independent objects.
  registry->Get("a")->ForceOpen();
  EXPECT_TRUE(a->TryAcquireRetry());
}

TEST_F(RegistryTest, ThrottleIsReplacedByANewConfigKeepingItsFill) {
  auto registry = Make();
  RetryThrottleOptions o{10, 0.1};
  auto t = *registry->GetThrottle("a", o);
  EXPECT_EQ(*registry->GetThrottle("a", o), t);
  for (int i = 0; i < 4; ++i) t->RecordFailure();  // 6 of 10
  auto bigger = *registry->GetThrottle("a", RetryThrottleOptions{100, 1});
  EXPECT_NE(bigger, t);
  EXPECT_EQ(bigger->milli_tokens(), 60000);  // 60 of 100
  EXPECT_EQ(t->milli_tokens(), 6000);        // holders of the old one
  EXPECT_EQ(
      registry->GetThrottle("a", RetryThrottleOptions{0, 1}).status().message(),
      "retryThrottling.maxTokens: must be greater than 0");
}

}  // namespace
}  // namespace rpcguard
