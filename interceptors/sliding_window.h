// Copyright rpcguard authors.
//
// internal::SlidingWindow: two counters summed over the last `window` of time,
// kept in `buckets` buckets (the circuit breaker counts attempts and failures,
// the retry budget first attempts and retries).
//
// Time is cut into buckets of window / buckets, numbered from the Unix epoch.
// A bucket is reused once its number falls out of the window, so old counts
// age out a bucket at a time: the sum covers between window - width and
// window of the past. No timers, no allocation after construction.
//
// Internal to rpcguard. Thread-compatible: the owner locks.

#ifndef RPCGUARD_INTERCEPTORS_SLIDING_WINDOW_H_
#define RPCGUARD_INTERCEPTORS_SLIDING_WINDOW_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace rpcguard {
namespace internal {

class SlidingWindow {
 public:
  struct Counts {
    int64_t a = 0;
    int64_t b = 0;
  };

  // `window` / `buckets` must be at least 1ns; `buckets` at least 1.
  SlidingWindow(absl::Duration window, int buckets)
      : width_ns_(std::max<int64_t>(
            1, absl::ToInt64Nanoseconds(window) / std::max(buckets, 1))),
        buckets_(static_cast<size_t>(std::max(buckets, 1))) {}

  // Adds to the bucket of `now`. A time earlier than one seen before counts
  // as that later time: callers read the clock before taking their lock, so
  // concurrent callers may arrive slightly out of order.
  void Add(absl::Time now, int64_t a, int64_t b) {
    const int64_t epoch = Advance(now);
    Bucket& bucket = buckets_[Slot(epoch)];
    if (bucket.epoch != epoch) bucket = Bucket{epoch, Counts{}};
    bucket.counts.a += a;
    bucket.counts.b += b;
  }

  // Sums the buckets inside the window that ends at `now`.
  Counts Sum(absl::Time now) {
    const int64_t epoch = Advance(now);
    const int64_t oldest = epoch - static_cast<int64_t>(buckets_.size()) + 1;
    Counts sum;
    for (const Bucket& bucket : buckets_) {
      if (bucket.epoch >= oldest && bucket.epoch <= epoch) {
        sum.a += bucket.counts.a;
        sum.b += bucket.counts.b;
      }
    }
    return sum;
  }

  // Forgets every count.
  void Clear() {
    for (Bucket& bucket : buckets_) bucket = Bucket{};
  }

 private:
  struct Bucket {
    int64_t epoch = INT64_MIN;  // never inside a window
    Counts counts;
  };

  int64_t Advance(absl::Time now) {
    const int64_t ns = absl::ToUnixNanos(now);
    // Floor division: times before 1970 still map to increasing buckets.
    int64_t epoch = ns / width_ns_;
    if (ns % width_ns_ < 0) --epoch;
    latest_ = std::max(latest_, epoch);
    return latest_;
  }

  size_t Slot(int64_t epoch) const {
    const int64_t n = static_cast<int64_t>(buckets_.size());
    return static_cast<size_t>(((epoch % n) + n) % n);
  }

  const int64_t width_ns_;
  std::vector<Bucket> buckets_;
  int64_t latest_ = INT64_MIN;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERCEPTORS_SLIDING_WINDOW_H_
