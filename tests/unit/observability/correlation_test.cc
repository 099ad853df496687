// Copyright rpcguard authors.
//
// Correlation ids (issue 24): which traceparent headers give a trace id
// (only valid ones), which other values are kept (short printable ones), the
// key list's rules, and how the ids look on trace lines of both formats.

#include "rpcguard/observability/correlation.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/observability/trace.h"
#include "rpcguard/observability/trace_fields.h"

namespace rpcguard {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kValid[] =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceparentTest, AValidHeaderGivesItsTraceId) {
  EXPECT_THAT(TraceIdFromTraceparent(kValid), Optional(std::string(kTraceId)));
  // Surrounding whitespace is allowed, as in any HTTP header.
  EXPECT_THAT(TraceIdFromTraceparent(absl::StrCat(" \t", kValid, " ")),
              Optional(std::string(kTraceId)));
  // A later version may append fields after a '-'.
  EXPECT_THAT(
      TraceIdFromTraceparent(
          "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-next"),
      Optional(std::string(kTraceId)));
}

TEST(TraceparentTest, AMalformedHeaderGivesNothing) {
  const char* const bad[] = {
      "",
      "00",
      "garbage",
      // Uppercase hex: the spec says lowercase.
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      // All-zero trace id and parent id are invalid.
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      // Version ff is forbidden; version 00 has no more fields.
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
      // Wrong separators, lengths, characters.
      "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
      "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
  };
  for (const char* header : bad) {
    EXPECT_EQ(TraceIdFromTraceparent(header), std::nullopt) << header;
  }
  // Bytes of any value, a megabyte long: no crash, nothing kept.
  std::string huge(1 << 20, '\xff');
  EXPECT_EQ(TraceIdFromTraceparent(huge), std::nullopt);
  EXPECT_EQ(TraceIdFromTraceparent(std::string("00-\0", 4)), std::nullopt);
}

TEST(CorrelationValueTest, OnlyShortPrintableValuesAreKept) {
  EXPECT_TRUE(IsCorrelationValue("r-7"));
  EXPECT_TRUE(IsCorrelationValue("0f8fad5b-d9cb-469f-a165-70867728950e"));
  EXPECT_TRUE(IsCorrelationValue(std::string(kMaxCorrelationValue, 'a')));
  EXPECT_FALSE(IsCorrelationValue(""));
  EXPECT_FALSE(IsCorrelationValue(std::string(kMaxCorrelationValue + 1, 'a')));
  EXPECT_FALSE(IsCorrelationValue("a b"));
  EXPECT_FALSE(IsCorrelationValue("a,b"));  // separates ids on a line
  EXPECT_FALSE(IsCorrelationValue("a\nlevel=error msg=forged"));
  EXPECT_FALSE(IsCorrelationValue("caf\xc3\xa9"));
  EXPECT_FALSE(IsCorrelationValue(std::string("a\0b", 3)));
}

TEST(CorrelationKeysTest, DefaultsAreValid) {
  EXPECT_THAT(DefaultCorrelationKeys(),
              ElementsAre("traceparent", "x-request-id"));
  EXPECT_TRUE(
      ValidateCorrelationKeys(DefaultCorrelationKeys(), "correlationKeys")
          .ok());
  EXPECT_TRUE(ValidateCorrelationKeys({}, "correlationKeys").ok());
}

TEST(CorrelationKeysTest, BadKeysNameTheField) {
  absl::Status s = ValidateCorrelationKeys(
      std::vector<std::string>{"x-request-id", "Bad Key"}, "keys");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "keys[1]: must be a metadata key of 1 to 64 characters from "
            "[0-9a-z_.-]");
  EXPECT_EQ(ValidateCorrelationKeys(
                std::vector<std::string>{std::string(65, 'a')}, "keys")
                .message(),
            "keys[0]: must be a metadata key of 1 to 64 characters from "
            "[0-9a-z_.-]");
}

TEST(ReadCorrelationIdsTest, ReadsTheConfiguredKeysAndDropsJunk) {
  const std::multimap<std::string, std::string> md = {
      {"traceparent", kValid},     {"x-request-id", "r-7"},
      {"x-request-id", "r-8"},  // a repeat: the first counts
      {"x-junk", "has space"},     {"x-other", "o-1"},
      {"authorization", "secret"},
  };
  CorrelationIds ids = ReadCorrelationIds(
      md, std::vector<std::string>{"x-other", "traceparent", "x-request-id",
                                   "x-junk", "x-missing"});
  EXPECT_EQ(ids.trace_id, kTraceId);
  EXPECT_THAT(ids.others, ElementsAre(CorrelationId{"x-other", "o-1"},
                                      CorrelationId{"x-request-id", "r-7"}));
  // Only the listed keys: never anything else the caller sent.
  ids = ReadCorrelationIds(md, std::vector<std::string>{"x-missing"});
  EXPECT_TRUE(ids.empty());
  // A malformed traceparent is ignored; the other ids stay.
  ids = ReadCorrelationIds({{"traceparent", "00-zz"}, {"x-request-id", "r"}},
                           DefaultCorrelationKeys());
  EXPECT_THAT(ids.trace_id, IsEmpty());
  EXPECT_THAT(ids.others, ElementsAre(CorrelationId{"x-request-id", "r"}));
}

TraceEvent AttemptWithIds() {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kAttempt;
  e.time = absl::FromUnixMicros(1764478862123456);
  e.call_id = 0x1a2b;
  e.method = "/pkg.Svc/M";
  e.attempt = 1;
  e.code = grpc::StatusCode::UNAVAILABLE;
  e.status_class = StatusClass::kRetriable;
  e.decision = TraceDecision::kRetry;
  e.idempotency_key = "k";
  e.trace_id = kTraceId;
  e.correlation = {{"x-request-id", "r-7"}, {"x-b3", "a=b"}};
  e.message = "busy";
  return e;
}

TEST(CorrelationLineTest, LogfmtCarriesTheIdsBeforeTheMessage) {
  const std::string line = FormatLogfmt(AttemptWithIds());
  EXPECT_THAT(line, ::testing::HasSubstr(
                        " key=k trace_id=4bf92f3577b34da6a3ce929d0e0e4736 "
                        "correlation=\"x-request-id:r-7,x-b3:a=b\" "
                        "message=busy\n"));
  // A call without ids has neither field.
  TraceEvent plain = AttemptWithIds();
  plain.trace_id.clear();
  plain.correlation.clear();
  EXPECT_THAT(FormatLogfmt(plain),
              ::testing::Not(::testing::HasSubstr("trace_id")));
  EXPECT_THAT(FormatLogfmt(plain),
              ::testing::Not(::testing::HasSubstr("correlation")));
}

TEST(CorrelationLineTest, JsonCarriesTheIds) {
  EXPECT_THAT(FormatJson(AttemptWithIds()),
              ::testing::HasSubstr(
                  R"("key":"k","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",)"
                  R"("correlation":"x-request-id:r-7,x-b3:a=b","message":)"));
}

// The reader's side of the schema: the fields parse back to the same ids,
// and hostile values are refused.
TEST(CorrelationLineTest, FieldsParseBack) {
  using internal::TraceFieldText;
  const TraceEvent want = AttemptWithIds();
  std::vector<TraceFieldText> fields;
  for (const internal::TraceField& row : internal::TraceFields()) {
    if ((row.kinds & internal::TraceKindBit(want.kind)) == 0) continue;
    internal::TraceFieldValue v;
    if (!row.format(want, &v)) continue;
    fields.push_back({std::string(row.key), std::string(v.text),
                      v.text.empty() && !v.number});
  }
  absl::StatusOr<TraceEvent> got = internal::EventFromTraceFields(fields);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->trace_id, want.trace_id);
  EXPECT_EQ(got->correlation, want.correlation);

  auto with = [&](const std::string& key, const std::string& value) {
    std::vector<TraceFieldText> f = fields;
    f.push_back({key, value, false});
    return internal::EventFromTraceFields(f).status();
  };
  EXPECT_EQ(with("trace_id", "xyz").message(), "bad trace_id=xyz");
  EXPECT_EQ(with("correlation", "nocolon").message(),
            "bad correlation=nocolon");
  EXPECT_EQ(with("correlation", "a:b c").message(), "bad correlation=a:b c");
  std::string many;
  for (int i = 0; i < 9; ++i)
    absl::StrAppend(&many, i ? "," : "", "k", i, ":v");
  EXPECT_FALSE(with("correlation", many).ok());
}

}  // namespace
}  // namespace rpcguard
