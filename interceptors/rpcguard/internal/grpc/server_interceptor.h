// Copyright rpcguard authors.
//
// The server interceptor of server.h: it keeps the server call in
// ServerCalls while it runs, reads whether its caller's attempt is a retry
// or a hedge, and puts "do not retry" on a failure that an outgoing call's
// give-up caused. Not API.

#ifndef RPCGUARD_INTERNAL_GRPC_SERVER_INTERCEPTOR_H_
#define RPCGUARD_INTERNAL_GRPC_SERVER_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "rpcguard/internal/grpc/server_calls.h"

namespace rpcguard {
namespace internal {

struct ServerInterceptorSettings {
  bool edge = false;
  // The reasons that travel up.
  ReasonBits propagate = 0;
};

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewServerInterceptorFactory(const ServerInterceptorSettings& settings);

// Whether `reason` is a server's own client refusing to call the service
// below (throttled, breaker_open, budget_exhausted): the server is up, so
// its failure goes up as RESOURCE_EXHAUSTED, not UNAVAILABLE.
bool IsLocalRefusal(GiveUpReason reason);

// Whether initial metadata with `attempt` (rpcguard's attempt header, or
// empty) and `previous` (grpc-previous-rpc-attempts, or empty) is a retry
// or a hedge of its caller: attempt >= 2, or previous >= 1.
bool IsRepeatedAttempt(absl::string_view attempt, absl::string_view previous);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_SERVER_INTERCEPTOR_H_
