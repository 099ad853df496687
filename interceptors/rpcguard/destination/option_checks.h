// Copyright rpcguard authors.
//
// The checks shared by the Validate() methods of the destination layer's
// options (breaker, budget, throttle), so that each rule and its message is
// written once. Private to :destination.

#ifndef RPCGUARD_DESTINATION_OPTION_CHECKS_H_
#define RPCGUARD_DESTINATION_OPTION_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace internal {

// InvalidArgument "<field>: <message>", e.g. "retryBudget.ratio: must be in
// [0, 1]".
absl::Status InvalidOption(absl::string_view field, absl::string_view message);

// OK when `d` is finite and greater than 0; otherwise InvalidOption(field).
absl::Status CheckPositiveDuration(absl::string_view field, absl::Duration d);

// Checks a sliding window's options, "<prefix>.window" and
// "<prefix>.buckets": the window positive and finite, buckets in [1, 1000],
// and each bucket at least 1ms wide.
absl::Status CheckWindow(absl::string_view prefix, absl::Duration window,
                         int buckets);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_OPTION_CHECKS_H_
