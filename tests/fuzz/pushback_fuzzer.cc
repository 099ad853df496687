// Copyright rpcguard authors.
//
// Fuzzes the `grpc-retry-pushback-ms` parser: server-controlled bytes.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rpcguard/decision/server_hints.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rpcguard::Pushback p = rpcguard::ParsePushback(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  // A delay, when given, is never negative.
  if (p.kind == rpcguard::Pushback::Kind::kRetryAfter &&
      p.delay < absl::ZeroDuration()) {
    __builtin_trap();
  }
  return 0;
}
