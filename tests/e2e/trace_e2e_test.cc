// Copyright rpcguard authors.
//
// Traces, stats and the give-up hook, end to end: real calls through
// rpcguard to the fault-injecting server, with the events collected by a
// CallbackSink and parsed back by the trace reader.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"
#include "tools/trace_reader.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

class TraceE2ETest : public ::testing::Test {
 protected:
  void Open(TraceVerbosity verbosity) {
    stub_ = FaultService::NewStub(*CreateGuardedChannel(
        server_.address(), kConfig, [&](Options& options) {
          options.trace_verbosity = verbosity;
          options.trace_sink =
              std::make_shared<CallbackSink>([this](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                events_.push_back(e);
                lines_ += FormatLogfmt(e);
              });
          options.stats = stats_;
          options.give_up_hook = [this](const GiveUpInfo& info) {
            absl::MutexLock lock(&mu_);
            give_ups_.push_back(info);
          };
        }));
  }

  std::vector<TraceEvent> Events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  FaultServer server_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::unique_ptr<FaultService::Stub> stub_;
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
  std::string lines_ ABSL_GUARDED_BY(mu_);
  std::vector<GiveUpInfo> give_ups_ ABSL_GUARDED_BY(mu_);
};

TEST_F(TraceE2ETest, RetriedCallShowsEveryAttemptUnderOneCallId) {
  Open(TraceVerbosity::kRetries);
  FaultRequest req;
  req.set_op_id("traced");
  req.set_fail_first(2);
  FaultReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Get(&ctx, req, &reply).ok());

  const std::vector<TraceEvent> events = Events();
  ASSERT_EQ(events.size(), 3u);
  const std::string key = server_.Op("traced").keys[0];
  for (int i = 0; i < 3; ++i) {
    const TraceEvent& e = events[i];
    EXPECT_EQ(e.kind, TraceEvent::Kind::kAttempt);
    EXPECT_EQ(e.call_id, events[0].call_id);
    EXPECT_EQ(e.attempt, i + 1);
    EXPECT_EQ(e.method, "/rpcguard.testing.v1.FaultService/Get");
    EXPECT_EQ(e.idempotency_key, key);
  }
  EXPECT_NE(events[0].call_id, 0u);
  EXPECT_EQ(events[0].code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(events[0].status_class, StatusClass::kRetriable);
  EXPECT_EQ(events[0].decision, TraceDecision::kRetry);
  EXPECT_GT(events[0].backoff, absl::ZeroDuration());
  EXPECT_EQ(events[0].message, "injected failure on attempt 1");
  EXPECT_EQ(events[2].code, grpc::StatusCode::OK);
  EXPECT_EQ(events[2].decision, TraceDecision::kDone);

  const StatsSnapshot snap = stats_->Snapshot();
  const MethodStatsSnapshot* m =
      snap.FindMethod("/rpcguard.testing.v1.FaultService/Get");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->calls, 1u);
  EXPECT_EQ(m->attempts, 3u);
  EXPECT_EQ(m->retries, 2u);
  EXPECT_EQ(m->retry_delay.count, 2u);

  // The reader follows the call from the lines the sink wrote.
  ReaderOptions reader_options;
  reader_options.call_id = events[0].call_id;
  TraceReader reader(reader_options);
  {
    absl::MutexLock lock(&mu_);
    std::istringstream in(lines_);
    std::string line;
    while (std::getline(in, line)) reader.AddLine(line);
  }
  const std::string timeline = reader.Timeline();
  EXPECT_TRUE(absl::StrContains(timeline, "done after 3 attempts")) << timeline;
}

TEST_F(TraceE2ETest, FirstTimeSuccessWritesNothingButIsCounted) {
  Open(TraceVerbosity::kRetries);
  for (int i = 0; i < 5; ++i) {
    FaultRequest req;
    req.set_op_id("quiet");
    FaultReply reply;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Get(&ctx, req, &reply).ok());
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub_->Create(&ctx2, req, &reply).ok());  // fast path
  }
  EXPECT_TRUE(Events().empty());
  const StatsSnapshot snap = stats_->Snapshot();
  EXPECT_EQ(snap.FindMethod("/rpcguard.testing.v1.FaultService/Get")->calls,
            5u);
  EXPECT_EQ(
      snap.FindMethod("/rpcguard.testing.v1.FaultService/Create")->attempts,
      5u);
  EXPECT_TRUE(absl::StrContains(
      ToPrometheusText(snap),
      absl::StrCat("rpcguard_calls_total{method=\"/"
                   "rpcguard.testing.v1.FaultService/Create\",target=\"",
                   server_.address(), "\",code=\"OK\"} 5")));
}

TEST_F(TraceE2ETest, GiveUpsReachTheHookOnceWithTheRequest) {
  Open(TraceVerbosity::kGiveUps);
  FaultRequest req;
  req.set_op_id("hooked");
  req.set_fail_first(10);
  req.set_payload("dead letter");
  FaultReply reply;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub_->Get(&ctx, req, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  FaultRequest create;
  create.set_op_id("hooked-create");
  create.set_fail_first(1);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Create(&ctx2, create, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  absl::MutexLock lock(&mu_);
  ASSERT_EQ(give_ups_.size(), 2u);
  EXPECT_EQ(give_ups_[0].reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(give_ups_[0].attempts, 3);
  EXPECT_EQ(give_ups_[0].code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(give_ups_[0].request, req.SerializeAsString());
  EXPECT_EQ(give_ups_[0].idempotency_key, server_.Op("hooked").keys[0]);
  EXPECT_EQ(give_ups_[1].reason, GiveUpReason::kNotIdempotent);
  EXPECT_EQ(give_ups_[1].attempts, 1);
  EXPECT_EQ(give_ups_[1].request, create.SerializeAsString());
  EXPECT_EQ(give_ups_[1].idempotency_key, server_.Op("hooked-create").keys[0]);
  // kGiveUps writes the two terminal lines only, each with its call id.
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[0].call_id, give_ups_[0].call_id);
  EXPECT_EQ(events_[0].reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(events_[1].reason, GiveUpReason::kNotIdempotent);
  EXPECT_EQ(events_[1].call_id, give_ups_[1].call_id);
}

// A server's delay over kMaxServerDelay (60 s) on a call with a 2 s
// deadline: the deadline is what bounds it, so the call ends at once with
// the server's status, and the status, the trace and the hook all say
// `deadline` (not pushback_stop).
TEST_F(TraceE2ETest, AServerDelayThatCannotFitGivesUpAsDeadline) {
  Open(TraceVerbosity::kGiveUps);
  FaultRequest req;
  req.set_op_id("pushback-over-cap");
  req.set_fail_first(1);
  req.set_pushback_ms("90000");
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const absl::Time start = absl::Now();
  const grpc::Status s = stub_->Get(&ctx, req, &reply);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                "[rpcguard: 1 attempt, gave up: deadline]"))
      << s.error_message();
  EXPECT_EQ(server_.Op("pushback-over-cap").attempts, 1);

  absl::MutexLock lock(&mu_);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].decision, TraceDecision::kGiveUp);
  EXPECT_EQ(events_[0].reason, GiveUpReason::kDeadline);
  EXPECT_TRUE(absl::StrContains(lines_, "reason=deadline")) << lines_;
  ASSERT_EQ(give_ups_.size(), 1u);
  EXPECT_EQ(give_ups_[0].reason, GiveUpReason::kDeadline);
}

TEST_F(TraceE2ETest, CancelDuringBackoffIsAFailFast) {
  auto stub = FaultService::NewStub(*CreateGuardedChannel(
      server_.address(), R"json({"methodConfig": [{"name": [{}],
      "retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s",
                      "maxBackoff": "1s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]},
      "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}}]})json",
      [this](Options& options) {
        options.trace_sink =
            std::make_shared<CallbackSink>([this](const TraceEvent& e) {
              absl::MutexLock lock(&mu_);
              events_.push_back(e);
            });
        options.stats = stats_;
      }));
  FaultRequest req;
  req.set_op_id("cancel-traced");
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ctx.TryCancel();
  });
  EXPECT_EQ(stub->Get(&ctx, req, &reply).error_code(),
            grpc::StatusCode::CANCELLED);
  canceller.join();
  const std::vector<TraceEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind, TraceEvent::Kind::kFailFast);
  EXPECT_EQ(events[1].attempt, 2);  // the attempt that was not sent
  EXPECT_EQ(events[1].reason, GiveUpReason::kCancelled);
}

// A call refused before it was sent still reaches the give-up hook: no
// attempts, its key and its request, and the call id of its trace line.
TEST_F(TraceE2ETest, FailFastReachesTheHookWithNoAttempts) {
  auto registry = *BreakerRegistry::Create({});
  auto stub = FaultService::NewStub(
      *CreateGuardedChannel(server_.address(), kConfig, [&](Options& options) {
        options.breaker_registry = registry;
        options.trace_verbosity = TraceVerbosity::kGiveUps;
        options.trace_sink =
            std::make_shared<CallbackSink>([this](const TraceEvent& e) {
              absl::MutexLock lock(&mu_);
              if (e.kind != TraceEvent::Kind::kBreakerTransition) {
                events_.push_back(e);
              }
            });
        options.give_up_hook = [this](const GiveUpInfo& info) {
          absl::MutexLock lock(&mu_);
          give_ups_.push_back(info);
        };
      }));
  registry->Get(server_.address())->ForceOpen();
  for (bool hijacked : {true, false}) {  // Get is hijacked, Create is not
    FaultRequest req;
    req.set_op_id(hijacked ? "refused-get" : "refused-create");
    req.set_payload("kept for later");
    FaultReply reply;
    grpc::ClientContext ctx;
    const grpc::Status s = hijacked ? stub->Get(&ctx, req, &reply)
                                    : stub->Create(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    absl::MutexLock lock(&mu_);
    ASSERT_FALSE(give_ups_.empty());
    const GiveUpInfo& info = give_ups_.back();
    EXPECT_EQ(info.reason, GiveUpReason::kBreakerOpen);
    EXPECT_EQ(info.attempts, 0) << "hijacked=" << hijacked;
    EXPECT_EQ(info.request, req.SerializeAsString());
    EXPECT_EQ(info.idempotency_key.size(), 36u);  // a UUID of its own
    ASSERT_FALSE(events_.empty());
    EXPECT_EQ(events_.back().call_id, info.call_id);
    EXPECT_EQ(events_.back().kind, TraceEvent::Kind::kFailFast);
  }
  EXPECT_EQ(server_.total_attempts(), 0);
}

// A factory traces the breakers of its own destination (and its per-service
// keys), not those of another destination its name happens to prefix.
TEST_F(TraceE2ETest, BreakerTransitionsOfOtherDestinationsAreNotTraced) {
  auto registry = *BreakerRegistry::Create({});
  std::vector<std::string> seen;
  absl::Mutex seen_mu;
  Options options;
  options.breaker_registry = registry;
  options.destination = "127.0.0.1:5005";
  options.trace_sink = std::make_shared<CallbackSink>([&](const TraceEvent& e) {
    absl::MutexLock lock(&seen_mu);
    seen.push_back(e.breaker_key);
  });
  auto factory = MakeInterceptorFactory(options);
  registry->Get("127.0.0.1:50051")->ForceOpen();
  registry->Get("127.0.0.1:5005/pkg.Svc")->ForceOpen();
  registry->Get("127.0.0.1:5005")->ForceOpen();
  absl::MutexLock lock(&seen_mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"127.0.0.1:5005/pkg.Svc",
                                            "127.0.0.1:5005"}));
}

}  // namespace
}  // namespace rpcguard
