// Copyright rpcguard authors.

#include "rpcguard/destination/adaptive_throttle.h"

#include <algorithm>
#include <cmath>

#include "rpcguard/destination/option_checks.h"

namespace rpcguard {

absl::Status AdaptiveThrottleOptions::Validate() const {
  if (absl::Status s =
          internal::CheckWindow("adaptiveThrottling", window, buckets);
      !s.ok()) {
    return s;
  }
  // Below 1 the throttle would refuse calls the server accepts.
  if (!(k >= 1 && std::isfinite(k))) {
    return internal::InvalidOption("adaptiveThrottling.k",
                                   "must be a finite number, at least 1");
  }
  if (burst_rejections < 1) {
    return internal::InvalidOption("adaptiveThrottling.burstRejections",
                                   "must be at least 1");
  }
  if (min_requests < 1) {
    return internal::InvalidOption("adaptiveThrottling.minRequests",
                                   "must be at least 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<AdaptiveThrottle>> AdaptiveThrottle::Create(
    const AdaptiveThrottleOptions& options, Clock* clock, Random* random) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::shared_ptr<AdaptiveThrottle>(
      new AdaptiveThrottle(options, clock != nullptr ? clock : Clock::Real(),
                           random != nullptr ? random : Random::Default()));
}

AdaptiveThrottle::AdaptiveThrottle(const AdaptiveThrottleOptions& options,
                                   Clock* clock, Random* random)
    : options_(options),
      clock_(clock),
      random_(random),
      window_(options.window, options.buckets),
      burst_(absl::Seconds(1), 4) {}

void AdaptiveThrottle::Unsettle(absl::Time now) {
  const int64_t until = absl::ToUnixNanos(now + options_.window);
  int64_t seen = unsettled_until_.load(std::memory_order_relaxed);
  while (seen < until && !unsettled_until_.compare_exchange_weak(
                             seen, until, std::memory_order_relaxed)) {
  }
}

double AdaptiveThrottle::Probability(absl::Time now) const {
  const internal::SlidingWindow::Counts c = window_.Sum(now);
  if (c.a < options_.min_requests) return 0;
  const double requests = static_cast<double>(c.a);
  const double accepts = static_cast<double>(c.b);
  return std::max(0.0, (requests - options_.k * accepts) / (requests + 1));
}

bool AdaptiveThrottle::Admit() { return Admit(clock_->MonotonicNow()); }

bool AdaptiveThrottle::Admit(absl::Time now) {
  // Only accepts in the window: requests == accepts, so the probability is
  // 0 for any k >= 1.
  if (Settled(now)) return true;
  const double p = Probability(now);
  if (p <= 0) return true;
  // 53 random bits: a uniform double in [0, 1).
  const double u = static_cast<double>(random_->Next64() >> 11) * 0x1.0p-53;
  if (u >= p) return true;
  window_.Add(now, 1, 0);
  Unsettle(now);
  return false;
}

void AdaptiveThrottle::RecordAnswer(bool overloaded) {
  RecordAnswer(overloaded, clock_->MonotonicNow());
}

void AdaptiveThrottle::RecordAnswer(bool overloaded, absl::Time now) {
  window_.Add(now, 1, overloaded ? 0 : 1);
  if (overloaded) {
    Unsettle(now);
    internal::MutexLock lock(&burst_mu_);
    burst_.Add(now, 1, 0);
  }
}

bool AdaptiveThrottle::RetryAfterRejectionAllowed() const {
  const absl::Time now = clock_->MonotonicNow();
  internal::MutexLock lock(&burst_mu_);
  return burst_.Sum(now).a < options_.burst_rejections;
}

bool AdaptiveThrottle::Settled(absl::Time now) const {
  return absl::ToUnixNanos(now) >=
         unsettled_until_.load(std::memory_order_relaxed);
}

AdaptiveThrottleSnapshot AdaptiveThrottle::Snapshot() const {
  const absl::Time now = clock_->MonotonicNow();
  const internal::SlidingWindow::Counts c = window_.Sum(now);
  AdaptiveThrottleSnapshot s;
  s.requests = c.a;
  s.accepts = c.b;
  s.reject_probability = Probability(now);
  return s;
}

}  // namespace rpcguard
