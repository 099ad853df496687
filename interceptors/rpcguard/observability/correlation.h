// Copyright rpcguard authors.
//
// Correlation ids: the ids a caller's request already carries (a W3C
// `traceparent`, an `x-request-id`), copied onto rpcguard's trace lines so
// that one grep finds what rpcguard did for a request in the logs of the
// service that sent it.
//
// The ids come from the caller's metadata, which may come from anyone (a
// gateway forwards its clients' headers), so only well-formed values are
// kept, and short ones: a traceparent contributes only its trace id, and
// only when the header is valid (W3C Trace Context, level 1: version
// "00" to "fe", a 32-hex-digit trace id that is not all zeros, a 16-digit
// parent id that is not all zeros, 2 digits of flags, all lowercase); other
// keys' values are kept only when they are 1 to kMaxCorrelationValue bytes
// of printable ASCII without spaces or commas. Anything else is ignored: a
// malformed id never fails a call and never reaches a line.

#ifndef RPCGUARD_OBSERVABILITY_CORRELATION_H_
#define RPCGUARD_OBSERVABILITY_CORRELATION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {

// The key whose value is read as a W3C traceparent (its trace id goes to
// TraceEvent::trace_id); every other key's value is kept as it is.
inline constexpr absl::string_view kTraceparentKey = "traceparent";

// The keys read when the config names none.
std::vector<std::string> DefaultCorrelationKeys();

// Bounds of what a line carries: keys, and bytes per key and per value.
inline constexpr size_t kMaxCorrelationKeys = 8;
inline constexpr size_t kMaxCorrelationKeyLength = 64;
inline constexpr size_t kMaxCorrelationValue = 128;

// Checks a list of correlation keys. Each must be 1 to
// kMaxCorrelationKeyLength characters of [0-9a-z_.-] (gRPC metadata keys
// are lowercase), not a binary key ("-bin"), not gRPC's own ("grpc-"), and
// appear once; at most kMaxCorrelationKeys of them; an empty list turns the
// ids off. Errors: InvalidArgument "<path>[i]: why" (or "<path>: why" for
// the list), with `path` naming the field ("rpcguard.correlationKeys").
absl::Status ValidateCorrelationKeys(absl::Span<const std::string> keys,
                                     absl::string_view path);

// The trace id of a traceparent header value (surrounding spaces and tabs
// allowed), as 32 lowercase hex digits, or nullopt when the header is not a
// valid one. A version above "00" may carry more fields after the flags, as
// the spec allows; "ff" is invalid.
std::optional<std::string> TraceIdFromTraceparent(absl::string_view header);

// Whether `value` may be carried as a correlation id (see the banner).
bool IsCorrelationValue(absl::string_view value);

// The correlation ids of one call, as read from its metadata.
struct CorrelationIds {
  // A valid traceparent's trace id, or empty.
  std::string trace_id;
  // The other keys' values, in the order of the keys.
  std::vector<CorrelationId> others;

  bool empty() const { return trace_id.empty() && others.empty(); }
  // Copies the ids into event.trace_id and event.correlation.
  void FillIn(TraceEvent& event) const {
    event.trace_id = trace_id;
    event.correlation = others;
  }
};

// Reads the ids of `keys` (in order; the first value of a repeated key) from
// a call's metadata, dropping malformed ones.
CorrelationIds ReadCorrelationIds(
    const std::multimap<std::string, std::string>& metadata,
    absl::Span<const std::string> keys);

}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_CORRELATION_H_
