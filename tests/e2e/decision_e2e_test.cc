// Copyright rpcguard authors.
//
// The stub API never decides: the same failure gets the same breaker
// accounting, give-up reason and budget spending whether rpcguard sends the
// call once as the application's own call, rides it, or hijacks it. Real
// calls to a real fault-injecting server, for the sync, CQ-async and
// callback stubs.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Method;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get may be retried (after a backoff long enough to act in); Create is
// undeclared, so it is sent once as the application's own call.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.4s",
                   "maxBackoff": "1s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS", "jitter": "A6"}}]})json";

// The same, retried at once: for servers that fail every attempt.
constexpr char kFastRetries[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s",
                   "maxBackoff": "0.002s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";

class DecisionE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override { Connect(*Config::FromJson(kConfig)); }

  void Connect(Config config) {
    auto channel =
        CreateGuardedChannel(server_.address(), "{}", [&](Options& options) {
          options.config = std::move(config);
          options.breaker_registry = registry_;
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = FaultService::NewStub(*channel);
  }

  grpc::Status Call(Method m, const FaultRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    FaultReply reply;
    return StartCall(GetParam(), stub_.get(), m, &ctx, req, &reply)->Wait();
  }

  FaultRequest Failing(const std::string& name, grpc::StatusCode code) {
    FaultRequest req;
    req.set_op_id(absl::StrCat(name, "-", KindName(GetParam())));
    req.set_fail_first(1);
    req.set_fail_code(static_cast<int>(code));
    return req;
  }

  std::shared_ptr<CircuitBreaker> Breaker() {
    return registry_->Get(server_.address());
  }

  FaultServer server_;
  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
  std::unique_ptr<FaultService::Stub> stub_;
};

// A CANCELLED or DEADLINE_EXCEEDED that the server itself sent is an answer:
// the destination is up. Only the caller's own cancel or deadline says
// nothing about it.
TEST_P(DecisionE2ETest, ServerSentCancelOrDeadlineCountsAsAnAnswerOnEveryPath) {
  int64_t counted = 0;
  for (Method m : {Method::kCreate, Method::kGet}) {
    for (grpc::StatusCode code :
         {grpc::StatusCode::CANCELLED, grpc::StatusCode::DEADLINE_EXCEEDED}) {
      const std::string name =
          absl::StrCat(m == Method::kCreate ? "create-" : "get-", code);
      FaultRequest req = Failing(name, code);
      const grpc::Status s = Call(m, req);
      EXPECT_EQ(s.error_code(), code) << name;
      EXPECT_EQ(server_.Op(req.op_id()).attempts, 1) << name;
      ++counted;
      const BreakerSnapshot b = Breaker()->Snapshot();
      EXPECT_EQ(b.window_attempts, counted) << name;
      EXPECT_EQ(b.window_failures, 0) << name;
    }
  }
}

// A method declared idempotent but allowed one attempt is not "not
// idempotent": it gave up because its attempts were spent. Sent once
// (no methodConfig timeout) or hijacked (with one), the reason is the same.
TEST_P(DecisionE2ETest, OneAttemptPolicyGivesUpWithMaxAttempts) {
  for (bool hijacked : {false, true}) {
    Config config = *Config::FromJson(kConfig);
    MethodPolicy once;
    once.idempotency = Idempotency::kIdempotent;
    once.retry.max_attempts = 1;
    if (hijacked) once.timeout = absl::Seconds(5);
    config.Set("rpcguard.testing.v1.FaultService", "Put", once);
    Connect(std::move(config));
    FaultRequest req = Failing(absl::StrCat("put-once-", hijacked),
                               grpc::StatusCode::UNAVAILABLE);
    const grpc::Status s = Call(Method::kPut, req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StrContains(s.error_message(),
                                  "[rpcguard: 1 attempt, gave up: "
                                  "max_attempts]"))
        << "hijacked=" << hijacked << ": " << s.error_message();
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  }
}

// A retry the breaker refuses after the backoff (it opened meanwhile) spends
// no retry budget: the budget is spent only once the breaker admitted the
// retry, right before it is sent.
TEST_P(DecisionE2ETest, RetryTheBreakerRefusesSpendsNoBudget) {
  FaultRequest req = Failing("refused-retry", grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  FaultReply reply;
  auto call =
      StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply);
  // Attempt 1 fails at once; its retry waits 320-480 ms. Meanwhile an
  // operator (or another channel's failures) opens the breaker.
  const absl::Time limit = absl::Now() + absl::Seconds(5);
  while (server_.Op(req.op_id()).attempts < 1 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(100));
  Breaker()->ForceOpen();
  const grpc::Status s = call->Wait();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "gave up: breaker_open"))
      << s.error_message();
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  const RetryBudgetSnapshot budget =
      registry_->GetBudget(server_.address())->Snapshot();
  EXPECT_EQ(budget.first_attempts, 1);
  EXPECT_EQ(budget.retries, 0);
}

// A server that answers every call with a response message and then a
// retriable status: something a unary server can do on the wire (a proxy,
// or another language's server), though gRPC C++'s own unary handlers
// cannot.
class MessageThenUnavailable : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { StartRead(&request_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no request"));
          return;
        }
        FaultReply reply;
        reply.set_op_id("a failed attempt's message");
        const std::string bytes = reply.SerializeAsString();
        grpc::Slice slice(bytes);
        response_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(
            &response_, grpc::WriteOptions(),
            grpc::Status(grpc::StatusCode::UNAVAILABLE, "after a message"));
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer request_;
      grpc::ByteBuffer response_;
    };
    return new Reactor;
  }
};

// After a response message and a retriable status on every attempt, the
// reply object holds no attempt's message, whichever stub API: gRPC leaves
// it unspecified; rpcguard makes the paths agree.
TEST_P(DecisionE2ETest, FailedCallLeavesNoMessageInTheReply) {
  MessageThenUnavailable service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = FaultService::NewStub(*CreateGuardedChannel(
      absl::StrCat("127.0.0.1:", port), kFastRetries,
      [&](Options& options) { options.breaker_registry = registry_; }));
  FaultRequest req;
  req.set_op_id("message-then-unavailable");
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status s =
      StartCall(GetParam(), stub.get(), Method::kGet, &ctx, req, &reply)
          ->Wait();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "gave up: max_attempts"))
      << s.error_message();
  EXPECT_EQ(reply.op_id(), "") << reply.DebugString();
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(AllStubs, DecisionE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace rpcguard
