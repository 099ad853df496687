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
#include "rpcguard/decision/give_up_reason.h"

namespace rpcguard {

// The longest wait a server may ask of a call without a deadline (pushback
// or RetryInfo) before rpcguard reads it as "do not retry" (give-up reason
// pushback_stop). A call with a deadline is bounded by its deadline alone.
inline constexpr absl::Duration kMaxServerDelay = absl::Seconds(60);

// The server's retry pushback (`grpc-retry-pushback-ms` trailer, gRFC A6)
// and RetryInfo hint, as they apply to the next retry.
struct Pushback {
  enum class Kind { kNone, kRetryAfter, kStop };
  Kind kind = Kind::kNone;
  absl::Duration delay;  // for kRetryAfter
  // google.rpc.RetryInfo.retry_delay: the least the next retry must wait.
  std::optional<absl::Duration> min_delay;
  // A kStop that came with rpcguard's gave-up trailer (server.h): the
  // server had itself given up on a call below it. Its give-up reason is
  // then downstream_gave_up rather than pushback_stop.
  bool downstream_gave_up = false;

  // The give-up reason a kStop stands for.
  GiveUpReason StopReason() const {
    return downstream_gave_up ? GiveUpReason::kDownstreamGaveUp
                              : GiveUpReason::kPushbackStop;
  }
};

// Parses a `grpc-retry-pushback-ms` value: a non-negative decimal integer of
// milliseconds means "retry after exactly this"; anything else (negative,
// empty, not a number, overflowing) means "do not retry", as A6 specifies.
Pushback ParsePushback(absl::string_view value);

// Whether the next attempt (a retry, or a hedged call's next copy) may wait
// out `delay`, a wait the server chose: a pushback, or a RetryInfo floor above
// the backoff. `time_left` is what the wait may take: the time to the
// caller's deadline less the least time an attempt needs, or
// absl::InfiniteDuration() for a call without a deadline. Returns kNone when
// the wait fits (with a deadline, however long it is: the caller chose that
// bound), kDeadline when it does not, and, without a deadline, kPushbackStop
// for a wait over kMaxServerDelay.
GiveUpReason CheckServerDelay(absl::Duration delay, absl::Duration time_left);

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
