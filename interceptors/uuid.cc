// Copyright rpcguard authors.

#include "interceptors/uuid.h"

#include <cstdint>

namespace rpcguard {

std::string NewUuidV4(Random& random) {
  uint64_t hi = random.Next64();
  uint64_t lo = random.Next64();
  // RFC 4122: version 4 in the high nibble of byte 6, variant 10xx in the
  // high bits of byte 8.
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');
  int pos = 0;
  auto put = [&](uint64_t v, int nibbles) {
    for (int i = nibbles - 1; i >= 0; --i) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
      out[pos++] = kHex[(v >> (4 * i)) & 0xF];
    }
  };
  put(hi, 16);
  put(lo, 16);
  return out;
}

}  // namespace rpcguard
