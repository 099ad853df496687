// Copyright rpcguard authors.
//
// RetryThrottle: gRFC A6's `retryThrottling {maxTokens, tokenRatio}`,
// exactly: a token count starts at maxTokens; each attempt that fails with a
// retryable status (or with pushback saying not to retry) takes 1 token
// (down to 0), each success adds tokenRatio (up to maxTokens); retries are
// allowed only while the count is above maxTokens / 2. For users who bring
// their gRPC service config along. Unlike RetryBudget (retry_budget.h) it is
// absolute, not relative to traffic (grpc-go#7539), which is why the budget
// exists.
//
// The interceptor feeds the throttle every attempt's outcome, retries
// included, as gRPC's own retry filter does: OK -> RecordSuccess(); a
// retryable status or pushback saying not to retry -> RecordFailure(), whose
// false return means no retry (give-up reason budget_exhausted); any other
// status -> nothing.
//
// BreakerRegistry (registry.h) keeps one throttle per key, next to the key's
// circuit breaker and retry budget.

#ifndef RPCGUARD_DESTINATION_RETRY_THROTTLE_H_
#define RPCGUARD_DESTINATION_RETRY_THROTTLE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rpcguard {

// gRFC A6's retryThrottling. The defaults are A6's example (A6 itself has
// none: in JSON both fields are required).
struct RetryThrottleOptions {
  // "maxTokens": in (0, 1000] (gRPC's bound).
  double max_tokens = 10;
  // "tokenRatio": > 0; as in A6, 3 decimal places are kept and the rest are
  // dropped, so it must be at least 0.001.
  double token_ratio = 0.1;

  // OK, or InvalidArgument naming the first bad field by its JSON name, e.g.
  // "retryThrottling.maxTokens: must be greater than 0".
  absl::Status Validate() const;

  bool operator==(const RetryThrottleOptions& other) const;
  bool operator!=(const RetryThrottleOptions& other) const {
    return !(*this == other);
  }
};

// gRFC A6's token bucket. Tokens are kept in thousandths (as gRPC does), so
// the arithmetic is exact. Thread-safe and lock-free.
class RetryThrottle {
 public:
  // Errors: InvalidArgument from options.Validate().
  static absl::StatusOr<std::shared_ptr<RetryThrottle>> Create(
      const RetryThrottleOptions& options);

  // Starts from `previous`'s token count scaled to these options' maxTokens
  // (how gRPC carries a throttle over a config change). `previous` may be
  // null (start full).
  static absl::StatusOr<std::shared_ptr<RetryThrottle>> Create(
      const RetryThrottleOptions& options, const RetryThrottle* previous);

  RetryThrottle(const RetryThrottle&) = delete;
  RetryThrottle& operator=(const RetryThrottle&) = delete;

  // Records an attempt that failed with a retryable status, or with server
  // pushback saying not to retry: takes one token (not below 0). Returns
  // whether a retry is still allowed after it (RetryAllowed()).
  bool RecordFailure();

  // Records a successful attempt: adds tokenRatio (not above maxTokens).
  void RecordSuccess();

  // Whether the token count is above maxTokens / 2.
  bool RetryAllowed() const;

  // The token count, in thousandths of a token.
  int64_t milli_tokens() const {
    return milli_tokens_.load(std::memory_order_relaxed);
  }
  int64_t max_milli_tokens() const { return max_milli_; }
  int64_t milli_token_ratio() const { return ratio_milli_; }

  const RetryThrottleOptions& options() const { return options_; }

 private:
  RetryThrottle(const RetryThrottleOptions& options, int64_t initial_milli);

  const RetryThrottleOptions options_;
  const int64_t max_milli_;
  const int64_t ratio_milli_;
  // Written by every attempt's outcome, with compare-and-swap.
  std::atomic<int64_t> milli_tokens_;
};

namespace internal {
// A6's conversion of maxTokens and tokenRatio to thousandths: 3 decimal
// places, the rest dropped (tolerating binary rounding, so 0.29 is 290).
int64_t ToThousandths(double value);
}  // namespace internal

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_RETRY_THROTTLE_H_
