// Copyright rpcguard authors.
//
// The per-attempt cost of the breaker and the retry budget, with the real
// clock, on one key shared by every thread (the worst case: all traffic to
// one destination). Target: Admit + Record under 100 ns on one thread, and
// no worse than twice that per operation on two threads.
//
//   ./bazelw run -c opt //bench:breaker_bench

#include <memory>

#include "benchmark/benchmark.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"

namespace rpcguard {
namespace {

// One breaker per benchmark, shared by its threads.
CircuitBreaker& SharedBreaker(int id) {
  static std::shared_ptr<BreakerRegistry> registry =
      *BreakerRegistry::Create(BreakerRegistry::Options{});
  return *registry->Get("bench-" + std::to_string(id));
}

// The common case: a healthy destination.
void BM_AdmitRecordSuccess(benchmark::State& state) {
  CircuitBreaker& breaker = SharedBreaker(1);
  for (auto _ : state) {
    const Admission a = breaker.Admit();
    breaker.Record(a, AttemptResult::kSuccess);
  }
}
BENCHMARK(BM_AdmitRecordSuccess)->Threads(1)->Threads(2);

// One attempt in 10 fails (below the threshold: it stays CLOSED, but each
// failure sums the window).
void BM_AdmitRecordMixed(benchmark::State& state) {
  CircuitBreaker& breaker = SharedBreaker(2);
  int i = 0;
  for (auto _ : state) {
    const Admission a = breaker.Admit();
    breaker.Record(
        a, ++i % 10 == 0 ? AttemptResult::kFailure : AttemptResult::kSuccess);
  }
  if (breaker.state() != BreakerState::kClosed) state.SkipWithError("tripped");
}
BENCHMARK(BM_AdmitRecordMixed)->Threads(1)->Threads(2);

// Fail-fast during an outage: what an open breaker costs a refused call.
void BM_AdmitOpen(benchmark::State& state) {
  static std::shared_ptr<CircuitBreaker> breaker = [] {
    BreakerOptions o;
    o.open_time = o.max_open_time = absl::Hours(1);  // open for the whole run
    auto b = *CircuitBreaker::Create("bench-open", o);
    for (int i = 0; i < o.min_attempts; ++i) {
      b->Record(b->Admit(), AttemptResult::kFailure);
    }
    return b;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(breaker->Admit());
  if (breaker->state() != BreakerState::kOpen) state.SkipWithError("closed");
}
BENCHMARK(BM_AdmitOpen)->Threads(1)->Threads(2);

// Every call's first attempt, and one retry request (granted or not): the
// pattern of an outage, where every call asks for a retry.
void BM_BudgetFirstAttemptAndRetry(benchmark::State& state) {
  static std::shared_ptr<RetryBudget> budget =
      *RetryBudget::Create(RetryBudgetOptions{});
  for (auto _ : state) {
    budget->RecordFirstAttempt();
    benchmark::DoNotOptimize(budget->TryAcquireRetry());
  }
}
BENCHMARK(BM_BudgetFirstAttemptAndRetry)->Threads(1)->Threads(2);

// The part every call pays: counting its first attempt.
void BM_BudgetFirstAttempt(benchmark::State& state) {
  static std::shared_ptr<RetryBudget> budget =
      *RetryBudget::Create(RetryBudgetOptions{});
  for (auto _ : state) budget->RecordFirstAttempt();
}
BENCHMARK(BM_BudgetFirstAttempt)->Threads(1)->Threads(2);

// gRFC A6's throttle: one failure and one success (lock-free).
void BM_ThrottleFailureAndSuccess(benchmark::State& state) {
  static std::shared_ptr<RetryThrottle> throttle =
      *RetryThrottle::Create(RetryThrottleOptions{});
  for (auto _ : state) {
    benchmark::DoNotOptimize(throttle->RecordFailure());
    throttle->RecordSuccess();
  }
}
BENCHMARK(BM_ThrottleFailureAndSuccess)->Threads(1)->Threads(2);

// A registry lookup (done once per channel and method, not per call).
void BM_RegistryGet(benchmark::State& state) {
  static std::shared_ptr<BreakerRegistry> registry =
      *BreakerRegistry::Create(BreakerRegistry::Options{});
  for (auto _ : state) {
    benchmark::DoNotOptimize(registry->Get("dns:///payments.internal:443"));
  }
}
BENCHMARK(BM_RegistryGet)->Threads(1)->Threads(2);

}  // namespace
}  // namespace rpcguard
