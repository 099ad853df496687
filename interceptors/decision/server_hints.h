// Copyright rpcguard authors.
//
// What a server can say about retrying, beyond its status code: gRFC A6's
// `grpc-retry-pushback-ms` trailer and google.rpc.RetryInfo inside
// `grpc-status-details-bin`. Both parsers take untrusted bytes from the
// network: they never crash, and malformed input means "no hint" (RetryInfo)
// or "do not retry" (pushback, as A6 specifies).

#ifndef RPCGUARD_DECISION_SERVER_HINTS_H_
#define RPCGUARD_DECISION_SERVER_HINTS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rpcguard {

// The server's retry pushback (`grpc-retry-pushback-ms` trailer, gRFC A6)
// and RetryInfo hint, as they apply to the next retry.
struct Pushback {
  enum class Kind { kNone, kRetryAfter, kStop };
  Kind kind = Kind::kNone;
  absl::Duration delay;  // for kRetryAfter
  // google.rpc.RetryInfo.retry_delay: the least the next retry must wait.
  std::optional<absl::Duration> min_delay;
};

// Parses a `grpc-retry-pushback-ms` value: a non-negative decimal integer of
// milliseconds means "retry after exactly this"; anything else (negative,
// empty, not a number, overflowing) means "do not retry", as A6 specifies.
Pushback ParsePushback(absl::string_view value);

// Reads the retry_delay of a google.rpc.RetryInfo detail from serialized
// google.rpc.Status bytes (the `grpc-status-details-bin` trailer, which
// grpc::Status::error_details() holds). Returns nullopt when there is none or
// the bytes are malformed; a negative delay is malformed.
std::optional<absl::Duration> ParseRetryInfo(absl::string_view status_details);

// The inverse of ParseRetryInfo, for servers and tests: serialized
// google.rpc.Status bytes of `code` and `message` with one RetryInfo detail
// of `retry_delay` (clamped at zero), to send as grpc::Status's
// error_details.
std::string RetryInfoStatusDetails(int code, absl::string_view message,
                                   absl::Duration retry_delay);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_SERVER_HINTS_H_
