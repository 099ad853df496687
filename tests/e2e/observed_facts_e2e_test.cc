// Copyright rpcguard authors.
//
// Classify by what was observed (issue 30, part 6): whether an attempt
// reached a server is read from whether a transport ever took it (its peer),
// before any of gRPC's words. A server that relays its own client's failure
// in gRPC's words (a credentials plugin that failed, no connection to its
// backends) answered: its status is the destination's, retried and counted
// as evidence. An attempt no transport took reached no server. Real calls to
// a real server, for the sync, CQ-async, callback and reactor stubs.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/guarded_channel.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Method;
using ::rpcguard::testing::StartCall;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Whether this build sees a call's peer and channel target (gRPC 1.51's
// private members). Without (--config=no_grpc_fast_paths, another gRPC),
// the words decide, guarded by the channel's state, and the caller's
// fail-fast is not seen: attempts wait for a connection.
const bool kFastPaths = internal::ContextAccessKnowsThisGrpc();

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";

// A server whose Get answers every call with one status, and counts them.
class RelayingServer final : public FaultService::CallbackService {
 public:
  explicit RelayingServer(grpc::Status answer) : answer_(std::move(answer)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~RelayingServer() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const FaultRequest*, FaultReply*) override {
    calls_.fetch_add(1);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(answer_);
    return reactor;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int calls() const { return calls_.load(); }

 private:
  const grpc::Status answer_;
  int port_ = 0;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

class ObservedFactsE2ETest : public ::testing::TestWithParam<StubKind> {
 protected:
  // Calls Get once through rpcguard to `target`, failing fast (no wait for
  // a connection), with this test's registry and trace.
  grpc::Status CallGet(const std::string& target,
                       absl::Duration timeout = absl::Seconds(5)) {
    auto channel = CreateGuardedChannel(target, kConfig, [this](Options& o) {
      o.breaker_registry = registry_;
      o.trace_verbosity = TraceVerbosity::kAll;
      o.trace_sink =
          std::make_shared<CallbackSink>([this](const TraceEvent& e) {
            absl::MutexLock lock(&mu_);
            if (e.kind == TraceEvent::Kind::kAttempt) attempts_.push_back(e);
          });
    });
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return grpc::Status::CANCELLED;
    auto stub = FaultService::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(false);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    FaultRequest req;
    req.set_op_id(absl::StrCat("facts-", KindName(GetParam())));
    FaultReply reply;
    return StartCall(GetParam(), stub.get(), Method::kGet, &ctx, req, &reply)
        ->Wait();
  }

  std::vector<TraceEvent> Attempts() {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
  absl::Mutex mu_;
  std::vector<TraceEvent> attempts_ ABSL_GUARDED_BY(mu_);
};

// A server whose own call to its backend failed in its credentials plugin
// relays gRPC's words for that. The words were the client's own only if no
// transport took the attempt; this one reached the server, so it is an
// UNAVAILABLE answer like any other: retried, and evidence.
TEST_P(ObservedFactsE2ETest, ARelayedCredentialsPluginFailureIsTheServers) {
  RelayingServer server(grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      "Getting metadata from plugin failed with error: token service down"));
  const grpc::Status s = CallGet(server.address());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::vector<TraceEvent> attempts = Attempts();
  if (!kFastPaths) {
    // The words alone: taken for the client's own (docs/limits.md).
    EXPECT_EQ(server.calls(), 1);
    ASSERT_EQ(attempts.size(), 1u);
    EXPECT_EQ(std::string(GiveUpReasonName(attempts.back().reason)),
              "local_error");
    return;
  }
  EXPECT_EQ(server.calls(), 3);
  ASSERT_EQ(attempts.size(), 3u);
  EXPECT_EQ(std::string(GiveUpReasonName(attempts.back().reason)),
            "max_attempts");
  const BreakerSnapshot b = registry_->Get(server.address())->Snapshot();
  // The call's last failure is the evidence (retried ones are not counted).
  EXPECT_EQ(b.window_attempts, 1);
  EXPECT_EQ(b.window_failures, 1);
}

// gRPC's words for "no connection", relayed by a server about its own
// backends: the attempt reached this server, so it counts against
// maxAttempts and against the destination.
TEST_P(ObservedFactsE2ETest, ARelayedNoConnectionIsTheServers) {
  RelayingServer server(
      grpc::Status(grpc::StatusCode::UNAVAILABLE,
                   "failed to connect to all addresses; last error: "
                   "UNKNOWN: ipv4:10.0.0.9:443: Connection refused"));
  const grpc::Status s = CallGet(server.address());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.calls(), 3);
  ASSERT_EQ(Attempts().size(), 3u);
  const BreakerSnapshot b = registry_->Get(server.address())->Snapshot();
  // The call's last failure is the evidence (retried ones are not counted).
  EXPECT_EQ(b.window_attempts, 1);
  EXPECT_EQ(b.window_failures, 1);
}

// An attempt to a port where nothing listens: no transport took it, so it
// reached no server and says nothing about the destination.
TEST_P(ObservedFactsE2ETest, AnAttemptNoTransportTookIsNotEvidence) {
  const std::string target = "127.0.0.1:1";
  const grpc::Status s = CallGet(target, absl::Seconds(1));
  // Without the fast paths the attempts wait for a connection until the
  // deadline.
  EXPECT_EQ(s.error_code(), kFastPaths ? grpc::StatusCode::UNAVAILABLE
                                       : grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(Attempts().empty());
  const BreakerSnapshot b = registry_->Get(target)->Snapshot();
  EXPECT_EQ(b.window_attempts, 0);
  EXPECT_EQ(b.window_failures, 0);
}

INSTANTIATE_TEST_SUITE_P(AllStubs, ObservedFactsE2ETest,
                         ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                           StubKind::kCallback,
                                           StubKind::kReactor),
                         [](const ::testing::TestParamInfo<StubKind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace rpcguard
