// Copyright rpcguard authors.
//
// PlanCall decides how a call runs from the method's policy and the call's
// facts. One table row per branch; every row names the mode it expects.

#include "rpcguard/decision/call_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace {

MethodPolicy Declared(Idempotency i, int max_attempts = 3) {
  MethodPolicy p;
  p.idempotency = i;
  p.retry.max_attempts = max_attempts;
  return p;
}

struct Row {
  std::string name;
  MethodPolicy policy;
  CallFacts facts;
  CallMode mode;
  Idempotency idempotency;
  bool may_repeat;
  grpc::StatusCode reject = grpc::StatusCode::OK;
  std::string reject_message;  // exact, when reject is not OK
  GiveUpReason reason = GiveUpReason::kNone;
};

CallFacts Facts() { return CallFacts(); }
CallFacts Callback() {
  CallFacts f;
  f.callback_api = true;
  return f;
}

std::vector<Row> Table() {
  std::vector<Row> rows;
  const MethodPolicy undeclared;
  const MethodPolicy reads = Declared(Idempotency::kNoSideEffects);
  {
    CallFacts f = Callback();
    f.unary = false;
    // Retried until it commits: hijacked, never riding.
    rows.push_back({"StreamingRetriedIsHijacked", reads, f, CallMode::kHijack,
                    Idempotency::kNoSideEffects, true});
  }
  {
    CallFacts f = Callback();
    f.unary = false;
    rows.push_back({"UndeclaredStreamIsSentOnce", undeclared, f,
                    CallMode::kMetadataOnly, Idempotency::kUnknown, false});
  }
  {
    CallFacts f = Callback();
    f.unary = false;
    f.hedging_for_method = true;
    MethodPolicy hedged = reads;
    hedged.hedging.emplace();
    rows.push_back({"StreamWithItsOwnHedgingPolicyFailsFast", hedged, f,
                    CallMode::kFailFast, Idempotency::kNoSideEffects, true,
                    grpc::StatusCode::FAILED_PRECONDITION,
                    "rpcguard: a hedgingPolicy names this streaming method, "
                    "and rpcguard does not hedge streams; give it a "
                    "retryPolicy instead"});
  }
  {
    CallFacts f = Callback();
    f.unary = false;
    MethodPolicy hedged = reads;
    hedged.hedging.emplace();  // a default's: retried instead
    rows.push_back({"StreamUnderADefaultHedgingPolicyIsRetried", hedged, f,
                    CallMode::kHijack, Idempotency::kNoSideEffects, true});
  }
  {
    CallFacts f = Callback();
    f.marked_pass_through = true;
    f.declaration_error = absl::InvalidArgumentError("ignored");
    rows.push_back({"MarkedPassesThroughWhateverElse", reads, f,
                    CallMode::kPassThrough, Idempotency::kUnknown, false});
  }
  {
    CallFacts f = Callback();
    f.declaration_error = absl::InvalidArgumentError("pkg.S.M: bad");
    f.caller_keys = 2;  // the declaration is checked first
    rows.push_back({"BadDeclarationFailsFast", reads, f, CallMode::kFailFast,
                    Idempotency::kNoSideEffects, false,
                    grpc::StatusCode::FAILED_PRECONDITION,
                    "rpcguard: bad retry declaration: pkg.S.M: bad"});
  }
  {
    CallFacts f = Facts();
    f.destination_error = absl::InvalidArgumentError("breaker options differ");
    rows.push_back({"DestinationErrorFailsFast", undeclared, f,
                    CallMode::kFailFast, Idempotency::kUnknown, false,
                    grpc::StatusCode::FAILED_PRECONDITION,
                    "rpcguard: breaker options differ"});
  }
  {
    CallFacts f = Facts();
    f.caller_keys = 2;
    f.caller_key = "k";
    rows.push_back({"TwoKeysFailFast", undeclared, f, CallMode::kFailFast,
                    Idempotency::kUnknown, false,
                    grpc::StatusCode::INVALID_ARGUMENT,
                    "rpcguard: more than one idempotency-key metadata value "
                    "on the call"});
  }
  {
    CallFacts f = Facts();
    f.caller_keys = 1;
    f.caller_key = "";
    rows.push_back({"EmptyKeyFailsFast", undeclared, f, CallMode::kFailFast,
                    Idempotency::kUnknown, false,
                    grpc::StatusCode::INVALID_ARGUMENT,
                    "rpcguard: idempotency-key must be 1 to 255 characters, "
                    "got 0"});
  }
  {
    static const std::string kLong(256, 'k');
    CallFacts f = Facts();
    f.caller_keys = 1;
    f.caller_key = kLong;
    rows.push_back({"LongKeyFailsFast", undeclared, f, CallMode::kFailFast,
                    Idempotency::kUnknown, false,
                    grpc::StatusCode::INVALID_ARGUMENT,
                    "rpcguard: idempotency-key must be 1 to 255 characters, "
                    "got 256"});
  }
  {
    CallFacts f = Facts();
    f.caller_keys = 1;
    f.caller_key = "key\n";
    rows.push_back({"UnprintableKeyFailsFast", undeclared, f,
                    CallMode::kFailFast, Idempotency::kUnknown, false,
                    grpc::StatusCode::INVALID_ARGUMENT,
                    "rpcguard: idempotency-key must be printable ASCII "
                    "(0x20-0x7E)"});
  }
  rows.push_back({"UndeclaredIsSentOnce", undeclared, Callback(),
                  CallMode::kMetadataOnly, Idempotency::kUnknown, false});
  {
    CallFacts f = Facts();
    f.caller_keys = 1;
    f.caller_key = "order-17";
    rows.push_back({"CallerKeyMakesUndeclaredKeyed", undeclared, f,
                    CallMode::kHijack, Idempotency::kKeyed, true});
  }
  {
    CallFacts f = Callback();
    f.caller_keys = 1;
    f.caller_key = "order-17";
    rows.push_back({"CallerKeyKeepsDeclaredIdempotency", reads, f,
                    CallMode::kRide, Idempotency::kNoSideEffects, true});
  }
  rows.push_back({"OneAttemptIsSentOnceButMayRepeat",
                  Declared(Idempotency::kIdempotent, 1), Callback(),
                  CallMode::kMetadataOnly, Idempotency::kIdempotent, true});
  rows.push_back({"RetriableSyncOrCqIsHijacked", reads, Facts(),
                  CallMode::kHijack, Idempotency::kNoSideEffects, true});
  rows.push_back({"RetriableCallbackRides", reads, Callback(), CallMode::kRide,
                  Idempotency::kNoSideEffects, true});
  {
    CallFacts f = Callback();
    f.response_may_be_message = false;
    rows.push_back({"ByteBufferResponseIsSentOnceAndSaysSo", reads, f,
                    CallMode::kMetadataOnly, Idempotency::kNoSideEffects, true,
                    grpc::StatusCode::OK, "", GiveUpReason::kUnsupportedCall});
  }
  {
    CallFacts f = Facts();
    f.response_may_be_message = false;
    MethodPolicy p = reads;
    p.timeout = absl::Seconds(1);
    rows.push_back({"ByteBufferResponseIsSentOnceEvenWithATimeout", p, f,
                    CallMode::kMetadataOnly, Idempotency::kNoSideEffects, true,
                    grpc::StatusCode::OK, "", GiveUpReason::kUnsupportedCall});
  }
  {
    CallFacts f = Callback();
    f.response_may_be_message = false;
    rows.push_back({"ByteBufferResponseOfAMethodNeverRetriedIsPlain",
                    undeclared, f, CallMode::kMetadataOnly,
                    Idempotency::kUnknown, false});
  }
  {
    MethodPolicy p = reads;
    p.per_attempt_timeout = absl::Milliseconds(100);
    rows.push_back({"PerAttemptTimeoutIsHijacked", p, Callback(),
                    CallMode::kHijack, Idempotency::kNoSideEffects, true});
  }
  {
    MethodPolicy p = undeclared;
    p.timeout = absl::Seconds(1);
    rows.push_back({"MethodTimeoutIsHijackedEvenIfNeverRetried", p, Callback(),
                    CallMode::kHijack, Idempotency::kUnknown, false});
  }
  {
    MethodPolicy p = reads;
    p.wait_for_ready = true;
    rows.push_back({"WaitForReadyIsHijacked", p, Callback(), CallMode::kHijack,
                    Idempotency::kNoSideEffects, true});
  }
  return rows;
}

class CallPlanTableTest : public ::testing::TestWithParam<Row> {};

TEST_P(CallPlanTableTest, PlansTheDocumentedMode) {
  const Row& row = GetParam();
  const CallPlan plan = PlanCall(row.policy, row.facts);
  EXPECT_EQ(CallModeName(plan.mode), CallModeName(row.mode));
  EXPECT_EQ(IdempotencyName(plan.idempotency),
            IdempotencyName(row.idempotency));
  EXPECT_EQ(plan.may_repeat, row.may_repeat);
  EXPECT_EQ(plan.reject.error_code(), row.reject);
  EXPECT_EQ(plan.reject.error_message(), row.reject_message);
  EXPECT_EQ(GiveUpReasonName(plan.reason), GiveUpReasonName(row.reason));
}

INSTANTIATE_TEST_SUITE_P(Rows, CallPlanTableTest, ::testing::ValuesIn(Table()),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return info.param.name;
                         });

TEST(CallPlanTest, BreakerRefusalFailsFastWithItsReason) {
  CallFacts facts;
  facts.callback_api = true;
  CallPlan plan = PlanCall(Declared(Idempotency::kNoSideEffects), facts);
  ASSERT_EQ(plan.mode, CallMode::kRide);
  plan = RefusedByBreaker(plan, "circuit breaker \"x\" is open");
  EXPECT_EQ(plan.mode, CallMode::kFailFast);
  EXPECT_EQ(plan.reason, GiveUpReason::kBreakerOpen);
  EXPECT_EQ(plan.reject.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(plan.reject.error_message(),
            "rpcguard: circuit breaker \"x\" is open");
  // What the call was stays known (for its trace and stats).
  EXPECT_EQ(plan.idempotency, Idempotency::kNoSideEffects);
  EXPECT_TRUE(plan.may_repeat);
}

// A hedged call rides its first copy where a retried one would (the
// callback API, nothing the application's call cannot carry); elsewhere
// every copy is rpcguard's own.
TEST(CallPlanTest, AHedgedCallbackCallRidesItsFirstCopy) {
  MethodPolicy hedged = Declared(Idempotency::kNoSideEffects);
  hedged.hedging.emplace();
  CallPlan plan = PlanCall(hedged, Callback());
  EXPECT_TRUE(plan.hedge);
  EXPECT_EQ(plan.mode, CallMode::kRide);
  plan = PlanCall(hedged, Facts());
  EXPECT_TRUE(plan.hedge);
  EXPECT_EQ(plan.mode, CallMode::kHijack);
  MethodPolicy with_timeout = hedged;
  with_timeout.timeout = absl::Seconds(1);
  EXPECT_EQ(PlanCall(with_timeout, Callback()).mode, CallMode::kHijack);
  MethodPolicy waits = hedged;
  waits.wait_for_ready = true;
  EXPECT_EQ(PlanCall(waits, Callback()).mode, CallMode::kHijack);
}

TEST(CallPlanTest, ModeNamesAreDistinct) {
  const CallMode modes[] = {CallMode::kPassThrough, CallMode::kMetadataOnly,
                            CallMode::kRide, CallMode::kHijack,
                            CallMode::kFailFast};
  std::vector<std::string> names;
  for (CallMode m : modes) names.emplace_back(CallModeName(m));
  EXPECT_EQ(names, (std::vector<std::string>{"pass_through", "metadata_only",
                                             "ride", "hijack", "fail_fast"}));
}

TEST(ValidateIdempotencyKeyTest, AcceptsPrintableAsciiUpToTheLimit) {
  EXPECT_TRUE(ValidateIdempotencyKey("a").ok());
  EXPECT_TRUE(ValidateIdempotencyKey(std::string(255, '~')).ok());
  EXPECT_TRUE(ValidateIdempotencyKey(" !/0-9:@A~").ok());
  EXPECT_FALSE(ValidateIdempotencyKey(std::string("a\x7f", 2)).ok());
  EXPECT_FALSE(ValidateIdempotencyKey(std::string("a\0b", 3)).ok());
  EXPECT_FALSE(ValidateIdempotencyKey("caf\xc3\xa9").ok());
}

}  // namespace
}  // namespace rpcguard
