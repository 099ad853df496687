// Copyright rpcguard authors.
//
// Many threads on one breaker, through four "channels" (four lookups of one
// key in one registry), with outcomes that follow a server going up and down
// and a listener recording every transition. Asserts invariants that must
// hold whatever the interleaving: the transitions form a legal sequence,
// delivered exactly once and in order; counts add up; probe limits hold.
//
// Meant to run under ThreadSanitizer (`--config=tsan`): it creates no gRPC
// objects (Debian's gRPC is not instrumented), and its clock is atomics
// rather than FakeClock's lock, so that the clock adds no synchronization
// between threads that could hide a race in the breaker.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/registry.h"

namespace rpcguard {
namespace {

using ::rpcguard::internal::IsLegalTransition;

constexpr char kKey[] = "dns:///flaky:443";
constexpr int kThreads = 8;
constexpr int kChannels = 4;
constexpr int kCallsPerThread = 25000;

// Advanced by every worker, read by the breaker: atomics only.
class AtomicClock final : public Clock {
 public:
  absl::Time MonotonicNow() override {
    return absl::FromUnixNanos(ns_.load(std::memory_order_relaxed));
  }
  absl::Time WallNow() override { return MonotonicNow(); }
  void Advance(absl::Duration d) {
    ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> ns_{absl::ToUnixNanos(absl::UnixEpoch()) +
                           absl::ToInt64Nanoseconds(absl::Hours(1))};
};

// Small numbers so that a short run goes through many cycles.
BreakerOptions FastOptions() {
  BreakerOptions o;
  o.window = absl::Milliseconds(100);
  o.buckets = 10;
  o.failure_ratio = 0.5;
  o.min_attempts = 10;
  o.open_time = absl::Milliseconds(2);
  o.max_open_time = absl::Milliseconds(16);
  o.healthy_period = absl::Milliseconds(50);
  o.half_open_probes = 3;
  o.half_open_successes = 2;
  o.probe_timeout = absl::Milliseconds(5);
  return o;
}

// Records transitions in arrival order and checks, as they arrive, that
// each comes exactly once and in sequence.
class Recorder {
 public:
  void On(const BreakerTransition& t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (t.sequence != events_.size() + 1) out_of_order_ = true;
    events_.push_back(t);
  }
  std::vector<BreakerTransition> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  bool out_of_order() {
    std::lock_guard<std::mutex> lock(mu_);
    return out_of_order_;
  }

 private:
  std::mutex mu_;
  std::vector<BreakerTransition> events_;
  bool out_of_order_ = false;
};

struct WorkerCounts {
  int64_t calls = 0;
  int64_t admitted = 0;
  int64_t refused = 0;
  int64_t probes = 0;
};

// Checks the transition sequence; returns how often each edge occurred.
std::map<std::string, int> CheckSequence(
    const std::vector<BreakerTransition>& events, BreakerState final_state,
    bool allow_manual) {
  std::map<std::string, int> edges;
  BreakerState state = BreakerState::kClosed;
  for (size_t i = 0; i < events.size(); ++i) {
    const BreakerTransition& t = events[i];
    EXPECT_EQ(t.sequence, i + 1);
    EXPECT_EQ(t.key, kKey);
    EXPECT_EQ(t.from, state) << "transition " << i;
    EXPECT_TRUE(IsLegalTransition(t.from, t.to, t.manual))
        << BreakerStateName(t.from) << "->" << BreakerStateName(t.to);
    if (!allow_manual) EXPECT_FALSE(t.manual) << i;
    ++edges[absl::StrCat(BreakerStateName(t.from), "->",
                         BreakerStateName(t.to))];
    state = t.to;
  }
  EXPECT_EQ(state, final_state);
  return edges;
}

class BreakerConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BreakerRegistry::Options options;
    options.breaker = FastOptions();
    options.clock = &clock_;
    registry_ = *BreakerRegistry::Create(options);
    registry_->AddTransitionListener(
        [this](const BreakerTransition& t) { recorder_.On(t); });
  }

  // Runs kThreads workers (plus `extra`, if any) and a monitor. Worker t
  // uses channel t % kChannels; the four channels are looked up by workers
  // 0..3 concurrently and published to the others.
  std::vector<WorkerCounts> Hammer(std::function<void()> extra = nullptr) {
    std::shared_ptr<CircuitBreaker> channels[kChannels];
    std::atomic<bool> published[kChannels] = {};
    std::atomic<int> running{kThreads};
    std::vector<WorkerCounts> counts(kThreads);
    std::vector<std::thread> threads;

    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const int c = t % kChannels;
        if (t < kChannels) {
          channels[c] = registry_->Get(kKey);
          published[c].store(true, std::memory_order_release);
        }
        while (!published[c].load(std::memory_order_acquire)) {
          std::this_thread::yield();
        }
        const std::shared_ptr<CircuitBreaker> breaker = channels[c];
        Work(t, *breaker, counts[t]);
        running.fetch_sub(1, std::memory_order_release);
      });
    }
    // The monitor: invariants of every snapshot while traffic runs.
    threads.emplace_back([&] {
      const std::shared_ptr<CircuitBreaker> breaker = registry_->Get(kKey);
      const BreakerOptions o = FastOptions();
      while (running.load(std::memory_order_acquire) > 0) {
        const BreakerSnapshot s = breaker->Snapshot();
        EXPECT_LE(s.probes_in_flight, o.half_open_probes);
        EXPECT_GE(s.probes_in_flight, 0);
        EXPECT_LT(s.probe_successes, o.half_open_successes);
        EXPECT_LE(s.window_failures, s.window_attempts);
        if (s.state != BreakerState::kHalfOpen) {
          EXPECT_EQ(s.probes_in_flight, 0);
        }
        std::this_thread::yield();
      }
    });
    if (extra) {
      threads.emplace_back([&] {
        while (running.load(std::memory_order_acquire) > 0) extra();
      });
    }
    for (std::thread& t : threads) t.join();
    for (int c = 0; c < kChannels; ++c) {
      EXPECT_EQ(channels[c], channels[0]);  // one breaker for the key
    }
    return counts;
  }

  // One worker: calls whose attempts fail while the fake server is down
  // (alternating 40 ms up, 40 ms down), with some ignored, some failures
  // while up, and results held back and recorded late (out of order, and
  // often after the breaker has moved on).
  void Work(int t, CircuitBreaker& breaker, WorkerCounts& counts) {
    std::minstd_rand rng(1234 + t);
    std::deque<std::pair<Admission, AttemptResult>> held;
    for (int i = 0; i < kCallsPerThread; ++i) {
      clock_.Advance(absl::Microseconds(10));
      ++counts.calls;
      const Admission a = breaker.Admit();
      if (!a.allowed()) {
        ++counts.refused;
      } else {
        ++counts.admitted;
        if (a.probe()) ++counts.probes;
        const int64_t ms = absl::ToUnixMillis(clock_.MonotonicNow());
        const bool down = (ms / 40) % 2 == 1;
        const uint32_t r = rng() % 100;
        AttemptResult result;
        if (r < 10) {
          result = AttemptResult::kIgnored;
        } else if (down || r < 15) {
          result = AttemptResult::kFailure;
        } else {
          result = AttemptResult::kSuccess;
        }
        held.emplace_back(a, result);
      }
      // Keep up to 2 results in flight.
      while (held.size() > static_cast<size_t>(rng() % 3)) {
        breaker.Record(held.front().first, held.front().second);
        held.pop_front();
      }
      if (i % 1000 == 0) {
        // Lookups of other keys, concurrent with traffic on this one.
        registry_->Get(absl::StrCat("other-", t, "-", i));
        EXPECT_EQ(registry_->Get(kKey).get(), &breaker);
      }
    }
    for (const auto& [admission, result] : held) {
      breaker.Record(admission, result);
    }
  }

  AtomicClock clock_;
  Recorder recorder_;
  std::shared_ptr<BreakerRegistry> registry_;
};

TEST_F(BreakerConcurrencyTest, TransitionsFormALegalSequenceAndCountsAddUp) {
  const std::vector<WorkerCounts> counts = Hammer();
  const std::shared_ptr<CircuitBreaker> breaker = registry_->Get(kKey);
  const BreakerSnapshot s = breaker->Snapshot();
  const std::vector<BreakerTransition> events = recorder_.events();

  EXPECT_FALSE(recorder_.out_of_order());
  EXPECT_EQ(s.transitions, events.size());
  const std::map<std::string, int> edges =
      CheckSequence(events, breaker->state(), /*allow_manual=*/false);

  int64_t calls = 0, admitted = 0, refused = 0, probes = 0;
  for (const WorkerCounts& c : counts) {
    calls += c.calls;
    admitted += c.admitted;
    refused += c.refused;
    probes += c.probes;
  }
  EXPECT_EQ(calls, int64_t{kThreads} * kCallsPerThread);
  EXPECT_EQ(admitted + refused, calls);
  EXPECT_EQ(static_cast<int64_t>(s.refused), refused);
  // Every admission was recorded: no probe is left holding a permit.
  EXPECT_EQ(s.probes_in_flight, 0);

  // The run went round the state machine many times.
  const int trips = edges.count("closed->open") ? edges.at("closed->open") : 0;
  const int closes =
      edges.count("half_open->closed") ? edges.at("half_open->closed") : 0;
  EXPECT_GE(trips, 5);
  EXPECT_GE(closes, 5);
  EXPECT_GE(probes, closes * 2);
  RecordProperty("transitions", static_cast<int>(events.size()));
  RecordProperty("trips", trips);
  RecordProperty("refused", static_cast<int>(refused));
}

TEST_F(BreakerConcurrencyTest, ManualControlRacesWithTraffic) {
  const std::shared_ptr<CircuitBreaker> breaker = registry_->Get(kKey);
  std::minstd_rand rng(99);
  // An operator flipping switches while traffic runs.
  Hammer([&] {
    switch (rng() % 4) {
      case 0:
        breaker->ForceOpen();
        break;
      case 1:
        breaker->Disable();
        break;
      default:
        breaker->Reset();
        break;
    }
    for (int i = 0; i < 100; ++i) std::this_thread::yield();
  });
  const std::vector<BreakerTransition> events = recorder_.events();
  EXPECT_FALSE(recorder_.out_of_order());
  EXPECT_EQ(breaker->Snapshot().transitions, events.size());
  CheckSequence(events, breaker->state(), /*allow_manual=*/true);
  for (const BreakerTransition& t : events) {
    if (!t.manual) {
      // Automatic edges never leave a manual state.
      EXPECT_NE(t.from, BreakerState::kForcedOpen);
      EXPECT_NE(t.from, BreakerState::kDisabled);
    }
  }
}

}  // namespace
}  // namespace rpcguard
