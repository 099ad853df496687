// Copyright rpcguard authors.
//
// GiveUpReason: why a call stopped without success. The one vocabulary of
// rpcguard's outcomes: the same stable names appear in the caller's status
// message, in trace lines and in stats labels.

#ifndef RPCGUARD_DECISION_GIVE_UP_REASON_H_
#define RPCGUARD_DECISION_GIVE_UP_REASON_H_

#include "absl/strings/string_view.h"

namespace rpcguard {

// Why a call stopped without success (or kNone). Names are stable: they
// appear in status messages, traces and stats.
enum class GiveUpReason {
  kNone,
  kMaxAttempts,      // retriable failure, but the attempts are spent
  kDeadline,         // the next attempt would not fit in the deadline
  kFatal,            // the status is not worth retrying
  kAuth,             // credentials refused
  kNotIdempotent,    // retriable failure of a method not safe to repeat
  kCancelled,        // the caller cancelled
  kBudgetExhausted,  // the retry budget is spent
  kBreakerOpen,      // the destination's circuit breaker is open
  kPushbackStop,     // the server said not to retry
  // A call rpcguard cannot retry safely, sent once (a grpc::GenericStub
  // call whose response object is not a protobuf message).
  kUnsupportedCall,
  kLocalError,  // the client made the error itself (IsLocalError)
};

// The number of GiveUpReason values (kNone included): for tables indexed by
// reason.
inline constexpr int kNumGiveUpReasons =
    static_cast<int>(GiveUpReason::kLocalError) + 1;

// Returns "none", "max_attempts", "deadline", "fatal", "auth",
// "not_idempotent", "cancelled", "budget_exhausted", "breaker_open",
// "pushback_stop", "unsupported_call", "local_error".
absl::string_view GiveUpReasonName(GiveUpReason reason);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_GIVE_UP_REASON_H_
