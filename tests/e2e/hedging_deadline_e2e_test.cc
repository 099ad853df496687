// Copyright rpcguard authors.
//
// A hedged call whose every copy is slow ends at its deadline (issue 21), not
// when the copies' own DEADLINE_EXCEEDED endings reach rpcguard. Those come
// through gRPC 1.51's callback queue for callback-API calls, served here by
// CallbackAlternativeCQ's two "nexting" threads: each waits at most 1 s for
// an event and then sleeps 100 ms, so after a quiet second an ending waits
// up to 100 ms for a thread (the issue's calls ended 87-94 ms late). The
// server runs in a process of its own: its callbacks would share those
// threads and keep them awake.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/chaos/server_process.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::RunfilesPath;
using ::rpcguard::testing::ServerProcess;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// 3 copies 30 ms apart; hedges always granted.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.03s"},
   "rpcguard": {"maxExtraLoad": 1}}]})json";

// How late a call may end on a quiet machine; on a loaded one, as late as
// a plain channel's call with the same deadline in the same moment (the
// control) plus kAllowance.
constexpr absl::Duration kSlack = absl::Milliseconds(25);
constexpr absl::Duration kAllowance = absl::Milliseconds(5);

class HedgedDeadlineTest : public ::testing::Test {
 protected:
  HedgedDeadlineTest()
      : server_(RunfilesPath("tests/testing/fault_server_main")) {}

  void SetUp() override {
    ASSERT_TRUE(server_.Start(0).ok());
    auto channel =
        CreateGuardedChannel(server_.address(), kConfig, [](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
          options.trace_verbosity = TraceVerbosity::kOff;
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    ASSERT_TRUE((*channel)->WaitForConnected(std::chrono::system_clock::now() +
                                             std::chrono::seconds(5)));
    stub_ = FaultService::NewStub(*channel);
    auto plain = grpc::CreateChannel(server_.address(),
                                     grpc::InsecureChannelCredentials());
    ASSERT_TRUE(plain->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(5)));
    control_ = FaultService::NewStub(plain);
  }

  // How late rpcguard's slow call and, beside it with the same deadline, a
  // plain channel's (the control) ended.
  struct Late {
    absl::Duration rpcguard, control;
  };
  Late SlowCallBesideControl(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::Duration control_late;
    std::thread control([&] {
      FaultRequest req;
      req.set_op_id(absl::StrCat("control-", Next()));
      req.set_delay_ms(2000);
      FaultReply reply;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      control_->Get(&ctx, req, &reply);
      control_late = absl::Now() - deadline;
    });
    const absl::Duration late = SlowCall(deadline);
    control.join();
    return {late, control_late};
  }

  // Runs `one` (FastCalls then SlowCallBesideControl) `calls` times and
  // judges the latest rpcguard call against max(kSlack, the latest control
  // call + kAllowance); up to three times, passing when one holds: the
  // maxima of a few calls on a loaded machine are noisy, while lateness of
  // rpcguard's own making (the issue's 50 ms) shows every time.
  void ExpectOnTime(int calls, int fast_calls, absl::Duration timeout) {
    std::string seen;
    for (int measurement = 0; measurement < 3; ++measurement) {
      absl::Duration latest, control_latest;
      for (int i = 0; i < calls; ++i) {
        FastCalls(fast_calls);
        const Late late = SlowCallBesideControl(timeout);
        latest = std::max(latest, late.rpcguard);
        control_latest = std::max(control_latest, late.control);
      }
      absl::StrAppend(&seen, "\n  rpcguard latest +",
                      absl::FormatDuration(latest), ", control latest +",
                      absl::FormatDuration(control_latest));
      if (latest < std::max(kSlack, control_latest + kAllowance)) return;
    }
    ADD_FAILURE() << "later than max(" << kSlack << ", the control + "
                  << kAllowance << ") in three measurements:" << seen;
  }

  // Fast calls side by side: both of gRPC's callback threads get an event
  // now, so both go quiet together.
  void FastCalls(int n) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([this] {
        FaultRequest req;
        req.set_op_id(absl::StrCat("fast-", Next()));
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        EXPECT_TRUE(stub_->Get(&ctx, req, &reply).ok());
      });
    }
    for (auto& t : threads) t.join();
  }

  // A sync call whose every copy takes 2 s at the server, with `deadline`;
  // returns how long after its deadline it ended.
  absl::Duration SlowCall(absl::Time deadline) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("slow-", Next()));
    req.set_delay_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    const grpc::Status s = stub_->Get(&ctx, req, &reply);
    const absl::Duration late = absl::Now() - deadline;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << s.error_message();
    EXPECT_TRUE(absl::EndsWith(s.error_message(), "gave up: deadline]"))
        << s.error_message();
    return late;
  }

  int Next() {
    static std::atomic<int> n{0};
    return ++n;
  }

  ServerProcess server_;
  std::unique_ptr<FaultService::Stub> stub_;
  std::unique_ptr<FaultService::Stub> control_;
};

// The deadline falls 1050 ms after the last callback event, in the 100 ms
// the callback threads sleep: before the fix each call ended about 50 ms
// late, every time.
TEST_F(HedgedDeadlineTest, EndsAtItsDeadlineWhileGrpcCallbackThreadsSleep) {
  ExpectOnTime(/*calls=*/3, /*fast_calls=*/4, absl::Milliseconds(1050));
}

// The issue's case: 200 ms, after other hedged calls on the same channel.
TEST_F(HedgedDeadlineTest, EndsAtItsDeadlineAfterOtherHedgedCalls) {
  ExpectOnTime(/*calls=*/10, /*fast_calls=*/2, absl::Milliseconds(200));
}

}  // namespace
}  // namespace rpcguard
