// Copyright rpcguard authors.

#include "rpcguard/base/uuid.h"

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>

#include "gtest/gtest.h"
#include "rpcguard/random.h"

namespace rpcguard {
namespace {

// Returns 0, 1, 2, ...: a fixed, fully predictable sequence.
class CounterRandom : public Random {
 public:
  explicit CounterRandom(uint64_t start = 0) : next_(start) {}
  uint64_t Next64() override { return next_++; }

 private:
  uint64_t next_;
};

// Returns the same value every time.
class ConstantRandom : public Random {
 public:
  explicit ConstantRandom(uint64_t value) : value_(value) {}
  uint64_t Next64() override { return value_; }

 private:
  uint64_t value_;
};

// A seeded Mersenne twister: reproducible but well mixed.
class SeededRandom : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : rng_(seed) {}
  uint64_t Next64() override { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

// Checks the RFC 4122 text form of a version 4 UUID.
::testing::AssertionResult IsUuidV4(const std::string& u) {
  if (u.size() != 36) {
    return ::testing::AssertionFailure() << u << ": length " << u.size();
  }
  for (size_t i = 0; i < u.size(); ++i) {
    const bool dash_position = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_position) {
      if (u[i] != '-') {
        return ::testing::AssertionFailure() << u << ": no dash at " << i;
      }
      continue;
    }
    const char c = u[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return ::testing::AssertionFailure()
             << u << ": '" << c << "' at " << i << " is not lower-case hex";
    }
  }
  if (u[14] != '4') {
    return ::testing::AssertionFailure() << u << ": version " << u[14];
  }
  if (u[19] != '8' && u[19] != '9' && u[19] != 'a' && u[19] != 'b') {
    return ::testing::AssertionFailure() << u << ": variant " << u[19];
  }
  return ::testing::AssertionSuccess();
}

TEST(UuidTest, FormatFromDefaultRandom) {
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(IsUuidV4(NewUuidV4(*Random::Default())));
  }
}

TEST(UuidTest, FormatHoldsForExtremeBits) {
  // All zeros and all ones: the version and variant bits are forced either
  // way.
  ConstantRandom zeros(0);
  EXPECT_EQ(NewUuidV4(zeros), "00000000-0000-4000-8000-000000000000");
  ConstantRandom ones(~uint64_t{0});
  EXPECT_EQ(NewUuidV4(ones), "ffffffff-ffff-4fff-bfff-ffffffffffff");
}

// Two draws in turn: the high then the low 64 bits.
class SequenceRandom : public Random {
 public:
  SequenceRandom(uint64_t first, uint64_t second) : values_{first, second} {}
  uint64_t Next64() override { return values_[next_++ % 2]; }

 private:
  uint64_t values_[2];
  int next_ = 0;
};

TEST(UuidTest, DigitsAppearMostSignificantFirstInTheirGroups) {
  SequenceRandom random(0x0123456789abcdef, 0xfedcba9876543210);
  // Version 4 replaces digit 13 ("c"), the variant the top two bits of
  // digit 17 ("f" becomes "b").
  EXPECT_EQ(NewUuidV4(random), "01234567-89ab-4def-bedc-ba9876543210");
}

TEST(UuidTest, TenThousandDrawsAreDistinctAndWellFormed) {
  constexpr int kDraws = 10000;
  SeededRandom random(20240601);
  std::unordered_set<std::string> seen;
  for (int i = 0; i < kDraws; ++i) {
    const std::string u = NewUuidV4(random);
    ASSERT_TRUE(IsUuidV4(u));
    EXPECT_TRUE(seen.insert(u).second) << "duplicate " << u;
  }
  EXPECT_EQ(seen.size(), kDraws);
}

TEST(UuidTest, TenThousandDefaultDrawsAreDistinct) {
  constexpr int kDraws = 10000;
  std::unordered_set<std::string> seen;
  for (int i = 0; i < kDraws; ++i) seen.insert(NewUuidV4(*Random::Default()));
  EXPECT_EQ(seen.size(), kDraws);
}

TEST(UuidTest, DeterministicWithFixedRandom) {
  CounterRandom random;
  // Draws 0 and 1, then 2 and 3.
  EXPECT_EQ(NewUuidV4(random), "00000000-0000-4000-8000-000000000001");
  EXPECT_EQ(NewUuidV4(random), "00000000-0000-4002-8000-000000000003");
  CounterRandom again;
  EXPECT_EQ(NewUuidV4(again), "00000000-0000-4000-8000-000000000001");
}

TEST(UuidTest, KeepsAllButSixBitsInOrder) {
  // 122 of the 128 drawn bits appear in the text, in order: high word first.
  CounterRandom random(0x0123456789abcdefULL);
  // hi = 0x0123456789abcdef (version nibble c -> 4),
  // lo = 0x0123456789abcdf0 (top nibble 0 -> 8).
  EXPECT_EQ(NewUuidV4(random), "01234567-89ab-4def-8123-456789abcdf0");
}

TEST(UuidTest, SameSeedSameUuids) {
  SeededRandom a(7), b(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(NewUuidV4(a), NewUuidV4(b));
}

}  // namespace
}  // namespace rpcguard
