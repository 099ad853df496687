// Copyright rpcguard authors.
//
// Policies declared in .proto files (proto/rpcguard/testing/v1/declared.proto)
// and their precedence against JSON config, field by field.

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "rpcguard/config.h"

namespace rpcguard {
namespace {

// Keeps the generated descriptors linked into the test.
const char* const kLinked =
    ::rpcguard::testing::v1::Declared::service_full_name();

Config MustParse(absl::string_view json) {
  absl::StatusOr<Config> c = Config::FromJson(json);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config();
}

constexpr int kIdem = kFieldIndexIdempotency;
constexpr int kRetry = kFieldIndexRetry;
constexpr int kHedge = kFieldIndexHedging;

// A method of the linked-in protos is declared even with no config: the
// interceptor gives it state of its own whatever the bound on undeclared
// methods. A made-up method of a linked-in service is not, but its service is.
TEST(ProtoOptionsTest, MethodsOfTheGeneratedPoolAreDeclared) {
  const Config config;
  Config::Declaration d = config.Declared("/rpcguard.testing.v1.Plain/Nothing");
  EXPECT_TRUE(d.method);
  EXPECT_TRUE(d.service);
  d = config.Declared("/rpcguard.testing.v1.Plain/MadeUp");
  EXPECT_FALSE(d.method);
  EXPECT_TRUE(d.service);
  EXPECT_EQ(d.service_name, "rpcguard.testing.v1.Plain");
  d = config.Declared("/rpcguard.testing.v1.NoSuchService/Nothing");
  EXPECT_FALSE(d.method);
  EXPECT_FALSE(d.service);
}

TEST(ProtoOptionsTest, ServiceOptionAppliesToEveryMethod) {
  ASSERT_NE(kLinked, nullptr);
  const ResolvedPolicy r =
      Config().Resolve("/rpcguard.testing.v1.Declared/Inherit");
  ASSERT_TRUE(r.error.ok()) << r.error;
  EXPECT_EQ(r.policy.idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(r.policy.retry.max_attempts, 5);
  // Fields the option left unset keep rpcguard's defaults.
  EXPECT_EQ(r.policy.retry.backoff.initial, absl::Milliseconds(25));
  EXPECT_EQ(r.sources[kIdem], PolicySource::kProtoService);
  EXPECT_EQ(r.sources[kRetry], PolicySource::kProtoService);
}

TEST(ProtoOptionsTest, MethodOptionOutranksServiceOptionFieldByField) {
  const ResolvedPolicy r =
      Config().Resolve("/rpcguard.testing.v1.Declared/Keyed");
  EXPECT_EQ(r.policy.idempotency, Idempotency::kKeyed);
  EXPECT_EQ(r.sources[kIdem], PolicySource::kProtoMethod);
  EXPECT_EQ(r.policy.retry.max_attempts, 5);
  EXPECT_EQ(r.sources[kRetry], PolicySource::kProtoService);
}

TEST(ProtoOptionsTest, ServiceOptionOutranksIdempotencyLevel) {
  const ResolvedPolicy r =
      Config().Resolve("/rpcguard.testing.v1.Declared/Level");
  EXPECT_EQ(r.policy.idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(r.sources[kIdem], PolicySource::kProtoService);
}

TEST(ProtoOptionsTest, ExplicitUnknownOverridesTheService) {
  const ResolvedPolicy r =
      Config().Resolve("/rpcguard.testing.v1.Declared/Unsafe");
  EXPECT_EQ(r.policy.idempotency, Idempotency::kUnknown);
  EXPECT_EQ(r.sources[kIdem], PolicySource::kProtoMethod);
}

TEST(ProtoOptionsTest, FullMethodOption) {
  const MethodPolicy p = Config().Lookup("/rpcguard.testing.v1.Declared/Tuned");
  EXPECT_EQ(p.retry.max_attempts, 7);
  EXPECT_EQ(p.retry.backoff.initial, absl::Milliseconds(10));
  EXPECT_EQ(p.retry.backoff.max, absl::Seconds(2));
  EXPECT_EQ(p.retry.backoff.multiplier, 3);
  ASSERT_TRUE(p.retry.retryable_codes.has_value());
  EXPECT_EQ(*p.retry.retryable_codes,
            (StatusCodeSet{grpc::StatusCode::UNAVAILABLE,
                           grpc::StatusCode::ABORTED}));
  EXPECT_EQ(p.per_attempt_timeout, absl::Milliseconds(500));
}

TEST(ProtoOptionsTest, IdempotencyLevelAlone) {
  const ResolvedPolicy r = Config().Resolve("/rpcguard.testing.v1.Plain/Level");
  EXPECT_EQ(r.policy.idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(r.sources[kIdem], PolicySource::kIdempotencyLevel);
  EXPECT_EQ(r.sources[kRetry], PolicySource::kDefault);
}

TEST(ProtoOptionsTest, UndeclaredMethodIsUnknown) {
  for (const char* m : {"/rpcguard.testing.v1.Plain/Nothing", "/no.Such/Method",
                        "not-a-path", ""}) {
    const ResolvedPolicy r = Config().Resolve(m);
    EXPECT_TRUE(r.error.ok()) << m;
    EXPECT_EQ(r.policy.idempotency, Idempotency::kUnknown) << m;
    EXPECT_EQ(r.sources[kIdem], PolicySource::kDefault) << m;
  }
}

TEST(ProtoOptionsTest, JsonMethodAndServiceOutrankProtoOptions) {
  const Config config = MustParse(R"({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.Declared", "method": "Keyed"}],
     "rpcguard": {"idempotency": "UNKNOWN"}},
    {"name": [{"service": "rpcguard.testing.v1.Declared"}],
     "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.1s",
                     "maxBackoff": "1s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]}},
    {"name": [{}], "rpcguard": {"idempotency": "IDEMPOTENT",
                                "jitter": "A6"}}]})");
  const ResolvedPolicy keyed =
      config.Resolve("/rpcguard.testing.v1.Declared/Keyed");
  EXPECT_EQ(keyed.policy.idempotency, Idempotency::kUnknown);
  EXPECT_EQ(keyed.sources[kIdem], PolicySource::kConfigMethod);
  EXPECT_EQ(keyed.policy.retry.max_attempts, 2);
  EXPECT_EQ(keyed.sources[kRetry], PolicySource::kConfigService);
  // The JSON default entry ranks below every .proto declaration...
  const ResolvedPolicy inherit =
      config.Resolve("/rpcguard.testing.v1.Declared/Inherit");
  EXPECT_EQ(inherit.sources[kIdem], PolicySource::kProtoService);
  // ...but fills what they leave unset.
  EXPECT_EQ(inherit.policy.retry.backoff.jitter, Jitter::kA6);
  EXPECT_EQ(inherit.sources[kFieldIndexJitter], PolicySource::kConfigDefault);
  // A method nobody declared gets the default entry.
  EXPECT_EQ(config.Lookup("/rpcguard.testing.v1.Plain/Nothing").idempotency,
            Idempotency::kIdempotent);
}

TEST(ProtoOptionsTest, BadOptionsAreErrorsNamingTheField) {
  const struct {
    const char* method;
    const char* error;
  } cases[] = {
      {"/rpcguard.testing.v1.Broken/OneAttempt",
       "rpcguard.testing.v1.Broken.OneAttempt: (rpcguard.v1.method)"
       ".retry.max_attempts: must be at least 2"},
      {"/rpcguard.testing.v1.Broken/OkRetryable",
       "rpcguard.testing.v1.Broken.OkRetryable: (rpcguard.v1.method)"
       ".retry.retryable_status_codes[0]: OK cannot be retryable"},
      {"/rpcguard.testing.v1.Broken/NegativeBackoff",
       "rpcguard.testing.v1.Broken.NegativeBackoff: (rpcguard.v1.method)"
       ".retry.initial_backoff: must be greater than 0"},
      {"/rpcguard.testing.v1.Broken/BadCode",
       "rpcguard.testing.v1.Broken.BadCode: (rpcguard.v1.method)"
       ".retry.retryable_status_codes[1]: unknown status code \"SOMETIMES\""},
  };
  for (const auto& c : cases) {
    const ResolvedPolicy r = Config().Resolve(c.method);
    EXPECT_EQ(r.error.code(), absl::StatusCode::kInvalidArgument) << c.method;
    EXPECT_EQ(r.error.message(), c.error);
    // Nothing from the broken option is used: the method stays unsafe.
    EXPECT_EQ(r.policy.idempotency, Idempotency::kUnknown);
  }
}

TEST(ProtoOptionsTest, ExplainNamesTheSourceOfEachSetting) {
  const std::string text =
      Config().Explain("/rpcguard.testing.v1.Declared/Keyed");
  EXPECT_TRUE(absl::StrContains(text, "/rpcguard.testing.v1.Declared/Keyed"));
  EXPECT_TRUE(absl::StrContains(text, "retried, up to 5 attempts")) << text;
  EXPECT_TRUE(absl::StrContains(text, "KEYED")) << text;
  EXPECT_TRUE(absl::StrContains(text, "proto: (rpcguard.v1.method)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "proto: (rpcguard.v1.service)")) << text;
  EXPECT_TRUE(absl::StrContains(
      Config().Explain("/rpcguard.testing.v1.Plain/Nothing"), "tried once"));
  EXPECT_TRUE(absl::StrContains(
      Config().Explain("/rpcguard.testing.v1.Broken/OneAttempt"),
      "error: rpcguard.testing.v1.Broken.OneAttempt"));
}

// --- Hedging (issue 14) ---

TEST(ProtoHedgingTest, MethodOptionWithEveryField) {
  const ResolvedPolicy r = Config().Resolve("/rpcguard.testing.v1.Hedged/Pay");
  ASSERT_TRUE(r.error.ok()) << r.error;
  ASSERT_TRUE(r.policy.hedging.has_value());
  const HedgingPolicy& h = *r.policy.hedging;
  EXPECT_EQ(h.max_attempts, 3);
  EXPECT_EQ(h.delay, absl::Milliseconds(50));
  EXPECT_EQ(h.non_fatal_codes,
            (StatusCodeSet{grpc::StatusCode::UNAVAILABLE,
                           grpc::StatusCode::RESOURCE_EXHAUSTED}));
  EXPECT_EQ(h.adaptive_percentile, 0.9);
  EXPECT_EQ(h.adaptive_floor, absl::Milliseconds(5));
  EXPECT_EQ(h.min_samples, 20);
  EXPECT_EQ(h.max_extra_load, 0.1);
  EXPECT_EQ(r.sources[kHedge], PolicySource::kProtoMethod);
  // Hedging fields the option leaves out do not touch the retry policy.
  EXPECT_EQ(r.sources[kRetry], PolicySource::kDefault);
}

TEST(ProtoHedgingTest, UnsetFieldsTakeTheDefaults) {
  const ResolvedPolicy r =
      Config().Resolve("/rpcguard.testing.v1.Hedged/AllAtOnce");
  ASSERT_TRUE(r.error.ok()) << r.error;
  ASSERT_TRUE(r.policy.hedging.has_value());
  HedgingPolicy want;
  want.max_attempts = 2;  // the delay: 0, set explicitly
  EXPECT_TRUE(*r.policy.hedging == want);
}

TEST(ProtoHedgingTest, ServiceOptionAppliesToEveryMethod) {
  for (const char* m : {"/rpcguard.testing.v1.Hedged/Read",
                        "/rpcguard.testing.v1.Hedged/Write"}) {
    const ResolvedPolicy r = Config().Resolve(m);
    ASSERT_TRUE(r.error.ok()) << r.error;
    ASSERT_TRUE(r.policy.hedging.has_value()) << m;
    EXPECT_EQ(r.policy.hedging->max_attempts, 2) << m;
    EXPECT_EQ(r.policy.hedging->delay, absl::Milliseconds(20)) << m;
    EXPECT_EQ(r.sources[kHedge], PolicySource::kProtoService) << m;
  }
}

// The precedence of the retry policy, for the hedging policy as a whole: a
// JSON entry for the method or the service outranks the method's option,
// which outranks the service's option, which outranks the JSON default.
TEST(ProtoHedgingTest, PrecedenceAgainstJson) {
  const Config config = MustParse(R"({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.Hedged", "method": "Pay"}],
     "hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": "0.01s"}},
    {"name": [{}], "hedgingPolicy": {"maxAttempts": 5}}]})");
  const ResolvedPolicy pay = config.Resolve("/rpcguard.testing.v1.Hedged/Pay");
  ASSERT_TRUE(pay.policy.hedging.has_value());
  EXPECT_EQ(pay.policy.hedging->max_attempts, 4);
  // The JSON policy replaces the option's whole: no percentile is left.
  EXPECT_FALSE(pay.policy.hedging->adaptive_percentile.has_value());
  EXPECT_EQ(pay.sources[kHedge], PolicySource::kConfigMethod);
  // The JSON default ranks below the options, and fills in elsewhere.
  for (const char* m : {"/rpcguard.testing.v1.Hedged/Read",
                        "/rpcguard.testing.v1.Hedged/Write"}) {
    const ResolvedPolicy r = config.Resolve(m);
    EXPECT_EQ(r.sources[kHedge], PolicySource::kProtoService) << m;
    ASSERT_TRUE(r.policy.hedging.has_value()) << m;
    EXPECT_EQ(r.policy.hedging->max_attempts, 2) << m;
  }
  const ResolvedPolicy plain =
      config.Resolve("/rpcguard.testing.v1.Declared/Keyed");
  EXPECT_EQ(plain.sources[kHedge], PolicySource::kConfigDefault);

  // A JSON entry for the service outranks the method's own option, and is
  // not written for the method: KEYED Pay is then not hedged.
  const Config by_service = MustParse(R"({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.Hedged"}],
     "hedgingPolicy": {"maxAttempts": 3}}]})");
  const ResolvedPolicy pay2 =
      by_service.Resolve("/rpcguard.testing.v1.Hedged/Pay");
  EXPECT_EQ(pay2.sources[kHedge], PolicySource::kConfigService);
  EXPECT_TRUE(
      absl::StrContains(by_service.Explain("/rpcguard.testing.v1.Hedged/Pay"),
                        "not for this method itself"));
}

// Who is hedged, as Explain says (the interceptor asks MayHedge with the
// same "written for the method" rule): a method's own option counts as
// written for it, a service's does not.
TEST(ProtoHedgingTest, ExplainSaysWhoIsHedgedAndWhereFrom) {
  const Config config;
  const std::string pay = config.Explain("/rpcguard.testing.v1.Hedged/Pay");
  EXPECT_TRUE(absl::StrContains(
      pay,
      "  => hedged, up to 3 copies, the next after 50ms (then p90 of recent "
      "latency)\n"))
      << pay;
  EXPECT_TRUE(absl::StrContains(
      pay,
      "  hedgingPolicy:     maxAttempts=3 hedgingDelay=50ms percentile=0.9 "
      "floor=5ms minSamples=20 maxExtraLoad=0.1  "
      "[proto: (rpcguard.v1.method)]\n"))
      << pay;
  const std::string read = config.Explain("/rpcguard.testing.v1.Hedged/Read");
  EXPECT_TRUE(absl::StrContains(
      read, "  => hedged, up to 2 copies, the next after 20ms\n"))
      << read;
  EXPECT_TRUE(absl::StrContains(
      read,
      "  hedgingPolicy:     maxAttempts=2 hedgingDelay=20ms maxExtraLoad=0.05"
      "  [proto: (rpcguard.v1.service)]\n"))
      << read;
  // IDEMPOTENT with the service's policy only: retried, and told why not.
  const std::string write = config.Explain("/rpcguard.testing.v1.Hedged/Write");
  EXPECT_TRUE(absl::StrContains(write,
                                "  => retried, up to 3 attempts (the "
                                "hedgingPolicy is not for this method "
                                "itself"))
      << write;
  EXPECT_TRUE(
      absl::StrContains(config.Explain("/rpcguard.testing.v1.Hedged/AllAtOnce"),
                        "  => hedged, up to 2 copies, the next after 0\n"));
}

TEST(ProtoHedgingTest, BadOptionsAreErrorsNamingTheField) {
  const std::string m = "rpcguard.testing.v1.BrokenHedging.";
  const struct {
    const char* method;
    std::string error;
  } cases[] = {
      {"NoAttempts",
       "NoAttempts: (rpcguard.v1.method).hedging.max_attempts: "
       "is required"},
      {"TooMany",
       "TooMany: (rpcguard.v1.method).hedging.max_attempts: must "
       "be at most 10"},
      {"NegativeDelay",
       "NegativeDelay: (rpcguard.v1.method).hedging."
       "hedging_delay: must be 0 or more, and finite"},
      {"OkNonFatal",
       "OkNonFatal: (rpcguard.v1.method).hedging."
       "non_fatal_status_codes: must not contain OK"},
      {"BadCode",
       "BadCode: (rpcguard.v1.method).hedging."
       "non_fatal_status_codes[1]: unknown status code "
       "\"SOMETIMES\""},
      {"BadPercentile",
       "BadPercentile: (rpcguard.v1.method).hedging."
       "delay_percentile: must be in (0, 1)"},
      {"BadFloor",
       "BadFloor: (rpcguard.v1.method).hedging.delay_floor: must "
       "be 0 or more, and finite"},
      {"BadSamples",
       "BadSamples: (rpcguard.v1.method).hedging.min_samples: "
       "must be in [1, 1000000]"},
      {"BadLoad",
       "BadLoad: (rpcguard.v1.method).hedging.max_extra_load: "
       "must be in (0, 1]"},
      {"RetryAndHedging",
       "RetryAndHedging: (rpcguard.v1.method).hedging: "
       "conflicts with retry; set only one (gRFC A6)"},
  };
  for (const auto& c : cases) {
    const std::string path =
        absl::StrCat("/rpcguard.testing.v1.BrokenHedging/", c.method);
    const ResolvedPolicy r = Config().Resolve(path);
    EXPECT_EQ(r.error.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_EQ(r.error.message(), m + c.error);
    // Nothing of the broken option is used: not hedged, not retried.
    EXPECT_FALSE(r.policy.hedging.has_value()) << path;
    EXPECT_EQ(r.policy.idempotency, Idempotency::kUnknown) << path;
  }
  const ResolvedPolicy service =
      Config().Resolve("/rpcguard.testing.v1.BrokenHedgingService/Any");
  EXPECT_EQ(service.error.message(),
            "rpcguard.testing.v1.BrokenHedgingService: (rpcguard.v1.service)"
            ".hedging.max_attempts: must be at least 2");
  EXPECT_TRUE(absl::StrContains(
      Config().Explain("/rpcguard.testing.v1.BrokenHedging/RetryAndHedging"),
      "error: rpcguard.testing.v1.BrokenHedging.RetryAndHedging"));
}

}  // namespace
}  // namespace rpcguard
