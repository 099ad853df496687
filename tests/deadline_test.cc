// Copyright rpcguard authors.
//
// The bridge between the injected Clock and gRPC's real-clock deadlines
// (internal/deadline.h), with a fake clock far from the real one.

#include "rpcguard/internal/deadline.h"

#include <grpcpp/support/time.h>
#include <gtest/gtest.h>

#include <chrono>

#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace internal {
namespace {

using ::rpcguard::testing::FakeClock;
using std::chrono::system_clock;

// How far apart two readings of the real clock may be in these tests.
constexpr auto kSlack = std::chrono::milliseconds(500);

absl::Duration Between(system_clock::time_point a, system_clock::time_point b) {
  return absl::FromChrono(b - a);
}

TEST(DeadlineTest, ToSystemTimeKeepsTheRemainingDuration) {
  FakeClock clock;  // an hour after the epoch: nowhere near real time
  const auto before = system_clock::now();
  const auto t = ToSystemTime(clock.Now() + absl::Seconds(3), &clock);
  const absl::Duration ahead = Between(before, t);
  EXPECT_GE(ahead, absl::Seconds(3));
  EXPECT_LT(ahead, absl::Seconds(3) + absl::FromChrono(kSlack));
}

TEST(DeadlineTest, PastIsNowAndBeyondRangeIsNoDeadline) {
  FakeClock clock;
  const auto before = system_clock::now();
  const auto past = ToSystemTime(clock.Now() - absl::Hours(2), &clock);
  EXPECT_GE(past, before);
  EXPECT_LT(past, before + kSlack);
  EXPECT_EQ(ToSystemTime(absl::InfiniteFuture(), &clock),
            system_clock::time_point::max());
  EXPECT_EQ(ToSystemTime(clock.Now() + absl::Hours(24 * 365 * 1000), &clock),
            system_clock::time_point::max());
}

TEST(DeadlineTest, NeverLaterThanTheCaller) {
  FakeClock clock;
  gpr_timespec caller;
  grpc::Timepoint2Timespec(system_clock::now() + std::chrono::seconds(1),
                           &caller);
  // Later than the caller: the caller's own deadline, exactly.
  const gpr_timespec capped =
      NoLaterThanCaller(clock.Now() + absl::Seconds(10), &clock, caller);
  EXPECT_EQ(gpr_time_cmp(capped, caller), 0);
  // Earlier: its own.
  const gpr_timespec own =
      NoLaterThanCaller(clock.Now() + absl::Milliseconds(100), &clock, caller);
  EXPECT_LT(gpr_time_cmp(own, caller), 0);
  // A caller without a deadline caps nothing.
  const gpr_timespec unbounded =
      NoLaterThanCaller(clock.Now() + absl::Seconds(10), &clock,
                        gpr_inf_future(GPR_CLOCK_REALTIME));
  EXPECT_LT(gpr_time_cmp(unbounded, gpr_inf_future(GPR_CLOCK_REALTIME)), 0);
}

TEST(DeadlineTest, CallerDeadlineOnTheInjectedClock) {
  FakeClock clock;
  grpc::ClientContext none;
  EXPECT_EQ(CallerDeadline(none, &clock), absl::InfiniteFuture());

  grpc::ClientContext two_seconds;
  two_seconds.set_deadline(system_clock::now() + std::chrono::seconds(2));
  const absl::Duration left = CallerDeadline(two_seconds, &clock) - clock.Now();
  EXPECT_LE(left, absl::Seconds(2));
  EXPECT_GT(left, absl::Seconds(2) - absl::FromChrono(kSlack));
}

TEST(DeadlineTest, TheWallClockIsInjectedToo) {
  FakeClock clock;                                       // decisions
  FakeClock wall(absl::FromUnixSeconds(2'000'000'000));  // gRPC's clock
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(wall.Now() + absl::Seconds(2)));
  // Exact: no real clock is read.
  EXPECT_EQ(CallerDeadline(ctx, &clock, &wall), clock.Now() + absl::Seconds(2));
  EXPECT_EQ(ToSystemTime(clock.Now() + absl::Seconds(3), &clock, &wall),
            absl::ToChronoTime(wall.Now() + absl::Seconds(3)));
  wall.Advance(absl::Seconds(1));
  EXPECT_EQ(CallerDeadline(ctx, &clock, &wall), clock.Now() + absl::Seconds(1));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
