// Copyright rpcguard authors.

#include "rpcguard/decision/commit_reason.h"

namespace rpcguard {

absl::string_view CommitReasonName(CommitReason reason) {
  switch (reason) {
#define RPCGUARD_COMMIT_REASON_CASE(name, text) \
  case CommitReason::k##name:                   \
    return text;
    RPCGUARD_COMMIT_REASONS(RPCGUARD_COMMIT_REASON_CASE)
#undef RPCGUARD_COMMIT_REASON_CASE
  }
  return "";
}

std::optional<CommitReason> CommitReasonFromName(absl::string_view name) {
  for (int i = 0; i < kNumCommitReasons; ++i) {
    const auto r = static_cast<CommitReason>(i);
    if (name == CommitReasonName(r)) return r;
  }
  return std::nullopt;
}

}  // namespace rpcguard
