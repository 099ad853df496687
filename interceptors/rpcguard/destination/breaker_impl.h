// Copyright rpcguard authors.
//
// CircuitBreaker::State: the part of a circuit breaker that its lock guards,
// the striped window of CLOSED's outcomes, and the transitions, which need
// both. Kept out of destination/breaker.h so that the public headers include
// none of rpcguard's internal primitives; shared by destination/breaker.cc
// and the test peer (tests/testing/breaker_test_peer.h). The protocol
// between the breaker's atomics, the window's stripes and the lock is in
// destination/breaker.cc (invariants 1-3).
//
// Internal to rpcguard.

#ifndef RPCGUARD_DESTINATION_BREAKER_IMPL_H_
#define RPCGUARD_DESTINATION_BREAKER_IMPL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/base/sliding_window.h"
#include "rpcguard/destination/breaker.h"

namespace rpcguard {

struct CircuitBreaker::State {
  State(CircuitBreaker& owner, absl::Time now)
      : breaker(owner),
        window(owner.options_.window, owner.options_.buckets),
        closed_since(now) {}

  // The only place the state changes. Refuses (returns false, changes
  // nothing) unless the breaker is in `from` and the edge is legal. Queues
  // the transition for the listener.
  bool TransitionLocked(BreakerState from, BreakerState to, absl::Time now,
                        std::string reason, bool manual)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Starts a new state period: bumps the generation, stores `state`, and
  // clears the window, as one step for RecordClosed.
  void NextGenerationLocked(BreakerState state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void SetOpenUntilLocked(absl::Time t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Trips into OPEN from CLOSED or HALF_OPEN, growing the open time.
  void OpenLocked(absl::Time now, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The owner: its options, listener and lock-free atomics.
  CircuitBreaker& breaker;

  // CLOSED's outcomes (a: attempts, b: failures). Striped, with locks of its
  // own, so that concurrent Records rarely meet; cleared, together with the
  // change of the breaker's word_, while holding mu and every stripe.
  internal::StripedWindow window;

  internal::Mutex mu;
  absl::Time closed_since ABSL_GUARDED_BY(mu);
  absl::Time open_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // The length of the current (or last) open period.
  absl::Duration current_open_time ABSL_GUARDED_BY(mu);
  int consecutive_trips ABSL_GUARDED_BY(mu) = 0;
  int probes_in_flight ABSL_GUARDED_BY(mu) = 0;
  int probe_successes ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_probe_admitted ABSL_GUARDED_BY(mu);
  uint64_t transitions ABSL_GUARDED_BY(mu) = 0;
  std::vector<BreakerTransition> pending ABSL_GUARDED_BY(mu);
  bool delivering ABSL_GUARDED_BY(mu) = false;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_BREAKER_IMPL_H_
