// Copyright rpcguard authors.
//
// The rpcguard-call-policy entry: the round trip of every field, malformed
// input refused with the field named (never a crash), and TakeCallPolicy
// always erasing the entry.

#include "rpcguard/internal/grpc/call_policy_carrier.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>

#include "absl/time/time.h"
#include "rpcguard/channel.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {
namespace {

// The message of ParseCallPolicy's error, or "OK".
std::string ParseError(absl::string_view text) {
  absl::StatusOr<CallPolicy> p = ParseCallPolicy(text);
  if (p.ok()) return "OK";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(CallPolicyCarrierTest, EveryFieldRoundTrips) {
  CallPolicy call;
  call.max_attempts = 3;
  call.per_attempt_timeout = absl::Microseconds(250500);
  call.initial_backoff = absl::Nanoseconds(1);
  call.max_backoff = absl::Hours(2) + absl::Seconds(1);
  call.backoff_multiplier = 0.1;  // not exact in binary: all digits kept
  call.jitter = Jitter::kDecorrelated;
  call.hedging = false;
  call.trace_verbosity = TraceVerbosity::kGiveUps;
  const std::string text = EncodeCallPolicy(call);
  absl::StatusOr<CallPolicy> back = ParseCallPolicy(text);
  ASSERT_TRUE(back.ok()) << back.status() << " for " << text;
  EXPECT_EQ(back->max_attempts, 3);
  EXPECT_EQ(back->per_attempt_timeout, absl::Microseconds(250500));
  EXPECT_EQ(back->initial_backoff, absl::Nanoseconds(1));
  EXPECT_EQ(back->max_backoff, absl::Hours(2) + absl::Seconds(1));
  EXPECT_EQ(back->backoff_multiplier, 0.1);
  EXPECT_EQ(back->jitter, Jitter::kDecorrelated);
  EXPECT_EQ(back->hedging, false);
  EXPECT_EQ(back->trace_verbosity, TraceVerbosity::kGiveUps);
}

TEST(CallPolicyCarrierTest, OnlySetFieldsAreWritten) {
  CallPolicy call;
  EXPECT_EQ(EncodeCallPolicy(call), "");
  call.max_attempts = 1;
  call.per_attempt_timeout = absl::InfiniteDuration();
  call.hedging = true;
  EXPECT_EQ(EncodeCallPolicy(call),
            "max_attempts=1;per_attempt_timeout=inf;hedging=true");
  absl::StatusOr<CallPolicy> back = ParseCallPolicy(EncodeCallPolicy(call));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->per_attempt_timeout, absl::InfiniteDuration());
  EXPECT_FALSE(back->initial_backoff.has_value());
  EXPECT_FALSE(back->trace_verbosity.has_value());
}

TEST(CallPolicyCarrierTest, MalformedInputNamesTheField) {
  EXPECT_EQ(ParseError("max_attempts=three"),
            "CallPolicy.max_attempts: not an integer: \"three\"");
  EXPECT_EQ(ParseError("max_attempts=99999999999999999999"),
            "CallPolicy.max_attempts: not an integer: "
            "\"99999999999999999999\"");
  EXPECT_EQ(ParseError("per_attempt_timeout=soon"),
            "CallPolicy.per_attempt_timeout: not a duration: \"soon\"");
  EXPECT_EQ(ParseError("initial_backoff="),
            "CallPolicy.initial_backoff: not a duration: \"\"");
  EXPECT_EQ(ParseError("max_backoff=1"),
            "CallPolicy.max_backoff: not a duration: \"1\"");
  EXPECT_EQ(ParseError("backoff_multiplier=2x"),
            "CallPolicy.backoff_multiplier: not a number: \"2x\"");
  EXPECT_EQ(ParseError("jitter=SOME"),
            "CallPolicy.jitter: not a jitter: \"SOME\"");
  EXPECT_EQ(ParseError("hedging=1"),
            "CallPolicy.hedging: not true or false: \"1\"");
  EXPECT_EQ(ParseError("trace_verbosity=7"),
            "CallPolicy.trace_verbosity: not a trace verbosity: \"7\"");
  EXPECT_EQ(ParseError("max_attempts=2;max_attempts=3"),
            "CallPolicy.max_attempts: given twice: \"3\"");
  EXPECT_EQ(ParseError("retries=2"),
            "CallPolicy.retries: unknown field: \"2\"");
  EXPECT_EQ(ParseError("max_attempts=2;"),
            "CallPolicy: an item is not key=value: \"\"");
  EXPECT_EQ(ParseError("garbage"),
            "CallPolicy: an item is not key=value: \"garbage\"");
  EXPECT_EQ(ParseError(std::string("max_attempts=\x01\xff", 15)),
            "CallPolicy.max_attempts: not an integer: \"\\x01\\xff\"");
}

TEST(CallPolicyCarrierTest, OutOfRangeEnumIsWrittenSoThatItFails) {
  CallPolicy call;
  call.trace_verbosity = static_cast<TraceVerbosity>(42);
  EXPECT_EQ(ParseError(EncodeCallPolicy(call)),
            "CallPolicy.trace_verbosity: not a trace verbosity: \"42\"");
  // The same for jitter: never written as "FULL" (which it used to be).
  CallPolicy jitter;
  jitter.jitter = static_cast<Jitter>(42);
  EXPECT_EQ(ParseError(EncodeCallPolicy(jitter)),
            "CallPolicy.jitter: not a jitter: \"42\"");
}

TEST(CallPolicyCarrierTest, NonFiniteNumbersParseForTheChecksToRefuse) {
  CallPolicy call;
  call.backoff_multiplier = std::numeric_limits<double>::infinity();
  absl::StatusOr<CallPolicy> back = ParseCallPolicy(EncodeCallPolicy(call));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ValidateCallPolicy(*back).message(),
            "CallPolicy.backoff_multiplier: must be at most 1000");
}

TEST(CallPolicyCarrierTest, TakeErasesTheEntry) {
  std::multimap<std::string, std::string> md = {
      {"x-app", "1"}, {kCallPolicyHeader, "max_attempts=2"}};
  absl::StatusOr<std::optional<CallPolicy>> taken = TakeCallPolicy(&md);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->max_attempts, 2);
  EXPECT_EQ(md.count(kCallPolicyHeader), 0u);
  EXPECT_EQ(md.count("x-app"), 1u);
}

TEST(CallPolicyCarrierTest, TakeWithoutEntryIsNullopt) {
  std::multimap<std::string, std::string> md;
  absl::StatusOr<std::optional<CallPolicy>> taken = TakeCallPolicy(&md);
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(taken->has_value());
  md.emplace("x-app", "1");
  taken = TakeCallPolicy(&md);
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(taken->has_value());
  EXPECT_EQ(md.size(), 1u);
}

TEST(CallPolicyCarrierTest, TakeErasesEvenABadEntry) {
  std::multimap<std::string, std::string> md = {
      {kCallPolicyHeader, "max_attempts=x"}};
  absl::StatusOr<std::optional<CallPolicy>> taken = TakeCallPolicy(&md);
  EXPECT_EQ(taken.status().message(),
            "CallPolicy.max_attempts: not an integer: \"x\"");
  EXPECT_TRUE(md.empty());
}

TEST(CallPolicyCarrierTest, TakeRefusesTwoEntries) {
  std::multimap<std::string, std::string> md = {
      {kCallPolicyHeader, "max_attempts=2"},
      {kCallPolicyHeader, "max_attempts=3"}};
  absl::StatusOr<std::optional<CallPolicy>> taken = TakeCallPolicy(&md);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(taken.status().message(),
            "CallPolicy: set more than once on one call");
  EXPECT_TRUE(md.empty());
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
