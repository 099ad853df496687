// Copyright rpcguard authors.
//
// What the interceptors of one factory share (FactoryState), and what they
// keep per method (MethodState): the resolved policy, the destination's
// breaker, budget and throttle, the method's stats handle and how attempts
// name the method to gRPC. Resolved once, on a method's first call; read
// lock-free by every later call.
//
// Bounded: a method the config or the linked-in protos declare always gets
// a MethodState of its own; at most DestinationConfig::
// max_undeclared_methods others do (a generic caller may make up any number
// of names). Past that, an undeclared method's calls share the entry of its
// declared service, or the entry of the default policy, whose stats label
// is "other"; each such call runs on a copy of the shared entry that bears
// its own name (MethodState::ForCall), so that traces name it.

#ifndef RPCGUARD_INTERNAL_GRPC_FACTORY_STATE_H_
#define RPCGUARD_INTERNAL_GRPC_FACTORY_STATE_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/interceptor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rpcguard/base/method_cache.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/internal/engine/engine_env.h"
#include "rpcguard/internal/engine/outcome.h"
#include "rpcguard/internal/engine/retry_gate.h"
#include "rpcguard/internal/grpc/timer_queue.h"

namespace rpcguard {
namespace internal {

// rpcguard's header names as std::string, built once: the metadata maps and
// ClientContext::AddMetadata take std::string keys, and one built from a
// literal on every call would allocate for names of 16 characters and up.
template <const char* kName>
const std::string& HeaderString() {
  static const std::string* const name = new std::string(kName);
  return *name;
}

// The serialized bytes of a ByteBuffer (for the give-up hook).
std::string Bytes(const grpc::ByteBuffer& buffer);

// What rpcguard keeps per method.
struct MethodState {
  // The full method name. Read this, not ClientRpcInfo::method(), after the
  // first batch: for GenericStub callers that points into a string that may
  // be gone by the time the call ends.
  std::string name;
  ResolvedPolicy resolved;
  Stats::MethodHandle* stats = nullptr;
  // The destination's breaker, budget and A6 throttle (null when disabled
  // or not configured), under `breaker_key`.
  std::string breaker_key;
  std::shared_ptr<CircuitBreaker> breaker;
  std::shared_ptr<RetryBudget> budget;
  std::shared_ptr<RetryThrottle> throttle;
  // The destination's adaptive throttle (null when disabled).
  std::shared_ptr<AdaptiveThrottle> adaptive;
  // The clock all four run on: their registry's.
  const Clock* gates_clock = nullptr;
  // Two channels disagreeing about one shared breaker's options: calls fail
  // with FAILED_PRECONDITION rather than run unguarded.
  absl::Status setup_error;
  // Hedging (resolved.policy.hedging set): the recent successful attempt
  // latency, for an adaptive delay (null without one), and the cap on
  // hedges, a budget of their own per destination key and declared method
  // (undeclared methods share their service's, or the destination's).
  // Shared, not owned: a call's copy of a shared entry (ForCall) records
  // into the shared entry's estimator.
  std::shared_ptr<LatencyEstimator> latency;
  std::shared_ptr<RetryBudget> hedge_budget;
  // Whether this is a shared entry, for the undeclared methods past the
  // bound: its `name` is a label, not a method; calls use ForCall().
  bool shared = false;

  // How attempts name the method to gRPC (RpcMethodFor).
  std::optional<grpc::internal::RpcMethod> registered;
  const grpc::ChannelInterface* registered_channel = nullptr;
  std::weak_ptr<grpc::Channel> registered_on;
  std::optional<grpc::internal::RpcMethod> unregistered;

  // The destination's shared state, for the retry gate.
  DestinationGates gates() const {
    return {breaker.get(), budget.get(), throttle.get(), adaptive.get(),
            gates_clock};
  }

  // Registers the method on `channel`, the channel of the call that first
  // resolved it: a registered call reuses the method's path instead of
  // building it per call, as generated stubs do.
  void Register(grpc::ChannelInterface* channel,
                grpc::experimental::InterceptorBatchMethods* first_batch);

  // For a call of `method` on a shared entry: a copy of this entry named
  // `method`, with an unregistered RpcMethod of that name. The call owns it
  // (it outlives the call's interceptor when attempts are in flight); it
  // is freed with the call, so nothing per name stays behind.
  std::shared_ptr<const MethodState> ForCall(absl::string_view method) const;

  // The RpcMethod for an attempt of a call on `channel`, which the call
  // keeps alive: the registered one when `channel` is still the channel it
  // was registered on (not a new channel at the same address), otherwise an
  // unregistered one.
  const grpc::internal::RpcMethod& RpcMethodFor(
      const grpc::ChannelInterface* channel) const;
};

// A call's own policy (SetCallPolicy), as the call runs it: the method's
// policy with the override applied (ApplyCallPolicy) and the call's trace
// verbosity. Absent for a call without one, which reads its MethodState's.
struct CallOverride {
  MethodPolicy policy;
  std::optional<TraceVerbosity> verbosity;
};

// What every interceptor of one factory shares. Immutable after Init but
// for its thread-safe members (method cache, stats, sink).
// The bytes of requests that all streaming calls of one channel hold for
// replay (DestinationConfig::channel_stream_buffer_bytes), lock-free.
class ChannelStreamBytes {
 public:
  explicit ChannelStreamBytes(uint64_t limit) : limit_(limit) {}
  // Counts `n` more bytes held; false when the total with them is past the
  // limit (they are counted all the same: they are held until freed).
  bool Add(uint64_t n) {
    return held_.fetch_add(n, std::memory_order_relaxed) + n <= limit_;
  }
  void Free(uint64_t n) { held_.fetch_sub(n, std::memory_order_relaxed); }
  uint64_t held() const { return held_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> held_{0};
};

class FactoryState {
 public:
  explicit FactoryState(Options options);
  ~FactoryState();

  FactoryState(const FactoryState&) = delete;
  FactoryState& operator=(const FactoryState&) = delete;

  // Starts tracing the transitions of this factory's breakers (its
  // destination's, and its per-service keys'). Called once, right after
  // construction (it needs a weak_ptr to this).
  void Init(const std::shared_ptr<FactoryState>& self);

  Clock* clock() const { return clock_; }
  Random* random() const { return random_; }
  const CredentialRefresher& refresher() const { return refresher_; }
  const GiveUpHook& give_up_hook() const { return give_up_hook_; }
  // The replay buffer of each streaming call (DestinationConfig).
  size_t stream_buffer_bytes() const {
    return config_.destination().stream_buffer_bytes;
  }
  // What the channel's streams hold together; lives as long as this.
  ChannelStreamBytes* channel_stream_bytes() const {
    return &channel_stream_bytes_;
  }

  // The state of `method`, computed on its first call; after that only a
  // lock-free hash lookup. The reference lives as long as this object.
  // `channel` and `first_batch` belong to the asking call (Register). Past
  // the bound on undeclared methods (file comment), a shared entry
  // (`shared` set), found with no lock by its later calls too while the
  // memo of such names holds it.
  const MethodState& ForMethod(
      const char* method, grpc::ChannelInterface* channel,
      grpc::experimental::InterceptorBatchMethods* first_batch) const;

  // The state of `method` if a call resolved it already, else null (also
  // for a method that resolves to a shared entry). Lock-free, and it reads
  // `method` only during the call.
  const MethodState* FindMethod(const char* method) const {
    return methods_.Find(method);
  }

  // The stats label of the shared entries.
  static constexpr absl::string_view kOtherLabel = "other";

  // Writes `event` to the trace when the verbosity asks (the call's own,
  // `verbosity`, else the factory's); `fill` adds the strings (method, key,
  // message) only then, so that the common untraced case copies none.
  // Counts nothing: callers count what they decided, by handle
  // (Stats::RecordCallEnded and the others), traced or not.
  template <typename Fill>
  void Trace(const MethodState& method, TraceEvent& event, Fill fill,
             std::optional<TraceVerbosity> verbosity = std::nullopt) const {
    if (ShouldTrace(verbosity.value_or(verbosity_), event)) {
      fill(event);
      sink_->Write(event);
    }
  }

  // The metadata keys whose values trace lines carry (Config's
  // DestinationConfig::correlation_keys).
  const std::vector<std::string>& correlation_keys() const {
    return config_.destination().correlation_keys;
  }

  // The hedge timers of this factory's calls, on one alarm. Never null.
  TimerQueue* hedge_timers() const { return hedge_timers_.get(); }

  // The Stats every call of this factory counts into. Never null.
  Stats* stats() const { return stats_.get(); }

  // Adds the method's breaker key and current state to `event`.
  static void FillBreaker(const MethodState& method, TraceEvent& event);

  // The engine's environment for a call of `method` (EngineEnv), its lines
  // and counters going to `recorder`; `method` must outlive the engine.
  EngineEnv EngineEnvFor(const MethodState& method,
                         const EngineRecorder* recorder) const;

  // Calls the give-up hook, if any, for a call whose terminal event is
  // `event` (decision kGiveUp); `request` is the request as sent.
  void ReportGiveUp(const MethodState& method, const TraceEvent& event,
                    int attempts, const std::string& idempotency_key,
                    const grpc::ByteBuffer& request) const;

 private:
  // The shared entry for undeclared `method`, whose declaration is `d`:
  // its service's, or the default policy's.
  const MethodState& Shared(absl::string_view method,
                            const Config::Declaration& d) const;
  // What stands for the undeclared methods of `d`'s service ("/pkg.Svc/*"),
  // or of no declared service (""), in the keys of shared state.
  static std::string SharedLabel(const Config::Declaration& d);
  // Attaches the destination's shared state to `state`, the entry of
  // `method` (empty: the default policy's shared entry); its hedge budget
  // is the one of `hedge_label` (the method, or its SharedLabel).
  void AttachDestination(absl::string_view method,
                         absl::string_view hedge_label,
                         MethodState* state) const;
  void OnTransition(const BreakerTransition& t) const;

  const Config config_;
  Clock* const clock_;
  Random* const random_;
  const CredentialRefresher refresher_;
  const std::shared_ptr<TraceSink> sink_;
  const TraceVerbosity verbosity_;
  const std::shared_ptr<Stats> stats_;
  const GiveUpHook give_up_hook_;
  const std::shared_ptr<BreakerRegistry> registry_;
  std::string destination_;  // set before any call, then read-only
  // Options::destination as given: the Stats series' target label.
  const std::string target_;
  BreakerRegistry::ListenerId listener_id_ = 0;
  // Methods with state of their own: declared ones, and up to the bound of
  // undeclared ones (GetCounted).
  MethodCache<MethodState> methods_;
  // The shared entries, by declared service ("" for the default policy's):
  // few, as declared services are.
  MethodCache<MethodState> shared_;
  // Undeclared methods past the bound, to their shared entry, so that their
  // later calls need neither the descriptor pool's lock nor ours.
  SharedMemo<MethodState> past_bound_;
  const std::shared_ptr<TimerQueue> hedge_timers_;
  mutable ChannelStreamBytes channel_stream_bytes_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_FACTORY_STATE_H_
