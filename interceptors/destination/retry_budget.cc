// Copyright rpcguard authors.

#include "rpcguard/destination/retry_budget.h"

#include <cmath>
#include <cstdint>
#include <memory>

#include "option_checks.h"  // private to :destination

namespace rpcguard {

using internal::InvalidOption;

namespace {

// Slack for the budget comparison, so that binary rounding of ratio x count
// (0.2 x 1000 = 200.00000000000003) never refuses a retry that fits exactly.
constexpr double kAllowanceSlack = 1e-9;

}  // namespace

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

}  // namespace rpcguard
