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
// internal::StripedWindow: the same, split into stripes that threads are
// spread over, so that threads counting at once do not wait for one lock or
// bounce one cache line between cores (Java's LongAdder does the same). A
// sum reads every stripe, so it costs more: callers sum only when a decision
// needs it.
//
// Internal to rpcguard. SlidingWindow is thread-compatible (the owner locks);
// StripedWindow is thread-safe.

#ifndef RPCGUARD_BASE_SLIDING_WINDOW_H_
#define RPCGUARD_BASE_SLIDING_WINDOW_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"

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
    // Most adds land in the latest bucket: no division, no conversion.
    Bucket* bucket = now < latest_end_ ? &buckets_[latest_slot_] : nullptr;
    if (bucket == nullptr) {
      Advance(now);
      bucket = &buckets_[latest_slot_];
    }
    // A bucket of another epoch has left the window: Advance took it out of
    // the totals.
    if (bucket->epoch != latest_) *bucket = Bucket{latest_, Counts{}};
    bucket->counts.a += a;
    bucket->counts.b += b;
    total_.a += a;
    total_.b += b;
  }

  // Sums the buckets inside the window that ends at `now`. Constant time:
  // the totals are kept as buckets are added to and leave the window.
  Counts Sum(absl::Time now) {
    if (!(now < latest_end_)) Advance(now);
    return total_;
  }

  // Forgets every count.
  void Clear() {
    for (Bucket& bucket : buckets_) bucket = Bucket{};
    total_ = Counts{};
    // latest_ stays: a later time still starts a later bucket.
  }

 private:
  struct Bucket {
    int64_t epoch = INT64_MIN;  // never inside a window
    Counts counts;
  };

  // Moves the window to end at `now`'s bucket, if that is later than
  // latest_.
  void Advance(absl::Time now) {
    const int64_t ns = absl::ToUnixNanos(now);
    // Floor division: times before 1970 still map to increasing buckets.
    int64_t epoch = ns / width_ns_;
    if (ns % width_ns_ < 0) --epoch;
    if (epoch <= latest_) return;
    // Once per bucket width at most: take the buckets that leave the
    // window out of the totals.
    latest_ = epoch;
    latest_slot_ = Slot(epoch);
    // Saturates rather than overflow at the far end of time.
    latest_end_ = epoch >= INT64_MAX / width_ns_
                      ? absl::InfiniteFuture()
                      : absl::FromUnixNanos((epoch + 1) * width_ns_);
    const int64_t oldest = epoch - static_cast<int64_t>(buckets_.size()) + 1;
    for (Bucket& bucket : buckets_) {
      if (bucket.epoch != INT64_MIN && bucket.epoch < oldest) {
        total_.a -= bucket.counts.a;
        total_.b -= bucket.counts.b;
        bucket = Bucket{};
      }
    }
  }

  size_t Slot(int64_t epoch) const {
    const int64_t n = static_cast<int64_t>(buckets_.size());
    return static_cast<size_t>(((epoch % n) + n) % n);
  }

  const int64_t width_ns_;
  std::vector<Bucket> buckets_;
  int64_t latest_ = INT64_MIN;
  size_t latest_slot_ = 0;
  // Where latest_'s bucket ends: a time before it adds to that bucket.
  absl::Time latest_end_ = absl::InfinitePast();
  Counts total_;  // of the buckets inside the window ending at latest_
};

class StripedWindow {
 public:
  // At most this many stripes; more threads share stripes (still correct,
  // a little contention).
  static constexpr int kMaxStripes = 8;

  // One stripe per core, up to kMaxStripes: no more threads than cores count
  // at once, and every stripe more costs each Sum one more lock (a retry
  // budget's decision sums on every retry).
  static int StripeCount() {
    static const int n = static_cast<int>(std::clamp<unsigned>(
        std::thread::hardware_concurrency(), 1, kMaxStripes));
    return n;
  }

  StripedWindow(absl::Duration window, int buckets) {
    stripes_.reserve(StripeCount());
    for (int i = 0; i < StripeCount(); ++i) {
      stripes_.push_back(std::make_unique<Stripe>(window, buckets));
    }
  }

  // Adds to the calling thread's stripe if `keep()`, called under that
  // stripe's lock, returns true (so that a check and the add are atomic with
  // respect to LockAll()). Returns whether it added. The circuit breaker's
  // generation check relies on this (invariants 1 and 3 in
  // destination/breaker.cc).
  template <typename Keep>
  bool AddIf(absl::Time now, int64_t a, int64_t b, Keep keep) {
    Stripe& stripe = *stripes_[ThisThreadStripe()];
    ScopedLock<SpinLock> lock(&stripe.mu);
    if (!keep()) return false;
    stripe.window.Add(now, a, b);
    return true;
  }

  void Add(absl::Time now, int64_t a, int64_t b) {
    AddIf(now, a, b, [] { return true; });
  }

  // Sums every stripe, locking each in turn. Must not be called while
  // holding LockAll().
  SlidingWindow::Counts Sum(absl::Time now) {
    SlidingWindow::Counts sum;
    for (auto& stripe : stripes_) {
      ScopedLock<SpinLock> lock(&stripe->mu);
      const SlidingWindow::Counts c = stripe->window.Sum(now);
      sum.a += c.a;
      sum.b += c.b;
    }
    return sum;
  }

  // Holds every stripe's lock, so that the owner can clear the counts and
  // change what AddIf's checks see as one step. Rare (state changes).
  void LockAll() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto& stripe : stripes_) stripe->mu.Lock();
  }
  void UnlockAll() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto& stripe : stripes_) stripe->mu.Unlock();
  }
  // Forgets every count; between LockAll() and UnlockAll() only.
  void ClearLocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto& stripe : stripes_) stripe->window.Clear();
  }

 private:
  // A cache line of its own for the lock and the window's bookkeeping.
  struct alignas(64) Stripe {
    Stripe(absl::Duration window, int buckets) : window(window, buckets) {}
    SpinLock mu;
    SlidingWindow window ABSL_GUARDED_BY(mu);
  };

  // Threads take stripes round-robin, in the order they first count.
  // (Constant-initialized, so that reading it needs no guard.)
  static size_t ThisThreadStripe() {
    thread_local size_t stripe_plus_one = 0;
    if (stripe_plus_one == 0) {
      static std::atomic<size_t> next{0};
      stripe_plus_one =
          next.fetch_add(1, std::memory_order_relaxed) % StripeCount() + 1;
    }
    return stripe_plus_one - 1;
  }

  std::vector<std::unique_ptr<Stripe>> stripes_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_SLIDING_WINDOW_H_
