// Copyright rpcguard authors.
//
// Tearing down right after a hedged call ends (issue 21): the application
// drains and destroys its completion queue, its calls and its channel as
// soon as it has the result, while a hedge may still be being started on
// that channel. Before the fix, the copy that decided the call handed the
// result over while the hedge timer's thread was between admitting the next
// copy and starting it: that copy was then created on a destroyed channel
// (ASan: heap-use-after-free in InterceptedChannel::CallbackCQ, or
// `attempting double-free` in grpc_cq_internal_unref when the freed
// channel's callback queue got the new call's reference; bad_weak_ptr from
// Channel::CreateCallInternal).
//
// The window is a few microseconds unless the starting thread is preempted
// in it. An interceptor registered after rpcguard (so created once per
// attempt, while the attempt is being started and before its context holds
// the channel) holds that thread for a while when it is one of gRPC's
// threads: the hedge timer's, or the backoff alarm's. The first copy
// answers meanwhile, so every call here ends while its hedge is being
// started. Each case tears down several times; all of them crashed or made
// ASan report before the fix.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/chaos/server_process.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::RunfilesPath;
using ::rpcguard::testing::ServerProcess;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// The hedge goes 20 ms after the first copy, whose answer comes 40 ms after
// it arrives: inside the 60 ms the hedge's start is held.
constexpr char kHedged[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.02s"},
   "rpcguard": {"maxExtraLoad": 1}}]})json";
constexpr char kRetried[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 1,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";
constexpr int kSlowFirstMs = 40;
constexpr absl::Duration kHold = absl::Milliseconds(60);
constexpr int kTeardowns = 5;

// Set on the test's own thread: calls and copy 1 are created there, a
// hedge or a retry on one of gRPC's threads.
thread_local bool on_test_thread = false;

class PassThrough final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* batch) override {
    batch->Proceed();
  }
};

// Runs once per attempt (registered after rpcguard). Holds a thread of
// gRPC's in the middle of starting an attempt. Touches nothing of its own
// after the hold: before the fix the channel that owns it could be gone by
// then.
class HoldingFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    if (!on_test_thread) absl::SleepFor(kHold);
    return new PassThrough;
  }
};

enum class Api { kCq, kCallback };
enum class Order { kQueueCallsChannel, kChannelFirst };

class TeardownTest : public ::testing::Test {
 protected:
  TeardownTest() : server_(RunfilesPath("tests/testing/fault_server_main")) {}

  void SetUp() override {
    on_test_thread = true;
    // A process of its own: the threads held here are not the server's.
    ASSERT_TRUE(server_.Start(0).ok());
  }

  // One channel, one call ended while its second attempt is being started,
  // then everything destroyed at once in `order`.
  void CallAndTearDown(const char* json, Api api, Order order,
                       const FaultRequest& req) {
    absl::StatusOr<Config> config = Config::FromJson(json);
    ASSERT_TRUE(config.ok()) << config.status();
    Options options;
    options.config = *config;
    options.breaker_registry = *BreakerRegistry::Create({});
    options.trace_verbosity = TraceVerbosity::kOff;
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        factories;
    factories.push_back(MakeInterceptorFactory(options));
    factories.push_back(std::make_unique<HoldingFactory>());
    std::shared_ptr<grpc::Channel> channel =
        grpc::experimental::CreateCustomChannelWithInterceptors(
            server_.address(), grpc::InsecureChannelCredentials(),
            grpc::ChannelArguments(), std::move(factories));
    // Connected first: the timings below are the call's, not the
    // handshake's.
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(5)));
    auto stub = FaultService::NewStub(channel);
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    FaultReply reply;
    grpc::Status status;
    if (api == Api::kCq) {
      auto cq = std::make_unique<grpc::CompletionQueue>();
      auto rpc = stub->AsyncGet(ctx.get(), req, cq.get());
      rpc->Finish(&reply, &status, this);
      void* tag;
      bool ok;
      ASSERT_TRUE(cq->Next(&tag, &ok));
      cq->Shutdown();
      while (cq->Next(&tag, &ok)) {
      }
      if (order == Order::kChannelFirst) {
        stub.reset();
        channel.reset();
      }
      cq.reset();
      rpc.reset();
    } else {
      absl::Notification done;
      stub->async()->Get(ctx.get(), &req, &reply, [&](grpc::Status s) {
        status = std::move(s);
        done.Notify();
      });
      done.WaitForNotification();
      if (order == Order::kChannelFirst) {
        stub.reset();
        channel.reset();
      }
    }
    EXPECT_TRUE(status.ok()) << status.error_message();
    ctx.reset();
    stub.reset();
    channel.reset();
  }

  FaultRequest SlowFirst() {
    FaultRequest req;
    req.set_op_id(absl::StrCat("teardown-", ++op_));
    req.set_slow_first_ms(kSlowFirstMs);
    return req;
  }

  ServerProcess server_;
  int op_ = 0;
};

TEST_F(TeardownTest, CqApiHedgedQueueThenCallsThenChannel) {
  for (int i = 0; i < kTeardowns; ++i) {
    CallAndTearDown(kHedged, Api::kCq, Order::kQueueCallsChannel, SlowFirst());
  }
}

TEST_F(TeardownTest, CqApiHedgedChannelFirst) {
  for (int i = 0; i < kTeardowns; ++i) {
    CallAndTearDown(kHedged, Api::kCq, Order::kChannelFirst, SlowFirst());
  }
}

TEST_F(TeardownTest, CallbackApiHedged) {
  for (int i = 0; i < kTeardowns; ++i) {
    CallAndTearDown(kHedged, Api::kCallback, Order::kQueueCallsChannel,
                    SlowFirst());
  }
}

TEST_F(TeardownTest, CallbackApiHedgedChannelFirst) {
  for (int i = 0; i < kTeardowns; ++i) {
    CallAndTearDown(kHedged, Api::kCallback, Order::kChannelFirst, SlowFirst());
  }
}

// A retried call's next attempt is started from the backoff alarm, and held
// there the same way; nothing can end the call then (the attempt being
// sent, kSending, is what ends it), so this passed before the fix too.
TEST_F(TeardownTest, RetriedCallsBothApisBothOrders) {
  for (Api api : {Api::kCq, Api::kCallback}) {
    for (Order order : {Order::kQueueCallsChannel, Order::kChannelFirst}) {
      FaultRequest req;
      req.set_op_id(absl::StrCat("teardown-retry-", ++op_));
      req.set_fail_first(1);  // UNAVAILABLE at once, then OK
      CallAndTearDown(kRetried, api, order, req);
    }
  }
}

}  // namespace
}  // namespace rpcguard
