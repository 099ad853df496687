// Copyright rpcguard authors.
//
// ServerCalls: entries only for running server calls; a give-up that comes
// after its server call ended, or for a reused address, marks nothing.

#include "rpcguard/internal/grpc/server_calls.h"

#include "gtest/gtest.h"
#include "rpcguard/internal/grpc/server_interceptor.h"

namespace rpcguard {
namespace internal {
namespace {

grpc_call* Fake(uintptr_t n) { return reinterpret_cast<grpc_call*>(n << 4); }

TEST(ServerCallsTest, AGiveUpMarksTheRunningCall) {
  ServerCalls& calls = ServerCalls::Get();
  const uint64_t serial = calls.Begin(Fake(1001), /*no_hedge=*/false);
  const ServerCallLink link = calls.Find(Fake(1001));
  ASSERT_TRUE(link.linked());
  EXPECT_FALSE(link.no_hedge);
  calls.Mark(link, GiveUpReason::kMaxAttempts);
  calls.Mark(link, GiveUpReason::kBreakerOpen);
  EXPECT_EQ(calls.Marked(Fake(1001), serial).reasons,
            ReasonBit(GiveUpReason::kMaxAttempts) |
                ReasonBit(GiveUpReason::kBreakerOpen));
  calls.End(Fake(1001), serial);
  EXPECT_EQ(calls.Marked(Fake(1001), serial).reasons, 0u);
}

TEST(ServerCallsTest, TheFirstGiveUpComesFirstWhateverItsEnumValue) {
  ServerCalls& calls = ServerCalls::Get();
  const uint64_t serial = calls.Begin(Fake(1005), /*no_hedge=*/false);
  const ServerCallLink link = calls.Find(Fake(1005));
  calls.Mark(link, GiveUpReason::kThrottled);
  calls.Mark(link, GiveUpReason::kPushbackStop);
  calls.Mark(link, GiveUpReason::kMaxAttempts);
  calls.Mark(link, GiveUpReason::kThrottled);  // again: still first
  const Marks marks = calls.Marked(Fake(1005), serial);
  calls.End(Fake(1005), serial);
  EXPECT_EQ(marks.count, 3);
  const ReasonBits all = ~ReasonBits{0};
  EXPECT_EQ(marks.First(all), GiveUpReason::kThrottled);
  // The first of those that travel.
  EXPECT_EQ(marks.First(ReasonBit(GiveUpReason::kMaxAttempts) |
                        ReasonBit(GiveUpReason::kPushbackStop)),
            GiveUpReason::kPushbackStop);
  EXPECT_EQ(marks.First(ReasonBit(GiveUpReason::kBreakerOpen)),
            GiveUpReason::kNone);
  EXPECT_EQ(Marks().First(all), GiveUpReason::kNone);
}

TEST(ServerCallsTest, ALateGiveUpCreatesNothing) {
  ServerCalls& calls = ServerCalls::Get();
  const size_t before = calls.size();
  const uint64_t serial = calls.Begin(Fake(1002), false);
  const ServerCallLink link = calls.Find(Fake(1002));
  calls.End(Fake(1002), serial);
  calls.Mark(link, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(calls.size(), before);
  EXPECT_FALSE(calls.Find(Fake(1002)).linked());
}

TEST(ServerCallsTest, AReusedAddressIsNeverMarkedByTheOldCall) {
  ServerCalls& calls = ServerCalls::Get();
  const uint64_t first = calls.Begin(Fake(1003), false);
  const ServerCallLink old_link = calls.Find(Fake(1003));
  calls.End(Fake(1003), first);
  // Another server call at the same address.
  const uint64_t second = calls.Begin(Fake(1003), false);
  calls.Mark(old_link, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(calls.Marked(Fake(1003), second).reasons, 0u);
  // The old call's late end does not erase the new one's entry.
  calls.End(Fake(1003), first);
  EXPECT_TRUE(calls.Find(Fake(1003)).linked());
  calls.End(Fake(1003), second);
  EXPECT_FALSE(calls.Find(Fake(1003)).linked());
}

TEST(ServerCallsTest, LinksSurviveTheirMetadataForm) {
  ServerCalls& calls = ServerCalls::Get();
  const uint64_t serial = calls.Begin(Fake(1004), /*no_hedge=*/true);
  const ServerCallLink link = calls.Find(Fake(1004));
  EXPECT_TRUE(link.no_hedge);
  const ServerCallLink back = DecodeLink(EncodeLink(link));
  EXPECT_EQ(back.call, link.call);
  EXPECT_EQ(back.serial, link.serial);
  EXPECT_TRUE(back.no_hedge);
  calls.End(Fake(1004), serial);
  for (const char* bad : {"", ".", "zz.1", "10.", "10.x", "0.5", "10.0"}) {
    EXPECT_FALSE(DecodeLink(bad).linked()) << bad;
  }
}

TEST(ServerCallsTest, OnlyRetriesThatHappenedTravelAsMaxAttempts) {
  EXPECT_EQ(TravellingReason(GiveUpReason::kMaxAttempts, 1),
            GiveUpReason::kNone);
  EXPECT_EQ(TravellingReason(GiveUpReason::kMaxAttempts, 3),
            GiveUpReason::kMaxAttempts);
  EXPECT_EQ(TravellingReason(GiveUpReason::kBreakerOpen, 0),
            GiveUpReason::kBreakerOpen);
}

TEST(ServerCallsTest, RepeatedAttemptsAreRecognised) {
  EXPECT_FALSE(IsRepeatedAttempt("", ""));
  EXPECT_FALSE(IsRepeatedAttempt("1", ""));
  EXPECT_TRUE(IsRepeatedAttempt("2", ""));
  EXPECT_TRUE(IsRepeatedAttempt("", "1"));
  EXPECT_FALSE(IsRepeatedAttempt("", "0"));
  EXPECT_FALSE(IsRepeatedAttempt("two", "x"));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
