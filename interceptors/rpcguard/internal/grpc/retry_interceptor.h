// Copyright rpcguard authors.
//
// The per-call dispatcher: one RetryInterceptor per call, which asks the
// call plan (decision/call_plan.h) how to run the call and runs it.

#ifndef RPCGUARD_INTERNAL_GRPC_RETRY_INTERCEPTOR_H_
#define RPCGUARD_INTERNAL_GRPC_RETRY_INTERCEPTOR_H_

#include <grpcpp/support/client_interceptor.h>

#include <memory>

#include "rpcguard/internal/grpc/factory_state.h"

namespace rpcguard {
namespace internal {

// The factory of rpcguard's interceptors, all sharing `state`.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewRetryInterceptorFactory(std::shared_ptr<const FactoryState> state);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_RETRY_INTERCEPTOR_H_
