// Copyright rpcguard authors.

#include "rpcguard/internal/grpc_1_51/context.h"

#include <grpc/support/alloc.h>
#include <grpcpp/channel.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "rpcguard/internal/grpc_1_51/grpc_version.h"
#include "rpcguard/internal/grpc_1_51/private_member.h"

namespace rpcguard {
namespace internal {

bool ContextAccessKnowsThisGrpc() { return RPCGUARD_GRPC_1_51 != 0; }

#if RPCGUARD_GRPC_1_51
namespace {

RPCGUARD_PRIVATE_MEMBER(Authority, grpc::ClientContext, std::string,
                        authority_);
RPCGUARD_PRIVATE_MEMBER(WaitForReady, grpc::ClientContext, bool,
                        wait_for_ready_);
RPCGUARD_PRIVATE_MEMBER(WaitForReadySet, grpc::ClientContext, bool,
                        wait_for_ready_explicitly_set_);
RPCGUARD_PRIVATE_MEMBER(PropagateFrom, grpc::ClientContext, grpc_call*,
                        propagate_from_call_);
RPCGUARD_PRIVATE_MEMBER(Propagation, grpc::ClientContext,
                        grpc::PropagationOptions, propagation_options_);
RPCGUARD_PRIVATE_MEMBER(AuthContext, grpc::ClientContext,
                        std::shared_ptr<const grpc::AuthContext>,
                        auth_context_);
RPCGUARD_PRIVATE_MEMBER(DebugErrorString, grpc::ClientContext, std::string,
                        debug_error_string_);
RPCGUARD_PRIVATE_MEMBER(CChannel, grpc::Channel, grpc_channel* const,
                        c_channel_);
// One name: the macro would split the template's arguments.
using SendMetadataMap = std::multimap<std::string, std::string>;
RPCGUARD_PRIVATE_MEMBER(SendInitialMetadata, grpc::ClientContext,
                        SendMetadataMap, send_initial_metadata_);

}  // namespace
#endif  // RPCGUARD_GRPC_1_51

std::multimap<std::string, std::string>* MetadataToSend(
    grpc::ClientContext* context) {
#if RPCGUARD_GRPC_1_51
  return &(context->*Get(SendInitialMetadata()));
#else
  (void)context;
  return nullptr;
#endif
}

grpc_call* ParentCall(const grpc::ClientContext& caller) {
#if RPCGUARD_GRPC_1_51
  return caller.*Get(PropagateFrom());
#else
  (void)caller;
  return nullptr;
#endif
}

CallerSettings ReadCallerSettings(const grpc::ClientContext& caller) {
  CallerSettings s;
  s.census = caller.census_context();
#if RPCGUARD_GRPC_1_51
  s.authority = caller.*Get(Authority());
  if (caller.*Get(WaitForReadySet()))
    s.wait_for_ready = caller.*Get(WaitForReady());
  s.parent = caller.*Get(PropagateFrom());
  s.propagation = caller.*Get(Propagation());
#endif
  return s;
}

void ApplyCallerSettings(const CallerSettings& settings,
                         grpc::ClientContext* attempt) {
  if (!settings.authority.empty()) attempt->set_authority(settings.authority);
  if (settings.wait_for_ready) {
    attempt->set_wait_for_ready(*settings.wait_for_ready);
  }
  if (settings.census != nullptr) {
    attempt->set_census_context(settings.census);
  }
#if RPCGUARD_GRPC_1_51
  if (settings.parent != nullptr) {
    attempt->*Get(PropagateFrom()) = settings.parent;
    attempt->*Get(Propagation()) = settings.propagation;
  }
#endif
}

void DescribeFinalAttempt(const grpc::ClientContext& attempt,
                          grpc::ClientContext* caller) {
  WriteAttemptDescription(ReadAttemptDescription(attempt), caller);
}

AttemptDescription ReadAttemptDescription(const grpc::ClientContext& attempt) {
  return AttemptDescription{attempt.auth_context(),
                            attempt.debug_error_string()};
}

void WriteAttemptDescription(const AttemptDescription& description,
                             grpc::ClientContext* caller) {
#if RPCGUARD_GRPC_1_51
  // auth_context() returns the member once set; the caller's own call never
  // connected (or lost to the copy described), so it has nothing better.
  caller->*Get(AuthContext()) = description.auth_context;
  caller->*Get(DebugErrorString()) = description.debug_error_string;
#else
  (void)description;
  (void)caller;
#endif
}

grpc_channel* CoreChannel(grpc::ChannelInterface* channel) {
#if RPCGUARD_GRPC_1_51
  auto* c = dynamic_cast<grpc::Channel*>(channel);
  return c == nullptr ? nullptr : c->*Get(CChannel());
#else
  (void)channel;
  return nullptr;
#endif
}

std::optional<bool> ReachedTransport(const grpc::ClientContext& context,
                                     grpc::ChannelInterface* channel) {
#if RPCGUARD_GRPC_1_51
  const std::string peer = context.peer();  // empty: no call
  if (peer.empty()) return std::nullopt;
  grpc_channel* core = CoreChannel(channel);
  if (core == nullptr) return std::nullopt;
  char* raw = grpc_channel_get_target(core);
  const std::string target = raw == nullptr ? "" : raw;
  gpr_free(raw);
  // The forms a transport names its peer by: a target written so could be
  // the very peer a transport reports.
  for (absl::string_view form :
       {"ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "inproc"}) {
    if (absl::StartsWith(target, form)) return std::nullopt;
  }
  if (target.empty()) return std::nullopt;
  return peer != target;
#else
  (void)context;
  (void)channel;
  return std::nullopt;
#endif
}

}  // namespace internal
}  // namespace rpcguard
