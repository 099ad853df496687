// Copyright rpcguard authors.

#ifndef RPCGUARD_TESTS_TESTING_BREAKER_TEST_PEER_H_
#define RPCGUARD_TESTS_TESTING_BREAKER_TEST_PEER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/breaker_impl.h"

namespace rpcguard {
namespace internal {

// Lets tests ask a breaker for any automatic transition directly, through
// the same check every real transition goes through, to show that illegal
// ones are refused.
class BreakerTestPeer {
 public:
  // Performs `from` -> `to` as an automatic transition. FailedPrecondition,
  // changing nothing, when the breaker is not in `from` or the edge is not
  // in the state machine.
  static absl::Status TryTransition(CircuitBreaker& breaker, BreakerState from,
                                    BreakerState to) {
    const absl::Time now = breaker.clock_->MonotonicNow();
    bool ok;
    {
      MutexLock lock(&breaker.impl_->mu);
      ok = breaker.impl_->TransitionLocked(from, to, now, "test",
                                           /*manual=*/false);
    }
    if (!ok) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refused ", BreakerStateName(from), " -> ", BreakerStateName(to),
          " in state ", BreakerStateName(breaker.state())));
    }
    breaker.Deliver();
    return absl::OkStatus();
  }
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_BREAKER_TEST_PEER_H_
