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
};

// Returns an interceptor factory to pass to
// grpc::experimental::CreateCustomChannelWithInterceptors. Register it before
// (to the left of) interceptors that should run once per attempt; those
// registered before it run once per call. The factory may be destroyed while
// calls are in flight.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeInterceptorFactory(Options options);

// Creates a channel to `target` with rpcguard's interceptor registered.
// Errors: InvalidArgument when `args` carries a service config that also
// enables gRPC's built-in retries (two retry layers multiply attempts; choose
// one).
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
