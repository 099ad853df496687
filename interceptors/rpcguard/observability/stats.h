// Copyright rpcguard authors.
//
// Stats: counters of what rpcguard did, per method and per circuit breaker,
// cheap enough to record every event of every call.
//
// The interceptor hands every TraceEvent to Stats::Record, whatever the trace
// verbosity. From those events Stats counts, per method:
//
//   calls        calls that ended (one terminal event each: an attempt whose
//                decision is done or give_up, or a fail-fast);
//   attempts     attempts that ended (kAttempt events);
//   retries      attempts followed by a retry;
//   give_ups     calls that gave up, by GiveUpReason;
//   fail_fasts   calls ended without sending the attempt they were about to
//                send (kFailFast events), by reason;
//   retry delay  a histogram of the backoff before each retry, in seconds;
//   attempts per call  a histogram, 1 to 10 and above (a fail-fast before
//                the first attempt counts 0, in the first bucket);
//
// and per breaker key, its transitions by the state it went to. No separate
// "call ended" record is needed: the terminal event says how many attempts
// the call made.
//
// Snapshot() copies the counters into plain structs, and ToPrometheusText
// writes them in Prometheus' text exposition format, for the application to
// serve from its own HTTP endpoint:
//
//   rpcguard::Stats stats;
//   ...  // Options carries &stats; the interceptor records into it
//   std::string body = rpcguard::ToPrometheusText(stats.Snapshot());
//
// Cost: recording is a few relaxed atomic increments. Finding a method's
// counters is a hash-map lookup under a shared lock, which the interceptor
// avoids on the call path by caching the MethodHandle of each method.

#ifndef RPCGUARD_OBSERVABILITY_STATS_H_
#define RPCGUARD_OBSERVABILITY_STATS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {

// Upper bounds of the retry-delay histogram's buckets, in milliseconds (the
// +Inf bucket is implied). From rpcguard's smallest useful backoff to the
// longest pushback worth waiting for.
inline constexpr std::array<double, 13> kRetryDelayBucketsMs = {
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

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

// One method's counters. See the file comment for what each counts.
struct MethodStatsSnapshot {
  std::string method;
  uint64_t calls = 0;
  uint64_t attempts = 0;
  uint64_t retries = 0;
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
};

// All counters at one moment. Each counter is read atomically, but not all of
// them at the same instant: a snapshot taken while calls run may count an
// attempt whose call it does not count yet.
struct StatsSnapshot {
  // Sorted by method name.
  std::vector<MethodStatsSnapshot> methods;
  // Sorted by key.
  std::vector<BreakerStatsSnapshot> breakers;

  // The method's counters, or null if it has none.
  const MethodStatsSnapshot* FindMethod(absl::string_view method) const;
  // The breaker's counters, or null if it has none.
  const BreakerStatsSnapshot* FindBreaker(absl::string_view key) const;
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

  Stats();
  ~Stats();
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  // Returns the counters of `method`, creating them on first use. Never null.
  // Takes a shared lock (an exclusive one the first time a method is seen).
  MethodHandle* ForMethod(absl::string_view method) ABSL_LOCKS_EXCLUDED(mu_);

  // Counts `event` against `handle`, which must come from this Stats' own
  // ForMethod (the event's `method` field is not looked at). Lock-free for
  // kAttempt and kFailFast events; a kBreakerTransition takes the breaker
  // map's lock (transitions are rare).
  void Record(MethodHandle* handle, const TraceEvent& event)
      ABSL_LOCKS_EXCLUDED(mu_);

  // As above, looking the method up by `event.method` (not at all for a
  // breaker transition, which is counted per breaker key only).
  void Record(const TraceEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a hedged call that ended: `copies` sent in all, whether a copy
  // after the first won, how many were cancelled because another decided
  // the call, and the hedge delay it used. Lock-free.
  void RecordHedgedCall(MethodHandle* handle, int copies, bool later_copy_won,
                        int cancelled, absl::Duration delay);

  // Copies every counter.
  StatsSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // How many breaker keys and methods have counters, for tests and
  // operators watching memory.
  size_t breaker_keys() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t method_keys() const ABSL_LOCKS_EXCLUDED(mu_);

  // Breaker keys held before any is dropped (see the class comment).
  static constexpr size_t kMinBreakersSweepAt = 1024;

 private:
  struct BreakerCounters;

  void RecordTransition(const TraceEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  // Values are never removed, so handles stay valid.
  absl::flat_hash_map<std::string, std::unique_ptr<MethodHandle>> methods_
      ABSL_GUARDED_BY(mu_);
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

  // All written by Record (relaxed increments), read by Snapshot.
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> attempts{0};
  std::atomic<uint64_t> retries{0};
  std::array<std::atomic<uint64_t>, kReasons> give_ups{};
  std::array<std::atomic<uint64_t>, kReasons> fail_fasts{};
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
// every metric family with its HELP and TYPE lines, label values escaped:
//
//   rpcguard_calls_total{method}                     counter
//   rpcguard_attempts_total{method}                  counter
//   rpcguard_retries_total{method}                   counter
//   rpcguard_give_ups_total{method,reason}           counter
//   rpcguard_fail_fasts_total{method,reason}         counter
//   rpcguard_retry_delay_seconds{method}             histogram
//   rpcguard_attempts_per_call{method}               histogram
//   rpcguard_hedges_total{method}                    counter
//   rpcguard_hedges_won_total{method}                counter
//   rpcguard_copies_cancelled_total{method}          counter
//   rpcguard_hedge_delay_seconds{method}             gauge
//   rpcguard_breaker_transitions_total{breaker,to}   counter
//
// Label sets with a zero count are left out for the by-reason and
// transition counters.
std::string ToPrometheusText(const StatsSnapshot& snapshot);

}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_STATS_H_
