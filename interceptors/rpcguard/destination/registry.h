// Copyright rpcguard authors.
//
// BreakerRegistry: the circuit breakers (breaker.h), retry budgets
// (retry_budget.h) and gRFC A6 retry throttles (retry_throttle.h) of a
// process, one of each per key, shared by every channel that uses the same
// key, so that all clients of one destination learn together.

#ifndef RPCGUARD_DESTINATION_REGISTRY_H_
#define RPCGUARD_DESTINATION_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/clock.h"
#include "rpcguard/destination/adaptive_throttle.h"
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
// lookups are not on the per-call path anyway.
//
// Lifetime of a key's state. A process that talks to many destinations over
// its life (a gateway: a channel per target, then dropped) must not keep
// them all, so an entry lives as long as someone uses it, plus what it still
// has to say. An entry is evictable when all of these hold:
//
//   - the registry holds the only reference to its breaker, budget and
//     throttle (every channel that looked them up is gone);
//   - its breaker is CLOSED with nothing counted in its window (the window
//     has aged out), or OPEN / HALF_OPEN and unused (neither looked up nor
//     found referenced by a sweep) for maxOpenTime + healthyPeriod: by then
//     the open time is over and the trip no longer lengthens the next one,
//     so a fresh breaker knows as much. FORCED_OPEN and DISABLED are an
//     operator's decision and are kept until Reset();
//   - its budget has nothing counted in its window;
//   - its adaptive throttle has seen no overload rejection within its
//     window (AdaptiveThrottle::Settled: counts of accepts alone decide
//     nothing, so they are not worth keeping a destination for).
//
// An A6 throttle is forgotten with its entry whatever its token count, as
// gRPC forgets its own with the channels that use it.
//
// There are no threads or timers: each lookup that adds a key to a shard
// that has reached its sweep threshold first sweeps that shard (evicts what
// is evictable), and the threshold then becomes twice the entries left, at
// least 32. Eviction thus costs O(1) amortized per new key, and a shard
// holds at most about twice its live entries, or 32. A registry that sees
// no new keys is not swept: Sweep() evicts everything evictable now, for
// operators and tests. An evicted key starts afresh at its next lookup,
// with the options of that lookup (nobody was using the old ones, so they
// cannot disagree).
class BreakerRegistry {
 public:
  struct Options {
    // For keys looked up without options of their own.
    BreakerOptions breaker;
    RetryBudgetOptions budget;
    // Null: Clock::Real(). Must outlive the registry and its objects.
    Clock* clock = nullptr;
    // The adaptive throttles' draws. Null: Random::Default(). Must outlive
    // the registry and its objects.
    Random* random = nullptr;
  };

  // Errors: InvalidArgument from options.breaker or options.budget.
  static absl::StatusOr<std::shared_ptr<BreakerRegistry>> Create(
      const Options& options);

  // The clock every breaker, budget and throttle of this registry runs on.
  Clock* clock() const { return clock_; }

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

  // The adaptive throttle (adaptive_throttle.h) for `key`, as GetBudget
  // does for budgets: created with `options` on first use; errors:
  // InvalidArgument from options.Validate(), FailedPrecondition when it
  // exists with other options.
  absl::StatusOr<std::shared_ptr<AdaptiveThrottle>> GetAdaptiveThrottle(
      absl::string_view key, const AdaptiveThrottleOptions& options);

  using ListenerId = uint64_t;

  // Adds a listener for every transition of every breaker of this registry,
  // those created later included. It must be quick and must not block (it
  // runs on an RPC's thread, with no registry lock held); it may be called
  // concurrently for different breakers, and in order for any one breaker:
  // every listener hears a transition before any hears that breaker's next.
  // Returns an id for removal. Every transition calls every such listener:
  // to hear a few keys among many, use the keyed overload.
  ListenerId AddTransitionListener(BreakerListener listener);

  // Adds a listener for the transitions of the breakers of one destination
  // only: the breaker of `key`, and those of `key` + "/" + anything (the
  // per-service keys, "dns:///db:443/pkg.Svc"). The breakers need not exist
  // yet, and one evicted and created again is still heard. Same rules as
  // above; a transition calls the all-keys listeners, then those of its
  // destination, then those of its own key (when that is longer), each
  // group in the order added, and no other listener. Costs a hash lookup
  // per '/' in the key, whatever the number of listeners and keys; the
  // registry keeps a key's entry only while it has a listener.
  ListenerId AddTransitionListener(absl::string_view key,
                                   BreakerListener listener);

  // Removes a listener (of either kind); unknown ids are ignored. A call
  // already under way may still finish after this returns.
  void RemoveTransitionListener(ListenerId id);

  // The number of keys that have a keyed listener, for tests and debug
  // pages.
  size_t listener_keys() const;

  // Every breaker the registry holds (evicted ones are gone), with its key,
  // sorted by key, for stats and debug pages. The returned pointers keep
  // their breakers from eviction while held.
  std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>>
  Breakers() const;

  // Evicts every entry that is evictable now (see the class comment), in
  // every shard. Returns how many were evicted. Lookups call this for one
  // shard at a time as it grows; calling it is never needed, only useful to
  // release memory at once (an operator's endpoint, tests).
  size_t Sweep();

  // The number of keys held (live or not yet swept).
  size_t size() const;

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
