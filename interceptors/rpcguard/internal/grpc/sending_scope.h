// Copyright rpcguard authors.
//
// SendingScope: how rpcguard recognises its own calls when they come back to
// it. An rpcguard interceptor can be reached again by a call rpcguard itself
// is sending:
//  - gRPC 1.51's intercepted channel (GetInterceptedChannel) counts
//    interceptors without the factories that returned null, and without
//    those before the position a call started at (a call made through an
//    earlier interceptor's intercepted channel), while a call's interceptors
//    are made from the factory list: rpcguard's attempts then start at
//    rpcguard's own factory again, recursing until the stack overflows;
//  - rpcguard may be registered twice on one channel: the second would
//    retry the first's attempts, and would take the idempotency key the
//    first put on a call that may not be repeated for the caller's own.
// Both happen while rpcguard starts the call on the same thread (gRPC runs
// the first batch's interceptors synchronously), so a thread-local mark of
// the ClientContext being sent tells them apart at no cost to the wire.
// An interceptor between the two that proceeds the first batch on another
// thread hides the mark; see README, Limits.

#ifndef RPCGUARD_INTERNAL_GRPC_SENDING_SCOPE_H_
#define RPCGUARD_INTERNAL_GRPC_SENDING_SCOPE_H_

#include <grpcpp/client_context.h>

namespace rpcguard {
namespace internal {

// Marks `context` as the call rpcguard is sending on this thread for the
// scope's lifetime. Scopes nest.
class SendingScope {
 public:
  explicit SendingScope(const grpc::ClientContext* context)
      : previous_(current_) {
    current_ = context;
  }
  ~SendingScope() { current_ = previous_; }
  SendingScope(const SendingScope&) = delete;
  SendingScope& operator=(const SendingScope&) = delete;

  // Whether the first batch of `context`'s call is being sent by rpcguard on
  // this thread: an rpcguard interceptor seeing it passes it through.
  static bool IsSending(const grpc::ClientContext* context) {
    return context != nullptr && context == current_;
  }

 private:
  static thread_local const grpc::ClientContext* current_;
  const grpc::ClientContext* const previous_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_SENDING_SCOPE_H_
