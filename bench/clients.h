// Copyright rpcguard authors.
//
// The clients the benchmarks compare, each a channel to the same fault
// server with the same retry parameters where it retries at all:
//
//   kPlain        a plain channel: the floor;
//   kPassThrough  an interceptor that only calls Proceed: the floor for any
//                 interceptor design;
//   kPassThroughHeaders  the same, adding the two headers rpcguard puts on
//                 every call (a fresh UUID-v4 idempotency key and the
//                 attempt number "1") to the call's initial metadata: what
//                 they cost on their own on a call rpcguard does not hijack;
//   kHijackFloor  an interceptor that hijacks every unary call and makes
//                 exactly one attempt on the channel below it, nothing else
//                 (no retries, metadata or policy): the floor for any
//                 retrying interceptor built on gRPC's hijacking, which
//                 rpcguard is;
//   kHijackFloorHeaders  the same floor, its attempt carrying the two
//                 headers rpcguard puts on every attempt (a fresh UUID-v4
//                 idempotency key and the attempt number "1"): what those
//                 headers cost on their own (gRPC validates, copies and
//                 HPACK-encodes each), apart from rpcguard's other work;
//   kGrpcRetry    gRPC's built-in retry: the parameters as a service-config
//                 retryPolicy (plus retryThrottling when the scenario has a
//                 budget), on a plain grpc::CreateCustomChannel;
//   kGrpcRetryThrottled  the same with retryThrottling always on, for the
//                 scenarios of issue 13 that compare gRPC's retry with and
//                 without it;
//   kRpcguard     rpcguard::CreateChannel with the same JSON as its Config,
//                 default trace verbosity, traces written to /dev/null.
//   kRpcguardHedged  rpcguard with a hedgingPolicy instead of the
//                 retryPolicy (issue 14): a fixed hedging delay;
//   kRpcguardHedgedAdaptive  the same, the delay a percentile of recent
//                 attempt latency (the fixed delay until enough samples).
//
// Every channel has its own subchannel pool, so no two clients share a
// connection.

#ifndef RPCGUARD_BENCH_CLIENTS_H_
#define RPCGUARD_BENCH_CLIENTS_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace bench {

enum class ClientKind {
  kPlain,
  kPassThrough,
  kPassThroughHeaders,
  kHijackFloor,
  kHijackFloorHeaders,
  kGrpcRetry,
  kGrpcRetryThrottled,
  kRpcguard,
  kRpcguardHedged,
  kRpcguardHedgedAdaptive
};

// The clients of the main comparison. Without kGrpcRetryThrottled: there,
// the scenario decides whether gRPC's retry has retryThrottling.
inline constexpr ClientKind kAllClients[] = {
    ClientKind::kPlain, ClientKind::kPassThrough, ClientKind::kHijackFloor,
    ClientKind::kGrpcRetry, ClientKind::kRpcguard};

// The clients of issue 13's scenarios: the two that do not retry behave
// alike there, so only plain stands for them.
inline constexpr ClientKind kEvidenceClients[] = {
    ClientKind::kPlain, ClientKind::kGrpcRetry, ClientKind::kGrpcRetryThrottled,
    ClientKind::kRpcguard};

// The clients of issue 14's latency-tail scenarios: the two that do not
// retry behave alike there, so only plain stands for them.
inline constexpr ClientKind kTailClients[] = {
    ClientKind::kPlain, ClientKind::kGrpcRetry, ClientKind::kRpcguard,
    ClientKind::kRpcguardHedged, ClientKind::kRpcguardHedgedAdaptive};

// "plain", "pass-through", "pass-through-headers", "hijack-floor",
// "hijack-floor-headers", "grpc-retry",
// "grpc-retry-throttled", "rpcguard", "rpcguard-hedged",
// "rpcguard-hedged-adaptive".
absl::string_view ClientName(ClientKind kind);
// Parses the names above.
absl::StatusOr<ClientKind> ParseClientName(absl::string_view name);

// The service and method every benchmark calls: Get, declared
// NO_SIDE_EFFECTS in fault.proto, so rpcguard retries it without any
// `rpcguard` block in its config.
inline constexpr char kService[] = "rpcguard.testing.v1.FaultService";
inline constexpr char kMethod[] = "Get";

// Retry parameters shared by the built-in retry and rpcguard.
struct RetrySettings {
  int max_attempts = 4;  // at most 5: gRPC clamps higher values
  absl::Duration initial_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(100);
  double backoff_multiplier = 2.0;
  // RESOURCE_EXHAUSTED is retriable too (the overload scenario), besides
  // UNAVAILABLE.
  bool retry_resource_exhausted = false;
  // gRFC A6 retryThrottling, when the scenario has a retry budget.
  bool budget = false;
  int max_tokens = 10;
  double token_ratio = 0.1;
  // rpcguard keeps its own retry budget (its defaults) even without
  // retryThrottling: issue 13's scenarios measure rpcguard as shipped.
  bool rpcguard_budget = false;
  // Hedged rpcguard clients: copies in all (A6's maxAttempts), the fixed
  // hedgingDelay, and the adaptive client's percentile (the fixed delay
  // holds until hedgingMinSamples successes; floor 1 ms). The extra-load
  // cap is rpcguard's default (5% of first attempts plus 1 a second).
  int hedge_max_attempts = 2;
  absl::Duration hedging_delay = absl::Milliseconds(10);
  double hedging_percentile = 0.95;
};

// The service config both retrying clients get, e.g.
//   {"methodConfig": [{"name": [{"service": "rpcguard.testing.v1.FaultService",
//                                "method": "Get"}],
//                      "retryPolicy": {"maxAttempts": 4, ...}}],
//    "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}
std::string ServiceConfigJson(const RetrySettings& retry);

// The hedged rpcguard clients' config: the method's hedgingPolicy (no
// retryPolicy: A6 allows one or the other), nonFatalStatusCodes the retry
// codes above, and with `adaptive` rpcguard's adaptive delay, e.g.
//   {"methodConfig": [{"name": [...], "hedgingPolicy": {"maxAttempts": 2,
//     "hedgingDelay": "0.010s", "nonFatalStatusCodes": ["UNAVAILABLE"]},
//     "rpcguard": {"hedgingDelayPercentile": 0.95,
//                  "hedgingDelayFloor": "0.001s"}}], ...}
std::string HedgedConfigJson(const RetrySettings& retry, bool adaptive);

// What the rpcguard channels of one measurement share, and what they saw:
// a breaker registry of their own (a fresh process's breakers and budgets,
// so that one scenario's state does not carry over into the next) and a
// trace sink that counts what the figures report, then writes the trace as
// in production to a sink that discards it. Thread-safe.
class RpcguardState {
 public:
  static absl::StatusOr<std::shared_ptr<RpcguardState>> Create();

  const std::shared_ptr<BreakerRegistry>& registry() const { return registry_; }
  std::shared_ptr<TraceSink> sink() const;

  // Attempts that found no connection and never reached the server
  // (IsNotSent), as traced.
  int64_t not_sent_attempts() const;
  // Transitions of any breaker to "open".
  int64_t breaker_openings() const;

 private:
  class CountingSink;
  RpcguardState(std::shared_ptr<BreakerRegistry> registry,
                std::shared_ptr<CountingSink> sink);

  std::shared_ptr<BreakerRegistry> registry_;
  std::shared_ptr<CountingSink> sink_;
};

// A channel to `target` for `kind`. rpcguard channels use `state` (null: a
// new one for this channel alone). Errors: whatever rpcguard's Config or
// CreateChannel reports.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeClientChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state = nullptr);

// The rpcguard clients of the comparison (`kind` one of kRpcguard,
// kRpcguardHedged, kRpcguardHedgedAdaptive); the one place where their
// Options are set.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRpcguardChannel(
    const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state = nullptr,
    ClientKind kind = ClientKind::kRpcguard);

// The stream benchmarks' methods (streams.proto): server-, client- and
// bidi-streaming, retried until they commit.
inline constexpr char kStreamService[] = "rpcguard.testing.v1.Streams";

// The service config of the stream benchmarks: `retry` as the retryPolicy of
// Streams.ServerStream, ClientStream and Bidi (gRPC retries a stream until
// it commits, as rpcguard does), retryThrottling when retry.budget. With
// `for_rpcguard`, the methods are also declared IDEMPOTENT to rpcguard (it
// retries a stream only when told it is safe to repeat) and, unless
// retry.budget or retry.rpcguard_budget, rpcguard's own retry budget is off.
std::string StreamServiceConfigJson(const RetrySettings& retry,
                                    bool for_rpcguard);

// A channel to `target` for the stream benchmarks: kPlain, kGrpcRetry (with
// StreamServiceConfigJson) or kRpcguard (the same config for rpcguard, its
// Options as MakeRpcguardChannel sets them). Errors: InvalidArgument for
// another kind, else what rpcguard's Config or CreateChannel reports.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeStreamChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state = nullptr);

// Returns a channel that has made one callback-API call; while it lives,
// gRPC keeps its callback-API thread pool running. Why the benchmarks hold
// one for their whole run: gRPC 1.51 starts that pool with the first channel
// that makes a callback call and stops it when the last such channel is
// destroyed. rpcguard's attempt keeps a reference to the application's
// channel (in the attempt's ClientContext) that it drops on that pool's
// thread after the application's call has ended; when that is the last
// reference, the channel's destructor stops the pool from one of its own
// threads and the process aborts ("grpc_cq_internal_unref: assertion failed:
// prior > 0"; about 1 run in 12 of a benchmark that creates and destroys
// rpcguard channels, never without rpcguard). Errors: Unavailable when the
// call fails.
absl::StatusOr<std::shared_ptr<grpc::Channel>> HoldCallbackThreads(
    const std::string& target);

// Talks to the server's FaultControl service over a channel of its own.
class ServerControl {
 public:
  explicit ServerControl(const std::string& target);

  // Fails `fail_percent` of all attempts with UNAVAILABLE, answers every
  // attempt `delay_ms` late and, when `capacity_per_second` is positive,
  // sheds attempts beyond it with RESOURCE_EXHAUSTED, and answers
  // `late_percent` of attempts (drawn at random) `late_ms` later still,
  // server-wide, until the next call.
  absl::Status SetMode(int fail_percent, int delay_ms,
                       int capacity_per_second = 0, int late_percent = 0,
                       int late_ms = 0);

  // Attempts the server has received in all.
  absl::StatusOr<int64_t> TotalAttempts();

  // Fails `fail_percent` of Streams attempts before any response, drawn
  // from a generator seeded with `seed`; FaultService's faults off.
  absl::Status SetStreamFaults(int fail_percent, uint64_t seed);

  // Streams attempts the server has received in all.
  absl::StatusOr<int64_t> StreamAttempts();

 private:
  absl::StatusOr<rpcguard::testing::v1::StatsReply> Stats();

  std::unique_ptr<rpcguard::testing::v1::FaultControl::Stub> stub_;
};

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CLIENTS_H_
