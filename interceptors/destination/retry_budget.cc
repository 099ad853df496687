// Copyright rpcguard authors.

#include "rpcguard/destination/retry_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "option_checks.h"  // private to :destination

namespace rpcguard {

using internal::InvalidOption;

namespace {

// gRFC A6's bound on retryThrottling.maxTokens (gRPC enforces it too).
constexpr double kMaxRetryTokens = 1000;
// Slack for the budget comparison, so that binary rounding of ratio x count
// (0.2 x 1000 = 200.00000000000003) never refuses a retry that fits exactly.
constexpr double kAllowanceSlack = 1e-9;

}  // namespace

// ---------------------------------------------------------------------------
// RetryBudget

absl::Status RetryBudgetOptions::Validate() const {
  if (absl::Status s = internal::CheckWindow("retryBudget", window, buckets);
      !s.ok()) {
    return s;
  }
  // More retries than calls is no budget at all.
  if (!(ratio >= 0 && ratio <= 1)) {
    return InvalidOption("retryBudget.ratio", "must be in [0, 1]");
  }
  if (!(min_retries_per_second >= 0 && std::isfinite(min_retries_per_second))) {
    return InvalidOption("retryBudget.minRetriesPerSecond",
                         "must be a finite number, at least 0");
  }
  if (ratio == 0 && min_retries_per_second == 0) {
    return InvalidOption("retryBudget",
                         "ratio and minRetriesPerSecond are both 0, which "
                         "forbids every retry");
  }
  return absl::OkStatus();
}

bool RetryBudgetOptions::operator==(const RetryBudgetOptions& o) const {
  return window == o.window && buckets == o.buckets && ratio == o.ratio &&
         min_retries_per_second == o.min_retries_per_second;
}

absl::StatusOr<std::shared_ptr<RetryBudget>> RetryBudget::Create(
    const RetryBudgetOptions& options, Clock* clock) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::shared_ptr<RetryBudget>(
      new RetryBudget(options, clock == nullptr ? Clock::Real() : clock));
}

RetryBudget::RetryBudget(const RetryBudgetOptions& options, Clock* clock)
    : options_(options),
      clock_(clock),
      floor_(options.min_retries_per_second *
             absl::ToDoubleSeconds(options.window)),
      first_attempts_(options.window, options.buckets),
      retries_(options.window, options.buckets) {}

void RetryBudget::RecordFirstAttempt() {
  first_attempts_.Add(clock_->Now(), 1, 0);
}

bool RetryBudget::AllowsOneMoreLocked(absl::Time now) {
  // A first attempt counted concurrently may be missed: that only makes
  // this decision stricter, never overdraws.
  const int64_t first_attempts = first_attempts_.Sum(now).a;
  const int64_t retries = retries_.Sum(now).a;
  const double allowance =
      options_.ratio * static_cast<double>(first_attempts) + floor_;
  return static_cast<double>(retries + 1) <= allowance + kAllowanceSlack;
}

bool RetryBudget::TryAcquireRetry() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&mu_);
  if (!AllowsOneMoreLocked(now)) {
    ++refused_;
    return false;
  }
  retries_.Add(now, 1, 0);
  return true;
}

bool RetryBudget::CanAcquireRetry() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&mu_);
  return AllowsOneMoreLocked(now);
}

RetryBudgetSnapshot RetryBudget::Snapshot() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&mu_);
  RetryBudgetSnapshot s;
  s.first_attempts = first_attempts_.Sum(now).a;
  s.retries = retries_.Sum(now).a;
  s.allowance = options_.ratio * static_cast<double>(s.first_attempts) + floor_;
  s.refused = refused_;
  return s;
}

// ---------------------------------------------------------------------------
// RetryThrottle

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
