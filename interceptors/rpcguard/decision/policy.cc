// Copyright rpcguard authors.

#include "rpcguard/decision/policy.h"

#include <cmath>

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

absl::Status ValidateIdempotencyKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxIdempotencyKeyLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency-key must be 1 to ", kMaxIdempotencyKeyLength,
                     " characters, got ", key.size()));
  }
  for (char c : key) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "idempotency-key must be printable ASCII (0x20-0x7E)");
    }
  }
  return absl::OkStatus();
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

std::string CheckMaxAttempts(int64_t n) {
  if (n < 2) return "must be at least 2";
  if (n > kMaxAttemptsCap)
    return absl::StrCat("must be at most ", kMaxAttemptsCap);
  return "";
}

std::string CheckMultiplier(double m) {
  // NaN fails both comparisons, so test for the good range.
  if (!(m > 0)) return "must be greater than 0";
  if (!(m <= 1000)) return "must be at most 1000";
  return "";
}

std::string CheckPositiveDuration(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return "must be greater than 0";
  return "";
}

}  // namespace rpcguard
