// Copyright rpcguard authors.
//
// The public test kit (rpcguard/testing/) end to end: a real gRPC server
// running a generated service (examples/payments.proto, with the sync and
// the callback API), the FaultInjector in front of it, and clients through
// rpcguard and through a plain channel.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "examples/payments.grpc.pb.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/rpcguard.h"
#include "rpcguard/testing/fake_clock.h"
#include "rpcguard/testing/fault_injector.h"
#include "rpcguard/testing/recorder.h"
#include "tests/testing/fault_server.h"

namespace rpcguard {
namespace {

using ::examples::payments::v1::Balance;
using ::examples::payments::v1::BalanceRequest;
using ::examples::payments::v1::ChargeReply;
using ::examples::payments::v1::ChargeRequest;
using ::examples::payments::v1::Payments;
using ::examples::payments::v1::RefundRequest;
using ::rpcguard::testing::FakeClock;
using ::rpcguard::testing::FaultInjector;
using ::rpcguard::testing::FaultRule;
using ::rpcguard::testing::InjectedFault;
using ::rpcguard::testing::RecordedAttempt;
using ::rpcguard::testing::RecordedCall;

constexpr char kCharge[] = "/examples.payments.v1.Payments/Charge";
constexpr char kGetBalance[] = "/examples.payments.v1.Payments/GetBalance";
constexpr char kRefund[] = "/examples.payments.v1.Payments/Refund";

// Short backoffs, so that a wait the test sees is the server's hint; the
// .proto says which methods may be repeated (Charge KEYED, GetBalance
// NO_SIDE_EFFECTS, Refund undeclared).
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "examples.payments.v1.Payments"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}},
  {"name": [{"service": "examples.payments.v1.Payments",
             "method": "GetBalance"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.01s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"perAttemptTimeout": "0.3s"}}
]})json";

std::string Header(const std::multimap<grpc::string_ref, grpc::string_ref>& md,
                   const std::string& key) {
  auto it = md.find(key);
  return it == md.end() ? ""
                        : std::string(it->second.data(), it->second.size());
}

// The payments service's state: a charge is applied once per idempotency
// key, as a service that deduplicates does.
class Ledger {
 public:
  std::string Charge(const std::string& key, int64_t cents) {
    absl::MutexLock lock(&mu_);
    ++charge_runs_;
    auto [it, inserted] =
        charges_.try_emplace(key, absl::StrCat("ch-", charges_.size() + 1));
    if (inserted) balance_ += cents;
    return it->second;
  }
  int64_t balance() {
    absl::MutexLock lock(&mu_);
    return balance_;
  }
  void Refund() {
    absl::MutexLock lock(&mu_);
    ++refunds_;
  }
  int charge_runs() {
    absl::MutexLock lock(&mu_);
    return charge_runs_;
  }
  int charges_applied() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(charges_.size());
  }
  int refunds() {
    absl::MutexLock lock(&mu_);
    return refunds_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> charges_ ABSL_GUARDED_BY(mu_);
  int64_t balance_ ABSL_GUARDED_BY(mu_) = 0;
  int charge_runs_ ABSL_GUARDED_BY(mu_) = 0;
  int refunds_ ABSL_GUARDED_BY(mu_) = 0;
};

class SyncPayments final : public Payments::Service {
 public:
  explicit SyncPayments(Ledger* ledger) : ledger_(ledger) {}
  grpc::Status Charge(grpc::ServerContext* ctx, const ChargeRequest* req,
                      ChargeReply* reply) override {
    reply->set_charge_id(
        ledger_->Charge(Header(ctx->client_metadata(), "idempotency-key"),
                        req->amount_cents()));
    return grpc::Status::OK;
  }
  grpc::Status GetBalance(grpc::ServerContext*, const BalanceRequest*,
                          Balance* reply) override {
    reply->set_cents(ledger_->balance());
    return grpc::Status::OK;
  }
  grpc::Status Refund(grpc::ServerContext*, const RefundRequest*,
                      google::protobuf::Empty*) override {
    ledger_->Refund();
    return grpc::Status::OK;
  }

 private:
  Ledger* const ledger_;
};

class CallbackPayments final : public Payments::CallbackService {
 public:
  explicit CallbackPayments(Ledger* ledger) : ledger_(ledger) {}
  grpc::ServerUnaryReactor* Charge(grpc::CallbackServerContext* ctx,
                                   const ChargeRequest* req,
                                   ChargeReply* reply) override {
    reply->set_charge_id(
        ledger_->Charge(Header(ctx->client_metadata(), "idempotency-key"),
                        req->amount_cents()));
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* GetBalance(grpc::CallbackServerContext* ctx,
                                       const BalanceRequest*,
                                       Balance* reply) override {
    reply->set_cents(ledger_->balance());
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* Refund(grpc::CallbackServerContext* ctx,
                                   const RefundRequest*,
                                   google::protobuf::Empty*) override {
    ledger_->Refund();
    return Done(ctx);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  Ledger* const ledger_;
};

enum class ServerApi { kSync, kCallback };

class TestingKitTest : public ::testing::TestWithParam<ServerApi> {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    if (GetParam() == ServerApi::kSync) {
      service_ = std::make_unique<SyncPayments>(&ledger_);
    } else {
      service_ = std::make_unique<CallbackPayments>(&ledger_);
    }
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(faults_.Start(server_->InProcessChannel({})).ok());

    absl::StatusOr<Config> config = Config::FromJson(kConfig);
    ASSERT_TRUE(config.ok()) << config.status();
    Options options;
    options.config = *config;
    options.breaker_registry = *BreakerRegistry::Create({});
    options.trace_verbosity = TraceVerbosity::kOff;
    auto channel = CreateChannel(faults_.address(),
                                 grpc::InsecureChannelCredentials(), options);
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = Payments::NewStub(*channel);
    plain_stub_ = Payments::NewStub(grpc::CreateChannel(
        faults_.address(), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    faults_.Shutdown();
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status Charge(Payments::Stub* stub, int64_t cents,
                      const std::string& key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    if (!key.empty()) ctx.AddMetadata("idempotency-key", key);
    ChargeRequest req;
    req.set_account("acct-1");
    req.set_amount_cents(cents);
    ChargeReply reply;
    return stub->Charge(&ctx, req, &reply);
  }

  grpc::Status GetBalance(Payments::Stub* stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    BalanceRequest req;
    Balance reply;
    return stub->GetBalance(&ctx, req, &reply);
  }

  grpc::Status Refund(Payments::Stub* stub, const std::string& key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    if (!key.empty()) ctx.AddMetadata("idempotency-key", key);
    RefundRequest req;
    google::protobuf::Empty reply;
    return stub->Refund(&ctx, req, &reply);
  }

  Ledger ledger_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  FaultInjector faults_;
  std::unique_ptr<Payments::Stub> stub_;        // through rpcguard
  std::unique_ptr<Payments::Stub> plain_stub_;  // a plain gRPC channel
};

std::vector<InjectedFault> Faults(const RecordedCall& call) {
  std::vector<InjectedFault> out;
  for (const RecordedAttempt& a : call.attempts) out.push_back(a.fault);
  return out;
}

TEST_P(TestingKitTest, FailedAttemptsNeverReachTheServiceAndRetryWithOneKey) {
  ASSERT_TRUE(faults_.SetRule(FaultRule::Fail(kCharge, 2)).ok());

  grpc::Status status = Charge(stub_.get(), 500);
  ASSERT_TRUE(status.ok()) << status.error_message();

  std::vector<RecordedCall> calls = faults_.recorder().Calls(kCharge);
  ASSERT_EQ(calls.size(), 1u);
  const RecordedCall& call = calls[0];
  ASSERT_EQ(call.attempts.size(), 3u);
  EXPECT_FALSE(call.idempotency_key.empty());
  for (int i = 0; i < 3; ++i) {
    const RecordedAttempt& a = call.attempts[i];
    EXPECT_EQ(a.idempotency_key, call.idempotency_key);
    EXPECT_EQ(a.attempt_header, i + 1);
    EXPECT_EQ(a.number, i + 1);
    EXPECT_TRUE(a.finished);
  }
  EXPECT_EQ(Faults(call), (std::vector<InjectedFault>{InjectedFault::kFailed,
                                                      InjectedFault::kFailed,
                                                      InjectedFault::kNone}));
  EXPECT_EQ(call.attempts[0].code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(call.attempts[2].code, grpc::StatusCode::OK);
  EXPECT_EQ(call.reached_service(), 1);
  EXPECT_EQ(call.attempts[2].service_code, grpc::StatusCode::OK);
  EXPECT_EQ(ledger_.charge_runs(), 1);
  EXPECT_EQ(ledger_.balance(), 500);
}

TEST_P(TestingKitTest, ApplyThenFailKeyedChargeIsAppliedOnce) {
  ASSERT_TRUE(faults_.SetRule(FaultRule::ApplyThenFail(kCharge, 1)).ok());

  grpc::Status status = Charge(stub_.get(), 700);
  ASSERT_TRUE(status.ok()) << status.error_message();

  std::vector<RecordedCall> calls = faults_.recorder().Calls(kCharge);
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].attempts.size(), 2u);
  EXPECT_EQ(calls[0].attempts[0].idempotency_key,
            calls[0].attempts[1].idempotency_key);
  EXPECT_EQ(calls[0].reached_service(), 2);
  EXPECT_EQ(calls[0].attempts[0].fault, InjectedFault::kAppliedThenFailed);
  EXPECT_EQ(calls[0].attempts[0].service_code, grpc::StatusCode::OK);
  EXPECT_EQ(calls[0].attempts[0].code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(calls[0].attempts[1].code, grpc::StatusCode::OK);
  // The service ran twice and applied the charge once, by its key.
  EXPECT_EQ(ledger_.charge_runs(), 2);
  EXPECT_EQ(ledger_.charges_applied(), 1);
  EXPECT_EQ(ledger_.balance(), 700);

  // Without rpcguard the client sees the lost reply as a failure, though
  // the charge was applied.
  status = Charge(plain_stub_.get(), 100, "plain-key");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "rpcguard::testing: injected failure");
  EXPECT_EQ(ledger_.balance(), 800);
}

TEST_P(TestingKitTest, UndeclaredMethodIsNotRepeatedAfterALostReply) {
  ASSERT_TRUE(faults_.SetRule(FaultRule::ApplyThenFail(kRefund, 1)).ok());

  grpc::Status status = Refund(stub_.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "not_idempotent"))
      << status.error_message();
  std::vector<RecordedCall> calls = faults_.recorder().Calls(kRefund);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].attempts.size(), 1u);
  EXPECT_EQ(ledger_.refunds(), 1);
}

TEST_P(TestingKitTest, RetryWaitsForThePushbackTrailer) {
  FaultRule rule = FaultRule::Fail(kGetBalance, 1);
  rule.pushback_ms = 300;
  ASSERT_TRUE(faults_.SetRule(rule).ok());

  ASSERT_TRUE(GetBalance(stub_.get()).ok());

  std::vector<RecordedAttempt> attempts =
      faults_.recorder().Attempts(kGetBalance);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_GE(attempts[1].arrival - attempts[0].arrival, absl::Milliseconds(300));
}

TEST_P(TestingKitTest, RetryWaitsForRetryInfo) {
  FaultRule rule = FaultRule::Fail(kGetBalance, 1);
  rule.retry_info = absl::Milliseconds(300);
  ASSERT_TRUE(faults_.SetRule(rule).ok());

  ASSERT_TRUE(GetBalance(stub_.get()).ok());

  std::vector<RecordedAttempt> attempts =
      faults_.recorder().Attempts(kGetBalance);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_GE(attempts[1].arrival - attempts[0].arrival, absl::Milliseconds(300));
}

TEST_P(TestingKitTest, NegativePushbackStopsRetries) {
  FaultRule rule = FaultRule::Fail(kGetBalance, 1);
  rule.pushback_ms = -1;
  ASSERT_TRUE(faults_.SetRule(rule).ok());

  grpc::Status status = GetBalance(stub_.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "pushback_stop"))
      << status.error_message();
  EXPECT_EQ(faults_.recorder().Attempts(kGetBalance).size(), 1u);
}

TEST_P(TestingKitTest, DelayHoldsTheAttemptBackBeforeTheService) {
  ASSERT_TRUE(
      faults_.SetRule(FaultRule::Delay(kCharge, 1, absl::Milliseconds(200)))
          .ok());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Charge(plain_stub_.get(), 1).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  std::vector<RecordedAttempt> attempts = faults_.recorder().Attempts(kCharge);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].fault, InjectedFault::kDelayed);
  EXPECT_TRUE(attempts[0].reached_service);
}

TEST_P(TestingKitTest, DelayedAttemptCutByItsTimeoutNeverReachesTheService) {
  // GetBalance's perAttemptTimeout is 0.3 s: the first attempt times out
  // while held back, the second passes.
  ASSERT_TRUE(
      faults_.SetRule(FaultRule::Delay(kGetBalance, 1, absl::Seconds(3))).ok());
  const absl::Time start = absl::Now();
  grpc::Status status = GetBalance(stub_.get());
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  std::vector<RecordedAttempt> attempts =
      faults_.recorder().Attempts(kGetBalance);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_FALSE(attempts[0].reached_service);
  EXPECT_TRUE(attempts[1].reached_service);
}

TEST_P(TestingKitTest, RulesChangeWhileTheServerRuns) {
  ASSERT_TRUE(Refund(plain_stub_.get()).ok());

  FaultRule rule = FaultRule::Fail(kRefund, FaultRule::kEveryAttempt,
                                   grpc::StatusCode::PERMISSION_DENIED);
  rule.message = "no refunds today";
  ASSERT_TRUE(faults_.SetRule(rule).ok());
  grpc::Status status = Refund(plain_stub_.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(), "no refunds today");
  ASSERT_EQ(faults_.rules().size(), 1u);

  EXPECT_TRUE(faults_.RemoveRule(kRefund));
  EXPECT_FALSE(faults_.RemoveRule(kRefund));
  ASSERT_TRUE(Refund(plain_stub_.get()).ok());
  EXPECT_EQ(ledger_.refunds(), 2);

  // Calls keep flowing while rules come and go: each ends as the rule in
  // force at its arrival says.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, denied{0}, other{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        grpc::Status s = Refund(plain_stub_.get());
        if (s.ok()) {
          ++ok;
        } else if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
          ++denied;
        } else {
          ++other;
        }
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(faults_.SetRule(rule).ok());
    absl::SleepFor(absl::Milliseconds(5));
    faults_.ClearRules();
    absl::SleepFor(absl::Milliseconds(5));
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(ledger_.refunds(), 2 + ok.load());
}

TEST_P(TestingKitTest, AttemptsCountByKeyOrByAttemptHeader) {
  // A caller's own key makes rpcguard retry even the undeclared Refund.
  // Counted by key, a second call with the same key is its attempt 3.
  ASSERT_TRUE(faults_.SetRule(FaultRule::Fail(kRefund, 1)).ok());
  ASSERT_TRUE(Refund(stub_.get(), "refund-1").ok());
  ASSERT_TRUE(Refund(stub_.get(), "refund-1").ok());
  std::vector<RecordedCall> calls = faults_.recorder().Calls(kRefund);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].attempts.size(), 3u);

  // Counted by rpcguard-attempt, each call's first attempt fails.
  FaultRule per_call = FaultRule::Fail(kRefund, 1);
  per_call.count_by = FaultRule::CountBy::kAttemptHeader;
  ASSERT_TRUE(faults_.SetRule(per_call).ok());
  faults_.recorder().Clear();
  ASSERT_TRUE(Refund(stub_.get(), "refund-2").ok());
  ASSERT_TRUE(Refund(stub_.get(), "refund-2").ok());
  calls = faults_.recorder().Calls(kRefund);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(Faults(calls[0]),
            (std::vector<InjectedFault>{
                InjectedFault::kFailed, InjectedFault::kNone,
                InjectedFault::kFailed, InjectedFault::kNone}));
}

TEST_P(TestingKitTest, ArrivalsAreStampedByTheInjectedClock) {
  FakeClock clock(absl::FromUnixSeconds(1700000000));
  FaultInjector faults(FaultInjector::Options{&clock});
  ASSERT_TRUE(faults.Start(server_->InProcessChannel({})).ok());
  auto stub = Payments::NewStub(grpc::CreateChannel(
      faults.address(), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(GetBalance(stub.get()).ok());
  clock.Advance(absl::Seconds(5));
  ASSERT_TRUE(GetBalance(stub.get()).ok());
  std::vector<RecordedAttempt> attempts = faults.recorder().Attempts();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].arrival, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(attempts[1].arrival, absl::FromUnixSeconds(1700000005));
  EXPECT_EQ(faults.recorder().total_attempts(), 2);
}

TEST_P(TestingKitTest, OneFakeClockDrivesRpcguardAndTheRecorder) {
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  FakeClock clock(t0);
  FaultInjector faults(FaultInjector::Options{&clock});
  ASSERT_TRUE(faults.Start(server_->InProcessChannel({})).ok());
  ASSERT_TRUE(faults.SetRule(FaultRule::Fail(kCharge, 1)).ok());

  absl::Mutex mu;
  std::vector<TraceEvent> events;
  Options options;
  options.config = *Config::FromJson(kConfig);
  options.breaker_registry = *BreakerRegistry::Create({});
  options.clock = &clock;
  options.trace_sink = std::make_shared<CallbackSink>([&](const TraceEvent& e) {
    absl::MutexLock lock(&mu);
    events.push_back(e);
  });
  auto channel = CreateChannel(faults.address(),
                               grpc::InsecureChannelCredentials(), options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = Payments::NewStub(*channel);

  clock.Advance(absl::Minutes(5));
  grpc::Status status = Charge(stub.get(), 10);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // The clock stood still while the call retried: every timestamp is the
  // fake one, on both sides.
  std::vector<RecordedAttempt> attempts = faults.recorder().Attempts(kCharge);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].arrival, t0 + absl::Minutes(5));
  EXPECT_EQ(attempts[1].arrival, t0 + absl::Minutes(5));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(events.size(), 2u);  // the retried attempt and the final one
    for (const TraceEvent& e : events) {
      EXPECT_EQ(e.time, t0 + absl::Minutes(5));
    }
    events.clear();
  }

  // The wall clock alone steps back an hour, as NTP may: trace timestamps
  // follow it; arrivals (monotonic) and the call's decisions do not.
  clock.StepWall(absl::Hours(-1));
  status = Charge(stub.get(), 10);
  ASSERT_TRUE(status.ok()) << status.error_message();
  attempts = faults.recorder().Attempts(kCharge);
  ASSERT_EQ(attempts.size(), 4u);
  EXPECT_EQ(attempts[3].arrival, t0 + absl::Minutes(5));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(events.size(), 2u);
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.time, t0 + absl::Minutes(5) - absl::Hours(1));
    // Charge's 5 s deadline, on the (still) monotonic clock.
    EXPECT_GT(e.deadline_left, absl::Seconds(4));
    EXPECT_LE(e.deadline_left, absl::Seconds(5));
  }
}

INSTANTIATE_TEST_SUITE_P(ServerApis, TestingKitTest,
                         ::testing::Values(ServerApi::kSync,
                                           ServerApi::kCallback),
                         [](const ::testing::TestParamInfo<ServerApi>& info) {
                           return info.param == ServerApi::kSync ? "Sync"
                                                                 : "Callback";
                         });

TEST(FaultRuleTest, BadRulesAreRefusedWithTheField) {
  auto message = [](const FaultRule& rule) {
    return std::string(testing::ValidateFaultRule(rule).message());
  };
  EXPECT_EQ(message(FaultRule::Fail("Charge", 1)),
            "FaultRule: method: must be \"/package.Service/Method\", got "
            "\"Charge\"");
  EXPECT_EQ(message(FaultRule::Fail("/pkg.Svc/", 1)),
            "FaultRule: method: must be \"/package.Service/Method\", got "
            "\"/pkg.Svc/\"");
  EXPECT_EQ(message(FaultRule::Fail("/pkg.Svc/M", 0)),
            "FaultRule /pkg.Svc/M: attempts: must be at least 1, got 0");
  EXPECT_EQ(message(FaultRule::Fail("/pkg.Svc/M", -2)),
            "FaultRule /pkg.Svc/M: attempts: must be at least 1, got -2");
  EXPECT_EQ(message(FaultRule::Fail("/pkg.Svc/M", 1, grpc::StatusCode::OK)),
            "FaultRule /pkg.Svc/M: code: OK is not a failure");
  EXPECT_EQ(
      message(FaultRule::ApplyThenFail("/pkg.Svc/M", 1, grpc::StatusCode::OK)),
      "FaultRule /pkg.Svc/M: code: OK is not a failure");
  EXPECT_EQ(message(FaultRule::Fail("/pkg.Svc/M", 1,
                                    static_cast<grpc::StatusCode>(17))),
            "FaultRule /pkg.Svc/M: code: 17 is not a gRPC status code");
  EXPECT_EQ(message(FaultRule::Delay("/pkg.Svc/M", 1, absl::Seconds(-1))),
            "FaultRule /pkg.Svc/M: delay: must not be negative");
  EXPECT_EQ(message(FaultRule::Delay("/pkg.Svc/M", 1, absl::ZeroDuration())),
            "FaultRule /pkg.Svc/M: no failure and no delay: the rule would "
            "do nothing");
  FaultRule rule = FaultRule::Delay("/pkg.Svc/M", 1, absl::Seconds(1));
  rule.pushback_ms = 10;
  EXPECT_EQ(message(rule),
            "FaultRule /pkg.Svc/M: pushback_ms: needs a failure");
  rule = FaultRule::Fail("/pkg.Svc/M", 1);
  rule.retry_info = absl::Seconds(-1);
  EXPECT_EQ(message(rule),
            "FaultRule /pkg.Svc/M: retry_info: must be finite and not "
            "negative");

  FaultInjector faults;
  ASSERT_TRUE(faults.SetRule(FaultRule::Fail("/pkg.Svc/M", 2)).ok());
  absl::Status status = faults.SetRule(FaultRule::Fail("/pkg.Svc/M", 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // The refused rule left the previous one in force.
  ASSERT_EQ(faults.rules().size(), 1u);
  EXPECT_EQ(faults.rules()[0].attempts, 2);
}

TEST(FaultInjectorTest, StartRefusesBadInput) {
  FaultInjector faults;
  absl::Status status = faults.Start(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "FaultInjector::Start: the backend channel is null");
  auto backend =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  status = faults.Start(backend, 70000);
  EXPECT_EQ(status.message(),
            "FaultInjector::Start: port must be 0 to 65535, got 70000");
  EXPECT_EQ(faults.address(), "");

  ASSERT_TRUE(faults.Start(backend).ok());
  EXPECT_NE(faults.port(), 0);
  status = faults.Start(backend);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);

  FaultInjector second;
  status = second.Start(backend, faults.port());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

  // A backend that is down: its failure reaches the client as it is.
  auto stub = Payments::NewStub(grpc::CreateChannel(
      faults.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  BalanceRequest req;
  Balance reply;
  EXPECT_EQ(stub->GetBalance(&ctx, req, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  faults.Shutdown();
  faults.Shutdown();
  EXPECT_EQ(faults.address(), "");
}

// Against rpcguard's own fault server (a callback service): what passes
// through the injector untouched.
class PassThroughTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(backend_.ok());
    ASSERT_TRUE(faults_
                    .Start(grpc::CreateChannel(
                        backend_.address(), grpc::InsecureChannelCredentials()))
                    .ok());
    stub_ = rpcguard::testing::v1::FaultService::NewStub(grpc::CreateChannel(
        faults_.address(), grpc::InsecureChannelCredentials()));
  }

  rpcguard::testing::FaultServer backend_;
  FaultInjector faults_;
  std::unique_ptr<rpcguard::testing::v1::FaultService::Stub> stub_;
};

TEST_F(PassThroughTest, MetadataDeadlineStatusAndDetailsPassBothWays) {
  grpc::ClientContext ctx;
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(7);
  ctx.set_deadline(deadline);
  ctx.AddMetadata("authorization", "Bearer t0k");
  ctx.AddMetadata("idempotency-key", "key-1");
  ctx.AddMetadata("trace-bin", std::string("\x00\x01\xff", 3));
  rpcguard::testing::v1::FaultRequest req;
  req.set_op_id("pass-1");
  req.set_require_token("t0k");
  req.set_echo_attempt_metadata(true);
  req.set_fail_first(1);
  req.set_retry_info_ms(250);
  req.set_pushback_ms("40");
  rpcguard::testing::v1::FaultReply reply;
  grpc::Status status = stub_->Get(&ctx, req, &reply);

  // The server's own failure, with its details and trailers.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "injected failure on attempt 1");
  EXPECT_EQ(ParseRetryInfo(status.error_details()), absl::Milliseconds(250));
  EXPECT_EQ(Header(ctx.GetServerInitialMetadata(), "fault-attempt"), "1");
  EXPECT_EQ(Header(ctx.GetServerTrailingMetadata(), "fault-attempt-trailer"),
            "1");
  EXPECT_EQ(Header(ctx.GetServerTrailingMetadata(), "grpc-retry-pushback-ms"),
            "40");
  // The client's metadata and deadline reached it (it checked the token).
  rpcguard::testing::OpRecord op = backend_.Op("pass-1");
  ASSERT_EQ(op.attempts, 1);
  EXPECT_EQ(op.keys[0], "key-1");
  EXPECT_LE(absl::AbsDuration(op.deadlines[0] - absl::FromChrono(deadline)),
            absl::Milliseconds(100));

  // The second attempt succeeds and its reply passes.
  grpc::ClientContext ctx2;
  ctx2.AddMetadata("authorization", "Bearer t0k");
  status = stub_->Get(&ctx2, req, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.attempts_seen(), 2);
  EXPECT_EQ(reply.op_id(), "pass-1");
}

TEST_F(PassThroughTest, StreamsPassAndCanBeFailed) {
  grpc::ClientContext ctx;
  rpcguard::testing::v1::FaultRequest req;
  auto reader = stub_->Watch(&ctx, req);
  rpcguard::testing::v1::FaultReply reply;
  int replies = 0;
  while (reader->Read(&reply)) ++replies;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(replies, 3);

  ASSERT_TRUE(
      faults_
          .SetRule(FaultRule::Fail("/rpcguard.testing.v1.FaultService/Watch", 1,
                                   grpc::StatusCode::RESOURCE_EXHAUSTED))
          .ok());
  grpc::ClientContext ctx2;
  reader = stub_->Watch(&ctx2, req);
  EXPECT_FALSE(reader->Read(&reply));
  EXPECT_EQ(reader->Finish().error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(PassThroughTest, UnknownMethodIsTheBackendsToRefuse) {
  grpc::GenericStub generic(grpc::CreateChannel(
      faults_.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/no.Such/Method", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(faults_.recorder().Calls("/no.Such/Method").size(), 1u);
}

TEST_F(PassThroughTest, ShutdownEndsCallsHeldBackByADelay) {
  ASSERT_TRUE(faults_
                  .SetRule(FaultRule::Delay(
                      "/rpcguard.testing.v1.FaultService/Get",
                      FaultRule::kEveryAttempt, absl::Seconds(30)))
                  .ok());
  grpc::ClientContext ctx;
  rpcguard::testing::v1::FaultRequest req;
  rpcguard::testing::v1::FaultReply reply;
  absl::Notification done;
  grpc::Status status;
  stub_->async()->Get(&ctx, &req, &reply, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  while (faults_.recorder().total_attempts() == 0) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Time start = absl::Now();
  faults_.Shutdown(absl::ZeroDuration());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  done.WaitForNotification();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(backend_.Op("").attempts, 0);
  std::vector<RecordedAttempt> attempts = faults_.recorder().Attempts();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_FALSE(attempts[0].reached_service);
  EXPECT_TRUE(attempts[0].finished);
}

}  // namespace
}  // namespace rpcguard
