// Copyright rpcguard authors.
//
// Fuzzes Config::FromJson, which reads users' JSON: any bytes must give a
// Config or an InvalidArgument, never a crash, a hang or a leak. A config that
// parses must also resolve and explain without trouble.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rpcguard/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rpcguard::Config> config = rpcguard::Config::FromJson(json);
  if (config.ok()) {
    config->Explain("/pkg.Svc/M");
    config->Resolve("/rpcguard.testing.v1.FaultService/Get");
  } else if (config.status().code() != absl::StatusCode::kInvalidArgument) {
    __builtin_trap();  // every error must be InvalidArgument
  }
  return 0;
}
