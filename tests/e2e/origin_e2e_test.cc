// Copyright rpcguard authors.
//
// Evidence by origin (decision/status_class.h, OriginOf), end to end: real
// gRPC servers on loopback, each judge of a destination hearing only its own
// evidence. A middle whose store is down is not cut off by its caller's
// breaker (its other method keeps serving), while the middle's own breaker
// on the store opens; a store shedding load opens no breaker; calls sent
// once to a target whose every member refuses connections never reached a
// server and open no breaker.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::google::protobuf::Empty;
using ::rpcguard::internal::kServerCallLinkHeader;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::v1::Plain;

// Plain.Level is IDEMPOTENT (idempotency_level), Plain.Nothing undeclared
// (sent once). Short backoffs keep the test quick.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.Plain"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE",
                                            "RESOURCE_EXHAUSTED"]}}]})json";

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// The store: every Level and Nothing gets `code`.
class Store final : public Plain::Service {
 public:
  explicit Store(grpc::StatusCode code) : code_(code) {}
  grpc::Status Level(grpc::ServerContext*, const Empty*, Empty*) override {
    ++calls;
    return grpc::Status(code_, "store failing");
  }
  grpc::Status Nothing(grpc::ServerContext* ctx, const Empty*,
                       Empty*) override {
    ++calls;
    if (ctx->client_metadata().count(kServerCallLinkHeader) > 0) {
      ++links_received;
    }
    if (code_ == grpc::StatusCode::OK) return grpc::Status::OK;
    return grpc::Status(code_, "store failing");
  }
  std::atomic<int> calls{0};
  std::atomic<int> links_received{0};

 private:
  const grpc::StatusCode code_;
};

// The middle: Level asks the store (and fails when it does); Nothing answers
// from the middle alone.
class Middle final : public Plain::Service {
 public:
  explicit Middle(Plain::Stub* store) : store_(store) {}
  grpc::Status Level(grpc::ServerContext* ctx, const Empty*, Empty*) override {
    // Linked explicitly: the same on every gRPC and build.
    grpc::ClientContext child;
    child.set_deadline(ctx->deadline());
    LinkToServerCall(&child, ctx);
    Empty request, response;
    return store_->Level(&child, request, &response);
  }
  grpc::Status Nothing(grpc::ServerContext*, const Empty*, Empty*) override {
    return grpc::Status::OK;
  }

 private:
  Plain::Stub* const store_;
};

std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port,
                                    bool rpcguard_server = false) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(service);
  if (rpcguard_server) {
    EXPECT_TRUE(AddServerInterceptor(&builder).ok());
  }
  return builder.BuildAndStart();
}

std::shared_ptr<BreakerRegistry> NewRegistry() {
  return *BreakerRegistry::Create(BreakerRegistry::Options());
}

std::shared_ptr<grpc::Channel> Guarded(
    const std::string& target, std::shared_ptr<BreakerRegistry> registry) {
  auto channel = CreateGuardedChannel(target, kConfig, [registry](Options& o) {
    o.breaker_registry = registry;
    o.trace_verbosity = TraceVerbosity::kOff;
  });
  EXPECT_TRUE(channel.ok()) << channel.status();
  return *channel;
}

// A middle whose store is down answers promptly with the store's give-up:
// that is no evidence against the middle. Its caller's breaker stays
// closed and the middle's other method keeps serving; the breaker right
// above the store (the middle's) opens.
TEST(OriginE2ETest, AHealthyMiddleIsNotCutOffForItsStoresOutage) {
  Store store(grpc::StatusCode::UNAVAILABLE);
  int store_port = 0;
  auto store_server = Serve(&store, &store_port);
  const std::string store_target = absl::StrCat("127.0.0.1:", store_port);
  std::shared_ptr<BreakerRegistry> middle_registry = NewRegistry();
  auto store_stub = Plain::NewStub(Guarded(store_target, middle_registry));
  Middle middle(store_stub.get());
  int middle_port = 0;
  auto middle_server = Serve(&middle, &middle_port, /*rpcguard_server=*/true);
  const std::string middle_target = absl::StrCat("127.0.0.1:", middle_port);
  std::shared_ptr<BreakerRegistry> front_registry = NewRegistry();
  auto front = Plain::NewStub(Guarded(middle_target, front_registry));

  // Well past the default breaker's 20 attempts at a 0.5 failure ratio.
  for (int i = 0; i < 40; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    Empty request, response;
    const grpc::Status s = front->Level(&ctx, request, &response);
    EXPECT_FALSE(s.ok());
  }
  // The store's own tier: its breaker opened.
  EXPECT_NE(middle_registry->Get(store_target)->state(), BreakerState::kClosed);
  // The front heard 40 answers about the store, none about the middle.
  const BreakerSnapshot front_breaker =
      front_registry->Get(middle_target)->Snapshot();
  EXPECT_EQ(front_breaker.state, BreakerState::kClosed);
  EXPECT_EQ(front_breaker.window_failures, 0);
  // A caller without rpcguard hears the middle's refusal (its breaker on
  // the store is open) as RESOURCE_EXHAUSTED, "up but cannot take this",
  // not as the middle being down, and is told not to retry.
  {
    auto plain = Plain::NewStub(
        grpc::CreateChannel(middle_target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    Empty request, response;
    const grpc::Status s = plain->Level(&ctx, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
    const auto& trailers = ctx.GetServerTrailingMetadata();
    auto pushback = trailers.find("grpc-retry-pushback-ms");
    ASSERT_NE(pushback, trailers.end());
    EXPECT_EQ(std::string(pushback->second.data(), pushback->second.size()),
              "-1");
    auto gave_up = trailers.find("rpcguard-gave-up");
    ASSERT_NE(gave_up, trailers.end());
    EXPECT_EQ(std::string(gave_up->second.data(), gave_up->second.size()),
              "breaker_open");
  }
  // And the middle's own method is served, every time.
  int served = 0;
  for (int i = 0; i < 10; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    Empty request, response;
    if (front->Nothing(&ctx, request, &response).ok()) ++served;
  }
  EXPECT_EQ(served, 10);
}

// RESOURCE_EXHAUSTED is a server shedding load: the adaptive throttle's
// evidence. No breaker opens, whatever the share of rejections.
TEST(OriginE2ETest, AnOverloadedServerOpensNoBreaker) {
  Store store(grpc::StatusCode::RESOURCE_EXHAUSTED);
  int port = 0;
  auto server = Serve(&store, &port);
  const std::string target = absl::StrCat("127.0.0.1:", port);
  std::shared_ptr<BreakerRegistry> registry = NewRegistry();
  auto stub = Plain::NewStub(Guarded(target, registry));
  for (int i = 0; i < 40; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    Empty request, response;
    EXPECT_FALSE(stub->Level(&ctx, request, &response).ok());
  }
  EXPECT_GT(store.calls.load(), 0);
  const BreakerSnapshot b = registry->Get(target)->Snapshot();
  EXPECT_EQ(b.state, BreakerState::kClosed);
  EXPECT_EQ(b.window_failures, 0);
  EXPECT_EQ(b.window_attempts, 0);
  // The throttle heard them as rejections.
  auto throttle =
      registry->GetAdaptiveThrottle(target, AdaptiveThrottleOptions());
  ASSERT_TRUE(throttle.ok()) << throttle.status();
  EXPECT_GT((*throttle)->Snapshot().requests, (*throttle)->Snapshot().accepts);
}

// Calls sent once (Nothing is not declared safe to repeat) to a target
// written as addresses, every member refusing connections: no server took
// them, so the breaker hears nothing, and the calls are not refused by it
// once a member is back.
TEST(OriginE2ETest, CallsSentOnceThatReachNoServerOpenNoBreaker) {
  // Three ports that were listening a moment ago and are closed now.
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    Store store(grpc::StatusCode::OK);
    int port = 0;
    auto server = Serve(&store, &port);
    ports.push_back(port);
    server->Shutdown();
  }
  const std::string target =
      absl::StrCat("ipv4:127.0.0.1:", ports[0], ",127.0.0.1:", ports[1],
                   ",127.0.0.1:", ports[2]);
  std::shared_ptr<BreakerRegistry> registry = NewRegistry();
  auto stub = Plain::NewStub(Guarded(target, registry));
  int failed = 0;
  for (int i = 0; i < 40; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(2)));
    Empty request, response;
    const grpc::Status s = stub->Nothing(&ctx, request, &response);
    if (!s.ok()) ++failed;
    EXPECT_NE(s.error_code(), grpc::StatusCode::OK);
  }
  EXPECT_EQ(failed, 40);
  const BreakerSnapshot b = registry->Get(target)->Snapshot();
  EXPECT_EQ(b.state, BreakerState::kClosed);
  EXPECT_EQ(b.window_failures, 0);
}

// The link to a server call is private to the process: written by hand
// (several times, on a pass-through call too) it is still never sent.
TEST(OriginE2ETest, NoLinkEntryLeavesTheProcess) {
  Store store(grpc::StatusCode::OK);
  int port = 0;
  auto server = Serve(&store, &port);
  auto stub =
      Plain::NewStub(Guarded(absl::StrCat("127.0.0.1:", port), NewRegistry()));
  for (bool pass_through : {false, true}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    ctx.AddMetadata(kServerCallLinkHeader, "1-2");
    ctx.AddMetadata(kServerCallLinkHeader, "3-4");
    if (pass_through) MarkPassThrough(&ctx);
    Empty request, response;
    EXPECT_TRUE(stub->Nothing(&ctx, request, &response).ok());
  }
  EXPECT_EQ(store.calls.load(), 2);
  EXPECT_EQ(store.links_received.load(), 0);
}

}  // namespace
}  // namespace rpcguard
