// Copyright rpcguard authors.
//
// AdaptiveThrottle: client-side adaptive throttling of one destination, as
// the SRE book's "Handling Overload" describes it. Over a sliding window
// (two minutes by default) it counts
//   requests: every attempt the application's calls made to the
//             destination, those refused here included;
//   accepts:  every answer from the server that was not an overload
//             rejection (RESOURCE_EXHAUSTED). An answer that carries
//             rpcguard's gave-up trailer is an accept: the server answered,
//             it was a service below it that failed.
// Attempts that never reached the server (no connection, an error the
// client made itself, the caller's cancel) count in neither. A new attempt
// is refused here with probability
//   max(0, (requests - K x accepts) / (requests + 1)).
// K = 2 lets through up to twice what the server accepts: the server still
// sees enough traffic to show when it has recovered, and a client wastes at
// most half its sends on rejections. K = 1 is the most aggressive.
//
// How it divides the work with the circuit breaker (breaker.h): the breaker
// is for a destination that is down (it counts failures and stops every
// call, then probes); the throttle is for one that is overloaded (it counts
// overload rejections, which the breaker does not, and sheds in proportion
// to them, never all calls). Both are shared per destination key in a
// BreakerRegistry.
//
// The throttle's window is long, so it answers a sustained overload; a
// short one (a few seconds) would be over before the window's accepts are
// outweighed. For that, retries: a retry of an overload rejection is refused
// while the destination has rejected `burstRejections` (5) or more calls as
// overloaded within the last second (RetryAfterRejectionAllowed), as gRPC's
// retryThrottling with its common 10 tokens stops after about 5 failures. A
// lone rejection (a quota) is still retried.
//
// The no-failure path: while no overload rejection or refusal is in the
// window, the probability is exactly 0 (requests == accepts), so Admit
// reads one atomic and counts nothing; each answer adds to a striped
// window. Thread-safe.

#ifndef RPCGUARD_DESTINATION_ADAPTIVE_THROTTLE_H_
#define RPCGUARD_DESTINATION_ADAPTIVE_THROTTLE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/base/sliding_window.h"
#include "rpcguard/clock.h"
#include "rpcguard/random.h"

namespace rpcguard {

// The JSON object "rpcguard.adaptiveThrottling".
struct AdaptiveThrottleOptions {
  // "k": how much more than the server accepts is let through; at least 1.
  double k = 2;
  // "window": how far back requests and accepts count.
  absl::Duration window = absl::Minutes(2);
  // "buckets": the window moves a bucket at a time.
  int buckets = 60;
  // "minRequests": nothing is refused while the window holds fewer
  // requests; at least 1.
  int min_requests = 20;
  // "burstRejections": overload rejections within one second from which
  // rejections are no longer retried; at least 1.
  int burst_rejections = 5;

  // OK, or InvalidArgument naming the first bad field by its JSON name,
  // e.g. "adaptiveThrottling.k: must be a finite number, at least 1".
  absl::Status Validate() const;

  bool operator==(const AdaptiveThrottleOptions& o) const {
    return k == o.k && window == o.window && buckets == o.buckets &&
           min_requests == o.min_requests &&
           burst_rejections == o.burst_rejections;
  }
  bool operator!=(const AdaptiveThrottleOptions& o) const {
    return !(*this == o);
  }
};

// What the throttle counts now, for tests, traces and debug pages.
struct AdaptiveThrottleSnapshot {
  int64_t requests = 0;
  int64_t accepts = 0;
  double reject_probability = 0;
};

class AdaptiveThrottle {
 public:
  // `clock` (its monotonic time) and `random` (the draws) must outlive the
  // throttle; null: Clock::Real(), Random::Default(). Errors:
  // InvalidArgument from options.Validate().
  static absl::StatusOr<std::shared_ptr<AdaptiveThrottle>> Create(
      const AdaptiveThrottleOptions& options, Clock* clock,
      Random* random = nullptr);

  AdaptiveThrottle(const AdaptiveThrottle&) = delete;
  AdaptiveThrottle& operator=(const AdaptiveThrottle&) = delete;

  // Whether an attempt may be sent now: false with the probability above
  // (drawn only when it is above 0). A refusal is counted as a request.
  bool Admit();
  // The same at `now`, a reading of this throttle's clock the caller has
  // already taken (one read for several questions).
  bool Admit(absl::Time now);

  // Records the server's answer to an admitted attempt: `overloaded` for an
  // overload rejection. Not for attempts that never reached the server.
  void RecordAnswer(bool overloaded);
  // The same, the answer having come at `now` (as for Admit).
  void RecordAnswer(bool overloaded, absl::Time now);

  // Whether an overload rejection may be retried now: fewer than
  // burstRejections of them in the last second.
  bool RetryAfterRejectionAllowed() const;

  AdaptiveThrottleSnapshot Snapshot() const;

  // Whether the window holds nothing but accepts (no overload rejection or
  // refusal): the throttle would refuse nothing, and one made afresh would
  // decide the same until the next rejection. A registry may then forget it.
  bool Settled() const { return Settled(clock_->MonotonicNow()); }
  // The same at `now`, a reading of this throttle's clock.
  bool Settled(absl::Time now) const;
  const AdaptiveThrottleOptions& options() const { return options_; }

 private:
  AdaptiveThrottle(const AdaptiveThrottleOptions& options, Clock* clock,
                   Random* random);
  double Probability(absl::Time now) const;
  // Marks the window as holding something that is not an accept.
  void Unsettle(absl::Time now);

  const AdaptiveThrottleOptions options_;
  Clock* const clock_;
  Random* const random_;
  // a: requests, b: accepts.
  mutable internal::StripedWindow window_;
  // Until when (monotonic nanoseconds) the window may hold a rejection or a
  // refusal: before it, the probability may be above 0 and must be summed.
  std::atomic<int64_t> unsettled_until_{INT64_MIN};
  // Overload rejections of the last second, in quarter-second buckets
  // (a: rejections). Touched only when a rejection comes or is retried.
  mutable internal::Mutex burst_mu_;
  mutable internal::SlidingWindow burst_ ABSL_GUARDED_BY(burst_mu_);
};

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_ADAPTIVE_THROTTLE_H_
