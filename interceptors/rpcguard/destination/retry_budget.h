// Copyright rpcguard authors.
//
// RetryBudget (Finagle's RetryBudget, the SRE book's per-client retry
// ratio): keeps retries from multiplying the load on a destination that is
// already failing, without taxing the retries that work. Over the last
// `window`:
//
//   paid_retries + 1 <= allowance
//   allowance = max(ratio * first_attempts, minRetriesPerSecond * window)
//
// What a retry pays depends on why it is made (RetryCharge, chosen by
// internal/engine/retry_gate.h from the failure it retries):
//   kOnFailure  the usual case (UNAVAILABLE, ABORTED): paid only if the retry
//               fails too; one that succeeds is refunded at once (AWS SDKs
//               refund a successful retry the same way). A blip that one
//               retry hides costs nothing, however many calls it hit at
//               once; an outage, where retries fail, pays for every one.
//               While unpaid, such retries in flight may not outnumber the
//               window's first attempts, so not knowing yet costs at most
//               one extra attempt per call, once.
//   kUpFront    the failure said overload (RESOURCE_EXHAUSTED, the server's
//               pushback, a per-attempt timeout): paid when sent, never
//               refunded, because a retry adds load to an overloaded server
//               even when it succeeds.
//   kFree       the failed attempt never reached the server (no
//               connection): its retry is the first attempt the server sees.
//
// The floor is a minimum, not an addition (Finagle adds it): with enough
// traffic (ratio * first_attempts above the floor) retries stay within
// `ratio` of the calls, so an outage or an overload never sees more than
// 1.2x the callers' load at the default ratio; a quiet client still gets
// the floor. Give-up reason when it refuses: budget_exhausted. (gRFC A6's
// absolute token bucket, for users of gRPC's service config, is
// RetryThrottle: retry_throttle.h.)
//
// BreakerRegistry (registry.h) keeps one budget per key, next to the key's
// circuit breaker and throttle: the interceptor uses the channel target (or
// target + service) for all three. Ask the breaker before the budget, so that
// a call the breaker refuses spends no budget (see breaker.h and, for the
// whole order of checks, internal/engine/retry_gate.h).

#ifndef RPCGUARD_DESTINATION_RETRY_BUDGET_H_
#define RPCGUARD_DESTINATION_RETRY_BUDGET_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

  // "ratio": paid retries allowed per first attempt, in [0, 1]. 0.2 is
  // Finagle's and Envoy's default (budget_percent 20%); the SRE book
  // suggests 0.1. With refunds, 0.2 pays for every failed retry of a
  // destination failing up to ~38% of the time at maxAttempts 3 (a retry
  // that succeeds is free), and holds an outage to 1.2x the load instead of
  // maxAttempts x.
  double ratio = 0.2;

  // "minRetriesPerSecond": the floor, averaged over the window (10 s x 10/s
  // = 100 paid retries per window, which may come in a burst). 10/s is
  // Finagle's default: a client making a few calls a second can retry all
  // of them.
  double min_retries_per_second = 10;

  // OK, or InvalidArgument naming the first bad field by its JSON name, e.g.
  // "retryBudget.ratio: must be in [0, 1]".
  absl::Status Validate() const;

  bool operator==(const RetryBudgetOptions& other) const;
  bool operator!=(const RetryBudgetOptions& other) const {
    return !(*this == other);
  }
};

// How a retry is paid for; see the top of this file.
enum class RetryCharge { kOnFailure, kUpFront, kFree };

// Returns "on_failure", "up_front" or "free".
absl::string_view RetryChargeName(RetryCharge charge);

// What a budget has counted, for tests and stats.
struct RetryBudgetSnapshot {
  int64_t first_attempts = 0;  // in the window
  int64_t retries = 0;         // paid, in the window
  // max(ratio * first_attempts, minRetriesPerSecond * window)
  double allowance = 0;
  int64_t unpaid_in_flight = 0;  // kOnFailure retries not yet ended
  uint64_t refunded = 0;         // kOnFailure retries that succeeded, in all
  uint64_t free = 0;             // kFree retries granted, in all
  uint64_t refused = 0;          // TryAcquireRetry refusals in all
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

  // True when the budget allows one more retry paid as `charge` now, and
  // counts it: kUpFront pays now, kOnFailure is counted in flight until
  // RecordRetryEnd, kFree always passes. False (give-up reason
  // budget_exhausted) otherwise.
  bool TryAcquireRetry(RetryCharge charge = RetryCharge::kUpFront);

  // Whether TryAcquireRetry(charge) would succeed now; spends and counts
  // nothing. Lets a call give up before waiting out a backoff the budget
  // would not pay for (a concurrent retry may still take the last one).
  bool CanAcquireRetry(RetryCharge charge = RetryCharge::kUpFront);

  // Ends a retry granted by TryAcquireRetry(kOnFailure): it is paid now if
  // `failed` (the server answered with a retriable failure), refunded
  // otherwise (it succeeded, or says nothing of the server: the caller
  // cancelled, no connection). Call exactly once per such grant, also when
  // the retry was not sent after all (failed = false). No-op for the other
  // charges.
  void RecordRetryEnd(RetryCharge charge, bool failed);

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
