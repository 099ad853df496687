// Copyright rpcguard authors.
//
// Fuzzes rpcguard_lint's reading of FileDescriptorSets (tools/lint.h), which
// are whatever file a user hands it: any bytes must give a report or an
// InvalidArgument, never a crash, a hang or a leak. Whatever is read once
// must also be read from two identical copies, to the same RPCs.

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "rpcguard/config.h"
#include "tools/lint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // As rpcguard_lint does: protobuf's log of every invalid UTF-8 string it
  // parses would slow the fuzzer down for nothing.
  static const bool kQuiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)kQuiet;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const rpcguard::Config config;
  const absl::StatusOr<rpcguard::LintReport> once =
      rpcguard::Lint({{"fuzz.pb", bytes}}, config);
  if (!once.ok()) {
    if (once.status().code() != absl::StatusCode::kInvalidArgument) {
      __builtin_trap();  // every error must be InvalidArgument
    }
    return 0;
  }
  const absl::StatusOr<rpcguard::LintReport> twice =
      rpcguard::Lint({{"a.pb", bytes}, {"b.pb", bytes}}, config);
  if (!twice.ok() || twice->methods.size() != once->methods.size() ||
      twice->problems.size() != once->problems.size()) {
    __builtin_trap();
  }
  return 0;
}
