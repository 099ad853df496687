// Copyright rpcguard authors.
//
// Fuzzes the trace reader's line parser, which reads whatever is in a log
// file: any bytes must parse to an event or an error, never crash. A parsed
// event must format and parse back.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tools/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rpcguard::TraceEvent> event = rpcguard::ParseTraceLine(line);
  if (event.ok()) {
    rpcguard::ParseTraceLine(rpcguard::FormatLogfmt(*event)).IgnoreError();
    rpcguard::ParseTraceLine(rpcguard::FormatJson(*event)).IgnoreError();
  }
  rpcguard::TraceReader reader;
  reader.AddLine(line);
  reader.Summary();
  return 0;
}
