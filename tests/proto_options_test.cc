// Copyright rpcguard authors.
//
// Policies declared in .proto files (proto/rpcguard/testing/v1/declared.proto)
// and their precedence against JSON config, field by field.

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
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

constexpr int kIdem = 0;   // PolicyField bit index of idempotency
constexpr int kRetry = 1;  // of retryPolicy

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
  EXPECT_EQ(inherit.sources[2], PolicySource::kConfigDefault);
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

}  // namespace
}  // namespace rpcguard
