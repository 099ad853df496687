// Copyright rpcguard authors.
//
// Backoff between attempts: exponential growth from `initial` by `multiplier`
// up to `max`, spread by jitter so that clients that failed together do not
// retry together. Randomness is a parameter; time is not read at all.

#ifndef RPCGUARD_DECISION_BACKOFF_H_
#define RPCGUARD_DECISION_BACKOFF_H_

#include "absl/random/bit_gen_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rpcguard {

enum class Jitter {
  // U(0, min(initial * multiplier^(n-1), max)): AWS's "full jitter"; the
  // least total work and the default.
  kFull,
  // min(initial * multiplier^(n-1), max) * U(0.8, 1.2): gRFC A6's form, for
  // behaviour identical to gRPC's built-in retry. May exceed max by 20%.
  kA6,
  // min(max, U(initial, 3 * previous)), previous starting at initial: AWS's
  // "decorrelated jitter".
  kDecorrelated,
};

// Returns "FULL", "A6" or "DECORRELATED"; "" for a value outside the enum
// (a cast from an integer), which ValidateCallPolicy refuses.
absl::string_view JitterName(Jitter j);
// Parses the names above (any case). InvalidArgument otherwise.
absl::StatusOr<Jitter> ParseJitter(absl::string_view text);

struct BackoffParams {
  absl::Duration initial = absl::Milliseconds(25);
  absl::Duration max = absl::Seconds(1);
  double multiplier = 2.0;
  Jitter jitter = Jitter::kFull;
};

// The backoff sequence of one call. Thread-compatible; one per call.
class Backoff {
 public:
  explicit Backoff(const BackoffParams& params) : params_(params) {}

  // Returns the delay before the next retry and advances the sequence.
  absl::Duration Next(absl::BitGenRef gen);

  // Starts the sequence again from `initial` (after server pushback, as A6
  // specifies).
  void Reset() {
    retries_ = 0;
    previous_ = params_.initial;
  }

  // Retries this sequence has produced delays for since the last Reset().
  int retries() const { return retries_; }

 private:
  BackoffParams params_;
  int retries_ = 0;
  absl::Duration previous_ = params_.initial;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_BACKOFF_H_
