// Copyright rpcguard authors.
//
// rpcguard among other interceptors, as gRPC users chain them in their first
// week: a factory that returns null before it, rpcguard registered twice, an
// earlier interceptor making calls through its intercepted channel, and a
// logging interceptor after it that reads messages as the method's protobuf
// types. Real calls to a real server, for the sync, CQ-async and callback
// stubs; none may crash, recurse or retry twice over.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc/attempt_call.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Method;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;
namespace exp = ::grpc::experimental;
using Factories =
    std::vector<std::unique_ptr<exp::ClientInterceptorFactoryInterface>>;

constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";

// gRPC allows a factory to decline a call by returning null.
class NullFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo*) override {
    return nullptr;
  }
};

// What a logging interceptor saw: the messages it read as the method's
// protobuf types, and the objects it was handed that are no protobuf
// message at all (a grpc::ByteBuffer), which it does not read.
struct Seen {
  absl::Mutex mu;
  std::vector<std::string> request_ops ABSL_GUARDED_BY(mu);
  std::vector<std::string> reply_ops ABSL_GUARDED_BY(mu);
  int sends ABSL_GUARDED_BY(mu) = 0;
  int not_messages ABSL_GUARDED_BY(mu) = 0;
};

// Reads the request and reply as FaultService's types, as it would on a
// plain channel (where they are those types, or absent).
class LoggingInterceptor : public exp::Interceptor {
 public:
  explicit LoggingInterceptor(Seen* seen) : seen_(seen) {}
  void Intercept(exp::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      const void* msg = batch->GetSendMessage();
      absl::MutexLock lock(&seen_->mu);
      ++seen_->sends;
      if (msg != nullptr && !internal::IsProtobufMessage(msg)) {
        ++seen_->not_messages;
      } else if (msg != nullptr) {
        seen_->request_ops.push_back(
            static_cast<const FaultRequest*>(msg)->op_id());
      }
    }
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::POST_RECV_MESSAGE)) {
      const void* msg = batch->GetRecvMessage();
      absl::MutexLock lock(&seen_->mu);
      if (msg != nullptr && !internal::IsProtobufMessage(msg)) {
        ++seen_->not_messages;
      } else if (msg != nullptr) {
        seen_->reply_ops.push_back(
            static_cast<const FaultReply*>(msg)->op_id());
      }
    }
    batch->Proceed();
  }

 private:
  Seen* const seen_;
};

class LoggingFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  explicit LoggingFactory(Seen* seen) : seen_(seen) {}
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo*) override {
    return new LoggingInterceptor(seen_);
  }

 private:
  Seen* const seen_;
};

// Before every call to Put, makes a call to Get through its intercepted
// channel (a "pre-flight" check), waits for it and records its status.
struct SideCalls {
  absl::Mutex mu;
  std::vector<grpc::Status> statuses ABSL_GUARDED_BY(mu);
  std::vector<std::string> ops ABSL_GUARDED_BY(mu);
};

class SideCallInterceptor : public exp::Interceptor {
 public:
  SideCallInterceptor(exp::ClientRpcInfo* info, SideCalls* calls)
      : info_(info), calls_(calls) {}
  void Intercept(exp::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA) &&
        std::string(info_->method()) ==
            "/rpcguard.testing.v1.FaultService/Put") {
      std::shared_ptr<grpc::ChannelInterface> below =
          batch->GetInterceptedChannel();
      grpc::TemplatedGenericStub<FaultRequest, FaultReply> stub(below);
      FaultRequest req;
      {
        absl::MutexLock lock(&calls_->mu);
        req.set_op_id(absl::StrCat("side-", calls_->ops.size()));
        calls_->ops.push_back(req.op_id());
      }
      req.set_fail_first(1);  // rpcguard must retry it
      FaultReply reply;
      grpc::ClientContext ctx;
      absl::Notification done;
      grpc::Status status;
      stub.UnaryCall(&ctx, kGet, grpc::StubOptions(), &req, &reply,
                     [&](grpc::Status s) {
                       status = std::move(s);
                       done.Notify();
                     });
      done.WaitForNotification();
      absl::MutexLock lock(&calls_->mu);
      calls_->statuses.push_back(status);
    }
    batch->Proceed();
  }

 private:
  exp::ClientRpcInfo* const info_;
  SideCalls* const calls_;
};

class SideCallFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  explicit SideCallFactory(SideCalls* calls) : calls_(calls) {}
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo* info) override {
    return new SideCallInterceptor(info, calls_);
  }

 private:
  SideCalls* const calls_;
};

class InterceptorChainTest : public ::testing::TestWithParam<StubKind> {
 protected:
  std::unique_ptr<exp::ClientInterceptorFactoryInterface> Rpcguard() {
    Options options;
    options.config = *Config::FromJson(kConfig);
    options.breaker_registry = *BreakerRegistry::Create({});
    options.destination = server_.address();
    return MakeInterceptorFactory(std::move(options));
  }

  void Connect(Factories factories) {
    stub_ = FaultService::NewStub(exp::CreateCustomChannelWithInterceptors(
        server_.address(), grpc::InsecureChannelCredentials(),
        grpc::ChannelArguments(), std::move(factories)));
  }

  grpc::Status Call(Method m, const std::string& op, int fail_first) {
    FaultRequest req;
    req.set_op_id(absl::StrCat(op, "-", KindName(GetParam())));
    req.set_fail_first(fail_first);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    grpc::Status s =
        StartCall(GetParam(), stub_.get(), m, &ctx, req, &reply)->Wait();
    if (s.ok()) {
      EXPECT_EQ(reply.op_id(), req.op_id());
    }
    return s;
  }

  int Attempts(const std::string& op) {
    return server_.Op(absl::StrCat(op, "-", KindName(GetParam()))).attempts;
  }

  FaultServer server_;
  std::unique_ptr<FaultService::Stub> stub_;
};

TEST_P(InterceptorChainTest, NullFactoryBeforeRpcguardDoesNotRecurse) {
  Factories f;
  f.push_back(std::make_unique<NullFactory>());
  f.push_back(Rpcguard());
  Connect(std::move(f));
  EXPECT_TRUE(Call(Method::kGet, "null-get", 1).ok());
  EXPECT_EQ(Attempts("null-get"), 2);
  EXPECT_EQ(Call(Method::kCreate, "null-create", 1).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Attempts("null-create"), 1);
}

TEST_P(InterceptorChainTest, RegisteredTwiceRetriesOnce) {
  Factories f;
  f.push_back(Rpcguard());
  f.push_back(Rpcguard());
  Connect(std::move(f));
  EXPECT_TRUE(Call(Method::kGet, "twice-get", 2).ok());
  EXPECT_EQ(Attempts("twice-get"), 3);  // maxAttempts 3, not 3 x 3
  // The second must not take the first's key for the caller's own and
  // retry a call that may not be repeated.
  EXPECT_EQ(Call(Method::kCreate, "twice-create", 1).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Attempts("twice-create"), 1);
}

TEST_P(InterceptorChainTest, EarlierInterceptorCallingThroughItsChannel) {
  SideCalls side;
  Factories f;
  f.push_back(std::make_unique<SideCallFactory>(&side));
  f.push_back(Rpcguard());
  Connect(std::move(f));
  EXPECT_TRUE(Call(Method::kPut, "with-side-call", 0).ok());
  absl::MutexLock lock(&side.mu);
  ASSERT_EQ(side.statuses.size(), 1u);
  EXPECT_TRUE(side.statuses[0].ok()) << side.statuses[0].error_message();
  EXPECT_EQ(server_.Op(side.ops[0]).attempts, 2);
}

TEST_P(InterceptorChainTest, LaterInterceptorSeesTheTypedCallOrNothing) {
  Seen seen;
  Factories f;
  f.push_back(Rpcguard());
  f.push_back(std::make_unique<LoggingFactory>(&seen));
  Connect(std::move(f));
  EXPECT_TRUE(Call(Method::kGet, "logged", 2).ok());
  EXPECT_EQ(Attempts("logged"), 3);
  const std::string op = absl::StrCat("logged-", KindName(GetParam()));
  absl::MutexLock lock(&seen.mu);
  EXPECT_EQ(seen.sends, 3);  // the logger runs once per attempt
  // Whatever it could read was the method's own types, with this call's
  // data; never a grpc::ByteBuffer read as a FaultRequest.
  for (const std::string& got : seen.request_ops) EXPECT_EQ(got, op);
  for (const std::string& got : seen.reply_ops) EXPECT_EQ(got, op);
  if (internal::AttemptsHideMessages()) {
    EXPECT_EQ(seen.not_messages, 0);
  } else {
    // Without gRPC 1.51's fast paths (another gRPC, or
    // --config=no_grpc_fast_paths), rpcguard's own attempts hand later
    // interceptors their serialized grpc::ByteBuffer (README, Limits).
    EXPECT_GT(seen.not_messages, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStubs, InterceptorChainTest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace rpcguard
