// Copyright rpcguard authors.
//
// Steps of the real wall clock (issue 21): the test process runs under
// libfaketime (tests/testing/wall_clock_stepper.h), which steps every wall
// clock it reads, forward and back, while the monotonic clock runs on. Real
// calls through rpcguard to a real fault server in the same process: a call
// keeps its deadline through a step during its backoff, an open breaker
// probes after its open time, a pending hedge goes out on time. gRPC's own
// retry, with the same policy, is the control: it keeps its deadlines.
//
// Offsets are never positive (see the stepper): a forward step goes from
// -40 s to 0, a backward one from 0 to -1 h. Each case steps once, while the
// backoff, open time or hedge delay it tests is pending; those last over 2 s
// since absl::Now() shows a step only up to 2 s after the others.
//
// Timing is measured on steady_clock, and waits here are relative sleeps:
// an absl timed wait is an absolute realtime futex wait, which returns at
// once at a negative offset. gRPC's own such waits (its timer and
// completion-queue threads) spin while the offset is negative, so each case
// goes back to the real time as soon as it can.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"
#include "tests/testing/wall_clock_stepper.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::StepWallClockTo;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr absl::Duration kHour = absl::Hours(1);

// One retry after a backoff of 3.2-4.8 s (4 s, A6 jitter): longer than a
// step takes to show everywhere (2.1 s at most), so the step lands inside it.
constexpr char kRetryPolicy[] = R"json(
    "retryPolicy": {"maxAttempts": 2, "initialBackoff": "4s",
                    "maxBackoff": "4s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]})json";

// No breaker or budget to interfere with the case at hand.
constexpr char kQuiet[] = R"json(
    "rpcguard": {"circuitBreaker": {"enabled": false},
                 "retryBudget": {"enabled": false}})json";

absl::Duration Since(SteadyTime start) {
  return absl::FromChrono(std::chrono::steady_clock::now() - start);
}

// A callback-API call that the test waits for by polling.
struct Call {
  grpc::ClientContext ctx;
  FaultRequest req;
  FaultReply reply;
  grpc::Status status;
  SteadyTime start;
  absl::Duration took;
  absl::Notification done;

  void Start(FaultService::Stub* stub) {
    start = std::chrono::steady_clock::now();
    stub->async()->Get(&ctx, &req, &reply, [this](grpc::Status s) {
      status = std::move(s);
      took = Since(start);
      done.Notify();
    });
  }

  // Whether the call ended within `limit` of its start.
  bool WaitUntil(absl::Duration limit) {
    while (!done.HasBeenNotified() && Since(start) < limit) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return done.HasBeenNotified();
  }

  // Ends a call that outlived the test's patience (it must end before the
  // test does). Back to the real time first: the cancel's callback needs one
  // of gRPC's callback-queue threads, and after a step back both may nap for
  // the hour (a nap computed just before the step and slept after it, see
  // wall_clock_stepper.h), which may be why the call outlived the test's
  // patience. The step forward ends those naps; waiting below zero would
  // hang until the test's timeout.
  void CancelAndWait() {
    const absl::Status s = StepWallClockTo(absl::ZeroDuration());
    EXPECT_TRUE(s.ok()) << s;
    ctx.TryCancel();
    while (!done.HasBeenNotified()) absl::SleepFor(absl::Milliseconds(2));
  }
};

enum class Retrier { kRpcguard, kGrpcRetry };

std::string RetrierName(const ::testing::TestParamInfo<Retrier>& info) {
  return info.param == Retrier::kRpcguard ? "Rpcguard" : "GrpcRetry";
}

void PrintTo(Retrier r, std::ostream* os) {
  *os << (r == Retrier::kRpcguard ? "rpcguard" : "gRPC's own retry");
}

class WallClockStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status s = StepWallClockTo(absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s;
  }

  // Back to the real time, whatever the case left: a negative offset
  // makes gRPC's timer threads spin (their waits return at once).
  void TearDown() override {
    server_.SetMode(0, 0, false, 0);
    const absl::Status s = StepWallClockTo(absl::ZeroDuration());
    EXPECT_TRUE(s.ok()) << s;
  }

  // A channel through rpcguard with `method_config` for every method.
  std::unique_ptr<FaultService::Stub> Rpcguard(
      const std::string& method_config, const std::string& top = kQuiet) {
    const std::string json =
        absl::StrCat(R"({"methodConfig": [{"name": [{}], )", method_config,
                     "}], ", top, "}");
    auto channel = CreateGuardedChannel(
        server_.address(), json,
        [this](Options& options) { options.breaker_registry = registry_; });
    EXPECT_TRUE(channel.ok()) << channel.status() << "\n" << json;
    return FaultService::NewStub(*channel);
  }

  // A plain channel with gRPC's own retry and the same policy.
  std::unique_ptr<FaultService::Stub> GrpcRetry() {
    grpc::ChannelArguments args;
    args.SetServiceConfigJSON(absl::StrCat(
        R"({"methodConfig": [{"name": [{}], )", kRetryPolicy, "}]}"));
    return FaultService::NewStub(grpc::CreateCustomChannel(
        server_.address(), grpc::InsecureChannelCredentials(), args));
  }

  // Waits (relative sleeps, up to `limit`) until the server has seen `n`
  // attempts of `op`.
  bool WaitForAttempts(const std::string& op, int n,
                       absl::Duration limit = absl::Seconds(5)) {
    const SteadyTime start = std::chrono::steady_clock::now();
    while (server_.Op(op).attempts < n) {
      if (Since(start) > limit) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Steps to `offset` and says how long the step took to show everywhere.
  void Step(absl::Duration offset) {
    absl::Duration took;
    const absl::Status s = StepWallClockTo(offset, absl::Seconds(5), &took);
    ASSERT_TRUE(s.ok()) << s;
    std::printf("wall clock stepped to %s (shown everywhere after %s)\n",
                absl::FormatDuration(offset).c_str(),
                absl::FormatDuration(took).c_str());
  }

  // The cases (c) and (d), with a step or without (their controls).
  void BreakerCase(bool step);
  void HedgeCase(bool step);

  FaultServer server_;
  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
};

// The harness itself: every wall clock the process reads moves, the
// monotonic one does not.
TEST_F(WallClockStepTest, StepsEveryWallClockButNotTheMonotonicOne) {
  const SteadyTime start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(Step(-kHour));
  const testing::WallClockOffsets seen = testing::ObserveWallClocks();
  EXPECT_LT(absl::AbsDuration(seen.system_clock + kHour),
            absl::Milliseconds(200))
      << DebugString(seen);
  EXPECT_LT(absl::AbsDuration(seen.gpr_realtime + kHour),
            absl::Milliseconds(200))
      << DebugString(seen);
  EXPECT_LT(absl::AbsDuration(seen.absl_now + kHour), absl::Milliseconds(200))
      << DebugString(seen);
  EXPECT_LT(absl::AbsDuration(seen.steady_clock), absl::Milliseconds(200))
      << DebugString(seen);
  // A relative sleep is kept in real time.
  const SteadyTime before = std::chrono::steady_clock::now();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_GE(Since(before), absl::Milliseconds(100));
  EXPECT_LT(Since(before), absl::Milliseconds(600));
  ASSERT_NO_FATAL_FAILURE(Step(absl::ZeroDuration()));
  EXPECT_LT(Since(start), absl::Seconds(10));
  EXPECT_FALSE(StepWallClockTo(absl::Seconds(1)).ok());  // never positive
}

class WallClockStepRetryTest : public WallClockStepTest,
                               public ::testing::WithParamInterface<Retrier> {
 protected:
  std::unique_ptr<FaultService::Stub> Stub() {
    if (GetParam() == Retrier::kGrpcRetry) return GrpcRetry();
    return Rpcguard(absl::StrCat(kRetryPolicy, R"(,
        "rpcguard": {"idempotency": "NO_SIDE_EFFECTS", "jitter": "A6"})"));
  }

  std::string Op(const std::string& name) {
    return absl::StrCat(name, "-", RetrierName({GetParam(), 0}));
  }
};

// (a) +40 s during the backoff of a call with a 20 s deadline: the retry is
// sent and answers; the call does not give up with 16 s of its deadline left.
TEST_P(WallClockStepRetryTest, ForwardStepDuringABackoffKeepsTheDeadline) {
  ASSERT_NO_FATAL_FAILURE(Step(absl::Seconds(-40)));
  auto stub = Stub();
  Call call;
  call.req.set_op_id(Op("forward"));
  call.req.set_fail_first(1);
  call.ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(20));
  call.Start(stub.get());
  ASSERT_TRUE(WaitForAttempts(call.req.op_id(), 1));
  absl::SleepFor(absl::Milliseconds(50));  // attempt 1's failure is in
  ASSERT_NO_FATAL_FAILURE(Step(absl::ZeroDuration()));
  ASSERT_EQ(server_.Op(call.req.op_id()).attempts, 1)
      << "the step must land inside the backoff";
  if (!call.WaitUntil(absl::Seconds(25))) call.CancelAndWait();
  EXPECT_TRUE(call.status.ok())
      << call.status.error_code() << " " << call.status.error_message()
      << " after " << call.took << " of a 20s deadline";
  EXPECT_EQ(server_.Op(call.req.op_id()).attempts, 2);
  EXPECT_LT(call.took, absl::Seconds(6));  // the backoff, not the deadline
}

// (b) -1 h during the backoff of a call with a 7 s deadline, the server
// hanging from then on: the retry carries the time the call has left (not
// an hour more), and the call ends at its deadline.
TEST_P(WallClockStepRetryTest, BackwardStepDuringABackoffKeepsTheDeadline) {
  auto stub = Stub();
  Call call;
  call.req.set_op_id(Op("backward"));
  call.req.set_fail_first(1);
  call.ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(7));
  call.Start(stub.get());
  ASSERT_TRUE(WaitForAttempts(call.req.op_id(), 1));
  absl::SleepFor(absl::Milliseconds(50));
  server_.SetMode(0, 0, /*hang=*/true, 0);
  ASSERT_NO_FATAL_FAILURE(Step(-kHour));
  ASSERT_EQ(server_.Op(call.req.op_id()).attempts, 1)
      << "the step must land inside the backoff";

  if (WaitForAttempts(call.req.op_id(), 2, absl::Seconds(7))) {
    const absl::Duration left = absl::Seconds(7) - Since(call.start);
    const testing::OpRecord op = server_.Op(call.req.op_id());
    // Both read after the step (the server's deadline is converted to the
    // wall clock when read).
    const absl::Duration carried = op.deadlines[1] - op.arrivals[1];
    std::printf("attempt 2 carried a deadline of %s, the call had %s left\n",
                absl::FormatDuration(carried).c_str(),
                absl::FormatDuration(left).c_str());
    EXPECT_LE(carried, left + absl::Milliseconds(300))
        << "attempt 2 carried " << carried << " with " << left << " left";
    EXPECT_GT(carried, absl::ZeroDuration());
  } else {
    ADD_FAILURE() << "attempt 2 never reached the server";
  }

  if (!call.WaitUntil(absl::Seconds(9))) {
    ADD_FAILURE() << "the call was still running 2s after its 7s deadline "
                     "(cancelled now)";
    call.CancelAndWait();
    return;
  }
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << call.status.error_message();
  EXPECT_GE(call.took, absl::Milliseconds(6900));
  EXPECT_LE(call.took, absl::Milliseconds(7500));
}

INSTANTIATE_TEST_SUITE_P(Retriers, WallClockStepRetryTest,
                         ::testing::Values(Retrier::kRpcguard,
                                           Retrier::kGrpcRetry),
                         RetrierName);

// (c) The breaker opens for 1 s, the wall clock steps back 1 h (or not:
// the control) and the server heals: the breaker probes after its open
// time, closes, and every call reaches the server.
void WallClockStepTest::BreakerCase(bool step) {
  auto stub = Rpcguard(R"(
      "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"})",
                       R"("rpcguard": {
      "circuitBreaker": {"minAttempts": 10, "failureRatio": 0.5,
                         "window": "10s", "openTime": "1s",
                         "halfOpenProbes": 2, "halfOpenSuccesses": 2},
      "retryBudget": {"enabled": false}})");
  server_.SetMode(/*fail_percent=*/100, 0, false, 0);
  for (int i = 0; i < 10; ++i) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("trip-", i));
    FaultReply reply;
    grpc::ClientContext ctx;
    EXPECT_FALSE(stub->Get(&ctx, req, &reply).ok());
  }
  const SteadyTime opened = std::chrono::steady_clock::now();
  ASSERT_EQ(registry_->Get(server_.address())->state(), BreakerState::kOpen);
  if (step) {
    ASSERT_NO_FATAL_FAILURE(Step(-kHour));
  }
  server_.SetMode(0, 0, false, 0);
  while (Since(opened) < absl::Milliseconds(1300)) {
    absl::SleepFor(absl::Milliseconds(5));
  }

  const int64_t before = server_.total_attempts();
  int ok = 0;
  std::string first_error;
  for (int i = 0; i < 10; ++i) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("healed-", i));
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
    const grpc::Status s = stub->Get(&ctx, req, &reply);
    if (s.ok()) {
      ++ok;
    } else if (first_error.empty()) {
      first_error = s.error_message();
    }
  }
  EXPECT_EQ(ok, 10) << Since(opened) << " after the breaker opened (1s), "
                    << "first failure: " << first_error;
  EXPECT_EQ(server_.total_attempts() - before, 10);
  EXPECT_EQ(registry_->Get(server_.address())->state(), BreakerState::kClosed);
}

TEST_F(WallClockStepTest, TheBreakerProbesOnTimeWithoutAStep) {
  BreakerCase(/*step=*/false);
}

TEST_F(WallClockStepTest, BackwardStepWhileTheBreakerIsOpen) {
  BreakerCase(/*step=*/true);
}

// (d) A hedge pending (3.5 s delay, the first copy answering after 5.5 s), the
// wall clock steps back 1 h (or not: the control): the hedge goes out after
// its delay and answers the call.
void WallClockStepTest::HedgeCase(bool step) {
  auto stub = Rpcguard(R"(
      "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "3.5s"},
      "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"})");
  Call call;
  call.req.set_op_id(step ? "hedged-stepped" : "hedged");
  call.req.set_slow_first_ms(5500);
  call.ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  call.Start(stub.get());
  ASSERT_TRUE(WaitForAttempts(call.req.op_id(), 1));
  if (step) {
    ASSERT_NO_FATAL_FAILURE(Step(-kHour));
    ASSERT_EQ(server_.Op(call.req.op_id()).attempts, 1)
        << "the step must land before the hedge is due";
    ASSERT_LT(Since(call.start), absl::Milliseconds(3400));
  }

  if (!call.WaitUntil(absl::Seconds(12))) call.CancelAndWait();
  EXPECT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.reply.attempt_header(), "2")
      << "answered by copy " << call.reply.attempt_header() << " after "
      << call.took << ": the hedge was not sent at 3.5s";
  EXPECT_EQ(server_.Op(call.req.op_id()).attempts, 2);
  EXPECT_GE(call.took, absl::Milliseconds(3450));
  EXPECT_LT(call.took, absl::Milliseconds(4500));
}

TEST_F(WallClockStepTest, TheHedgeGoesOutOnTimeWithoutAStep) {
  HedgeCase(/*step=*/false);
}

TEST_F(WallClockStepTest, BackwardStepWithAHedgePending) {
  HedgeCase(/*step=*/true);
}

}  // namespace
}  // namespace rpcguard

int main(int argc, char** argv) {
  // Before gtest or gRPC start a thread.
  rpcguard::testing::RunUnderFaketimeOrDie(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  // Every case has ended: leave without static destructors and gRPC's
  // shutdown, whose absolute realtime waits can hang under libfaketime (a CI
  // run passed all 9 cases, then hung at exit until the 300 s timeout).
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(result);
}
