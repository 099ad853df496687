// Copyright rpcguard authors.
//
// ParentWatch: learns when a parent server call ends (it is cancelled, or
// its deadline passes) while no attempt of its child runs. A call made with
// ClientContext::FromServerContext inherits the parent's deadline and
// cancellation; core applies them to each attempt, which is a child too, but
// a backoff is no call, and nothing in core tells rpcguard.
//
// The watch is a core client call created as the parent's child, with the
// parent's deadline and cancellation, on which only RECV_STATUS_ON_CLIENT is
// started. Without SEND_INITIAL_METADATA the client channel never picks a
// connection for it, so it sends nothing
// (tests/unit/internal/grpc_1_51/grpc_1_51_context_test.cc checks that not even
// a connection is opened). Its status arrives when core cancels it: at the
// parent's cancel or deadline, or at Stop(). Public C API only.

#ifndef RPCGUARD_INTERNAL_GRPC_PARENT_WATCH_H_
#define RPCGUARD_INTERNAL_GRPC_PARENT_WATCH_H_

#include <grpc/grpc.h>
#include <grpcpp/support/status.h>

#include <functional>
#include <memory>

namespace rpcguard {
namespace internal {

class ParentWatch {
 public:
  // What ended the watch: DEADLINE_EXCEEDED or CANCELLED (the parent's
  // deadline, the parent's cancel, or Stop()).
  using OnEnd = std::function<void(grpc::StatusCode)>;

  // Watches `parent`, a server call, through `channel`, inheriting what
  // `propagation` (a PropagationOptions bitmask) says of its deadline and
  // cancellation. `on_end` runs once, on a gRPC thread. Null when the watch
  // could not start.
  static std::shared_ptr<ParentWatch> Start(grpc_channel* channel,
                                            grpc_call* parent,
                                            uint32_t propagation, OnEnd on_end);

  ParentWatch(const ParentWatch&) = delete;
  ParentWatch& operator=(const ParentWatch&) = delete;
  ~ParentWatch();

  // Ends the watch: `on_end` runs soon with CANCELLED, unless it already
  // ran. Safe from any thread.
  void Stop();

 private:
  // The completion of the status batch, on the watch's callback queue.
  struct Done : grpc_completion_queue_functor {
    ParentWatch* watch;
  };

  explicit ParentWatch(OnEnd on_end);
  static void OnDone(grpc_completion_queue_functor* functor, int ok);

  OnEnd on_end_;
  grpc_completion_queue* cq_ = nullptr;
  grpc_call* call_ = nullptr;
  // What the status batch writes; read once it has completed.
  grpc_metadata_array trailers_;
  grpc_status_code status_ = GRPC_STATUS_OK;
  grpc_slice details_;
  const char* error_string_ = nullptr;
  Done done_;
  // Held by the status batch until it completes.
  std::shared_ptr<ParentWatch> self_;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_PARENT_WATCH_H_
