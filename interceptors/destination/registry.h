// Copyright rpcguard authors.
//
// BreakerRegistry: the circuit breakers (breaker.h), retry budgets
// (retry_budget.h) and gRFC A6 retry throttles (retry_throttle.h) of a
// process, one of each per key, shared by every channel that uses the same
// key, so that all clients of one destination learn together.

#ifndef RPCGUARD_DESTINATION_REGISTRY_H_
#define RPCGUARD_DESTINATION_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/clock.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"

namespace rpcguard {

// The process's breakers, budgets and A6 throttles, one of each per key,
// created on first use. The key is the caller's choice: the channel target
// ("dns:///db:443") shares state among every channel to that destination;
// target + "/" + service separates the services behind one target.
//
// Thread-safe. Keys are spread over 16 shards, each with its own mutex held
// only for a hash lookup (and, the first time, a construction), so lookups
// of different keys rarely wait for each other. The interceptor is meant to
// look a key up once per channel (and method) and keep the shared_ptr, so
// lookups are not on the per-call path anyway. Entries live as long as the
// registry.
class BreakerRegistry {
 public:
  struct Options {
    // For keys looked up without options of their own.
    BreakerOptions breaker;
    RetryBudgetOptions budget;
    // Null: Clock::Real(). Must outlive the registry and its objects.
    Clock* clock = nullptr;
  };

  // Errors: InvalidArgument from options.breaker or options.budget.
  static absl::StatusOr<std::shared_ptr<BreakerRegistry>> Create(
      const Options& options);

  // The process-wide registry (default options, real clock), used when a
  // channel is given none. Never null, never destroyed.
  static std::shared_ptr<BreakerRegistry> Default();

  BreakerRegistry(const BreakerRegistry&) = delete;
  BreakerRegistry& operator=(const BreakerRegistry&) = delete;
  ~BreakerRegistry();

  // The breaker for `key`, created with the registry's options on first use.
  // Never null.
  std::shared_ptr<CircuitBreaker> Get(absl::string_view key);

  // The breaker for `key`, created with `options` on first use. Errors:
  // InvalidArgument from options.Validate(); FailedPrecondition when the
  // breaker exists with different options (two channels disagree about
  // one shared breaker: use distinct keys or registries).
  absl::StatusOr<std::shared_ptr<CircuitBreaker>> Get(
      absl::string_view key, const BreakerOptions& options);

  // The retry budget for `key`, as Get does for breakers.
  std::shared_ptr<RetryBudget> GetBudget(absl::string_view key);
  absl::StatusOr<std::shared_ptr<RetryBudget>> GetBudget(
      absl::string_view key, const RetryBudgetOptions& options);

  // The gRFC A6 retry throttle for `key` (A6 keys it by server name: use the
  // channel target). As in gRPC, a later config replaces the earlier one:
  // when the existing throttle has other options, a new one takes its place,
  // starting from the old token count scaled to the new maxTokens. Holders of
  // the old one keep using it until they look the key up again. Errors:
  // InvalidArgument from options.Validate().
  absl::StatusOr<std::shared_ptr<RetryThrottle>> GetThrottle(
      absl::string_view key, const RetryThrottleOptions& options);

  using ListenerId = uint64_t;

  // Adds a listener for every transition of every breaker of this registry,
  // those created later included. It must be quick and must not block (it
  // runs on an RPC's thread); it may be called concurrently for different
  // breakers, and in order for any one breaker. Returns an id for removal.
  ListenerId AddTransitionListener(BreakerListener listener);

  // Removes a listener. A call already under way may still finish after
  // this returns.
  void RemoveTransitionListener(ListenerId id);

  // Every breaker created so far, with its key, for stats and debug pages.
  std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>>
  Breakers() const;

  const Options& options() const { return options_; }

 private:
  class Listeners;
  // The entries, in shards with a lock each; defined in registry.cc, so that
  // this header needs none of rpcguard's internal primitives.
  struct State;

  explicit BreakerRegistry(const Options& options);
  std::shared_ptr<CircuitBreaker> NewBreaker(absl::string_view key,
                                             const BreakerOptions& options);

  const Options options_;
  Clock* const clock_;
  const std::shared_ptr<Listeners> listeners_;
  const std::unique_ptr<State> impl_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_REGISTRY_H_
