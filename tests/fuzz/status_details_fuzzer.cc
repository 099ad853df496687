// Copyright rpcguard authors.
//
// Fuzzes the `grpc-status-details-bin` (google.rpc.Status with RetryInfo)
// parser: server-controlled bytes.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rpcguard/decision/server_hints.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::optional<absl::Duration> d = rpcguard::ParseRetryInfo(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (d.has_value() && *d < absl::ZeroDuration()) __builtin_trap();
  return 0;
}
