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

// The settings of a MethodPolicy, one name each, in bit order: each source
// of policy (JSON entry, .proto option) sets some of them, and the most
// specific source that sets a setting decides it. The list is the one place
// a setting is named; the bits, kNumPolicyFields and kAllPolicyFields follow
// from it, and internal/policy_fields.cc must have one row per entry, in
// this order (a static_assert there checks both).
#define RPCGUARD_POLICY_FIELDS(X)                               \
  X(Idempotency)                                                \
  X(Retry) /* the retryPolicy as a whole, but for its jitter */ \
  X(Jitter)                                                     \
  X(PerAttemptTimeout)                                          \
  X(Timeout)                                                    \
  X(MinAttemptTime)                                             \
  X(WaitForReady)                                               \
  X(Hedging) /* the hedgingPolicy as a whole */

// A setting's position in the list: the index of ResolvedPolicy::sources.
enum PolicyFieldIndex : int {
#define RPCGUARD_POLICY_FIELD_INDEX(name) kFieldIndex##name,
  RPCGUARD_POLICY_FIELDS(RPCGUARD_POLICY_FIELD_INDEX)
#undef RPCGUARD_POLICY_FIELD_INDEX
};

// The number of settings, counted from the list itself.
inline constexpr int kNumPolicyFields = 0
#define RPCGUARD_POLICY_FIELD_COUNT(name) +1
    RPCGUARD_POLICY_FIELDS(RPCGUARD_POLICY_FIELD_COUNT)
#undef RPCGUARD_POLICY_FIELD_COUNT
    ;

// The settings as bits of a set (Config::Entry::fields): bit i is index i.
enum PolicyField : uint32_t {
#define RPCGUARD_POLICY_FIELD_BIT(name) kField##name = 1u << kFieldIndex##name,
  RPCGUARD_POLICY_FIELDS(RPCGUARD_POLICY_FIELD_BIT)
#undef RPCGUARD_POLICY_FIELD_BIT
};
inline constexpr uint32_t kAllPolicyFields = (1u << kNumPolicyFields) - 1;
static_assert(kNumPolicyFields < 32, "PolicyField bits fit in a uint32_t");

// Shared range checks for every source of policy; each returns the reason
// ("must be at least 2") or an empty string when the value is fine.
std::string CheckMaxAttempts(int64_t n);
std::string CheckMultiplier(double m);
std::string CheckPositiveDuration(absl::Duration d);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_POLICY_H_
