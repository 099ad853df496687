// Copyright rpcguard authors.
//
// The client side of every hop of the chain benchmark: a channel for each
// Client (chain_common.h) and one asynchronous FaultService.Get through it.
// The retrying clients reuse bench/clients.h, so that their policy is the
// one every other benchmark measures: 3 attempts, 10 ms initial backoff,
// 100 ms at most, x2, UNAVAILABLE and RESOURCE_EXHAUSTED retriable.

#ifndef RPCGUARD_BENCH_CHAIN_CLIENT_H_
#define RPCGUARD_BENCH_CHAIN_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/chain_common.h"
#include "bench/clients.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

namespace rpcguard {
namespace bench {
namespace chain {

// Attempts a call may make, for every retrying client (naive included).
inline constexpr int kMaxAttempts = 3;

// The retry parameters of the retrying clients.
RetrySettings ChainRetrySettings();

// A channel to `target` for `client` (kSingleTier: rpcguard's). rpcguard's
// channels share `state` (its breaker registry, and its trace sink, which
// counts breaker openings); the others ignore it. Errors: Unimplemented for
// kRpcguardFleet in a build without the server interceptor, else what
// bench/clients.h reports.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    Client client, const std::string& target,
    std::shared_ptr<RpcguardState> state);

// The methods the chain calls: Get goes down to the store; Put (kSplit
// only) is answered by B without the store.
enum class Method { kGet, kPut };

// Makes Get or Put calls through one channel, each with as many attempts as
// its client makes in the application (kNaive: up to kMaxAttempts; every
// other client: one, its channel retries below). Thread-safe.
class Caller {
 public:
  // Each attempt's context, made just before it starts: the naive loop
  // needs a fresh one per attempt.
  using ContextFactory = std::function<std::unique_ptr<grpc::ClientContext>()>;

  Caller(Client client, std::shared_ptr<grpc::Channel> channel);

  // Starts the call and returns at once; `done` runs once, on a gRPC
  // thread, with the final status. `request` and `reply` must outlive it.
  void Call(Method method, const rpcguard::testing::v1::FaultRequest* request,
            rpcguard::testing::v1::FaultReply* reply,
            ContextFactory make_context,
            std::function<void(grpc::Status)> done);

 private:
  struct Pending;
  void Attempt(Pending* pending);

  const bool naive_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpcguard::testing::v1::FaultService::Stub> stub_;
};

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_CLIENT_H_
