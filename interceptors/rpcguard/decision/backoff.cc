// Copyright rpcguard authors.

#include "rpcguard/decision/backoff.h"

#include <algorithm>
#include <cmath>

#include "absl/random/distributions.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rpcguard {

absl::string_view JitterName(Jitter j) {
  switch (j) {
    case Jitter::kFull:
      return "FULL";
    case Jitter::kA6:
      return "A6";
    case Jitter::kDecorrelated:
      return "DECORRELATED";
  }
  return "";
}

absl::StatusOr<Jitter> ParseJitter(absl::string_view text) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (upper == "FULL") return Jitter::kFull;
  if (upper == "A6") return Jitter::kA6;
  if (upper == "DECORRELATED") return Jitter::kDecorrelated;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown jitter \"", text, "\" (want FULL, A6 or DECORRELATED)"));
}

absl::Duration Backoff::Next(absl::BitGenRef gen) {
  ++retries_;
  const double max_s = absl::ToDoubleSeconds(params_.max);
  const double initial_s = absl::ToDoubleSeconds(params_.initial);
  switch (params_.jitter) {
    case Jitter::kDecorrelated: {
      const double prev_s = absl::ToDoubleSeconds(previous_);
      const double hi = std::max(initial_s, 3 * prev_s);
      double d =
          absl::Uniform<double>(absl::IntervalClosedClosed, gen, initial_s, hi);
      d = std::min(max_s, d);
      previous_ = absl::Seconds(d);
      return previous_;
    }
    case Jitter::kFull:
    case Jitter::kA6: {
      // pow in doubles: the exponent is small (attempts are capped) and the
      // result is clamped, so overflow to inf is harmless.
      double ceiling = std::min(
          max_s, initial_s * std::pow(params_.multiplier,
                                      static_cast<double>(retries_ - 1)));
      if (!(ceiling >= 0)) ceiling = max_s;  // NaN guard
      const double factor =
          params_.jitter == Jitter::kFull
              ? absl::Uniform<double>(absl::IntervalClosedClosed, gen, 0.0, 1.0)
              : absl::Uniform<double>(absl::IntervalClosedClosed, gen, 0.8,
                                      1.2);
      return absl::Seconds(ceiling * factor);
    }
  }
  return params_.initial;
}

}  // namespace rpcguard
