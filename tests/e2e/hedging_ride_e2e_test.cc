// Copyright rpcguard authors.
//
// A hedged callback-API call rides its first copy (issue 31, part 1): the
// application's own call is copy 1, and rpcguard takes over only when the
// hedge is due. Against the fault server, on the callback stub (and the
// reactor stub, whose calls are hijacked, every copy rpcguard's own: the
// same answers either way): a later copy's win cancels the application's call
// and its answer (message, initial and trailing metadata, status) is the
// winner's, with the caller's cancel handling never taking rpcguard's cancel
// for the caller's; a first copy that wins cancels the hedge; the caller's
// cancel before the hedge is due sends no copy; calls ending just as their
// hedge is due never reach a call that is gone (run under ASan in CI).

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
using ::rpcguard::testing::PendingCall;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get (NO_SIDE_EFFECTS): 2 copies, 50 ms apart.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s",
                     "nonFatalStatusCodes": ["UNAVAILABLE"]}}
]})json";
constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";

std::string Value(const std::multimap<grpc::string_ref, grpc::string_ref>& md,
                  const std::string& key) {
  auto it = md.find(key);
  if (it == md.end()) return "<none>";
  return std::string(it->second.data(), it->second.size());
}

class HedgingRideE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override {
    auto channel =
        CreateGuardedChannel(server_.address(), kConfig, [&](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
          options.stats = stats_;
          options.trace_sink =
              std::make_shared<CallbackSink>([&](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                events_.push_back(e);
              });
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = FaultService::NewStub(*channel);
  }

  std::string Op(const std::string& name) {
    return absl::StrCat(name, "-", KindName(GetParam()), "-", ++op_counter_);
  }

  std::vector<TraceEvent> Events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  // Get's counters once every attempt started has ended (a cancelled copy
  // ends after its call), or after 5 s.
  MethodStatsSnapshot Settled() {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (true) {
      const StatsSnapshot snap = stats_->Snapshot();
      const MethodStatsSnapshot* m = snap.FindMethod(kGet);
      if (m != nullptr &&
          (m->attempts >= m->attempts_started || absl::Now() > give_up)) {
        return *m;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  FaultServer server_;
  const std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::unique_ptr<FaultService::Stub> stub_;
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
  int op_counter_ = 0;
};

// The first copy (the application's call) takes 2 s; the hedge answers at
// once. The application sees copy 2's answer only: its message, initial
// and trailing metadata and status; the call ends well before 2 s, so its
// own call was cancelled; the trace names copy 2 and the cancelled copy 1,
// not a caller's cancel; started minus ended attempts returns to zero.
TEST_P(HedgingRideE2ETest, ALaterCopysWinIsAllTheApplicationSees) {
  FaultRequest req;
  req.set_op_id(Op("ride-slow-first"));
  req.set_slow_first_ms(2000);
  req.set_echo_attempt_metadata(true);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const absl::Time start = absl::Now();
  const grpc::Status s =
      StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply)
          ->Wait();
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_LT(took, absl::Seconds(1));
  EXPECT_EQ(reply.attempt_header(), "2");
  EXPECT_EQ(Value(ctx.GetServerInitialMetadata(), "fault-attempt"), "2");
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "fault-attempt-trailer"),
            "2");
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "rpcguard-attempts"), "2");
  const auto op = server_.Op(req.op_id());
  ASSERT_EQ(op.keys.size(), 2u);
  EXPECT_EQ(op.keys[0], op.keys[1]);
  EXPECT_EQ(op.attempt_headers, (std::vector<std::string>{"1", "2"}));

  const std::vector<TraceEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, TraceEvent::Kind::kHedge);
  EXPECT_EQ(events[0].attempt, 2);
  EXPECT_GE(events[0].backoff, absl::Milliseconds(45));
  EXPECT_EQ(events[1].decision, TraceDecision::kDone);
  EXPECT_EQ(events[1].code, grpc::StatusCode::OK);
  EXPECT_EQ(events[1].reason, GiveUpReason::kNone);
  EXPECT_EQ(events[1].copy, 2);
  EXPECT_EQ(events[1].cancelled, std::vector<int>{1});
  EXPECT_EQ(events[1].idempotency_key, op.keys[0]);

  const MethodStatsSnapshot m = Settled();
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.attempts, 2u);
  EXPECT_EQ(
      m.attempts_by_code.at(static_cast<int>(grpc::StatusCode::CANCELLED)), 1u);
  EXPECT_EQ(m.calls, 1u);
  EXPECT_EQ(m.hedges, 1u);
  EXPECT_EQ(m.hedges_won, 1u);
  EXPECT_EQ(m.copies_cancelled, 1u);
}

// Every copy takes 300 ms: the first, sent 50 ms before the hedge, wins.
// The application's own answer stands (copy 1's metadata), the hedge is
// cancelled, and the trace says so.
TEST_P(HedgingRideE2ETest, AFirstCopyThatWinsCancelsTheHedge) {
  FaultRequest req;
  req.set_op_id(Op("ride-first-wins"));
  req.set_delay_ms(300);
  req.set_echo_attempt_metadata(true);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status s =
      StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply)
          ->Wait();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.attempt_header(), "1");
  EXPECT_EQ(Value(ctx.GetServerInitialMetadata(), "fault-attempt"), "1");
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "rpcguard-attempts"), "2");
  const std::vector<TraceEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].copy, 1);
  EXPECT_EQ(events[1].cancelled, std::vector<int>{2});
  const MethodStatsSnapshot m = Settled();
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.attempts, 2u);
  EXPECT_EQ(m.hedges_won, 0u);
  EXPECT_EQ(m.copies_cancelled, 1u);
}

// The caller cancels 10 ms into a 2 s first copy: no copy is ever sent,
// and the call ends CANCELLED, one attempt.
TEST_P(HedgingRideE2ETest, TheCallersCancelBeforeTheHedgeSendsNoCopy) {
  FaultRequest req;
  req.set_op_id(Op("ride-cancelled"));
  req.set_slow_first_ms(2000);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::unique_ptr<PendingCall> call =
      StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply);
  absl::SleepFor(absl::Milliseconds(10));
  ctx.TryCancel();
  const grpc::Status s = call->Wait();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  absl::SleepFor(absl::Milliseconds(100));  // past the hedge delay
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "rpcguard-attempts"), "1");
}

// 200 calls, 20 at a time, whose first copy answers within a few ms of its
// hedge being due: the timer and the call's end meet in every order. Every
// call succeeds with one key on every copy, its trailer says how many
// copies went, and nothing touches a call that is gone (ASan, in CI).
TEST_P(HedgingRideE2ETest, CallsEndingAsTheirHedgeIsDueRaceSafely) {
  constexpr int kCalls = 200;
  constexpr int kAtOnce = 20;
  for (int round = 0; round < kCalls / kAtOnce; ++round) {
    std::vector<std::thread> threads;
    std::vector<grpc::Status> statuses(kAtOnce);
    std::vector<std::string> trailers(kAtOnce);
    std::vector<std::string> ops(kAtOnce);
    for (int i = 0; i < kAtOnce; ++i) {
      ops[i] = Op("ride-race");
      threads.emplace_back([&, i] {
        FaultRequest req;
        req.set_op_id(ops[i]);
        req.set_delay_ms(45 + i % 10);  // the hedge is due at 50 ms
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        statuses[i] =
            StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply)
                ->Wait();
        trailers[i] =
            Value(ctx.GetServerTrailingMetadata(), "rpcguard-attempts");
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kAtOnce; ++i) {
      SCOPED_TRACE(ops[i]);
      EXPECT_TRUE(statuses[i].ok()) << statuses[i].error_message();
      const auto op = server_.Op(ops[i]);
      EXPECT_TRUE(trailers[i] == "1" || trailers[i] == "2") << trailers[i];
      EXPECT_GE(op.attempts, 1);
      EXPECT_LE(op.attempts, 2);
      if (op.keys.size() == 2) EXPECT_EQ(op.keys[0], op.keys[1]);
    }
  }
  const MethodStatsSnapshot m = Settled();
  EXPECT_EQ(m.calls, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(m.attempts, m.attempts_started);
}

INSTANTIATE_TEST_SUITE_P(CallbackStubs, HedgingRideE2ETest,
                         ::testing::Values(StubKind::kCallback,
                                           StubKind::kReactor),
                         [](const auto& info) { return KindName(info.param); });

}  // namespace
}  // namespace rpcguard
