// Copyright rpcguard authors.
//
// Errors the client makes itself are not the server's: a request over the
// channel's max send size, a reply over its max receive size, reply
// metadata over its max metadata size, a call-credentials plugin that fails.
// Each ends after one attempt with gRPC's own status, traces reason
// local_error, and leaves the destination's breaker and budget untouched. Real
// calls to a real fault-injecting server, for the sync, CQ-async and callback
// stubs, each compared with the same call on a plain channel.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Get may be retried on RESOURCE_EXHAUSTED and UNAVAILABLE, the codes gRPC
// gives these errors: only their being the client's own stops a retry.
// Create is undeclared: sent once as the application's own call.
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s",
                   "maxBackoff": "0.05s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["RESOURCE_EXHAUSTED",
                                            "UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";

// The plain call's idempotency key, as long as rpcguard's own (a UUID): the
// server echoes the key in its reply, whose size is part of a too-large
// reply's message.
constexpr char kKey[] = "4a0e5d0c-9d3c-4e57-8a57-5a1f2b8f0c11";

// A call-credentials plugin whose token source is down.
class FailingPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  grpc::Status GetMetadata(
      grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
      std::multimap<grpc::string, grpc::string>*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "token service down");
  }
};

// One client-made error: the client's channel arguments, what the call
// carries, and how often the server's handler runs it (once when the
// server answered and the client refused the answer, never otherwise).
struct LocalErrorCase {
  std::string name;
  std::function<void(grpc::ChannelArguments*)> limits;
  std::function<void(grpc::ClientContext*, FaultRequest*)> prepare;
  int server_runs;
};

std::vector<LocalErrorCase> Cases() {
  return {
      {"RequestOverMaxSendSize",
       [](grpc::ChannelArguments* args) { args->SetMaxSendMessageSize(1024); },
       [](grpc::ClientContext*, FaultRequest* req) {
         req->set_payload(std::string(4096, 'p'));
       },
       0},
      {"ReplyOverMaxReceiveSize",
       [](grpc::ChannelArguments* args) {
         args->SetMaxReceiveMessageSize(1024);
       },
       [](grpc::ClientContext*, FaultRequest* req) {
         req->set_reply_payload_bytes(4096);
       },
       1},
      {"ReplyMetadataOverTheClientsLimit",
       [](grpc::ChannelArguments* args) {
         args->SetInt(GRPC_ARG_MAX_METADATA_SIZE, 1024);
       },
       [](grpc::ClientContext*, FaultRequest* req) {
         req->set_reply_metadata_bytes(4096);
       },
       1},
      {"CallCredentialsPluginFails", [](grpc::ChannelArguments*) {},
       [](grpc::ClientContext* ctx, FaultRequest*) {
         ctx->set_credentials(grpc::experimental::MetadataCredentialsFromPlugin(
             std::make_unique<FailingPlugin>(), GRPC_SECURITY_NONE));
       },
       0},
  };
}

class LocalErrorsE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  // Every channel on a connection of its own: on a connection shared by two
  // channels, the call after one whose reply metadata was refused may be
  // refused too before it reaches the server (gRPC 1.51).
  static void OwnConnection(grpc::ChannelArguments* args) {
    args->SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }

  // A channel through rpcguard with the test's registry; its trace events
  // go to events_.
  std::unique_ptr<FaultService::Stub> Guarded(grpc::ChannelArguments args) {
    OwnConnection(&args);
    auto channel = CreateGuardedChannel(
        server_.address(), kConfig,
        [this](Options& options) {
          options.breaker_registry = registry_;
          options.trace_verbosity = TraceVerbosity::kAll;
          options.trace_sink =
              std::make_shared<CallbackSink>([this](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                events_.push_back(e);
              });
        },
        args);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return FaultService::NewStub(*channel);
  }

  std::unique_ptr<FaultService::Stub> Plain(grpc::ChannelArguments args) {
    OwnConnection(&args);
    return FaultService::NewStub(grpc::CreateCustomChannel(
        server_.address(), grpc::InsecureChannelCredentials(), args));
  }

  // Runs `c` through `stub` as operation `op_id`; `ctx` receives the call's
  // metadata.
  grpc::Status Call(FaultService::Stub* stub, Method m, const LocalErrorCase& c,
                    const std::string& op_id, grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    FaultRequest req;
    req.set_op_id(op_id);
    c.prepare(ctx, &req);
    FaultReply reply;
    return StartCall(GetParam(), stub, m, ctx, req, &reply)->Wait();
  }

  std::vector<TraceEvent> TakeEvents() {
    absl::MutexLock lock(&mu_);
    std::vector<TraceEvent> out;
    out.swap(events_);
    return out;
  }

  BreakerSnapshot Breaker() {
    return registry_->Get(server_.address())->Snapshot();
  }

  // Same-length operation ids on both channels, so that the replies (which
  // echo them) are the same size.
  std::string OpId(const std::string& channel, const LocalErrorCase& c) {
    return absl::StrCat(channel, "-", c.name, "-", KindName(GetParam()));
  }

  FaultServer server_;
  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
};

std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  auto it = ctx.GetServerTrailingMetadata().find(key);
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// A method rpcguard would retry: one attempt, gRPC's status as a plain
// channel gives it, reason local_error, nothing told to the destination.
TEST_P(LocalErrorsE2ETest, RetriableMethodEndsAfterOneAttempt) {
  for (const LocalErrorCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    grpc::ChannelArguments args;
    c.limits(&args);

    grpc::ClientContext plain_ctx;
    // As rpcguard sends it, so that the server's reply is the same size:
    // rpcguard's own key is a UUID, as long as this one.
    plain_ctx.AddMetadata(kIdempotencyKeyHeader, kKey);
    plain_ctx.AddMetadata(kAttemptHeader, "1");
    const grpc::Status want =
        Call(Plain(args).get(), Method::kGet, c, OpId("plain", c), &plain_ctx);
    ASSERT_FALSE(want.ok());
    EXPECT_EQ(server_.Op(OpId("plain", c)).attempts, c.server_runs);

    registry_ = *BreakerRegistry::Create({});
    TakeEvents();
    grpc::ClientContext ctx;
    const grpc::Status s =
        Call(Guarded(args).get(), Method::kGet, c, OpId("guard", c), &ctx);
    EXPECT_EQ(s.error_code(), want.error_code());
    EXPECT_EQ(s.error_message(), want.error_message());
    EXPECT_EQ(server_.Op(OpId("guard", c)).attempts, c.server_runs);
    EXPECT_EQ(Trailer(ctx, kAttemptsTrailer), "1");

    const std::vector<TraceEvent> events = TakeEvents();
    EXPECT_EQ(events.size(), 1u);
    if (!events.empty()) {
      const TraceEvent& e = events.back();
      EXPECT_EQ(e.kind, TraceEvent::Kind::kAttempt);
      EXPECT_EQ(e.attempt, 1);
      EXPECT_EQ(e.decision, TraceDecision::kGiveUp);
      EXPECT_EQ(std::string(GiveUpReasonName(e.reason)), "local_error");
      EXPECT_TRUE(absl::StrContains(FormatLogfmt(e), " reason=local_error "))
          << FormatLogfmt(e);
    }

    const BreakerSnapshot b = Breaker();
    EXPECT_EQ(b.window_attempts, 0);
    EXPECT_EQ(b.window_failures, 0);
    EXPECT_EQ(registry_->GetBudget(server_.address())->Snapshot().retries, 0);
  }
}

// A call sent once as the application's own call (an undeclared method)
// reports the same: local_error, not not_idempotent, and no breaker record.
TEST_P(LocalErrorsE2ETest, SentOnceCallReportsTheSame) {
  for (const LocalErrorCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    grpc::ChannelArguments args;
    c.limits(&args);

    grpc::ClientContext plain_ctx;
    plain_ctx.AddMetadata(kIdempotencyKeyHeader, kKey);
    plain_ctx.AddMetadata(kAttemptHeader, "1");
    const grpc::Status want = Call(Plain(args).get(), Method::kCreate, c,
                                   OpId("plain-once", c), &plain_ctx);
    ASSERT_FALSE(want.ok());

    registry_ = *BreakerRegistry::Create({});
    TakeEvents();
    grpc::ClientContext ctx;
    const grpc::Status s = Call(Guarded(args).get(), Method::kCreate, c,
                                OpId("guard-once", c), &ctx);
    EXPECT_EQ(s.error_code(), want.error_code());
    EXPECT_EQ(s.error_message(), want.error_message());
    EXPECT_EQ(server_.Op(OpId("guard-once", c)).attempts, c.server_runs);

    const std::vector<TraceEvent> events = TakeEvents();
    EXPECT_EQ(events.size(), 1u);
    if (!events.empty()) {
      EXPECT_EQ(std::string(GiveUpReasonName(events.back().reason)),
                "local_error");
    }
    EXPECT_EQ(Breaker().window_attempts, 0);
  }
}

// One client's bug does not open the breaker its destination shares: a
// valid call on another channel to the same target still goes through.
TEST_P(LocalErrorsE2ETest, ClientBugOnOneChannelLeavesAnotherChannelAlone) {
  BreakerRegistry::Options tight;
  tight.breaker.min_attempts = 2;
  tight.breaker.failure_ratio = 0.5;
  registry_ = *BreakerRegistry::Create(tight);
  for (const LocalErrorCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    grpc::ChannelArguments args;
    c.limits(&args);
    auto buggy = Guarded(args);
    for (int i = 0; i < 3; ++i) {
      grpc::ClientContext ctx;
      EXPECT_FALSE(Call(buggy.get(), Method::kGet, c,
                        absl::StrCat(OpId("buggy", c), "-", i), &ctx)
                       .ok());
    }
  }
  EXPECT_EQ(Breaker().state, BreakerState::kClosed);
  EXPECT_EQ(Breaker().window_failures, 0);

  auto valid = Guarded(grpc::ChannelArguments());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  FaultRequest req;
  req.set_op_id(absl::StrCat("valid-", KindName(GetParam())));
  FaultReply reply;
  const grpc::Status s =
      StartCall(GetParam(), valid.get(), Method::kGet, &ctx, req, &reply)
          ->Wait();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

INSTANTIATE_TEST_SUITE_P(AllStubs, LocalErrorsE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// gRPC 1.51's own words for a call that found no connection, which
// IsNotSent recognises: a port where nothing listens, with pick_first and
// round_robin. Plain channels: these are gRPC's words, not rpcguard's.
TEST(NotSentWordsTest, GrpcSaysSoForAPortThatRefuses) {
  int port;
  {
    FaultServer gone;  // a port that was just free, now refusing
    ASSERT_TRUE(gone.ok());
    port = gone.port();
  }
  for (const char* policy : {"pick_first", "round_robin"}) {
    grpc::ChannelArguments args;
    args.SetLoadBalancingPolicyName(policy);
    auto channel =
        grpc::CreateCustomChannel(absl::StrCat("ipv4:127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), args);
    auto stub = FaultService::NewStub(channel);
    FaultRequest req;
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    const grpc::Status s = stub->Get(&ctx, req, &reply);
    EXPECT_TRUE(IsNotSent(s.error_code(), s.error_message()))
        << policy << ": " << s.error_code() << " " << s.error_message();
    EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
  }
}

}  // namespace
}  // namespace rpcguard
