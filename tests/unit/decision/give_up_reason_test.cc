// Copyright rpcguard authors.
//
// GiveUpReason's count and names come from one list, and the trace
// reference (docs/traces.md) names exactly the reasons the enum has.

#include "rpcguard/decision/give_up_reason.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rpcguard {
namespace {

TEST(GiveUpReasonTest, CountIsTheListsLength) {
  EXPECT_EQ(kNumGiveUpReasons,
            static_cast<int>(GiveUpReason::kDownstreamGaveUp) + 1);
  std::set<std::string> names;
  for (int i = 0; i < kNumGiveUpReasons; ++i) {
    names.insert(std::string(GiveUpReasonName(static_cast<GiveUpReason>(i))));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumGiveUpReasons))
      << "two reasons share a name";
}

// The `reason` row of the trace-fields table in docs/traces.md:
//   | `reason` | why it gave up: `max_attempts`, `deadline`, ... |
// lists every reason but none (a call that gave up has a reason), once.
TEST(GiveUpReasonTest, TraceDocListsEveryReason) {
  std::ifstream in("docs/traces.md");
  ASSERT_TRUE(in) << "docs/traces.md is not in the test's runfiles";
  std::stringstream text;
  text << in.rdbuf();
  constexpr absl::string_view kRow = "| `reason` | why it gave up: ";
  std::string row;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (absl::StartsWith(line, kRow)) {
      ASSERT_TRUE(row.empty()) << "two `reason` rows";
      row = std::string(line.substr(kRow.size()));
    }
  }
  ASSERT_FALSE(row.empty()) << "no line starts with " << kRow;
  absl::string_view list = absl::StripAsciiWhitespace(row);
  ASSERT_TRUE(absl::ConsumeSuffix(&list, "|")) << row;
  std::multiset<std::string> readme;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    item = absl::StripAsciiWhitespace(item);
    ASSERT_TRUE(absl::ConsumePrefix(&item, "`") &&
                absl::ConsumeSuffix(&item, "`"))
        << "not a `name`: " << item;
    readme.insert(std::string(item));
  }
  std::multiset<std::string> reasons;
  for (int i = 1; i < kNumGiveUpReasons; ++i) {  // all but kNone
    reasons.insert(std::string(GiveUpReasonName(static_cast<GiveUpReason>(i))));
  }
  EXPECT_EQ(readme, reasons);
}

}  // namespace
}  // namespace rpcguard
