// Copyright rpcguard authors.

#include "rpcguard/destination/retry_budget.h"

#include <cmath>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "option_checks.h"  // private to :destination
#include "rpcguard/internal/mutex.h"
#include "rpcguard/internal/sliding_window.h"

namespace rpcguard {

using internal::InvalidOption;

namespace {

// Slack for the budget comparison, so that binary rounding of ratio x count
// (0.2 x 1000 = 200.00000000000003) never refuses a retry that fits exactly.
constexpr double kAllowanceSlack = 1e-9;

}  // namespace

struct RetryBudget::State {
  State(absl::Duration window, int buckets)
      : first_attempts(window, buckets), retries(window, buckets) {}

  // Whether one more retry fits in ratio x first attempts + floor, over the
  // window that ends at `now`.
  bool AllowsOneMoreLocked(absl::Time now, double ratio, double floor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // First attempts (a; b unused), with locks of its own.
  internal::StripedWindow first_attempts;

  internal::Mutex mu;
  // Granted retries (a; b unused).
  internal::SlidingWindow retries ABSL_GUARDED_BY(mu);
  uint64_t refused ABSL_GUARDED_BY(mu) = 0;
};

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
      impl_(std::make_unique<State>(options.window, options.buckets)) {}

RetryBudget::~RetryBudget() = default;

bool RetryBudget::State::AllowsOneMoreLocked(absl::Time now, double ratio,
                                             double floor) {
  // A first attempt counted concurrently may be missed: that only makes
  // this decision stricter, never overdraws.
  const int64_t first = first_attempts.Sum(now).a;
  const int64_t granted = retries.Sum(now).a;
  const double allowance = ratio * static_cast<double>(first) + floor;
  return static_cast<double>(granted + 1) <= allowance + kAllowanceSlack;
}

void RetryBudget::RecordFirstAttempt() {
  impl_->first_attempts.Add(clock_->Now(), 1, 0);
}

bool RetryBudget::TryAcquireRetry() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&impl_->mu);
  if (!impl_->AllowsOneMoreLocked(now, options_.ratio, floor_)) {
    ++impl_->refused;
    return false;
  }
  impl_->retries.Add(now, 1, 0);
  return true;
}

bool RetryBudget::CanAcquireRetry() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&impl_->mu);
  return impl_->AllowsOneMoreLocked(now, options_.ratio, floor_);
}

RetryBudgetSnapshot RetryBudget::Snapshot() {
  const absl::Time now = clock_->Now();
  internal::MutexLock lock(&impl_->mu);
  RetryBudgetSnapshot s;
  s.first_attempts = impl_->first_attempts.Sum(now).a;
  s.retries = impl_->retries.Sum(now).a;
  s.allowance = options_.ratio * static_cast<double>(s.first_attempts) + floor_;
  s.refused = impl_->refused;
  return s;
}

}  // namespace rpcguard
