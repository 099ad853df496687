// Copyright rpcguard authors.
//
// Hedged calls end to end (issue 14), through the sync, CQ-async, callback
// and reactor stubs against the fault server: a slow first copy is beaten
// by a hedge that carries the same key; a fatal answer ends the call at
// once; the caller's cancel and deadline end every copy; who may be hedged;
// a policy declared in the .proto; the hedgingPolicy's JSON and Explain.

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::ControlAttempts;
using ::rpcguard::testing::ControlCall;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Method;
using ::rpcguard::testing::PendingCall;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get (NO_SIDE_EFFECTS) hedged by the service's entry; Put (IDEMPOTENT)
// by an entry for the method itself; Charge (KEYED) by the service's
// entry only, which does not hedge it.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s",
                     "nonFatalStatusCodes": ["UNAVAILABLE"]}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Put"}],
   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s"}}
]})json";

std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(key);
  if (it == md.end()) return "<none>";
  return std::string(it->second.data(), it->second.size());
}

class HedgingE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override {
    auto channel =
        CreateGuardedChannel(server_.address(), kConfig, [](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = FaultService::NewStub(*channel);
    control_ = testing::PlainStub(server_.address());
  }

  // The control of a timing: a plain channel's Get of `req` through the
  // same stub API, started now (tests/testing/deadline_control.h).
  std::unique_ptr<ControlCall> StartControl(
      FaultRequest req, absl::Time deadline = absl::InfiniteFuture()) {
    return std::make_unique<ControlCall>(GetParam(), control_.get(),
                                         std::move(req), deadline);
  }

  grpc::Status Call(Method m, grpc::ClientContext* ctx, const FaultRequest& req,
                    FaultReply* reply) {
    return StartCall(GetParam(), stub_.get(), m, ctx, req, reply)->Wait();
  }

  std::string Op(const std::string& name) {
    return absl::StrCat(name, "-", KindName(GetParam()), "-", ++op_counter_);
  }

  // Waits (up to 5 s) until the server has seen `n` attempts of `op`.
  bool WaitForAttempts(const std::string& op, int n) {
    const absl::Time limit = absl::Now() + absl::Seconds(5);
    while (absl::Now() < limit) {
      if (server_.Op(op).attempts >= n) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  FaultServer server_;
  std::unique_ptr<FaultService::Stub> stub_;
  // A plain channel's (no rpcguard) to the same server.
  std::unique_ptr<FaultService::Stub> control_;
  int op_counter_ = 0;
};

// The first copy takes 2 s; the hedge sent after 50 ms answers at once:
// the call ends after about the hedge delay, the server saw two copies
// with one key, numbered 1 and 2.
TEST_P(HedgingE2ETest, AHedgeBeatsASlowFirstCopy) {
  FaultRequest req;
  req.set_op_id(Op("slow-first"));
  req.set_slow_first_ms(2000);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const absl::Time start = absl::Now();
  const grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(took, absl::Milliseconds(45));
  EXPECT_LT(took, absl::Seconds(1));
  EXPECT_EQ(reply.attempts_seen(), 2);
  EXPECT_EQ(reply.attempt_header(), "2");
  const auto op = server_.Op(req.op_id());
  ASSERT_EQ(op.keys.size(), 2u);
  EXPECT_EQ(op.keys[0], op.keys[1]);
  EXPECT_FALSE(op.keys[0].empty());
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "2");
}

// A first copy that answers before the hedge delay: no hedge at all.
TEST_P(HedgingE2ETest, AFastCallIsNotHedged) {
  FaultRequest req;
  req.set_op_id(Op("fast"));
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
  absl::SleepFor(absl::Milliseconds(100));  // past the hedge delay
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "1");
}

// The hedge fails with a fatal code while the first copy is still slow:
// the call ends with it at once, not after 2 s.
TEST_P(HedgingE2ETest, AFatalAnswerEndsTheCall) {
  FaultRequest req;
  req.set_op_id(Op("fatal"));
  req.set_slow_first_ms(2000);
  req.set_fail_only_attempt(2);
  req.set_fail_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const absl::Time start = absl::Now();
  const grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
}

// A non-fatal failure sends the next copy at once (A6): without the hedge
// delay (50 ms) and without a retry's backoff, so within 45 ms on a quiet
// machine, or as soon as the control: a plain channel's two calls one after
// the other, the first failing at once, started at the same moment.
TEST_P(HedgingE2ETest, ANonFatalFailureSendsTheNextCopyAtOnce) {
  ExpectWithinControl("time to end", absl::Milliseconds(45), [&] {
    FaultRequest req;
    req.set_op_id(Op("nonfatal"));
    req.set_fail_first(1);  // UNAVAILABLE, at once
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    FaultRequest fails;
    fails.set_fail_first(1);
    ControlAttempts control(GetParam(), control_.get(), {{fails}, {}});
    const absl::Time start = absl::Now();
    EXPECT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
    const absl::Duration took = absl::Now() - start;
    const std::vector<grpc::Status> control_statuses = control.Wait();
    EXPECT_EQ(control_statuses[0].error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(control_statuses[1].ok());
    EXPECT_EQ(reply.attempts_seen(), 2);
    return Timing{took, control.Took()};
  });
}

// Every copy slow: the caller's deadline ends them all, on time (within
// 200 ms, or as late as a plain channel's call with the same deadline).
TEST_P(HedgingE2ETest, TheDeadlineEndsEveryCopy) {
  ExpectWithinControl("lateness at the deadline", absl::Milliseconds(200), [&] {
    FaultRequest req;
    req.set_op_id(Op("deadline"));
    req.set_delay_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    auto control = StartControl(ControlCall::HeldPast(deadline), deadline);
    const grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    const absl::Duration late = absl::Now() - deadline;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    // The hedges went out before the deadline: 3 copies at 0, 50, 100 ms.
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 3);
    EXPECT_EQ(control->Wait().error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
    return Timing{late, control->LateBy()};
  });
}

// The first copy fails with a pushback over kMaxServerDelay (60 s) that the
// 2 s deadline cannot fit: no copy follows and, nothing being in flight, the
// call ends at once (not at the deadline), saying `deadline`.
TEST_P(HedgingE2ETest, AServerDelayThatCannotFitEndsTheCallAsDeadline) {
  for (bool use_retry_info : {false, true}) {
    FaultRequest req;
    req.set_op_id(Op("pushback-over-cap"));
    req.set_fail_first(1);  // UNAVAILABLE at once, before the hedge delay
    if (use_retry_info) {
      req.set_retry_info_ms(90000);
    } else {
      req.set_pushback_ms("90000");
    }
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    const absl::Time start = absl::Now();
    const grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "gave up: deadline"))
        << s.error_message();
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  }
}

// The caller cancels with copies in flight: the call ends at once (within
// 500 ms, or as soon as a plain channel's call cancelled in the same
// moment).
TEST_P(HedgingE2ETest, TheCallersCancelEndsEveryCopy) {
  ExpectWithinControl(
      "time to end after the cancel", absl::Milliseconds(500), [&] {
        FaultRequest req;
        req.set_op_id(Op("cancel"));
        req.set_delay_ms(2000);
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        auto control = StartControl(ControlCall::Held(absl::Seconds(2)));
        const absl::Time start = absl::Now();
        std::unique_ptr<PendingCall> call =
            StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply);
        // Two copies out (the hedge at 50 ms), and the control's call at
        // the server.
        EXPECT_TRUE(WaitForAttempts(req.op_id(), 2));
        EXPECT_TRUE(WaitForAttempts(control->op_id(), 1));
        control->Cancel();
        const absl::Time cancelled = absl::Now();
        ctx.TryCancel();
        const grpc::Status s = call->Wait();
        const absl::Duration took = absl::Now() - cancelled;
        EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
        EXPECT_EQ(control->Wait().error_code(), grpc::StatusCode::CANCELLED);
        absl::SleepFor(absl::Milliseconds(150));  // past the third copy's time
        // No copy after a cancel: the third was due at 100 ms, so unless a
        // busy machine held the cancel back until then, two.
        if (cancelled - start < absl::Milliseconds(90)) {
          EXPECT_EQ(server_.Op(req.op_id()).attempts, 2)
              << "no copy after a cancel";
        } else {
          EXPECT_LE(server_.Op(req.op_id()).attempts, 3);
        }
        return Timing{took, control->SinceCancel()};
      });
}

// IDEMPOTENT with a policy written for the method: hedged. KEYED with the
// service's policy only: not hedged, and not retried either (the service's
// entry has no retryPolicy; Charge's own default is 3 attempts).
TEST_P(HedgingE2ETest, WhoMayBeHedged) {
  {
    FaultRequest req;
    req.set_op_id(Op("put"));
    req.set_slow_first_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ASSERT_TRUE(Call(Method::kPut, &ctx, req, &reply).ok());
    EXPECT_EQ(reply.attempts_seen(), 2);
  }
  {
    FaultRequest req;
    req.set_op_id(Op("charge"));
    req.set_slow_first_ms(300);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ASSERT_TRUE(Call(Method::kCharge, &ctx, req, &reply).ok());
    EXPECT_EQ(reply.attempts_seen(), 1);
  }
  {
    FaultRequest req;  // Create: never declared, never hedged
    req.set_op_id(Op("create"));
    req.set_slow_first_ms(300);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ASSERT_TRUE(Call(Method::kCreate, &ctx, req, &reply).ok());
    EXPECT_EQ(reply.attempts_seen(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStubs, HedgingE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback,
                                           StubKind::kReactor),
                         [](const ::testing::TestParamInfo<StubKind>& i) {
                           return KindName(i.param);
                         });

// --- The JSON ---

TEST(HedgingConfigTest, ErrorsNameTheField) {
  const struct {
    const char* json;
    const char* error;
  } cases[] = {
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {}}]})",
       "methodConfig[0].hedgingPolicy.maxAttempts: is required"},
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy":
           {"maxAttempts": 1}}]})",
       "methodConfig[0].hedgingPolicy.maxAttempts: must be at least 2"},
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy":
           {"maxAttempts": 2, "hedgingDelay": "-1s"}}]})",
       "methodConfig[0].hedgingPolicy.hedgingDelay: must be 0 or more"},
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy":
           {"maxAttempts": 2, "nonFatalStatusCodes": ["NOPE"]}}]})",
       "methodConfig[0].hedgingPolicy.nonFatalStatusCodes[0]:"},
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy":
           {"maxAttempts": 2, "bogus": 1}}]})",
       "methodConfig[0].hedgingPolicy.bogus: unknown field"},
      {R"({"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2,
           "initialBackoff": "0.1s", "maxBackoff": "1s",
           "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
           "hedgingPolicy": {"maxAttempts": 2}}]})",
       "methodConfig[0].hedgingPolicy: conflicts with retryPolicy; set only "
       "one (gRFC A6)"},
      {R"({"methodConfig": [{"name": [{}],
           "rpcguard": {"maxExtraLoad": 0.1}}]})",
       "methodConfig[0].rpcguard.maxExtraLoad: requires a hedgingPolicy in "
       "the same method config"},
      {R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2},
           "rpcguard": {"hedgingDelayPercentile": 1.5}}]})",
       "methodConfig[0].rpcguard.hedgingDelayPercentile: must be in (0, 1)"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<Config> config = Config::FromJson(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_TRUE(absl::StartsWith(config.status().message(), c.error))
        << config.status().message() << "\nwanted: " << c.error;
  }
}

TEST(HedgingConfigTest, ExplainSaysWhoIsHedgedAndHow) {
  const absl::StatusOr<Config> config = Config::FromJson(R"({"methodConfig": [
    {"name": [{"service": "s.S"}],
     "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.03s"},
     "rpcguard": {"idempotency": "NO_SIDE_EFFECTS",
                  "hedgingDelayPercentile": 0.95, "maxExtraLoad": 0.1}},
    {"name": [{"service": "k.K"}],
     "hedgingPolicy": {"maxAttempts": 2},
     "rpcguard": {"idempotency": "KEYED"}}]})");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string read = config->Explain("/s.S/Read");
  EXPECT_TRUE(absl::StrContains(
      read, "hedged, up to 3 copies, the next after 30ms (then p95"))
      << read;
  EXPECT_TRUE(absl::StrContains(read, "maxExtraLoad=0.1")) << read;
  const std::string keyed = config->Explain("/k.K/Pay");
  EXPECT_TRUE(absl::StrContains(keyed, "not for this method itself")) << keyed;
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// Stats count hedges sent, hedges that won and copies cancelled, and the
// Prometheus text carries them.
// A channel with stats of its own, and a hedged call whose first copy is
// slow (2 s), so that the hedge sent after 50 ms wins and the first copy is
// cancelled.
class HedgingStatsTest : public ::testing::Test {
 protected:
  void CallWhoseFirstCopyIsSlow(const std::string& op_id) {
    auto channel = CreateGuardedChannel(
        server_.address(), kConfig, [this](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
          options.stats = stats_;
        });
    ASSERT_TRUE(channel.ok());
    // Kept for the test's life: the cancelled copy ends after the call.
    stub_ = FaultService::NewStub(*channel);
    FaultRequest req;
    req.set_op_id(op_id);
    req.set_slow_first_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ASSERT_TRUE(stub_->Get(&ctx, req, &reply).ok());
  }

  FaultServer server_;
  const std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::unique_ptr<FaultService::Stub> stub_;
};

TEST_F(HedgingStatsTest, CountsHedgesWinsAndCancelledCopies) {
  ASSERT_NO_FATAL_FAILURE(CallWhoseFirstCopyIsSlow("stats-slow-first"));
  const StatsSnapshot snap = stats_->Snapshot();
  const MethodStatsSnapshot* m =
      snap.FindMethod("/rpcguard.testing.v1.FaultService/Get");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->hedges, 1u);
  EXPECT_EQ(m->hedges_won, 1u);
  EXPECT_EQ(m->copies_cancelled, 1u);
  EXPECT_DOUBLE_EQ(m->hedge_delay_seconds, 0.05);
  const std::string text = ToPrometheusText(snap);
  EXPECT_TRUE(absl::StrContains(
      text, absl::StrCat("rpcguard_hedges_won_total{method=\"/"
                         "rpcguard.testing.v1.FaultService/Get\",target=\"",
                         server_.address(), "\"} 1")))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "rpcguard_hedge_delay_seconds{"));
}

// gRFC A66 counts a cancelled attempt as ended: the copy cancelled when the
// hedge won is counted in rpcguard_attempts_total (as CANCELLED) and in the
// attempt duration, so that started minus ended returns to zero. Before,
// it was counted started and never ended. Its end comes after the call's
// (the cancel is asynchronous), so the snapshot is read until it is there.
TEST_F(HedgingStatsTest, CancelledCopyIsAnAttemptThatEnded) {
  ASSERT_NO_FATAL_FAILURE(CallWhoseFirstCopyIsSlow("stats-cancelled-copy"));
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  MethodStatsSnapshot m;
  while (true) {
    const StatsSnapshot snap = stats_->Snapshot();
    const MethodStatsSnapshot* found =
        snap.FindMethod("/rpcguard.testing.v1.FaultService/Get");
    ASSERT_NE(found, nullptr);
    m = *found;
    if (m.attempts >= 2 || absl::Now() > give_up) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(m.attempts_started, 2u);
  EXPECT_EQ(m.attempts, 2u);
  EXPECT_EQ(m.attempts_by_code[static_cast<int>(grpc::StatusCode::OK)], 1u);
  EXPECT_EQ(m.attempts_by_code[static_cast<int>(grpc::StatusCode::CANCELLED)],
            1u);
  EXPECT_EQ(m.attempt_duration.count, 2u);
  EXPECT_EQ(m.calls, 1u);
}

// The trace of a hedged call: the hedge sent after the delay is a line
// (event=hedge), and the call's end names the copy that won and the one it
// cancelled; the stats count one call. Then a copy that fails at once: a
// decision=hedge line, the next copy's hedge line, and still one call.
TEST(HedgingTraceTest, LinesNameTheCopies) {
  FaultServer server;
  const auto stats = std::make_shared<Stats>();
  absl::Mutex mu;
  std::vector<TraceEvent> events;
  auto channel =
      CreateGuardedChannel(server.address(), kConfig, [&](Options& options) {
        options.breaker_registry = *BreakerRegistry::Create({});
        options.stats = stats;
        options.trace_sink =
            std::make_shared<CallbackSink>([&](const TraceEvent& e) {
              absl::MutexLock lock(&mu);
              events.push_back(e);
            });
      });
  ASSERT_TRUE(channel.ok());
  auto stub = FaultService::NewStub(*channel);

  FaultRequest req;
  req.set_op_id("trace-slow-first");
  req.set_slow_first_ms(2000);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(stub->Get(&ctx, req, &reply).ok());
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].kind, TraceEvent::Kind::kHedge);
    EXPECT_EQ(events[0].attempt, 2);
    EXPECT_GE(events[0].backoff, absl::Milliseconds(45));
    EXPECT_LT(events[0].backoff, absl::Seconds(1));
    EXPECT_FALSE(events[0].idempotency_key.empty());
    EXPECT_EQ(events[1].kind, TraceEvent::Kind::kAttempt);
    EXPECT_EQ(events[1].decision, TraceDecision::kDone);
    EXPECT_EQ(events[1].attempt, 2);  // copies sent
    EXPECT_EQ(events[1].copy, 2);     // the winner
    EXPECT_EQ(events[1].cancelled, std::vector<int>{1});
    EXPECT_EQ(events[1].idempotency_key, events[0].idempotency_key);
    events.clear();
  }

  FaultRequest fails;
  fails.set_op_id("trace-nonfatal");
  fails.set_fail_first(1);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(stub->Get(&ctx2, fails, &reply).ok());
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[0].kind, TraceEvent::Kind::kAttempt);
    EXPECT_EQ(events[0].decision, TraceDecision::kHedge);
    EXPECT_EQ(events[0].code, grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(events[1].kind, TraceEvent::Kind::kHedge);
    EXPECT_EQ(events[1].attempt, 2);
    EXPECT_EQ(events[2].decision, TraceDecision::kDone);
    EXPECT_EQ(events[2].copy, 2);
    EXPECT_TRUE(events[2].cancelled.empty());
  }
  const StatsSnapshot snap = stats->Snapshot();
  const MethodStatsSnapshot* m =
      snap.FindMethod("/rpcguard.testing.v1.FaultService/Get");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->calls, 2u);
  EXPECT_EQ(m->attempts_per_call.sum, 4);
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// HedgedCharge (KEYED) is hedged by its own .proto option alone, with no
// JSON config at all: a method's option counts as written for the method.
// The hedge after 50 ms beats the slow first copy; both copies carry one
// key, and the server applied the charge once. The sync and callback APIs
// (the other two run the same hijacked call as sync).
TEST(HedgingProtoE2ETest, AProtoDeclaredPolicyHedges) {
  FaultServer server;
  // An empty Config: only the .proto speaks.
  auto channel =
      CreateGuardedChannel(server.address(), "{}", [](Options& options) {
        options.breaker_registry = *BreakerRegistry::Create({});
      });
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = FaultService::NewStub(*channel);
  for (const bool callback : {false, true}) {
    SCOPED_TRACE(callback ? "callback" : "sync");
    FaultRequest req;
    req.set_op_id(callback ? "proto-hedged-callback" : "proto-hedged-sync");
    req.set_slow_first_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    const absl::Time start = absl::Now();
    grpc::Status s;
    if (callback) {
      absl::Notification done;
      stub->async()->HedgedCharge(&ctx, &req, &reply, [&](grpc::Status st) {
        s = std::move(st);
        done.Notify();
      });
      done.WaitForNotification();
    } else {
      s = stub->HedgedCharge(&ctx, req, &reply);
    }
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_GE(took, absl::Milliseconds(45));
    EXPECT_LT(took, absl::Seconds(1));
    EXPECT_EQ(reply.attempts_seen(), 2);
    EXPECT_EQ(reply.attempt_header(), "2");
    const auto op = server.Op(req.op_id());
    ASSERT_EQ(op.keys.size(), 2u);
    EXPECT_FALSE(op.keys[0].empty());
    EXPECT_EQ(op.keys[0], op.keys[1]);
    EXPECT_EQ(op.side_effects, 1);
    EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "2");
  }
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// A port nothing listens on: bound, then let go.
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Judge a destination by evidence: a hedged copy that found no connection
// never reached the server, so the breaker hears nothing of it, as of a
// retried attempt that found none (issue 22; before the one engine, the
// hedged path counted such copies as failures).
TEST(HedgingEvidenceTest, CopiesThatFoundNoConnectionAreNoEvidence) {
  std::shared_ptr<BreakerRegistry> registry = *BreakerRegistry::Create({});
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  auto channel = CreateGuardedChannel(
      address, R"json({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
     "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.01s",
                       "nonFatalStatusCodes": ["UNAVAILABLE"]}}]})json",
      [&](Options& options) { options.breaker_registry = registry; });
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = FaultService::NewStub(*channel);
  for (int i = 0; i < 10; ++i) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("no-connection-", i));
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(500));
    const grpc::Status s = stub->Get(&ctx, req, &reply);
    ASSERT_FALSE(s.ok());
  }
  const BreakerSnapshot snap = registry->Get(address)->Snapshot();
  EXPECT_EQ(snap.window_failures, 0);
  EXPECT_EQ(snap.window_attempts, 0);
  EXPECT_EQ(snap.state, BreakerState::kClosed);
}

}  // namespace
}  // namespace rpcguard
