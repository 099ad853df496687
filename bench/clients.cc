// Copyright rpcguard authors.

#include "bench/clients.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <atomic>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "bench/floors.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace bench {
namespace {

using ::grpc::experimental::ClientInterceptorFactoryInterface;

// Arguments every client starts from: a subchannel pool of its own, so no
// two channels share a connection.
grpc::ChannelArguments BaseArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
}

// /dev/null as a stdio stream, for traces that are written but not kept.
FILE* DevNull() {
  static FILE* const file = std::fopen("/dev/null", "w");
  return file;
}

}  // namespace

absl::string_view ClientName(ClientKind kind) {
  switch (kind) {
    case ClientKind::kPlain:
      return "plain";
    case ClientKind::kPassThrough:
      return "pass-through";
    case ClientKind::kPassThroughHeaders:
      return "pass-through-headers";
    case ClientKind::kHijackFloor:
      return "hijack-floor";
    case ClientKind::kHijackFloorHeaders:
      return "hijack-floor-headers";
    case ClientKind::kGrpcRetry:
      return "grpc-retry";
    case ClientKind::kGrpcRetryThrottled:
      return "grpc-retry-throttled";
    case ClientKind::kRpcguard:
      return "rpcguard";
    case ClientKind::kRpcguardHedged:
      return "rpcguard-hedged";
    case ClientKind::kRpcguardHedgedAdaptive:
      return "rpcguard-hedged-adaptive";
  }
  return "?";
}

absl::StatusOr<ClientKind> ParseClientName(absl::string_view name) {
  for (ClientKind kind : kAllClients) {
    if (ClientName(kind) == name) return kind;
  }
  for (ClientKind kind :
       {ClientKind::kPassThroughHeaders, ClientKind::kHijackFloorHeaders,
        ClientKind::kGrpcRetryThrottled, ClientKind::kRpcguardHedged,
        ClientKind::kRpcguardHedgedAdaptive}) {
    if (ClientName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown client \"", name,
                   "\" (want plain, pass-through, pass-through-headers, "
                   "hijack-floor, hijack-floor-headers, grpc-retry, "
                   "grpc-retry-throttled, rpcguard, rpcguard-hedged or "
                   "rpcguard-hedged-adaptive)"));
}

std::string ServiceConfigJson(const RetrySettings& retry) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kService,
      R"(", "method": ")", kMethod, R"("}], "retryPolicy": {"maxAttempts": )",
      retry.max_attempts, R"(, "initialBackoff": ")",
      Seconds(retry.initial_backoff), R"(", "maxBackoff": ")",
      Seconds(retry.max_backoff), R"(", "backoffMultiplier": )",
      retry.backoff_multiplier, R"(, "retryableStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "",
      R"(]}}])");
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  json += "}";
  return json;
}

std::string HedgedConfigJson(const RetrySettings& retry, bool adaptive) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kService,
      R"(", "method": ")", kMethod, R"("}], "hedgingPolicy": {"maxAttempts": )",
      retry.hedge_max_attempts, R"(, "hedgingDelay": ")",
      Seconds(retry.hedging_delay),
      R"(", "nonFatalStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "", "]}");
  if (adaptive) {
    absl::StrAppend(&json, R"(, "rpcguard": {"hedgingDelayPercentile": )",
                    retry.hedging_percentile,
                    R"(, "hedgingDelayFloor": "0.001s"})");
  }
  json += "}]";
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  json += "}";
  return json;
}

// Counts on the way through; the trace itself goes to /dev/null.
class RpcguardState::CountingSink final : public TraceSink {
 public:
  void Write(const TraceEvent& e) override {
    if (e.kind == TraceEvent::Kind::kBreakerTransition) {
      if (e.to_state == "open") {
        openings_.fetch_add(1, std::memory_order_relaxed);
      }
    } else if (e.kind == TraceEvent::Kind::kAttempt &&
               e.code != grpc::StatusCode::OK && IsNotSent(e.code, e.message)) {
      not_sent_.fetch_add(1, std::memory_order_relaxed);
    }
    out_.Write(e);
  }

  // Written by Write on gRPC's threads; read when the load is over.
  std::atomic<int64_t> not_sent_{0};
  std::atomic<int64_t> openings_{0};

 private:
  LogfmtSink out_{DevNull()};
};

RpcguardState::RpcguardState(std::shared_ptr<BreakerRegistry> registry,
                             std::shared_ptr<CountingSink> sink)
    : registry_(std::move(registry)), sink_(std::move(sink)) {}

absl::StatusOr<std::shared_ptr<RpcguardState>> RpcguardState::Create() {
  absl::StatusOr<std::shared_ptr<BreakerRegistry>> registry =
      BreakerRegistry::Create({});
  if (!registry.ok()) return registry.status();
  return std::shared_ptr<RpcguardState>(new RpcguardState(
      *std::move(registry), std::make_shared<CountingSink>()));
}

std::shared_ptr<TraceSink> RpcguardState::sink() const { return sink_; }

int64_t RpcguardState::not_sent_attempts() const {
  return sink_->not_sent_.load(std::memory_order_relaxed);
}

int64_t RpcguardState::breaker_openings() const {
  return sink_->openings_.load(std::memory_order_relaxed);
}

// An rpcguard channel with `json` as its Config: the one place where the
// benchmarks' rpcguard Options are set.
absl::StatusOr<std::shared_ptr<grpc::Channel>> RpcguardChannelFromJson(
    const std::string& target, const std::string& json,
    std::shared_ptr<RpcguardState> state);

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRpcguardChannel(
    const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state, ClientKind kind) {
  // The same JSON the built-in client gets (retryThrottling included, which
  // rpcguard honours as A6 says), plus rpcguard's own defaults: a circuit
  // breaker and a retry budget per target. Every benchmark builds its
  // rpcguard client through this function. The budget is rpcguard's only
  // where the built-in client has one too (retry.budget): elsewhere both
  // retry as far as the policy allows, so that success rates compare at the
  // same retry parameters. (With its default budget, 20% of calls plus 10
  // retries/s, rpcguard gives up about one call in ten at 30% failures,
  // rather than add 45% more load: README, "Benchmarks".)
  std::string json =
      kind == ClientKind::kRpcguard
          ? ServiceConfigJson(retry)
          : HedgedConfigJson(retry,
                             kind == ClientKind::kRpcguardHedgedAdaptive);
  if (!retry.budget && !retry.rpcguard_budget) {
    json.pop_back();  // the closing brace
    json += R"(, "rpcguard": {"retryBudget": {"enabled": false}}})";
  }
  return RpcguardChannelFromJson(target, json, std::move(state));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> RpcguardChannelFromJson(
    const std::string& target, const std::string& json,
    std::shared_ptr<RpcguardState> state) {
  absl::StatusOr<Config> config = Config::FromJson(json);
  if (!config.ok()) return config.status();
  Options options;
  options.config = *std::move(config);
  // A registry per client (or per measurement, shared by its channels), so
  // that one scenario's breaker state (an outage opens it) does not carry
  // over into the next.
  if (state == nullptr) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  options.breaker_registry = state->registry();
  // Default verbosity (kRetries): traces are formatted and written as in
  // production, to a sink that discards them.
  options.trace_sink = state->sink();
  return CreateChannel(target, grpc::InsecureChannelCredentials(),
                       std::move(options), BaseArgs());
}

std::string StreamServiceConfigJson(const RetrySettings& retry,
                                    bool for_rpcguard) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kStreamService,
      R"(", "method": "ServerStream"}, {"service": ")", kStreamService,
      R"(", "method": "ClientStream"}, {"service": ")", kStreamService,
      R"(", "method": "Bidi"}], "retryPolicy": {"maxAttempts": )",
      retry.max_attempts, R"(, "initialBackoff": ")",
      Seconds(retry.initial_backoff), R"(", "maxBackoff": ")",
      Seconds(retry.max_backoff), R"(", "backoffMultiplier": )",
      retry.backoff_multiplier, R"(, "retryableStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "",
      R"(]})",
      for_rpcguard ? R"(, "rpcguard": {"idempotency": "IDEMPOTENT"})" : "",
      "}]");
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  if (for_rpcguard && !retry.budget && !retry.rpcguard_budget) {
    json += R"(, "rpcguard": {"retryBudget": {"enabled": false}})";
  }
  json += "}";
  return json;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeStreamChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state) {
  switch (kind) {
    case ClientKind::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), BaseArgs());
    case ClientKind::kGrpcRetry: {
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(StreamServiceConfigJson(retry, false));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kHijackFloor:
      return MakeClientChannel(kind, target, retry, std::move(state));
    case ClientKind::kRpcguard:
      return RpcguardChannelFromJson(
          target, StreamServiceConfigJson(retry, true), std::move(state));
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ClientName(kind),
                   ": not a client of the stream benchmarks "
                   "(plain, hijack-floor, grpc-retry, rpcguard)"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeClientChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state) {
  switch (kind) {
    case ClientKind::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), BaseArgs());
    case ClientKind::kPassThrough:
    case ClientKind::kPassThroughHeaders: {
      std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> factories;
      factories.push_back(
          NewPassThroughFactory(kind == ClientKind::kPassThroughHeaders));
      return grpc::experimental::CreateCustomChannelWithInterceptors(
          target, grpc::InsecureChannelCredentials(), BaseArgs(),
          std::move(factories));
    }
    case ClientKind::kHijackFloor:
    case ClientKind::kHijackFloorHeaders: {
      std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> factories;
      factories.push_back(
          NewHijackFloorFactory(kind == ClientKind::kHijackFloorHeaders));
      return grpc::experimental::CreateCustomChannelWithInterceptors(
          target, grpc::InsecureChannelCredentials(), BaseArgs(),
          std::move(factories));
    }
    case ClientKind::kGrpcRetry: {
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(ServiceConfigJson(retry));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kGrpcRetryThrottled: {
      RetrySettings throttled = retry;
      throttled.budget = true;
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(ServiceConfigJson(throttled));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kRpcguard:
    case ClientKind::kRpcguardHedged:
    case ClientKind::kRpcguardHedgedAdaptive:
      return MakeRpcguardChannel(target, retry, std::move(state), kind);
  }
  return absl::InvalidArgumentError("unknown client kind");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> HoldCallbackThreads(
    const std::string& target) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), BaseArgs());
  auto stub = rpcguard::testing::v1::FaultControl::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpcguard::testing::v1::StatsRequest req;
  req.add_op_ids("-");
  rpcguard::testing::v1::StatsReply reply;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Stats(&ctx, &req, &reply, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "FaultControl.Stats (callback): ", status.error_message()));
  }
  return channel;
}

ServerControl::ServerControl(const std::string& target)
    : stub_(rpcguard::testing::v1::FaultControl::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                    BaseArgs()))) {}

absl::Status ServerControl::SetMode(int fail_percent, int delay_ms,
                                    int capacity_per_second, int late_percent,
                                    int late_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // A server that was just restarted may not be connected yet.
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::ControlRequest req;
  req.set_fail_percent(fail_percent);
  req.set_delay_ms(delay_ms);
  req.set_capacity_per_second(capacity_per_second);
  req.set_late_percent(late_percent);
  req.set_late_ms(late_ms);
  rpcguard::testing::v1::ControlReply reply;
  const grpc::Status s = stub_->Control(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Control: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerControl::TotalAttempts() {
  absl::StatusOr<rpcguard::testing::v1::StatsReply> stats = Stats();
  if (!stats.ok()) return stats.status();
  return stats->total_attempts();
}

absl::StatusOr<int64_t> ServerControl::StreamAttempts() {
  absl::StatusOr<rpcguard::testing::v1::StatsReply> stats = Stats();
  if (!stats.ok()) return stats.status();
  return stats->stream_attempts();
}

absl::Status ServerControl::SetStreamFaults(int fail_percent, uint64_t seed) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::ControlRequest req;
  req.set_stream_fail_percent(fail_percent);
  req.set_stream_seed(seed);
  rpcguard::testing::v1::ControlReply reply;
  const grpc::Status s = stub_->Control(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Control: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<rpcguard::testing::v1::StatsReply> ServerControl::Stats() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::StatsRequest req;
  // An operation nobody uses: the reply carries only the total, never the
  // per-attempt records of every operation.
  req.add_op_ids("-");
  rpcguard::testing::v1::StatsReply reply;
  const grpc::Status s = stub_->Stats(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Stats: ", s.error_message()));
  }
  return reply;
}

}  // namespace bench
}  // namespace rpcguard
