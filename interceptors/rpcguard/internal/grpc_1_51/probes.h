// Copyright rpcguard authors.
//
// What rpcguard reads of gRPC 1.51's internals, all in one place. gRPC's
// interceptor API does not say which stub API a call uses, nor the type of
// the application's response object; these probes recover both from memory
// layouts that gRPC 1.51.x is known to have. Each is compiled only for gRPC
// 1.51 (GRPC_CPP_VERSION_MAJOR/MINOR) and answers the safe "don't know" on any
// other version, which costs speed (a hijack instead of a ride), never
// correctness. tests/unit/internal/grpc_1_51/grpc_1_51_probes_test.cc checks
// each probe against real calls and fails loudly when gRPC changes under it.

#ifndef RPCGUARD_INTERNAL_GRPC_1_51_PROBES_H_
#define RPCGUARD_INTERNAL_GRPC_1_51_PROBES_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/interceptor.h>

namespace rpcguard {
namespace internal {

// Whether this build's probes know the gRPC version it was compiled against.
// False means every probe answers its safe default.
bool ProbesKnowThisGrpc();

// Whether `object`, an application's response object handed over by gRPC's
// interceptor API as a void*, is a protobuf message (of any type) rather
// than the grpc::ByteBuffer of a grpc::GenericStub caller. A message is a
// polymorphic object: its first word is its vtable pointer, which lies in
// a loaded module (the program or a shared library). A ByteBuffer's only
// member is a grpc_byte_buffer*: null while the buffer is empty, else a
// heap pointer, which lies in no module. Relies on the Itanium C++ ABI's
// object layout (every Linux compiler), not on gRPC's internals. Vtables
// seen are remembered, so a known type costs a few compares; a new one asks
// the dynamic linker once. Null `object` answers false.
bool IsProtobufMessage(const void* object);

// Whether `batch`, the first batch of a call, belongs to a callback-API
// unary call: the one API whose first attempt can be the application's own
// call (CallMode::kRide). Neither the batch's operations nor ClientRpcInfo
// tell the APIs apart; where the status the application will read lives
// does. gRPC 1.51's callback unary call allocates its operations and its
// completion tag, whose last member is that status, in the call's arena just
// before it starts this batch; the sync API keeps the status on the caller's
// stack, the CQ API wherever the caller put it. So the status ends right
// below the arena's next free byte exactly for callback calls. Costs one
// 16-byte allocation from the call's arena. Anything unexpected (another
// gRPC version, an earlier interceptor that allocated from the arena)
// answers false.
bool IsCallbackUnaryCall(grpc::experimental::InterceptorBatchMethods* batch,
                         grpc::ClientContext* context);

// The place the interceptor being made for `info`'s call will have among
// the call's interceptors: the number made before it. Valid only inside a
// factory's CreateClientInterceptor (gRPC 1.51 appends each interceptor as
// its factory returns it). The intercepted channel a batch of the call gives
// (GetInterceptedChannel) is the call's channel from this place plus one, so
// the pair (channel, place) says which one it is. -1 on another gRPC.
int InterceptorPlace(const grpc::experimental::ClientRpcInfo& info);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_1_51_PROBES_H_
