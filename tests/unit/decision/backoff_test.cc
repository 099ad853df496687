// Copyright rpcguard authors.
//
// Property tests of the backoff sequence: every delay lies in its mode's
// bounds over tens of thousands of seeded draws, jitter really spreads, and
// the sequence grows to its maximum and restarts on Reset().

#include "rpcguard/decision/backoff.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/random/distributions.h"
#include "absl/random/mock_distributions.h"
#include "absl/random/mocking_bit_gen.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace {

using ::testing::_;
using ::testing::AnyNumber;

// Slack for the double -> absl::Duration conversion (quarter-nanosecond
// ticks, rounded).
constexpr absl::Duration kSlack = absl::Nanoseconds(1);

// Sequences per parameter set and retries per sequence in the property tests.
constexpr int kSequences = 500;
constexpr int kRetriesPerSequence = 20;

BackoffParams Params(absl::Duration initial, absl::Duration max,
                     double multiplier, Jitter jitter) {
  BackoffParams p;
  p.initial = initial;
  p.max = max;
  p.multiplier = multiplier;
  p.jitter = jitter;
  return p;
}

std::string Describe(const BackoffParams& p) {
  return absl::StrCat("initial=", absl::FormatDuration(p.initial),
                      " max=", absl::FormatDuration(p.max),
                      " multiplier=", p.multiplier,
                      " jitter=", JitterName(p.jitter));
}

// Parameter sets the property tests run over (the jitter is set per test).
std::vector<BackoffParams> ParameterSets(Jitter jitter) {
  return {
      Params(absl::Milliseconds(25), absl::Seconds(1), 2.0, jitter),  // default
      Params(absl::Milliseconds(1), absl::Milliseconds(50), 1.5, jitter),
      Params(absl::Milliseconds(100), absl::Milliseconds(100), 2.0, jitter),
      Params(absl::Milliseconds(10), absl::Seconds(10), 3.0, jitter),
      Params(absl::Milliseconds(5), absl::Milliseconds(200), 1.0, jitter),
      Params(absl::Microseconds(300), absl::Seconds(120), 1.7, jitter),
  };
}

// A distinct seed per sequence and test. Unsigned: `seq * salt` in int could
// overflow.
uint64_t Seed(int seq, uint64_t salt) {
  return salt * static_cast<uint64_t>(seq) + 1;
}

// min(initial * multiplier^(n-1), max) for the n-th retry (n >= 1).
absl::Duration Ceiling(const BackoffParams& p, int n) {
  const double s = absl::ToDoubleSeconds(p.initial) *
                   std::pow(p.multiplier, static_cast<double>(n - 1));
  return std::min(p.max, absl::Seconds(s));
}

TEST(BackoffPropertyTest, FullJitterStaysWithinZeroAndCeiling) {
  int draws = 0;
  for (const BackoffParams& p : ParameterSets(Jitter::kFull)) {
    for (int seq = 0; seq < kSequences; ++seq) {
      std::mt19937_64 rng(Seed(seq, 7919));
      Backoff backoff(p);
      for (int n = 1; n <= kRetriesPerSequence; ++n) {
        const absl::Duration d = backoff.Next(absl::BitGenRef(rng));
        ++draws;
        EXPECT_EQ(backoff.retries(), n);
        ASSERT_GE(d, absl::ZeroDuration()) << Describe(p) << " n=" << n;
        ASSERT_LE(d, Ceiling(p, n) + kSlack) << Describe(p) << " n=" << n;
      }
    }
  }
  EXPECT_GE(draws, 10000);
}

TEST(BackoffPropertyTest, A6JitterStaysWithin20PercentOfCeiling) {
  int draws = 0;
  for (const BackoffParams& p : ParameterSets(Jitter::kA6)) {
    for (int seq = 0; seq < kSequences; ++seq) {
      std::mt19937_64 rng(Seed(seq, 104729));
      Backoff backoff(p);
      for (int n = 1; n <= kRetriesPerSequence; ++n) {
        const absl::Duration d = backoff.Next(absl::BitGenRef(rng));
        ++draws;
        const absl::Duration ceiling = Ceiling(p, n);
        ASSERT_GE(d, ceiling * 0.8 - kSlack) << Describe(p) << " n=" << n;
        ASSERT_LE(d, ceiling * 1.2 + kSlack) << Describe(p) << " n=" << n;
      }
    }
  }
  EXPECT_GE(draws, 10000);
}

TEST(BackoffPropertyTest, DecorrelatedJitterStaysWithinInitialMaxAndTriple) {
  int draws = 0;
  for (const BackoffParams& p : ParameterSets(Jitter::kDecorrelated)) {
    for (int seq = 0; seq < kSequences; ++seq) {
      std::mt19937_64 rng(Seed(seq, 15485863));
      Backoff backoff(p);
      absl::Duration previous = p.initial;
      for (int n = 1; n <= kRetriesPerSequence; ++n) {
        const absl::Duration d = backoff.Next(absl::BitGenRef(rng));
        ++draws;
        ASSERT_GE(d, p.initial - kSlack) << Describe(p) << " n=" << n;
        ASSERT_LE(d, p.max + kSlack) << Describe(p) << " n=" << n;
        ASSERT_LE(d, std::min(p.max, previous * 3) + kSlack)
            << Describe(p) << " n=" << n
            << " previous=" << absl::FormatDuration(previous);
        previous = d;
      }
    }
  }
  EXPECT_GE(draws, 10000);
}

// A MockingBitGen whose uniform draws all return the low (or high) end of the
// interval asked for: the jitter's extreme, deterministically.
class ExtremeBitGen {
 public:
  explicit ExtremeBitGen(bool high) {
    // EXPECT_CALL rather than ON_CALL: calls without an expectation would
    // each print an "uninteresting call" warning.
    EXPECT_CALL(absl::MockUniform<double>(),
                Call(absl::IntervalClosedClosed, gen_, _, _))
        .Times(AnyNumber())
        .WillRepeatedly([high](absl::IntervalClosedClosedTag, double lo,
                               double hi) { return high ? hi : lo; });
  }
  absl::BitGenRef ref() { return absl::BitGenRef(gen_); }

 private:
  absl::MockingBitGen gen_;
};

TEST(BackoffBoundsTest, ExtremesAreReachedExactly) {
  const absl::Duration initial = absl::Milliseconds(25);
  const absl::Duration max = absl::Seconds(1);
  ExtremeBitGen low(false), high(true);
  Backoff full_lo(Params(initial, max, 2.0, Jitter::kFull));
  Backoff full_hi(Params(initial, max, 2.0, Jitter::kFull));
  Backoff a6_lo(Params(initial, max, 2.0, Jitter::kA6));
  Backoff a6_hi(Params(initial, max, 2.0, Jitter::kA6));
  Backoff dec_lo(Params(initial, max, 2.0, Jitter::kDecorrelated));
  Backoff dec_hi(Params(initial, max, 2.0, Jitter::kDecorrelated));
  for (int n = 1; n <= 10; ++n) {
    const absl::Duration ceiling =
        std::min(max, initial * (int64_t{1} << (n - 1)));
    EXPECT_LE(absl::AbsDuration(full_lo.Next(low.ref())), kSlack) << n;
    EXPECT_LE(absl::AbsDuration(full_hi.Next(high.ref()) - ceiling), kSlack)
        << n;
    EXPECT_LE(absl::AbsDuration(a6_lo.Next(low.ref()) - ceiling * 0.8), kSlack)
        << n;
    EXPECT_LE(absl::AbsDuration(a6_hi.Next(high.ref()) - ceiling * 1.2), kSlack)
        << n;
    // Decorrelated: the low end is always `initial`; the high end triples
    // from `initial` up to `max`.
    EXPECT_LE(absl::AbsDuration(dec_lo.Next(low.ref()) - initial), kSlack) << n;
    int64_t triple = 1;
    for (int i = 0; i < n; ++i) triple *= 3;
    const absl::Duration want_hi = std::min(max, initial * triple);
    EXPECT_LE(absl::AbsDuration(dec_hi.Next(high.ref()) - want_hi), kSlack)
        << n;
  }
}

TEST(BackoffTest, MultiplierGrowthReachesAndStaysAtMax) {
  // Full jitter's high end is the ceiling itself: 25, 50, ..., 800, then the
  // 1 s cap for good.
  ExtremeBitGen high(true);
  Backoff backoff(
      Params(absl::Milliseconds(25), absl::Seconds(1), 2.0, Jitter::kFull));
  const std::vector<absl::Duration> want = {
      absl::Milliseconds(25),  absl::Milliseconds(50),  absl::Milliseconds(100),
      absl::Milliseconds(200), absl::Milliseconds(400), absl::Milliseconds(800),
      absl::Seconds(1),        absl::Seconds(1),        absl::Seconds(1)};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(absl::AbsDuration(backoff.Next(high.ref()) - want[i]), kSlack)
        << "retry " << i + 1;
  }
  // Far along the sequence, multiplier^n overflows to infinity: still capped.
  for (int i = 0; i < 2000; ++i) {
    const absl::Duration d = backoff.Next(high.ref());
    ASSERT_LE(absl::AbsDuration(d - absl::Seconds(1)), kSlack) << i;
  }
}

TEST(BackoffTest, MultiplierGrowthReachesMaxWithRandomJitter) {
  // With real randomness, late retries of the full-jitter sequence draw from
  // [0, max]: some of them come close to max, none exceeds it.
  const BackoffParams p = Params(absl::Milliseconds(10),
                                 absl::Milliseconds(500), 2.0, Jitter::kFull);
  std::mt19937_64 rng(42);
  absl::Duration largest = absl::ZeroDuration();
  for (int seq = 0; seq < 200; ++seq) {
    Backoff backoff(p);
    for (int n = 1; n <= 15; ++n) {
      const absl::Duration d = backoff.Next(absl::BitGenRef(rng));
      EXPECT_LE(d, p.max + kSlack);
      largest = std::max(largest, d);
    }
  }
  EXPECT_GT(largest, p.max * 0.99);
}

TEST(BackoffTest, ResetRestartsTheSequence) {
  for (Jitter jitter : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
    SCOPED_TRACE(JitterName(jitter));
    const BackoffParams p =
        Params(absl::Milliseconds(25), absl::Seconds(1), 2.0, jitter);
    ExtremeBitGen high(true);
    Backoff backoff(p);
    Backoff fresh(p);
    const absl::Duration first = fresh.Next(high.ref());
    EXPECT_EQ(backoff.retries(), 0);
    for (int i = 0; i < 6; ++i) backoff.Next(high.ref());
    EXPECT_EQ(backoff.retries(), 6);
    EXPECT_GT(backoff.Next(high.ref()), first);
    backoff.Reset();
    EXPECT_EQ(backoff.retries(), 0);
    // The ceiling is back to `initial`: the same delay a fresh sequence gives.
    EXPECT_EQ(backoff.Next(high.ref()), first);
    EXPECT_EQ(backoff.retries(), 1);
  }
}

TEST(BackoffTest, ResetRestartsTheSequenceWithRandomJitter) {
  for (Jitter jitter : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
    SCOPED_TRACE(JitterName(jitter));
    const BackoffParams p =
        Params(absl::Milliseconds(25), absl::Seconds(1), 2.0, jitter);
    std::mt19937_64 rng(7);
    Backoff backoff(p);
    for (int i = 0; i < 8; ++i) backoff.Next(absl::BitGenRef(rng));
    backoff.Reset();
    // A generator in the same state gives a restarted sequence the same delays
    // as a fresh one.
    std::mt19937_64 rng_copy = rng;
    Backoff fresh(p);
    for (int n = 1; n <= 5; ++n) {
      EXPECT_EQ(backoff.Next(absl::BitGenRef(rng)),
                fresh.Next(absl::BitGenRef(rng_copy)))
          << n;
    }
  }
}

TEST(BackoffTest, FullJitterSpreadsUniformly) {
  // initial == max: every draw is U(0, 100 ms).
  const BackoffParams p = Params(absl::Milliseconds(100),
                                 absl::Milliseconds(100), 2.0, Jitter::kFull);
  constexpr int kDraws = 10000;
  std::mt19937_64 rng(2024);
  Backoff backoff(p);
  double sum = 0;
  double lo = 1e9, hi = 0;
  std::set<int64_t> distinct;
  for (int i = 0; i < kDraws; ++i) {
    const double ms =
        absl::ToDoubleMilliseconds(backoff.Next(absl::BitGenRef(rng)));
    sum += ms;
    lo = std::min(lo, ms);
    hi = std::max(hi, ms);
    distinct.insert(absl::ToInt64Nanoseconds(absl::Milliseconds(ms)));
  }
  const double mean = sum / kDraws;
  // Standard error of the mean is 100 / sqrt(12 * 10000) ~ 0.29 ms; 3% of the
  // expected 50 ms is 1.5 ms, over 5 standard errors.
  EXPECT_NEAR(mean, 50.0, 1.5);
  EXPECT_LT(lo, 1.0);
  EXPECT_GT(hi, 99.0);
  EXPECT_GT(distinct.size(), kDraws * 99 / 100);
}

TEST(BackoffTest, A6JitterSpreadsAroundTheCeiling) {
  const BackoffParams p = Params(absl::Milliseconds(100),
                                 absl::Milliseconds(100), 2.0, Jitter::kA6);
  constexpr int kDraws = 10000;
  std::mt19937_64 rng(99);
  Backoff backoff(p);
  double sum = 0;
  double lo = 1e9, hi = 0;
  std::set<int64_t> distinct;
  for (int i = 0; i < kDraws; ++i) {
    const double ms =
        absl::ToDoubleMilliseconds(backoff.Next(absl::BitGenRef(rng)));
    sum += ms;
    lo = std::min(lo, ms);
    hi = std::max(hi, ms);
    distinct.insert(absl::ToInt64Nanoseconds(absl::Milliseconds(ms)));
  }
  const double mean = sum / kDraws;
  // U(80, 120): standard error ~0.12 ms.
  EXPECT_NEAR(mean, 100.0, 1.0);
  EXPECT_LT(lo, 81.0);
  EXPECT_GT(hi, 119.0);
  EXPECT_GT(distinct.size(), kDraws * 99 / 100);
}

TEST(BackoffTest, DecorrelatedJitterSpreads) {
  const BackoffParams p = Params(absl::Milliseconds(10), absl::Seconds(10), 2.0,
                                 Jitter::kDecorrelated);
  std::mt19937_64 rng(5);
  std::set<int64_t> first_draws;
  for (int i = 0; i < 1000; ++i) {
    Backoff backoff(p);
    // The first draw is U(10 ms, 30 ms).
    const absl::Duration d = backoff.Next(absl::BitGenRef(rng));
    first_draws.insert(absl::ToInt64Nanoseconds(d));
  }
  EXPECT_GT(first_draws.size(), 990u);
  EXPECT_LT(*first_draws.begin(),
            absl::ToInt64Nanoseconds(absl::Milliseconds(11)));
  EXPECT_GT(*first_draws.rbegin(),
            absl::ToInt64Nanoseconds(absl::Milliseconds(29)));
}

TEST(BackoffTest, SameSeedSameSequence) {
  for (Jitter jitter : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
    const BackoffParams p =
        Params(absl::Milliseconds(25), absl::Seconds(1), 2.0, jitter);
    std::mt19937_64 a(11), b(11);
    Backoff x(p), y(p);
    for (int n = 0; n < 20; ++n) {
      EXPECT_EQ(x.Next(absl::BitGenRef(a)), y.Next(absl::BitGenRef(b)))
          << JitterName(jitter) << " " << n;
    }
  }
}

TEST(BackoffTest, DefaultParams) {
  const BackoffParams p;
  EXPECT_EQ(p.initial, absl::Milliseconds(25));
  EXPECT_EQ(p.max, absl::Seconds(1));
  EXPECT_EQ(p.multiplier, 2.0);
  EXPECT_EQ(p.jitter, Jitter::kFull);
}

TEST(JitterNameTest, Names) {
  EXPECT_EQ(JitterName(Jitter::kFull), "FULL");
  EXPECT_EQ(JitterName(Jitter::kA6), "A6");
  EXPECT_EQ(JitterName(Jitter::kDecorrelated), "DECORRELATED");
}

TEST(ParseJitterTest, RoundTripsEveryName) {
  for (Jitter jitter : {Jitter::kFull, Jitter::kA6, Jitter::kDecorrelated}) {
    absl::StatusOr<Jitter> parsed = ParseJitter(JitterName(jitter));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, jitter);
  }
}

TEST(ParseJitterTest, AnyCase) {
  EXPECT_EQ(*ParseJitter("full"), Jitter::kFull);
  EXPECT_EQ(*ParseJitter("Full"), Jitter::kFull);
  EXPECT_EQ(*ParseJitter("a6"), Jitter::kA6);
  EXPECT_EQ(*ParseJitter("decorrelated"), Jitter::kDecorrelated);
  EXPECT_EQ(*ParseJitter("DeCoRrElAtEd"), Jitter::kDecorrelated);
}

TEST(ParseJitterTest, Errors) {
  for (absl::string_view text :
       {"", " FULL", "FULL ", "NONE", "A7", "full_jitter", "decorrelate"}) {
    absl::StatusOr<Jitter> parsed = ParseJitter(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << text << "\"";
  }
}

}  // namespace
}  // namespace rpcguard
