// Copyright rpcguard authors.
//
// CommitReason's count, names and reading back come from one list.

#include "rpcguard/decision/commit_reason.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace rpcguard {
namespace {

TEST(CommitReasonTest, CountIsTheListsLength) {
  EXPECT_EQ(kNumCommitReasons,
            static_cast<int>(CommitReason::kChannelBufferLimit) + 1);
}

TEST(CommitReasonTest, EveryNameIsDistinctAndReadsBack) {
  std::set<std::string> names;
  for (int i = 0; i < kNumCommitReasons; ++i) {
    const auto reason = static_cast<CommitReason>(i);
    const absl::string_view name = CommitReasonName(reason);
    EXPECT_FALSE(name.empty());
    names.insert(std::string(name));
    EXPECT_EQ(CommitReasonFromName(name), reason) << name;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumCommitReasons));
  EXPECT_EQ(CommitReasonName(CommitReason::kChannelBufferLimit),
            "channel_buffer_limit");
}

TEST(CommitReasonTest, AnUnknownNameIsNone) {
  EXPECT_FALSE(CommitReasonFromName("").has_value());
  EXPECT_FALSE(CommitReasonFromName("Headers").has_value());
  EXPECT_FALSE(CommitReasonFromName("buffer").has_value());
}

}  // namespace
}  // namespace rpcguard
