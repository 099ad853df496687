// Copyright rpcguard authors.
//
// GiveUpReason: why a call stopped without success. The one vocabulary of
// rpcguard's outcomes: the same stable names appear in the caller's status
// message, in trace lines and in stats labels.

#ifndef RPCGUARD_DECISION_GIVE_UP_REASON_H_
#define RPCGUARD_DECISION_GIVE_UP_REASON_H_

#include "absl/strings/string_view.h"

namespace rpcguard {

// Every reason, in enum order, with its stable name: the one list that the
// enum, kNumGiveUpReasons and GiveUpReasonName are made from, so a reason
// added here is counted by stats and read back by the trace reader.
#define RPCGUARD_GIVE_UP_REASONS(X)                                      \
  X(None, "none")                                                        \
  /* retriable failure, but the attempts are spent */                    \
  X(MaxAttempts, "max_attempts")                                         \
  /* the next attempt would not fit in the deadline */                   \
  X(Deadline, "deadline")                                                \
  /* the status is not worth retrying */                                 \
  X(Fatal, "fatal")                                                      \
  /* credentials refused */                                              \
  X(Auth, "auth")                                                        \
  /* retriable failure of a method not safe to repeat */                 \
  X(NotIdempotent, "not_idempotent")                                     \
  /* the caller cancelled */                                             \
  X(Cancelled, "cancelled")                                              \
  /* the retry budget is spent */                                        \
  X(BudgetExhausted, "budget_exhausted")                                 \
  /* the destination's circuit breaker is open */                        \
  X(BreakerOpen, "breaker_open")                                         \
  /* the server said not to retry */                                     \
  X(PushbackStop, "pushback_stop")                                       \
  /* a call rpcguard cannot retry safely, sent once (a grpc::GenericStub \
     call whose response object is not a protobuf message) */            \
  X(UnsupportedCall, "unsupported_call")                                 \
  /* the client made the error itself (IsLocalError) */                  \
  X(LocalError, "local_error")                                           \
  /* a stream had committed to its attempt (gRFC A6: a response, its     \
     headers, or more requests than the replay buffer holds): the        \
     attempt's failure is the call's */                                  \
  X(Committed, "committed")                                              \
  /* the destination's adaptive throttle refused the attempt locally     \
     (adaptive_throttle.h): it is overloaded */                          \
  X(Throttled, "throttled")                                              \
  /* the service called had itself given up, and said so (its failure    \
     carried rpcguard's gave-up trailer with a stop pushback): a retry   \
     would multiply the attempts below it */                             \
  X(DownstreamGaveUp, "downstream_gave_up")

// Why a call stopped without success (or kNone). Names are stable: they
// appear in status messages, traces and stats.
enum class GiveUpReason {
#define RPCGUARD_GIVE_UP_REASON_ENUM(name, text) k##name,
  RPCGUARD_GIVE_UP_REASONS(RPCGUARD_GIVE_UP_REASON_ENUM)
#undef RPCGUARD_GIVE_UP_REASON_ENUM
};

// The number of GiveUpReason values (kNone included), counted from the
// list: for tables indexed by reason.
inline constexpr int kNumGiveUpReasons = 0
#define RPCGUARD_GIVE_UP_REASON_COUNT(name, text) +1
    RPCGUARD_GIVE_UP_REASONS(RPCGUARD_GIVE_UP_REASON_COUNT)
#undef RPCGUARD_GIVE_UP_REASON_COUNT
    ;

// Returns the reason's name from the list above: "none", "max_attempts",
// "deadline", "fatal", "auth", "not_idempotent", "cancelled",
// "budget_exhausted", "breaker_open", "pushback_stop", "unsupported_call",
// "local_error", "committed", "throttled", "downstream_gave_up".
absl::string_view GiveUpReasonName(GiveUpReason reason);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_GIVE_UP_REASON_H_
