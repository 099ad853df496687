// Copyright rpcguard authors.

#include "rpcguard/base/uuid.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace rpcguard {
namespace {

// "00" to "ff": a byte's two lowercase hex digits.
constexpr std::array<std::array<char, 2>, 256> kHexPairs = [] {
  constexpr char kHex[] = "0123456789abcdef";
  std::array<std::array<char, 2>, 256> pairs{};
  for (int b = 0; b < 256; ++b) {
    pairs[b] = {kHex[b >> 4], kHex[b & 0xF]};
  }
  return pairs;
}();

}  // namespace

std::string NewUuidV4(Random& random) {
  uint64_t hi = random.Next64();
  uint64_t lo = random.Next64();
  // RFC 4122: version 4 in the high nibble of byte 6, variant 10xx in the
  // high bits of byte 8.
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);
  // Two digits per byte from a 256-entry table, written straight into
  // the groups 8-4-4-4-12: this runs on every call.
  std::string out(36, '-');
  char* p = &out[0];
  auto put = [&p](uint64_t bits, int from_byte, int bytes) {
    for (int i = from_byte; i < from_byte + bytes; ++i) {
      std::memcpy(p, kHexPairs[(bits >> (56 - 8 * i)) & 0xFF].data(), 2);
      p += 2;
    }
  };
  put(hi, 0, 4);
  ++p;
  put(hi, 4, 2);
  ++p;
  put(hi, 6, 2);
  ++p;
  put(lo, 0, 2);
  ++p;
  put(lo, 2, 6);
  return out;
}

}  // namespace rpcguard
