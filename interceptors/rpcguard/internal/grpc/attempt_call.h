// Copyright rpcguard authors.
//
// StartAttemptCall: sends one attempt of a hijacked call as a callback-API
// unary call whose request and response stay serialized bytes, and shows
// them to interceptors registered after rpcguard in serialized form only:
// GetSendMessage() and GetRecvMessage() are null for them (as gRPC's async
// API already shows a request), GetSerializedSendMessage() has the bytes.
// They never see an object of a type the application's call did not use
// (a grpc::ByteBuffer where they expect the request's protobuf type).
//
// Built on gRPC 1.51's internal call API (version-gated, like
// grpc_1_51/probes.h); on another gRPC it falls back to a plain
// callback-API call of ByteBuffers, which shows those ByteBuffers.

#ifndef RPCGUARD_INTERNAL_GRPC_ATTEMPT_CALL_H_
#define RPCGUARD_INTERNAL_GRPC_ATTEMPT_CALL_H_

#include <grpcpp/client_context.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <functional>

namespace rpcguard {
namespace internal {

// Whether StartAttemptCall hides the attempt's messages from later
// interceptors on this gRPC.
bool AttemptsHideMessages();

// Starts the call; `request`, `response` and `context` must outlive it;
// `done` runs once, on a gRPC callback thread (or inline if the call cannot
// start), with the call's status.
void StartAttemptCall(grpc::ChannelInterface* channel,
                      const grpc::internal::RpcMethod& method,
                      grpc::ClientContext* context,
                      const grpc::ByteBuffer* request,
                      grpc::ByteBuffer* response,
                      std::function<void(grpc::Status)> done);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_ATTEMPT_CALL_H_
