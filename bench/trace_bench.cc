// Copyright rpcguard authors.
//
// What tracing costs per event. The no-failure path at the default verbosity
// is ShouldTrace (false) plus the counters a success adds (Stats::Record of its
// event, which counts it as the typed calls do); the rest shows what a
// written line costs.

#include <cstdio>

#include "benchmark/benchmark.h"
#include "rpcguard/observability/stats.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace {

TraceEvent SuccessEvent() {
  TraceEvent e;
  e.time = absl::Now();
  e.call_id = 0x9f3c21d4e5a6b708;
  e.method = "/payments.v1.Payments/Charge";
  e.attempt = 1;
  e.decision = TraceDecision::kDone;
  e.deadline_left = absl::Milliseconds(480);
  e.breaker_key = "payments:443";
  e.breaker_state = "closed";
  e.idempotency_key = "0f8fad5b-d9cb-469f-a165-70867728950e";
  return e;
}

TraceEvent RetryEvent() {
  TraceEvent e = SuccessEvent();
  e.code = grpc::StatusCode::UNAVAILABLE;
  e.status_class = StatusClass::kRetriable;
  e.decision = TraceDecision::kRetry;
  e.backoff = absl::Microseconds(18200);
  e.message = "connection reset";
  return e;
}

// The default path of a call that succeeds first time.
void BM_SuccessAtDefaultVerbosity(benchmark::State& state) {
  static Stats* stats = new Stats;
  Stats::MethodHandle* handle = stats->ForMethod(SuccessEvent().method);
  const TraceEvent e = SuccessEvent();
  for (auto _ : state) {
    benchmark::DoNotOptimize(ShouldTrace(TraceVerbosity::kRetries, e));
    stats->Record(handle, e);
  }
}
BENCHMARK(BM_SuccessAtDefaultVerbosity)->ThreadRange(1, 8);

// The same, looking the method up by name every time.
void BM_StatsRecordByName(benchmark::State& state) {
  static Stats* stats = new Stats;
  const TraceEvent e = SuccessEvent();
  for (auto _ : state) stats->Record(e);
}
BENCHMARK(BM_StatsRecordByName)->ThreadRange(1, 8);

void BM_FormatLogfmt(benchmark::State& state) {
  const TraceEvent e = RetryEvent();
  for (auto _ : state) benchmark::DoNotOptimize(FormatLogfmt(e));
}
BENCHMARK(BM_FormatLogfmt);

void BM_FormatJson(benchmark::State& state) {
  const TraceEvent e = RetryEvent();
  for (auto _ : state) benchmark::DoNotOptimize(FormatJson(e));
}
BENCHMARK(BM_FormatJson);

// A written line: format plus one fwrite and fflush to /dev/null.
void BM_LogfmtSinkWrite(benchmark::State& state) {
  static FILE* devnull = fopen("/dev/null", "w");
  static LogfmtSink* sink = new LogfmtSink(devnull);
  const TraceEvent e = RetryEvent();
  for (auto _ : state) sink->Write(e);
}
BENCHMARK(BM_LogfmtSinkWrite)->ThreadRange(1, 8);

}  // namespace
}  // namespace rpcguard
