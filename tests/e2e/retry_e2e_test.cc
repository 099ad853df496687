// Copyright rpcguard authors.
//
// End-to-end tests: real gRPC calls through rpcguard to a real fault-injecting
// server on 127.0.0.1, for each of the sync, CQ-async and callback stubs. The
// server records what every attempt carried; the tests assert on that.

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc_1_51/probes.h"
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

// Retries for Get/Put/Charge with short backoff; Create is left undeclared.
constexpr char kDefaultConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Put"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "IDEMPOTENT"}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Charge"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "KEYED"}}
]})json";

std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(key);
  if (it == md.end()) return "<none>";
  return std::string(it->second.data(), it->second.size());
}

// How late a call may end after its deadline, and how long it may take to
// end after a cancel, on a quiet machine; on a loaded one, as late as a
// plain channel's call in the same moment (tests/testing/deadline_control.h).
constexpr absl::Duration kQuietLateness = absl::Milliseconds(20);
constexpr absl::Duration kQuietCancel = absl::Milliseconds(50);

// Threads that answer for refreshers; joined before the test's server and
// channel go, as an application would stop its token service first.
class RefresherThreads {
 public:
  ~RefresherThreads() {
    absl::MutexLock lock(&mu_);
    for (std::thread& t : threads_) t.join();
  }
  void Run(std::function<void()> f) {
    absl::MutexLock lock(&mu_);
    threads_.emplace_back(std::move(f));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::thread> threads_;
};

class RetryE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  void SetUp() override {
    UseConfig(kDefaultConfig);
    control_ = testing::PlainStub(server_.address());
  }

  void UseConfig(const std::string& json,
                 CredentialRefresher refresher = nullptr) {
    auto channel =
        CreateGuardedChannel(server_.address(), json, [&](Options& options) {
          options.credential_refresher = std::move(refresher);
          // A registry of this test's own: breakers and budgets start fresh.
          options.breaker_registry = *BreakerRegistry::Create({});
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
    stub_ = FaultService::NewStub(channel_);
  }

  // The control of a timing: a plain channel's Get of `req` through the
  // same stub API, started now.
  std::unique_ptr<ControlCall> StartControl(
      FaultRequest req, absl::Time deadline = absl::InfiniteFuture()) {
    return std::make_unique<ControlCall>(GetParam(), control_.get(),
                                         std::move(req), deadline);
  }

  std::unique_ptr<PendingCall> Start(Method m, grpc::ClientContext* ctx,
                                     const FaultRequest& req,
                                     FaultReply* reply) {
    return StartCall(GetParam(), stub_.get(), m, ctx, req, reply);
  }

  grpc::Status Call(Method m, grpc::ClientContext* ctx, const FaultRequest& req,
                    FaultReply* reply) {
    return Start(m, ctx, req, reply)->Wait();
  }

  // A unique operation id per test and stub kind.
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
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
  // A plain channel's (no rpcguard) to the same server.
  std::unique_ptr<FaultService::Stub> control_;
  int op_counter_ = 0;
  // Declared last: destroyed (joined) first.
  RefresherThreads refresher_threads_;
};

TEST_P(RetryE2ETest, RetriesReachSuccess) {
  FaultRequest req;
  req.set_op_id(Op("get"));
  req.set_fail_first(2);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.op_id(), req.op_id());
  EXPECT_EQ(reply.attempts_seen(), 3);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 3);
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "3");
}

// A retry resends the request byte for byte. Through the callback API
// attempt 1 is the application's own call, and rpcguard keeps only
// references to the request's slices for a retry: one slice for a small
// request, several for one over gRPC's 1 MiB serialization block.
TEST_P(RetryE2ETest, ARetryResendsTheWholeRequest) {
  for (size_t bytes : {size_t{100}, size_t{2500} * 1024}) {
    FaultRequest req;
    req.set_op_id(Op("resend"));
    req.set_fail_first(1);
    std::string payload(bytes, 'p');
    for (size_t i = 0; i < payload.size(); i += 4093) {
      payload[i] = static_cast<char>('a' + i % 26);
    }
    req.set_payload(payload);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message() << ", bytes=" << bytes;
    EXPECT_EQ(reply.attempts_seen(), 2) << "bytes=" << bytes;
    // The server echoes what the second attempt carried.
    EXPECT_TRUE(reply.payload() == payload) << "bytes=" << bytes;
  }
}

// The application sees the final attempt's metadata, never a mix: through
// the callback API attempt 1 is the application's own call, whose metadata
// rpcguard replaces when a later attempt decides the call.
TEST_P(RetryE2ETest, MetadataIsTheFinalAttemptsOnly) {
  for (int fail_first : {0, 2}) {
    FaultRequest req;
    req.set_op_id(Op("md"));
    req.set_fail_first(fail_first);
    req.set_echo_attempt_metadata(true);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::string final_attempt = absl::StrCat(fail_first + 1);
    EXPECT_EQ(reply.attempts_seen(), fail_first + 1);
    const auto& initial = ctx.GetServerInitialMetadata();
    ASSERT_EQ(initial.count("fault-attempt"), 1u)
        << "fail_first=" << fail_first;
    EXPECT_EQ(initial.find("fault-attempt")->second, final_attempt);
    const auto& trailing = ctx.GetServerTrailingMetadata();
    ASSERT_EQ(trailing.count("fault-attempt-trailer"), 1u);
    EXPECT_EQ(trailing.find("fault-attempt-trailer")->second, final_attempt);
    EXPECT_EQ(trailing.count("rpcguard-attempts"), 1u);
    EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), final_attempt);
  }
}

// Which calls rpcguard sends unhijacked. A hijacked application call never
// starts in gRPC, so it never learns its peer address; one that carried
// attempt 1 itself does.
// Through the callback API a retriable call rides its own call until a
// retry is needed; the sync API cannot (it would report UNIMPLEMENTED for a
// message a later attempt received) and the CQ API is not told apart from it.
// Without gRPC 1.51's probes (another gRPC, or --config=no_grpc_fast_paths)
// no call rides: every one is hijacked.
TEST_P(RetryE2ETest, OnlyCallbackCallsCarryTheirOwnFirstAttempt) {
  for (int fail_first : {0, 1}) {
    FaultRequest req;
    req.set_op_id(Op("peer"));
    req.set_fail_first(fail_first);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
    EXPECT_EQ(reply.attempts_seen(), fail_first + 1);
    // A started call names the address it reached ("ipv4:127.0.0.1:port");
    // one never started, only the channel's target.
    const bool rode = absl::StartsWith(ctx.peer(), "ipv4:");
    EXPECT_EQ(rode, GetParam() == StubKind::kCallback &&
                        internal::ProbesKnowThisGrpc())
        << "peer: " << ctx.peer() << ", fail_first=" << fail_first;
  }
}

TEST_P(RetryE2ETest, SuccessfulCallsNeverRetry) {
  FaultRequest req;
  req.set_op_id(Op("ok"));
  FaultReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "1");
}

TEST_P(RetryE2ETest, FatalAndAuthCodesAreNotRetried) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::INTERNAL, grpc::StatusCode::CANCELLED,
        grpc::StatusCode::UNAUTHENTICATED,
        grpc::StatusCode::PERMISSION_DENIED}) {
    FaultRequest req;
    req.set_op_id(Op("fatal"));
    req.set_fail_first(3);
    req.set_fail_code(code);
    FaultReply reply;
    grpc::ClientContext ctx;
    grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    EXPECT_EQ(s.error_code(), code);
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1) << StatusCodeName(code);
  }
}

TEST_P(RetryE2ETest, UndeclaredMethodIsTriedOnce) {
  FaultRequest req;
  req.set_op_id(Op("create"));
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  grpc::Status s = Call(Method::kCreate, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  EXPECT_EQ(server_.Op(req.op_id()).attempt_headers,
            std::vector<std::string>{"1"});
  EXPECT_EQ(server_.Op(req.op_id()).keys.size(), 1u);
  EXPECT_FALSE(server_.Op(req.op_id()).keys[0].empty());
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "1");
}

TEST_P(RetryE2ETest, KeysAreIdenticalAndAttemptsNumbered) {
  FaultRequest req;
  req.set_op_id(Op("put"));
  req.set_fail_first(2);
  FaultReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Call(Method::kPut, &ctx, req, &reply).ok());
  testing::OpRecord op = server_.Op(req.op_id());
  ASSERT_EQ(op.attempts, 3);
  EXPECT_EQ(op.attempt_headers, (std::vector<std::string>{"1", "2", "3"}));
  const std::regex uuid4(
      "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  EXPECT_TRUE(std::regex_match(op.keys[0], uuid4)) << op.keys[0];
  EXPECT_EQ(op.keys[1], op.keys[0]);
  EXPECT_EQ(op.keys[2], op.keys[0]);
}

TEST_P(RetryE2ETest, CallersKeyIsKeptAndMakesUndeclaredMethodRetriable) {
  UseConfig(R"json({"methodConfig": [{"name": [{}],
      "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                      "maxBackoff": "0.01s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]}}]})json");
  FaultRequest req;
  req.set_op_id(Op("keyed-create"));
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.AddMetadata("idempotency-key", "order-42");
  ASSERT_TRUE(Call(Method::kCreate, &ctx, req, &reply).ok());
  testing::OpRecord op = server_.Op(req.op_id());
  EXPECT_EQ(op.attempts, 2);
  EXPECT_EQ(op.keys, (std::vector<std::string>{"order-42", "order-42"}));
}

TEST_P(RetryE2ETest, KeyedSideEffectIsAppliedOnceWhenReplyWasLost) {
  FaultRequest req;
  req.set_op_id(Op("charge"));
  req.set_fail_first(1);
  req.set_apply_then_fail(true);
  req.set_amount(100);
  FaultReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Call(Method::kCharge, &ctx, req, &reply).ok());
  testing::OpRecord op = server_.Op(req.op_id());
  EXPECT_EQ(op.attempts, 2);
  EXPECT_EQ(op.keys[0], op.keys[1]);
  EXPECT_EQ(op.side_effects, 1);
  EXPECT_EQ(reply.applied(), 1);
}

TEST_P(RetryE2ETest, NonIdempotentCallIsNeverSentTwice) {
  FaultRequest req;
  req.set_op_id(Op("create-lost"));
  req.set_fail_first(1);
  req.set_apply_then_fail(true);
  FaultReply reply;
  grpc::ClientContext ctx;
  grpc::Status s = Call(Method::kCreate, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("gave up: not_idempotent"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  EXPECT_EQ(server_.Op(req.op_id()).side_effects, 1);
}

TEST_P(RetryE2ETest, EndlessFailureReturnsByTheDeadline) {
  UseConfig(R"json({"methodConfig": [{"name": [{}],
      "retryPolicy": {"maxAttempts": 10, "initialBackoff": "0.02s",
                      "maxBackoff": "0.08s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]},
      "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}}]})json");
  // With A6 jitter the 9 backoffs add up to at least 496 ms: the deadline,
  // not maxAttempts, must end the call, and on time: as late as a plain
  // channel's call with the same deadline that the server holds past it.
  for (int delay_ms : {0, 30}) {
    ExpectWithinControl(
        absl::StrCat("delay_ms ", delay_ms, ", lateness at the deadline"),
        kQuietLateness, [&] {
          FaultRequest req;
          req.set_op_id(Op("endless"));
          req.set_fail_first(1000000);
          req.set_delay_ms(delay_ms);
          FaultReply reply;
          grpc::ClientContext ctx;
          const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
          ctx.set_deadline(absl::ToChronoTime(deadline));
          auto control =
              StartControl(ControlCall::HeldPast(deadline), deadline);
          grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
          const absl::Duration late = absl::Now() - deadline;
          EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
              << s.error_code();
          EXPECT_NE(s.error_message().find("gave up: deadline"),
                    std::string::npos)
              << s.error_message();
          EXPECT_GE(server_.Op(req.op_id()).attempts, 2);
          EXPECT_EQ(control->Wait().error_code(),
                    grpc::StatusCode::DEADLINE_EXCEEDED);
          return Timing{late, control->LateBy()};
        });
  }
}

TEST_P(RetryE2ETest, PerAttemptTimeoutIsRetried) {
  UseConfig(R"json({"methodConfig": [{"name": [{}],
      "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                      "maxBackoff": "0.01s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]},
      "rpcguard": {"idempotency": "IDEMPOTENT",
                   "perAttemptTimeout": "0.1s"}}]})json");
  // Attempt 1 is cut at 100 ms and attempt 2 answers at once: within
  // 900 ms (attempt 1 alone would take 1 s) on a quiet machine, or as soon
  // as the control, a plain channel's call with a 100 ms deadline that the
  // server holds and then one it answers at once.
  ExpectWithinControl("time to end", absl::Milliseconds(900), [&] {
    FaultRequest req;
    req.set_op_id(Op("slow-first"));
    req.set_fail_first(1);
    req.set_fail_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    req.set_fail_delay_ms(1000);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ControlAttempts control(
        GetParam(), control_.get(),
        {{ControlCall::Held(absl::Seconds(1)), absl::Milliseconds(100)}, {}});
    const absl::Time start = absl::Now();
    grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    const absl::Duration took = absl::Now() - start;
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.attempts_seen(), 2);
    const std::vector<grpc::Status> control_statuses = control.Wait();
    EXPECT_EQ(control_statuses[0].error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(control_statuses[1].ok());
    return Timing{took, control.Took()};
  });
}

TEST_P(RetryE2ETest, CallersDeadlineIsNeverRetried) {
  FaultRequest req;
  req.set_op_id(Op("slow"));
  req.set_delay_ms(500);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(100));
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

TEST_P(RetryE2ETest, PushbackStopEndsRetries) {
  FaultRequest req;
  req.set_op_id(Op("pushback"));
  req.set_fail_first(1);
  req.set_pushback_ms("-1");
  FaultReply reply;
  grpc::ClientContext ctx;
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("pushback_stop"), std::string::npos);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

TEST_P(RetryE2ETest, PushbackDelayIsUsedExactly) {
  FaultRequest req;
  req.set_op_id(Op("pushback-delay"));
  req.set_fail_first(1);
  req.set_pushback_ms("150");
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
  const testing::OpRecord op = server_.Op(req.op_id());
  ASSERT_EQ(op.attempts, 2);
  // Backoff alone would be at most 5 ms.
  EXPECT_GE(op.arrivals[1] - op.arrivals[0], absl::Milliseconds(145));
}

TEST_P(RetryE2ETest, RetryInfoDelayIsAFloor) {
  FaultRequest req;
  req.set_op_id(Op("retry-info"));
  req.set_fail_first(1);
  req.set_retry_info_ms(150);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
  const testing::OpRecord op = server_.Op(req.op_id());
  ASSERT_EQ(op.attempts, 2);
  EXPECT_GE(op.arrivals[1] - op.arrivals[0], absl::Milliseconds(145));
}

TEST_P(RetryE2ETest, ServerDelayBeyondTheDeadlineEndsTheCallAtOnce) {
  for (bool use_retry_info : {false, true}) {
    // At once, not at the deadline: within 250 ms on a quiet machine, or as
    // soon as a plain channel's call that fails the same way at once.
    ExpectWithinControl(
        absl::StrCat(use_retry_info ? "RetryInfo" : "pushback",
                     ", time to end"),
        absl::Milliseconds(250), [&] {
          FaultRequest req;
          req.set_op_id(Op("server-delay-too-long"));
          req.set_fail_first(1);
          if (use_retry_info) {
            req.set_retry_info_ms(2000);
          } else {
            req.set_pushback_ms("2000");
          }
          FaultReply reply;
          grpc::ClientContext ctx;
          const absl::Time deadline = absl::Now() + absl::Milliseconds(500);
          ctx.set_deadline(absl::ToChronoTime(deadline));
          auto control = StartControl(req, deadline);
          const absl::Time start = absl::Now();
          grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
          const absl::Duration took = absl::Now() - start;
          EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
          EXPECT_NE(s.error_message().find("gave up: deadline"),
                    std::string::npos)
              << s.error_message();
          EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
          EXPECT_EQ(control->Wait().error_code(),
                    grpc::StatusCode::UNAVAILABLE);
          return Timing{took, control->Took()};
        });
  }
}

TEST_P(RetryE2ETest, MalformedStatusDetailsAreIgnored) {
  FaultRequest req;
  req.set_op_id(Op("bad-details"));
  req.set_fail_first(1);
  req.set_status_details(std::string("\xff\x01garbage\x00\x1a\x05", 13));
  FaultReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Call(Method::kGet, &ctx, req, &reply).ok());
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
}

// A refresher that hands out a new bearer token after `delay`, from another
// thread (never blocking gRPC's), counting how often it was asked.
CredentialRefresher TokenRefresher(RefresherThreads* threads, std::string token,
                                   absl::Duration delay,
                                   std::atomic<int>* asked,
                                   absl::Status error = absl::OkStatus()) {
  return [=](absl::string_view,
             std::function<void(absl::StatusOr<RefreshedCredentials>)> done) {
    ++*asked;
    threads->Run([=] {
      absl::SleepFor(delay);
      if (!error.ok()) {
        done(error);
        return;
      }
      RefreshedCredentials fresh;
      fresh.metadata.emplace_back("authorization", "Bearer " + token);
      done(fresh);
    });
  };
}

TEST_P(RetryE2ETest, AuthRefreshThenSuccess) {
  std::atomic<int> asked{0};
  UseConfig(kDefaultConfig, TokenRefresher(&refresher_threads_, "new",
                                           absl::Milliseconds(5), &asked));
  FaultRequest req;
  req.set_op_id(Op("auth-refresh"));
  req.set_require_token("new");
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer old");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
  EXPECT_EQ(Trailer(ctx, "rpcguard-attempts"), "2");
}

TEST_P(RetryE2ETest, AuthRefreshHappensOnceAndOnlyForUnauthenticated) {
  std::atomic<int> asked{0};
  UseConfig(kDefaultConfig, TokenRefresher(&refresher_threads_, "still-wrong",
                                           absl::ZeroDuration(), &asked));
  {
    FaultRequest req;
    req.set_op_id(Op("auth-twice"));
    req.set_require_token("right");
    FaultReply reply;
    grpc::ClientContext ctx;
    EXPECT_EQ(Call(Method::kGet, &ctx, req, &reply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(asked, 1);
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
  }
  {
    FaultRequest req;
    req.set_op_id(Op("denied"));
    req.set_fail_first(1);
    req.set_fail_code(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
    FaultReply reply;
    grpc::ClientContext ctx;
    EXPECT_EQ(Call(Method::kGet, &ctx, req, &reply).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(asked, 1);
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  }
  {
    // Never for a call that is not safe to repeat.
    FaultRequest req;
    req.set_op_id(Op("auth-create"));
    req.set_require_token("right");
    FaultReply reply;
    grpc::ClientContext ctx;
    EXPECT_EQ(Call(Method::kCreate, &ctx, req, &reply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(asked, 1);
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  }
}

TEST_P(RetryE2ETest, AuthRefreshFailureIsFinal) {
  std::atomic<int> asked{0};
  UseConfig(
      kDefaultConfig,
      TokenRefresher(&refresher_threads_, "", absl::Milliseconds(1), &asked,
                     absl::UnavailableError("token service down")));
  FaultRequest req;
  req.set_op_id(Op("auth-refresh-fails"));
  req.set_require_token("new");
  FaultReply reply;
  grpc::ClientContext ctx;
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(
      s.error_message().find("credential refresh failed: token service down"),
      std::string::npos)
      << s.error_message();
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

TEST_P(RetryE2ETest, SlowAuthRefreshEndsAtTheDeadline) {
  std::atomic<int> asked{0};
  UseConfig(kDefaultConfig, TokenRefresher(&refresher_threads_, "new",
                                           absl::Milliseconds(600), &asked));
  ExpectWithinControl("lateness at the deadline", kQuietLateness, [&] {
    FaultRequest req;
    req.set_op_id(Op("auth-slow"));
    req.set_require_token("new");
    FaultReply reply;
    grpc::ClientContext ctx;
    const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    auto control = StartControl(ControlCall::HeldPast(deadline), deadline);
    grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
    const absl::Duration late = absl::Now() - deadline;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(s.error_message().find("gave up: deadline"), std::string::npos)
        << s.error_message();
    EXPECT_EQ(control->Wait().error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
    absl::SleepFor(absl::Milliseconds(600));  // the late answer changes nothing
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
    return Timing{late, control->LateBy()};
  });
}

TEST_P(RetryE2ETest, CancelDuringBackoffEndsPromptly) {
  UseConfig(R"json({"methodConfig": [{"name": [{}],
      "retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s",
                      "maxBackoff": "1s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]},
      "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}}]})json");
  // As prompt as a plain channel's call, held by the server, cancelled in
  // the same moment.
  ExpectWithinControl("time to end after the cancel", kQuietCancel, [&] {
    FaultRequest req;
    req.set_op_id(Op("cancel-backoff"));
    req.set_fail_first(1);
    FaultReply reply;
    grpc::ClientContext ctx;
    auto control = StartControl(ControlCall::Held(absl::Seconds(2)));
    auto call = Start(Method::kGet, &ctx, req, &reply);
    EXPECT_TRUE(WaitForAttempts(req.op_id(), 1));
    EXPECT_TRUE(WaitForAttempts(control->op_id(), 1));
    absl::SleepFor(absl::Milliseconds(100));  // now in the 0.8-1.2 s backoff
    control->Cancel();
    const absl::Time cancelled_at = absl::Now();
    ctx.TryCancel();
    grpc::Status s = call->Wait();
    const absl::Duration took = absl::Now() - cancelled_at;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_EQ(control->Wait().error_code(), grpc::StatusCode::CANCELLED);
    absl::SleepFor(absl::Milliseconds(1300));  // past where the retry would be
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
    return Timing{took, control->SinceCancel()};
  });
}

TEST_P(RetryE2ETest, CancelDuringAttemptEndsPromptly) {
  ExpectWithinControl("time to end after the cancel", kQuietCancel, [&] {
    FaultRequest req;
    req.set_op_id(Op("cancel-attempt"));
    req.set_delay_ms(2000);
    FaultReply reply;
    grpc::ClientContext ctx;
    auto control = StartControl(ControlCall::Held(absl::Seconds(2)));
    auto call = Start(Method::kGet, &ctx, req, &reply);
    EXPECT_TRUE(WaitForAttempts(req.op_id(), 1));
    EXPECT_TRUE(WaitForAttempts(control->op_id(), 1));
    control->Cancel();
    const absl::Time cancelled_at = absl::Now();
    ctx.TryCancel();
    grpc::Status s = call->Wait();
    const absl::Duration took = absl::Now() - cancelled_at;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_EQ(control->Wait().error_code(), grpc::StatusCode::CANCELLED);
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
    return Timing{took, control->SinceCancel()};
  });
}

TEST_P(RetryE2ETest, CancelBeforeStartSendsNothing) {
  FaultRequest req;
  req.set_op_id(Op("cancel-first"));
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.TryCancel();
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
}

TEST_P(RetryE2ETest, ExpiredDeadlineSendsNothing) {
  FaultRequest req;
  req.set_op_id(Op("expired"));
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() -
                   std::chrono::milliseconds(1));
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
}

TEST_P(RetryE2ETest, OversizedIdempotencyKeyIsRejected) {
  FaultRequest req;
  req.set_op_id(Op("huge-key"));
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.AddMetadata("idempotency-key", std::string(300, 'k'));
  grpc::Status s = Call(Method::kGet, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("idempotency-key"), std::string::npos);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
}

TEST_P(RetryE2ETest, ProtoDeclarationsAloneDecide) {
  // No JSON at all: Get is NO_SIDE_EFFECTS by protobuf's idempotency_level,
  // Charge is KEYED by (rpcguard.v1.method), Create is declared nowhere.
  UseConfig("{}");
  for (Method m : {Method::kGet, Method::kPut, Method::kCharge}) {
    FaultRequest req;
    req.set_op_id(Op("proto-declared"));
    req.set_fail_first(1);
    FaultReply reply;
    grpc::ClientContext ctx;
    grpc::Status s = Call(m, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
  }
  FaultRequest req;
  req.set_op_id(Op("proto-undeclared"));
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  EXPECT_EQ(Call(Method::kCreate, &ctx, req, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

TEST_P(RetryE2ETest, JsonOverridesProtoDeclaration) {
  // The JSON method entry says Charge is not safe to repeat after all.
  UseConfig(R"json({"methodConfig": [{"name": [{
      "service": "rpcguard.testing.v1.FaultService", "method": "Charge"}],
      "rpcguard": {"idempotency": "UNKNOWN"}}]})json");
  FaultRequest req;
  req.set_op_id(Op("json-wins"));
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  EXPECT_EQ(Call(Method::kCharge, &ctx, req, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

INSTANTIATE_TEST_SUITE_P(AllStubs, RetryE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

class RetryE2EOtherTest : public ::testing::Test {
 protected:
  std::shared_ptr<grpc::Channel> MakeChannel(
      const std::string& json = kDefaultConfig) {
    return *CreateGuardedChannel(server_.address(), json, [](Options& options) {
      options.breaker_registry = *BreakerRegistry::Create({});
    });
  }
  FaultServer server_;
};

// An undeclared stream is sent once, as before streams were retried.
TEST_F(RetryE2EOtherTest, UndeclaredStreamIsSentOnce) {
  auto stub = FaultService::NewStub(MakeChannel());
  grpc::ClientContext ctx;
  FaultRequest req;
  req.set_op_id("watch");
  auto reader = stub->Watch(&ctx, req);
  FaultReply reply;
  std::vector<int> seen;
  while (reader->Read(&reply)) seen.push_back(reply.attempts_seen());
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
}

TEST_F(RetryE2EOtherTest, GenericByteBufferCallersPassThrough) {
  grpc::GenericStub stub(MakeChannel());
  for (const char* method : {"/rpcguard.testing.v1.FaultService/Get",
                             "/rpcguard.testing.v1.FaultService/Create"}) {
    FaultRequest req;
    req.set_op_id(absl::StrCat("generic-", method));
    req.set_fail_first(1);
    std::string bytes = req.SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    // Get is declared retriable, so a ByteBuffer caller must opt out; an
    // undeclared method passes through by itself.
    if (absl::string_view(method).find("/Get") != absl::string_view::npos) {
      MarkPassThrough(&ctx);
    }
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    // Passed through: tried once, the failure reaches the caller unchanged.
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << method;
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1) << method;
  }
}

TEST_F(RetryE2EOtherTest, ServiceConfigRetryPolicyIsRefused) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(R"({"methodConfig":[{"name":[{}],
      "retryPolicy":{"maxAttempts":2,"initialBackoff":"0.1s",
      "maxBackoff":"1s","backoffMultiplier":2,
      "retryableStatusCodes":["UNAVAILABLE"]}}]})");
  auto channel = CreateChannel(
      server_.address(), grpc::InsecureChannelCredentials(), Options{}, args);
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  Options opt_in;
  opt_in.allow_grpc_retry_policy = true;
  EXPECT_TRUE(CreateChannel(server_.address(),
                            grpc::InsecureChannelCredentials(), opt_in, args)
                  .ok());
}

TEST_F(RetryE2EOtherTest, BadProtoDeclarationFailsCallsLoudly) {
  ASSERT_NE(::rpcguard::testing::v1::Broken::service_full_name(), nullptr);
  // Broken.OneAttempt declares max_attempts: 1. Nothing is sent: the server
  // does not even serve that service, and would say UNIMPLEMENTED.
  grpc::GenericStub stub(MakeChannel());
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/rpcguard.testing.v1.Broken/OneAttempt",
                 grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(),
            "rpcguard: bad retry declaration: "
            "rpcguard.testing.v1.Broken.OneAttempt: (rpcguard.v1.method)"
            ".retry.max_attempts: must be at least 2");
  EXPECT_EQ(server_.total_attempts(), 0);
}

// 1,000 concurrent callback calls with random faults: every one completes
// with the result its faults imply. Run under --config=asan in CI.
TEST_F(RetryE2EOtherTest, ThousandConcurrentCallbackCallsWithRandomFaults) {
  // Retry mechanics under concurrency: with most attempts failing on
  // purpose, the breaker and budget (tested on their own) would rightly cut
  // retries short, so this channel has neither.
  std::string json = kDefaultConfig;
  json.insert(json.rfind('}'), R"(, "rpcguard": {
      "circuitBreaker": {"enabled": false},
      "retryBudget": {"enabled": false}})");
  auto stub = FaultService::NewStub(MakeChannel(json));
  constexpr int kCalls = 1000;
  struct One {
    grpc::ClientContext ctx;
    FaultRequest req;
    FaultReply reply;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<One>> calls;
  absl::BitGen gen;
  std::atomic<int> remaining{kCalls};
  absl::Notification all_done;
  for (int i = 0; i < kCalls; ++i) {
    auto one = std::make_unique<One>();
    one->req.set_op_id(absl::StrCat("stress-", i));
    one->req.set_fail_first(absl::Uniform(gen, 0, 6));  // 4 attempts allowed
    one->req.set_payload(absl::StrCat("payload-", i));
    one->ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    calls.push_back(std::move(one));
  }
  for (auto& one : calls) {
    One* p = one.get();
    stub->async()->Get(&p->ctx, &p->req, &p->reply, [&, p](grpc::Status s) {
      p->status = std::move(s);
      if (remaining.fetch_sub(1) == 1) all_done.Notify();
    });
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  int ok = 0;
  for (auto& one : calls) {
    const int fail_first = one->req.fail_first();
    const int attempts = server_.Op(one->req.op_id()).attempts;
    if (fail_first < 4) {
      ASSERT_TRUE(one->status.ok()) << one->status.error_message();
      EXPECT_EQ(one->reply.op_id(), one->req.op_id());
      EXPECT_EQ(one->reply.payload(), one->req.payload());
      EXPECT_EQ(attempts, fail_first + 1);
      ++ok;
    } else {
      EXPECT_EQ(one->status.error_code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_EQ(attempts, 4);
    }
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// A call sent once (Create: declared nowhere) whose server answers a code
// that is not retried with "do not retry" (pushback -1) is heard by the
// gRFC A6 retry throttle, as a hijacked attempt's stop is: one token goes.
// The application's own call ends through the same reading of its end as
// every attempt rpcguard sends (ReadAttemptEnd).
TEST(SentOnceE2ETest, AStopPushbackIsHeardByTheRetryThrottle) {
  FaultServer server;
  ASSERT_TRUE(server.ok());
  const std::shared_ptr<BreakerRegistry> registry =
      *BreakerRegistry::Create({});
  auto channel = CreateGuardedChannel(
      server.address(),
      R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
          "methodConfig": [{"name": [{"service":
          "rpcguard.testing.v1.FaultService", "method": "Get"}],
          "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
          "maxBackoff": "0.1s", "backoffMultiplier": 2,
          "retryableStatusCodes": ["UNAVAILABLE"]}}]})",
      [&](Options& options) { options.breaker_registry = registry; });
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = rpcguard::testing::v1::FaultService::NewStub(*channel);
  FaultRequest req;
  req.set_op_id("sent-once-stop");
  req.set_fail_first(1);
  req.set_fail_code(static_cast<int>(grpc::StatusCode::INTERNAL));
  req.set_pushback_ms("-1");
  FaultReply reply;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->Create(&ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(server.Op(req.op_id()).attempts, 1);
  absl::StatusOr<std::shared_ptr<RetryThrottle>> throttle =
      registry->GetThrottle(server.address(), RetryThrottleOptions{10, 0.1});
  ASSERT_TRUE(throttle.ok()) << throttle.status();
  EXPECT_EQ((*throttle)->milli_tokens(), 9000);
}

}  // namespace
}  // namespace rpcguard
