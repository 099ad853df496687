// Copyright rpcguard authors.

#include "bench/chain_client.h"

#include <utility>

#include "absl/status/status.h"

namespace rpcguard {
namespace bench {
namespace chain {

bool HaveFleet() {
#ifdef RPCGUARD_CHAIN_FLEET
  return true;
#else
  return false;
#endif
}

RetrySettings ChainRetrySettings() {
  RetrySettings retry;
  retry.max_attempts = kMaxAttempts;
  retry.retry_resource_exhausted = true;
  // rpcguard as shipped: its own retry budget stays on (bench/clients.h
  // turns it off unless asked, to compare at equal retry parameters; here
  // the question is what each client does by default in a chain).
  retry.rpcguard_budget = true;
  return retry;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    Client client, const std::string& target,
    std::shared_ptr<RpcguardState> state) {
  const RetrySettings retry = ChainRetrySettings();
  switch (client) {
    case Client::kNone:
    case Client::kNaive:
      return MakeClientChannel(ClientKind::kPlain, target, retry);
    case Client::kGrpc:
      return MakeClientChannel(ClientKind::kGrpcRetry, target, retry);
    case Client::kGrpcThrottled:
      return MakeClientChannel(ClientKind::kGrpcRetryThrottled, target, retry);
    case Client::kRpcguardFleet:
    case Client::kRpcguardFleetNoMax:
      if (!HaveFleet()) {
        // TODO(chain): drop this once //interceptors/rpcguard:server links
        // (see the RPCGUARD_CHAIN_FLEET note in bench/BUILD).
        return absl::UnimplementedError(
            "rpcguard_fleet*: this build has no rpcguard server interceptor "
            "(interceptors/rpcguard/server.h is not linked yet)");
      }
      return MakeClientChannel(ClientKind::kRpcguard, target, retry,
                               std::move(state));
    case Client::kRpcguard:
    case Client::kSingleTier:
      return MakeClientChannel(ClientKind::kRpcguard, target, retry,
                               std::move(state));
  }
  return absl::InvalidArgumentError("unknown client");
}

// One call of Caller: its attempts so far and the one in flight.
struct Caller::Pending {
  Method method;
  const rpcguard::testing::v1::FaultRequest* request;
  rpcguard::testing::v1::FaultReply* reply;
  ContextFactory make_context;
  std::function<void(grpc::Status)> done;
  std::unique_ptr<grpc::ClientContext> context;
  int attempts = 0;
};

Caller::Caller(Client client, std::shared_ptr<grpc::Channel> channel)
    : naive_(client == Client::kNaive),
      channel_(std::move(channel)),
      stub_(rpcguard::testing::v1::FaultService::NewStub(channel_)) {}

void Caller::Call(Method method,
                  const rpcguard::testing::v1::FaultRequest* request,
                  rpcguard::testing::v1::FaultReply* reply,
                  ContextFactory make_context,
                  std::function<void(grpc::Status)> done) {
  auto* pending =
      new Pending{method,          request, reply, std::move(make_context),
                  std::move(done), nullptr, 0};
  Attempt(pending);
}

void Caller::Attempt(Pending* pending) {
  pending->context = pending->make_context();
  ++pending->attempts;
  auto finished = [this, pending](grpc::Status status) {
    // The naive loop: again at once, as a hand-written retry does, on the
    // codes the retrying clients retry; the propagated deadline ends it.
    const bool retriable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    if (naive_ && retriable && pending->attempts < kMaxAttempts) {
      Attempt(pending);
      return;
    }
    std::function<void(grpc::Status)> done = std::move(pending->done);
    delete pending;
    done(std::move(status));
  };
  if (pending->method == Method::kPut) {
    stub_->async()->Put(pending->context.get(), pending->request,
                        pending->reply, std::move(finished));
  } else {
    stub_->async()->Get(pending->context.get(), pending->request,
                        pending->reply, std::move(finished));
  }
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
