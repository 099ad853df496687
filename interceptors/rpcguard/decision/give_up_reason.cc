// Copyright rpcguard authors.

#include "rpcguard/decision/give_up_reason.h"

namespace rpcguard {

absl::string_view GiveUpReasonName(GiveUpReason reason) {
  switch (reason) {
    case GiveUpReason::kNone:
      return "none";
    case GiveUpReason::kMaxAttempts:
      return "max_attempts";
    case GiveUpReason::kDeadline:
      return "deadline";
    case GiveUpReason::kFatal:
      return "fatal";
    case GiveUpReason::kAuth:
      return "auth";
    case GiveUpReason::kNotIdempotent:
      return "not_idempotent";
    case GiveUpReason::kCancelled:
      return "cancelled";
    case GiveUpReason::kBudgetExhausted:
      return "budget_exhausted";
    case GiveUpReason::kBreakerOpen:
      return "breaker_open";
    case GiveUpReason::kPushbackStop:
      return "pushback_stop";
    case GiveUpReason::kUnsupportedCall:
      return "unsupported_call";
    case GiveUpReason::kLocalError:
      return "local_error";
  }
  return "none";
}

}  // namespace rpcguard
