// Copyright rpcguard authors.
//
// EngineEnv: all the engine (call_engine.h) reaches of rpcguard outside its
// call: the clock and randomness it is given, the destination's gates and
// hedge budget, the method's latency estimator, and an EngineRecorder for
// its trace lines and counters. A plain struct of pointers, filled by the
// glue (HijackedCall) from its factory and method state, and by a test by
// hand: the engine's unit tests build no factory and read no config.

#ifndef RPCGUARD_INTERNAL_ENGINE_ENGINE_ENV_H_
#define RPCGUARD_INTERNAL_ENGINE_ENGINE_ENV_H_

#include <grpcpp/support/status.h>

#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/observability/stats.h"
#include "rpcguard/observability/trace.h"
#include "rpcguard/random.h"

namespace rpcguard {
namespace internal {

// Where a call's trace lines and counters go. Implementations are
// thread-safe: attempts end on any thread.
class EngineRecorder {
 public:
  virtual ~EngineRecorder() = default;
  // When the verbosity (the call's own, else the method's) traces `event`,
  // calls `fill` for the call's strings and writes it. Counts nothing: the
  // engine counts each decision by the typed calls below, where it makes
  // it, whether or not the line is written.
  virtual void Trace(TraceEvent& event,
                     absl::FunctionRef<void(TraceEvent&)> fill,
                     std::optional<TraceVerbosity> verbosity) const = 0;
  // An attempt started; one ended with `code` after `duration` (every
  // attempt, a cancelled loser's among them: A66).
  virtual void AttemptStarted() const = 0;
  virtual void AttemptEnded(grpc::StatusCode code,
                            absl::Duration duration) const = 0;
  // An attempt's end was followed by a retry after `delay`.
  virtual void Retried(absl::Duration delay) const = 0;
  // The call ended.
  virtual void CallEnded(const Stats::CallEnd& end) const = 0;
  // A hedged call ended: its copies, whether a later copy won, how many
  // were cancelled, the hedging delay it used.
  virtual void HedgedCall(int copies, bool later_won, int cancelled,
                          absl::Duration delay) const = 0;
};

struct EngineEnv {
  Clock* clock = nullptr;    // required
  Random* random = nullptr;  // required
  // Whether a credential refresher is configured (auth: one retry after a
  // refresh).
  bool can_refresh = false;
  // The destination's breaker, budget and throttles (any may be null).
  DestinationGates gates;
  // Hedging: the hedge budget and the latency estimator (null: none).
  RetryBudget* hedge_budget = nullptr;
  LatencyEstimator* latency = nullptr;
  // The destination's key, for the throttle's refusal message.
  absl::string_view destination;
  const EngineRecorder* recorder = nullptr;  // required
};

// The status of a call that the adaptive throttle of `key` refused before
// anything was sent.
grpc::Status ThrottledStatus(absl::string_view key);

// The status of a call its caller cancelled.
grpc::Status CancelledByCaller();

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ENGINE_ENGINE_ENV_H_
