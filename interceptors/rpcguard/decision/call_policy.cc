// Copyright rpcguard authors.

#include "rpcguard/decision/call_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rpcguard {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(kCallPolicyPath, ".", field, ": ", why));
}

// A backoff bound: positive as every duration of a policy, and finite (a
// config cannot say "inf", and a wait without end is no backoff).
std::string CheckBackoffBound(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "must be finite";
  return CheckPositiveDuration(d);
}

}  // namespace

absl::Status ValidateCallPolicy(const CallPolicy& call) {
  std::string why;
  if (call.max_attempts) {
    // 1 is a call's way to say "not retried"; a config says it by omission,
    // so CheckMaxAttempts starts at 2.
    why = *call.max_attempts < 1   ? "must be at least 1"
          : *call.max_attempts > 1 ? CheckMaxAttempts(*call.max_attempts)
                                   : "";
    if (!why.empty()) return Bad("max_attempts", why);
  }
  if (call.per_attempt_timeout) {
    why = CheckPositiveDuration(*call.per_attempt_timeout);
    if (!why.empty()) return Bad("per_attempt_timeout", why);
  }
  if (call.initial_backoff) {
    why = CheckBackoffBound(*call.initial_backoff);
    if (!why.empty()) return Bad("initial_backoff", why);
  }
  if (call.max_backoff) {
    why = CheckBackoffBound(*call.max_backoff);
    if (!why.empty()) return Bad("max_backoff", why);
  }
  if (call.initial_backoff && call.max_backoff &&
      *call.max_backoff < *call.initial_backoff) {
    return Bad("max_backoff", "must be at least initial_backoff");
  }
  if (call.backoff_multiplier) {
    why = CheckMultiplier(*call.backoff_multiplier);
    if (!why.empty()) return Bad("backoff_multiplier", why);
  }
  // A value cast from an integer outside the enum: refused, not read as
  // the default.
  if (call.jitter && JitterName(*call.jitter).empty()) {
    return Bad("jitter", absl::StrCat("must be FULL, A6 or DECORRELATED, not ",
                                      static_cast<int>(*call.jitter)));
  }
  if (call.trace_verbosity) {
    const int v = static_cast<int>(*call.trace_verbosity);
    if (v < 0 || v >= kNumTraceVerbosities) {
      return Bad(
          "trace_verbosity",
          absl::StrCat("must be OFF, GIVE_UPS, RETRIES or ALL, not ", v));
    }
  }
  if (call.hedging == true && call.max_attempts == 1) {
    return Bad("hedging", "cannot be on with max_attempts 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<MethodPolicy> ApplyCallPolicy(const MethodPolicy& method,
                                             const CallPolicy& call) {
  if (absl::Status s = ValidateCallPolicy(call); !s.ok()) return s;
  MethodPolicy p = method;
  BackoffParams& backoff = p.retry.backoff;
  if (call.initial_backoff) backoff.initial = *call.initial_backoff;
  if (call.max_backoff) backoff.max = *call.max_backoff;
  if (backoff.max < backoff.initial) {
    // One bound from the call, the other from the method: name the call's.
    return Bad(
        call.max_backoff ? "max_backoff" : "initial_backoff",
        absl::StrCat("leaves maxBackoff ", absl::FormatDuration(backoff.max),
                     " below initialBackoff ",
                     absl::FormatDuration(backoff.initial)));
  }
  if (call.backoff_multiplier) backoff.multiplier = *call.backoff_multiplier;
  if (call.jitter) backoff.jitter = *call.jitter;
  if (call.per_attempt_timeout) {
    p.per_attempt_timeout = *call.per_attempt_timeout;
  }
  if (call.hedging == false) p.hedging.reset();
  if (call.hedging == true && !p.hedging) {
    return Bad("hedging", "the method has no hedgingPolicy to turn on");
  }
  if (call.max_attempts) {
    p.retry.max_attempts = *call.max_attempts;
    if (p.hedging) {
      // One attempt leaves nothing to hedge; otherwise the copies are the
      // call's attempts.
      if (*call.max_attempts == 1) {
        p.hedging.reset();
      } else {
        p.hedging->max_attempts = *call.max_attempts;
      }
    }
  }
  return p;
}

}  // namespace rpcguard
