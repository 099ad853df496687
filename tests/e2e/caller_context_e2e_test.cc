// Copyright rpcguard authors.
//
// What the caller set on its ClientContext reaches every attempt, and what it
// reads back from the context afterwards describes the final attempt. Real
// calls through rpcguard to a real fault-injecting server, through every stub
// API. A middle server that calls on with ClientContext::FromServerContext
// shows a parent call's deadline and cancellation reaching the attempts and
// the backoffs between them.
//
// Built without gRPC 1.51's fast paths (--config=no_grpc_fast_paths, as on
// another gRPC), rpcguard uses only gRPC's public API, which hides what the
// caller set with set_authority and FromServerContext and gives no way to
// set auth_context() or debug_error_string(): the same tests then check that
// fallback, as the README describes it ("gRPC versions").

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::ControlCall;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Method;
using ::rpcguard::testing::OpRecord;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get retries at once; Put waits 1.6 to 2.4 s before its retry, long enough
// for a parent's deadline or cancel to land in the backoff; Charge has a
// per-attempt timeout; HedgedCharge is hedged (KEYED in its .proto), its
// failures non-fatal, so a server's pushback makes it wait with no copy in
// flight.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.02s",
                   "maxBackoff": "0.05s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Put"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "2s",
                   "maxBackoff": "2s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Charge"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.02s",
                   "maxBackoff": "0.05s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "KEYED", "perAttemptTimeout": "2s"}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService",
             "method": "HedgedCharge"}],
   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s",
                     "nonFatalStatusCodes": ["UNAVAILABLE"]}}]})json";

constexpr char kAuthority[] = "fault.example.test";

// Whether this build reads and writes ClientContext's hidden members (gRPC
// 1.51): if not, the tests expect the public API's fallback.
const bool kFastPaths = internal::ContextAccessKnowsThisGrpc();

std::shared_ptr<grpc::Channel> GuardedChannel(
    const std::string& target, std::shared_ptr<TraceSink> sink = nullptr) {
  auto channel = CreateGuardedChannel(target, kConfig, [&](Options& options) {
    options.trace_verbosity =
        sink == nullptr ? TraceVerbosity::kOff : TraceVerbosity::kAll;
    options.trace_sink = std::move(sink);
  });
  EXPECT_TRUE(channel.ok()) << channel.status();
  return channel.ok() ? *channel : nullptr;
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

class CallerContextE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override {
    channel_ = GuardedChannel(backend_.address());
    stub_ = FaultService::NewStub(channel_);
  }

  FaultRequest Request(const std::string& name) {
    FaultRequest req;
    req.set_op_id(absl::StrCat(name, "-", KindName(GetParam())));
    return req;
  }

  grpc::Status Call(FaultService::Stub* stub, Method m,
                    grpc::ClientContext* ctx, const FaultRequest& req) {
    FaultReply reply;
    return StartCall(GetParam(), stub, m, ctx, req, &reply)->Wait();
  }

  FaultServer backend_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
};

TEST_P(CallerContextE2ETest, AuthorityReachesEveryAttempt) {
  // Once for a call that never fails, once for one that is retried.
  for (int fail_first : {0, 1}) {
    FaultRequest req = Request(absl::StrCat("authority-", fail_first));
    req.set_fail_first(fail_first);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    ctx.set_authority(kAuthority);
    const grpc::Status s = Call(stub_.get(), Method::kGet, &ctx, req);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const OpRecord r = backend_.Op(req.op_id());
    ASSERT_EQ(r.attempts, fail_first + 1);
    // The fallback cannot read the caller's authority: every attempt,
    // rpcguard's own call, carries the channel's.
    const std::string expected = kFastPaths ? kAuthority : backend_.address();
    for (int i = 0; i < r.attempts; ++i) {
      EXPECT_EQ(r.authorities[i], expected)
          << "attempt " << i + 1 << " of " << req.op_id();
    }
  }
}

// The server is down when the call starts and comes up after 1 s: the call
// waits for it, as it would on a plain channel.
TEST_P(CallerContextE2ETest, WaitForReadyWaitsForTheServerToComeUp) {
  int port;
  {
    FaultServer gone;
    port = gone.port();
  }
  auto channel = GuardedChannel(absl::StrCat("127.0.0.1:", port));
  auto stub = FaultService::NewStub(channel);
  FaultRequest req = Request("wait-for-ready-first");
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  ctx.set_wait_for_ready(true);
  FaultReply reply;
  const absl::Time start = absl::Now();
  auto call =
      StartCall(GetParam(), stub.get(), Method::kGet, &ctx, req, &reply);
  absl::SleepFor(absl::Seconds(1));
  FaultServer late(port);
  ASSERT_TRUE(late.ok());
  const grpc::Status s = call->Wait();
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message()
                      << " after " << absl::Now() - start;
  EXPECT_EQ(late.Op(req.op_id()).attempts, 1);
}

// Attempt 1 fails and the server goes away; it comes back 1 s later. The
// retries wait for it too.
TEST_P(CallerContextE2ETest, WaitForReadyReachesRetries) {
  auto first = std::make_unique<FaultServer>();
  const int port = first->port();
  first->SetMode(/*fail_percent=*/100, /*delay_ms=*/300, /*hang=*/false, 0);
  auto channel = GuardedChannel(first->address());
  auto stub = FaultService::NewStub(channel);
  FaultRequest req = Request("wait-for-ready-retry");
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  ctx.set_wait_for_ready(true);
  FaultReply reply;
  auto call =
      StartCall(GetParam(), stub.get(), Method::kGet, &ctx, req, &reply);
  while (first->total_attempts() == 0) absl::SleepFor(absl::Milliseconds(5));
  first.reset();  // answers attempt 1 (UNAVAILABLE), then closes the port
  absl::SleepFor(absl::Seconds(1));
  FaultServer second(port);
  ASSERT_TRUE(second.ok());
  const grpc::Status s = call->Wait();
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(second.Op(req.op_id()).attempts, 1);
}

TEST_P(CallerContextE2ETest, AuthContextDescribesTheFinalAttempt) {
  // What a plain channel's call reports.
  std::vector<grpc::string_ref> plain_values;
  std::shared_ptr<const grpc::AuthContext> plain_auth;
  {
    auto plain = FaultService::NewStub(grpc::CreateChannel(
        backend_.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    ASSERT_TRUE(
        Call(plain.get(), Method::kGet, &ctx, Request("auth-plain")).ok());
    plain_auth = ctx.auth_context();
  }
  ASSERT_NE(plain_auth, nullptr);
  const std::vector<grpc::string_ref> expected =
      plain_auth->FindPropertyValues("transport_security_type");
  ASSERT_FALSE(expected.empty());

  for (int fail_first : {0, 1}) {
    FaultRequest req = Request(absl::StrCat("auth-", fail_first));
    req.set_fail_first(fail_first);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    ASSERT_TRUE(Call(stub_.get(), Method::kGet, &ctx, req).ok());
    std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    ASSERT_NE(auth, nullptr);
    if (!kFastPaths) {
      // The fallback cannot set it: it describes the application's own
      // call, which rpcguard never started.
      EXPECT_TRUE(auth->FindPropertyValues("transport_security_type").empty())
          << req.op_id();
      EXPECT_FALSE(auth->IsPeerAuthenticated());
      continue;
    }
    EXPECT_EQ(auth->FindPropertyValues("transport_security_type"), expected)
        << req.op_id();
    EXPECT_EQ(auth->IsPeerAuthenticated(), plain_auth->IsPeerAuthenticated());
  }
}

TEST_P(CallerContextE2ETest, DebugErrorStringDescribesTheFinalAttempt) {
  FaultRequest req = Request("debug-error-string");
  req.set_fail_first(10);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(5));
  const grpc::Status s = Call(stub_.get(), Method::kGet, &ctx, req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_EQ(backend_.Op(req.op_id()).attempts, 4);
  if (!kFastPaths) {
    // The fallback cannot set it: the status's message says what happened.
    EXPECT_EQ(ctx.debug_error_string(), "");
    EXPECT_TRUE(
        absl::StrContains(s.error_message(), "injected failure on attempt 4"))
        << s.error_message();
    return;
  }
  EXPECT_TRUE(absl::StrContains(ctx.debug_error_string(),
                                "injected failure on attempt 4"))
      << "debug_error_string: " << ctx.debug_error_string();
}

// A limit (README, Limits): peer() asks gRPC core for the application's own
// call's peer. A hijacked call never connected, so it names the channel's
// target; a riding call names attempt 1's peer. Only callback calls ride, and
// only with the fast paths (grpc_1_51/probes.h).
TEST_P(CallerContextE2ETest, PeerIsTheChannelTargetOrAttemptOnesPeer) {
  FaultRequest req = Request("peer");
  req.set_fail_first(1);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(5));
  ASSERT_TRUE(Call(stub_.get(), Method::kGet, &ctx, req).ok());
  const std::string connected = absl::StrCat("ipv4:", backend_.address());
  if (GetParam() == StubKind::kCallback && internal::ProbesKnowThisGrpc()) {
    EXPECT_EQ(ctx.peer(), connected);  // riding: attempt 1's
  } else {
    EXPECT_EQ(ctx.peer(), backend_.address());  // hijacked: the target
  }
}

// A middle tier: a sync FaultService server that forwards each call to the
// backend through rpcguard, with ClientContext::FromServerContext and the
// stub API under test, and records how the forwarded call ended and the
// trace events of its attempts.
class Middle final : public FaultService::Service {
 public:
  struct Result {
    grpc::Status status;
    absl::Duration took;
  };

  // `copy_deadline`: also set the server call's deadline on the forwarded
  // call's context, as the README suggests.
  Middle(const std::string& backend, StubKind kind, bool copy_deadline)
      : channel_(GuardedChannel(backend, std::make_shared<CallbackSink>(
                                             [this](const TraceEvent& e) {
                                               absl::MutexLock lock(&mu_);
                                               events_.push_back(e);
                                             }))),
        stub_(FaultService::NewStub(channel_)),
        kind_(kind),
        copy_deadline_(copy_deadline) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~Middle() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // How the forwarded call ended; fails the test after 10 s.
  Result WaitResult() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
    absl::MutexLock lock(&mu_);
    return result_;
  }

  std::vector<TraceEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  grpc::Status Get(grpc::ServerContext* ctx, const FaultRequest* req,
                   FaultReply* reply) override {
    return Forward(Method::kGet, ctx, req, reply);
  }
  grpc::Status Put(grpc::ServerContext* ctx, const FaultRequest* req,
                   FaultReply* reply) override {
    return Forward(Method::kPut, ctx, req, reply);
  }
  grpc::Status Charge(grpc::ServerContext* ctx, const FaultRequest* req,
                      FaultReply* reply) override {
    return Forward(Method::kCharge, ctx, req, reply);
  }
  grpc::Status HedgedCharge(grpc::ServerContext* ctx, const FaultRequest* req,
                            FaultReply* reply) override {
    return Forward(Method::kHedgedCharge, ctx, req, reply);
  }

 private:
  grpc::Status Forward(Method m, grpc::ServerContext* ctx,
                       const FaultRequest* req, FaultReply* reply) {
    std::unique_ptr<grpc::ClientContext> down =
        grpc::ClientContext::FromServerContext(*ctx);
    if (copy_deadline_) down->set_deadline(ctx->deadline());
    const absl::Time start = absl::Now();
    const grpc::Status s =
        StartCall(kind_, stub_.get(), m, down.get(), *req, reply)->Wait();
    {
      absl::MutexLock lock(&mu_);
      result_ = {s, absl::Now() - start};
    }
    done_.Notify();
    return s;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
  const StubKind kind_;
  const bool copy_deadline_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  Result result_ ABSL_GUARDED_BY(mu_);
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

class ParentCallE2ETest : public CallerContextE2ETest {
 protected:
  void SetUp() override {
    CallerContextE2ETest::SetUp();
    StartMiddle(/*copy_deadline=*/false);
  }

  void StartMiddle(bool copy_deadline) {
    upstream_.reset();
    middle_.reset();
    middle_ =
        std::make_unique<Middle>(backend_.address(), GetParam(), copy_deadline);
    upstream_ = FaultService::NewStub(grpc::CreateChannel(
        middle_->address(), grpc::InsecureChannelCredentials()));
  }

  // Calls the middle tier with a plain callback call: with `deadline`, and
  // cancelled after `cancel_after` unless it is infinite. Returns how the
  // middle's forwarded call ended.
  Middle::Result Upstream(Method m, const FaultRequest& req,
                          absl::Duration deadline,
                          absl::Duration cancel_after) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline);
    FaultReply reply;
    auto call =
        StartCall(StubKind::kCallback, upstream_.get(), m, &ctx, req, &reply);
    if (cancel_after != absl::InfiniteDuration()) {
      absl::SleepFor(cancel_after);
      ctx.TryCancel();
    }
    call->Wait();
    return middle_->WaitResult();
  }

  static bool EndedByParent(const grpc::Status& s) {
    // Core ends a child at its parent's deadline either by its own deadline
    // timer or by the parent's cancellation, whichever fires first.
    return s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
           s.error_code() == grpc::StatusCode::CANCELLED;
  }

  // The fallback (no fast paths): gRPC's public API hides the parent, so
  // rpcguard's attempts are not its children and no watch covers the
  // backoffs. Neither the parent's deadline nor its cancel (at 300 or
  // 500 ms) reaches them: the forwarded call runs on to its own end, with
  // `attempts` attempts, ending `code`.
  void ExpectParentUnseen(const Middle::Result& r, const FaultRequest& req,
                          grpc::StatusCode code, int attempts) {
    EXPECT_EQ(r.status.error_code(), code) << r.status.error_message();
    EXPECT_GT(r.took, absl::Milliseconds(1500));
    EXPECT_EQ(backend_.Op(req.op_id()).attempts, attempts);
  }

  std::unique_ptr<Middle> middle_;
  std::unique_ptr<FaultService::Stub> upstream_;
};

TEST_P(ParentCallE2ETest, ParentDeadlineEndsAnAttempt) {
  FaultRequest req = Request("parent-deadline-attempt");
  req.set_delay_ms(2000);
  const absl::Time upstream_deadline = absl::Now() + absl::Milliseconds(500);
  const Middle::Result r = Upstream(Method::kGet, req, absl::Milliseconds(500),
                                    absl::InfiniteDuration());
  if (!kFastPaths) {
    ExpectParentUnseen(r, req, grpc::StatusCode::OK, 1);
    // Nor does the attempt carry the parent's deadline.
    EXPECT_GT(backend_.Op(req.op_id()).deadlines[0],
              upstream_deadline + absl::Hours(1));
    return;
  }
  EXPECT_TRUE(EndedByParent(r.status))
      << r.status.error_code() << ": " << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1500));
  const OpRecord op = backend_.Op(req.op_id());
  ASSERT_EQ(op.attempts, 1);
  EXPECT_LE(op.deadlines[0], upstream_deadline + absl::Milliseconds(100));
}

TEST_P(ParentCallE2ETest, ParentDeadlineEndsABackoff) {
  FaultRequest req = Request("parent-deadline-backoff");
  req.set_fail_first(1);
  const Middle::Result r = Upstream(Method::kPut, req, absl::Milliseconds(500),
                                    absl::InfiniteDuration());
  if (!kFastPaths) {
    ExpectParentUnseen(r, req, grpc::StatusCode::OK, 2);
    return;
  }
  EXPECT_TRUE(EndedByParent(r.status))
      << r.status.error_code() << ": " << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1200));
  // A limit (README, Limits): rpcguard cannot read the parent's deadline,
  // so it waits into it rather than give up at once on a backoff that
  // cannot fit.
  EXPECT_GT(r.took, absl::Milliseconds(400));
  EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
}

// The README's way around that limit: the parent's deadline set on the
// context too is the retry budget like any caller's deadline. The forwarded
// call gives up at once, not at the deadline: within 300 ms on a quiet
// machine, or as soon as a plain channel's call to the backend that fails
// the same way, started in the same moment (tests/testing/deadline_control.h).
TEST_P(ParentCallE2ETest, ParentDeadlineSetOnTheContextIsTheRetryBudget) {
  auto plain = testing::PlainStub(backend_.address());
  int measurement = 0;
  ExpectWithinControl("time to give up", absl::Milliseconds(300), [&] {
    StartMiddle(/*copy_deadline=*/true);
    FaultRequest req =
        Request(absl::StrCat("parent-deadline-copied-", ++measurement));
    req.set_fail_first(1);
    ControlCall control(GetParam(), plain.get(), req,
                        absl::Now() + absl::Milliseconds(500));
    const Middle::Result r = Upstream(
        Method::kPut, req, absl::Milliseconds(500), absl::InfiniteDuration());
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(
        absl::StrContains(r.status.error_message(), "gave up: deadline"))
        << r.status.error_message();
    EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
    EXPECT_EQ(control.Wait().error_code(), grpc::StatusCode::UNAVAILABLE);
    return Timing{r.took, control.Took()};
  });
}

// A limit (README, Limits): an attempt that the parent's deadline ends with
// DEADLINE_EXCEEDED looks like any; with a per-attempt timeout, like that
// timeout, so rpcguard decides a retry, which the ended parent then stops.
TEST_P(ParentCallE2ETest, ParentDeadlineDuringAnAttemptReadsAsItsTimeout) {
  FaultRequest req = Request("parent-deadline-per-attempt");
  req.set_delay_ms(2000);
  const Middle::Result r = Upstream(
      Method::kCharge, req, absl::Milliseconds(500), absl::InfiniteDuration());
  if (!kFastPaths) {
    // Each attempt runs to its own 2 s timeout (or the server's answer at
    // 2 s, whichever comes first): not ended by the parent's deadline.
    EXPECT_GT(r.took, absl::Milliseconds(1500));
    ASSERT_FALSE(middle_->events().empty());
    EXPECT_NE(middle_->events()[0].code, grpc::StatusCode::CANCELLED);
    return;
  }
  EXPECT_TRUE(EndedByParent(r.status))
      << r.status.error_code() << ": " << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1200));
  EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
  const std::vector<TraceEvent> events = middle_->events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].attempt, 1);
  // Core ends the attempt by its own deadline timer or by the parent's
  // cancel, whichever fires first; only the first reads as a timeout.
  if (events[0].code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    EXPECT_EQ(events[0].decision, TraceDecision::kRetry);
  } else {
    EXPECT_EQ(events[0].code, grpc::StatusCode::CANCELLED);
    EXPECT_EQ(events[0].decision, TraceDecision::kGiveUp);
  }
}

TEST_P(ParentCallE2ETest, ParentCancelEndsAnAttempt) {
  FaultRequest req = Request("parent-cancel-attempt");
  req.set_delay_ms(2000);
  const Middle::Result r =
      Upstream(Method::kGet, req, absl::Seconds(10), absl::Milliseconds(300));
  if (!kFastPaths) {
    ExpectParentUnseen(r, req, grpc::StatusCode::OK, 1);
    return;
  }
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED)
      << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1200));
  EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
}

TEST_P(ParentCallE2ETest, ParentCancelEndsABackoff) {
  FaultRequest req = Request("parent-cancel-backoff");
  req.set_fail_first(1);
  const Middle::Result r =
      Upstream(Method::kPut, req, absl::Seconds(10), absl::Milliseconds(300));
  if (!kFastPaths) {
    ExpectParentUnseen(r, req, grpc::StatusCode::OK, 2);
    return;
  }
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED)
      << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1200));
  EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
}

// A hedged call whose first copy failed with a 2 s pushback waits with no
// copy in flight (no copy carries the parent): the parent's cancel must
// still end it, through the watch on the parent.
TEST_P(ParentCallE2ETest, ParentCancelEndsAHedgedCallsPushbackWait) {
  FaultRequest req = Request("parent-cancel-hedged-pushback");
  req.set_fail_first(1);
  req.set_pushback_ms("2000");
  const Middle::Result r = Upstream(Method::kHedgedCharge, req,
                                    absl::Seconds(10), absl::Milliseconds(300));
  if (!kFastPaths) {
    ExpectParentUnseen(r, req, grpc::StatusCode::OK, 2);
    return;
  }
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED)
      << r.status.error_message();
  EXPECT_LT(r.took, absl::Milliseconds(1200));
  EXPECT_EQ(backend_.Op(req.op_id()).attempts, 1);
}

std::string Name(const ::testing::TestParamInfo<StubKind>& info) {
  return KindName(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllStubs, CallerContextE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback,
                                           StubKind::kReactor),
                         Name);
INSTANTIATE_TEST_SUITE_P(AllStubs, ParentCallE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback,
                                           StubKind::kReactor),
                         Name);

}  // namespace
}  // namespace rpcguard
