// Copyright rpcguard authors.
//
// Instruments: every metric family rpcguard exports, declared once. Each
// has its name, type, labels, help text and the gRPC metric it mirrors, in
// the one list below; the Prometheus export (ToMetricFamilies, hence the
// text format and the prometheus-cpp collector) names its families from
// it, the snapshot takes its histogram bounds from it
// (InstrumentBuckets), and docs/metrics.md's table is generated from it
// (InstrumentsMarkdownTable; tests/unit/observability/instruments_test.cc
// fails when the page and the list differ).

#ifndef RPCGUARD_OBSERVABILITY_INSTRUMENTS_H_
#define RPCGUARD_OBSERVABILITY_INSTRUMENTS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rpcguard {

// A metric family's Prometheus type.
enum class MetricType { kCounter, kGauge, kHistogram };

// Every instrument, in export order: a Stats' (ToMetricFamilies of a
// StatsSnapshot), then the process's server interceptors' (of a
// ServerSignals, rpcguard/server.h). X(enum name, metric name, type,
// labels (comma-separated, in order), help, what it mirrors in gRPC's own
// metrics (gRFC A66, A96), for the docs).
#define RPCGUARD_INSTRUMENTS(X)                                                \
  X(CallsStarted, "rpcguard_calls_started_total", kCounter, "method,target",   \
    "Calls started.", "(A66 has none for calls)")                              \
  X(Calls, "rpcguard_calls_total", kCounter, "method,target,code",             \
    "Calls that ended, by final status code.",                                 \
    "count of `grpc.client.call.duration` by `grpc.status`")                   \
  X(AttemptsStarted, "rpcguard_attempts_started_total", kCounter,              \
    "method,target", "Attempts started.",                                      \
    "`grpc.client.attempt.started` (A66)")                                     \
  X(Attempts, "rpcguard_attempts_total", kCounter, "method,target,code",       \
    "Attempts that ended, by status code.",                                    \
    "count of `grpc.client.attempt.duration` by `grpc.status`")                \
  X(CallDuration, "rpcguard_call_duration_seconds", kHistogram,                \
    "method,target",                                                           \
    "Call duration, from the first attempt's start to the end.",               \
    "`grpc.client.call.duration` (A66; no status label, coarser buckets)")     \
  X(AttemptDuration, "rpcguard_attempt_duration_seconds", kHistogram,          \
    "method,target", "Attempt duration, from its start to its status.",        \
    "`grpc.client.attempt.duration` (A66; likewise)")                          \
  X(Retries, "rpcguard_retries_total", kCounter, "method,target",              \
    "Attempts followed by a retry.", "sum of `grpc.client.call.retries`")      \
  X(CallRetries, "rpcguard_call_retries", kHistogram, "method,target",         \
    "Retries per call that retried.",                                          \
    "`grpc.client.call.retries` (A96: calls that retried only)")               \
  X(RetryDelay, "rpcguard_retry_delay_seconds", kHistogram, "method,target",   \
    "Backoff before each retry.",                                              \
    "`grpc.client.call.retry_delay` (A96), per retry, not per call")           \
  X(AttemptsPerCall, "rpcguard_attempts_per_call", kHistogram,                 \
    "method,target", "Attempts sent per call.", "")                            \
  X(GiveUps, "rpcguard_give_ups_total", kCounter, "method,target,reason",      \
    "Calls that gave up, by reason.", "")                                      \
  X(StreamCommits, "rpcguard_stream_commits_total", kCounter,                  \
    "method,target,reason",                                                    \
    "Streams that ended committed to an attempt, by why.",                     \
    "(gRPC counts no commits)")                                                \
  X(FailFasts, "rpcguard_fail_fasts_total", kCounter, "method,target,reason",  \
    "Calls ended without sending their next attempt, by reason.", "")          \
  X(CallHedges, "rpcguard_call_hedges", kHistogram, "method,target",           \
    "Copies sent after the first, per hedged call that sent one.",             \
    "`grpc.client.call.hedges` (A96: calls that hedged only)")                 \
  X(Hedges, "rpcguard_hedges_total", kCounter, "method,target",                \
    "Hedged copies sent after the first.", "")                                 \
  X(HedgesWon, "rpcguard_hedges_won_total", kCounter, "method,target",         \
    "Hedged calls decided by a copy after the first.", "")                     \
  X(CopiesCancelled, "rpcguard_copies_cancelled_total", kCounter,              \
    "method,target",                                                           \
    "Hedged copies cancelled because another decided the call.", "")           \
  X(HedgeDelay, "rpcguard_hedge_delay_seconds", kGauge, "method,target",       \
    "The hedge delay the series' last hedged call used.", "")                  \
  X(BreakerState, "rpcguard_breaker_state", kGauge, "breaker,state",           \
    "1 for the state a circuit breaker is in (its last transition's).", "")    \
  X(BreakerTransitions, "rpcguard_breaker_transitions_total", kCounter,        \
    "breaker,to", "Circuit breaker state changes, by the state entered.", "")  \
  X(BudgetBalance, "rpcguard_retry_budget_balance", kGauge, "budget",          \
    "Paid retries the budget still allows in its window.",                     \
    "(A6's throttle has no metric)")                                           \
  X(BudgetRetriesInFlight, "rpcguard_retry_budget_retries_in_flight", kGauge,  \
    "budget", "Retries on credit (paid only if they fail) not yet ended.", "") \
  X(BudgetRefunds, "rpcguard_retry_budget_refunds_total", kCounter, "budget",  \
    "Retries on credit that succeeded, so cost nothing.", "")                  \
  X(BudgetFreeRetries, "rpcguard_retry_budget_free_retries_total", kCounter,   \
    "budget", "Retries granted free (e.g. never sent to the server).", "")     \
  X(BudgetRefusals, "rpcguard_retry_budget_refusals_total", kCounter,          \
    "budget", "Retries the budget refused.", "")                               \
  X(SeriesOverflows, "rpcguard_stats_series_overflows_total", kCounter, "",    \
    "Lookups of a new (method, target) series counted under \"other\" "        \
    "because Stats held max_series.",                                          \
    "")                                                                        \
  X(ServerStopsSent, "rpcguard_server_stops_sent_total", kCounter, "reason",   \
    "Server calls failed with \"do not retry\", by the give-up reason of "     \
    "the outgoing call that caused it.",                                       \
    "")                                                                        \
  X(ServerHedgesSuppressed, "rpcguard_server_hedges_suppressed_total",         \
    kCounter, "",                                                              \
    "Server calls, a caller's retry or hedge, whose outgoing calls were not "  \
    "hedged.",                                                                 \
    "")

enum class Instrument {
#define RPCGUARD_INSTRUMENT_ENUM(id, name, type, labels, help, mirrors) k##id,
  RPCGUARD_INSTRUMENTS(RPCGUARD_INSTRUMENT_ENUM)
#undef RPCGUARD_INSTRUMENT_ENUM
};

// The number of instruments, counted from the list.
inline constexpr int kNumInstruments = 0
#define RPCGUARD_INSTRUMENT_COUNT(id, name, type, labels, help, mirrors) +1
    RPCGUARD_INSTRUMENTS(RPCGUARD_INSTRUMENT_COUNT)
#undef RPCGUARD_INSTRUMENT_COUNT
    ;

// One instrument's declaration.
struct InstrumentInfo {
  Instrument id;
  absl::string_view name;
  MetricType type;
  absl::string_view labels;  // comma-separated label names, in order
  absl::string_view help;
  absl::string_view mirrors;  // empty: no gRPC counterpart
};

// The declaration of `id`, from the list.
const InstrumentInfo& InstrumentInfoOf(Instrument id);

// A histogram instrument's bucket upper bounds in its unit (seconds for
// `_seconds`), ascending, +Inf implied; empty for counters and gauges.
const std::vector<double>& InstrumentBuckets(Instrument id);

// docs/metrics.md's table of every instrument: name, type, labels, buckets,
// what it mirrors; one row per instrument, in export order.
std::string InstrumentsMarkdownTable();

}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_INSTRUMENTS_H_
