// Copyright rpcguard authors.
//
// Stats: counters and histograms of what rpcguard did, per method and
// target and per circuit breaker, cheap enough to record every event of
// every call.
//
// The interceptor records by handle where it decides, whatever the trace
// verbosity: RecordCallStarted/RecordAttemptStarted as calls and attempts
// start, RecordAttemptEnded, RecordRetry and RecordCallEnded as they end.
// Record(TraceEvent) counts a trace event the way those calls would have,
// for a reader that has only the events (tests, replayed traces).
// Per (method, target) series Stats keeps:
//
//   calls started, and calls ended by final status code (one terminal event
//                each: an attempt whose decision is done or give_up, or a
//                fail-fast);
//   attempts     started, and ended by status code (kAttempt events);
//   retries      attempts followed by a retry; per call as a histogram of
//                the calls that retried at all (gRFC A96's shape);
//   hedges       per hedged call, as a histogram (A96), and in total;
//   give_ups     calls that gave up, by GiveUpReason; fail_fasts likewise;
//   retry delay  a histogram of the backoff before each retry, in seconds;
//   durations    of calls and of attempts, histograms in seconds (A66's
//                shape), from the TraceEvent's call_duration and
//                attempt_duration (the injected Clock's monotonic time);
//   attempts per call  a histogram, 1 to 10 and above (a fail-fast before
//                the first attempt counts 0, in the first bucket);
//
// per breaker key, its state and its transitions by the state it went to;
// and per retry budget handed to WatchBudget, its balance, refunds, free
// retries and credit in flight.
//
// Bounded: methods are names a caller controls (a GenericStub caller can
// make up any). Stats keeps at most StatsOptions::max_series (method, target)
// series; a series asked for beyond that counts into one shared series
// labelled method="other", target="other", so nothing is lost but the name.
//
// Snapshot() copies the counters into plain structs, and ToPrometheusText
// writes them in Prometheus' text exposition format, for the application to
// serve from its own HTTP endpoint (or see rpcguard/prometheus/collector.h
// to register them with prometheus-cpp):
//
//   rpcguard::Stats stats;
//   ...  // Options carries &stats; the interceptor records into it
//   std::string body = rpcguard::ToPrometheusText(stats.Snapshot());
//
// Cost: recording is a few relaxed atomic increments and a bucket search.
// Finding a series is a hash-map lookup under a shared lock, which the
// interceptor avoids on the call path by caching the MethodHandle of each
// method.

#ifndef RPCGUARD_OBSERVABILITY_STATS_H_
#define RPCGUARD_OBSERVABILITY_STATS_H_

#include <grpcpp/support/status_code_enum.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpcguard/decision/commit_reason.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/observability/instruments.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {

// Upper bounds of the retry-delay histogram's buckets, in milliseconds (the
// +Inf bucket is implied). From rpcguard's smallest useful backoff to the
// longest pushback worth waiting for.
inline constexpr std::array<double, 13> kRetryDelayBucketsMs = {
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

// Upper bounds of the call- and attempt-duration histograms' buckets, in
// seconds (+Inf implied). A coarser cut of gRFC A66's latency buckets: 41
// buckets per series, for two histograms, would make each (method, target)
// series a few kilobytes of text and Stats' bound on series meaningless.
inline constexpr std::array<double, 12> kDurationBucketsSeconds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

// Upper bounds of the retries-per-call and hedges-per-call histograms (+Inf
// implied), as in gRFC A96.
inline constexpr std::array<double, 5> kPerCallBuckets = {1, 2, 3, 4, 5};

// Upper bounds of the attempts-per-call histogram: 1 to 10 (rpcguard's cap
// on maxAttempts), then +Inf.
inline constexpr int kAttemptsBuckets = 10;

// A histogram in Prometheus' shape: cumulative bucket counts.
struct HistogramSnapshot {
  // Upper bounds, ascending; the +Inf bucket is `count`.
  std::vector<double> bounds;
  // cumulative[i]: observations <= bounds[i]. Same size as `bounds`.
  std::vector<uint64_t> cumulative;
  // Observations in all.
  uint64_t count = 0;
  // Sum of the observed values.
  double sum = 0;
};

// One (method, target) series' counters. See the file comment for what each
// counts.
struct MethodStatsSnapshot {
  std::string method;
  // The channel's target (Options::destination); empty when none was given.
  std::string target;
  uint64_t calls_started = 0;
  uint64_t calls = 0;
  // Ended calls and attempts by status code (grpc::StatusCode as int);
  // non-zero entries only.
  std::map<int, uint64_t> calls_by_code;
  uint64_t attempts_started = 0;
  uint64_t attempts = 0;
  std::map<int, uint64_t> attempts_by_code;
  uint64_t retries = 0;
  // Seconds: each call's call_duration; each kAttempt's attempt_duration.
  HistogramSnapshot call_duration;
  HistogramSnapshot attempt_duration;
  // Retries per call that retried at least once; copies after the first per
  // hedged call that sent one at least (A96 reports no zeros).
  HistogramSnapshot retries_per_call;
  HistogramSnapshot hedges_per_call;
  // Hedged calls that ended (RecordHedgedCall).
  uint64_t hedged_calls = 0;
  // Streams that ended committed to an attempt (gRFC A6), by why
  // (TraceEvent::commit). Non-zero entries only.
  std::map<CommitReason, uint64_t> commits;
  // Non-zero entries only.
  std::map<GiveUpReason, uint64_t> give_ups;
  std::map<GiveUpReason, uint64_t> fail_fasts;
  // Seconds.
  HistogramSnapshot retry_delay;
  HistogramSnapshot attempts_per_call;
  // Hedged calls: copies sent after the first, calls a later copy won,
  // copies cancelled because another decided the call, and the delay the
  // last hedged call used (seconds; the adaptive estimate when there is
  // one).
  uint64_t hedges = 0;
  uint64_t hedges_won = 0;
  uint64_t copies_cancelled = 0;
  double hedge_delay_seconds = 0;
};

// One circuit breaker's transitions.
struct BreakerStatsSnapshot {
  std::string key;
  // Transitions by the state entered ("open": how often it tripped).
  std::map<std::string, uint64_t> transitions_to;
  // The state its last transition entered ("closed", "open", ...).
  std::string state;
};

// One retry budget (Stats::WatchBudget), read when the snapshot was taken.
struct BudgetStatsSnapshot {
  std::string key;
  // Paid retries still allowed in the window now: allowance - retries (may
  // be negative while retries age out).
  double balance = 0;
  RetryBudgetSnapshot budget;
};

// All counters at one moment. Each counter is read atomically, but not all of
// them at the same instant: a snapshot taken while calls run may count an
// attempt whose call it does not count yet.
struct StatsSnapshot {
  // Sorted by method name.
  std::vector<MethodStatsSnapshot> methods;
  // Sorted by key.
  std::vector<BreakerStatsSnapshot> breakers;
  // Sorted by key; budgets gone since they were watched are left out.
  std::vector<BudgetStatsSnapshot> budgets;
  // ForMethod lookups of a new series sent to the `other` series because
  // max_series were held.
  uint64_t series_overflows = 0;

  // The method's counters (the first series of that name, whatever its
  // target), or null if it has none.
  const MethodStatsSnapshot* FindMethod(absl::string_view method) const;
  // The series' counters, or null if it has none.
  const MethodStatsSnapshot* FindSeries(absl::string_view method,
                                        absl::string_view target) const;
  // The breaker's counters, or null if it has none.
  const BreakerStatsSnapshot* FindBreaker(absl::string_view key) const;
};

// How much a Stats keeps.
struct StatsOptions {
  // (method, target) series kept by name; later ones count into the
  // `other` series. A busy series (one that retries, with every histogram
  // in use) writes about 9 KB of exposition text, so the default keeps the
  // text under 1 MB however many methods callers invent. Raise it for a
  // client of more methods that can afford a bigger scrape.
  size_t max_series = 100;
};

// Counters of rpcguard's activity. Thread-safe; one instance is shared by all
// calls of the channels whose Options point at it, and must outlive them.
//
// Memory: methods are few and kept for ever. Breaker keys may be many (a
// gateway calling 100,000 targets over its life, some of which trip): once
// kMinBreakersSweepAt keys are held, a transition of a new key first drops
// the counters of every key whose last transition was to CLOSED, as the
// breaker registry forgets its healthy, unused breakers. Such a key's
// counters start again from zero if it transitions later (Prometheus sees a
// counter reset). Keys still OPEN, HALF_OPEN, FORCED_OPEN or DISABLED are
// kept. The threshold then becomes twice the keys left.
class Stats {
 public:
  // One method's counters. The pointer returned by ForMethod stays valid as
  // long as the Stats; callers keep it to skip the lookup on every call.
  class MethodHandle;

  // The label value of the series that counts what falls outside
  // max_series (its method and its target).
  static constexpr absl::string_view kOther = "other";

  Stats();
  explicit Stats(StatsOptions options);
  ~Stats();
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  // Returns the counters of `method` with an empty target, as
  // ForMethod(method, "").
  MethodHandle* ForMethod(absl::string_view method) ABSL_LOCKS_EXCLUDED(mu_);

  // Returns the counters of the (method, target) series, creating them on
  // first use; once max_series are held, a new series' lookup returns the
  // `other` series instead. Never null. Takes a shared lock (an exclusive
  // one the first time a series is seen).
  MethodHandle* ForMethod(absl::string_view method, absl::string_view target)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a call, or an attempt, that starts. Lock-free.
  static void RecordCallStarted(MethodHandle* handle);
  static void RecordAttemptStarted(MethodHandle* handle);
  // Counts an attempt that ended after its call did (a hedged copy
  // cancelled as a loser, an attempt outrun by the deadline): it writes no
  // trace event, yet gRFC A66 counts it as ended, with its code and
  // duration. Lock-free.
  static void RecordAttemptEnded(MethodHandle* handle, grpc::StatusCode code,
                                 absl::Duration duration);
  // Counts a retry decided after an attempt's end, `delay` its backoff
  // (negative counts as 0). Lock-free.
  static void RecordRetry(MethodHandle* handle, absl::Duration delay);

  // A call's end, as its method's series counts it.
  struct CallEnd {
    grpc::StatusCode code = grpc::StatusCode::OK;
    // From its first attempt's start (0 if none was sent).
    absl::Duration duration;
    // Why it gave up; kNone when it succeeded.
    GiveUpReason reason = GiveUpReason::kNone;
    // Refused before an attempt it would have sent (rpcguard_fail_fasts).
    bool fail_fast = false;
    // A stream's commit, if it committed.
    std::optional<CommitReason> commit;
    // Attempts sent, and whether those after the first were retries (a
    // hedged call's copies are not: RecordHedgedCall counts them).
    int attempts = 0;
    bool retried = false;
  };
  // Counts a call that ended. Lock-free.
  static void RecordCallEnded(MethodHandle* handle, const CallEnd& end);

  // Reports `budget`'s state under `key` in every later Snapshot, as long as
  // it lives (held weakly). A key watched again is replaced. Keys of budgets
  // gone are dropped as new keys come (as breaker keys are).
  void WatchBudget(absl::string_view key, std::weak_ptr<RetryBudget> budget)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Counts `event` against `handle` as the typed calls above would count
  // the decision it reports; `handle` must come from this Stats' own
  // ForMethod (the event's `method` field is not looked at). Lock-free for
  // kAttempt and kFailFast events; a kBreakerTransition takes the breaker
  // map's lock (transitions are rare).
  void Record(MethodHandle* handle, const TraceEvent& event)
      ABSL_LOCKS_EXCLUDED(mu_);

  // As above, looking the method up by `event.method` (not at all for a
  // breaker transition, which is counted per breaker key only).
  void Record(const TraceEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  // A breaker of `key` moved to `to`: recorded where the transition is
  // known (the breaker's listener), by state, not by its name. A
  // kBreakerTransition event given to Record comes here by its `to_state`;
  // one naming no state (ParseBreakerState) is not counted.
  void RecordTransition(absl::string_view key, BreakerState to)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a hedged call that ended: `copies` sent in all, whether a copy
  // after the first won, how many were cancelled because another decided
  // the call, and the hedge delay it used. Lock-free.
  void RecordHedgedCall(MethodHandle* handle, int copies, bool later_copy_won,
                        int cancelled, absl::Duration delay);

  // Copies every counter.
  StatsSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // How many breaker keys and series (the `other` series included, once
  // used) have counters, for tests and operators watching memory.
  size_t breaker_keys() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t method_keys() const ABSL_LOCKS_EXCLUDED(mu_);

  // Breaker keys held before any is dropped (see the class comment).
  static constexpr size_t kMinBreakersSweepAt = 1024;

 private:
  struct BreakerCounters;

  void RecordTransition(const TraceEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  static MethodStatsSnapshot SnapshotOf(const MethodHandle& handle);

  const StatsOptions options_;
  mutable absl::Mutex mu_;
  // Keyed by method + '\0' + target. Values are never removed, so handles
  // stay valid.
  absl::flat_hash_map<std::string, std::unique_ptr<MethodHandle>> methods_
      ABSL_GUARDED_BY(mu_);
  // The series of everything beyond max_series; created on first use.
  std::unique_ptr<MethodHandle> other_ ABSL_GUARDED_BY(mu_);
  uint64_t overflows_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::weak_ptr<RetryBudget>> budgets_
      ABSL_GUARDED_BY(mu_);
  size_t budgets_sweep_at_ ABSL_GUARDED_BY(mu_) = kMinBreakersSweepAt;
  absl::flat_hash_map<std::string, std::unique_ptr<BreakerCounters>> breakers_
      ABSL_GUARDED_BY(mu_);
  // A transition of a new key, with this many keys held, first drops the
  // keys whose breaker is back to CLOSED; then twice those left.
  size_t breakers_sweep_at_ ABSL_GUARDED_BY(mu_) = kMinBreakersSweepAt;
};

// The counters of one method; opaque to users. Public only so that Stats can
// hand out stable pointers to it.
class Stats::MethodHandle {
 public:
  MethodHandle() = default;
  MethodHandle(const MethodHandle&) = delete;
  MethodHandle& operator=(const MethodHandle&) = delete;

 private:
  friend class Stats;
  static constexpr int kReasons = kNumGiveUpReasons;
  static constexpr int kDelayBuckets = kRetryDelayBucketsMs.size() + 1;
  static constexpr int kDurationBuckets = kDurationBucketsSeconds.size() + 1;
  static constexpr int kPerCall = kPerCallBuckets.size() + 1;
  // grpc::StatusCode's 17 codes; anything else counts as UNKNOWN.
  static constexpr int kCodes = 17;

  // The series' labels, set once when it is created.
  std::string method;
  std::string target;

  // All written by Record (relaxed increments), read by Snapshot.
  std::atomic<uint64_t> calls_started{0};
  std::atomic<uint64_t> attempts_started{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> attempts{0};
  std::array<std::atomic<uint64_t>, kCodes> calls_by_code{};
  std::array<std::atomic<uint64_t>, kCodes> attempts_by_code{};
  // Per bucket, not cumulative; the last is +Inf. Sums in nanoseconds.
  std::array<std::atomic<uint64_t>, kDurationBuckets> call_duration{};
  std::atomic<uint64_t> call_duration_ns{0};
  std::array<std::atomic<uint64_t>, kDurationBuckets> attempt_duration{};
  std::atomic<uint64_t> attempt_duration_ns{0};
  std::array<std::atomic<uint64_t>, kPerCall> retries_per_call{};
  std::atomic<uint64_t> retries_per_call_sum{0};
  std::array<std::atomic<uint64_t>, kPerCall> hedges_per_call{};
  std::atomic<uint64_t> hedged_calls{0};
  std::atomic<uint64_t> retries{0};
  std::array<std::atomic<uint64_t>, kReasons> give_ups{};
  std::array<std::atomic<uint64_t>, kReasons> fail_fasts{};
  // By CommitReason.
  std::array<std::atomic<uint64_t>, kNumCommitReasons> commits{};
  // Per bucket, not cumulative; the last is +Inf.
  std::array<std::atomic<uint64_t>, kDelayBuckets> delay_buckets{};
  std::atomic<uint64_t> delay_sum_us{0};
  // Index 0 holds 0 and 1 attempts, 9 holds 10, 10 holds more.
  std::array<std::atomic<uint64_t>, kAttemptsBuckets + 1> attempts_buckets{};
  std::atomic<uint64_t> attempts_sum{0};
  std::atomic<uint64_t> hedges{0};
  std::atomic<uint64_t> hedges_won{0};
  std::atomic<uint64_t> copies_cancelled{0};
  std::atomic<int64_t> hedge_delay_ns{0};
};

// Writes `snapshot` in Prometheus' text exposition format (version 0.0.4),
// every metric family with its HELP and TYPE lines, label values escaped.
// Per-series labels are method and target (M,T below):
//
//   rpcguard_calls_started_total{M,T}                counter
//   rpcguard_calls_total{M,T,code}                   counter
//   rpcguard_attempts_started_total{M,T}             counter
//   rpcguard_attempts_total{M,T,code}                counter
//   rpcguard_call_duration_seconds{M,T}              histogram
//   rpcguard_attempt_duration_seconds{M,T}           histogram
//   rpcguard_retries_total{M,T}                      counter
//   rpcguard_call_retries{M,T}                       histogram
//   rpcguard_retry_delay_seconds{M,T}                histogram
//   rpcguard_attempts_per_call{M,T}                  histogram
//   rpcguard_give_ups_total{M,T,reason}              counter
//   rpcguard_fail_fasts_total{M,T,reason}            counter
//   rpcguard_call_hedges{M,T}                        histogram
//   rpcguard_hedges_total{M,T}                       counter
//   rpcguard_hedges_won_total{M,T}                   counter
//   rpcguard_copies_cancelled_total{M,T}             counter
//   rpcguard_hedge_delay_seconds{M,T}                gauge
//   rpcguard_breaker_state{breaker,state}            gauge (1: current)
//   rpcguard_breaker_transitions_total{breaker,to}   counter
//   rpcguard_retry_budget_balance{budget}            gauge
//   rpcguard_retry_budget_retries_in_flight{budget}  gauge
//   rpcguard_retry_budget_refunds_total{budget}      counter
//   rpcguard_retry_budget_free_retries_total{budget} counter
//   rpcguard_retry_budget_refusals_total{budget}     counter
//   rpcguard_stats_series_overflows_total            counter
//
// To keep the text small, what a series never saw is left out: by-code and
// by-reason label sets with a zero count, histograms without observations,
// and the hedging families of a series that never hedged.
std::string ToPrometheusText(const StatsSnapshot& snapshot);

// The metric families above as data, for exporters other than the text
// format (rpcguard/prometheus/collector.h hands them to prometheus-cpp).
// Names are final (counters end in _total); a histogram's buckets are
// cumulative, as in HistogramSnapshot.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;
struct MetricSample {
  MetricLabels labels;
  // Counters and gauges.
  double value = 0;
  // Histograms.
  HistogramSnapshot histogram;
};
struct MetricFamilyData {
  using Type = MetricType;  // instruments.h
  std::string name;
  std::string help;
  Type type = Type::kCounter;
  std::vector<MetricSample> samples;
};
std::vector<MetricFamilyData> ToMetricFamilies(const StatsSnapshot& snapshot);

// Appends to `out` the family of instrument `id`, named, typed and
// explained as instruments.h declares it, with no samples yet; returns it.
MetricFamilyData& AppendFamily(Instrument id,
                               std::vector<MetricFamilyData>* out);

// Writes `families` in the text exposition format (what
// ToPrometheusText(snapshot) writes for ToMetricFamilies(snapshot)).
std::string ToPrometheusText(const std::vector<MetricFamilyData>& families);

}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_STATS_H_
