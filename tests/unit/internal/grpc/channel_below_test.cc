// Copyright rpcguard authors.
//
// ChannelBelow (the intercepted channel a factory keeps for its calls),
// with real channels and a real server: an interceptor that sends a call of
// its own through the channel ChannelBelow gives it, as rpcguard's attempts
// are sent. Its calls start past it (it never sees them, the interceptor
// after it does); the first call's channel is kept and shared by the next
// calls of the same channel and place; a call on another channel, or whose
// place is not known, gets its own.

#include "rpcguard/internal/grpc/channel_below.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
#include "tests/testing/fault_server.h"

namespace rpcguard {
namespace internal {
namespace {

using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;
namespace exp = ::grpc::experimental;

constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";
constexpr char kPut[] = "/rpcguard.testing.v1.FaultService/Put";

// A sync call of `method` (Get or Put) on `channel`, 10 s to answer.
grpc::Status Call(const std::shared_ptr<grpc::ChannelInterface>& channel,
                  const char* method) {
  FaultRequest req;
  req.set_op_id(method == kPut ? "put" : "side");
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = FaultService::NewStub(channel);
  return method == kPut ? stub->Put(&ctx, req, &reply)
                        : stub->Get(&ctx, req, &reply);
}

// The methods of the calls an interceptor saw start.
struct Seen {
  absl::Mutex mu;
  std::vector<std::string> methods ABSL_GUARDED_BY(mu);
  int Count(const std::string& method) {
    absl::MutexLock lock(&mu);
    int n = 0;
    for (const std::string& m : methods) n += m == method;
    return n;
  }
};

class Recording : public exp::Interceptor {
 public:
  Recording(exp::ClientRpcInfo* info, Seen* seen) : info_(info), seen_(seen) {}
  void Intercept(exp::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      absl::MutexLock lock(&seen_->mu);
      seen_->methods.push_back(info_->method());
    }
    batch->Proceed();
  }

 private:
  exp::ClientRpcInfo* const info_;
  Seen* const seen_;
};

class RecordingFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  explicit RecordingFactory(Seen* seen) : seen_(seen) {}
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo* info) override {
    return new Recording(info, seen_);
  }

 private:
  Seen* const seen_;
};

// Before each Put, sends a Get through the channel below it (waiting for
// it, on the caller's thread: the tests use the sync stub), and records the
// channel it was given and the Get's status.
struct Sent {
  absl::Mutex mu;
  // Kept to the test's end, so that no two hold one address in turn.
  std::vector<ChannelBelowRef> below ABSL_GUARDED_BY(mu);
  std::vector<grpc::StatusCode> status ABSL_GUARDED_BY(mu);
};

class Sending : public exp::Interceptor {
 public:
  Sending(exp::ClientRpcInfo* info, ChannelBelow* below, int place, Seen* seen,
          Sent* sent)
      : info_(info), below_(below), place_(place), seen_(seen), sent_(sent) {}
  void Intercept(exp::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      {
        absl::MutexLock lock(&seen_->mu);
        seen_->methods.push_back(info_->method());
      }
      if (std::string(info_->method()) == kPut) {
        ChannelBelowRef below = below_->For(info_->channel(), place_, batch);
        // A stub needs a shared_ptr: one that owns nothing.
        const grpc::Status status =
            Call(std::shared_ptr<grpc::ChannelInterface>(
                     std::shared_ptr<void>(), below.get()),
                 kGet);
        absl::MutexLock lock(&sent_->mu);
        sent_->below.push_back(std::move(below));
        sent_->status.push_back(status.error_code());
      }
    }
    batch->Proceed();
  }

 private:
  exp::ClientRpcInfo* const info_;
  ChannelBelow* const below_;
  const int place_;
  Seen* const seen_;
  Sent* const sent_;
};

// As rpcguard's factory: the place is read as the interceptor is made
// (`known_place` false: as on another gRPC, not known).
class SendingFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  SendingFactory(ChannelBelow* below, bool known_place, Seen* seen, Sent* sent)
      : below_(below), known_place_(known_place), seen_(seen), sent_(sent) {}
  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo* info) override {
    return new Sending(info, below_,
                       known_place_ ? InterceptorPlace(*info) : -1, seen_,
                       sent_);
  }

 private:
  ChannelBelow* const below_;
  const bool known_place_;
  Seen* const seen_;
  Sent* const sent_;
};

class ChannelBelowTest : public ::testing::Test {
 protected:
  // A channel: the sending interceptor, then a recording one.
  std::shared_ptr<grpc::Channel> Channel(bool known_place, Seen* sender,
                                         Seen* after) {
    std::vector<std::unique_ptr<exp::ClientInterceptorFactoryInterface>> f;
    f.push_back(
        std::make_unique<SendingFactory>(&below_, known_place, sender, &sent_));
    f.push_back(std::make_unique<RecordingFactory>(after));
    return exp::CreateCustomChannelWithInterceptors(
        server_.address(), grpc::InsecureChannelCredentials(),
        grpc::ChannelArguments(), std::move(f));
  }

  static grpc::Status Put(const std::shared_ptr<grpc::Channel>& channel) {
    return Call(channel, kPut);
  }

  std::vector<grpc::ChannelInterface*> Below() {
    absl::MutexLock lock(&sent_.mu);
    std::vector<grpc::ChannelInterface*> out;
    for (const auto& b : sent_.below) out.push_back(b.get());
    return out;
  }

  FaultServer server_;
  // Shared by every channel's factory here, as one registered on several
  // channels would be.
  ChannelBelow below_;
  Sent sent_;
};

TEST_F(ChannelBelowTest, CallsStartPastTheInterceptorAndShareTheKeptChannel) {
  ASSERT_TRUE(server_.ok());
  Seen sender, after;
  auto channel = Channel(/*known_place=*/true, &sender, &after);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(channel).ok());
  {
    absl::MutexLock lock(&sent_.mu);
    EXPECT_EQ(sent_.status, std::vector<grpc::StatusCode>(3, grpc::OK));
  }
  // The sender's own Gets went below it, through the interceptor after it.
  EXPECT_EQ(sender.Count(kPut), 3);
  EXPECT_EQ(sender.Count(kGet), 0);
  EXPECT_EQ(after.Count(kPut), 3);
  EXPECT_EQ(after.Count(kGet), 3);
  // One channel below, kept from the first call; without the place
  // (built without gRPC 1.51's fast paths), one for each call.
  const std::vector<grpc::ChannelInterface*> below = Below();
  ASSERT_EQ(below.size(), 3u);
  EXPECT_NE(below[0], nullptr);
  if (ProbesKnowThisGrpc()) {
    EXPECT_EQ(below[1], below[0]);
    EXPECT_EQ(below[2], below[0]);
  } else {
    EXPECT_NE(below[1], below[0]);
    EXPECT_NE(below[2], below[1]);
  }
}

// Kept for the first channel, the channel below is not another channel's:
// those calls get their own, each, and still go below the sender.
TEST_F(ChannelBelowTest, AnotherChannelsCallsGetTheirOwn) {
  ASSERT_TRUE(server_.ok());
  Seen sender1, after1, sender2, after2;
  auto first = Channel(/*known_place=*/true, &sender1, &after1);
  auto second = Channel(/*known_place=*/true, &sender2, &after2);
  ASSERT_TRUE(Put(first).ok());
  ASSERT_TRUE(Put(second).ok());
  ASSERT_TRUE(Put(second).ok());
  EXPECT_EQ(after1.Count(kGet), 1);
  EXPECT_EQ(after2.Count(kGet), 2);
  EXPECT_EQ(sender2.Count(kGet), 0);
  const std::vector<grpc::ChannelInterface*> below = Below();
  ASSERT_EQ(below.size(), 3u);
  EXPECT_NE(below[1], below[0]);
  EXPECT_NE(below[2], below[0]);
  EXPECT_NE(below[2], below[1]);
}

// Without the place (another gRPC), nothing is kept.
TEST_F(ChannelBelowTest, AnUnknownPlaceKeepsNothing) {
  ASSERT_TRUE(server_.ok());
  Seen sender, after;
  auto channel = Channel(/*known_place=*/false, &sender, &after);
  ASSERT_TRUE(Put(channel).ok());
  ASSERT_TRUE(Put(channel).ok());
  EXPECT_EQ(after.Count(kGet), 2);
  EXPECT_EQ(sender.Count(kGet), 0);
  const std::vector<grpc::ChannelInterface*> below = Below();
  ASSERT_EQ(below.size(), 2u);
  EXPECT_NE(below[1], below[0]);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
