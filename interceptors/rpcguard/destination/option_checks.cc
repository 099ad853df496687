// Copyright rpcguard authors.

#include "rpcguard/destination/option_checks.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace internal {
namespace {

// Bucket widths below this make no sense for a clock read per call.
constexpr absl::Duration kMinBucketWidth = absl::Milliseconds(1);
constexpr int kMaxBuckets = 1000;

}  // namespace

absl::Status InvalidOption(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

absl::Status CheckPositiveDuration(absl::string_view field, absl::Duration d) {
  if (d <= absl::ZeroDuration()) {
    return InvalidOption(field, "must be greater than 0");
  }
  if (d == absl::InfiniteDuration())
    return InvalidOption(field, "must be finite");
  return absl::OkStatus();
}

absl::Status CheckWindow(absl::string_view prefix, absl::Duration window,
                         int buckets) {
  const std::string window_field = absl::StrCat(prefix, ".window");
  if (absl::Status s = CheckPositiveDuration(window_field, window); !s.ok()) {
    return s;
  }
  if (buckets < 1 || buckets > kMaxBuckets) {
    return InvalidOption(absl::StrCat(prefix, ".buckets"),
                         absl::StrCat("must be in [1, ", kMaxBuckets, "]"));
  }
  if (window / buckets < kMinBucketWidth) {
    return InvalidOption(
        window_field,
        absl::StrCat("must be at least ", absl::FormatDuration(kMinBucketWidth),
                     " per bucket"));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace rpcguard
