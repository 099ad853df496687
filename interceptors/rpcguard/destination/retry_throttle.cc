// Copyright rpcguard authors.

#include "rpcguard/destination/retry_throttle.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "rpcguard/destination/option_checks.h"

namespace rpcguard {

using internal::InvalidOption;

namespace {

// gRFC A6's bound on retryThrottling.maxTokens (gRPC enforces it too).
constexpr double kMaxRetryTokens = 1000;

}  // namespace

namespace internal {

int64_t ToThousandths(double value) {
  if (!(value > 0)) return 0;
  // Far beyond any valid maxTokens; keeps the conversion defined.
  if (value > 1e12) return int64_t{1000000000000000};
  return static_cast<int64_t>(std::floor(value * 1000 + 1e-6));
}

}  // namespace internal

absl::Status RetryThrottleOptions::Validate() const {
  if (!(max_tokens > 0)) {
    return InvalidOption("retryThrottling.maxTokens", "must be greater than 0");
  }
  if (max_tokens > kMaxRetryTokens) {
    return InvalidOption("retryThrottling.maxTokens",
                         absl::StrCat("must be at most ", kMaxRetryTokens));
  }
  if (internal::ToThousandths(max_tokens) < 1) {
    return InvalidOption("retryThrottling.maxTokens", "must be at least 0.001");
  }
  if (!(token_ratio > 0)) {
    return InvalidOption("retryThrottling.tokenRatio",
                         "must be greater than 0");
  }
  if (!std::isfinite(token_ratio)) {
    return InvalidOption("retryThrottling.tokenRatio", "must be finite");
  }
  if (internal::ToThousandths(token_ratio) < 1) {
    return InvalidOption("retryThrottling.tokenRatio",
                         "must be at least 0.001 (3 decimal places are kept)");
  }
  return absl::OkStatus();
}

bool RetryThrottleOptions::operator==(const RetryThrottleOptions& o) const {
  return max_tokens == o.max_tokens && token_ratio == o.token_ratio;
}

absl::StatusOr<std::shared_ptr<RetryThrottle>> RetryThrottle::Create(
    const RetryThrottleOptions& options) {
  return Create(options, nullptr);
}

absl::StatusOr<std::shared_ptr<RetryThrottle>> RetryThrottle::Create(
    const RetryThrottleOptions& options, const RetryThrottle* previous) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const int64_t max_milli = internal::ToThousandths(options.max_tokens);
  int64_t initial = max_milli;
  if (previous != nullptr) {
    // Keep the same fraction of a full bucket (as gRPC does).
    initial = previous->milli_tokens() * max_milli / previous->max_milli_;
  }
  return std::shared_ptr<RetryThrottle>(new RetryThrottle(options, initial));
}

RetryThrottle::RetryThrottle(const RetryThrottleOptions& options,
                             int64_t initial_milli)
    : options_(options),
      max_milli_(internal::ToThousandths(options.max_tokens)),
      ratio_milli_(internal::ToThousandths(options.token_ratio)),
      milli_tokens_(std::clamp<int64_t>(initial_milli, 0, max_milli_)) {}

bool RetryThrottle::RecordFailure() {
  int64_t current = milli_tokens_.load(std::memory_order_relaxed);
  int64_t next;
  do {
    next = std::max<int64_t>(current - 1000, 0);
  } while (!milli_tokens_.compare_exchange_weak(current, next,
                                                std::memory_order_relaxed));
  return next > max_milli_ / 2;
}

void RetryThrottle::RecordSuccess() {
  int64_t current = milli_tokens_.load(std::memory_order_relaxed);
  int64_t next;
  do {
    next = std::min(current + ratio_milli_, max_milli_);
  } while (!milli_tokens_.compare_exchange_weak(current, next,
                                                std::memory_order_relaxed));
}

bool RetryThrottle::RetryAllowed() const {
  return milli_tokens_.load(std::memory_order_relaxed) > max_milli_ / 2;
}

}  // namespace rpcguard
