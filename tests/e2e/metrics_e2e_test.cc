// Copyright rpcguard authors.
//
// Stats' durations and per-call histograms, end to end: real calls through
// rpcguard to a real in-process server whose handler moves rpcguard's
// FakeClock forward, so every attempt takes exactly kServerTime on the
// clock rpcguard measures with, whatever the machine's load.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "rpcguard/testing/fake_clock.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FakeClock;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr absl::Duration kServerTime = absl::Milliseconds(40);
constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// Get fails the first `fail_first` attempts of the server's life with
// UNAVAILABLE, then succeeds; each takes kServerTime on `clock`.
class ClockServer final : public FaultService::Service {
 public:
  explicit ClockServer(FakeClock* clock) : clock_(clock) {}

  grpc::Status Get(grpc::ServerContext*, const FaultRequest* request,
                   FaultReply* reply) override {
    clock_->Advance(kServerTime);
    if (seen_.fetch_add(1) < request->fail_first()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not yet");
    }
    reply->set_op_id(request->op_id());
    return grpc::Status::OK;
  }

  void Reset() { seen_ = 0; }

 private:
  FakeClock* const clock_;
  std::atomic<int> seen_{0};
};

class MetricsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port_);
    stub_ = FaultService::NewStub(
        *CreateGuardedChannel(address_, kConfig, [&](Options& options) {
          options.clock = &clock_;
          options.stats = stats_;
          options.breaker_registry = *BreakerRegistry::Create({});
        }));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status Get(int fail_first) {
    service_.Reset();
    FaultRequest request;
    request.set_fail_first(fail_first);
    FaultReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return stub_->Get(&context, request, &reply);
  }

  const MethodStatsSnapshot& Series() {
    snapshot_ = stats_->Snapshot();
    const MethodStatsSnapshot* m = snapshot_.FindSeries(kGet, address_);
    EXPECT_NE(m, nullptr) << "no series for " << kGet << " at " << address_;
    static const MethodStatsSnapshot kNone;
    return m != nullptr ? *m : kNone;
  }

  FakeClock clock_;
  ClockServer service_{&clock_};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::unique_ptr<FaultService::Stub> stub_;
  StatsSnapshot snapshot_;
};

TEST_F(MetricsE2ETest, FirstTimeSuccessMeasuresOneAttempt) {
  ASSERT_TRUE(Get(0).ok());
  const MethodStatsSnapshot& m = Series();
  EXPECT_EQ(m.calls_started, 1u);
  EXPECT_EQ(m.attempts_started, 1u);
  EXPECT_EQ(m.calls_by_code.at(0), 1u);
  EXPECT_EQ(m.call_duration.count, 1u);
  EXPECT_DOUBLE_EQ(m.call_duration.sum, 0.04);
  EXPECT_DOUBLE_EQ(m.attempt_duration.sum, 0.04);
  EXPECT_EQ(m.retries_per_call.count, 0u);  // A96: no zeros
}

// Two failures, then a success: three attempts of 40 ms each, and a call
// of 120 ms on rpcguard's clock (the backoffs pass on gRPC's real clock,
// which the fake one does not follow).
TEST_F(MetricsE2ETest, RetriedCallMeasuresEveryAttemptAndTheWholeCall) {
  ASSERT_TRUE(Get(2).ok());
  const MethodStatsSnapshot& m = Series();
  EXPECT_EQ(m.calls_started, 1u);
  EXPECT_EQ(m.attempts_started, 3u);
  EXPECT_EQ(m.attempts, 3u);
  EXPECT_EQ(m.attempts_by_code.at(0), 1u);
  EXPECT_EQ(m.attempts_by_code.at(14), 2u);
  EXPECT_EQ(m.attempt_duration.count, 3u);
  EXPECT_NEAR(m.attempt_duration.sum, 0.12, 1e-9);
  // 40 ms: above le=0.025, within le=0.05.
  EXPECT_EQ(m.attempt_duration.cumulative[4], 0u);
  EXPECT_EQ(m.attempt_duration.cumulative[5], 3u);
  EXPECT_EQ(m.call_duration.count, 1u);
  EXPECT_NEAR(m.call_duration.sum, 0.12, 1e-9);
  EXPECT_EQ(m.retries_per_call.count, 1u);
  EXPECT_EQ(m.retries_per_call.sum, 2);
  EXPECT_EQ(m.retries, 2u);
  EXPECT_EQ(m.retry_delay.count, 2u);
}

TEST_F(MetricsE2ETest, GiveUpIsCountedByItsStatusCode) {
  EXPECT_EQ(Get(10).error_code(), grpc::StatusCode::UNAVAILABLE);
  const MethodStatsSnapshot& m = Series();
  EXPECT_EQ(m.calls_by_code.at(14), 1u);
  EXPECT_EQ(m.attempts_started, 4u);
  EXPECT_NEAR(m.call_duration.sum, 0.16, 1e-9);
  EXPECT_EQ(m.give_ups.at(GiveUpReason::kMaxAttempts), 1u);
  EXPECT_EQ(m.retries_per_call.sum, 3);
}

}  // namespace
}  // namespace rpcguard
