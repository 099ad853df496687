// Copyright rpcguard authors.

#include "rpcguard/decision/give_up_reason.h"

namespace rpcguard {

absl::string_view GiveUpReasonName(GiveUpReason reason) {
  switch (reason) {
#define RPCGUARD_GIVE_UP_REASON_CASE(name, text) \
  case GiveUpReason::k##name:                    \
    return text;
    RPCGUARD_GIVE_UP_REASONS(RPCGUARD_GIVE_UP_REASON_CASE)
#undef RPCGUARD_GIVE_UP_REASON_CASE
  }
  return "none";
}

}  // namespace rpcguard
