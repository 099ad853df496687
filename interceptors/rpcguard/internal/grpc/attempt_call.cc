// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/attempt_call.h"

#include <grpcpp/impl/call_op_set.h>
#include <grpcpp/support/callback_common.h>
#include <grpcpp/support/client_callback.h>

#include <utility>

#include "rpcguard/internal/grpc_1_51/grpc_version.h"

namespace rpcguard {
namespace internal {

// Tags naming the one specialization of gRPC's callback unary call that
// rpcguard defines (below).
struct SerializedRequest;
struct SerializedResponse;

#if RPCGUARD_GRPC_1_51
namespace {

// gRPC's receive-message operation for a ByteBuffer, except that
// interceptors are given no message object: rpcguard's ByteBuffer is not
// the type of the application's response.
class OpaqueRecvMessage
    : public grpc::internal::CallOpRecvMessage<grpc::ByteBuffer> {
 protected:
  void SetInterceptionHookPoint(
      grpc::internal::InterceptorBatchMethodsImpl* interceptor_methods) {
    interceptor_methods->SetRecvMessage(nullptr, &hijacked_recv_failed_);
  }

 private:
  bool hijacked_recv_failed_ = false;
};

}  // namespace
#endif

}  // namespace internal
}  // namespace rpcguard

#if RPCGUARD_GRPC_1_51
namespace grpc {
namespace internal {

// gRPC's own callback unary call (grpcpp/support/client_callback.h), but
// sending the request already serialized: interceptors after rpcguard see
// no request object. A specialization of gRPC's template, so that it may
// read the context's metadata as gRPC's own does (ClientContext befriends
// the template).
template <>
class CallbackUnaryCallImpl<rpcguard::internal::SerializedRequest,
                            rpcguard::internal::SerializedResponse> {
 public:
  CallbackUnaryCallImpl(grpc::ChannelInterface* channel,
                        const grpc::internal::RpcMethod& method,
                        grpc::ClientContext* context,
                        const grpc::ByteBuffer* request,
                        grpc::ByteBuffer* response,
                        std::function<void(grpc::Status)> on_completion) {
    grpc::CompletionQueue* cq = channel->CallbackCQ();
    GPR_CODEGEN_ASSERT(cq != nullptr);
    grpc::internal::Call call(channel->CreateCall(method, context, cq));
    using OpSet = CallOpSet<CallOpSendInitialMetadata, CallOpSendMessage,
                            CallOpRecvInitialMetadata,
                            rpcguard::internal::OpaqueRecvMessage,
                            CallOpClientSendClose, CallOpClientRecvStatus>;
    struct OpSetAndTag {
      OpSet opset;
      CallbackWithStatusTag tag;
    };
    auto* const alloced = static_cast<OpSetAndTag*>(
        g_core_codegen_interface->grpc_call_arena_alloc(call.call(),
                                                        sizeof(OpSetAndTag)));
    auto* ops = new (&alloced->opset) OpSet;
    auto* tag = new (&alloced->tag)
        CallbackWithStatusTag(call.call(), std::move(on_completion), ops);
    // Serialized now (a reference to the same bytes), not lazily: the lazy
    // form would show the ByteBuffer to interceptors as the request.
    grpc::Status s = ops->SendMessage(*request);
    if (!s.ok()) {
      tag->force_run(s);
      return;
    }
    ops->SendInitialMetadata(&context->send_initial_metadata_,
                             context->initial_metadata_flags());
    ops->RecvInitialMetadata(context);
    ops->RecvMessage(response);
    ops->AllowNoMessage();
    ops->ClientSendClose();
    ops->ClientRecvStatus(context, tag->status_ptr());
    ops->set_core_cq_tag(tag);
    call.PerformOps(ops);
  }
};

}  // namespace internal
}  // namespace grpc
#endif

namespace rpcguard {
namespace internal {

bool AttemptsHideMessages() { return RPCGUARD_GRPC_1_51 != 0; }

void StartAttemptCall(grpc::ChannelInterface* channel,
                      const grpc::internal::RpcMethod& method,
                      grpc::ClientContext* context,
                      const grpc::ByteBuffer* request,
                      grpc::ByteBuffer* response,
                      std::function<void(grpc::Status)> done) {
#if RPCGUARD_GRPC_1_51
  grpc::internal::CallbackUnaryCallImpl<SerializedRequest, SerializedResponse>(
      channel, method, context, request, response, std::move(done));
#else
  grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, method, context, request, response, std::move(done));
#endif
}

}  // namespace internal
}  // namespace rpcguard
