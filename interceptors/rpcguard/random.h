// Copyright rpcguard authors.
//
// Random: the one way rpcguard draws random numbers (backoff jitter,
// idempotency keys), injected so tests can fix the sequence.

#ifndef RPCGUARD_RANDOM_H_
#define RPCGUARD_RANDOM_H_

#include <cstdint>
#include <limits>

namespace rpcguard {

// A source of uniformly distributed 64-bit values. Implementations must be
// thread-safe: one source serves every call on every channel.
class Random {
 public:
  virtual ~Random() = default;

  // Returns 64 uniformly random bits.
  virtual uint64_t Next64() = 0;

  // Returns the default source: a thread-local absl::BitGen per thread, so
  // concurrent calls never contend. Never null, never destroyed.
  static Random* Default();
};

// Adapts a Random to the UniformRandomBitGenerator concept, so it can be
// passed as an absl::BitGenRef to absl's distributions.
class RandomBitGen {
 public:
  using result_type = uint64_t;

  explicit RandomBitGen(Random* random) : random_(random) {}

  static constexpr result_type min() {
    return std::numeric_limits<result_type>::min();
  }
  static constexpr result_type max() {
    return std::numeric_limits<result_type>::max();
  }
  result_type operator()() { return random_->Next64(); }

 private:
  Random* random_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_RANDOM_H_
