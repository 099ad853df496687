// Copyright rpcguard authors.
//
// The retrying client interceptor and the ways to install it.
//
//   rpcguard::Options options;
//   options.config = *rpcguard::Config::FromJson(json);
//   auto channel = rpcguard::CreateChannel(
//       "dns:///payments:443", grpc::SslCredentials({}), std::move(options));
//   if (!channel.ok()) { ... }  // a bad Options never yields a channel
//   auto stub = payments::v1::Payments::NewStub(*channel);
//
// Unary RPCs are retried for the sync, CQ-async and callback stubs; streaming
// RPCs pass through untouched. Only calls safe to repeat are ever sent twice:
// methods declared NO_SIDE_EFFECTS, IDEMPOTENT or KEYED, and calls whose
// caller put its own `idempotency-key` metadata on them.
//
// Metadata on every attempt: `idempotency-key` (the caller's own if present,
// else a random UUID v4 made once per call, the same on every attempt) and
// `rpcguard-attempt` (1, 2, ...). The caller's trailing metadata gains
// `rpcguard-attempts` (the number of attempts made).
//
// gRPC's interceptor API cannot read the caller's wait_for_ready, authority
// and parent call from its ClientContext: on gRPC 1.51 rpcguard reads them
// from its private members and every attempt inherits them; built for
// another gRPC, attempts lose them (README, "gRPC versions"), which the
// first MakeInterceptorFactory or CreateChannel logs once (gpr_log, ERROR).

#ifndef RPCGUARD_CHANNEL_H_
#define RPCGUARD_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/config.h"
#include "rpcguard/destination/registry.h"
#include "rpcguard/observability/stats.h"
#include "rpcguard/observability/trace.h"
#include "rpcguard/random.h"

namespace rpcguard {

// Metadata keys rpcguard reads and writes.
inline constexpr char kIdempotencyKeyHeader[] = "idempotency-key";
inline constexpr char kAttemptHeader[] = "rpcguard-attempt";
inline constexpr char kAttemptsTrailer[] = "rpcguard-attempts";
inline constexpr char kPassThroughHeader[] = "rpcguard-passthrough";
// Carries SetCallPolicy's override (call_policy.h); taken out of the call
// before anything is sent.
inline constexpr char kCallPolicyHeader[] = "rpcguard-call-policy";
inline constexpr char kPushbackTrailer[] = "grpc-retry-pushback-ms";
// Names why a service below gave up, beside a "do not retry" pushback
// (server.h).
inline constexpr char kGaveUpTrailer[] = "rpcguard-gave-up";

// What a CredentialRefresher hands back for the one retry after an
// UNAUTHENTICATED.
struct RefreshedCredentials {
  // Replaces the call's credentials when not null.
  std::shared_ptr<grpc::CallCredentials> credentials;
  // Replace the caller's metadata of the same keys (e.g. "authorization").
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Asked for fresh credentials when an attempt of `method` ends
// UNAUTHENTICATED. It must not block: it calls `done` exactly once, on any
// thread, now or later. An error from it ends the call UNAUTHENTICATED with
// its message; a `done` that comes after the call's deadline is ignored.
using CredentialRefresher = std::function<void(
    absl::string_view method,
    std::function<void(absl::StatusOr<RefreshedCredentials>)> done)>;

// gRPC's outlier detection (gRFC A50, the "outlier_detection_experimental"
// balancing policy) around the balancing policy the caller chose. Each of
// rpcguard's attempts and hedges is a call of its own on the channel below
// rpcguard, picked by gRPC's balancer: with round_robin, a retry goes to the
// next backend in the rotation, which with several callers at once may be
// the one that just failed. Outlier detection counts every call's status per
// backend and, once a backend's calls mostly fail, takes it out of the
// rotation for a while; until then, rpcguard's retries are what save the
// calls it fails.
//
// CreateChannel applies it when the caller's channel arguments choose a
// policy that spreads calls over the resolver's addresses (round_robin,
// weighted_round_robin, ring_hash_experimental), in the service config
// (GRPC_ARG_SERVICE_CONFIG: "loadBalancingConfig" or "loadBalancingPolicy")
// or by name (ChannelArguments::SetLoadBalancingPolicyName): that policy
// stays, as outlier detection's child. With no policy chosen gRPC uses
// pick_first, which sends every call to one backend: there is nothing to
// steer away from, and the channel is left as it is. docs/backends.md has
// the details, the settings' reasons and the measured figures.
//
// The defaults suit small fleets (2 to 10 backends) with at least about 10
// calls a second per backend: a backend is ejected within one to two
// intervals of failing more than 85% of its calls, and at most about half
// of them are out at once. A50 counts every status but OK as a failure:
// application errors, deadlines and cancelled hedges included.
struct OutlierDetectionOptions {
  // false: CreateChannel leaves the caller's balancing policy untouched.
  bool enabled = true;
  // How often gRPC looks at the backends' calls; each look counts the calls
  // that ended since the last one ("interval").
  absl::Duration interval = absl::Seconds(1);
  // An ejected backend is back after this times its recent ejections
  // ("baseEjectionTime"; gRPC counts one more per ejection, one fewer per
  // interval spent in the rotation), at most max_ejection_time.
  absl::Duration base_ejection_time = absl::Seconds(10);
  absl::Duration max_ejection_time = absl::Seconds(300);
  // gRPC ejects a backend only while the share of backends already out is
  // below this ("maxEjectionPercent"; its code lets the first ejection
  // through whatever the share): with 2 backends 1 may be out, with 3
  // backends 2. A backend that fails nearly every call adds no load by
  // leaving: its calls were retried on the others anyway.
  int max_ejection_percent = 50;
  // failurePercentageEjection: a backend is ejected when more than
  // `failure_percentage_threshold` percent of its calls in an interval
  // failed, provided that at least `minimum_hosts` backends each ended at
  // least `request_volume` calls in it ("threshold", "minimumHosts",
  // "requestVolume"; "enforcementPercentage" is 100).
  int failure_percentage_threshold = 85;
  int minimum_hosts = 2;
  int request_volume = 10;
};

// How rpcguard behaves. Every shared resource is a parameter with a default.
struct Options {
  // Per-method policies.
  Config config;
  // Time for rpcguard's decisions (deadline and backoff arithmetic, hedge
  // timers: its monotonic time) and trace timestamps (its wall time); must
  // outlive every call. gRPC's own deadlines and timers always run on gRPC's
  // real monotonic clock (rpcguard converts by the time remaining), and
  // breakers and budgets use their registry's clock
  // (BreakerRegistry::Options). Raw pointers here, shared_ptr for sinks and
  // registries: a clock and a random source are process-lifetime objects.
  // Null is taken as the default.
  Clock* clock = Clock::Real();
  // Randomness for jitter, call ids and idempotency keys; must outlive every
  // call. Null is taken as the default.
  Random* random = Random::Default();
  // Optional: when set, an UNAUTHENTICATED attempt of a call that is safe to
  // repeat gets exactly one more attempt with refreshed credentials.
  // PERMISSION_DENIED is always final.
  CredentialRefresher credential_refresher;
  // Where retry traces go. Null: one logfmt line per event on stderr.
  std::shared_ptr<TraceSink> trace_sink;
  // How much to trace; the default writes nothing for a call that succeeds
  // at its first attempt.
  TraceVerbosity trace_verbosity = TraceVerbosity::kRetries;
  // Counters of calls, attempts, retries and give-ups. Null: DefaultStats().
  std::shared_ptr<Stats> stats;
  // Called once for every call that gave up; see GiveUpHook in trace.h.
  GiveUpHook give_up_hook;
  // Circuit breakers and retry budgets, shared by every channel that uses
  // the same registry and key. Null: BreakerRegistry::Default(), so channels
  // to one target share them without extra code; pass a registry of your own
  // to isolate. Settings: the JSON's top-level "rpcguard" object.
  std::shared_ptr<BreakerRegistry> breaker_registry;
  // The breaker and budget key. CreateChannel uses its target when empty;
  // with MakeInterceptorFactory, set it to the target (empty: the factory's
  // channels get a key of their own, shared with no other factory).
  std::string destination;
  // CreateChannel refuses a channel whose own service config has a gRPC
  // retryPolicy (attempts would multiply). Set to accept it anyway.
  bool allow_grpc_retry_policy = false;
  // CreateChannel only: the caller's balancing policy under gRPC's outlier
  // detection (see OutlierDetectionOptions). MakeInterceptorFactory ignores
  // it: a channel made elsewhere has the service config its maker gave it.
  OutlierDetectionOptions outlier_detection;
};

// Returns an interceptor factory to pass to
// grpc::experimental::CreateCustomChannelWithInterceptors. Register it before
// (to the left of) interceptors that should run once per attempt; those
// registered before it run once per call. The factory may be destroyed while
// calls are in flight.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeInterceptorFactory(Options options);

// Creates a channel to `target` with rpcguard's interceptor registered.
// When `args` choose a balancing policy that spreads calls over several
// backends, the channel gets that policy under gRPC's outlier detection
// (OutlierDetectionOptions; `args` are otherwise passed on as given).
// Errors: InvalidArgument when `args` carries a service config that also
// enables gRPC's built-in retries (two retry layers multiply attempts; choose
// one), or naming the first bad field of options.outlier_detection (e.g.
// "Options::outlier_detection.interval: must be positive").
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    Options options, grpc::ChannelArguments args = {});

// The process-wide Stats that Options::stats defaults to. Never null.
std::shared_ptr<Stats> DefaultStats();

// Marks a call so that rpcguard passes it through untouched (never retried).
// Needed for calls made through grpc::GenericStub with grpc::ByteBuffer
// messages to methods the config declares retriable: gRPC's interceptor API
// does not say what type the caller's response object has. Built for a gRPC
// other than 1.51, also for a call that must keep its set_authority or
// parent call (README, "gRPC versions"). Call before the RPC starts.
void MarkPassThrough(grpc::ClientContext* context);

}  // namespace rpcguard

#endif  // RPCGUARD_CHANNEL_H_
