// Copyright rpcguard authors.
//
// rpcguard on a server: give-ups that travel up a chain of services, once.
//
// A service whose handlers call other services through rpcguard installs
// one server interceptor:
//
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   rpcguard::AddServerInterceptor(&builder);  // or with ServerOptions
//   auto server = builder.BuildAndStart();
//
// Then, when a handler's outgoing call gives up after rpcguard was allowed
// to retry it (its attempts spent, the retry budget, an open breaker, the
// adaptive throttle), or because the service it called said not to retry,
// and the handler then fails its own call, the failure carries
// `grpc-retry-pushback-ms: -1` (gRFC A6's "do not retry": every gRPC client
// with retries configured obeys it for the codes it retries, rpcguard for
// every code) and `rpcguard-gave-up: <reason>` (for the callers' traces).
// Only the tier right above the failing service retries; the tiers above
// it fail fast. A handler that recovers (a fallback, a cache) and answers
// OK sends nothing; a call sent once because its method may not repeat
// passes its failure up as without rpcguard.
//
// How the server learns of its handlers' give-ups: the interceptor
// remembers each server call while it runs (created when the call starts,
// erased when it ends), and a give-up of an outgoing call made for it marks
// it. An outgoing call is linked to its server call either
//   - by ClientContext::FromServerContext, on gRPC 1.51 (rpcguard reads the
//     parent call from the context's private members), or
//   - explicitly, by LinkToServerCall: on any gRPC version, and for calls
//     made without FromServerContext.
// Sync, CQ-async and callback servers alike, unary and streaming handlers
// alike (the status a handler ends its stream with carries the signal).

#ifndef RPCGUARD_SERVER_H_
#define RPCGUARD_SERVER_H_

#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/observability/stats.h"

namespace rpcguard {

// The give-up reasons of an outgoing call that travel up by default: those
// where rpcguard was allowed to retry and stopped (max_attempts, when more
// than one attempt was made; budget_exhausted; breaker_open; throttled) and
// those where the service below said stop (pushback_stop,
// downstream_gave_up). Not: deadline (the caller's deadline is gone too),
// fatal, auth, not_idempotent, cancelled, local_error, committed,
// unsupported_call: a retry above may still succeed, or none is made.
std::vector<GiveUpReason> DefaultPropagatedReasons();

// How the server interceptor behaves.
struct ServerOptions {
  // A service facing callers outside the fleet: it sends neither the
  // pushback nor the reason trailer (the trailer names internal services),
  // so its callers retry it as they would without rpcguard.
  bool edge = false;
  // Which of an outgoing call's give-up reasons make the handler's failure
  // say "do not retry". kNone is refused.
  std::vector<GiveUpReason> propagate = DefaultPropagatedReasons();

  // OK, or InvalidArgument naming the bad entry.
  absl::Status Validate() const;
};

// Appends rpcguard's server interceptor to `creators` (the server's own
// interceptors, run before rpcguard's) and hands them all to `builder`:
// ServerBuilder::experimental().SetInterceptorCreators replaces the whole
// list, so pass yours here instead of calling it yourself, and call this
// once per builder. Errors (the builder is left as it was):
// InvalidArgument from options.Validate(); FailedPrecondition when this
// builder already had a successful AddServerInterceptor, whose interceptors
// a second list would replace (pass them all in one call).
absl::Status AddServerInterceptor(
    grpc::ServerBuilder* builder, ServerOptions options = {},
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        creators = {});

// The factory itself, for a server that builds its interceptor list
// elsewhere. Options as above; InvalidArgument from Validate().
absl::StatusOr<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MakeServerInterceptorFactory(ServerOptions options = {});

// Links `child`, the context of an outgoing call made while handling
// `parent`, to it: a give-up of the child marks `parent` (see the top of
// this file). Needed on a gRPC other than 1.51, or for a child not made with
// ClientContext::FromServerContext; harmless otherwise. Call before the
// child's RPC starts, while `parent`'s call runs; the child must go through
// a channel with rpcguard's interceptor (the link is private metadata that
// rpcguard takes out before anything is sent). A parent whose server has no
// rpcguard interceptor, or whose call has ended, links nothing.
//
// The link never leaves the process: linking a child twice keeps one link
// (the latest), and a child marked pass-through (MarkPassThrough, before
// or after this) carries none, as rpcguard sends its call untouched. Both
// need gRPC 1.51's fast paths (rpcguard reads the child's metadata); built
// without them, link a child once and not one marked pass-through.
void LinkToServerCall(grpc::ClientContext* child,
                      grpc::ServerContextBase* parent);

// The longest delay Overloaded sends: INT32_MAX milliseconds (24.8 days).
// gRPC Java reads the pushback trailer as an int, and reads anything longer
// as "do not retry"; gRPC C++ and Go read 64 bits. This much every one of
// them reads as a delay, and it is a valid google.protobuf.Duration.
inline constexpr absl::Duration kMaxRetryAfter = absl::Milliseconds(2147483647);

// For servers that shed load themselves. A RESOURCE_EXHAUSTED status with
// `message`, and on `context` the trailer that tells callers what to do:
//   - retry_after absent: `grpc-retry-pushback-ms: -1`, do not retry;
//   - retry_after set: `grpc-retry-pushback-ms: <ms>` (gRFC A6: retry after
//     exactly this) and a google.rpc.RetryInfo of the same delay in the
//     status details (the least a caller must wait). The delay is sent in
//     whole milliseconds, rounded up (the trailer's unit; never less than
//     asked), and clamped: a negative delay is sent as 0 (retry at once: a
//     delay computed as `slot - now` whose slot has passed), a delay above
//     kMaxRetryAfter (absl::InfiniteDuration() included) as kMaxRetryAfter,
//     which outlasts any caller's deadline. To say "never", leave retry_after
//     out.
// Sent whatever ServerOptions::edge says: shedding is the server's own
// answer, not news of internal services. Return it from the handler.
grpc::Status Overloaded(
    grpc::ServerContextBase* context, absl::string_view message,
    std::optional<absl::Duration> retry_after = std::nullopt);

// What the server interceptors of this process have sent, for tests, debug
// pages and metrics: failures marked "do not retry" by the give-up reason
// of the outgoing call that caused them (the first one, when several gave
// up), indexed by GiveUpReason; and server calls whose outgoing calls were
// told not to hedge (a call made for an attempt >= 2).
struct ServerSignals {
  uint64_t stops_sent[kNumGiveUpReasons] = {};
  uint64_t hedges_suppressed = 0;
};
ServerSignals ServerSignalsSnapshot();

// `signals` as metric families (rpcguard/observability/stats.h), declared
// in rpcguard's one instrument list (instruments.h, docs/metrics.md):
//
//   rpcguard_server_stops_sent_total{reason}   counter
//   rpcguard_server_hedges_suppressed_total    counter
//
// A reason that caused no stop is left out. Process-wide, unlike a Stats:
// export them once per process, beside a Stats' families:
//
//   std::string body = ToPrometheusText(stats.Snapshot()) +
//                      ToPrometheusText(ServerSignalsSnapshot());
//
// or, with prometheus-cpp, ExposeServerSignals (rpcguard/prometheus/
// collector.h).
std::vector<MetricFamilyData> ToMetricFamilies(const ServerSignals& signals);
// The families above in Prometheus' text exposition format.
std::string ToPrometheusText(const ServerSignals& signals);

}  // namespace rpcguard

#endif  // RPCGUARD_SERVER_H_
