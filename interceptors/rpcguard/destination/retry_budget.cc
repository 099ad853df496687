// Copyright rpcguard authors.

#include "rpcguard/destination/retry_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/base/sliding_window.h"
#include "rpcguard/destination/option_checks.h"

namespace rpcguard {

using internal::InvalidOption;

namespace {

// Slack for the budget comparison, so that binary rounding of ratio x count
// (0.2 x 1000 = 200.00000000000003) never refuses a retry that fits exactly.
constexpr double kAllowanceSlack = 1e-9;

}  // namespace

absl::string_view RetryChargeName(RetryCharge charge) {
  switch (charge) {
    case RetryCharge::kOnFailure:
      return "on_failure";
    case RetryCharge::kUpFront:
      return "up_front";
    case RetryCharge::kFree:
      return "free";
  }
  return "unknown";
}

struct RetryBudget::State {
  State(absl::Duration window, int buckets)
      : first_attempts(window, buckets), retries(window, buckets) {}

  // Whether one more retry paid as `charge` fits, over the window that ends
  // at `now`.
  bool AllowsOneMoreLocked(absl::Time now, double ratio, double floor,
                           RetryCharge charge)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // First attempts (a; b unused), with locks of its own.
  internal::StripedWindow first_attempts;

  internal::Mutex mu;
  // Paid retries (a; b unused).
  internal::SlidingWindow retries ABSL_GUARDED_BY(mu);
  int64_t unpaid_in_flight ABSL_GUARDED_BY(mu) = 0;
  uint64_t refunded ABSL_GUARDED_BY(mu) = 0;
  uint64_t free ABSL_GUARDED_BY(mu) = 0;
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
                                             double floor, RetryCharge charge) {
  if (charge == RetryCharge::kFree) return true;
  // A first attempt counted concurrently may be missed: that only makes
  // this decision stricter, never overdraws.
  const int64_t first = first_attempts.Sum(now).a;
  const int64_t paid = retries.Sum(now).a;
  const double allowance = std::max(ratio * static_cast<double>(first), floor);
  if (static_cast<double>(paid + 1) > allowance + kAllowanceSlack) {
    return false;
  }
  // Unpaid retries are a bet that the failure was a blip; never more of
  // them at once than there were calls, so a wrong bet costs one extra
  // attempt per call at most, before the failures are paid for.
  return charge != RetryCharge::kOnFailure ||
         unpaid_in_flight + 1 <= std::max<int64_t>(first, 1);
}

void RetryBudget::RecordFirstAttempt() {
  impl_->first_attempts.Add(clock_->MonotonicNow(), 1, 0);
}

bool RetryBudget::TryAcquireRetry(RetryCharge charge) {
  const absl::Time now = clock_->MonotonicNow();
  internal::MutexLock lock(&impl_->mu);
  if (!impl_->AllowsOneMoreLocked(now, options_.ratio, floor_, charge)) {
    ++impl_->refused;
    return false;
  }
  switch (charge) {
    case RetryCharge::kUpFront:
      impl_->retries.Add(now, 1, 0);
      break;
    case RetryCharge::kOnFailure:
      ++impl_->unpaid_in_flight;
      break;
    case RetryCharge::kFree:
      ++impl_->free;
      break;
  }
  return true;
}

bool RetryBudget::CanAcquireRetry(RetryCharge charge) {
  if (charge == RetryCharge::kFree) return true;
  const absl::Time now = clock_->MonotonicNow();
  internal::MutexLock lock(&impl_->mu);
  return impl_->AllowsOneMoreLocked(now, options_.ratio, floor_, charge);
}

void RetryBudget::RecordRetryEnd(RetryCharge charge, bool failed) {
  if (charge != RetryCharge::kOnFailure) return;
  const absl::Time now = clock_->MonotonicNow();
  internal::MutexLock lock(&impl_->mu);
  // Never below 0, even if a caller ends one grant twice.
  if (impl_->unpaid_in_flight > 0) --impl_->unpaid_in_flight;
  if (failed) {
    impl_->retries.Add(now, 1, 0);
  } else {
    ++impl_->refunded;
  }
}

RetryBudgetSnapshot RetryBudget::Snapshot() {
  const absl::Time now = clock_->MonotonicNow();
  internal::MutexLock lock(&impl_->mu);
  RetryBudgetSnapshot s;
  s.first_attempts = impl_->first_attempts.Sum(now).a;
  s.retries = impl_->retries.Sum(now).a;
  s.allowance =
      std::max(options_.ratio * static_cast<double>(s.first_attempts), floor_);
  s.unpaid_in_flight = impl_->unpaid_in_flight;
  s.refunded = impl_->refunded;
  s.free = impl_->free;
  s.refused = impl_->refused;
  return s;
}

}  // namespace rpcguard
