// Copyright rpcguard authors.
//
// The trace schema: one row per field of a trace line, in the order the
// writers put them, saying which events carry the field, how its value is
// formatted from a TraceEvent and how it is parsed back into one. The logfmt
// and JSON writers (trace.cc) and the reader (tools/trace_reader.cc) all walk
// this one list, so a new field is one row here and cannot be written by one
// side and forgotten by the other.
//
// Internal: not part of rpcguard's API (rpcguard.h does not include it); the
// line syntax (quoting, logfmt versus JSON) stays with the writer and the
// reader, the list only deals in field values.

#ifndef RPCGUARD_OBSERVABILITY_TRACE_FIELDS_H_
#define RPCGUARD_OBSERVABILITY_TRACE_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {

// A field's value as a writer formats it. `text` may point into the event or
// into `storage`; the value is filled in place and never copied, so that
// fields which are views of the event cost no allocation.
struct TraceFieldValue {
  // A string field's empty text is written as "no value" (logfmt "-", JSON
  // null); a number's "inf" and "-inf" are null in JSON.
  absl::string_view text;
  bool number = false;
  std::string storage;
};

// One key=value as the reader found it in a line. `absent`: logfmt's bare
// "-" (or nothing after '=') or JSON's null.
struct TraceFieldText {
  std::string key;
  std::string value;
  bool absent = false;
};

// The bit of an event kind in TraceField::kinds.
constexpr uint8_t TraceKindBit(TraceEvent::Kind kind) {
  return static_cast<uint8_t>(1u << static_cast<int>(kind));
}

struct TraceField {
  // The key on the line: `key=` in logfmt, `"key":` in JSON.
  absl::string_view key;
  // Which kinds of event carry the field (TraceKindBit of each). A key may
  // have one row per group of kinds when its place or meaning differs.
  uint8_t kinds;
  // Whether a reader must find the key on a line of those kinds: the writers
  // always write it, so a line without it was cut short.
  bool required;
  // Fills in the value; returns false to leave the field off the line (the
  // optional fields, when they hold nothing).
  bool (*format)(const TraceEvent& event, TraceFieldValue* out);
  // Reads the field into `event`, whose kind is already known. `field` is
  // null when the key is not on the line (and the row is not required).
  // Null for a field that is written for people and not read back (level).
  absl::Status (*parse)(const TraceFieldText* field, TraceEvent* event);
};

// Every field, in the order the writers put them on a line.
absl::Span<const TraceField> TraceFields();

// Builds the event that a line's fields describe, walking TraceFields().
// Errors, in this order of precedence:
//   NotFound         no msg=rpcguard: not an rpcguard event;
//   InvalidArgument  "missing field KEY" or "bad KEY=VALUE" for the first
//                    field, in line order, that is missing or cannot be read
//                    (the event kind first, since it says which fields the
//                    line must have).
// When a key is repeated, its last value counts. Unknown keys are ignored.
absl::StatusOr<TraceEvent> EventFromTraceFields(
    const std::vector<TraceFieldText>& fields);

// A call id as written in traces (hex, 1 to 16 digits, any case).
std::optional<uint64_t> ParseTraceCallId(absl::string_view text);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_TRACE_FIELDS_H_
