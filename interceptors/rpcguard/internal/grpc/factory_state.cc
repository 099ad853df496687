// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/factory_state.h"

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpcguard/internal/grpc/sending_scope.h"

namespace rpcguard {
namespace internal {
namespace {

// The stderr logfmt sink that Options::trace_sink defaults to: one for the
// process, so that transitions seen by several factories are written once.
std::shared_ptr<TraceSink> DefaultSink() {
  static const std::shared_ptr<TraceSink>* const sink =
      new std::shared_ptr<TraceSink>(std::make_shared<LogfmtSink>());
  return *sink;
}

// Whether this (sink, stats) pair has not yet recorded transition `t`.
// Channels of several factories share breakers; each factory's listener
// hears every transition, but a sink should write it once. The registry
// calls every listener for one transition before any for the breaker's next
// (breaker.h: in order, one at a time), so a transition is a repeat exactly
// when it equals the last one recorded for its key. Equality, not "sequence
// not newer": a breaker the registry evicted and created again starts over
// at sequence 1, and its transitions must still be recorded.
//
// Transitions are rare, so a process-wide lock is fine here (never on the
// call path). The map is bounded (a gateway may see transitions of many
// destinations over its life): two generations of at most kGeneration keys;
// a repeat comes while its listeners are still being called, long before
// 2 x kGeneration other keys could push it out.
bool FirstToSee(const TraceSink* sink, const Stats* stats,
                const BreakerTransition& t) {
  constexpr size_t kGeneration = 1024;
  struct Seen {
    uint64_t sequence = 0;
    absl::Time time;
    BreakerState to = BreakerState::kClosed;
    bool operator==(const Seen& o) const {
      return sequence == o.sequence && time == o.time && to == o.to;
    }
  };
  using SeenMap = absl::flat_hash_map<std::string, Seen>;
  static absl::Mutex mu(absl::kConstInit);
  static auto* const current = new SeenMap();
  static auto* const previous = new SeenMap();
  const std::string key =
      absl::StrCat(reinterpret_cast<uintptr_t>(sink), "/",
                   reinterpret_cast<uintptr_t>(stats), "/", t.key);
  const Seen seen{t.sequence, t.time, t.to};
  absl::MutexLock lock(&mu);
  auto it = current->find(key);
  if (it == current->end()) {
    auto old = previous->find(key);
    if (old != previous->end() && old->second == seen) return false;
    if (current->size() >= kGeneration) {
      *previous = std::move(*current);
      current->clear();
    }
    current->emplace(key, seen);
    return true;
  }
  if (it->second == seen) return false;
  it->second = seen;
  return true;
}

}  // namespace

thread_local const grpc::ClientContext* SendingScope::current_ = nullptr;

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

void MethodState::Register(
    grpc::ChannelInterface* channel,
    grpc::experimental::InterceptorBatchMethods* first_batch) {
  unregistered.emplace(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  // Interceptors run only on grpc::Channel; anything else stays
  // unregistered.
  auto* real = dynamic_cast<grpc::Channel*>(channel);
  if (real == nullptr) return;
  registered_on = real->weak_from_this();
  if (registered_on.expired()) return;
  registered_channel = channel;
  // The intercepted channel forwards the registration to the real one.
  registered.emplace(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC,
                     first_batch->GetInterceptedChannel());
}

std::shared_ptr<const MethodState> MethodState::ForCall(
    absl::string_view method) const {
  // A whole copy, so that every gate and setting of the shared entry goes
  // with the call (a field copied by hand was once left behind: the
  // adaptive throttle); then what names the method is the call's own.
  auto call = std::make_shared<MethodState>(*this);
  call->name = std::string(method);
  call->shared = false;
  call->registered.reset();
  call->registered_channel = nullptr;
  call->registered_on.reset();
  call->unregistered.emplace(call->name.c_str(),
                             grpc::internal::RpcMethod::NORMAL_RPC);
  return call;
}

const grpc::internal::RpcMethod& MethodState::RpcMethodFor(
    const grpc::ChannelInterface* channel) const {
  if (registered && channel == registered_channel && !registered_on.expired()) {
    return *registered;
  }
  return *unregistered;
}

FactoryState::FactoryState(Options options)
    : config_(std::move(options.config)),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      random_(options.random != nullptr ? options.random : Random::Default()),
      refresher_(std::move(options.credential_refresher)),
      sink_(options.trace_sink != nullptr ? std::move(options.trace_sink)
                                          : DefaultSink()),
      verbosity_(options.trace_verbosity),
      stats_(options.stats != nullptr ? std::move(options.stats)
                                      : DefaultStats()),
      give_up_hook_(std::move(options.give_up_hook)),
      registry_(options.breaker_registry != nullptr
                    ? std::move(options.breaker_registry)
                    : BreakerRegistry::Default()),
      destination_(options.destination),
      target_(options.destination),
      // As many slots as undeclared methods may have entries (up to 2^16:
      // 1 MiB), so that about as many again past the bound stay remembered.
      past_bound_(std::min<size_t>(config_.destination().max_undeclared_methods,
                                   size_t{1} << 16)),
      hedge_timers_(TimerQueue::Create()),
      channel_stream_bytes_(config_.destination().channel_stream_buffer_bytes) {
}

FactoryState::~FactoryState() {
  registry_->RemoveTransitionListener(listener_id_);
}

void FactoryState::Init(const std::shared_ptr<FactoryState>& self) {
  if (destination_.empty()) {
    // No target to share with: a key of this factory's own.
    destination_ = absl::StrCat("rpcguard-factory-", random_->Next64());
  }
  std::weak_ptr<FactoryState> weak = self;
  // The destination's breakers only (its own key and its per-service
  // keys): other destinations' transitions never reach this factory.
  listener_id_ = registry_->AddTransitionListener(
      destination_, [weak](const BreakerTransition& t) {
        if (auto state = weak.lock()) state->OnTransition(t);
      });
}

const MethodState& FactoryState::ForMethod(
    const char* method, grpc::ChannelInterface* channel,
    grpc::experimental::InterceptorBatchMethods* first_batch) const {
  const absl::string_view path = method;
  // The common case, a method with an entry of its own: lock-free.
  if (const MethodState* own = methods_.Find(path)) return *own;
  // An undeclared method past the bound, seen lately: lock-free too.
  if (const MethodState* shared = past_bound_.Find(path)) return *shared;
  const Config::Declaration d = config_.Declared(path);
  auto make = [&](absl::string_view key) {
    auto state = std::make_unique<MethodState>();
    state->name = std::string(key);
    state->resolved = config_.Resolve(key);
    state->stats = stats_->ForMethod(key, target_);
    state->Register(channel, first_batch);
    // An undeclared method hedges within its shared entry's budget: a
    // budget is 1.5 KB, more than the rest of the entry, and a default
    // policy's hedges are capped for the undeclared methods together.
    AttachDestination(key, d.method ? key : SharedLabel(d), state.get());
    return state;
  };
  if (d.method) return methods_.Get(path, make);
  if (const MethodState* own = methods_.GetCounted(
          path, config_.destination().max_undeclared_methods, make)) {
    return *own;
  }
  const MethodState& shared = Shared(path, d);
  past_bound_.Store(path, &shared);
  return shared;
}

const MethodState& FactoryState::Shared(absl::string_view method,
                                        const Config::Declaration& d) const {
  const absl::string_view service = d.service ? d.service_name : "";
  return shared_.Get(service, [&](absl::string_view) {
    auto state = std::make_unique<MethodState>();
    state->shared = true;
    state->name = std::string(kOtherLabel);
    // Every undeclared method of a service resolves alike (only the
    // service's entries and the defaults apply), so `method` stands for all.
    state->resolved = config_.Resolve(method);
    state->stats = stats_->ForMethod(kOtherLabel, target_);
    // No registered RpcMethod: it would carry one name; ForCall gives each
    // call its own.
    const std::string label = SharedLabel(d);
    AttachDestination(label, label, state.get());
    return state;
  });
}

std::string FactoryState::SharedLabel(const Config::Declaration& d) {
  return d.service ? absl::StrCat("/", d.service_name, "/*") : std::string();
}

void FactoryState::AttachDestination(absl::string_view method,
                                     absl::string_view hedge_label,
                                     MethodState* state) const {
  const DestinationConfig& dest = config_.destination();
  state->breaker_key = destination_;
  // A shared entry of no service (empty `method`) keeps the bare target's
  // key: under key_per_service no other entry has it.
  if (dest.key_per_service && !method.empty()) {
    absl::string_view path = method;
    absl::ConsumePrefix(&path, "/");
    absl::StrAppend(&state->breaker_key, "/", path.substr(0, path.find('/')));
  }
  const std::string& key = state->breaker_key;
  state->gates_clock = registry_->clock();
  // The first error wins; the call fails with it (CallFacts).
  auto note = [state](const absl::Status& s) {
    if (state->setup_error.ok()) state->setup_error = s;
  };
  if (dest.breaker_enabled) {
    if (dest.breaker.has_value()) {
      auto b = registry_->Get(key, *dest.breaker);
      if (b.ok()) {
        state->breaker = *std::move(b);
      } else {
        note(b.status());
      }
    } else {
      state->breaker = registry_->Get(key);
    }
  }
  if (dest.budget_enabled) {
    if (dest.budget.has_value()) {
      auto b = registry_->GetBudget(key, *dest.budget);
      if (b.ok()) {
        state->budget = *std::move(b);
      } else {
        note(b.status());
      }
    } else {
      state->budget = registry_->GetBudget(key);
    }
    if (state->budget != nullptr) stats_->WatchBudget(key, state->budget);
  }
  if (dest.adaptive_throttle_enabled) {
    auto a = registry_->GetAdaptiveThrottle(
        key, dest.adaptive_throttle.value_or(AdaptiveThrottleOptions{}));
    if (a.ok()) {
      state->adaptive = *std::move(a);
    } else {
      note(a.status());
    }
  }
  if (const auto& hedging = state->resolved.policy.hedging) {
    if (hedging->adaptive_percentile.has_value()) {
      state->latency =
          std::make_unique<LatencyEstimator>(*hedging->adaptive_percentile);
    }
    // Hedges at most maxExtraLoad of the method's first attempts, plus a
    // reserve of one a second so that a quiet client can hedge at all.
    RetryBudgetOptions cap;
    cap.ratio = hedging->max_extra_load;
    cap.min_retries_per_second = 1;
    auto b =
        registry_->GetBudget(absl::StrCat(key, "#hedges", hedge_label), cap);
    if (b.ok()) {
      state->hedge_budget = *std::move(b);
    } else {
      note(b.status());
    }
  }
  if (dest.throttle.has_value()) {
    auto t = registry_->GetThrottle(destination_, *dest.throttle);
    if (t.ok()) {
      state->throttle = *std::move(t);
    } else {
      note(t.status());
    }
  }
}

void FactoryState::OnTransition(const BreakerTransition& t) const {
  if (!FirstToSee(sink_.get(), stats_.get(), t)) return;
  TraceEvent e;
  e.kind = TraceEvent::Kind::kBreakerTransition;
  e.time = t.wall_time;
  e.breaker_key = t.key;
  e.breaker_state = std::string(BreakerStateName(t.to));
  e.from_state = std::string(BreakerStateName(t.from));
  e.to_state = e.breaker_state;
  e.message = t.reason;
  stats_->RecordTransition(t.key, t.to);
  if (ShouldTrace(verbosity_, e)) sink_->Write(e);
}

EngineEnv FactoryState::EngineEnvFor(const MethodState& method,
                                     const EngineRecorder* recorder) const {
  EngineEnv env;
  env.clock = clock();
  env.random = random();
  env.can_refresh = static_cast<bool>(refresher());
  env.gates = method.gates();
  env.hedge_budget = method.hedge_budget.get();
  env.latency = method.latency.get();
  env.destination = method.breaker_key;
  env.recorder = recorder;
  return env;
}

void FactoryState::FillBreaker(const MethodState& method, TraceEvent& event) {
  if (method.breaker == nullptr) return;
  event.breaker_key = method.breaker_key;
  event.breaker_state = std::string(BreakerStateName(method.breaker->state()));
}

void FactoryState::ReportGiveUp(const MethodState& method,
                                const TraceEvent& event, int attempts,
                                const std::string& idempotency_key,
                                const grpc::ByteBuffer& request) const {
  if (!give_up_hook_) return;
  GiveUpInfo info;
  info.call_id = event.call_id != 0 ? event.call_id : random_->Next64();
  info.method = method.name;
  info.code = event.code;
  info.message = event.message;
  info.reason = event.reason;
  info.attempts = attempts;
  info.idempotency_key = idempotency_key;
  info.request = Bytes(request);
  info.trace_id = event.trace_id;
  info.correlation = event.correlation;
  give_up_hook_(info);
}

}  // namespace internal

// Defined here, beside its one user in the library (FactoryState).
std::shared_ptr<Stats> DefaultStats() {
  static const std::shared_ptr<Stats>* const stats =
      new std::shared_ptr<Stats>(std::make_shared<Stats>());
  return *stats;
}

}  // namespace rpcguard
