// Copyright rpcguard authors.

#include "interceptors/policy.h"

#include "absl/strings/str_cat.h"

namespace rpcguard {

absl::string_view IdempotencyName(Idempotency i) {
  switch (i) {
    case Idempotency::kUnknown:
      return "UNKNOWN";
    case Idempotency::kNoSideEffects:
      return "NO_SIDE_EFFECTS";
    case Idempotency::kIdempotent:
      return "IDEMPOTENT";
    case Idempotency::kKeyed:
      return "KEYED";
  }
  return "UNKNOWN";
}

absl::StatusOr<Idempotency> ParseIdempotency(absl::string_view text) {
  // Exact case only: unlike jitter, idempotency decides whether a call with
  // side effects may run twice, so a near miss must not be guessed at.
  if (text == "UNKNOWN") return Idempotency::kUnknown;
  if (text == "NO_SIDE_EFFECTS") return Idempotency::kNoSideEffects;
  if (text == "IDEMPOTENT") return Idempotency::kIdempotent;
  if (text == "KEYED") return Idempotency::kKeyed;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown idempotency \"", text,
                   "\" (want NO_SIDE_EFFECTS, IDEMPOTENT, KEYED or UNKNOWN)"));
}

}  // namespace rpcguard
