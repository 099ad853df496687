// Copyright rpcguard authors.
//
// What rpcguard reads of gRPC 1.51's internals (internal/grpc_1_51/probes.h),
// checked against real calls on a real server. These tests are meant to
// break loudly when gRPC changes under the probes: read the probe's comment,
// re-derive the layout for the new version, and update the version gate.
// Built without the fast paths (--config=no_grpc_fast_paths, as on another
// gRPC), the same tests check the fallback: IsCallbackUnaryCall answers its
// safe "no" (IsProtobufMessage relies on the C++ ABI, not on gRPC, and stays).

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/version_info.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace internal {
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

// What the probes answered at one call's first batch.
struct Seen {
  bool callback = false;
  bool not_a_message = false;
};

// An interceptor that only asks the probes, as rpcguard's dispatcher does.
class ProbingInterceptor : public exp::Interceptor {
 public:
  ProbingInterceptor(exp::ClientRpcInfo* info, absl::Mutex* mu,
                     std::vector<Seen>* seen)
      : info_(info), mu_(mu), seen_(seen) {}
  void Intercept(exp::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      Seen s;
      s.callback = IsCallbackUnaryCall(batch, info_->client_context());
      s.not_a_message = !IsProtobufMessage(batch->GetRecvMessage());
      absl::MutexLock lock(mu_);
      seen_->push_back(s);
    }
    batch->Proceed();
  }

 private:
  exp::ClientRpcInfo* const info_;
  absl::Mutex* const mu_;
  std::vector<Seen>* const seen_;
};

class ProbingFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  ProbingFactory(absl::Mutex* mu, std::vector<Seen>* seen)
      : mu_(mu), seen_(seen) {}
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo* info) override {
    return new ProbingInterceptor(info, mu_, seen_);
  }

 private:
  absl::Mutex* const mu_;
  std::vector<Seen>* const seen_;
};

class ProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<exp::ClientInterceptorFactoryInterface>> f;
    f.push_back(std::make_unique<ProbingFactory>(&mu_, &seen_));
    channel_ = exp::CreateCustomChannelWithInterceptors(
        server_.address(), grpc::InsecureChannelCredentials(),
        grpc::ChannelArguments(), std::move(f));
    stub_ = FaultService::NewStub(channel_);
  }

  Seen Last() {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(seen_.empty());
    return seen_.empty() ? Seen() : seen_.back();
  }

  FaultServer server_;
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
};

#ifdef RPCGUARD_NO_GRPC_1_51_FAST_PATHS
TEST(ProbesVersionTest, FastPathsCompiledOut) {
  EXPECT_FALSE(ProbesKnowThisGrpc());
}
#else
TEST(ProbesVersionTest, WrittenForThisGrpc) {
  EXPECT_TRUE(ProbesKnowThisGrpc())
      << "rpcguard's gRPC probes were written for gRPC 1.51; this build uses "
      << grpc::Version()
      << ". Every call is now hijacked (correct, slower): re-check the "
         "layouts in interceptors/rpcguard/internal/grpc_1_51/probes.cc for "
         "this "
         "version and extend its version gate.";
}
#endif

TEST_F(ProbesTest, OnlyCallbackUnaryCallsAreRecognised) {
  for (StubKind kind :
       {StubKind::kSync, StubKind::kAsync, StubKind::kCallback}) {
    FaultRequest req;
    req.set_op_id("probe-" + KindName(kind));
    FaultReply reply;
    grpc::ClientContext ctx;
    ASSERT_TRUE(StartCall(kind, stub_.get(), Method::kGet, &ctx, req, &reply)
                    ->Wait()
                    .ok());
    const Seen s = Last();
    EXPECT_EQ(s.callback, kind == StubKind::kCallback && ProbesKnowThisGrpc())
        << KindName(kind);
    // A generated stub's response object is a protobuf message.
    EXPECT_FALSE(s.not_a_message) << KindName(kind);
  }
}

TEST_F(ProbesTest, GenericStubResponseBuffers) {
  grpc::GenericStub generic(channel_);
  FaultRequest req;
  req.set_op_id("probe-generic");
  std::string bytes;
  ASSERT_TRUE(req.SerializeToString(&bytes));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  for (bool reused : {false, true}) {
    grpc::ByteBuffer response;
    if (reused) response = grpc::ByteBuffer(&slice, 1);  // not empty
    grpc::ClientContext ctx;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/rpcguard.testing.v1.FaultService/Get",
                      grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    ASSERT_TRUE(status.ok()) << status.error_message();
    const Seen s = Last();
    EXPECT_EQ(s.callback, ProbesKnowThisGrpc());
    // Empty or reused (non-empty), a ByteBuffer is not a message.
    EXPECT_TRUE(s.not_a_message) << "reused=" << reused;
  }
}

TEST(IsProtobufMessageTest, MessagesOfAnyTypeButNoByteBuffers) {
  EXPECT_FALSE(IsProtobufMessage(nullptr));
  grpc::ByteBuffer empty;
  EXPECT_FALSE(IsProtobufMessage(&empty));
  grpc::Slice slice(std::string("bytes"));
  grpc::ByteBuffer full(&slice, 1);
  EXPECT_FALSE(IsProtobufMessage(&full));
  FaultReply reply;
  FaultRequest request;
  EXPECT_TRUE(IsProtobufMessage(&reply));
  EXPECT_TRUE(IsProtobufMessage(&request));
  // Asked again (the remembered vtables): the same answers.
  EXPECT_TRUE(IsProtobufMessage(&reply));
  EXPECT_FALSE(IsProtobufMessage(&full));
  // A message made on the heap has its vtable in the program all the same.
  auto heap = std::make_unique<FaultReply>();
  EXPECT_TRUE(IsProtobufMessage(heap.get()));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
