// Copyright rpcguard authors.

#include "bench/clients.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "interceptors/rpcguard.h"

namespace rpcguard {
namespace bench {
namespace {

using ::grpc::experimental::ClientInterceptorFactoryInterface;
using ::grpc::experimental::ClientRpcInfo;
using ::grpc::experimental::InterceptorBatchMethods;

// The floor for any interceptor design: it only proceeds.
class PassThroughInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }
};

class PassThroughFactory final : public ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* /*info*/) override {
    return new PassThroughInterceptor;
  }
};

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
    case ClientKind::kGrpcRetry:
      return "grpc-retry";
    case ClientKind::kRpcguard:
      return "rpcguard";
  }
  return "?";
}

absl::StatusOr<ClientKind> ParseClientName(absl::string_view name) {
  for (ClientKind kind : kAllClients) {
    if (ClientName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown client \"", name,
                   "\" (want plain, pass-through, grpc-retry or rpcguard)"));
}

std::string ServiceConfigJson(const RetrySettings& retry) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kService,
      R"(", "method": ")", kMethod, R"("}], "retryPolicy": {"maxAttempts": )",
      retry.max_attempts, R"(, "initialBackoff": ")",
      Seconds(retry.initial_backoff), R"(", "maxBackoff": ")",
      Seconds(retry.max_backoff), R"(", "backoffMultiplier": )",
      retry.backoff_multiplier,
      R"(, "retryableStatusCodes": ["UNAVAILABLE"]}}])");
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  json += "}";
  return json;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRpcguardChannel(
    const std::string& target, const RetrySettings& retry) {
  // The same JSON the built-in client gets (retryThrottling included, which
  // rpcguard honours as A6 says), plus rpcguard's own defaults: a circuit
  // breaker and a retry budget per target. Every benchmark builds its
  // rpcguard client through this function.
  absl::StatusOr<Config> config = Config::FromJson(ServiceConfigJson(retry));
  if (!config.ok()) return config.status();
  Options options;
  options.config = *std::move(config);
  // A registry per client, so that one scenario's breaker state (an outage
  // opens it) does not carry over into the next.
  absl::StatusOr<std::shared_ptr<BreakerRegistry>> registry =
      BreakerRegistry::Create({});
  if (!registry.ok()) return registry.status();
  options.breaker_registry = *std::move(registry);
  // Default verbosity (kRetries): traces are formatted and written as in
  // production, to a sink that discards them.
  options.trace_sink = std::make_shared<LogfmtSink>(DevNull());
  return CreateChannel(target, grpc::InsecureChannelCredentials(),
                       std::move(options), BaseArgs());
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeClientChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry) {
  switch (kind) {
    case ClientKind::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), BaseArgs());
    case ClientKind::kPassThrough: {
      std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> factories;
      factories.push_back(std::make_unique<PassThroughFactory>());
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
    case ClientKind::kRpcguard:
      return MakeRpcguardChannel(target, retry);
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

absl::Status ServerControl::SetMode(int fail_percent, int delay_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpcguard::testing::v1::ControlRequest req;
  req.set_fail_percent(fail_percent);
  req.set_delay_ms(delay_ms);
  rpcguard::testing::v1::ControlReply reply;
  const grpc::Status s = stub_->Control(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Control: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerControl::TotalAttempts() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
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
  return reply.total_attempts();
}

}  // namespace bench
}  // namespace rpcguard
