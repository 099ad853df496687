// Copyright rpcguard authors.
//
// What rpcguard reads and writes of a ClientContext beyond gRPC's public API,
// all in one place. A hijacked call runs every attempt on a ClientContext of
// its own; gRPC 1.51 gives an interceptor no getter for what the caller set
// with set_authority, set_wait_for_ready or ClientContext::FromServerContext,
// and no setter for what auth_context() and debug_error_string() return. So
// these functions reach ClientContext's private members by name, through
// explicit template instantiation (access checking does not apply to the
// names in one). A renamed member or a changed type is a compile error; what
// the members mean is checked end to end by
// tests/e2e/caller_context_e2e_test.cc and
// tests/unit/internal/grpc_1_51/grpc_1_51_context_test.cc. Compiled only for
// gRPC 1.51 (GRPC_CPP_VERSION_MAJOR/MINOR); on any other version only the
// public API is used, and attempts lose what it hides (README, Limits).

#ifndef RPCGUARD_INTERNAL_GRPC_1_51_CONTEXT_H_
#define RPCGUARD_INTERNAL_GRPC_1_51_CONTEXT_H_

#include <grpc/grpc.h>
#include <grpcpp/client_context.h>
#include <grpcpp/impl/channel_interface.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rpcguard {
namespace internal {

// Whether this build reaches ClientContext's private members (gRPC 1.51).
// False means only the public API is used.
bool ContextAccessKnowsThisGrpc();

// What a caller set on its ClientContext that every attempt must carry too,
// beyond the deadline, metadata, credentials and compression.
struct CallerSettings {
  std::string authority;  // set_authority; empty: the channel's
  // set_wait_for_ready (or set_fail_fast), only when the caller called it.
  std::optional<bool> wait_for_ready;
  // ClientContext::FromServerContext: the server call this one is a child
  // of, and what it inherits from it (deadline, cancellation, census).
  grpc_call* parent = nullptr;
  grpc::PropagationOptions propagation;
  struct census_context* census = nullptr;  // set_census_context
};

// The initial metadata `context` will send, as AddMetadata left it, to take
// rpcguard's private entries out or keep one of each (the link of
// LinkToServerCall, server.h): null on another gRPC, whose public API has no
// getter. Only before the context's call starts.
std::multimap<std::string, std::string>* MetadataToSend(
    grpc::ClientContext* context);

// The server call `caller` was made a child of (FromServerContext), or null;
// always null on another gRPC. Cheaper than ReadCallerSettings: no copies.
grpc_call* ParentCall(const grpc::ClientContext& caller);

// Reads the settings of `caller`, the application's context.
CallerSettings ReadCallerSettings(const grpc::ClientContext& caller);

// Gives `attempt`, a context not yet used for a call, the caller's settings.
// Core then propagates a parent's deadline and cancellation to the attempt
// as it would to the caller's own call. The parent must outlive the call
// made with `attempt`: it does while the caller's own call exists, which is
// created as its child too and holds it.
void ApplyCallerSettings(const CallerSettings& settings,
                         grpc::ClientContext* attempt);

// Makes `caller`'s auth_context() and debug_error_string() describe
// `attempt`, the call's final attempt, which has ended. `caller`'s call must
// not have completed yet: the application reads them once it has.
void DescribeFinalAttempt(const grpc::ClientContext& attempt,
                          grpc::ClientContext* caller);

// What DescribeFinalAttempt copies, kept for later: a hedged call riding
// its first copy is decided while the application's own call still runs,
// and gRPC writes its context's debug_error_string() when that call ends.
struct AttemptDescription {
  std::shared_ptr<const grpc::AuthContext> auth_context;
  std::string debug_error_string;
};
AttemptDescription ReadAttemptDescription(const grpc::ClientContext& attempt);
// Writes `description` into `caller`, whose own call has ended (its
// status batch is in rpcguard's hands) but not completed.
void WriteAttemptDescription(const AttemptDescription& description,
                             grpc::ClientContext* caller);

// The core channel under `channel`, the grpc::Channel an interceptor's
// ClientRpcInfo names; null on another gRPC or another kind of channel.
grpc_channel* CoreChannel(grpc::ChannelInterface* channel);

// Whether the call made with `context` on `channel` (the grpc::Channel an
// interceptor's ClientRpcInfo names) was ever taken by a transport: gRPC 1.51
// names a call's peer by the channel's target until a transport takes its
// headers, and by the transport's address from then on. Read once the call
// has ended. A call never taken reached no server, whatever its status
// says. Unknown (nullopt) on another gRPC, on another kind of channel, for a
// context with no call, and on a channel whose target is written as an
// address (ipv4:, ipv6:, unix:, unix-abstract:, vsock:, or an in-process
// channel), which a transport's peer could equal.
std::optional<bool> ReachedTransport(const grpc::ClientContext& context,
                                     grpc::ChannelInterface* channel);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_1_51_CONTEXT_H_
