// Copyright rpcguard authors.
//
// The bridge between the injected Clock's monotonic time and gRPC's
// monotonic deadlines (internal/grpc/deadline.h), with fake clocks far from the
// real ones, and what a wall-clock step does to it: nothing.

#include "rpcguard/internal/grpc/deadline.h"

#include <grpc/support/time.h>
#include <gtest/gtest.h>

#include <chrono>

#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace internal {
namespace {

using ::rpcguard::testing::FakeClock;

absl::Time FromTimespec(gpr_timespec ts) {
  return absl::UnixEpoch() + absl::Seconds(ts.tv_sec) +
         absl::Nanoseconds(ts.tv_nsec);
}

TEST(DeadlineTest, GrpcDeadlinesAreMonotonic) {
  FakeClock clock;
  FakeClock grpc(absl::FromUnixSeconds(5000));
  const gpr_timespec d = GrpcDeadline(clock.MonotonicNow() + absl::Seconds(3),
                                      &clock, absl::InfiniteFuture(), &grpc);
  EXPECT_EQ(d.clock_type, GPR_CLOCK_MONOTONIC);
  // The remaining duration, exactly, on gRPC's clock.
  EXPECT_EQ(FromTimespec(d), grpc.MonotonicNow() + absl::Seconds(3));
}

TEST(DeadlineTest, OnTheRealClockTheTimeIsTakenAsItIs) {
  Clock* real = Clock::Real();
  const absl::Time t = real->MonotonicNow() + absl::Seconds(7);
  EXPECT_EQ(OnGrpcClock(t, real), t);
  EXPECT_EQ(FromTimespec(GrpcDeadline(t, real)), t);
  // It is gRPC's own monotonic clock.
  const absl::Time before = real->MonotonicNow();
  const absl::Time grpc = FromTimespec(gpr_now(GPR_CLOCK_MONOTONIC));
  const absl::Time after = real->MonotonicNow();
  EXPECT_LE(before, grpc);
  EXPECT_LE(grpc, after);
}

TEST(DeadlineTest, PastIsNowAndBeyondRangeIsNoDeadline) {
  FakeClock clock;
  FakeClock grpc(absl::FromUnixSeconds(5000));
  EXPECT_EQ(FromTimespec(GrpcDeadline(clock.MonotonicNow() - absl::Hours(2),
                                      &clock, absl::InfiniteFuture(), &grpc)),
            grpc.MonotonicNow());
  const gpr_timespec inf = gpr_inf_future(GPR_CLOCK_MONOTONIC);
  EXPECT_EQ(gpr_time_cmp(GrpcDeadline(absl::InfiniteFuture(), &clock,
                                      absl::InfiniteFuture(), &grpc),
                         inf),
            0);
  EXPECT_EQ(gpr_time_cmp(MonotonicTimespec(absl::InfiniteFuture()), inf), 0);
  EXPECT_EQ(gpr_time_cmp(MonotonicTimespec(absl::UnixEpoch() - absl::Hours(1)),
                         gpr_time_0(GPR_CLOCK_MONOTONIC)),
            0);
}

TEST(DeadlineTest, NeverLaterThanTheCap) {
  FakeClock clock;
  FakeClock grpc(absl::FromUnixSeconds(5000));
  const absl::Time cap = grpc.MonotonicNow() + absl::Seconds(1);
  // Later than the cap: the cap, exactly.
  EXPECT_EQ(FromTimespec(GrpcDeadline(clock.MonotonicNow() + absl::Seconds(10),
                                      &clock, cap, &grpc)),
            cap);
  // Earlier: its own.
  EXPECT_EQ(
      FromTimespec(GrpcDeadline(clock.MonotonicNow() + absl::Milliseconds(100),
                                &clock, cap, &grpc)),
      grpc.MonotonicNow() + absl::Milliseconds(100));
}

TEST(DeadlineTest, CallerDeadlineOnBothMonotonicClocks) {
  FakeClock clock;
  FakeClock grpc(absl::FromUnixSeconds(5000));
  grpc.SetWall(absl::FromUnixSeconds(2'000'000'000));
  grpc::ClientContext none;
  const CallDeadline unbounded = CallerDeadline(none, &clock, &grpc);
  EXPECT_EQ(unbounded.on_clock, absl::InfiniteFuture());
  EXPECT_EQ(unbounded.on_grpc, absl::InfiniteFuture());

  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(grpc.WallNow() + absl::Seconds(2)));
  // Exact: no real clock is read.
  const CallDeadline d = CallerDeadline(ctx, &clock, &grpc);
  EXPECT_EQ(d.on_clock, clock.MonotonicNow() + absl::Seconds(2));
  EXPECT_EQ(d.on_grpc, grpc.MonotonicNow() + absl::Seconds(2));
}

TEST(DeadlineTest, AMonotonicCallerDeadlineReadsNoWallClock) {
  FakeClock clock;
  FakeClock grpc(absl::FromUnixSeconds(5000));
  grpc::ClientContext ctx;
  gpr_timespec mono = MonotonicTimespec(grpc.MonotonicNow() + absl::Seconds(4));
  ctx.set_deadline(mono);
  grpc.StepWall(absl::Hours(-3));  // would show if the wall clock were read
  const CallDeadline d = CallerDeadline(ctx, &clock, &grpc);
  EXPECT_EQ(d.on_clock, clock.MonotonicNow() + absl::Seconds(4));
  EXPECT_EQ(d.on_grpc, grpc.MonotonicNow() + absl::Seconds(4));
}

// The caller's deadline is read once, at the call's start; a wall-clock step
// after it changes no deadline handed to gRPC.
TEST(DeadlineTest, AWallClockStepAfterTheStartChangesNoDeadline) {
  for (absl::Duration step : {absl::Hours(-1), absl::Seconds(30)}) {
    FakeClock clock;
    FakeClock grpc(absl::FromUnixSeconds(5000));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(grpc.WallNow() + absl::Seconds(3)));
    const CallDeadline d = CallerDeadline(ctx, &clock, &grpc);
    clock.Advance(absl::Milliseconds(500));
    grpc.Advance(absl::Milliseconds(500));
    clock.StepWall(step);
    grpc.StepWall(step);
    const gpr_timespec attempt =
        GrpcDeadline(d.on_clock, &clock, d.on_grpc, &grpc);
    EXPECT_EQ(FromTimespec(attempt) - grpc.MonotonicNow(),
              absl::Milliseconds(2500))
        << "step " << step;
  }
}

TEST(DeadlineTest, FakeClockStepsTheWallClockAlone) {
  FakeClock clock;
  const absl::Time mono = clock.MonotonicNow();
  const absl::Time wall = clock.WallNow();
  clock.StepWall(absl::Hours(-1));
  EXPECT_EQ(clock.MonotonicNow(), mono);
  EXPECT_EQ(clock.WallNow(), wall - absl::Hours(1));
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(clock.MonotonicNow(), mono + absl::Seconds(2));
  EXPECT_EQ(clock.WallNow(), wall - absl::Hours(1) + absl::Seconds(2));
  // A monotonic clock never goes back.
  clock.Advance(absl::Seconds(-5));
  EXPECT_EQ(clock.MonotonicNow(), mono + absl::Seconds(2));
  clock.SetWall(absl::FromUnixSeconds(42));
  EXPECT_EQ(clock.WallNow(), absl::FromUnixSeconds(42));
  EXPECT_EQ(clock.MonotonicNow(), mono + absl::Seconds(2));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
