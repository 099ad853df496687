// Copyright rpcguard authors.
//
// UTF-8 encoding for the JSON readers (config, trace reader). Internal.

#ifndef RPCGUARD_BASE_UTF8_H_
#define RPCGUARD_BASE_UTF8_H_

#include <cstdint>
#include <string>

namespace rpcguard {
namespace internal {

// Appends code point `cp` (at most 0x10FFFF; callers have decoded \uXXXX
// escapes and surrogate pairs) to `out` as UTF-8.
inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_UTF8_H_
