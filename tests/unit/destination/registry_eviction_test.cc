// Copyright rpcguard authors.
//
// The breaker registry forgets what nobody uses any more (issue 13, "many
// destinations over time"), under a fake clock: what is evicted, by Sweep()
// and by the sweeps of later lookups, and what is kept because it still
// matters (a breaker or budget in use, an OPEN, HALF_OPEN or operator-set
// breaker, counts still in a window). Also the per-key stats and the
// transition dedup of the interceptor's factory state, which must follow a
// key evicted and created again.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/channel.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/observability/stats.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::FakeClock;
using ::testing::ElementsAre;

constexpr AttemptResult kFailure = AttemptResult::kFailure;
constexpr AttemptResult kSuccess = AttemptResult::kSuccess;

class RegistryEvictionTest : public ::testing::Test {
 protected:
  RegistryEvictionTest() {
    BreakerRegistry::Options options;
    options.clock = &clock_;
    registry_ = *BreakerRegistry::Create(options);
  }

  // Trips `key`'s breaker with the default options (20 failures).
  void Trip(absl::string_view key) {
    auto b = registry_->Get(key);
    for (int i = 0; i < 20; ++i) b->Record(b->Admit(), kFailure);
    ASSERT_EQ(b->state(), BreakerState::kOpen);
  }

  // Looks `key` up as a channel does (breaker and budget), and drops both.
  void Touch(absl::string_view key) {
    registry_->Get(key);
    registry_->GetBudget(key);
  }

  std::vector<std::string> Keys() {
    std::vector<std::string> keys;
    for (const auto& [key, breaker] : registry_->Breakers()) {
      keys.push_back(key);
    }
    return keys;
  }

  FakeClock clock_;
  std::shared_ptr<BreakerRegistry> registry_;
};

TEST_F(RegistryEvictionTest, UnusedClosedIdleEntryIsEvictedBySweep) {
  Touch("a");
  ASSERT_TRUE(registry_->GetThrottle("a", RetryThrottleOptions{}).ok());
  EXPECT_EQ(registry_->size(), 1u);
  EXPECT_EQ(registry_->Sweep(), 1u);
  EXPECT_EQ(registry_->size(), 0u);
  EXPECT_EQ(registry_->Sweep(), 0u);
}

TEST_F(RegistryEvictionTest, NewKeysSweepTheirShardWithoutSweepCalls) {
  // 16 shards of at most 32 forgotten entries each, whatever the number of
  // keys seen.
  for (int i = 0; i < 20000; ++i) Touch(absl::StrCat("dns:///host-", i));
  EXPECT_LE(registry_->size(), 16u * 32u);
  EXPECT_GT(registry_->size(), 0u);
}

TEST_F(RegistryEvictionTest, EntryInUseIsKept) {
  auto breaker = registry_->Get("breaker-held");
  Touch("breaker-held");
  auto budget = registry_->GetBudget("budget-held");
  Touch("budget-held");
  auto throttle = *registry_->GetThrottle("throttle-held", {});
  Touch("throttle-held");
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(registry_->Sweep(), 0u);
  EXPECT_EQ(registry_->size(), 3u);
  // Even when new keys sweep the shards over and over.
  for (int i = 0; i < 2000; ++i) Touch(absl::StrCat("other-", i));
  EXPECT_EQ(registry_->Get("breaker-held"), breaker);
  EXPECT_EQ(registry_->GetBudget("budget-held"), budget);
  EXPECT_EQ(*registry_->GetThrottle("throttle-held", {}), throttle);

  breaker.reset();
  budget.reset();
  throttle.reset();
  registry_->Sweep();
  EXPECT_EQ(registry_->size(), 0u);
}

TEST_F(RegistryEvictionTest, InUseEntryStillRefusesOtherOptions) {
  auto held = registry_->Get("k");
  BreakerOptions other;
  other.min_attempts = 5;
  registry_->Sweep();
  EXPECT_EQ(registry_->Get("k", other).status(),
            absl::FailedPreconditionError(
                "circuit breaker \"k\" already exists with other options"));
  // Once nobody uses it, it is forgotten; the next user's options win.
  held.reset();
  registry_->Sweep();
  absl::StatusOr<std::shared_ptr<CircuitBreaker>> b =
      registry_->Get("k", other);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->options(), other);
}

TEST_F(RegistryEvictionTest,
       OpenAndHalfOpenAreKeptUnusedThenEvictedOnceClosed) {
  Trip("open");
  Trip("half");
  {
    auto b = registry_->Get("half");
    clock_.Advance(absl::Seconds(1));  // the open time
    const Admission probe = b->Admit();
    ASSERT_EQ(b->state(), BreakerState::kHalfOpen);
    b->Record(probe, AttemptResult::kIgnored);
  }
  EXPECT_EQ(registry_->Sweep(), 0u);
  for (int i = 0; i < 2000; ++i) Touch(absl::StrCat("other-", i));
  registry_->Sweep();
  EXPECT_THAT(Keys(), ElementsAre("half", "open"));
  // A new channel to the destination sees it still open (or probing).
  EXPECT_EQ(registry_->Get("open")->state(), BreakerState::kOpen);

  // Closed by probes, with nothing in its new window: forgotten.
  {
    auto b = registry_->Get("half");
    for (int i = 0; i < 3; ++i) b->Record(b->Admit(), kSuccess);
    ASSERT_EQ(b->state(), BreakerState::kClosed);
  }
  EXPECT_EQ(registry_->Sweep(), 1u);
  EXPECT_THAT(Keys(), ElementsAre("open"));
}

TEST_F(RegistryEvictionTest,
       OpenUnusedForMaxOpenTimePlusHealthyPeriodIsEvicted) {
  Trip("open");
  // Defaults: maxOpenTime 30 s + healthyPeriod 60 s.
  clock_.Advance(absl::Seconds(89));
  EXPECT_EQ(registry_->Sweep(), 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(registry_->Sweep(), 1u);
  // It starts afresh.
  EXPECT_EQ(registry_->Get("open")->state(), BreakerState::kClosed);
}

TEST_F(RegistryEvictionTest, ForcedOpenAndDisabledAreKeptUntilReset) {
  registry_->Get("forced")->ForceOpen();
  registry_->Get("disabled")->Disable();
  clock_.Advance(absl::Hours(24));
  EXPECT_EQ(registry_->Sweep(), 0u);
  EXPECT_THAT(Keys(), ElementsAre("disabled", "forced"));
  registry_->Get("forced")->Reset();
  registry_->Get("disabled")->Reset();
  EXPECT_EQ(registry_->Sweep(), 2u);
}

TEST_F(RegistryEvictionTest, WindowActivityKeepsAnEntryUntilItAgesOut) {
  {
    auto b = registry_->Get("breaker-counted");
    b->Record(b->Admit(), kSuccess);
    registry_->GetBudget("budget-counted")->RecordFirstAttempt();
  }
  EXPECT_EQ(registry_->Sweep(), 0u);
  clock_.Advance(absl::Seconds(9));
  EXPECT_EQ(registry_->Sweep(), 0u);
  clock_.Advance(absl::Seconds(1));  // both windows are 10 s
  EXPECT_EQ(registry_->Sweep(), 2u);
}

TEST_F(RegistryEvictionTest, ListenersSeeBreakersCreatedAfterAnEviction) {
  std::vector<std::string> seen;
  registry_->AddTransitionListener([&](const BreakerTransition& t) {
    seen.push_back(
        absl::StrCat(t.key, ":", t.sequence, ":", BreakerStateName(t.to)));
  });
  registry_->Get("k")->ForceOpen();
  registry_->Get("k")->Reset();
  ASSERT_EQ(registry_->Sweep(), 1u);
  registry_->Get("k")->ForceOpen();
  EXPECT_THAT(seen,
              ElementsAre("k:1:forced_open", "k:2:closed", "k:1:forced_open"));
}

TEST_F(RegistryEvictionTest, BreakersListsOnlyLiveEntries) {
  auto kept = registry_->Get("kept");
  Touch("gone");
  EXPECT_THAT(Keys(), ElementsAre("gone", "kept"));
  registry_->Sweep();
  EXPECT_THAT(Keys(), ElementsAre("kept"));
}

// The interceptor's factory state dedups transitions that several factories
// hear; a key evicted and created again restarts its sequence at 1, and its
// transitions must still be counted and traced.
TEST_F(RegistryEvictionTest, TransitionsOfARecreatedBreakerReachStats) {
  auto stats = std::make_shared<Stats>();
  auto factory = [&] {
    Options options;
    options.breaker_registry = registry_;
    options.stats = stats;
    options.trace_verbosity = TraceVerbosity::kOff;
    options.destination = "dns:///recreated:443";
    auto state = std::make_shared<internal::FactoryState>(std::move(options));
    state->Init(state);
    // Resolves the method, looking the breaker and budget up.
    state->ForMethod("/pkg.Svc/M", nullptr, nullptr);
    return state;
  };
  for (int round = 1; round <= 2; ++round) {
    auto state = factory();
    auto second_channel = factory();  // hears it too; counted once
    auto b = registry_->Get("dns:///recreated:443");
    b->ForceOpen();
    b->Reset();
    b.reset();
    state.reset();
    second_channel.reset();
    EXPECT_EQ(registry_->Sweep(), 1u) << "round " << round;
    const StatsSnapshot snap = stats->Snapshot();
    const BreakerStatsSnapshot* counts =
        snap.FindBreaker("dns:///recreated:443");
    ASSERT_NE(counts, nullptr);
    EXPECT_EQ(counts->transitions_to.at("forced_open"),
              static_cast<uint64_t>(round));
    EXPECT_EQ(counts->transitions_to.at("closed"),
              static_cast<uint64_t>(round));
  }
}

// Each factory listens to its own breaker keys only (issue 24): a
// transition of one destination reaches that destination's factories, and a
// factory's subscriptions go with it.
TEST_F(RegistryEvictionTest, FactoriesHearOnlyTheirOwnDestinations) {
  auto factory = [&](const std::string& destination, int* written) {
    Options options;
    options.breaker_registry = registry_;
    options.stats = std::make_shared<Stats>();
    options.trace_verbosity = TraceVerbosity::kAll;
    options.trace_sink =
        std::make_shared<CallbackSink>([written](const TraceEvent& e) {
          if (e.kind == TraceEvent::Kind::kBreakerTransition) ++*written;
        });
    options.destination = destination;
    auto state = std::make_shared<internal::FactoryState>(std::move(options));
    state->Init(state);
    state->ForMethod("/pkg.Svc/M", nullptr, nullptr);
    return state;
  };
  int a_written = 0;
  int b_written = 0;
  auto a = factory("dns:///a:443", &a_written);
  auto b = factory("dns:///b:443", &b_written);
  EXPECT_EQ(registry_->listener_keys(), 2u);
  registry_->Get("dns:///a:443")->ForceOpen();
  EXPECT_EQ(a_written, 1);
  EXPECT_EQ(b_written, 0);
  // A destination that merely starts with another is not it; a per-service
  // key of it is.
  registry_->Get("dns:///a:4430")->ForceOpen();
  EXPECT_EQ(a_written, 1);
  registry_->Get("dns:///a:443/pkg.Svc")->ForceOpen();
  EXPECT_EQ(a_written, 2);
  EXPECT_EQ(b_written, 0);
  a.reset();
  EXPECT_EQ(registry_->listener_keys(), 1u);
  registry_->Get("dns:///a:443")->Reset();
  EXPECT_EQ(a_written, 2);
  b.reset();
  EXPECT_EQ(registry_->listener_keys(), 0u);
}

TEST(StatsBreakerKeysTest, KeysBackToClosedAreDroppedPastTheThreshold) {
  Stats stats;
  auto transition = [&](const std::string& key, const std::string& to) {
    TraceEvent e;
    e.kind = TraceEvent::Kind::kBreakerTransition;
    e.breaker_key = key;
    e.to_state = to;
    stats.Record(e);
  };
  transition("still-open", "open");
  for (int i = 0; i < 20000; ++i) {
    const std::string key = absl::StrCat("dns:///host-", i);
    transition(key, "open");
    transition(key, "half_open");
    transition(key, "closed");
  }
  EXPECT_LE(stats.breaker_keys(), Stats::kMinBreakersSweepAt);
  const StatsSnapshot snap = stats.Snapshot();
  ASSERT_NE(snap.FindBreaker("still-open"), nullptr);
  EXPECT_EQ(snap.FindBreaker("still-open")->transitions_to.at("open"), 1u);
  // The latest keys are all there, with every count.
  const BreakerStatsSnapshot* last = snap.FindBreaker("dns:///host-19999");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->transitions_to.size(), 3u);
}

}  // namespace
}  // namespace rpcguard
