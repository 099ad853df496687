// Copyright rpcguard authors.
//
// ApplyCallPolicy and ValidateCallPolicy: each field's effect on the
// method's policy, the safety rule (a call policy never makes an undeclared
// method retriable), and bad values named by field. No channel.

#include "rpcguard/decision/call_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rpcguard/decision/call_plan.h"

namespace rpcguard {
namespace {

MethodPolicy Retried() {
  MethodPolicy p;
  p.idempotency = Idempotency::kIdempotent;
  p.retry.max_attempts = 5;
  p.retry.backoff.initial = absl::Milliseconds(20);
  p.retry.backoff.max = absl::Milliseconds(200);
  p.retry.backoff.multiplier = 2;
  p.per_attempt_timeout = absl::Seconds(1);
  return p;
}

MethodPolicy Hedged() {
  MethodPolicy p;
  p.idempotency = Idempotency::kNoSideEffects;
  p.hedging.emplace();
  p.hedging->max_attempts = 4;
  p.hedging->delay = absl::Milliseconds(10);
  return p;
}

// The message of ApplyCallPolicy's error, or "OK".
std::string Error(const MethodPolicy& method, const CallPolicy& call) {
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(method, call);
  if (p.ok()) return "OK";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(CallPolicyTest, EmptyPolicyChangesNothing) {
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Retried(), CallPolicy{});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->retry.max_attempts, 5);
  EXPECT_EQ(p->retry.backoff.initial, absl::Milliseconds(20));
  EXPECT_EQ(p->per_attempt_timeout, absl::Seconds(1));
  EXPECT_EQ(p->idempotency, Idempotency::kIdempotent);
}

TEST(CallPolicyTest, EachFieldReplacesTheMethods) {
  CallPolicy call;
  call.max_attempts = 3;
  call.per_attempt_timeout = absl::Milliseconds(250);
  call.initial_backoff = absl::Milliseconds(5);
  call.max_backoff = absl::Milliseconds(50);
  call.backoff_multiplier = 1.5;
  call.jitter = Jitter::kA6;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Retried(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->retry.max_attempts, 3);
  EXPECT_EQ(p->per_attempt_timeout, absl::Milliseconds(250));
  EXPECT_EQ(p->retry.backoff.initial, absl::Milliseconds(5));
  EXPECT_EQ(p->retry.backoff.max, absl::Milliseconds(50));
  EXPECT_EQ(p->retry.backoff.multiplier, 1.5);
  EXPECT_EQ(p->retry.backoff.jitter, Jitter::kA6);
  // What a call policy cannot say stays the method's.
  EXPECT_EQ(p->idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(p->timeout, absl::InfiniteDuration());
}

TEST(CallPolicyTest, InfinitePerAttemptTimeoutRemovesTheMethods) {
  CallPolicy call;
  call.per_attempt_timeout = absl::InfiniteDuration();
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Retried(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->per_attempt_timeout, absl::InfiniteDuration());
}

TEST(CallPolicyTest, MaxAttemptsOneIsNotRetried) {
  CallPolicy call;
  call.max_attempts = 1;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Retried(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->retry.max_attempts, 1);
  const CallPlan plan = PlanCall(*p, CallFacts{});
  EXPECT_EQ(plan.mode, CallMode::kMetadataOnly);
}

TEST(CallPolicyTest, MaxAttemptsAppliesToHedgedCopies) {
  CallPolicy call;
  call.max_attempts = 2;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Hedged(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->hedging.has_value());
  EXPECT_EQ(p->hedging->max_attempts, 2);
  EXPECT_EQ(p->retry.max_attempts, 2);
}

TEST(CallPolicyTest, MaxAttemptsOneOnAHedgedMethodSendsOneCopy) {
  CallPolicy call;
  call.max_attempts = 1;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Hedged(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->hedging.has_value());
  EXPECT_EQ(PlanCall(*p, CallFacts{}).mode, CallMode::kMetadataOnly);
}

TEST(CallPolicyTest, HedgingOffRetriesInstead) {
  CallPolicy call;
  call.hedging = false;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(Hedged(), call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->hedging.has_value());
  CallFacts facts;
  facts.hedging_for_method = true;
  EXPECT_FALSE(PlanCall(*p, facts).hedge);
}

TEST(CallPolicyTest, HedgingOnCountsAsWrittenForTheMethod) {
  MethodPolicy method = Hedged();
  method.idempotency = Idempotency::kIdempotent;
  // A service-wide hedging policy does not hedge an IDEMPOTENT method...
  EXPECT_FALSE(PlanCall(method, CallFacts{}).hedge);
  // ... unless the call asks for it.
  CallPolicy call;
  call.hedging = true;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(method, call);
  ASSERT_TRUE(p.ok()) << p.status();
  CallFacts facts;
  facts.hedging_for_method = HedgingForMethod(false, &call);
  EXPECT_TRUE(facts.hedging_for_method);
  EXPECT_TRUE(PlanCall(*p, facts).hedge);
  EXPECT_FALSE(HedgingForMethod(false, nullptr));
}

TEST(CallPolicyTest, HedgingOnNeedsTheMethodsHedgingPolicy) {
  CallPolicy call;
  call.hedging = true;
  EXPECT_EQ(Error(Retried(), call),
            "CallPolicy.hedging: the method has no hedgingPolicy to turn on");
}

// The safety rule: no CallPolicy makes an UNKNOWN method retriable.
TEST(CallPolicyTest, NeverMakesAnUndeclaredMethodRetriable) {
  MethodPolicy method;  // UNKNOWN, as a method nobody declared
  CallPolicy call;
  call.max_attempts = 5;
  call.hedging = false;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(method, call);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->idempotency, Idempotency::kUnknown);
  const CallPlan plan = PlanCall(*p, CallFacts{});
  EXPECT_EQ(plan.mode, CallMode::kMetadataOnly);
  EXPECT_FALSE(plan.may_repeat);
  // The caller's own key makes it KEYED, as without a call policy.
  CallFacts keyed;
  keyed.caller_keys = 1;
  keyed.caller_key = "order-42";
  const CallPlan with_key = PlanCall(*p, keyed);
  EXPECT_TRUE(with_key.may_repeat);
  EXPECT_EQ(with_key.mode, CallMode::kHijack);
}

TEST(CallPolicyTest, HedgingOnNeverHedgesAnUndeclaredMethod) {
  MethodPolicy method = Hedged();
  method.idempotency = Idempotency::kUnknown;
  CallPolicy call;
  call.hedging = true;
  absl::StatusOr<MethodPolicy> p = ApplyCallPolicy(method, call);
  ASSERT_TRUE(p.ok()) << p.status();
  CallFacts facts;
  facts.hedging_for_method = HedgingForMethod(false, &call);
  facts.caller_keys = 1;
  facts.caller_key = "k";
  EXPECT_FALSE(PlanCall(*p, facts).hedge);
}

TEST(CallPolicyTest, BadValuesNameTheField) {
  auto error = [](auto set) {
    CallPolicy call;
    set(call);
    return Error(Retried(), call);
  };
  EXPECT_EQ(error([](CallPolicy& c) { c.max_attempts = 0; }),
            "CallPolicy.max_attempts: must be at least 1");
  EXPECT_EQ(error([](CallPolicy& c) { c.max_attempts = 11; }),
            "CallPolicy.max_attempts: must be at most 10");
  EXPECT_EQ(error([](CallPolicy& c) {
              c.per_attempt_timeout = absl::ZeroDuration();
            }),
            "CallPolicy.per_attempt_timeout: must be greater than 0");
  EXPECT_EQ(error([](CallPolicy& c) { c.initial_backoff = -absl::Seconds(1); }),
            "CallPolicy.initial_backoff: must be greater than 0");
  EXPECT_EQ(
      error([](CallPolicy& c) { c.max_backoff = absl::InfiniteDuration(); }),
      "CallPolicy.max_backoff: must be finite");
  EXPECT_EQ(error([](CallPolicy& c) {
              c.initial_backoff = absl::Seconds(2);
              c.max_backoff = absl::Seconds(1);
            }),
            "CallPolicy.max_backoff: must be at least initial_backoff");
  EXPECT_EQ(error([](CallPolicy& c) { c.backoff_multiplier = 0; }),
            "CallPolicy.backoff_multiplier: must be greater than 0");
  EXPECT_EQ(error([](CallPolicy& c) {
              c.backoff_multiplier = std::numeric_limits<double>::quiet_NaN();
            }),
            "CallPolicy.backoff_multiplier: must be greater than 0");
  EXPECT_EQ(error([](CallPolicy& c) { c.backoff_multiplier = 5000; }),
            "CallPolicy.backoff_multiplier: must be at most 1000");
  EXPECT_EQ(error([](CallPolicy& c) {
              c.max_attempts = 1;
              c.hedging = true;
            }),
            "CallPolicy.hedging: cannot be on with max_attempts 1");
}

TEST(CallPolicyTest, BackoffBoundCheckedAgainstTheMethods) {
  CallPolicy call;
  call.max_backoff = absl::Milliseconds(10);  // method's initial is 20 ms
  EXPECT_EQ(Error(Retried(), call),
            "CallPolicy.max_backoff: leaves maxBackoff 10ms below "
            "initialBackoff 20ms");
  call = CallPolicy{};
  call.initial_backoff = absl::Seconds(1);  // method's max is 200 ms
  EXPECT_EQ(Error(Retried(), call),
            "CallPolicy.initial_backoff: leaves maxBackoff 200ms below "
            "initialBackoff 1s");
}

TEST(CallPolicyTest, ValidateCallPolicyNeedsNoMethod) {
  CallPolicy call;
  EXPECT_TRUE(ValidateCallPolicy(call).ok());
  call.max_attempts = 10;
  EXPECT_TRUE(ValidateCallPolicy(call).ok());
  call.max_attempts = 42;
  EXPECT_EQ(ValidateCallPolicy(call).message(),
            "CallPolicy.max_attempts: must be at most 10");
}

// An enum field cast from an integer outside its enum is refused with the
// field named; before, a jitter of 42 ran as FULL and a trace verbosity of
// 42 passed here and failed only the call.
TEST(CallPolicyTest, EnumOutsideItsValuesNamesTheField) {
  CallPolicy call;
  call.jitter = static_cast<Jitter>(42);
  EXPECT_EQ(ValidateCallPolicy(call).message(),
            "CallPolicy.jitter: must be FULL, A6 or DECORRELATED, not 42");
  EXPECT_EQ(Error(Retried(), call),
            "CallPolicy.jitter: must be FULL, A6 or DECORRELATED, not 42");
  call = CallPolicy{};
  call.trace_verbosity = static_cast<TraceVerbosity>(42);
  EXPECT_EQ(ValidateCallPolicy(call).message(),
            "CallPolicy.trace_verbosity: must be OFF, GIVE_UPS, RETRIES or "
            "ALL, not 42");
  call.trace_verbosity = static_cast<TraceVerbosity>(-1);
  EXPECT_FALSE(ValidateCallPolicy(call).ok());
  for (int v = 0; v < kNumTraceVerbosities; ++v) {
    call.trace_verbosity = static_cast<TraceVerbosity>(v);
    EXPECT_TRUE(ValidateCallPolicy(call).ok()) << v;
  }
  for (Jitter j : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
    call = CallPolicy{};
    call.jitter = j;
    EXPECT_TRUE(ValidateCallPolicy(call).ok()) << JitterName(j);
  }
}

}  // namespace
}  // namespace rpcguard
