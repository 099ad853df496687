// Copyright rpcguard authors.
//
// CommitReason: why a stream committed to its attempt (gRFC A6), after
// which the attempt's end is the call's. One vocabulary, as GiveUpReason's:
// the engine decides it, the trace line names it (`commit=`) and the stats
// count it (rpcguard_stream_commits_total's `reason`), all from the list
// below.

#ifndef RPCGUARD_DECISION_COMMIT_REASON_H_
#define RPCGUARD_DECISION_COMMIT_REASON_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace rpcguard {

// Every reason, in enum order, with its stable name.
#define RPCGUARD_COMMIT_REASONS(X)                                          \
  /* the server's response headers came */                                  \
  X(Headers, "headers")                                                     \
  /* a response message came */                                             \
  X(Message, "message")                                                     \
  /* the requests outgrew the call's replay buffer */                       \
  X(BufferLimit, "buffer_limit")                                            \
  /* the channel's streams together hold their replay limit (a busy         \
     channel keeps no more; DestinationConfig::channel_stream_buffer_bytes) \
   */                                                                       \
  X(ChannelBufferLimit, "channel_buffer_limit")

enum class CommitReason {
#define RPCGUARD_COMMIT_REASON_ENUM(name, text) k##name,
  RPCGUARD_COMMIT_REASONS(RPCGUARD_COMMIT_REASON_ENUM)
#undef RPCGUARD_COMMIT_REASON_ENUM
};

// The number of CommitReason values, counted from the list: for tables
// indexed by reason.
inline constexpr int kNumCommitReasons = 0
#define RPCGUARD_COMMIT_REASON_COUNT(name, text) +1
    RPCGUARD_COMMIT_REASONS(RPCGUARD_COMMIT_REASON_COUNT)
#undef RPCGUARD_COMMIT_REASON_COUNT
    ;

// "headers", "message", "buffer_limit", "channel_buffer_limit".
absl::string_view CommitReasonName(CommitReason reason);

// The reason named `name` (as CommitReasonName writes it), or none.
std::optional<CommitReason> CommitReasonFromName(absl::string_view name);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_COMMIT_REASON_H_
