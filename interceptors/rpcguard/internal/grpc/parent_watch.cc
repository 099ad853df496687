// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/parent_watch.h"

#include <grpc/support/alloc.h>

#include <utility>

namespace rpcguard {
namespace internal {
namespace {

// Destroys a watch's completion queue once it has shut down, then lets gRPC
// go (the watch held it initialised, as gRPC's own queues do).
struct QueueShutdown : grpc_completion_queue_functor {
  grpc_completion_queue* cq = nullptr;

  QueueShutdown() {
    functor_run = &Run;
    inlineable = 0;
  }
  static void Run(grpc_completion_queue_functor* functor, int /*ok*/) {
    auto* self = static_cast<QueueShutdown*>(functor);
    grpc_completion_queue_destroy(self->cq);
    delete self;
    grpc_shutdown();
  }
};

}  // namespace

ParentWatch::ParentWatch(OnEnd on_end) : on_end_(std::move(on_end)) {
  grpc_metadata_array_init(&trailers_);
  details_ = grpc_empty_slice();
  done_.functor_run = &OnDone;
  done_.inlineable = 0;  // never on the thread that started or stopped it
  done_.watch = this;
}

std::shared_ptr<ParentWatch> ParentWatch::Start(grpc_channel* channel,
                                                grpc_call* parent,
                                                uint32_t propagation,
                                                OnEnd on_end) {
  const uint32_t mask =
      propagation & (GRPC_PROPAGATE_DEADLINE | GRPC_PROPAGATE_CANCELLATION);
  if (channel == nullptr || parent == nullptr || mask == 0) return nullptr;
  std::shared_ptr<ParentWatch> watch(new ParentWatch(std::move(on_end)));
  grpc_init();
  auto* shutdown = new QueueShutdown;
  watch->cq_ = grpc_completion_queue_create_for_callback(shutdown, nullptr);
  shutdown->cq = watch->cq_;
  // No host and no deadline of its own: the parent's, when propagated, is
  // the only one.
  watch->call_ = grpc_channel_create_call(
      channel, parent, mask, watch->cq_,
      grpc_slice_from_static_string("/rpcguard.internal/ParentWatch"), nullptr,
      gpr_inf_future(GPR_CLOCK_REALTIME), nullptr);
  grpc_op op = {};
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &watch->trailers_;
  op.data.recv_status_on_client.status = &watch->status_;
  op.data.recv_status_on_client.status_details = &watch->details_;
  op.data.recv_status_on_client.error_string = &watch->error_string_;
  watch->self_ = watch;
  if (grpc_call_start_batch(watch->call_, &op, 1, &watch->done_, nullptr) !=
      GRPC_CALL_OK) {
    watch->self_.reset();
    return nullptr;
  }
  return watch;
}

ParentWatch::~ParentWatch() {
  if (call_ != nullptr) grpc_call_unref(call_);
  grpc_metadata_array_destroy(&trailers_);
  grpc_slice_unref(details_);
  gpr_free(const_cast<char*>(error_string_));
  if (cq_ != nullptr) grpc_completion_queue_shutdown(cq_);
}

void ParentWatch::Stop() { grpc_call_cancel(call_, nullptr); }

void ParentWatch::OnDone(grpc_completion_queue_functor* functor, int /*ok*/) {
  ParentWatch* watch = static_cast<Done*>(functor)->watch;
  // The batch's reference: the watch may go when this returns.
  std::shared_ptr<ParentWatch> self = std::move(watch->self_);
  watch->on_end_(static_cast<grpc::StatusCode>(watch->status_));
}

}  // namespace internal
}  // namespace rpcguard
