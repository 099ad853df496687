// Copyright rpcguard authors.
//
// Several backends behind one target (issue 46 §3): CreateChannel puts the
// caller's balancing policy under gRPC's outlier detection, and rpcguard's
// retries and hedges, each a call of its own through gRPC's balancer, leave
// a backend that fails them. Real gRPC servers on loopback behind targets
// such as "ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3", round_robin chosen
// by the caller's service config.
//
// Timing: outlier detection looks at the backends once a second. The tests
// wait for an ejection (a backend that stops receiving attempts) for up to
// 10 s rather than assume when it comes, and then assert what follows, so
// that a loaded machine makes them slower, not flaky. The ServiceConfig
// tests need no server: they assert the service config CreateChannel
// writes, exactly.

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "rpcguard/service_config/outlier_detection.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::internal::LbPolicyNameOf;
using ::rpcguard::internal::ServiceConfigOf;
using ::rpcguard::internal::WithServiceConfig;
using ::rpcguard::internal::WrapInOutlierDetection;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::CustomizeOptions;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// ---------------------------------------------------------------------------
// The service config CreateChannel writes.

// Outlier detection as the defaults write it, around `child` (a list's
// entries), followed by the same entries for a gRPC without it.
std::string Wrapped(const std::string& child) {
  return absl::StrCat(
      R"([{"outlier_detection_experimental":{"interval":"1s",)",
      R"("baseEjectionTime":"10s","maxEjectionTime":"300s",)",
      R"("maxEjectionPercent":50,"failurePercentageEjection":{)",
      R"("threshold":85,"enforcementPercentage":100,"minimumHosts":2,)",
      R"("requestVolume":10},"childPolicy":[)", child, "]}},", child, "]");
}

constexpr char kRoundRobin[] = R"({"round_robin":{}})";

TEST(ServiceConfig, ARoundRobinListGoesUnderOutlierDetectionAsItsChild) {
  EXPECT_EQ(
      WrapInOutlierDetection(
          R"({"loadBalancingConfig": [{"round_robin": {}}]})", std::nullopt,
          OutlierDetectionOptions()),
      absl::StrCat(R"({"loadBalancingConfig":)", Wrapped(kRoundRobin), "}"));
}

TEST(ServiceConfig, TheCallersOtherMembersStayAsWrittenInTheirOrder) {
  const char kConfig[] = R"({
    "methodConfig": [{"name": [{"service": "a.B"}], "timeout": "1.50s",
                      "waitForReady": true, "x": null, "y": "q\"\u00e9\n"}],
    "loadBalancingConfig": [{"ring_hash_experimental": {"minRingSize": 1e2}},
                            {"round_robin": {}}],
    "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.10}})";
  EXPECT_EQ(
      WrapInOutlierDetection(kConfig, std::nullopt, OutlierDetectionOptions()),
      absl::StrCat(
          R"({"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1.50s",)",
          R"("waitForReady":true,"x":null,"y":"q\")", "\xc3\xa9",
          R"(\n"}],"loadBalancingConfig":)",
          Wrapped(R"({"ring_hash_experimental":{"minRingSize":1e2}},)"
                  R"({"round_robin":{}})"),
          R"(,"retryThrottling":{"maxTokens":10,"tokenRatio":0.10}})"));
}

// gRPC reads the deprecated field in any case; the list replaces it.
TEST(ServiceConfig, ADeprecatedPolicyNameBecomesTheList) {
  EXPECT_EQ(WrapInOutlierDetection(
                R"({"loadBalancingPolicy": "ROUND_ROBIN", "methodConfig": []})",
                std::nullopt, OutlierDetectionOptions()),
            absl::StrCat(R"({"loadBalancingConfig":)", Wrapped(kRoundRobin),
                         R"(,"methodConfig":[]})"));
}

// ChannelArguments::SetLoadBalancingPolicyName, with and without a service
// config of the caller's that chooses no policy.
TEST(ServiceConfig, APolicyChosenByNameGetsAListOfItsOwn) {
  EXPECT_EQ(
      WrapInOutlierDetection(std::nullopt, "round_robin",
                             OutlierDetectionOptions()),
      absl::StrCat(R"({"loadBalancingConfig":)", Wrapped(kRoundRobin), "}"));
  EXPECT_EQ(WrapInOutlierDetection(R"({"methodConfig": []})", "round_robin",
                                   OutlierDetectionOptions()),
            absl::StrCat(R"({"methodConfig":[],"loadBalancingConfig":)",
                         Wrapped(kRoundRobin), "}"));
}

// gRPC's order: the list before the deprecated field before the name.
TEST(ServiceConfig, ThePolicyIsTheOneGrpcWouldChoose) {
  EXPECT_EQ(WrapInOutlierDetection(
                R"({"loadBalancingConfig": [{"round_robin": {}}],
                    "loadBalancingPolicy": "pick_first"})",
                "pick_first", OutlierDetectionOptions()),
            absl::StrCat(R"({"loadBalancingConfig":)", Wrapped(kRoundRobin),
                         R"(,"loadBalancingPolicy":"pick_first"})"));
  EXPECT_EQ(WrapInOutlierDetection(R"({"loadBalancingPolicy": "pick_first"})",
                                   "round_robin", OutlierDetectionOptions()),
            std::nullopt);
  EXPECT_EQ(
      WrapInOutlierDetection(R"({"loadBalancingConfig": [{"pick_first": {}}]})",
                             "round_robin", OutlierDetectionOptions()),
      std::nullopt);
}

// Nothing to steer around, someone else's choice, or gRPC's to report.
TEST(ServiceConfig, WhatIsNotASpreadingPolicyOfTheCallersIsLeftAlone) {
  const OutlierDetectionOptions o;
  EXPECT_EQ(WrapInOutlierDetection(std::nullopt, std::nullopt, o),
            std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(R"({"methodConfig": []})", std::nullopt, o),
            std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(std::nullopt, "pick_first", o),
            std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(std::nullopt, "grpclb", o), std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(std::nullopt, "my_own_policy", o),
            std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(
                R"({"loadBalancingConfig": [{"outlier_detection_experimental":
                    {"childPolicy": [{"round_robin": {}}]}}]})",
                std::nullopt, o),
            std::nullopt);
  // One entry gRPC might take that does not spread calls is enough.
  EXPECT_EQ(WrapInOutlierDetection(
                R"({"loadBalancingConfig": [{"my_own_policy": {}},
                                            {"round_robin": {}}]})",
                std::nullopt, o),
            std::nullopt);
  EXPECT_EQ(
      WrapInOutlierDetection(R"({"loadBalancingConfig": []})", std::nullopt, o),
      std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection(R"({"loadBalancingConfig": [}")",
                                   "round_robin", o),
            std::nullopt);
  EXPECT_EQ(WrapInOutlierDetection("[]", "round_robin", o), std::nullopt);
}

TEST(ServiceConfig, SettingsAreWrittenAsGrpcReadsThem) {
  OutlierDetectionOptions o;
  o.interval = absl::Milliseconds(250);
  o.base_ejection_time = absl::Seconds(30);
  o.max_ejection_time = absl::Seconds(30) + absl::Nanoseconds(1);
  o.max_ejection_percent = 10;
  o.failure_percentage_threshold = 50;
  o.minimum_hosts = 5;
  o.request_volume = 100;
  EXPECT_EQ(
      WrapInOutlierDetection(std::nullopt, "round_robin", o),
      absl::StrCat(
          R"({"loadBalancingConfig":[{"outlier_detection_experimental":{)",
          R"("interval":"0.25s","baseEjectionTime":"30s",)",
          R"("maxEjectionTime":"30.000000001s","maxEjectionPercent":10,)",
          R"("failurePercentageEjection":{"threshold":50,)",
          R"("enforcementPercentage":100,"minimumHosts":5,)",
          R"("requestVolume":100},"childPolicy":[{"round_robin":{}}]}},)",
          R"({"round_robin":{}}]})"));
}

TEST(ServiceConfig, BadSettingsNeverYieldAChannel) {
  struct Case {
    void (*set)(OutlierDetectionOptions&);
    const char* error;
  };
  const Case cases[] = {
      {[](OutlierDetectionOptions& o) { o.interval = absl::ZeroDuration(); },
       "Options::outlier_detection.interval: must be positive and finite"},
      {[](OutlierDetectionOptions& o) {
         o.base_ejection_time = absl::InfiniteDuration();
       },
       "Options::outlier_detection.base_ejection_time: must be positive and "
       "finite"},
      {[](OutlierDetectionOptions& o) {
         o.max_ejection_time = absl::Seconds(5);
       },
       "Options::outlier_detection.max_ejection_time: must be finite and at "
       "least base_ejection_time"},
      {[](OutlierDetectionOptions& o) { o.max_ejection_percent = 101; },
       "Options::outlier_detection.max_ejection_percent: must be in [0, 100]"},
      {[](OutlierDetectionOptions& o) { o.failure_percentage_threshold = -1; },
       "Options::outlier_detection.failure_percentage_threshold: must be in "
       "[0, 100]"},
      {[](OutlierDetectionOptions& o) { o.minimum_hosts = -1; },
       "Options::outlier_detection.minimum_hosts: must be >= 0"},
      {[](OutlierDetectionOptions& o) { o.request_volume = -1; },
       "Options::outlier_detection.request_volume: must be >= 0"},
  };
  for (const Case& c : cases) {
    Options options;
    c.set(options.outlier_detection);
    auto channel = CreateChannel("127.0.0.1:1",
                                 grpc::InsecureChannelCredentials(), options);
    ASSERT_FALSE(channel.ok()) << c.error;
    EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(channel.status().message(), c.error);
    // Switched off, the settings are not read.
    options.outlier_detection.enabled = false;
    EXPECT_TRUE(CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials(),
                              options)
                    .ok())
        << c.error;
  }
}

std::vector<std::string> ValuesOf(const grpc::ChannelArguments& args,
                                  const char* key) {
  std::vector<std::string> values;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (absl::string_view(c.args[i].key) != key) continue;
    switch (c.args[i].type) {
      case GRPC_ARG_STRING:
        values.push_back(c.args[i].value.string);
        break;
      case GRPC_ARG_INTEGER:
        values.push_back(absl::StrCat(c.args[i].value.integer));
        break;
      case GRPC_ARG_POINTER:
        values.push_back(absl::StrCat(
            reinterpret_cast<uintptr_t>(c.args[i].value.pointer.p)));
        break;
    }
  }
  return values;
}

TEST(ServiceConfig, EveryOtherChannelArgumentIsKept) {
  grpc::ChannelArguments args;
  args.SetUserAgentPrefix("billing/7");
  args.SetServiceConfigJSON(R"({"methodConfig": []})");
  args.SetMaxReceiveMessageSize(1234);
  args.SetLoadBalancingPolicyName("round_robin");
  int marker = 0;
  args.SetPointer("test.pointer", &marker);
  args.SetServiceConfigJSON(R"({"loadBalancingPolicy": "round_robin"})");
  EXPECT_EQ(ServiceConfigOf(args), R"({"loadBalancingPolicy": "round_robin"})");
  EXPECT_EQ(LbPolicyNameOf(args), "round_robin");

  const grpc::ChannelArguments out = WithServiceConfig(args, "{}");
  EXPECT_EQ(ValuesOf(out, GRPC_ARG_SERVICE_CONFIG),
            std::vector<std::string>{"{}"});
  EXPECT_EQ(ValuesOf(out, GRPC_ARG_PRIMARY_USER_AGENT_STRING),
            ValuesOf(args, GRPC_ARG_PRIMARY_USER_AGENT_STRING));
  ASSERT_EQ(ValuesOf(out, GRPC_ARG_PRIMARY_USER_AGENT_STRING).size(), 1u);
  EXPECT_TRUE(
      absl::StartsWith(ValuesOf(out, GRPC_ARG_PRIMARY_USER_AGENT_STRING)[0],
                       "billing/7 grpc-c++/"));
  EXPECT_EQ(ValuesOf(out, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH),
            std::vector<std::string>{"1234"});
  EXPECT_EQ(ValuesOf(out, GRPC_ARG_LB_POLICY_NAME),
            std::vector<std::string>{"round_robin"});
  EXPECT_EQ(ValuesOf(out, "test.pointer"),
            std::vector<std::string>{
                absl::StrCat(reinterpret_cast<uintptr_t>(&marker))});
  EXPECT_EQ(out.c_channel_args().num_args, args.c_channel_args().num_args - 1);
}

// ---------------------------------------------------------------------------
// Real backends.

constexpr char kRoundRobinConfig[] =
    R"({"loadBalancingConfig": [{"round_robin": {}}]})";

// Get (NO_SIDE_EFFECTS) retried up to 3 attempts, as the issue's figures.
constexpr char kRetryConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// Counts the breaker's openings; traces nothing else.
class OpeningCounter final : public TraceSink {
 public:
  void Write(const TraceEvent& e) override {
    if (e.kind == TraceEvent::Kind::kBreakerTransition &&
        e.to_state == "open") {
      ++openings;
    }
  }
  std::atomic<int> openings{0};
};

// What a stretch of calls did.
struct Stretch {
  int calls = 0;
  int ok = 0;
  absl::Duration slowest;
  // Attempts each backend received meanwhile.
  std::vector<int64_t> attempts;
};

class BackendsTest : public ::testing::Test {
 protected:
  BackendsTest() : servers_(3) {
    for (auto& s : servers_) s = std::make_unique<FaultServer>();
  }

  void SetUp() override {
    for (const auto& s : servers_) ASSERT_TRUE(s->ok());
  }

  // "ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3", or with `last` in place
  // of the third backend's address.
  std::string Target(const std::string& last = "") const {
    return absl::StrCat("ipv4:", servers_[0]->address(), ",",
                        servers_[1]->address(), ",",
                        last.empty() ? servers_[2]->address() : last);
  }

  // A channel through rpcguard, round_robin chosen by the caller's service
  // config unless `lb_config` says otherwise (empty: none chosen).
  std::shared_ptr<grpc::Channel> Channel(
      const std::string& target, const char* config,
      const CustomizeOptions& customize = nullptr,
      const std::string& lb_config = kRoundRobinConfig) {
    grpc::ChannelArguments args;
    if (!lb_config.empty()) args.SetServiceConfigJSON(lb_config);
    auto channel = CreateGuardedChannel(
        target, config,
        [&](Options& options) {
          options.breaker_registry = *BreakerRegistry::Create({});
          options.trace_sink = sink_;
          if (customize) customize(options);
        },
        args);
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return nullptr;
    EXPECT_TRUE((*channel)->WaitForConnected(std::chrono::system_clock::now() +
                                             std::chrono::seconds(10)));
    return *channel;
  }

  std::vector<int64_t> Attempts() const {
    std::vector<int64_t> a;
    for (const auto& s : servers_) a.push_back(s->total_attempts());
    return a;
  }

  // `calls` Get calls from `callers` threads at once, each with `deadline`.
  Stretch Calls(FaultService::Stub* stub, int calls, int callers = 2,
                absl::Duration deadline = absl::Seconds(5)) {
    const std::vector<int64_t> before = Attempts();
    std::atomic<int> next{0}, ok{0};
    std::atomic<int64_t> slowest_ns{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t) {
      threads.emplace_back([&] {
        while (next.fetch_add(1) < calls) {
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
          FaultRequest req;
          req.set_op_id(absl::StrCat("op-", ++op_));
          FaultReply reply;
          const absl::Time start = absl::Now();
          if (stub->Get(&ctx, req, &reply).ok()) ++ok;
          const int64_t took = absl::ToInt64Nanoseconds(absl::Now() - start);
          int64_t seen = slowest_ns.load();
          while (took > seen && !slowest_ns.compare_exchange_weak(seen, took)) {
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    Stretch s;
    s.calls = calls;
    s.ok = ok.load();
    s.slowest = absl::Nanoseconds(slowest_ns.load());
    const std::vector<int64_t> after = Attempts();
    for (size_t i = 0; i < after.size(); ++i) {
      s.attempts.push_back(after[i] - before[i]);
    }
    return s;
  }

  // Makes calls until every backend has received attempts, for up to 10 s:
  // WaitForConnected says only that one backend is connected. Returns
  // whether they all did.
  bool UntilAllPicked(FaultService::Stub* stub) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    std::vector<int64_t> seen(servers_.size(), 0);
    while (absl::Now() < give_up) {
      const Stretch s = Calls(stub, 30);
      bool all = true;
      for (size_t i = 0; i < seen.size(); ++i) {
        seen[i] += s.attempts[i];
        all = all && seen[i] > 0;
      }
      if (all) return true;
    }
    return false;
  }

  // Makes calls until backend `bad` receives none in a whole stretch of
  // 100, for up to 10 s; returns whether it did, and adds what the calls
  // did to `*so_far`.
  bool UntilLeft(FaultService::Stub* stub, int bad, Stretch* so_far,
                 int callers = 2) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up) {
      const Stretch s = Calls(stub, 100, callers);
      so_far->calls += s.calls;
      so_far->ok += s.ok;
      if (s.attempts[bad] == 0) return true;
    }
    return false;
  }

  std::vector<std::unique_ptr<FaultServer>> servers_;
  std::shared_ptr<OpeningCounter> sink_ = std::make_shared<OpeningCounter>();
  std::atomic<int> op_{0};
};

// The caller's round_robin stays, as outlier detection's child; switched
// off, or with no policy chosen (pick_first), the channel is as given.
TEST_F(BackendsTest, ACallerWhoChoseAPolicyKeepsIt) {
  auto channel = Channel(Target(), kRetryConfig);
  ASSERT_NE(channel, nullptr);
  EXPECT_EQ(channel->GetLoadBalancingPolicyName(),
            "outlier_detection_experimental");
  EXPECT_TRUE(absl::StrContains(channel->GetServiceConfigJSON(),
                                R"("childPolicy":[{"round_robin":{}}])"))
      << channel->GetServiceConfigJSON();

  auto off = Channel(Target(), kRetryConfig, [](Options& options) {
    options.outlier_detection.enabled = false;
  });
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(off->GetLoadBalancingPolicyName(), "round_robin");
  EXPECT_EQ(off->GetServiceConfigJSON(), kRoundRobinConfig);

  auto pick_first = Channel(Target(), kRetryConfig, nullptr, "");
  ASSERT_NE(pick_first, nullptr);
  EXPECT_EQ(pick_first->GetLoadBalancingPolicyName(), "pick_first");
}

// The list CreateChannel writes ends with the caller's own entries, for a
// gRPC that does not know outlier detection (older releases, or ones that
// register it only with GRPC_EXPERIMENTAL_ENABLE_OUTLIER_DETECTION=true):
// gRPC takes the first policy of the list it knows. Shown on a plain
// channel with the first entry renamed to a policy this gRPC lacks.
TEST_F(BackendsTest, AGrpcWithoutOutlierDetectionTakesTheCallersPolicy) {
  std::optional<std::string> config = WrapInOutlierDetection(
      kRoundRobinConfig, std::nullopt, OutlierDetectionOptions());
  ASSERT_TRUE(config.has_value());
  const size_t at = config->find("outlier_detection_experimental");
  ASSERT_NE(at, std::string::npos);
  config->replace(at, 30, "no_outlier_detection_here_abcd");
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(*config);
  auto channel = grpc::CreateCustomChannel(
      Target(), grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(channel->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Seconds(10))));
  EXPECT_EQ(channel->GetLoadBalancingPolicyName(), "round_robin");
  auto stub = FaultService::NewStub(channel);
  const Stretch s = Calls(stub.get(), 30, 1);
  EXPECT_EQ(s.ok, s.calls);
}

// rpcguard's retry is a call of its own through gRPC's balancer: with
// round_robin and one caller, the retry of an attempt that failed on the
// bad backend is picked on another backend, with the call's key. (Outlier
// detection off, so that the bad backend stays in the rotation.)
TEST_F(BackendsTest, ARetryIsPickedByTheBalancerAgain) {
  servers_[1]->SetMode(100, 0, false, 0);
  auto channel = Channel(Target(), kRetryConfig, [](Options& options) {
    options.outlier_detection.enabled = false;
  });
  ASSERT_NE(channel, nullptr);
  auto stub = FaultService::NewStub(channel);
  ASSERT_TRUE(UntilAllPicked(stub.get()));
  int retried = 0;
  for (int i = 0; i < 30; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    FaultRequest req;
    req.set_op_id(absl::StrCat("picked-", i));
    FaultReply reply;
    ASSERT_TRUE(stub->Get(&ctx, req, &reply).ok()) << i;
    const testing::OpRecord bad = servers_[1]->Op(req.op_id());
    if (bad.attempts == 0) continue;
    ++retried;
    EXPECT_EQ(bad.attempts, 1) << i;
    const testing::OpRecord a = servers_[0]->Op(req.op_id());
    const testing::OpRecord c = servers_[2]->Op(req.op_id());
    ASSERT_EQ(a.attempts + c.attempts, 1) << i;
    const testing::OpRecord& good = a.attempts == 1 ? a : c;
    EXPECT_EQ(good.keys[0], bad.keys[0]) << i;
    EXPECT_EQ(good.attempt_headers[0], "2") << i;
  }
  // A third of first attempts land on it.
  EXPECT_GE(retried, 5);
}

// One backend answers UNAVAILABLE to everything. rpcguard's retries save
// the calls it fails until outlier detection ejects it; then it gets no
// attempt at all, every call succeeds at its first attempt, and the breaker
// never opened.
TEST_F(BackendsTest, RetriesLeaveABackendThatFailsEverything) {
  servers_[1]->SetMode(100, 0, false, 0);
  auto channel = Channel(Target(), kRetryConfig);
  ASSERT_NE(channel, nullptr);
  auto stub = FaultService::NewStub(channel);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(UntilAllPicked(stub.get()));
  Stretch before;
  ASSERT_TRUE(UntilLeft(stub.get(), 1, &before))
      << "the failing backend was never ejected";
  const absl::Duration took = absl::Now() - start;
  const Stretch after = Calls(stub.get(), 600);
  std::fprintf(stderr,
               "failing backend left after %.2f s: %d/%d calls ok before, "
               "%d/%d after, attempts after %lld %lld %lld\n",
               absl::ToDoubleSeconds(took), before.ok, before.calls, after.ok,
               after.calls, static_cast<long long>(after.attempts[0]),
               static_cast<long long>(after.attempts[1]),
               static_cast<long long>(after.attempts[2]));
  EXPECT_EQ(after.ok, after.calls);
  EXPECT_EQ(after.attempts[1], 0);
  EXPECT_EQ(after.attempts[0] + after.attempts[2], after.calls);
  // Before: a call fails only when all 3 attempts land on the bad backend.
  EXPECT_GE(before.ok, before.calls * 0.95);
  EXPECT_EQ(sink_->openings.load(), 0);
}

// Without outlier detection the bad backend keeps its third of the first
// attempts for as long as it fails: what the test above is measured
// against (the issue's 96.7-97.3% success at two callers and more).
TEST_F(BackendsTest, WithoutOutlierDetectionTheFailingBackendKeepsItsShare) {
  servers_[1]->SetMode(100, 0, false, 0);
  auto channel = Channel(Target(), kRetryConfig, [](Options& options) {
    options.outlier_detection.enabled = false;
  });
  ASSERT_NE(channel, nullptr);
  auto stub = FaultService::NewStub(channel);
  // Longer than the default interval, twice.
  const absl::Time end = absl::Now() + absl::Milliseconds(2500);
  while (absl::Now() < end) Calls(stub.get(), 100);
  const Stretch last = Calls(stub.get(), 300);
  EXPECT_GE(last.attempts[1], 300 / 4);
}

// One backend answers 300 ms late. A hedge's copy is a call of its own too:
// the copy that loses the race is cancelled, and A50 counts a cancelled
// call as a failure of its backend. With every slow first copy hedged (the
// extra-load cap raised here: at its default of 5% most of them are not,
// and the slow backend answers OK) and one caller (round_robin's next pick
// after the slow backend is another one, so every hedge wins and every
// slow copy is cancelled), the slow backend fails all its calls and is
// ejected; then no call waits for it. With many callers at once, hedges
// land on the slow backend too, and it fails too few (docs/backends.md).
TEST_F(BackendsTest, HedgesLeaveASlowBackendWhoseCopiesTheyCancel) {
  servers_[1]->SetMode(0, 300, false, 0);
  auto channel = Channel(Target(), R"json({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
     "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.02s",
                       "nonFatalStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"maxExtraLoad": 1}}]})json");
  ASSERT_NE(channel, nullptr);
  auto stub = FaultService::NewStub(channel);
  ASSERT_TRUE(UntilAllPicked(stub.get()));
  Stretch before;
  ASSERT_TRUE(UntilLeft(stub.get(), 1, &before, /*callers=*/1))
      << "the slow backend was never ejected";
  EXPECT_EQ(before.ok, before.calls);
  const Stretch after = Calls(stub.get(), 600, 1);
  std::fprintf(stderr,
               "slow backend left after %d calls; after: %d/%d ok, slowest "
               "%.1f ms, attempts %lld %lld %lld\n",
               before.calls, after.ok, after.calls,
               absl::ToDoubleMilliseconds(after.slowest),
               static_cast<long long>(after.attempts[0]),
               static_cast<long long>(after.attempts[1]),
               static_cast<long long>(after.attempts[2]));
  EXPECT_EQ(after.ok, after.calls);
  // No attempt at the slow backend: no call waited for it (the slowest
  // call is printed, not asserted: a loaded machine can stall any call).
  EXPECT_EQ(after.attempts[1], 0);
}

// A port with nothing listening: connections are refused. round_robin only
// picks backends that are connected, so no call or attempt is lost, with
// or without outlier detection (which has no calls to count there).
TEST_F(BackendsTest, ABackendThatRefusesConnectionsCostsNoCall) {
  // Bound but not listening: connecting to it is refused, and the port is
  // not given to anyone else while the test runs.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string refused = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  for (bool on : {true, false}) {
    auto channel = Channel(
        Target(refused), kRetryConfig,
        [&](Options& options) { options.outlier_detection.enabled = on; });
    ASSERT_NE(channel, nullptr);
    auto stub = FaultService::NewStub(channel);
    const Stretch s = Calls(stub.get(), 600);
    EXPECT_EQ(s.ok, s.calls) << on;
    EXPECT_EQ(s.attempts[0] + s.attempts[1], s.calls) << on;
  }
  close(fd);
}

// With no policy chosen gRPC uses pick_first: every call and every retry
// goes to the first backend that connected. When that backend fails
// everything, every attempt fails there, the other two never see one, and
// outlier detection, which CreateChannel does not add here, could not help:
// it compares backends, and only one has calls. Choose round_robin.
TEST_F(BackendsTest, WithPickFirstEveryAttemptGoesToOneBackend) {
  servers_[0]->SetMode(100, 0, false, 0);
  auto channel = Channel(Target(), kRetryConfig, nullptr, "");
  ASSERT_NE(channel, nullptr);
  auto stub = FaultService::NewStub(channel);
  const Stretch s = Calls(stub.get(), 15, 1);
  EXPECT_EQ(s.ok, 0);
  EXPECT_EQ(s.attempts[0], 3 * 15);
  EXPECT_EQ(s.attempts[1] + s.attempts[2], 0);
}

}  // namespace
}  // namespace rpcguard
