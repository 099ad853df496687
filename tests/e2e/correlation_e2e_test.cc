// Copyright rpcguard authors.
//
// Correlation ids end to end (issue 24): real calls through rpcguard to the
// fault server, with the caller's traceparent and x-request-id. Every trace
// line of a call carries them (a retried call's, a call sent once, a
// fail-fast), in both formats, and the trace reader finds the call by them;
// a call without them carries none; malformed ones are dropped; the key
// list comes from the config.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

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
#include "tools/trace_reader.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr char kMethods[] = R"json("methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}])json";

constexpr char kTraceparent[] =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";

class CorrelationE2ETest : public ::testing::Test {
 protected:
  // `rpcguard_object`: the config's top-level "rpcguard" object, if any.
  void Open(const std::string& rpcguard_object = "") {
    const std::string config =
        absl::StrCat("{", kMethods,
                     rpcguard_object.empty()
                         ? ""
                         : absl::StrCat(", \"rpcguard\": ", rpcguard_object),
                     "}");
    auto channel =
        CreateGuardedChannel(server_.address(), config, [&](Options& options) {
          options.trace_verbosity = TraceVerbosity::kAll;
          options.breaker_registry = registry_;
          options.trace_sink =
              std::make_shared<CallbackSink>([this](const TraceEvent& e) {
                absl::MutexLock lock(&mu_);
                lines_.push_back(FormatLogfmt(e));
                lines_.push_back(FormatJson(e));
              });
          options.give_up_hook = [this](const GiveUpInfo& info) {
            absl::MutexLock lock(&mu_);
            give_ups_.push_back(info);
          };
        });
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = FaultService::NewStub(*channel);
  }

  // The lines written so far, each event in both formats, parsed back.
  std::vector<TraceEvent> Parsed() {
    absl::MutexLock lock(&mu_);
    std::vector<TraceEvent> out;
    for (const std::string& line : lines_) {
      absl::StatusOr<TraceEvent> e = ParseTraceLine(line);
      EXPECT_TRUE(e.ok()) << e.status() << ": " << line;
      if (e.ok()) out.push_back(*std::move(e));
    }
    return out;
  }

  std::vector<TraceEvent> OfCall(const std::string& op) {
    // The events of one call, by the idempotency key its attempts carried.
    std::vector<TraceEvent> out;
    const std::vector<std::string> keys = server_.Op(op).keys;
    for (TraceEvent& e : Parsed()) {
      if (!keys.empty() && e.idempotency_key == keys[0]) {
        out.push_back(std::move(e));
      }
    }
    return out;
  }

  grpc::Status Call(
      const std::string& method, const std::string& op, int fail_first,
      const std::vector<std::pair<std::string, std::string>>& metadata) {
    FaultRequest req;
    req.set_op_id(op);
    req.set_fail_first(fail_first);
    FaultReply reply;
    grpc::ClientContext ctx;
    for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
    return method == "Get" ? stub_->Get(&ctx, req, &reply)
                           : stub_->Create(&ctx, req, &reply);
  }

  FaultServer server_;
  std::shared_ptr<BreakerRegistry> registry_ =
      *BreakerRegistry::Create(BreakerRegistry::Options{});
  std::unique_ptr<FaultService::Stub> stub_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::vector<GiveUpInfo> give_ups_ ABSL_GUARDED_BY(mu_);
};

// The give-up hook learns the ids too: a dead letter names its request. A
// retried call that ran out of attempts, and one sent once.
TEST_F(CorrelationE2ETest, TheGiveUpHookGetsTheCallersIds) {
  Open();
  EXPECT_FALSE(Call("Get", "retried", 5,
                    {{"traceparent", kTraceparent}, {"x-request-id", "r-1"}})
                   .ok());
  EXPECT_FALSE(Call("Create", "once", 1, {{"x-request-id", "r-2"}}).ok());
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(give_ups_.size(), 2u);
  EXPECT_EQ(give_ups_[0].reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(give_ups_[0].trace_id, kTraceId);
  EXPECT_EQ(give_ups_[0].correlation,
            (std::vector<CorrelationId>{{"x-request-id", "r-1"}}));
  EXPECT_EQ(give_ups_[1].reason, GiveUpReason::kNotIdempotent);
  EXPECT_EQ(give_ups_[1].trace_id, "");
  EXPECT_EQ(give_ups_[1].correlation,
            (std::vector<CorrelationId>{{"x-request-id", "r-2"}}));
}

TEST_F(CorrelationE2ETest, EveryLineOfARetriedCallCarriesTheCallersIds) {
  Open();
  ASSERT_TRUE(Call("Get", "with-ids", 1,
                   {{"traceparent", kTraceparent}, {"x-request-id", "r-7"}})
                  .ok());
  ASSERT_EQ(server_.Op("with-ids").attempts, 2);
  const std::vector<TraceEvent> events = OfCall("with-ids");
  ASSERT_EQ(events.size(), 4u);  // two attempts, each in both formats
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.trace_id, kTraceId);
    EXPECT_EQ(e.correlation,
              (std::vector<CorrelationId>{{"x-request-id", "r-7"}}));
  }
  EXPECT_EQ(events[0].decision, TraceDecision::kRetry);
  EXPECT_EQ(events.back().decision, TraceDecision::kDone);

  // The reader finds the call by either id, and nothing else.
  for (const char* id : {kTraceId, "r-7", "x-request-id:r-7"}) {
    ReaderOptions options;
    options.correlation = id;
    TraceReader reader(options);
    absl::MutexLock lock(&mu_);
    for (const std::string& line : lines_) reader.AddLine(line);
    EXPECT_EQ(reader.events(), 4) << id;
  }
}

TEST_F(CorrelationE2ETest, ACallWithoutIdsCarriesNone) {
  Open();
  ASSERT_TRUE(Call("Get", "plain", 1, {{"x-other", "o"}}).ok());
  ASSERT_TRUE(Call("Get", "no-metadata", 1, {}).ok());
  for (const char* op : {"plain", "no-metadata"}) {
    const std::vector<TraceEvent> events = OfCall(op);
    ASSERT_EQ(events.size(), 4u) << op;
    for (const TraceEvent& e : events) {
      EXPECT_TRUE(e.trace_id.empty()) << op;
      EXPECT_TRUE(e.correlation.empty()) << op;
    }
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& line : lines_) {
    EXPECT_FALSE(absl::StrContains(line, "trace_id")) << line;
    EXPECT_FALSE(absl::StrContains(line, "correlation")) << line;
  }
}

TEST_F(CorrelationE2ETest, MalformedIdsAreDroppedAndTheCallGoesOn) {
  Open();
  const std::string long_id(300, 'x');
  ASSERT_TRUE(
      Call("Get", "malformed", 1,
           {{"traceparent", "00-not-a-trace-id-01"}, {"x-request-id", long_id}})
          .ok());
  const std::vector<TraceEvent> events = OfCall("malformed");
  ASSERT_EQ(events.size(), 4u);
  for (const TraceEvent& e : events) {
    EXPECT_TRUE(e.trace_id.empty());
    EXPECT_TRUE(e.correlation.empty());
  }
}

// A call rpcguard sends once as the application's own (Create: never safe
// to repeat) and a fail-fast (breaker forced open) carry the ids too.
TEST_F(CorrelationE2ETest, SentOnceAndFailFastLinesCarryTheIds) {
  Open();
  const std::vector<std::pair<std::string, std::string>> ids = {
      {"traceparent", kTraceparent}, {"x-request-id", "r-once"}};
  EXPECT_FALSE(Call("Create", "once", 1, ids).ok());
  std::vector<TraceEvent> events = OfCall("once");
  ASSERT_EQ(events.size(), 2u);
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.decision, TraceDecision::kGiveUp);
    EXPECT_EQ(e.trace_id, kTraceId);
    EXPECT_EQ(e.correlation,
              (std::vector<CorrelationId>{{"x-request-id", "r-once"}}));
  }

  for (const auto& [key, breaker] : registry_->Breakers()) breaker->ForceOpen();
  ASSERT_FALSE(registry_->Breakers().empty());
  {
    absl::MutexLock lock(&mu_);
    lines_.clear();
  }
  EXPECT_EQ(
      Call("Get", "refused", 0, {{"x-request-id", "r-refused"}}).error_code(),
      grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op("refused").attempts, 0);
  int fail_fasts = 0;
  for (const TraceEvent& e : Parsed()) {
    if (e.kind != TraceEvent::Kind::kFailFast) continue;
    ++fail_fasts;
    EXPECT_EQ(e.correlation,
              (std::vector<CorrelationId>{{"x-request-id", "r-refused"}}));
  }
  EXPECT_EQ(fail_fasts, 2);  // one event, both formats
}

TEST_F(CorrelationE2ETest, TheKeyListComesFromTheConfig) {
  Open(R"({"correlationKeys": ["x-correlation-id", "x-tenant"]})");
  ASSERT_TRUE(Call("Get", "custom", 1,
                   {{"traceparent", kTraceparent},
                    {"x-request-id", "r-7"},
                    {"x-tenant", "acme"},
                    {"x-correlation-id", "c-1"}})
                  .ok());
  const std::vector<TraceEvent> events = OfCall("custom");
  ASSERT_EQ(events.size(), 4u);
  for (const TraceEvent& e : events) {
    EXPECT_TRUE(e.trace_id.empty());  // traceparent is not listed
    EXPECT_EQ(e.correlation,
              (std::vector<CorrelationId>{{"x-correlation-id", "c-1"},
                                          {"x-tenant", "acme"}}));
  }
}

TEST_F(CorrelationE2ETest, AnEmptyKeyListTurnsTheIdsOff) {
  Open(R"({"correlationKeys": []})");
  ASSERT_TRUE(Call("Get", "off", 1,
                   {{"traceparent", kTraceparent}, {"x-request-id", "r-7"}})
                  .ok());
  const std::vector<TraceEvent> events = OfCall("off");
  ASSERT_EQ(events.size(), 4u);
  for (const TraceEvent& e : events) {
    EXPECT_TRUE(e.trace_id.empty());
    EXPECT_TRUE(e.correlation.empty());
  }
}

}  // namespace
}  // namespace rpcguard
