// Copyright rpcguard authors.
//
// The bound on per-method state, end to end: a generic caller sends calls to
// more distinct undeclared method names than the channel's
// maxUndeclaredMethods, through rpcguard, to a real server that answers any
// method. Past the bound the calls still work under the default policy, the
// factory keeps no state for them, their trace lines name their own method,
// and their stats are counted under "other", and the destination's shared
// gates (the adaptive throttle among them) hear them as they hear any call.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;

// Any method: its first attempt fails with UNAVAILABLE, the next succeeds,
// so a call that shows two attempts was retried under a policy.
class FailOnceService : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    int attempt;
    {
      absl::MutexLock lock(&mu_);
      attempt = ++attempts_[ctx->method()];
    }
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(int attempt) : attempt_(attempt) {
        StartRead(&request_);
      }
      void OnReadDone(bool ok) override {
        if (!ok || attempt_ == 1) {
          Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "first attempt"));
          return;
        }
        const std::string bytes = FaultReply().SerializeAsString();
        grpc::Slice slice(bytes);
        response_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      const int attempt_;
      grpc::ByteBuffer request_;
      grpc::ByteBuffer response_;
    };
    return new Reactor(attempt);
  }

  int Attempts(const std::string& method) {
    absl::MutexLock lock(&mu_);
    auto it = attempts_.find(method);
    return it == attempts_.end() ? 0 : it->second;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> attempts_ ABSL_GUARDED_BY(mu_);
};

// Every method may be retried (the default entry); one declared method has
// an entry of its own. At most 4 undeclared methods get state of their own.
constexpr char kConfig[] = R"json({
  "methodConfig": [
    {"name": [{}],
     "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s",
                     "maxBackoff": "0.002s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"idempotency": "IDEMPOTENT"}},
    {"name": [{"service": "e2e.Declared", "method": "Named"}],
     "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s",
                     "maxBackoff": "0.002s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"idempotency": "IDEMPOTENT"}}],
  "rpcguard": {"maxUndeclaredMethods": 4}})json";
constexpr int kBound = 4;
constexpr int kNames = 12;

class MethodBoundE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    auto channel = CreateGuardedChannel(
        absl::StrCat("127.0.0.1:", port), kConfig, [&](Options& options) {
          options.trace_verbosity = TraceVerbosity::kAll;
          options.trace_sink =
              std::make_shared<CallbackSink>([this](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                events_.push_back(e);
              });
          options.stats = stats_;
          options.breaker_registry = registry_;
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status Call(const std::string& method) {
    grpc::TemplatedGenericStub<FaultRequest, FaultReply> stub(channel_);
    FaultRequest request;
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
  }

  FailOnceService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::shared_ptr<BreakerRegistry> registry_ =
      *BreakerRegistry::Create(BreakerRegistry::Options{});
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
};

std::string Undeclared(int i) { return absl::StrCat("/e2e.Made/Up", i); }

TEST_F(MethodBoundE2ETest, NamesPastTheBoundShareOneEntryAndKeepTheirNames) {
  for (int i = 0; i < kNames; ++i) {
    // Twice each: a name's later calls find the shared entry again.
    for (int round = 0; round < 2; ++round) {
      const grpc::Status s = Call(Undeclared(i));
      EXPECT_TRUE(s.ok()) << Undeclared(i) << ": " << s.error_message();
    }
    // The default policy retried the first call's failed attempt.
    EXPECT_EQ(service_.Attempts(Undeclared(i)), 3) << Undeclared(i);
  }
  // A declared method, past the bound, still has its own entry and policy.
  EXPECT_TRUE(Call("/e2e.Declared/Named").ok());
  EXPECT_EQ(service_.Attempts("/e2e.Declared/Named"), 2);

  // The factory's entries are one stats series each: at most the bound of
  // undeclared names, the declared one, and "other" for the rest.
  const StatsSnapshot snap = stats_->Snapshot();
  std::set<std::string> labels;
  for (const MethodStatsSnapshot& m : snap.methods) labels.insert(m.method);
  std::set<std::string> want = {"other", "/e2e.Declared/Named"};
  for (int i = 0; i < kBound; ++i) want.insert(Undeclared(i));
  EXPECT_EQ(labels, want);
  const MethodStatsSnapshot* other = snap.FindMethod("other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->calls, 2u * (kNames - kBound));
  EXPECT_EQ(other->retries, 1u * (kNames - kBound));
  ASSERT_NE(snap.FindMethod(Undeclared(0)), nullptr);
  EXPECT_EQ(snap.FindMethod(Undeclared(0))->calls, 2u);

  // Every trace line names its call's own method, past the bound too.
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> attempts_traced;
  for (const TraceEvent& e : events_) {
    EXPECT_NE(e.method, "other");
    if (e.kind == TraceEvent::Kind::kAttempt) ++attempts_traced[e.method];
  }
  for (int i = 0; i < kNames; ++i) {
    EXPECT_EQ(attempts_traced[Undeclared(i)], 3) << Undeclared(i);
  }
}

// Every answer from the server reaches the destination's adaptive throttle
// (on by default), whichever entry its call's method has: its own, or the
// shared one past the bound. Before the fix a call past the bound carried
// every gate of the shared entry but that one, so overload answers to those
// methods were never counted and their calls never shed.
TEST_F(MethodBoundE2ETest, NamesPastTheBoundAreHeardByTheAdaptiveThrottle) {
  for (int i = 0; i < kNames; ++i) {
    const grpc::Status s = Call(Undeclared(i));
    EXPECT_TRUE(s.ok()) << Undeclared(i) << ": " << s.error_message();
  }
  int answers = 0;
  for (int i = 0; i < kNames; ++i) answers += service_.Attempts(Undeclared(i));
  ASSERT_EQ(answers, 2 * kNames);  // each call: UNAVAILABLE, then OK

  // One destination: one breaker, and its throttle under the same key.
  const auto breakers = registry_->Breakers();
  ASSERT_EQ(breakers.size(), 1u);
  auto throttle = registry_->GetAdaptiveThrottle(breakers[0].first,
                                                 AdaptiveThrottleOptions{});
  ASSERT_TRUE(throttle.ok()) << throttle.status();
  const AdaptiveThrottleSnapshot snap = (*throttle)->Snapshot();
  EXPECT_EQ(snap.requests, answers);
  EXPECT_EQ(snap.accepts, answers);  // UNAVAILABLE is not an overload
}

}  // namespace
}  // namespace rpcguard
