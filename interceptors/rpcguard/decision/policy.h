// Copyright rpcguard authors.
//
// The per-method retry policy: whether a method may be repeated at all
// (idempotency) and how (attempts, backoff, timeouts). Plain values; Config
// builds them from JSON and the interceptor only reads them.

#ifndef RPCGUARD_DECISION_POLICY_H_
#define RPCGUARD_DECISION_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/decision/backoff.h"
#include "rpcguard/decision/hedging.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {

// Whether repeating a method is safe.
enum class Idempotency {
  // Nobody declared it: tried once, never repeated (unless the caller puts
  // its own idempotency key on the call, which makes that call kKeyed).
  kUnknown,
  // Reads only; repeating it changes nothing.
  kNoSideEffects,
  // Repeating it leaves the same state as doing it once.
  kIdempotent,
  // Has side effects, but the server deduplicates repeats by the
  // `idempotency-key` metadata: retried with one key for every attempt.
  kKeyed,
};

// Returns "UNKNOWN", "NO_SIDE_EFFECTS", "IDEMPOTENT" or "KEYED".
absl::string_view IdempotencyName(Idempotency i);

// Parses the names above (exact, upper case). InvalidArgument otherwise.
absl::StatusOr<Idempotency> ParseIdempotency(absl::string_view text);

// True for every value but kUnknown.
inline bool MayRepeat(Idempotency i) { return i != Idempotency::kUnknown; }

// Longest idempotency key accepted from a caller (Stripe's limit). A longer
// one fails the call with INVALID_ARGUMENT rather than being cut, which
// would break the server's deduplication.
inline constexpr size_t kMaxIdempotencyKeyLength = 255;

// Checks a caller's own idempotency key: 1 to kMaxIdempotencyKeyLength
// printable ASCII characters (gRPC aborts the process on an attempt whose
// metadata value is not). InvalidArgument naming the problem otherwise.
absl::Status ValidateIdempotencyKey(absl::string_view key);

// Largest maxAttempts accepted. gRPC clamps to 5; rpcguard allows more since
// the caller's deadline and the retry budget bound the total anyway.
inline constexpr int kMaxAttemptsCap = 10;

// How to retry, in gRPC's retryPolicy terms. Defaults apply to a method that
// is declared idempotent but has no retryPolicy: 3 attempts (the SRE book's
// ceiling), backoff from 25 ms (Envoy's base) doubling up to 1 s, full jitter.
struct RetryPolicy {
  // Attempts in all, the first included; 1 disables retries.
  int max_attempts = 3;
  BackoffParams backoff;
  // Replaces the default retriable set when present.
  std::optional<StatusCodeSet> retryable_codes;
};

// Everything rpcguard knows about one method.
struct MethodPolicy {
  Idempotency idempotency = Idempotency::kUnknown;
  RetryPolicy retry;
  // Each attempt's own timeout; an attempt that hits it ends with
  // DEADLINE_EXCEEDED, which is retriable. Infinite means none.
  absl::Duration per_attempt_timeout = absl::InfiniteDuration();
  // gRPC's methodConfig `timeout`: caps the call's deadline. Infinite: none.
  absl::Duration timeout = absl::InfiniteDuration();
  // A retry is only started when at least this much of the caller's deadline
  // would remain after the backoff: an attempt with less time left cannot
  // succeed and would only add load.
  absl::Duration min_attempt_time = absl::Milliseconds(2);
  // gRPC's methodConfig `waitForReady`, applied to every attempt.
  std::optional<bool> wait_for_ready;
  // gRFC A6's hedgingPolicy (with rpcguard's extensions): when set, and the
  // call may be hedged (call_plan.h), copies replace retries.
  std::optional<HedgingPolicy> hedging;

  // The classifier this policy implies.
  Classifier MakeClassifier() const {
    return retry.retryable_codes ? Classifier(*retry.retryable_codes)
                                 : Classifier();
  }
};

// The settings of a MethodPolicy, as bits: each source of policy (JSON entry,
// .proto option) sets some of them, and the most specific source that sets a
// field decides it.
enum PolicyField : uint32_t {
  kFieldIdempotency = 1 << 0,
  kFieldRetry = 1 << 1,  // the retryPolicy as a whole, but for its jitter
  kFieldJitter = 1 << 2,
  kFieldPerAttemptTimeout = 1 << 3,
  kFieldTimeout = 1 << 4,
  kFieldMinAttemptTime = 1 << 5,
  kFieldWaitForReady = 1 << 6,
  kFieldHedging = 1 << 7,  // the hedgingPolicy as a whole
};
inline constexpr uint32_t kAllPolicyFields = (1 << 8) - 1;
inline constexpr int kNumPolicyFields = 8;

// The field's name as Explain prints it ("idempotency", "retryPolicy", ...),
// for bit `index` (0 = kFieldIdempotency).
absl::string_view PolicyFieldName(int index);

// Copies into `*to` the fields of `from` that `from_fields` names and
// `*to_fields` does not yet have, and adds them to `*to_fields`.
void MergePolicy(const MethodPolicy& from, uint32_t from_fields,
                 MethodPolicy* to, uint32_t* to_fields);

// Shared range checks for every source of policy; each returns the reason
// ("must be at least 2") or an empty string when the value is fine.
std::string CheckMaxAttempts(int64_t n);
std::string CheckMultiplier(double m);
std::string CheckPositiveDuration(absl::Duration d);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_POLICY_H_
