// Copyright rpcguard authors.

#include "bench/chain_servers.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/chain_client.h"
#include "bench/clients.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

#ifdef RPCGUARD_CHAIN_FLEET
#include "rpcguard/server.h"
#endif

namespace rpcguard {
namespace bench {
namespace chain {
namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Runs each task at its time on one thread of its own: the store's delayed
// answers, which must not hold a gRPC thread for their service time.
class DelayQueue {
 public:
  DelayQueue() : thread_([this] { Loop(); }) {}
  // Never destroyed: the process ends with _exit.

  void Add(absl::Time when, std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.emplace(when, std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (tasks_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const absl::Time first = tasks_.begin()->first;
      if (absl::Now() < first) {
        cv_.wait_until(lock, absl::ToChronoTime(first));
        continue;
      }
      std::function<void()> task = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<absl::Time, std::function<void()>> tasks_;  // guarded by mu_
  std::thread thread_;
};

class StoreService final : public FaultService::CallbackService {
 public:
  explicit StoreService(const StoreOptions& options)
      : plan_(options.plan),
        counter_(BucketsFor(options.duration)),
        per_request_size_(std::max(0, options.requests)),
        per_request_(new std::atomic<int>[per_request_size_]) {
    for (int i = 0; i < per_request_size_; ++i) per_request_[i] = 0;
  }

  BucketCounter& counter() { return counter_; }

  // The most attempts one generator request made here.
  int MaxPerRequest() const {
    int max = 0;
    for (int i = 0; i < per_request_size_; ++i) {
      max = std::max(max, per_request_[i].load());
    }
    return max;
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const FaultRequest* request,
                                FaultReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const absl::Time now = absl::Now();
    counter_.Add(now);
    CountRequest(request->op_id());
    const std::optional<absl::Duration> since = counter_.SinceStart(now);
    if (since.has_value() && plan_.Failing(*since) &&
        (plan_.fail_percent >= 100 || Percent() < plan_.fail_percent)) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "store: injected"));
      return reactor;
    }
    reply->set_op_id(request->op_id());
    if (since.has_value() && plan_.Limited(*since)) {
      // Admission by concurrency, as a server with a fixed number of
      // workers and no queue sheds: the excess is rejected at once.
      if (in_service_.fetch_add(1) >= plan_.max_concurrent) {
        in_service_.fetch_sub(1);
        reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     "store: over capacity"));
        return reactor;
      }
      delays_.Add(now + plan_.service_time, [this, reactor] {
        in_service_.fetch_sub(1);
        reactor->Finish(grpc::Status::OK);
      });
      return reactor;
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  // "r<index>" within the run's requests; anything else (the warm-up) is
  // not counted.
  void CountRequest(absl::string_view op_id) {
    int index;
    if (!absl::ConsumePrefix(&op_id, "r") || !absl::SimpleAtoi(op_id, &index) ||
        index < 0 || index >= per_request_size_) {
      return;
    }
    per_request_[index].fetch_add(1, std::memory_order_relaxed);
  }

  static int Percent() {
    thread_local absl::BitGen gen;
    return absl::Uniform(gen, 0, 100);
  }

  const FaultPlan plan_;
  BucketCounter counter_;
  const int per_request_size_;
  std::unique_ptr<std::atomic<int>[]> per_request_;
  // Calls being served (overload): taken by handlers, given back by the
  // delay thread.
  std::atomic<int> in_service_{0};
  DelayQueue delays_;
};

class TierService final : public FaultService::CallbackService {
 public:
  TierService(const TierOptions& options, std::shared_ptr<grpc::Channel> next)
      : counter_(BucketsFor(options.duration)),
        answers_put_(options.answers_put),
        caller_(options.client, std::move(next)) {}

  BucketCounter& counter() { return counter_; }

  // Counted: the Get attempts, the ones bound for the store.
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const FaultRequest* request,
                                FaultReply* reply) override {
    counter_.Add(absl::Now());
    return Forward(Method::kGet, context, request, reply);
  }

  // The method the store has no part in: B answers it, A passes it on.
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* context,
                                const FaultRequest* request,
                                FaultReply* reply) override {
    if (answers_put_) {
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      reply->set_op_id(request->op_id());
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    return Forward(Method::kPut, context, request, reply);
  }

 private:
  grpc::ServerUnaryReactor* Forward(Method method,
                                    grpc::CallbackServerContext* context,
                                    const FaultRequest* request,
                                    FaultReply* reply) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    caller_.Call(
        method, request, reply,
        [context] {
          // The incoming call's deadline (and cancellation) for every
          // attempt of the outgoing one.
          return grpc::ClientContext::FromServerContext(*context);
        },
        [reactor](grpc::Status status) { reactor->Finish(std::move(status)); });
    return reactor;
  }

  BucketCounter counter_;
  const bool answers_put_;
  Caller caller_;
};

// Serves `service` on an ephemeral port, says where, then follows the
// driver's lines until "stop". Never returns normally: the process ends
// with _exit (see the header). `more_lines` (the store's per-request
// maximum, a tier's breaker openings) are said after the counts.
int Serve(grpc::Service* service, BucketCounter& counter, Client client,
          std::function<std::vector<std::string>()> more_lines) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  if (IsFleet(client)) {
#ifdef RPCGUARD_CHAIN_FLEET
    rpcguard::ServerOptions fleet;
    if (client == Client::kRpcguardFleetNoMax) {
      fleet.propagate.erase(
          std::remove(fleet.propagate.begin(), fleet.propagate.end(),
                      rpcguard::GiveUpReason::kMaxAttempts),
          fleet.propagate.end());
    }
    const absl::Status added = rpcguard::AddServerInterceptor(&builder, fleet);
    if (!added.ok()) {
      std::fprintf(stderr, "chain: AddServerInterceptor: %s\n",
                   added.ToString().c_str());
      return 1;
    }
#else
    std::fprintf(stderr, "chain: no server interceptor in this build\n");
    return 1;
#endif
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "chain: cannot listen\n");
    return 1;
  }
  WriteStdoutLine(absl::StrCat("listening on 127.0.0.1:", port));
  while (std::optional<std::string> line = ReadStdinLine()) {
    if (std::optional<absl::Time> t0 = ParseStart(*line)) {
      counter.Start(*t0);
    } else if (*line == "stop") {
      WriteStdoutLine(
          absl::StrCat("counts ", absl::StrJoin(counter.Snapshot(), " ")));
      for (const std::string& more : more_lines()) WriteStdoutLine(more);
      _exit(0);
    }
  }
  _exit(1);  // the driver is gone
}

}  // namespace

int RunStore(const StoreOptions& options) {
  auto* service = new StoreService(options);  // lives until _exit
  return Serve(service, service->counter(), Client::kNone, [service] {
    return std::vector<std::string>{
        absl::StrCat("max_per_request ", service->MaxPerRequest())};
  });
}

int RunTier(const TierOptions& options) {
  absl::StatusOr<std::shared_ptr<RpcguardState>> state =
      RpcguardState::Create();
  if (!state.ok()) {
    std::fprintf(stderr, "chain: tier state: %s\n",
                 state.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> next =
      MakeChannel(options.client, options.target, *state);
  if (!next.ok()) {
    std::fprintf(stderr, "chain: tier channel: %s\n",
                 next.status().ToString().c_str());
    return 1;
  }
  // Connected before the first request, and nothing else: a cold scenario's
  // channels have carried no call before T0 (the warm ones' warm-up calls
  // come later, from the generator).
  if (!(*next)->WaitForConnected(
          absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    std::fprintf(stderr, "chain: tier cannot connect to %s\n",
                 options.target.c_str());
    return 1;
  }
  auto* service = new TierService(options, *std::move(next));
  return Serve(service, service->counter(), options.client, [state = *state] {
    return std::vector<std::string>{
        absl::StrCat("breaker_openings ", state->breaker_openings())};
  });
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
