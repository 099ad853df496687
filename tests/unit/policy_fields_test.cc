// Copyright rpcguard authors.
//
// The table of MethodPolicy settings (internal/policy_fields.h): every row
// reads its JSON, shows in Explain and reads its .proto option to the same
// value, and the bits the list derives are what the table and the resolver
// rely on.

#include "rpcguard/config_reader/policy_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/rpcguard/v1/options.pb.h"
#include "rpcguard/config.h"

namespace rpcguard {
namespace {

// A value for one setting, written each way it can be.
struct Sample {
  std::string json;   // the key's value, in its JsonPlace
  std::string proto;  // text format of the option field, "" if none
};

// One sample per setting, by JSON name; a row without one fails below, so a
// new setting comes with its round trip.
const std::map<std::string, Sample>& Samples() {
  static const auto* samples = new std::map<std::string, Sample>{
      {"idempotency", {R"("KEYED")", "idempotency: KEYED"}},
      {"retryPolicy",
       {R"({"maxAttempts": 4, "initialBackoff": "0.02s",
            "maxBackoff": "0.2s", "backoffMultiplier": 3,
            "retryableStatusCodes": ["ABORTED", "UNAVAILABLE"]})",
        "retry { max_attempts: 4 initial_backoff { nanos: 20000000 } "
        "max_backoff { nanos: 200000000 } backoff_multiplier: 3 "
        "retryable_status_codes: 'ABORTED' "
        "retryable_status_codes: 'UNAVAILABLE' }"}},
      {"jitter", {R"("DECORRELATED")", ""}},
      {"perAttemptTimeout",
       {R"("0.5s")", "per_attempt_timeout { nanos: 500000000 }"}},
      {"timeout", {R"("2s")", ""}},
      {"minAttemptTime", {R"("0.003s")", ""}},
      {"waitForReady", {"true", ""}},
      {"hedgingPolicy",
       {R"({"maxAttempts": 3, "hedgingDelay": "0.03s",
            "nonFatalStatusCodes": ["UNAVAILABLE"]})",
        "hedging { max_attempts: 3 hedging_delay { nanos: 30000000 } "
        "non_fatal_status_codes: 'UNAVAILABLE' }"}},
  };
  return *samples;
}

// A config whose one method entry sets only `row`'s setting to `value`.
std::string ConfigWith(const PolicyFieldRow& row, const std::string& value) {
  const std::string member = absl::StrCat("\"", row.name, "\": ", value);
  return absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": "t.S", "method": "M"}], )",
      row.place == JsonPlace::kRpcguard
          ? absl::StrCat(R"("rpcguard": {)", member, "}")
          : member,
      "}]}");
}

TEST(PolicyFieldsTest, OneRowPerSettingInBitOrder) {
  ASSERT_EQ(PolicyFieldRows().size(), static_cast<size_t>(kNumPolicyFields));
  uint32_t all = 0;
  for (int i = 0; i < kNumPolicyFields; ++i) {
    const PolicyFieldRow& row = PolicyFieldRows()[i];
    EXPECT_EQ(row.index, i) << row.name;
    const uint32_t bit = 1u << row.index;
    EXPECT_EQ(all & bit, 0u) << row.name << ": bit taken twice";
    all |= bit;
  }
  EXPECT_EQ(all, kAllPolicyFields);
  EXPECT_EQ(static_cast<uint32_t>(kFieldHedging),
            1u << static_cast<int>(kFieldIndexHedging));
}

TEST(PolicyFieldsTest, NamesAreDistinctPerPlace) {
  for (const PolicyFieldRow& a : PolicyFieldRows()) {
    for (const PolicyFieldRow& b : PolicyFieldRows()) {
      if (a.index == b.index) continue;
      EXPECT_FALSE(a.place == b.place && a.name == b.name) << a.name;
    }
  }
}

TEST(PolicyFieldsTest, ProtoFieldsExistInTheOption) {
  const google::protobuf::Descriptor* d =
      ::rpcguard::v1::MethodPolicy::descriptor();
  int with_proto = 0;
  for (const PolicyFieldRow& row : PolicyFieldRows()) {
    if (row.proto_field.empty()) continue;
    ++with_proto;
    EXPECT_NE(d->FindFieldByName(std::string(row.proto_field)), nullptr)
        << row.name << " reads " << row.proto_field;
  }
  // Every field of the option is some row's.
  EXPECT_EQ(with_proto, d->field_count());
}

TEST(PolicyFieldsTest, EveryRowRoundTrips) {
  for (const PolicyFieldRow& row : PolicyFieldRows()) {
    SCOPED_TRACE(row.name);
    auto sample = Samples().find(std::string(row.name));
    ASSERT_NE(sample, Samples().end()) << "no sample for this row";

    // JSON: the entry sets this setting, and only it.
    absl::StatusOr<Config> config =
        Config::FromJson(ConfigWith(row, sample->second.json));
    ASSERT_TRUE(config.ok()) << config.status();
    const ResolvedPolicy r = config->Resolve("/t.S/M");
    for (const PolicyFieldRow& other : PolicyFieldRows()) {
      EXPECT_EQ(r.sources[other.index] == PolicySource::kConfigMethod,
                other.index == row.index)
          << other.name;
    }
    const std::string shown = row.explain(r.policy);
    EXPECT_NE(shown, row.explain(MethodPolicy())) << "the sample is a default";

    // Explain shows it, with its source.
    const std::string explained = config->Explain("/t.S/M");
    const std::string line = absl::StrCat(row.name, ":");
    bool found = false;
    for (absl::string_view l : absl::StrSplit(explained, '\n')) {
      if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(l), line)) {
        continue;
      }
      found = true;
      EXPECT_TRUE(absl::StrContains(l, shown)) << l;
      EXPECT_TRUE(absl::StrContains(l, "[config: method entry]")) << l;
    }
    EXPECT_TRUE(found) << explained;

    // The .proto option, where there is one, reads to the same value.
    if (row.proto_field.empty()) continue;
    ::rpcguard::v1::MethodPolicy option;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        sample->second.proto, &option));
    internal::ConfigErrors errors;
    Config::Entry entry;
    ReadPolicyOption(option, "t.S.M: (rpcguard.v1.method)", errors, &entry);
    ASSERT_TRUE(errors.empty()) << errors.ToStatus();
    EXPECT_EQ(entry.fields, 1u << row.index);
    EXPECT_EQ(row.explain(entry.policy), shown);
  }
}

// The retry row leaves the jitter to its own row: a retryPolicy from a less
// specific source does not undo a jitter set by a more specific one.
TEST(PolicyFieldsTest, MergeKeepsTheJitterApartFromTheRetryPolicy) {
  MethodPolicy specific;
  specific.retry.backoff.jitter = Jitter::kDecorrelated;
  MethodPolicy general;
  general.retry.max_attempts = 7;
  general.retry.backoff.jitter = Jitter::kA6;
  MethodPolicy to;
  uint32_t have = 0;
  MergePolicy(specific, kFieldJitter, &to, &have);
  MergePolicy(general, kFieldRetry | kFieldJitter, &to, &have);
  EXPECT_EQ(to.retry.max_attempts, 7);
  EXPECT_EQ(to.retry.backoff.jitter, Jitter::kDecorrelated);
  EXPECT_EQ(have, kFieldRetry | kFieldJitter);
}

// A .proto option reports every bad field too, as the JSON does.
TEST(PolicyFieldsTest, OptionErrorsAreAllReported) {
  ::rpcguard::v1::MethodPolicy option;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "retry { max_attempts: 1 backoff_multiplier: -1 } "
      "per_attempt_timeout { seconds: -1 }",
      &option));
  internal::ConfigErrors errors;
  Config::Entry entry;
  ReadPolicyOption(option, "t.S.M: (rpcguard.v1.method)", errors, &entry);
  EXPECT_EQ(errors.ToStatus().message(),
            "t.S.M: (rpcguard.v1.method).retry.max_attempts: must be at least "
            "2; t.S.M: (rpcguard.v1.method).retry.backoff_multiplier: must be "
            "greater than 0; t.S.M: (rpcguard.v1.method).per_attempt_timeout: "
            "must be greater than 0");
}

}  // namespace
}  // namespace rpcguard
