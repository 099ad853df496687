// Copyright rpcguard authors.
//
// RetryBudget (Finagle's RetryBudget, the SRE book's per-client retry
// ratio): keeps retries from multiplying the load on a destination that is
// already failing. Retries are allowed while the retries of the last
// `window` stay within ratio x the first attempts of that window, plus a
// floor of minRetriesPerSecond x window so that a quiet client can still
// retry:
//
//   retries_in_window + 1 <= ratio * first_attempts_in_window
//                            + minRetriesPerSecond * window_seconds
//
// Under a total outage with steady load, attempts per call settle at
// 1 + ratio + floor / calls_per_second, whatever maxAttempts says; in normal
// operation (few failures) the budget is never the limit. Give-up reason
// when it refuses: budget_exhausted. (gRFC A6's absolute token bucket, for
// users of gRPC's service config, is RetryThrottle: retry_throttle.h.)
//
// BreakerRegistry (registry.h) keeps one budget per key, next to the key's
// circuit breaker and throttle: the interceptor uses the channel target (or
// target + service) for all three. Ask the breaker before the budget, so that
// a call the breaker refuses spends no budget (see breaker.h and, for the
// whole order of checks, decision/retry_gate.h).

#ifndef RPCGUARD_DESTINATION_RETRY_BUDGET_H_
#define RPCGUARD_DESTINATION_RETRY_BUDGET_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"

namespace rpcguard {

// Tuning of a RetryBudget. JSON names (rpcguard.retryBudget.<name>) are
// given with each field; durations are proto3 JSON strings ("10s").
struct RetryBudgetOptions {
  // "window", "buckets": first attempts and retries are counted over the
  // last `window`, in `buckets` buckets that age out one at a time. 10 s is
  // Finagle's TTL: long enough to smooth bursts, short enough that the
  // budget follows a change in traffic within seconds.
  absl::Duration window = absl::Seconds(10);
  int buckets = 10;

  // "ratio": retries allowed per first attempt, in [0, 1]. 0.2 is Finagle's
  // and Envoy's default (budget_percent 20%); the SRE book suggests 0.1.
  // 0.2 still retries every failure of a destination failing up to ~20% of
  // the time (where retries help), and holds an outage to 1.2x the load
  // (plus the floor) instead of maxAttempts x.
  double ratio = 0.2;

  // "minRetriesPerSecond": the floor, averaged over the window (10 s x 10/s
  // = 100 retries per window, which may come in a burst). 10/s is Finagle's
  // default: a client making a few calls a second can retry all of them.
  double min_retries_per_second = 10;

  // OK, or InvalidArgument naming the first bad field by its JSON name, e.g.
  // "retryBudget.ratio: must be in [0, 1]".
  absl::Status Validate() const;

  bool operator==(const RetryBudgetOptions& other) const;
  bool operator!=(const RetryBudgetOptions& other) const {
    return !(*this == other);
  }
};

// What a budget has counted, for tests and stats.
struct RetryBudgetSnapshot {
  int64_t first_attempts = 0;  // in the window
  int64_t retries = 0;         // granted, in the window
  double allowance = 0;        // ratio * first_attempts + floor * window
  uint64_t refused = 0;        // TryAcquireRetry refusals in all
};

// A retry budget shared by every call of one key. Thread-safe.
// RecordFirstAttempt, made by every call, counts into a striped window (each
// thread into its own stripe, so concurrent calls rarely share a lock);
// TryAcquireRetry, made only after a failure, sums the stripes under a
// per-budget mutex, so that concurrent retries never overdraw the budget.
class RetryBudget {
 public:
  // Errors: InvalidArgument from options.Validate(). `clock` (null:
  // Clock::Real()) must outlive the budget.
  static absl::StatusOr<std::shared_ptr<RetryBudget>> Create(
      const RetryBudgetOptions& options, Clock* clock = nullptr);

  RetryBudget(const RetryBudget&) = delete;
  RetryBudget& operator=(const RetryBudget&) = delete;
  ~RetryBudget();

  // Counts a call's first attempt: it earns `ratio` retries.
  void RecordFirstAttempt();

  // True, and counts the retry, when the budget allows one more retry now;
  // false (give-up reason budget_exhausted) otherwise.
  bool TryAcquireRetry();

  // Whether TryAcquireRetry would succeed now; spends and counts nothing.
  // Lets a call give up before waiting out a backoff the budget would not
  // pay for (a concurrent retry may still take the last one meanwhile).
  bool CanAcquireRetry();

  RetryBudgetSnapshot Snapshot();

  const RetryBudgetOptions& options() const { return options_; }

 private:
  // The windows and the lock, defined in retry_budget.cc so that this header
  // needs none of rpcguard's internal primitives.
  struct State;

  RetryBudget(const RetryBudgetOptions& options, Clock* clock);

  const RetryBudgetOptions options_;
  Clock* const clock_;
  // The floor's share of the allowance: minRetriesPerSecond x window.
  const double floor_;
  const std::unique_ptr<State> impl_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_RETRY_BUDGET_H_
