// Copyright rpcguard authors.
//
// The retry decisions of one call, under a fake clock: nothing here sleeps.

#include "rpcguard/decision/retry_controller.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/random/distributions.h"
#include "absl/random/mock_distributions.h"
#include "absl/random/mocking_bit_gen.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/decision/backoff.h"
#include "rpcguard/decision/policy.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/testing/fake_clock.h"

namespace rpcguard {
namespace {

using ::grpc::StatusCode;
using ::rpcguard::testing::FakeClock;
using ::testing::_;
using ::testing::AnyNumber;
using Action = Decision::Action;

constexpr int kNumCodes = 17;

StatusCode Code(int i) { return static_cast<StatusCode>(i); }

const Pushback kNoPushback{};

Pushback RetryAfter(absl::Duration d) {
  Pushback p;
  p.kind = Pushback::Kind::kRetryAfter;
  p.delay = d;
  return p;
}

Pushback Stop() {
  Pushback p;
  p.kind = Pushback::Kind::kStop;
  return p;
}

// A generator whose every uniform draw returns `value`, whatever interval is
// asked for. With A6 jitter and value 1.0, every backoff delay is exactly its
// ceiling, min(initial * multiplier^(n-1), max).
class FixedBitGen {
 public:
  explicit FixedBitGen(double value) {
    // EXPECT_CALL rather than ON_CALL: calls without an expectation would
    // each print an "uninteresting call" warning.
    EXPECT_CALL(absl::MockUniform<double>(),
                Call(absl::IntervalClosedClosed, gen_, _, _))
        .Times(AnyNumber())
        .WillRepeatedly(::testing::Return(value));
  }
  absl::BitGenRef ref() { return absl::BitGenRef(gen_); }

 private:
  absl::MockingBitGen gen_;
};

// A policy whose backoff is A6 from `initial`, doubling up to 1 s, so that a
// FixedBitGen(1.0) makes every delay predictable.
MethodPolicy A6Policy(absl::Duration initial, int max_attempts = 5) {
  MethodPolicy p;
  p.idempotency = Idempotency::kIdempotent;
  p.retry.max_attempts = max_attempts;
  p.retry.backoff.initial = initial;
  p.retry.backoff.max = absl::Seconds(1);
  p.retry.backoff.multiplier = 2.0;
  p.retry.backoff.jitter = Jitter::kA6;
  p.min_attempt_time = absl::Milliseconds(2);
  return p;
}

class RetryControllerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  std::mt19937_64 rng_{12345};
  absl::BitGenRef gen() { return absl::BitGenRef(rng_); }
};

// ---------------------------------------------------------------------------
// Time.

// What a call's decisions were: each retry's delay, the time left after it
// and the next attempt's deadline (from now), until it gave up.
struct Course {
  std::vector<absl::Duration> delays, left, attempt_deadlines;
  GiveUpReason reason = GiveUpReason::kNone;
  bool operator==(const Course& o) const {
    return delays == o.delays && left == o.left &&
           attempt_deadlines == o.attempt_deadlines && reason == o.reason;
  }
};

// Runs a call that fails UNAVAILABLE every time, with a 20 s deadline and a
// 5 s per-attempt timeout, stepping the wall clock by `step` in every
// backoff.
Course RunWithWallSteps(absl::Duration step) {
  FakeClock clock;
  MethodPolicy policy = A6Policy(absl::Seconds(1), 4);
  policy.per_attempt_timeout = absl::Seconds(5);
  FixedBitGen gen(1.0);
  RetryController c(policy, true, clock.MonotonicNow() + absl::Seconds(20),
                    &clock);
  Course course;
  while (true) {
    course.attempt_deadlines.push_back(c.StartAttempt() - clock.MonotonicNow());
    clock.Advance(absl::Milliseconds(100));
    const Decision d =
        c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback, false, gen.ref());
    if (d.action != Action::kRetry) {
      course.reason = d.reason;
      return course;
    }
    course.delays.push_back(d.delay);
    clock.StepWall(step);
    clock.Advance(d.delay);
    course.left.push_back(c.Remaining());
  }
}

// The mission's first promise through NTP steps and VM resumes: a step of
// the wall clock, either way, during a backoff changes no decision.
TEST(RetryControllerTimeTest, AWallClockStepChangesNoDecision) {
  const Course steady = RunWithWallSteps(absl::ZeroDuration());
  ASSERT_EQ(steady.delays.size(), 3u);
  EXPECT_EQ(steady.reason, GiveUpReason::kMaxAttempts);
  // A6Policy caps every delay at 1 s.
  EXPECT_EQ(steady.delays[0], absl::Seconds(1));
  EXPECT_EQ(steady.left[0], absl::Milliseconds(20000 - 100 - 1000));
  for (absl::Duration step :
       {absl::Seconds(30), absl::Hours(-1), absl::Hours(24)}) {
    EXPECT_TRUE(RunWithWallSteps(step) == steady) << step;
  }
}

// ---------------------------------------------------------------------------
// Outcomes that end the call at once.

TEST_F(RetryControllerTest, SuccessfulRequestsNeverRetry) {
  MethodPolicy policy;
  policy.retry.max_attempts = 5;
  for (bool may_repeat : {false, true}) {
    for (bool cancelled : {false, true}) {
      for (const Pushback& pushback :
           {kNoPushback, Stop(), RetryAfter(absl::Milliseconds(5))}) {
        RetryController c(policy, may_repeat,
                          clock_.MonotonicNow() + absl::Milliseconds(100),
                          &clock_);
        c.StartAttempt();
        const Decision d =
            c.OnAttemptEnd(StatusCode::OK, pushback, cancelled, gen());
        EXPECT_EQ(d.action, Action::kDone);
        EXPECT_EQ(d.reason, GiveUpReason::kNone);
        EXPECT_EQ(d.status_class, StatusClass::kOk);
        EXPECT_EQ(d.delay, absl::ZeroDuration());
        EXPECT_EQ(c.attempts(), 1);
      }
    }
  }
}

TEST_F(RetryControllerTest, SuccessAfterRetriesIsDone) {
  MethodPolicy policy;
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                    &clock_);
  c.StartAttempt();
  Decision d =
      c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback, false, gen());
  ASSERT_EQ(d.action, Action::kRetry);
  clock_.Advance(d.delay);
  c.StartAttempt();
  d = c.OnAttemptEnd(StatusCode::OK, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kDone);
  EXPECT_EQ(d.reason, GiveUpReason::kNone);
  EXPECT_EQ(c.attempts(), 2);
}

TEST_F(RetryControllerTest, FatalCodesGiveUpAsFatal) {
  const MethodPolicy policy;
  const Classifier classifier;
  for (int i = 1; i < kNumCodes; ++i) {
    AttemptOutcome o;
    o.code = Code(i);
    if (classifier.Classify(o) != StatusClass::kFatal) continue;
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(Code(i), kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(Code(i));
    EXPECT_EQ(d.reason, GiveUpReason::kFatal) << StatusCodeName(Code(i));
    EXPECT_EQ(d.status_class, StatusClass::kFatal);
  }
}

TEST_F(RetryControllerTest, CancelledCodeWithoutCallerCancelIsFatal) {
  // A CANCELLED status the caller did not ask for (e.g. the server cancelled)
  // is fatal, not kCancelled.
  const MethodPolicy policy;
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                    &clock_);
  c.StartAttempt();
  const Decision d =
      c.OnAttemptEnd(StatusCode::CANCELLED, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kFatal);
}

TEST_F(RetryControllerTest, AuthCodesGiveUpAsAuth) {
  const MethodPolicy policy;
  for (StatusCode code :
       {StatusCode::UNAUTHENTICATED, StatusCode::PERMISSION_DENIED}) {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(code, kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(code);
    EXPECT_EQ(d.reason, GiveUpReason::kAuth) << StatusCodeName(code);
    EXPECT_EQ(d.status_class, StatusClass::kAuth);
  }
}

TEST_F(RetryControllerTest, FatalWinsOverPushback) {
  const MethodPolicy policy;
  for (const Pushback& pushback :
       {Stop(), RetryAfter(absl::Milliseconds(10))}) {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    const Decision d =
        c.OnAttemptEnd(StatusCode::INTERNAL, pushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kFatal);
  }
}

// An error the client made itself ends the call at once, whatever its code,
// the pushback, the attempts left and the idempotency: another attempt would
// make it again.
TEST_F(RetryControllerTest, LocalErrorsGiveUpAtOnce) {
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10));
  for (bool may_repeat : {false, true}) {
    for (StatusCode code : {StatusCode::RESOURCE_EXHAUSTED,
                            StatusCode::UNAVAILABLE, StatusCode::INTERNAL}) {
      for (const Pushback& pushback :
           {kNoPushback, Stop(), RetryAfter(absl::Milliseconds(1))}) {
        RetryController c(policy, may_repeat,
                          clock_.MonotonicNow() + absl::Seconds(10), &clock_);
        c.StartAttempt();
        AttemptEnd end;
        end.code = code;
        end.local_error = true;
        const AttemptOutcome seen = c.OutcomeOf(end);
        EXPECT_TRUE(seen.local_error);
        const Decision d = c.OnAttemptEnd(end, pushback, gen());
        EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(code);
        EXPECT_EQ(d.reason, GiveUpReason::kLocalError) << StatusCodeName(code);
        EXPECT_EQ(d.status_class, StatusClass::kFatal);
        EXPECT_TRUE(d.outcome.local_error);
        EXPECT_EQ(d.delay, absl::ZeroDuration());
      }
    }
  }
}

// The caller's own cancel or deadline names the call's end first.
TEST_F(RetryControllerTest, CallersCancelOrDeadlineBeatsALocalError) {
  const MethodPolicy policy;
  AttemptEnd end;
  end.code = StatusCode::RESOURCE_EXHAUSTED;
  end.local_error = true;
  end.caller_cancelled = true;
  RetryController cancelled(policy, true,
                            clock_.MonotonicNow() + absl::Seconds(1), &clock_);
  cancelled.StartAttempt();
  EXPECT_EQ(cancelled.OnAttemptEnd(end, kNoPushback, gen()).reason,
            GiveUpReason::kCancelled);
  end.caller_cancelled = false;
  RetryController late(policy, true, clock_.MonotonicNow() + absl::Seconds(1),
                       &clock_);
  late.StartAttempt();
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(late.OnAttemptEnd(end, kNoPushback, gen()).reason,
            GiveUpReason::kDeadline);
}

// A success is a success, whatever the glue guessed.
TEST_F(RetryControllerTest, OkIsNeverALocalError) {
  const MethodPolicy policy;
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(1),
                    &clock_);
  c.StartAttempt();
  AttemptEnd end;
  end.local_error = true;
  EXPECT_FALSE(c.OutcomeOf(end).local_error);
  const Decision d = c.OnAttemptEnd(end, kNoPushback, gen());
  EXPECT_EQ(d.action, Action::kDone);
  EXPECT_EQ(d.reason, GiveUpReason::kNone);
}

TEST_F(RetryControllerTest, CallersCancelIsNeverRetried) {
  MethodPolicy policy;
  policy.retry.max_attempts = 10;
  policy.per_attempt_timeout = absl::Milliseconds(10);
  for (int i = 1; i < kNumCodes; ++i) {
    for (const Pushback& pushback :
         {kNoPushback, Stop(), RetryAfter(absl::Milliseconds(1))}) {
      RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                        &clock_);
      c.StartAttempt();
      clock_.Advance(absl::Milliseconds(10));
      const Decision d = c.OnAttemptEnd(Code(i), pushback, true, gen());
      EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(Code(i));
      EXPECT_EQ(d.reason, GiveUpReason::kCancelled) << StatusCodeName(Code(i));
      EXPECT_EQ(d.status_class, StatusClass::kFatal);
    }
  }
}

// gRPC ends an attempt at the call's deadline by its own clock, which can
// be a few milliseconds ahead of rpcguard's (CI saw "gave up: fatal" for a
// hedged call that ran out of time). Within kDeadlineSlack that is the
// caller's deadline; further from it, a server's DEADLINE_EXCEEDED is its
// own answer.
TEST_F(RetryControllerTest, DeadlineExceededJustBeforeTheDeadlineIsTheCallers) {
  const MethodPolicy policy;
  const absl::Duration slack = RetryController::kDeadlineSlack;
  struct Row {
    absl::Duration before_deadline;
    StatusCode code;
    GiveUpReason reason;
  };
  for (const Row& row : {
           Row{absl::Milliseconds(3), StatusCode::DEADLINE_EXCEEDED,
               GiveUpReason::kDeadline},
           Row{slack, StatusCode::DEADLINE_EXCEEDED, GiveUpReason::kDeadline},
           Row{slack + absl::Milliseconds(1), StatusCode::DEADLINE_EXCEEDED,
               GiveUpReason::kFatal},
           Row{absl::Milliseconds(500), StatusCode::DEADLINE_EXCEEDED,
               GiveUpReason::kFatal},
           // Only gRPC's deadline code is read as the deadline.
           Row{absl::Milliseconds(3), StatusCode::INTERNAL,
               GiveUpReason::kFatal},
       }) {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(1),
                      &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Seconds(1) - row.before_deadline);
    AttemptEnd end;
    end.code = row.code;
    EXPECT_EQ(c.OutcomeOf(end).caller_deadline_expired,
              row.reason == GiveUpReason::kDeadline)
        << row.before_deadline;
    EXPECT_EQ(c.OnAttemptEnd(end, kNoPushback, gen()).reason, row.reason)
        << row.before_deadline << " " << StatusCodeName(row.code);
  }
}

// An attempt's own timeout is never taken for the call's deadline, however
// close to it.
TEST_F(RetryControllerTest, PerAttemptTimeoutNearTheDeadlineIsItsOwn) {
  MethodPolicy policy;
  policy.retry.max_attempts = 3;
  policy.per_attempt_timeout = absl::Milliseconds(990);
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(2),
                    &clock_);
  c.StartAttempt();
  clock_.Advance(absl::Milliseconds(990));
  AttemptEnd end;
  end.code = StatusCode::DEADLINE_EXCEEDED;
  const AttemptOutcome outcome = c.OutcomeOf(end);
  EXPECT_TRUE(outcome.per_attempt_timeout_expired);
  EXPECT_FALSE(outcome.caller_deadline_expired);
}

TEST_F(RetryControllerTest, CallersDeadlineIsNeverRetried) {
  MethodPolicy policy;
  policy.retry.max_attempts = 10;
  for (int i = 1; i < kNumCodes; ++i) {
    RetryController c(policy, true,
                      clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(100));
    const Decision d = c.OnAttemptEnd(Code(i), kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(Code(i));
    EXPECT_EQ(d.reason, GiveUpReason::kDeadline) << StatusCodeName(Code(i));
    EXPECT_EQ(d.status_class, StatusClass::kFatal);
  }
}

// ---------------------------------------------------------------------------
// Retriable outcomes.

TEST_F(RetryControllerTest, RetriableCodesRetryWithTheBackoffDelay) {
  const MethodPolicy policy;  // full jitter from 25 ms
  for (StatusCode code :
       {StatusCode::UNAVAILABLE, StatusCode::RESOURCE_EXHAUSTED,
        StatusCode::ABORTED}) {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    // A fresh Backoff drawing from a copy of the generator predicts the delay.
    std::mt19937_64 copy = rng_;
    const absl::Duration want =
        Backoff(policy.retry.backoff).Next(absl::BitGenRef(copy));
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(code, kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kRetry) << StatusCodeName(code);
    EXPECT_EQ(d.reason, GiveUpReason::kNone);
    EXPECT_EQ(d.status_class, StatusClass::kRetriable);
    EXPECT_EQ(d.delay, want);
    EXPECT_GE(d.delay, absl::ZeroDuration());
    EXPECT_LE(d.delay, policy.retry.backoff.initial);
  }
}

TEST_F(RetryControllerTest, DelaysFollowTheBackoffSequence) {
  FixedBitGen fixed(1.0);
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 6);
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                    &clock_);
  const std::vector<absl::Duration> want = {
      absl::Milliseconds(10), absl::Milliseconds(20), absl::Milliseconds(40),
      absl::Milliseconds(80), absl::Milliseconds(160)};
  for (absl::Duration w : want) {
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                      false, fixed.ref());
    ASSERT_EQ(d.action, Action::kRetry);
    EXPECT_EQ(d.delay, w);
    clock_.Advance(d.delay);
  }
  c.StartAttempt();
  const Decision d =
      c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback, false, fixed.ref());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(c.attempts(), 6);
}

TEST_F(RetryControllerTest, ReplacedRetriableSetIsHonoured) {
  MethodPolicy policy;
  policy.retry.retryable_codes = StatusCodeSet{StatusCode::INTERNAL};
  {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    EXPECT_EQ(
        c.OnAttemptEnd(StatusCode::INTERNAL, kNoPushback, false, gen()).action,
        Action::kRetry);
  }
  {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    const Decision d =
        c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kFatal);
  }
}

TEST_F(RetryControllerTest, NotIdempotentIsNeverRepeated) {
  MethodPolicy policy;
  policy.retry.max_attempts = 10;
  policy.per_attempt_timeout = absl::Milliseconds(10);
  for (StatusCode code :
       {StatusCode::UNAVAILABLE, StatusCode::RESOURCE_EXHAUSTED,
        StatusCode::ABORTED, StatusCode::DEADLINE_EXCEEDED}) {
    RetryController c(policy, false, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(10));
    const Decision d = c.OnAttemptEnd(code, kNoPushback, false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp) << StatusCodeName(code);
    EXPECT_EQ(d.reason, GiveUpReason::kNotIdempotent) << StatusCodeName(code);
    EXPECT_EQ(d.status_class, StatusClass::kRetriable);
    EXPECT_EQ(c.attempts(), 1);
  }
}

TEST_F(RetryControllerTest, NeverExceedMaxAttempts) {
  const StatusCode kRetriable[] = {StatusCode::UNAVAILABLE,
                                   StatusCode::RESOURCE_EXHAUSTED,
                                   StatusCode::ABORTED};
  int calls = 0;
  for (int max_attempts = 1; max_attempts <= kMaxAttemptsCap; ++max_attempts) {
    for (Jitter jitter : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
      MethodPolicy policy;
      policy.retry.max_attempts = max_attempts;
      policy.retry.backoff.jitter = jitter;
      for (uint64_t seed = 0; seed < 100; ++seed) {
        std::mt19937_64 rng(seed);
        // Infinite deadline: only max_attempts can stop the call.
        RetryController c(policy, true, absl::InfiniteFuture(), &clock_);
        int started = 0;
        Decision d;
        do {
          c.StartAttempt();
          ++started;
          ASSERT_LE(started, max_attempts);
          const StatusCode code = kRetriable[absl::Uniform<int>(rng, 0, 3)];
          d = c.OnAttemptEnd(code, kNoPushback, false, absl::BitGenRef(rng));
          if (d.action == Action::kRetry) clock_.Advance(d.delay);
        } while (d.action == Action::kRetry);
        ++calls;
        EXPECT_EQ(started, max_attempts) << "seed " << seed;
        EXPECT_EQ(c.attempts(), max_attempts);
        EXPECT_EQ(d.action, Action::kGiveUp);
        EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
      }
    }
  }
  EXPECT_EQ(calls, kMaxAttemptsCap * 3 * 100);
}

TEST_F(RetryControllerTest, MaxAttemptsOneDisablesRetries) {
  MethodPolicy policy;
  policy.retry.max_attempts = 1;
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                    &clock_);
  c.StartAttempt();
  const Decision d =
      c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
}

TEST_F(RetryControllerTest, InfiniteDeadlineIsBoundedByMaxAttemptsOnly) {
  MethodPolicy policy;
  policy.retry.max_attempts = 4;
  policy.retry.backoff.initial = absl::Hours(1);
  policy.retry.backoff.max = absl::Hours(24);
  RetryController c(policy, true, absl::InfiniteFuture(), &clock_);
  EXPECT_EQ(c.deadline(), absl::InfiniteFuture());
  EXPECT_EQ(c.Remaining(), absl::InfiniteDuration());
  for (int attempt = 1; attempt <= 4; ++attempt) {
    EXPECT_EQ(c.StartAttempt(), absl::InfiniteFuture());
    // Time flies: a thousand hours between attempts changes nothing.
    clock_.Advance(absl::Hours(1000));
    // Odd attempts get a 50 s pushback (under kMaxServerDelay), even ones
    // the (hours-long) backoff of the policy itself.
    const bool pushback = attempt % 2 == 1;
    const Decision d = c.OnAttemptEnd(
        StatusCode::UNAVAILABLE,
        pushback ? RetryAfter(absl::Seconds(50)) : kNoPushback, false, gen());
    if (attempt < 4) {
      ASSERT_EQ(d.action, Action::kRetry) << attempt;
      if (pushback) {
        EXPECT_EQ(d.delay, absl::Seconds(50));
      }
      clock_.Advance(d.delay);
    } else {
      EXPECT_EQ(d.action, Action::kGiveUp);
      EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
    }
  }
  EXPECT_EQ(c.Remaining(), absl::InfiniteDuration());
}

// ---------------------------------------------------------------------------
// Deadline arithmetic.

TEST_F(RetryControllerTest, DeadlineBoundaryWithExactBackoff) {
  // deadline = t0 + 100 ms, min_attempt_time = 2 ms, delay = 20 ms: a retry
  // fits exactly when now + 20 ms + 2 ms <= t0 + 100 ms, i.e. now <= t0 + 78.
  FixedBitGen fixed(1.0);
  const MethodPolicy policy = A6Policy(absl::Milliseconds(20));
  ASSERT_EQ(Backoff(policy.retry.backoff).Next(fixed.ref()),
            absl::Milliseconds(20));
  const absl::Time t0 = clock_.MonotonicNow();
  {
    // Exactly at the boundary: now + delay + min_attempt_time == deadline.
    RetryController c(policy, true, t0 + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(78));
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                      false, fixed.ref());
    EXPECT_EQ(d.action, Action::kRetry);
    EXPECT_EQ(d.delay, absl::Milliseconds(20));
    EXPECT_EQ(clock_.MonotonicNow() + d.delay + policy.min_attempt_time,
              c.deadline());
  }
  const absl::Time t1 = clock_.MonotonicNow();
  {
    // A nanosecond later it no longer fits.
    RetryController c(policy, true, t1 + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(78) + absl::Nanoseconds(1));
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                      false, fixed.ref());
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
    EXPECT_EQ(d.status_class, StatusClass::kRetriable);
  }
  const absl::Time t2 = clock_.MonotonicNow();
  {
    // Comfortably inside.
    RetryController c(policy, true, t2 + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(10));
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                      false, fixed.ref());
    EXPECT_EQ(d.action, Action::kRetry);
  }
}

TEST_F(RetryControllerTest, DeadlineBoundaryWithRandomBackoff) {
  // Full jitter: a fresh Backoff drawing from a copy of the generator predicts
  // each delay, and the clock is placed exactly at (or just past) the last
  // moment it fits.
  const MethodPolicy policy;  // 25 ms full jitter, min_attempt_time 2 ms
  ASSERT_EQ(policy.min_attempt_time, absl::Milliseconds(2));
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (bool past : {false, true}) {
      std::mt19937_64 rng(seed);
      std::mt19937_64 copy = rng;
      const absl::Duration delay =
          Backoff(policy.retry.backoff).Next(absl::BitGenRef(copy));
      RetryController c(policy, true,
                        clock_.MonotonicNow() + absl::Milliseconds(100),
                        &clock_);
      c.StartAttempt();
      clock_.Advance(absl::Milliseconds(100) - policy.min_attempt_time - delay +
                     (past ? absl::Nanoseconds(1) : absl::ZeroDuration()));
      const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                        false, absl::BitGenRef(rng));
      if (past) {
        EXPECT_EQ(d.action, Action::kGiveUp) << seed;
        EXPECT_EQ(d.reason, GiveUpReason::kDeadline) << seed;
      } else {
        EXPECT_EQ(d.action, Action::kRetry) << seed;
        EXPECT_EQ(d.delay, delay) << seed;
      }
    }
  }
}

TEST_F(RetryControllerTest, RetriesAlwaysFitTheDeadline) {
  // Whatever the timing, a retry is only ever granted when its delay plus the
  // minimal attempt time fits before the deadline.
  MethodPolicy policy;
  policy.retry.max_attempts = kMaxAttemptsCap;
  policy.retry.backoff.initial = absl::Milliseconds(5);
  policy.retry.backoff.max = absl::Milliseconds(80);
  std::mt19937_64 rng(777);
  int retries = 0, deadline_give_ups = 0;
  for (int call = 0; call < 2000; ++call) {
    RetryController c(policy, true,
                      clock_.MonotonicNow() + absl::Milliseconds(150), &clock_);
    for (;;) {
      c.StartAttempt();
      clock_.Advance(absl::Milliseconds(absl::Uniform(rng, 0, 40)));
      const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                        false, absl::BitGenRef(rng));
      if (d.action != Action::kRetry) {
        EXPECT_TRUE(d.reason == GiveUpReason::kDeadline ||
                    d.reason == GiveUpReason::kMaxAttempts)
            << GiveUpReasonName(d.reason);
        if (d.reason == GiveUpReason::kDeadline) ++deadline_give_ups;
        break;
      }
      ++retries;
      ASSERT_LE(clock_.MonotonicNow() + d.delay + policy.min_attempt_time,
                c.deadline());
      clock_.Advance(d.delay);
    }
    EXPECT_LE(c.attempts(), kMaxAttemptsCap);
  }
  EXPECT_GT(retries, 0);
  EXPECT_GT(deadline_give_ups, 0);
}

TEST_F(RetryControllerTest, PolicyTimeoutShortensTheDeadline) {
  MethodPolicy policy;
  policy.timeout = absl::Milliseconds(50);
  const absl::Time t0 = clock_.MonotonicNow();
  {
    RetryController c(policy, true, t0 + absl::Milliseconds(100), &clock_);
    EXPECT_EQ(c.deadline(), t0 + absl::Milliseconds(50));
    EXPECT_EQ(c.Remaining(), absl::Milliseconds(50));
    clock_.Advance(absl::Milliseconds(10));
    EXPECT_EQ(c.Remaining(), absl::Milliseconds(40));
    EXPECT_EQ(c.StartAttempt(), t0 + absl::Milliseconds(50));
  }
  const absl::Time t1 = clock_.MonotonicNow();
  {
    // The caller's earlier deadline stands.
    RetryController c(policy, true, t1 + absl::Milliseconds(20), &clock_);
    EXPECT_EQ(c.deadline(), t1 + absl::Milliseconds(20));
  }
  {
    // No caller deadline: the policy's timeout is the deadline.
    RetryController c(policy, true, absl::InfiniteFuture(), &clock_);
    EXPECT_EQ(c.deadline(), t1 + absl::Milliseconds(50));
  }
  {
    // No timeout: the caller's deadline as given.
    RetryController c(MethodPolicy(), true, t1 + absl::Milliseconds(100),
                      &clock_);
    EXPECT_EQ(c.deadline(), t1 + absl::Milliseconds(100));
  }
}

TEST_F(RetryControllerTest, PolicyTimeoutBoundsRetries) {
  // timeout 50 ms, caller deadline 100 ms, delay 20 ms: the retry must fit in
  // 50 ms, so the boundary is at 28 ms, not 78 ms.
  FixedBitGen fixed(1.0);
  MethodPolicy policy = A6Policy(absl::Milliseconds(20));
  policy.timeout = absl::Milliseconds(50);
  for (bool past : {false, true}) {
    RetryController c(policy, true,
                      clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    clock_.Advance(absl::Milliseconds(28) +
                   (past ? absl::Nanoseconds(1) : absl::ZeroDuration()));
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, kNoPushback,
                                      false, fixed.ref());
    if (past) {
      EXPECT_EQ(d.action, Action::kGiveUp);
      EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
    } else {
      EXPECT_EQ(d.action, Action::kRetry);
    }
  }
}

TEST_F(RetryControllerTest, StartAttemptReturnsEarlierOfDeadlineAndTimeout) {
  MethodPolicy policy;
  policy.per_attempt_timeout = absl::Milliseconds(30);
  const absl::Time t0 = clock_.MonotonicNow();
  RetryController c(policy, true, t0 + absl::Milliseconds(100), &clock_);
  EXPECT_EQ(c.attempts(), 0);
  EXPECT_EQ(c.StartAttempt(), t0 + absl::Milliseconds(30));
  EXPECT_EQ(c.attempts(), 1);
  clock_.Advance(absl::Milliseconds(50));
  EXPECT_EQ(c.StartAttempt(), t0 + absl::Milliseconds(80));
  clock_.Advance(absl::Milliseconds(20));  // t0 + 70: 70 + 30 == 100
  EXPECT_EQ(c.StartAttempt(), t0 + absl::Milliseconds(100));
  clock_.Advance(absl::Milliseconds(10));  // t0 + 80: capped at the deadline
  EXPECT_EQ(c.StartAttempt(), t0 + absl::Milliseconds(100));
  EXPECT_EQ(c.attempts(), 4);
}

TEST_F(RetryControllerTest, StartAttemptWithoutTimeoutReturnsTheDeadline) {
  const MethodPolicy policy;
  const absl::Time t0 = clock_.MonotonicNow();
  RetryController finite(policy, true, t0 + absl::Milliseconds(100), &clock_);
  EXPECT_EQ(finite.StartAttempt(), t0 + absl::Milliseconds(100));
  RetryController infinite(policy, true, absl::InfiniteFuture(), &clock_);
  EXPECT_EQ(infinite.StartAttempt(), absl::InfiniteFuture());
  MethodPolicy with_timeout;
  with_timeout.per_attempt_timeout = absl::Milliseconds(30);
  RetryController timeout_only(with_timeout, true, absl::InfiniteFuture(),
                               &clock_);
  EXPECT_EQ(timeout_only.StartAttempt(), t0 + absl::Milliseconds(30));
}

TEST_F(RetryControllerTest, PerAttemptTimeoutIsRetried) {
  MethodPolicy policy;
  policy.per_attempt_timeout = absl::Milliseconds(30);
  RetryController c(policy, true,
                    clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
  const absl::Time attempt_deadline = c.StartAttempt();
  ASSERT_LT(attempt_deadline, c.deadline());
  clock_.Advance(absl::Milliseconds(30));
  const Decision d =
      c.OnAttemptEnd(StatusCode::DEADLINE_EXCEEDED, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kRetry);
  EXPECT_EQ(d.status_class, StatusClass::kRetriable);
}

TEST_F(RetryControllerTest, CallDeadlineExceededIsNotRetried) {
  // The attempt's deadline is the call's (the per-attempt timeout would reach
  // past it): DEADLINE_EXCEEDED means the call's time is up.
  MethodPolicy policy;
  policy.per_attempt_timeout = absl::Milliseconds(30);
  RetryController c(policy, true,
                    clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
  clock_.Advance(absl::Milliseconds(80));
  const absl::Time attempt_deadline = c.StartAttempt();
  ASSERT_EQ(attempt_deadline, c.deadline());
  clock_.Advance(absl::Milliseconds(20));
  const Decision d =
      c.OnAttemptEnd(StatusCode::DEADLINE_EXCEEDED, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
  EXPECT_EQ(d.status_class, StatusClass::kFatal);
}

TEST_F(RetryControllerTest, CallDeadlineExceededWithoutTimeoutIsNotRetried) {
  const MethodPolicy policy;
  RetryController c(policy, true,
                    clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
  ASSERT_EQ(c.StartAttempt(), c.deadline());
  clock_.Advance(absl::Milliseconds(100));
  const Decision d =
      c.OnAttemptEnd(StatusCode::DEADLINE_EXCEEDED, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
}

TEST_F(RetryControllerTest, EarlyDeadlineExceededWithCallDeadlineIsFatal) {
  // DEADLINE_EXCEEDED before any deadline of ours passed (say, the server's
  // own): not a per-attempt timeout, so not retried.
  const MethodPolicy policy;
  RetryController c(policy, true,
                    clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
  c.StartAttempt();
  clock_.Advance(absl::Milliseconds(10));
  const Decision d =
      c.OnAttemptEnd(StatusCode::DEADLINE_EXCEEDED, kNoPushback, false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kFatal);
}

TEST_F(RetryControllerTest, PerAttemptTimeoutThatDoesNotFitGivesUpAsDeadline) {
  FixedBitGen fixed(1.0);
  MethodPolicy policy = A6Policy(absl::Milliseconds(20));
  policy.per_attempt_timeout = absl::Milliseconds(90);
  RetryController c(policy, true,
                    clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
  ASSERT_LT(c.StartAttempt(), c.deadline());
  clock_.Advance(absl::Milliseconds(90));  // 90 + 20 + 2 > 100
  const Decision d = c.OnAttemptEnd(StatusCode::DEADLINE_EXCEEDED, kNoPushback,
                                    false, fixed.ref());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
  EXPECT_EQ(d.status_class, StatusClass::kRetriable);
}

// ---------------------------------------------------------------------------
// Server pushback.

TEST(ParsePushbackTest, NonNegativeIntegersRetryAfterExactly) {
  struct {
    absl::string_view text;
    absl::Duration delay;
  } const cases[] = {
      {"250", absl::Milliseconds(250)}, {"0", absl::ZeroDuration()},
      {"1", absl::Milliseconds(1)},     {"007", absl::Milliseconds(7)},
      {"3600000", absl::Hours(1)},
  };
  for (const auto& c : cases) {
    const Pushback p = ParsePushback(c.text);
    EXPECT_EQ(p.kind, Pushback::Kind::kRetryAfter) << c.text;
    EXPECT_EQ(p.delay, c.delay) << c.text;
  }
}

TEST(ParsePushbackTest, AnythingElseStops) {
  for (absl::string_view text :
       {"-1", "", "abc", "+5", " 5", "5 ", "99999999999999999999", "1.5",
        "0x10", "-0", "5ms", "1e3"}) {
    EXPECT_EQ(ParsePushback(text).kind, Pushback::Kind::kStop)
        << "\"" << text << "\"";
  }
}

TEST_F(RetryControllerTest, PushbackDelayIsUsedExactlyAndResetsBackoff) {
  FixedBitGen fixed(1.0);
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 10);
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(100),
                    &clock_);
  auto attempt = [&](const Pushback& pushback) {
    c.StartAttempt();
    const Decision d =
        c.OnAttemptEnd(StatusCode::UNAVAILABLE, pushback, false, fixed.ref());
    EXPECT_EQ(d.action, Action::kRetry);
    clock_.Advance(d.delay);
    return d.delay;
  };
  EXPECT_EQ(attempt(kNoPushback), absl::Milliseconds(10));
  EXPECT_EQ(attempt(kNoPushback), absl::Milliseconds(20));
  EXPECT_EQ(attempt(kNoPushback), absl::Milliseconds(40));
  // The server's delay, exactly, even above the backoff's max.
  EXPECT_EQ(attempt(ParsePushback("250")), absl::Milliseconds(250));
  EXPECT_EQ(attempt(ParsePushback("5000")), absl::Seconds(5));
  EXPECT_EQ(attempt(ParsePushback("0")), absl::ZeroDuration());
  // The backoff started over: back to `initial`, not 80 ms.
  EXPECT_EQ(attempt(kNoPushback), absl::Milliseconds(10));
  EXPECT_EQ(attempt(kNoPushback), absl::Milliseconds(20));
}

TEST_F(RetryControllerTest, PushbackDelayMustFitTheDeadline) {
  const MethodPolicy policy;
  for (bool past : {false, true}) {
    RetryController c(policy, true,
                      clock_.MonotonicNow() + absl::Milliseconds(100), &clock_);
    c.StartAttempt();
    // A 50 ms pushback plus the 2 ms minimal attempt time fits a 100 ms
    // deadline up to 48 ms after the start, and not a nanosecond later.
    clock_.Advance(absl::Milliseconds(48) +
                   (past ? absl::Nanoseconds(1) : absl::ZeroDuration()));
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE,
                                      ParsePushback("50"), false, gen());
    if (past) {
      EXPECT_EQ(d.action, Action::kGiveUp);
      EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
    } else {
      EXPECT_EQ(d.action, Action::kRetry);
      EXPECT_EQ(d.delay, absl::Milliseconds(50));
    }
  }
}

TEST_F(RetryControllerTest, PushbackStopGivesUp) {
  MethodPolicy policy;
  policy.retry.max_attempts = 5;
  for (absl::string_view value : {"-1", "", "abc", "+5", " 5"}) {
    RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                      &clock_);
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(StatusCode::UNAVAILABLE,
                                      ParsePushback(value), false, gen());
    EXPECT_EQ(d.action, Action::kGiveUp) << "\"" << value << "\"";
    EXPECT_EQ(d.reason, GiveUpReason::kPushbackStop) << "\"" << value << "\"";
    EXPECT_EQ(d.status_class, StatusClass::kRetriable);
  }
}

TEST_F(RetryControllerTest, PushbackDoesNotExtendMaxAttempts) {
  MethodPolicy policy;
  policy.retry.max_attempts = 2;
  RetryController c(policy, true, clock_.MonotonicNow() + absl::Seconds(10),
                    &clock_);
  c.StartAttempt();
  Decision d =
      c.OnAttemptEnd(StatusCode::UNAVAILABLE, ParsePushback("1"), false, gen());
  ASSERT_EQ(d.action, Action::kRetry);
  clock_.Advance(d.delay);
  c.StartAttempt();
  d = c.OnAttemptEnd(StatusCode::UNAVAILABLE, ParsePushback("1"), false, gen());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
}

// ---------------------------------------------------------------------------
// Names and messages.

TEST(GiveUpReasonNameTest, EveryValue) {
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kNone), "none");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kMaxAttempts), "max_attempts");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kDeadline), "deadline");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kFatal), "fatal");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kAuth), "auth");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kNotIdempotent), "not_idempotent");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kCancelled), "cancelled");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kBudgetExhausted),
            "budget_exhausted");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kBreakerOpen), "breaker_open");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kPushbackStop), "pushback_stop");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kLocalError), "local_error");
}

TEST(AnnotateMessageTest, ExactStrings) {
  EXPECT_EQ(AnnotateMessage("injected", 3, GiveUpReason::kDeadline),
            "injected [rpcguard: 3 attempts, gave up: deadline]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kNotIdempotent),
            "x [rpcguard: 1 attempt, gave up: not_idempotent]");
  EXPECT_EQ(AnnotateMessage("boom", 2, GiveUpReason::kNone),
            "boom [rpcguard: 2 attempts]");
  EXPECT_EQ(AnnotateMessage("", 3, GiveUpReason::kMaxAttempts),
            "[rpcguard: 3 attempts, gave up: max_attempts]");
  EXPECT_EQ(AnnotateMessage("", 2, GiveUpReason::kNone),
            "[rpcguard: 2 attempts]");
  EXPECT_EQ(AnnotateMessage("no", 4, GiveUpReason::kFatal),
            "no [rpcguard: 4 attempts, gave up: fatal]");
  EXPECT_EQ(AnnotateMessage("no", 2, GiveUpReason::kAuth),
            "no [rpcguard: 2 attempts, gave up: auth]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kPushbackStop),
            "x [rpcguard: 1 attempt, gave up: pushback_stop]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kDeadline),
            "x [rpcguard: 1 attempt, gave up: deadline]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kMaxAttempts),
            "x [rpcguard: 1 attempt, gave up: max_attempts]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kBudgetExhausted),
            "x [rpcguard: 1 attempt, gave up: budget_exhausted]");
  EXPECT_EQ(AnnotateMessage("x", 1, GiveUpReason::kBreakerOpen),
            "x [rpcguard: 1 attempt, gave up: breaker_open]");
  // After retries the account is given, as for any other reason.
  EXPECT_EQ(AnnotateMessage("x", 2, GiveUpReason::kLocalError),
            "x [rpcguard: 2 attempts, gave up: local_error]");
}

TEST(AnnotateMessageTest, OneAttemptWithNothingToSayIsUnchanged) {
  for (GiveUpReason reason :
       {GiveUpReason::kNone, GiveUpReason::kFatal, GiveUpReason::kAuth,
        GiveUpReason::kCancelled, GiveUpReason::kLocalError}) {
    EXPECT_EQ(AnnotateMessage("x", 1, reason), "x") << GiveUpReasonName(reason);
    EXPECT_EQ(AnnotateMessage("", 1, reason), "") << GiveUpReasonName(reason);
  }
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

TEST(RetryControllerServerDelayTest, HugeServerDelayWithoutDeadlineStops) {
  testing::FakeClock clock;
  MethodPolicy policy;
  policy.idempotency = Idempotency::kIdempotent;
  RetryController c(policy, /*may_repeat=*/true, absl::InfiniteFuture(),
                    &clock);
  std::mt19937_64 gen(1);
  c.StartAttempt();
  const Decision d = c.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE,
                                    ParsePushback("9223372036854775807"),
                                    /*caller_cancelled=*/false, gen);
  EXPECT_EQ(d.action, Decision::Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kPushbackStop);
  // Just under the cap is still honoured.
  RetryController c2(policy, true, absl::InfiniteFuture(), &clock);
  c2.StartAttempt();
  Pushback hint;
  hint.min_delay = kMaxServerDelay;
  const Decision d2 =
      c2.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE, hint, false, gen);
  EXPECT_EQ(d2.action, Decision::Action::kRetry);
  EXPECT_EQ(d2.delay, kMaxServerDelay);
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

AttemptEnd NoConnection() {
  AttemptEnd end;
  end.code = grpc::StatusCode::UNAVAILABLE;
  end.not_sent = true;
  return end;
}

// An attempt that never reached the server does not use up maxAttempts, and
// its retry waits for the connection when the call has a deadline.
TEST(NotSentTest, RetriesDoNotUseUpMaxAttemptsAndWaitForTheConnection) {
  FakeClock clock;
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 2);
  RetryController c(policy, /*may_repeat=*/true,
                    clock.MonotonicNow() + absl::Seconds(30), &clock);
  FixedBitGen gen(1.0);
  for (int i = 0; i < 3; ++i) {
    c.StartAttempt();
    const Decision d = c.OnAttemptEnd(NoConnection(), kNoPushback, gen.ref());
    ASSERT_EQ(d.action, Action::kRetry) << i;
    EXPECT_TRUE(d.wait_for_connection);
    EXPECT_TRUE(d.outcome.not_sent);
  }
  // maxAttempts 2 still allows one retry of a server's own failure.
  c.StartAttempt();
  Decision d = c.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE, kNoPushback, false,
                              gen.ref());
  ASSERT_EQ(d.action, Action::kRetry);
  EXPECT_FALSE(d.wait_for_connection);
  c.StartAttempt();
  d = c.OnAttemptEnd(grpc::StatusCode::UNAVAILABLE, kNoPushback, false,
                     gen.ref());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(c.attempts(), 5);
}

// Without a deadline nothing would bound a wait; with an explicit
// fail-fast the caller does not want one: no wait for the connection, and
// the attempts count against maxAttempts like any other.
TEST(NotSentTest, WithoutADeadlineOrWithFailFastNoWait) {
  for (bool deadline : {false, true}) {
    FakeClock clock;
    const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 3);
    RetryController c(policy, true,
                      deadline ? clock.MonotonicNow() + absl::Seconds(30)
                               : absl::InfiniteFuture(),
                      &clock);
    FixedBitGen gen(1.0);
    AttemptEnd end = NoConnection();
    end.may_wait = !deadline;  // with a deadline: fail fast asked for
    Decision d;
    do {
      c.StartAttempt();
      d = c.OnAttemptEnd(end, kNoPushback, gen.ref());
      if (d.action == Action::kRetry) EXPECT_FALSE(d.wait_for_connection);
    } while (d.action == Action::kRetry);
    EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
    EXPECT_EQ(c.attempts(), 3);
  }
}

// However many attempts find no connection, never more than
// kMaxAttemptsCap in all.
TEST(NotSentTest, TheCapHolds) {
  FakeClock clock;
  const MethodPolicy policy = A6Policy(absl::Milliseconds(1), 3);
  RetryController c(policy, true, clock.MonotonicNow() + absl::Seconds(60),
                    &clock);
  FixedBitGen gen(1.0);
  Decision d;
  do {
    c.StartAttempt();
    d = c.OnAttemptEnd(NoConnection(), kNoPushback, gen.ref());
  } while (d.action == Action::kRetry);
  EXPECT_EQ(d.reason, GiveUpReason::kMaxAttempts);
  EXPECT_EQ(c.attempts(), kMaxAttemptsCap);
}

// A call that may not be repeated is not retried even so: rpcguard does
// not own such a call's attempts (it is sent once as the application's).
TEST(NotSentTest, NotRetriedWhenTheCallMayNotRepeat) {
  FakeClock clock;
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 3);
  RetryController c(policy, false, clock.MonotonicNow() + absl::Seconds(1),
                    &clock);
  FixedBitGen gen(1.0);
  c.StartAttempt();
  const Decision d = c.OnAttemptEnd(NoConnection(), kNoPushback, gen.ref());
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kNotIdempotent);
}

// A local error is never also "not sent".
TEST(NotSentTest, LocalErrorWins) {
  FakeClock clock;
  const MethodPolicy policy = A6Policy(absl::Milliseconds(10), 3);
  RetryController c(policy, true, clock.MonotonicNow() + absl::Seconds(1),
                    &clock);
  AttemptEnd end = NoConnection();
  end.local_error = true;
  c.StartAttempt();
  EXPECT_FALSE(c.OutcomeOf(end).not_sent);
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

// A delay the server chose (pushback or RetryInfo floor) against the time
// left: with a deadline, the deadline alone bounds it, whatever its length;
// without one, more than kMaxServerDelay means "do not retry".
class ServerDelayTest : public ::testing::Test {
 protected:
  ServerDelayTest() {
    policy_.idempotency = Idempotency::kIdempotent;
    policy_.retry.max_attempts = 5;
    policy_.min_attempt_time = absl::Milliseconds(2);
  }

  // The decision after a first attempt that failed UNAVAILABLE with
  // `hint`, on a call with `time_to_deadline` (infinite: no deadline).
  Decision After(const Pushback& hint, absl::Duration time_to_deadline) {
    RetryController c(policy_, /*may_repeat=*/true,
                      clock_.MonotonicNow() + time_to_deadline, &clock_);
    c.StartAttempt();
    return c.OnAttemptEnd(StatusCode::UNAVAILABLE, hint, false, gen_.ref());
  }

  static Pushback Floor(absl::Duration d) {
    Pushback p;
    p.min_delay = d;
    return p;
  }

  MethodPolicy policy_;
  FakeClock clock_;
  FixedBitGen gen_{0.0};  // backoff 0: any floor is the server's choice
};

TEST_F(ServerDelayTest, WithADeadlineAPushbackThatFitsIsHonoured) {
  // 998 ms plus the 2 ms minimal attempt time is exactly the second left.
  const Decision d = After(ParsePushback("998"), absl::Seconds(1));
  EXPECT_EQ(d.action, Action::kRetry);
  EXPECT_EQ(d.delay, absl::Milliseconds(998));
}

TEST_F(ServerDelayTest, WithADeadlineAPushbackThatDoesNotFitGivesUpAsDeadline) {
  const Decision d = After(ParsePushback("999"), absl::Seconds(1));
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
}

TEST_F(ServerDelayTest, WithADeadlineARetryInfoFloorThatFitsIsHonoured) {
  const Decision d = After(Floor(absl::Milliseconds(998)), absl::Seconds(1));
  EXPECT_EQ(d.action, Action::kRetry);
  EXPECT_EQ(d.delay, absl::Milliseconds(998));
}

TEST_F(ServerDelayTest,
       WithADeadlineARetryInfoFloorThatDoesNotFitGivesUpAsDeadline) {
  const Decision d = After(Floor(absl::Milliseconds(999)), absl::Seconds(1));
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
}

TEST_F(ServerDelayTest, WithADeadlineADelayOver60sThatFitsIsHonoured) {
  for (const Pushback& hint :
       {ParsePushback("90000"), Floor(absl::Seconds(90))}) {
    const Decision d = After(hint, absl::Minutes(5));
    EXPECT_EQ(d.action, Action::kRetry);
    EXPECT_EQ(d.delay, absl::Seconds(90));
  }
  // The method's timeout is a deadline too.
  policy_.timeout = absl::Minutes(5);
  const Decision d = After(ParsePushback("90000"), absl::InfiniteDuration());
  EXPECT_EQ(d.action, Action::kRetry);
  EXPECT_EQ(d.delay, absl::Seconds(90));
}

TEST_F(ServerDelayTest,
       WithADeadlineADelayOver60sThatDoesNotFitGivesUpAsDeadline) {
  for (const Pushback& hint : {ParsePushback("90000"), Floor(absl::Seconds(90)),
                               ParsePushback("9223372036854775807")}) {
    const Decision d = After(hint, absl::Seconds(30));
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kDeadline);
    EXPECT_EQ(d.status_class, StatusClass::kRetriable);
  }
}

TEST_F(ServerDelayTest, WithoutADeadlineADelayUpTo60sIsHonoured) {
  for (const Pushback& hint :
       {ParsePushback("60000"), Floor(kMaxServerDelay)}) {
    const Decision d = After(hint, absl::InfiniteDuration());
    EXPECT_EQ(d.action, Action::kRetry);
    EXPECT_EQ(d.delay, kMaxServerDelay);
  }
}

TEST_F(ServerDelayTest, WithoutADeadlineADelayOver60sStops) {
  for (const Pushback& hint :
       {ParsePushback("60001"), Floor(kMaxServerDelay + absl::Nanoseconds(1)),
        ParsePushback("9223372036854775807")}) {
    const Decision d = After(hint, absl::InfiniteDuration());
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kPushbackStop);
  }
}

TEST_F(ServerDelayTest, ANegativePushbackStopsWithOrWithoutADeadline) {
  for (absl::Duration left : {absl::Seconds(1), absl::InfiniteDuration()}) {
    const Decision d = After(ParsePushback("-1"), left);
    EXPECT_EQ(d.action, Action::kGiveUp);
    EXPECT_EQ(d.reason, GiveUpReason::kPushbackStop);
  }
}

// The rule itself, as retries and hedges share it.
TEST(CheckServerDelayTest, TheDeadlineBoundsItElseTheCap) {
  EXPECT_EQ(CheckServerDelay(absl::Seconds(1), absl::Seconds(1)),
            GiveUpReason::kNone);
  EXPECT_EQ(CheckServerDelay(absl::Seconds(1) + absl::Nanoseconds(1),
                             absl::Seconds(1)),
            GiveUpReason::kDeadline);
  EXPECT_EQ(CheckServerDelay(absl::Seconds(90), absl::Minutes(5)),
            GiveUpReason::kNone);
  EXPECT_EQ(CheckServerDelay(absl::ZeroDuration(), -absl::Seconds(1)),
            GiveUpReason::kDeadline);
  EXPECT_EQ(CheckServerDelay(kMaxServerDelay, absl::InfiniteDuration()),
            GiveUpReason::kNone);
  EXPECT_EQ(CheckServerDelay(kMaxServerDelay + absl::Nanoseconds(1),
                             absl::InfiniteDuration()),
            GiveUpReason::kPushbackStop);
}

}  // namespace
}  // namespace rpcguard
