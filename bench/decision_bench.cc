// Copyright rpcguard authors.
//
// The decision path of one attempt, without gRPC call objects: what rpcguard
// computes between an attempt's end and its next action. Each piece alone,
// then the whole path for a failed attempt that is retried (the path the
// issue's "under 200 ns per attempt" target is about) and for a first
// attempt that succeeds.
//
//   ./bazelw run -c opt //bench:decision_bench
//
// The per-method lookup uses the interceptor's cache
// (interceptors/method_cache.h: lock-free reads, resolved once per method);
// Config::Resolve, which that cache avoids, is measured for comparison.

#include <limits>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "proto/rpcguard/testing/v1/fault.pb.h"
#include "rpcguard/base/method_cache.h"
#include "rpcguard/clock.h"
#include "rpcguard/config.h"
#include "rpcguard/decision/policy.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/random.h"

namespace rpcguard {
namespace {

constexpr char kMethod[] = "/rpcguard.testing.v1.FaultService/Get";

// The retry policy the comparison benchmarks use (bench/clients.cc).
constexpr char kConfigJson[] = R"({"methodConfig": [{
  "name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.010s",
                  "maxBackoff": "0.100s", "backoffMultiplier": 2,
                  "retryableStatusCodes": ["UNAVAILABLE"]}}]})";

const Config& BenchConfig() {
  // Links the generated descriptors, so Resolve finds the .proto options.
  (void)rpcguard::testing::v1::FaultRequest::descriptor();
  static const Config* const config =
      new Config(*Config::FromJson(kConfigJson));
  return *config;
}

// The interceptor's per-method cache (Shared::ForMethod in
// interceptors/retry_interceptor.cc keeps a MethodState per method in one),
// holding here the resolved policy, with a few other methods, as a channel
// that calls several would have.
class MethodCache {
 public:
  MethodCache() {
    for (const char* m : {kMethod, "/rpcguard.testing.v1.FaultService/Put",
                          "/rpcguard.testing.v1.FaultService/Charge",
                          "/rpcguard.testing.v1.FaultService/Create",
                          "/rpcguard.testing.v1.FaultControl/Stats"}) {
      ForMethod(m);
    }
  }

  const ResolvedPolicy& ForMethod(const char* method) const {
    return cache_.Get(method, [](absl::string_view m) {
      return std::make_unique<ResolvedPolicy>(BenchConfig().Resolve(m));
    });
  }

 private:
  internal::MethodCache<ResolvedPolicy> cache_;
};

const MethodCache& Cache() {
  static const MethodCache* const cache = new MethodCache;
  return *cache;
}

// gRPC hands the interceptor the method as a C string.
const char* MethodName() {
  static const std::string* const name = new std::string(kMethod);
  return name->c_str();
}

void BM_MethodCacheLookup(benchmark::State& state) {
  const char* method = MethodName();
  for (auto _ : state) {
    benchmark::DoNotOptimize(&Cache().ForMethod(method));
  }
}
BENCHMARK(BM_MethodCacheLookup)->ThreadRange(1, 8);

// What a copy of the policy would cost instead of a reference to it.
void BM_PolicyCopy(benchmark::State& state) {
  const MethodPolicy& policy = Cache().ForMethod(MethodName()).policy;
  for (auto _ : state) {
    MethodPolicy copy = policy;
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_PolicyCopy);

// Uncached resolution: descriptor lookup and option parsing. Done once per
// method by the interceptor.
void BM_ConfigResolveUncached(benchmark::State& state) {
  const Config& config = BenchConfig();
  for (auto _ : state) {
    benchmark::DoNotOptimize(config.Resolve(kMethod));
  }
}
BENCHMARK(BM_ConfigResolveUncached);

void BM_Classify(benchmark::State& state) {
  const Classifier classifier =
      Cache().ForMethod(MethodName()).policy.MakeClassifier();
  AttemptOutcome outcome;
  outcome.code = grpc::StatusCode::UNAVAILABLE;
  for (auto _ : state) {
    benchmark::DoNotOptimize(classifier.Classify(outcome));
  }
}
BENCHMARK(BM_Classify);

void BM_BackoffNext(benchmark::State& state) {
  const MethodPolicy& policy = Cache().ForMethod(MethodName()).policy;
  RandomBitGen gen(Random::Default());
  for (auto _ : state) {
    Backoff backoff(policy.retry.backoff);
    benchmark::DoNotOptimize(backoff.Next(gen));
  }
}
BENCHMARK(BM_BackoffNext);

void BM_ParsePushback(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(ParsePushback("250"));
}
BENCHMARK(BM_ParsePushback);

// No status details: what every failed attempt without RetryInfo parses.
void BM_ParseRetryInfoEmpty(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(ParseRetryInfo(""));
}
BENCHMARK(BM_ParseRetryInfoEmpty);

// The controller alone, for an attempt that ended UNAVAILABLE and is
// retried: construction (once per call), StartAttempt, OnAttemptEnd with a
// backoff draw. Real clock and randomness, as in production.
void BM_ControllerRetryDecision(benchmark::State& state) {
  const MethodPolicy& policy = Cache().ForMethod(MethodName()).policy;
  Clock* clock = Clock::Real();
  const absl::Time deadline = absl::Now() + absl::Hours(1);
  for (auto _ : state) {
    RetryController controller(policy, /*may_repeat=*/true, deadline, clock);
    controller.StartAttempt();
    RandomBitGen gen(Random::Default());
    const Decision d = controller.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE,
                                               Pushback(), false, gen);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_ControllerRetryDecision);

// The destination's breaker and retry budget, shared by every thread as
// calls to one target share them. The breaker never trips here (minAttempts
// out of reach) and the budget allows a retry per first attempt (ratio 1),
// so the loops below measure the path a closed breaker and a budget with
// tokens take: the common one, and the one that does the most work.
struct Destination {
  std::shared_ptr<CircuitBreaker> breaker;
  std::shared_ptr<RetryBudget> budget;
};

const Destination& SharedDestination() {
  static const Destination* const destination = [] {
    auto registry = *BreakerRegistry::Create({});
    BreakerOptions breaker;
    breaker.min_attempts = std::numeric_limits<int>::max();
    RetryBudgetOptions budget;
    budget.ratio = 1;
    return new Destination{*registry->Get("bench", breaker),
                           *registry->GetBudget("bench", budget)};
  }();
  return *destination;
}

// The whole decision path of one failed attempt that is retried, in its
// common form, as the interceptor takes it: policy lookup, the breaker's
// admission, the budget's count of a first attempt, the server's hints (no
// pushback trailer, empty status details), classification, the breaker
// recording the failure, the open-breaker check, the budget's retry token
// and a backoff draw inside the controller. `pushback` names a
// `grpc-retry-pushback-ms` value to parse instead (then A6's exact delay
// replaces the backoff draw).
void DecisionPathRetry(benchmark::State& state, const char* pushback_ms) {
  const char* method = MethodName();
  Clock* clock = Clock::Real();
  const Destination& destination = SharedDestination();
  const absl::Time deadline = absl::Now() + absl::Hours(1);
  int64_t retries = 0;
  for (auto _ : state) {
    const ResolvedPolicy& resolved = Cache().ForMethod(method);
    const Admission admission = destination.breaker->Admit();
    destination.budget->RecordFirstAttempt();
    RetryController controller(resolved.policy, /*may_repeat=*/true, deadline,
                               clock);
    controller.StartAttempt();
    Pushback pushback;
    if (pushback_ms != nullptr) pushback = ParsePushback(pushback_ms);
    pushback.min_delay = ParseRetryInfo("");
    AttemptOutcome outcome;
    outcome.code = grpc::StatusCode::UNAVAILABLE;
    destination.breaker->Record(
        admission,
        AttemptResultFor(resolved.policy.MakeClassifier().Classify(outcome),
                         outcome));
    RandomBitGen gen(Random::Default());
    Decision d = controller.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE,
                                         pushback, false, gen);
    if (d.action == Decision::Action::kRetry &&
        (destination.breaker->state() == BreakerState::kOpen ||
         !destination.budget->TryAcquireRetry())) {
      d.action = Decision::Action::kGiveUp;
    }
    retries += d.action == Decision::Action::kRetry;
  }
  state.counters["retried"] = benchmark::Counter(
      static_cast<double>(retries), benchmark::Counter::kAvgIterations);
}

void BM_DecisionPathRetry(benchmark::State& state) {
  DecisionPathRetry(state, nullptr);
}
BENCHMARK(BM_DecisionPathRetry)->ThreadRange(1, 8);

void BM_DecisionPathRetryWithPushback(benchmark::State& state) {
  DecisionPathRetry(state, "20");
}
BENCHMARK(BM_DecisionPathRetryWithPushback);

// The same path for a first attempt that succeeds (no hints to parse).
void BM_DecisionPathSuccess(benchmark::State& state) {
  const char* method = MethodName();
  Clock* clock = Clock::Real();
  const Destination& destination = SharedDestination();
  const absl::Time deadline = absl::Now() + absl::Hours(1);
  for (auto _ : state) {
    const ResolvedPolicy& resolved = Cache().ForMethod(method);
    RetryController controller(resolved.policy, /*may_repeat=*/true, deadline,
                               clock);
    const Admission admission = destination.breaker->Admit();
    destination.budget->RecordFirstAttempt();
    controller.StartAttempt();
    destination.breaker->Record(admission, AttemptResult::kSuccess);
    RandomBitGen gen(Random::Default());
    const Decision d =
        controller.OnAttemptEnd(grpc::StatusCode::OK, Pushback(), false, gen);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_DecisionPathSuccess)->ThreadRange(1, 8);

}  // namespace
}  // namespace rpcguard
