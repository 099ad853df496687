// Copyright rpcguard authors.
//
// A policy for one call (SetCallPolicy), end to end: each field's effect as
// the server sees it, the safety rule, a bad override refused before the
// server sees anything, and the carrier entry never reaching the server, on
// every stub API.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
using ::rpcguard::testing::OpRecord;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get (NO_SIDE_EFFECTS) and Create (undeclared: UNKNOWN) allow 5 attempts
// with a backoff of at most 2 ms; HedgedCharge is hedged by its .proto
// option (2 copies, 50 ms apart).
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"},
            {"service": "rpcguard.testing.v1.FaultService", "method": "Create"}],
   "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s",
                   "maxBackoff": "0.002s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// A hedging policy for the whole service: not written for Put (IDEMPOTENT),
// so Put is not hedged unless a call asks.
constexpr char kServiceHedgingConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s"}}]})json";

constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";

class CallPolicyE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override { stub_ = Open(kConfig); }

  std::unique_ptr<FaultService::Stub> Open(const char* config) {
    return FaultService::NewStub(*CreateGuardedChannel(
        server_.address(), config, [this](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
          options.trace_verbosity = TraceVerbosity::kOff;
          options.trace_sink =
              std::make_shared<CallbackSink>([this](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                events_.push_back(e);
              });
        }));
  }

  // Runs `m` with `req` (op id `op`) through the test's stub API on `stub`,
  // with `call` set on its context (unless null), and returns its status.
  grpc::Status Run(Method m, FaultRequest req, const CallPolicy* call,
                   FaultService::Stub* stub = nullptr,
                   const std::string& caller_key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    if (!caller_key.empty()) ctx.AddMetadata("idempotency-key", caller_key);
    ctx.AddMetadata("x-app", "kept");
    if (call != nullptr) {
      EXPECT_TRUE(SetCallPolicy(&ctx, *call).ok());
    }
    FaultReply reply;
    return StartCall(GetParam(), stub != nullptr ? stub : stub_.get(), m, &ctx,
                     req, &reply)
        ->Wait();
  }

  static FaultRequest Request(const std::string& op) {
    FaultRequest req;
    req.set_op_id(op);
    return req;
  }

  std::string Op(const std::string& name) const {
    return absl::StrCat(name, "-", KindName(GetParam()));
  }

  // The server saw no call-policy entry, and did see the caller's metadata.
  void ExpectNoEntry(const std::string& op) {
    const OpRecord rec = server_.Op(op);
    EXPECT_EQ(rec.metadata_keys.count(kCallPolicyHeader), 0u) << op;
    EXPECT_EQ(rec.metadata_keys.count("x-app"), rec.attempts > 0 ? 1u : 0u)
        << op;
  }

  size_t EventCount() {
    absl::MutexLock lock(&mu_);
    return events_.size();
  }

  FaultServer server_;
  std::unique_ptr<FaultService::Stub> stub_;
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
};

TEST_P(CallPolicyE2ETest, MaxAttemptsOneIsNotRetried) {
  FaultRequest req = Request(Op("once"));
  req.set_fail_first(1);
  CallPolicy call;
  call.max_attempts = 1;
  const grpc::Status s = Run(Method::kGet, req, &call);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  ExpectNoEntry(req.op_id());
  // The method's own policy retries the same failure.
  FaultRequest control = Request(Op("once-control"));
  control.set_fail_first(1);
  EXPECT_TRUE(Run(Method::kGet, control, nullptr).ok());
  EXPECT_EQ(server_.Op(control.op_id()).attempts, 2);
}

TEST_P(CallPolicyE2ETest, MaxAttemptsThreeOnAMethodWithFive) {
  FaultRequest req = Request(Op("three"));
  req.set_fail_first(100);
  CallPolicy call;
  call.max_attempts = 3;
  EXPECT_EQ(Run(Method::kGet, req, &call).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 3);
  ExpectNoEntry(req.op_id());
  FaultRequest control = Request(Op("three-control"));
  control.set_fail_first(100);
  EXPECT_FALSE(Run(Method::kGet, control, nullptr).ok());
  EXPECT_EQ(server_.Op(control.op_id()).attempts, 5);
}

TEST_P(CallPolicyE2ETest, PerAttemptTimeoutRetriesASlowAttempt) {
  CallPolicy call;
  call.per_attempt_timeout = absl::Milliseconds(100);
  // Attempt 1 was cut at 100 ms and attempt 2 answered at once, long
  // before attempt 1 would have: within 600 ms on a quiet machine, or as
  // soon as the control, a plain channel's call with a 100 ms deadline that
  // the server holds and then one it answers at once
  // (tests/testing/deadline_control.h).
  int measurement = 0;
  ExpectWithinControl("time to end", absl::Milliseconds(600), [&] {
    FaultRequest req = Request(absl::StrCat(Op("timeout"), "-", ++measurement));
    req.set_slow_first_ms(800);
    auto plain = testing::PlainStub(server_.address());
    ControlAttempts control(
        GetParam(), plain.get(),
        {{ControlCall::Held(absl::Milliseconds(800)), absl::Milliseconds(100)},
         {}});
    const absl::Time start = absl::Now();
    EXPECT_TRUE(Run(Method::kGet, req, &call).ok());
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
    ExpectNoEntry(req.op_id());
    const std::vector<grpc::Status> control_statuses = control.Wait();
    EXPECT_EQ(control_statuses[0].error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(control_statuses[1].ok());
    return Timing{took, control.Took()};
  });
}

TEST_P(CallPolicyE2ETest, BackoffIsTheCalls) {
  FaultRequest req = Request(Op("backoff"));
  req.set_fail_first(1);
  CallPolicy call;
  call.initial_backoff = absl::Milliseconds(200);
  call.max_backoff = absl::Milliseconds(200);
  call.backoff_multiplier = 1;
  call.jitter = Jitter::kA6;  // 200 ms * U(0.8, 1.2): at least 160 ms
  EXPECT_TRUE(Run(Method::kGet, req, &call).ok());
  const OpRecord rec = server_.Op(req.op_id());
  ASSERT_EQ(rec.attempts, 2);
  EXPECT_GE(rec.arrivals[1] - rec.arrivals[0], absl::Milliseconds(150));
  ExpectNoEntry(req.op_id());
}

TEST_P(CallPolicyE2ETest, HedgingOffOnAHedgedMethod) {
  FaultRequest req = Request(Op("hedge-off"));
  req.set_slow_first_ms(300);
  CallPolicy call;
  call.hedging = false;
  EXPECT_TRUE(Run(Method::kHedgedCharge, req, &call).ok());
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  ExpectNoEntry(req.op_id());
  // Hedged as its option says without the call policy: a copy at 50 ms.
  FaultRequest control = Request(Op("hedge-off-control"));
  control.set_slow_first_ms(300);
  EXPECT_TRUE(Run(Method::kHedgedCharge, control, nullptr).ok());
  EXPECT_EQ(server_.Op(control.op_id()).attempts, 2);
}

TEST_P(CallPolicyE2ETest, HedgingOnWithTheServicesHedgingPolicy) {
  auto stub = Open(kServiceHedgingConfig);
  FaultRequest control = Request(Op("hedge-on-control"));
  control.set_slow_first_ms(300);
  EXPECT_TRUE(Run(Method::kPut, control, nullptr, stub.get()).ok());
  EXPECT_EQ(server_.Op(control.op_id()).attempts, 1);
  FaultRequest req = Request(Op("hedge-on"));
  req.set_slow_first_ms(300);
  CallPolicy call;
  call.hedging = true;
  EXPECT_TRUE(Run(Method::kPut, req, &call, stub.get()).ok());
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
  ExpectNoEntry(req.op_id());
}

TEST_P(CallPolicyE2ETest, TraceVerbosityIsTheCalls) {
  // The channel traces nothing; this call traces everything.
  CallPolicy call;
  call.trace_verbosity = TraceVerbosity::kAll;
  FaultRequest req = Request(Op("trace"));
  EXPECT_TRUE(Run(Method::kGet, req, &call).ok());
  ExpectNoEntry(req.op_id());
  EXPECT_EQ(EventCount(), 1u);  // the one attempt's "done"
  FaultRequest retried = Request(Op("trace-retried"));
  retried.set_fail_first(1);
  EXPECT_TRUE(Run(Method::kGet, retried, &call).ok());
  EXPECT_EQ(EventCount(), 3u);  // + a retry and a done
  // Without the call policy: the channel's kOff.
  FaultRequest quiet = Request(Op("trace-quiet"));
  quiet.set_fail_first(1);
  EXPECT_TRUE(Run(Method::kGet, quiet, nullptr).ok());
  EXPECT_EQ(EventCount(), 3u);
}

// The safety rule: max_attempts cannot make an undeclared method retriable;
// the caller's own key still does.
TEST_P(CallPolicyE2ETest, NeverRetriesAnUndeclaredMethodWithoutAKey) {
  CallPolicy call;
  call.max_attempts = 5;
  FaultRequest req = Request(Op("unsafe"));
  req.set_fail_first(1);
  EXPECT_EQ(Run(Method::kCreate, req, &call).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  ExpectNoEntry(req.op_id());
  FaultRequest keyed = Request(Op("unsafe-keyed"));
  keyed.set_fail_first(3);
  EXPECT_TRUE(Run(Method::kCreate, keyed, &call, nullptr, "order-7").ok());
  const OpRecord rec = server_.Op(keyed.op_id());
  EXPECT_EQ(rec.attempts, 4);
  EXPECT_EQ(rec.keys, std::vector<std::string>(4, "order-7"));
  ExpectNoEntry(keyed.op_id());
}

TEST_P(CallPolicyE2ETest, BadOverrideFailsBeforeTheServerSeesAnything) {
  grpc::ClientContext ctx;
  CallPolicy call;
  call.max_attempts = 0;
  const absl::Status set = SetCallPolicy(&ctx, call);
  EXPECT_EQ(set.message(), "CallPolicy.max_attempts: must be at least 1");
  FaultRequest req = Request(Op("bad"));
  FaultReply reply;
  grpc::Status s =
      StartCall(GetParam(), stub_.get(), Method::kGet, &ctx, req, &reply)
          ->Wait();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "rpcguard: bad call policy: CallPolicy.max_attempts: must be at "
            "least 1");
  // Valid alone, not for this method (Get has no hedgingPolicy).
  CallPolicy hedge;
  hedge.hedging = true;
  s = Run(Method::kGet, req, &hedge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "CallPolicy.hedging"))
      << s.error_message();
  // A malformed entry put on by hand.
  grpc::ClientContext raw;
  raw.AddMetadata(kCallPolicyHeader, "max_attempts=lots");
  s = StartCall(GetParam(), stub_.get(), Method::kGet, &raw, req, &reply)
          ->Wait();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "rpcguard: bad call policy: CallPolicy.max_attempts: not an "
            "integer: \"lots\"");
  // Enum fields cast from integers outside their enums: SetCallPolicy says
  // so, and the call fails naming the field (a jitter of 42 used to run, as
  // FULL, and a trace verbosity of 42 passed SetCallPolicy).
  CallPolicy jitter;
  jitter.jitter = static_cast<Jitter>(42);
  CallPolicy verbosity;
  verbosity.trace_verbosity = static_cast<TraceVerbosity>(42);
  for (const auto& [bad, field] :
       {std::pair<const CallPolicy*, const char*>{&jitter, "CallPolicy.jitter"},
        {&verbosity, "CallPolicy.trace_verbosity"}}) {
    grpc::ClientContext enum_ctx;
    const absl::Status enum_set = SetCallPolicy(&enum_ctx, *bad);
    EXPECT_TRUE(absl::StartsWith(enum_set.message(), field))
        << enum_set.message();
    s = StartCall(GetParam(), stub_.get(), Method::kGet, &enum_ctx, req, &reply)
            ->Wait();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(s.error_message(), field))
        << s.error_message();
  }
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
}

// Every way rpcguard can run a call takes the entry out: sent once
// (metadata only), riding or hijacked (Get, by stub API), passed through.
TEST_P(CallPolicyE2ETest, EntryNeverReachesTheServer) {
  CallPolicy call;
  call.trace_verbosity = TraceVerbosity::kGiveUps;
  const std::string get = Op("entry-get");
  EXPECT_TRUE(Run(Method::kGet, Request(get), &call).ok());
  const std::string create = Op("entry-create");
  EXPECT_TRUE(Run(Method::kCreate, Request(create), &call).ok());
  for (const std::string& op : {get, create}) {
    EXPECT_EQ(server_.Op(op).attempts, 1) << op;
    EXPECT_EQ(server_.Op(op).metadata_keys.count(kIdempotencyKeyHeader), 1u);
    ExpectNoEntry(op);
  }

  grpc::ClientContext ctx;
  MarkPassThrough(&ctx);
  ctx.AddMetadata("x-app", "kept");
  ASSERT_TRUE(SetCallPolicy(&ctx, call).ok());
  const std::string passed = Op("entry-pass-through");
  FaultReply reply;
  EXPECT_TRUE(StartCall(GetParam(), stub_.get(), Method::kGet, &ctx,
                        Request(passed), &reply)
                  ->Wait()
                  .ok());
  EXPECT_EQ(server_.Op(passed).attempts, 1);
  // Passed through: none of rpcguard's metadata, and not the entry either.
  EXPECT_EQ(server_.Op(passed).metadata_keys.count(kIdempotencyKeyHeader), 0u);
  ExpectNoEntry(passed);
}

INSTANTIATE_TEST_SUITE_P(AllStubs, CallPolicyE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback,
                                           StubKind::kReactor),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

TEST(CallPolicyStreamE2ETest, EntryIsTakenOffAStream) {
  FaultServer server;
  auto stub = FaultService::NewStub(
      *CreateGuardedChannel(server.address(), kConfig, [](Options& options) {
        options.breaker_registry = *BreakerRegistry::Create({});
      }));
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-app", "kept");
  CallPolicy call;
  call.max_attempts = 2;
  ASSERT_TRUE(SetCallPolicy(&ctx, call).ok());
  FaultRequest req;
  req.set_op_id("watch");
  auto reader = stub->Watch(&ctx, req);
  FaultReply reply;
  int replies = 0;
  while (reader->Read(&reply)) ++replies;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(replies, 3);
  const OpRecord rec = server.Op("watch");
  EXPECT_EQ(rec.metadata_keys.count("x-app"), 1u);
  EXPECT_EQ(rec.metadata_keys.count(kCallPolicyHeader), 0u);
}

// Without rpcguard's interceptor the entry is plain metadata: documented,
// and harmless.
TEST(CallPolicyStreamE2ETest, WithoutRpcguardTheEntryReachesTheServer) {
  FaultServer server;
  auto stub = FaultService::NewStub(grpc::CreateChannel(
      server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  CallPolicy call;
  call.max_attempts = 1;
  ASSERT_TRUE(SetCallPolicy(&ctx, call).ok());
  FaultRequest req;
  req.set_op_id("plain");
  FaultReply reply;
  EXPECT_TRUE(stub->Get(&ctx, req, &reply).ok());
  EXPECT_EQ(server.Op("plain").metadata_keys.count(kCallPolicyHeader), 1u);
}

TEST(CallPolicyExplainTest, ExplainShowsTheCallsPolicy) {
  absl::StatusOr<Config> config = Config::FromJson(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  CallPolicy call;
  call.max_attempts = 3;
  call.per_attempt_timeout = absl::Milliseconds(250);
  call.trace_verbosity = TraceVerbosity::kAll;
  const std::string text = config->Explain(kGet, call);
  EXPECT_TRUE(absl::StrContains(text, "=> retried, up to 3 attempts")) << text;
  EXPECT_TRUE(absl::StrContains(text, "maxAttempts=3")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "perAttemptTimeout: 250ms  [call policy]"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "traceVerbosity:    ALL  [call policy]"))
      << text;
  // Unchanged settings keep their source.
  EXPECT_TRUE(absl::StrContains(text, "[proto: idempotency_level]")) << text;
  EXPECT_TRUE(absl::StrContains(config->Explain(kGet), "up to 5 attempts"));

  CallPolicy once;
  once.max_attempts = 1;
  EXPECT_TRUE(absl::StrContains(config->Explain(kGet, once), "=> tried once"));
  CallPolicy bad;
  bad.hedging = true;
  EXPECT_TRUE(absl::StrContains(
      config->Explain(kGet, bad),
      "call policy error: CallPolicy.hedging: the method has no hedgingPolicy "
      "to turn on (the call fails with INVALID_ARGUMENT)"));
  // The safety rule, as Explain says it: Create stays "tried once".
  CallPolicy five;
  five.max_attempts = 5;
  EXPECT_TRUE(absl::StrContains(
      config->Explain("/rpcguard.testing.v1.FaultService/Create", five),
      "=> tried once"));
}

}  // namespace
}  // namespace rpcguard
