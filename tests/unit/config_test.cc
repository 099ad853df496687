// Copyright rpcguard authors.

#include "rpcguard/config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {
namespace {

using grpc::StatusCode;

// The example from config.h, verbatim.
constexpr absl::string_view kFullExample = R"json(
  {"methodConfig": [{
     "name": [{"service": "pkg.Svc", "method": "M"}],
     "timeout": "2s",
     "waitForReady": true,
     "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.02s",
                     "maxBackoff": "0.2s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"idempotency": "KEYED", "perAttemptTimeout": "0.5s",
                  "jitter": "FULL", "minAttemptTime": "0.002s"}}]}
)json";

Config MustParse(absl::string_view json) {
  absl::StatusOr<Config> config = Config::FromJson(json);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : Config();
}

// True if `p` has every field of a default-constructed MethodPolicy.
void ExpectBuiltInDefault(const MethodPolicy& p) {
  const MethodPolicy d;
  EXPECT_EQ(p.idempotency, Idempotency::kUnknown);
  EXPECT_EQ(p.retry.max_attempts, d.retry.max_attempts);
  EXPECT_EQ(p.retry.backoff.initial, d.retry.backoff.initial);
  EXPECT_EQ(p.retry.backoff.max, d.retry.backoff.max);
  EXPECT_EQ(p.retry.backoff.multiplier, d.retry.backoff.multiplier);
  EXPECT_EQ(p.retry.backoff.jitter, d.retry.backoff.jitter);
  EXPECT_FALSE(p.retry.retryable_codes.has_value());
  EXPECT_EQ(p.per_attempt_timeout, absl::InfiniteDuration());
  EXPECT_EQ(p.timeout, absl::InfiniteDuration());
  EXPECT_EQ(p.min_attempt_time, d.min_attempt_time);
  EXPECT_FALSE(p.wait_for_ready.has_value());
}

MethodPolicy WithIdempotency(Idempotency i) {
  MethodPolicy p;
  p.idempotency = i;
  return p;
}

TEST(PolicyTest, IdempotencyNamesRoundTrip) {
  for (Idempotency i : {Idempotency::kUnknown, Idempotency::kNoSideEffects,
                        Idempotency::kIdempotent, Idempotency::kKeyed}) {
    absl::StatusOr<Idempotency> parsed = ParseIdempotency(IdempotencyName(i));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, i);
  }
  EXPECT_EQ(IdempotencyName(Idempotency::kNoSideEffects), "NO_SIDE_EFFECTS");
}

TEST(PolicyTest, ParseIdempotencyIsExactCase) {
  absl::StatusOr<Idempotency> parsed = ParseIdempotency("keyed");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "unknown idempotency \"keyed\" (want NO_SIDE_EFFECTS, IDEMPOTENT, "
            "KEYED or UNKNOWN)");
}

TEST(ConfigTest, EmptyConfigGivesBuiltInDefault) {
  ExpectBuiltInDefault(Config().Lookup("/pkg.Svc/M"));
  ExpectBuiltInDefault(MustParse("{}").Lookup("/pkg.Svc/M"));
  ExpectBuiltInDefault(MustParse(R"({"methodConfig": []})").Lookup("/a/b"));
}

TEST(ConfigTest, FullExampleParses) {
  const Config config = MustParse(kFullExample);
  const MethodPolicy& p = config.Lookup("/pkg.Svc/M");
  EXPECT_EQ(p.idempotency, Idempotency::kKeyed);
  EXPECT_EQ(p.timeout, absl::Seconds(2));
  ASSERT_TRUE(p.wait_for_ready.has_value());
  EXPECT_TRUE(*p.wait_for_ready);
  EXPECT_EQ(p.retry.max_attempts, 4);
  EXPECT_EQ(p.retry.backoff.initial, absl::Milliseconds(20));
  EXPECT_EQ(p.retry.backoff.max, absl::Milliseconds(200));
  EXPECT_EQ(p.retry.backoff.multiplier, 2.0);
  EXPECT_EQ(p.retry.backoff.jitter, Jitter::kFull);
  ASSERT_TRUE(p.retry.retryable_codes.has_value());
  EXPECT_EQ(*p.retry.retryable_codes, StatusCodeSet({StatusCode::UNAVAILABLE}));
  EXPECT_EQ(p.per_attempt_timeout, absl::Milliseconds(500));
  EXPECT_EQ(p.min_attempt_time, absl::Milliseconds(2));

  // Only that method is configured.
  ExpectBuiltInDefault(config.Lookup("/pkg.Svc/Other"));
}

TEST(ConfigTest, NameMatchingPrecedence) {
  const Config config = MustParse(R"json({"methodConfig": [
      {"name": [{}], "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}},
      {"name": [{"service": "pkg.Svc"}],
       "rpcguard": {"idempotency": "IDEMPOTENT"}},
      {"name": [{"service": "pkg.Svc", "method": "M"}],
       "rpcguard": {"idempotency": "KEYED"}}]})json");
  EXPECT_EQ(config.Lookup("/pkg.Svc/M").idempotency, Idempotency::kKeyed);
  EXPECT_EQ(config.Lookup("/pkg.Svc/N").idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(config.Lookup("/other.Svc/M").idempotency,
            Idempotency::kNoSideEffects);
  // Not of the form "/service/method": the default entry.
  for (absl::string_view path :
       {"pkg.Svc/M", "/pkg.Svc", "", "/", "//M", "/pkg.Svc/"}) {
    EXPECT_EQ(config.Lookup(path).idempotency, Idempotency::kNoSideEffects)
        << path;
  }

  // Without a default entry, the built-in default.
  const Config no_default = MustParse(R"json({"methodConfig": [
      {"name": [{"service": "pkg.Svc", "method": ""}],
       "rpcguard": {"idempotency": "IDEMPOTENT"}}]})json");
  EXPECT_EQ(no_default.Lookup("/pkg.Svc/M").idempotency,
            Idempotency::kIdempotent);
  ExpectBuiltInDefault(no_default.Lookup("/other.Svc/M"));
  ExpectBuiltInDefault(no_default.Lookup("pkg.Svc/M"));
}

TEST(ConfigTest, DefaultNameForms) {
  for (absl::string_view name :
       {R"({})", R"({"service": ""})", R"({"service": "", "method": ""})",
        R"({"method": ""})"}) {
    const Config config = MustParse(
        absl::StrCat(R"({"methodConfig": [{"name": [)", name,
                     R"(], "rpcguard": {"idempotency": "IDEMPOTENT"}}]})"));
    EXPECT_EQ(config.Lookup("/a.B/C").idempotency, Idempotency::kIdempotent)
        << name;
  }
}

TEST(ConfigTest, SeveralNamesShareOnePolicy) {
  const Config config = MustParse(R"json({"methodConfig": [{
      "name": [{"service": "a.A", "method": "X"}, {"service": "b.B"}],
      "timeout": "3s"}]})json");
  EXPECT_EQ(config.Lookup("/a.A/X").timeout, absl::Seconds(3));
  EXPECT_EQ(config.Lookup("/b.B/Y").timeout, absl::Seconds(3));
  EXPECT_EQ(config.Lookup("/a.A/Y").timeout, absl::InfiniteDuration());
}

TEST(ConfigTest, EntryWithoutRetryPolicyKeepsRetryDefaults) {
  const Config config = MustParse(R"json({"methodConfig": [{
      "name": [{"service": "s"}],
      "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "decorrelated"}}]})json");
  const MethodPolicy& p = config.Lookup("/s/M");
  EXPECT_EQ(p.idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(p.retry.max_attempts, RetryPolicy().max_attempts);
  EXPECT_EQ(p.retry.backoff.initial, BackoffParams().initial);
  EXPECT_EQ(p.retry.backoff.jitter, Jitter::kDecorrelated);
  EXPECT_FALSE(p.retry.retryable_codes.has_value());
  EXPECT_FALSE(p.wait_for_ready.has_value());
}

TEST(ConfigTest, StatusCodesByNumberAndAnyCase) {
  const Config config = MustParse(R"json({"methodConfig": [{
      "name": [{"service": "s"}],
      "retryPolicy": {"maxAttempts": 10, "initialBackoff": "1s",
                      "maxBackoff": "1s", "backoffMultiplier": 1000,
                      "retryableStatusCodes": ["unavailable", 4, "Aborted",
                                               "8", 14]}}]})json");
  const MethodPolicy& p = config.Lookup("/s/M");
  EXPECT_EQ(p.retry.max_attempts, 10);
  EXPECT_EQ(p.retry.backoff.multiplier, 1000.0);
  EXPECT_EQ(p.retry.backoff.initial, p.retry.backoff.max);
  ASSERT_TRUE(p.retry.retryable_codes.has_value());
  EXPECT_EQ(
      *p.retry.retryable_codes,
      StatusCodeSet({StatusCode::UNAVAILABLE, StatusCode::DEADLINE_EXCEEDED,
                     StatusCode::ABORTED, StatusCode::RESOURCE_EXHAUSTED}));
}

TEST(ConfigTest, DurationForms) {
  struct Case {
    absl::string_view text;
    absl::Duration want;
  };
  for (const Case& c : {
           Case{"1s", absl::Seconds(1)},
           Case{"1.5s", absl::Milliseconds(1500)},
           Case{"0.000000001s", absl::Nanoseconds(1)},
           Case{"0.1s", absl::Milliseconds(100)},
           Case{"3600s", absl::Hours(1)},
           Case{"315576000000s", absl::Seconds(315576000000)},
       }) {
    const Config config = MustParse(absl::StrCat(
        R"({"methodConfig": [{"name": [{}], "timeout": ")", c.text, R"("}]})"));
    EXPECT_EQ(config.Lookup("/s/M").timeout, c.want) << c.text;
  }
}

TEST(ConfigTest, PerAttemptRecvTimeoutSetsPerAttemptTimeout) {
  const Config config = MustParse(R"json({"methodConfig": [{
      "name": [{}],
      "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.1s",
                      "maxBackoff": "1s", "backoffMultiplier": 1.5,
                      "retryableStatusCodes": ["UNAVAILABLE"],
                      "perAttemptRecvTimeout": "0.25s"}}]})json");
  EXPECT_EQ(config.Lookup("/s/M").per_attempt_timeout, absl::Milliseconds(250));
  EXPECT_EQ(config.Lookup("/s/M").retry.backoff.multiplier, 1.5);
}

TEST(ConfigTest, RestOfServiceConfigIsIgnored) {
  const Config config = MustParse(R"json({
      "loadBalancingConfig": [{"round_robin": {}}],
      "loadBalancingPolicy": "round_robin",
      "healthCheckConfig": {"serviceName": "x"},
      "somethingNew": [1, 2.5e3, null, true, "\u00e9\ud83d\ude00"],
      "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
      "methodConfig": [{"name": [{"service": "caf\u00e9"}],
                        "maxRequestMessageBytes": 1024,
                        "maxResponseMessageBytes": "2048",
                        "waitForReady": false}]})json");
  const MethodPolicy& p = config.Lookup("/caf\xc3\xa9/M");
  ASSERT_TRUE(p.wait_for_ready.has_value());
  EXPECT_FALSE(*p.wait_for_ready);
}

TEST(ConfigTest, SetPrecedence) {
  Config config;
  config.Set("", "", WithIdempotency(Idempotency::kNoSideEffects));
  config.Set("pkg.Svc", "", WithIdempotency(Idempotency::kIdempotent));
  config.Set("pkg.Svc", "M", WithIdempotency(Idempotency::kIdempotent));
  // Replaces the entry just made.
  config.Set("pkg.Svc", "M", WithIdempotency(Idempotency::kKeyed));
  EXPECT_EQ(config.Lookup("/pkg.Svc/M").idempotency, Idempotency::kKeyed);
  EXPECT_EQ(config.Lookup("/pkg.Svc/N").idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(config.Lookup("/x.Y/M").idempotency, Idempotency::kNoSideEffects);
}

TEST(ConfigTest, SetOverridesJson) {
  Config config = MustParse(kFullExample);
  config.Set("pkg.Svc", "M", WithIdempotency(Idempotency::kIdempotent));
  EXPECT_EQ(config.Lookup("/pkg.Svc/M").idempotency, Idempotency::kIdempotent);
  EXPECT_EQ(config.Lookup("/pkg.Svc/M").timeout, absl::InfiniteDuration());
}

TEST(ConfigTest, SetCopiesOnWrite) {
  const Config original = MustParse(kFullExample);
  const MethodPolicy before = original.Lookup("/pkg.Svc/M");

  Config copy = original;
  copy.Set("pkg.Svc", "M", WithIdempotency(Idempotency::kNoSideEffects));
  copy.Set("", "", WithIdempotency(Idempotency::kIdempotent));

  EXPECT_EQ(copy.Lookup("/pkg.Svc/M").idempotency, Idempotency::kNoSideEffects);
  EXPECT_EQ(copy.Lookup("/a.B/C").idempotency, Idempotency::kIdempotent);
  // The original is untouched.
  EXPECT_EQ(original.Lookup("/pkg.Svc/M").idempotency, Idempotency::kKeyed);
  EXPECT_EQ(before.idempotency, Idempotency::kKeyed);
  ExpectBuiltInDefault(original.Lookup("/a.B/C"));

  // And the other way round: writing the original leaves the copy alone.
  Config original2 = original;
  Config copy2 = original2;
  original2.Set("pkg.Svc", "", WithIdempotency(Idempotency::kIdempotent));
  ExpectBuiltInDefault(copy2.Lookup("/pkg.Svc/N"));
  EXPECT_EQ(original2.Lookup("/pkg.Svc/N").idempotency,
            Idempotency::kIdempotent);
}

// ---------------------------------------------------------------------------
// Malformed configs: each must fail with exactly this message.

struct BadConfig {
  std::string name;
  std::string json;
  std::string error;
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.json; }

// A config whose only methodConfig entry has `fields` after its name.
std::string Entry(absl::string_view fields) {
  return absl::StrCat(R"({"methodConfig": [{"name": [{"service": "s"}], )",
                      fields, "}]}");
}

// A valid retryPolicy with `key` set to `value` (the JSON text), or left out
// when `value` is empty.
std::string Retry(absl::string_view key, absl::string_view value) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"maxAttempts", "3"},
      {"initialBackoff", R"("0.1s")"},
      {"maxBackoff", R"("1s")"},
      {"backoffMultiplier", "2"},
      {"retryableStatusCodes", R"(["UNAVAILABLE"])"},
  };
  bool found = false;
  for (auto& [k, v] : fields) {
    if (k == key) {
      v = std::string(value);
      found = true;
    }
  }
  if (!found) fields.emplace_back(key, value);
  std::vector<std::string> members;
  for (const auto& [k, v] : fields) {
    if (!v.empty()) members.push_back(absl::StrCat("\"", k, "\": ", v));
  }
  return Entry(
      absl::StrCat(R"("retryPolicy": {)", absl::StrJoin(members, ", "), "}"));
}

std::string Rpcguard(absl::string_view fields) {
  return Entry(absl::StrCat(R"("rpcguard": {)", fields, "}"));
}

std::string Throttling(absl::string_view fields) {
  return absl::StrCat(R"({"retryThrottling": {)", fields, "}}");
}

const char kRp[] = "methodConfig[0].retryPolicy.";
const char kRg[] = "methodConfig[0].rpcguard.";
const char kWantSeconds[] =
    "(want decimal seconds ending in \"s\", like \"1.5s\")";

std::vector<BadConfig> BadConfigs() {
  return {
      // Structure.
      {"TopLevelArray", "[]", "config: must be an object"},
      {"TopLevelString", R"("methodConfig")", "config: must be an object"},
      {"MethodConfigObject", R"({"methodConfig": {}})",
       "methodConfig: must be an array"},
      {"MethodConfigNull", R"({"methodConfig": null})",
       "methodConfig: must be an array"},
      {"MethodConfigEntryNumber", R"({"methodConfig": [1]})",
       "methodConfig[0]: must be an object"},
      {"MisspeltMethodConfig", R"({"methodconfig": []})",
       "methodconfig: unknown field (did you mean \"methodConfig\"?)"},
      {"SnakeCaseRetryThrottling", R"({"retry_throttling": {}})",
       "retry_throttling: unknown field (did you mean \"retryThrottling\"?)"},
      {"UnknownMethodConfigField", Entry(R"("foo": 1)"),
       "methodConfig[0].foo: unknown field"},
      {"HedgingPolicyWithoutMaxAttempts", Entry(R"("hedgingPolicy": {})"),
       "methodConfig[0].hedgingPolicy.maxAttempts: is required"},

      // Names.
      {"NoName", R"({"methodConfig": [{"timeout": "1s"}]})",
       "methodConfig[0].name: must be a non-empty array"},
      {"EmptyName", R"({"methodConfig": [{"name": []}]})",
       "methodConfig[0].name: must be a non-empty array"},
      {"NameObject", R"({"methodConfig": [{"name": {"service": "s"}}]})",
       "methodConfig[0].name: must be an array"},
      {"NameString", R"({"methodConfig": [{"name": ["s"]}]})",
       "methodConfig[0].name[0]: must be an object"},
      {"ServiceNumber", R"({"methodConfig": [{"name": [{"service": 5}]}]})",
       "methodConfig[0].name[0].service: must be a string"},
      {"MethodWithoutService",
       R"({"methodConfig": [{"name": [{"method": "M"}]}]})",
       "methodConfig[0].name[0]: method requires a non-empty service"},
      {"MethodWithEmptyService",
       R"({"methodConfig": [{"name": [{"service": "", "method": "M"}]}]})",
       "methodConfig[0].name[0]: method requires a non-empty service"},
      {"UnknownNameField",
       R"({"methodConfig": [{"name": [{"service": "s", "methd": "M"}]}]})",
       "methodConfig[0].name[0].methd: unknown field"},
      {"SlashInService",
       R"({"methodConfig": [{"name": [{"service": "pkg.Svc/M"}]}]})",
       "methodConfig[0].name[0].service: must not contain '/'"},
      {"DuplicateMethod",
       R"({"methodConfig": [{"name": [{"service": "pkg.Svc", "method": "M"}]},
                            {"name": [{"service": "pkg.Svc", "method": "M"}]}]})",
       "methodConfig[1].name[0]: duplicate name \"pkg.Svc/M\""},
      {"DuplicateServiceInOneEntry",
       R"({"methodConfig": [{"name": [{"service": "pkg.Svc"},
                                      {"service": "pkg.Svc", "method": ""}]}]})",
       "methodConfig[0].name[1]: duplicate name \"pkg.Svc\""},
      {"DuplicateDefault",
       R"({"methodConfig": [{"name": [{}]}, {"name": [{"service": ""}]}]})",
       "methodConfig[1].name[0]: duplicate default name"},

      // timeout, waitForReady and duration syntax.
      {"TimeoutNumber", Entry(R"("timeout": 1)"),
       "methodConfig[0].timeout: must be a string"},
      {"TimeoutMillis", Entry(R"("timeout": "10ms")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \"10ms\" ",
                    kWantSeconds)},
      {"TimeoutWord", Entry(R"("timeout": "abc")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \"abc\" ",
                    kWantSeconds)},
      {"TimeoutNoSuffix", Entry(R"("timeout": "1")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \"1\" ",
                    kWantSeconds)},
      {"TimeoutNoFraction", Entry(R"("timeout": "1.s")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \"1.s\" ",
                    kWantSeconds)},
      {"TimeoutNoWhole", Entry(R"("timeout": ".5s")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \".5s\" ",
                    kWantSeconds)},
      {"TimeoutSpace", Entry(R"("timeout": "1 s")"),
       absl::StrCat("methodConfig[0].timeout: invalid duration \"1 s\" ",
                    kWantSeconds)},
      {"TimeoutNegative", Entry(R"("timeout": "-1s")"),
       "methodConfig[0].timeout: must be greater than 0"},
      {"TimeoutZero", Entry(R"("timeout": "0s")"),
       "methodConfig[0].timeout: must be greater than 0"},
      {"TimeoutTenFractionDigits", Entry(R"("timeout": "1.0000000001s")"),
       "methodConfig[0].timeout: invalid duration \"1.0000000001s\" (at most "
       "9 fractional digits)"},
      {"TimeoutTooLong", Entry(R"("timeout": "315576000001s")"),
       "methodConfig[0].timeout: invalid duration \"315576000001s\" (at most "
       "315576000000 seconds)"},
      {"WaitForReadyString", Entry(R"("waitForReady": "true")"),
       "methodConfig[0].waitForReady: must be a boolean"},

      // retryPolicy.
      {"RetryPolicyArray", Entry(R"("retryPolicy": [])"),
       "methodConfig[0].retryPolicy: must be an object"},
      {"MaxAttemptsString", Retry("maxAttempts", R"("3")"),
       absl::StrCat(kRp, "maxAttempts: must be a number")},
      {"MaxAttemptsOne", Retry("maxAttempts", "1"),
       absl::StrCat(kRp, "maxAttempts: must be at least 2")},
      {"MaxAttemptsEleven", Retry("maxAttempts", "11"),
       absl::StrCat(kRp, "maxAttempts: must be at most 10")},
      {"MaxAttemptsHuge", Retry("maxAttempts", "1e30"),
       absl::StrCat(kRp, "maxAttempts: must be at most 10")},
      {"MaxAttemptsFraction", Retry("maxAttempts", "2.5"),
       absl::StrCat(kRp, "maxAttempts: must be an integer")},
      {"MaxAttemptsMissing", Retry("maxAttempts", ""),
       absl::StrCat(kRp, "maxAttempts: field is required")},
      {"InitialBackoffMissing", Retry("initialBackoff", ""),
       absl::StrCat(kRp, "initialBackoff: field is required")},
      {"MaxBackoffMissing", Retry("maxBackoff", ""),
       absl::StrCat(kRp, "maxBackoff: field is required")},
      {"MultiplierMissing", Retry("backoffMultiplier", ""),
       absl::StrCat(kRp, "backoffMultiplier: field is required")},
      {"CodesMissing", Retry("retryableStatusCodes", ""),
       absl::StrCat(kRp, "retryableStatusCodes: field is required")},
      {"InitialBackoffZero", Retry("initialBackoff", R"("0s")"),
       absl::StrCat(kRp, "initialBackoff: must be greater than 0")},
      {"MaxBackoffNegative", Retry("maxBackoff", R"("-0.5s")"),
       absl::StrCat(kRp, "maxBackoff: must be greater than 0")},
      {"MaxBackoffBelowInitial", Retry("maxBackoff", R"("0.05s")"),
       absl::StrCat(kRp, "maxBackoff: must be at least initialBackoff")},
      {"MultiplierZero", Retry("backoffMultiplier", "0"),
       absl::StrCat(kRp, "backoffMultiplier: must be greater than 0")},
      {"MultiplierNegative", Retry("backoffMultiplier", "-2"),
       absl::StrCat(kRp, "backoffMultiplier: must be greater than 0")},
      {"MultiplierAboveCap", Retry("backoffMultiplier", "1000.5"),
       absl::StrCat(kRp, "backoffMultiplier: must be at most 1000")},
      {"MultiplierHuge", Retry("backoffMultiplier", "1e300"),
       absl::StrCat(kRp, "backoffMultiplier: must be at most 1000")},
      {"MultiplierString", Retry("backoffMultiplier", R"("2")"),
       absl::StrCat(kRp, "backoffMultiplier: must be a number")},
      {"CodesEmpty", Retry("retryableStatusCodes", "[]"),
       absl::StrCat(kRp, "retryableStatusCodes: must be a non-empty array")},
      {"CodesString", Retry("retryableStatusCodes", R"("UNAVAILABLE")"),
       absl::StrCat(kRp, "retryableStatusCodes: must be an array")},
      {"CodeUnknown", Retry("retryableStatusCodes", R"(["UNAVAILBLE"])"),
       absl::StrCat(kRp,
                    "retryableStatusCodes[0]: unknown status code "
                    "\"UNAVAILBLE\"")},
      {"CodeOk", Retry("retryableStatusCodes", R"(["UNAVAILABLE", "ok"])"),
       absl::StrCat(kRp, "retryableStatusCodes[1]: OK cannot be retryable")},
      {"CodeZero", Retry("retryableStatusCodes", "[0]"),
       absl::StrCat(kRp, "retryableStatusCodes[0]: OK cannot be retryable")},
      {"CodeOutOfRange", Retry("retryableStatusCodes", "[17]"),
       absl::StrCat(kRp,
                    "retryableStatusCodes[0]: status code 17 is out of range "
                    "0..16")},
      {"CodeFraction", Retry("retryableStatusCodes", "[14.5]"),
       absl::StrCat(kRp, "retryableStatusCodes[0]: must be an integer")},
      {"CodeBool", Retry("retryableStatusCodes", "[true]"),
       absl::StrCat(kRp,
                    "retryableStatusCodes[0]: must be a string or a number")},
      {"RetryPolicyUnknownField", Retry("maxAttempt", "3"),
       absl::StrCat(kRp, "maxAttempt: unknown field")},
      {"PerAttemptRecvTimeoutBad", Retry("perAttemptRecvTimeout", R"("5")"),
       absl::StrCat(kRp, "perAttemptRecvTimeout: invalid duration \"5\" ",
                    kWantSeconds)},

      // rpcguard.
      {"RpcguardString", Entry(R"("rpcguard": "KEYED")"),
       "methodConfig[0].rpcguard: must be an object"},
      {"IdempotencyLowerCase", Rpcguard(R"("idempotency": "idempotent")"),
       absl::StrCat(kRg,
                    "idempotency: unknown idempotency \"idempotent\" (want "
                    "NO_SIDE_EFFECTS, IDEMPOTENT, KEYED or UNKNOWN)")},
      {"IdempotencyNumber", Rpcguard(R"("idempotency": 1)"),
       absl::StrCat(kRg, "idempotency: must be a string")},
      {"RpcguardUnknownField", Rpcguard(R"("idempotncy": "KEYED")"),
       absl::StrCat(kRg, "idempotncy: unknown field")},
      {"JitterUnknown", Rpcguard(R"("jitter": "FULLL")"),
       absl::StrCat(kRg,
                    "jitter: unknown jitter \"FULLL\" (want FULL, A6 or "
                    "DECORRELATED)")},
      {"PerAttemptTimeoutZero", Rpcguard(R"("perAttemptTimeout": "0.0s")"),
       absl::StrCat(kRg, "perAttemptTimeout: must be greater than 0")},
      {"MinAttemptTimeNegative", Rpcguard(R"("minAttemptTime": "-0.001s")"),
       absl::StrCat(kRg, "minAttemptTime: must be greater than 0")},
      {"TwoPerAttemptTimeouts",
       Entry(R"("rpcguard": {"perAttemptTimeout": "1s"},
                "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s",
                                "maxBackoff": "1s", "backoffMultiplier": 2,
                                "retryableStatusCodes": ["UNAVAILABLE"],
                                "perAttemptRecvTimeout": "1s"})"),
       absl::StrCat(kRg,
                    "perAttemptTimeout: conflicts with "
                    "retryPolicy.perAttemptRecvTimeout; set only one")},

      // retryThrottling.
      {"ThrottlingString", R"({"retryThrottling": "x"})",
       "retryThrottling: must be an object"},
      {"MaxTokensZero", Throttling(R"("maxTokens": 0, "tokenRatio": 0.1)"),
       "retryThrottling.maxTokens: must be greater than 0"},
      {"MaxTokensAboveCap",
       Throttling(R"("maxTokens": 1001, "tokenRatio": 0.1)"),
       "retryThrottling.maxTokens: must be at most 1000"},
      {"MaxTokensString", Throttling(R"("maxTokens": "10", "tokenRatio": 0.1)"),
       "retryThrottling.maxTokens: must be a number"},
      {"TokenRatioZero", Throttling(R"("maxTokens": 10, "tokenRatio": 0)"),
       "retryThrottling.tokenRatio: must be greater than 0"},
      {"TokenRatioNegative",
       Throttling(R"("maxTokens": 10, "tokenRatio": -0.5)"),
       "retryThrottling.tokenRatio: must be greater than 0"},
      {"TokenRatioBelowResolution",
       Throttling(R"("maxTokens": 10, "tokenRatio": 0.0005)"),
       "retryThrottling.tokenRatio: must be at least 0.001 (3 decimal places "
       "are kept)"},
      {"MaxTokensBelowResolution",
       Throttling(R"("maxTokens": 0.0004, "tokenRatio": 0.1)"),
       "retryThrottling.maxTokens: must be at least 0.001"},
      {"MaxTokensMissing", Throttling(R"("tokenRatio": 0.1)"),
       "retryThrottling.maxTokens: field is required"},
      {"TokenRatioMissing", Throttling(R"("maxTokens": 10)"),
       "retryThrottling.tokenRatio: field is required"},
      {"ThrottlingUnknownField",
       Throttling(R"("maxTokens": 10, "tokenRatio": 0.1, "ratio": 1)"),
       "retryThrottling.ratio: unknown field"},

      // Malformed JSON whose position is worth pinning down.
      {"JsonMissingColon", R"({"a" 1})",
       "invalid JSON: line 1, column 6: expected ':'"},
      {"JsonBadWordOnLineTwo", "{\n  \"a\": tru\n}",
       "invalid JSON: line 2, column 8: expected a value"},
      {"JsonDuplicateKey", R"({"methodConfig": [], "methodConfig": []})",
       "invalid JSON: line 1, column 22: duplicate key \"methodConfig\""},
  };
}

class BadConfigTest : public testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, FailsWithExactMessage) {
  absl::StatusOr<Config> config = Config::FromJson(GetParam().json);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(All, BadConfigTest, testing::ValuesIn(BadConfigs()),
                         [](const testing::TestParamInfo<BadConfig>& info) {
                           return info.param.name;
                         });

// Inputs strict JSON rejects; the position in the message is not asserted.
class MalformedJsonTest : public testing::TestWithParam<std::string> {};

TEST_P(MalformedJsonTest, IsInvalidJson) {
  absl::StatusOr<Config> config = Config::FromJson(GetParam());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(config.status().message(), "invalid JSON: "))
      << config.status();
}

INSTANTIATE_TEST_SUITE_P(
    All, MalformedJsonTest,
    testing::Values("", "   ", "{", "}", R"({"methodConfig": [})",
                    R"({'methodConfig': []})", R"({methodConfig: []})",
                    R"({"methodConfig": [],})", R"({"methodConfig": [1,]})",
                    R"({} {})", R"({"a": 01})", R"({"a": .5})", R"({"a": 1.})",
                    R"({"a": +1})", R"({"a": 1e})", R"({"a": 1e400})",
                    R"({"a": NaN})", R"({"a": Infinity})", R"({"a": "\x41"})",
                    R"({"a": "\ud800"})", R"({"a": "\udc00"})",
                    R"({"a": "\u12"})", "{\"a\": \"tab\there\"}",
                    R"({"a": "unterminated})", R"({"a": True})",
                    R"({"a": nul})", "// comment\n{}",
                    std::string(100, '[') + std::string(100, ']')));

// Like gRPC's own loader, the reader goes on past an error: one run of a
// config names every mistake in it, each with its JSON path, in document
// order.
TEST(ConfigErrorsTest, ThreeErrorsAreAllReportedWithTheirPaths) {
  absl::StatusOr<Config> config = Config::FromJson(R"({"methodConfig": [
      {"name": [{"service": "a.S"}], "timeout": "0s"},
      {"name": [{"service": "b.S"}],
       "retryPolicy": {"maxAttempts": 0, "initialBackoff": "0.1s",
                       "maxBackoff": "1s", "backoffMultiplier": 2,
                       "retryableStatusCodes": ["UNAVAILABLE"]},
       "rpcguard": {"jitter": "SOME"}}]})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "methodConfig[0].timeout: must be greater than 0; "
            "methodConfig[1].retryPolicy.maxAttempts: must be at least 2; "
            "methodConfig[1].rpcguard.jitter: unknown jitter \"SOME\" (want "
            "FULL, A6 or DECORRELATED)");
}

TEST(ConfigErrorsTest, OneErrorIsReportedAlone) {
  absl::StatusOr<Config> config = Config::FromJson(R"({"methodConfig": [
      {"name": [{"service": "a.S"}], "timeout": "1s"},
      {"name": [{"service": "b.S"}], "waitForReady": 1}]})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "methodConfig[1].waitForReady: must be a boolean");
}

// Destination objects and names are collected too, and a missing required
// field is named once per field.
TEST(ConfigErrorsTest, ErrorsAcrossTheDocumentAreCollected) {
  absl::StatusOr<Config> config = Config::FromJson(R"({
      "retryThrottling": {"maxTokens": 10},
      "methodConfig": [{"name": [{"service": "a/S"}],
                        "retryPolicy": {"maxAttempts": 3}}],
      "rpcguard": {"circuitBreaker": {"buckets": 0}, "breakerKey": "x"}})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "retryThrottling.tokenRatio: field is required; "
            "methodConfig[0].retryPolicy.initialBackoff: field is required; "
            "methodConfig[0].retryPolicy.maxBackoff: field is required; "
            "methodConfig[0].retryPolicy.backoffMultiplier: field is "
            "required; "
            "methodConfig[0].retryPolicy.retryableStatusCodes: field is "
            "required; "
            "methodConfig[0].name[0].service: must not contain '/'; "
            "rpcguard.circuitBreaker.buckets: must be in [1, 1000000]; "
            "rpcguard.breakerKey: unknown breaker key \"x\" (want target or "
            "target_and_service)");
}

TEST(ConfigErrorsTest, ManyErrorsAreCappedWithACount) {
  std::string codes;
  for (int i = 0; i < 60; ++i) absl::StrAppend(&codes, i ? "," : "", "\"X\"");
  absl::StatusOr<Config> config = Config::FromJson(absl::StrCat(
      R"({"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2,
         "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2,
         "retryableStatusCodes": [)",
      codes, "]}}]}"));
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::EndsWith(config.status().message(), "; and 10 more errors"))
      << config.status().message();
}

}  // namespace
}  // namespace rpcguard
