// Copyright rpcguard authors.
//
// The circuit breaker and retry budget end to end: real calls through
// rpcguard to a real fault-injecting server, channels sharing a registry.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::ControlCall;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Small numbers so the test runs in about a second: trips after 10 attempts
// at >= 50% failures, stays open 300 ms, closes after 2 probe successes.
constexpr char kBreakerConfig[] = R"json({
  "methodConfig": [{"name": [{"service": "rpcguard.testing.v1.FaultService"}],
    "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s",
                    "maxBackoff": "0.002s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]}}],
  "rpcguard": {
    "circuitBreaker": {"minAttempts": 10, "failureRatio": 0.5,
                       "window": "5s", "openTime": "0.3s",
                       "halfOpenProbes": 2, "halfOpenSuccesses": 2},
    "retryBudget": {"enabled": false}}})json";

class BreakerE2ETest : public ::testing::Test {
 protected:
  std::unique_ptr<FaultService::Stub> Stub(const std::string& json) {
    return FaultService::NewStub(
        *CreateGuardedChannel(server_.address(), json, [&](Options& options) {
          options.breaker_registry = registry_;
          options.trace_sink = sink_;  // one logger for the app, as usual
          options.stats = stats_;
        }));
  }

  grpc::Status Get(FaultService::Stub* stub, const std::string& op) {
    FaultRequest req;
    req.set_op_id(op);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    return stub->Get(&ctx, req, &reply);
  }

  std::vector<std::string> Transitions() {
    absl::MutexLock lock(&mu_);
    return transitions_;
  }

  FaultServer server_;
  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::shared_ptr<TraceSink> sink_ =
      std::make_shared<CallbackSink>([this](const TraceEvent& e) {
        if (e.kind != TraceEvent::Kind::kBreakerTransition) return;
        absl::MutexLock lock(&mu_);
        transitions_.push_back(e.from_state + "->" + e.to_state);
      });
  absl::Mutex mu_;
  std::vector<std::string> transitions_ ABSL_GUARDED_BY(mu_);
};

TEST_F(BreakerE2ETest, ChannelsToOneTargetLearnTogether) {
  auto first = Stub(kBreakerConfig);
  auto second = Stub(kBreakerConfig);

  server_.SetMode(/*fail_percent=*/100, 0, false, 0);
  // Traffic on the first channel trips the shared breaker.
  int failed = 0;
  for (int i = 0; i < 10; ++i) {
    if (!Get(first.get(), absl::StrCat("down-", i)).ok()) ++failed;
  }
  EXPECT_EQ(failed, 10);
  ASSERT_EQ(registry_->Get(server_.address())->state(), BreakerState::kOpen);

  // The second channel fails fast: no I/O, the server sees nothing. Fast:
  // within 50 ms on a quiet machine, or as soon as the control, a plain
  // channel's call that fails without I/O (its deadline already past),
  // made in the same moment.
  auto plain = testing::PlainStub(server_.address());
  int fail_fast = 0;
  ExpectWithinControl("time to fail fast", absl::Milliseconds(50), [&] {
    const std::string op = absl::StrCat("fail-fast-", ++fail_fast);
    ControlCall control(StubKind::kSync, plain.get(), FaultRequest(),
                        absl::Now() - absl::Seconds(1));
    const absl::Time start = absl::Now();
    grpc::Status s = Get(second.get(), op);
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StrContains(
        s.error_message(),
        absl::StrCat("circuit breaker \"", server_.address(), "\" is open")))
        << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "gave up: breaker_open"))
        << s.error_message();
    EXPECT_EQ(server_.Op(op).attempts, 0);
    EXPECT_EQ(control.Wait().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    return Timing{took, control.Took()};
  });

  // The server heals; after the open time, probes close the breaker and both
  // channels succeed again.
  server_.SetMode(0, 0, false, 0);
  absl::SleepFor(absl::Milliseconds(350));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Get(second.get(), absl::StrCat("probe-", i)).ok()) << i;
  }
  EXPECT_EQ(registry_->Get(server_.address())->state(), BreakerState::kClosed);
  EXPECT_TRUE(Get(first.get(), "healed-1").ok());
  EXPECT_TRUE(Get(second.get(), "healed-2").ok());

  // Every transition was traced, in order.
  EXPECT_EQ(Transitions(),
            (std::vector<std::string>{"closed->open", "open->half_open",
                                      "half_open->closed"}));
  const StatsSnapshot snap = stats_->Snapshot();
  const MethodStatsSnapshot* m =
      snap.FindMethod("/rpcguard.testing.v1.FaultService/Get");
  ASSERT_NE(m, nullptr);
  EXPECT_GE(m->fail_fasts.at(GiveUpReason::kBreakerOpen), 1u);
}

TEST_F(BreakerE2ETest, FatalAnswersDoNotTripTheBreaker) {
  auto stub = Stub(kBreakerConfig);
  for (int i = 0; i < 30; ++i) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("fatal-", i));
    req.set_fail_first(1);
    req.set_fail_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
    FaultReply reply;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->Get(&ctx, req, &reply).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(registry_->Get(server_.address())->state(), BreakerState::kClosed);
}

// A total outage with steady load: the budget holds attempts per call near
// 1 + ratio, where without it every call makes maxAttempts.
TEST_F(BreakerE2ETest, BudgetStopsARetryStorm) {
  const auto run = [&](bool budget) {
    const std::string json = absl::StrCat(
        R"json({"methodConfig": [{"name": [{"service": "rpcguard.testing.v1.FaultService"}],
          "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.001s",
                          "maxBackoff": "0.002s", "backoffMultiplier": 2,
                          "retryableStatusCodes": ["UNAVAILABLE"]}}],
          "rpcguard": {"circuitBreaker": {"enabled": false},
                       "retryBudget": {"enabled": )json",
        budget ? "true" : "false",
        R"json(, "ratio": 0.2, "minRetriesPerSecond": 0}}})json");
    registry_ = *BreakerRegistry::Create({});
    auto stub = Stub(json);
    server_.SetMode(100, 0, false, 0);
    constexpr int kCalls = 300;
    const int64_t before = server_.total_attempts();
    int budget_give_ups = 0;
    for (int i = 0; i < kCalls; ++i) {
      grpc::Status s = Get(stub.get(), absl::StrCat(budget, "-outage-", i));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
      if (absl::StrContains(s.error_message(), "budget_exhausted")) {
        ++budget_give_ups;
      }
    }
    server_.SetMode(0, 0, false, 0);
    if (budget) EXPECT_GT(budget_give_ups, kCalls / 2);
    return static_cast<double>(server_.total_attempts() - before) / kCalls;
  };
  const double with_budget = run(true);
  const double without_budget = run(false);
  std::printf(
      "attempts per call in a total outage: %.3f with the budget "
      "(ratio 0.2), %.3f without\n",
      with_budget, without_budget);
  EXPECT_LE(with_budget, 1.2 + 0.01);
  EXPECT_DOUBLE_EQ(without_budget, 4.0);
}

}  // namespace
}  // namespace rpcguard
