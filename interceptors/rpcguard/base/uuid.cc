// Copyright rpcguard authors.

#include "rpcguard/base/uuid.h"

#include <cstdint>
#include <cstring>

namespace rpcguard {

std::string NewUuidV4(Random& random) {
  uint64_t hi = random.Next64();
  uint64_t lo = random.Next64();
  // RFC 4122: version 4 in the high nibble of byte 6, variant 10xx in the
  // high bits of byte 8.
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);
  static constexpr char kHex[] = "0123456789abcdef";
  // The 32 digits, most significant first, in one loop, then copied into
  // the groups 8-4-4-4-12: no per-digit test for where a dash goes, since
  // this runs on every call.
  char digits[32];
  for (int i = 0; i < 16; ++i) {
    digits[i] = kHex[(hi >> (60 - 4 * i)) & 0xF];
    digits[16 + i] = kHex[(lo >> (60 - 4 * i)) & 0xF];
  }
  std::string out(36, '-');
  std::memcpy(&out[0], digits, 8);
  std::memcpy(&out[9], digits + 8, 4);
  std::memcpy(&out[14], digits + 12, 4);
  std::memcpy(&out[19], digits + 16, 4);
  std::memcpy(&out[24], digits + 20, 12);
  return out;
}

}  // namespace rpcguard
