// Copyright rpcguard authors.
//
// The floors rpcguard is measured against (clients.h, ClientKind): what any
// interceptor pays, and what any retrying interceptor built on gRPC's
// hijacking pays, before it does anything of its own.

#ifndef RPCGUARD_BENCH_FLOORS_H_
#define RPCGUARD_BENCH_FLOORS_H_

#include <grpcpp/support/client_interceptor.h>

#include <memory>

namespace rpcguard {
namespace bench {

// An interceptor that only proceeds (kPassThrough); with `headers`, after
// adding rpcguard's two headers to the call's initial metadata
// (kPassThroughHeaders).
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewPassThroughFactory(bool headers);

// An interceptor that hijacks every call and makes one attempt of it, a
// unary call's through the callback API, a stream's through
// StreamFloorCall (kHijackFloor); with `headers`, the attempt carries
// rpcguard's two headers (kHijackFloorHeaders).
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewHijackFloorFactory(bool headers);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_FLOORS_H_
