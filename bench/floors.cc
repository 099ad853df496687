// Copyright rpcguard authors.
//
// The floors rpcguard is measured against (floors.h).

#include "bench/floors.h"

#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/version_info.h>

// proto_utils.h left impl/codegen/ in gRPC 1.52.
#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR < 52
#include <grpcpp/impl/codegen/proto_utils.h>
#else
#include <grpcpp/impl/proto_utils.h>
#endif

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "bench/stream_floor.h"
#include "rpcguard/base/uuid.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace bench {
namespace {

using ::grpc::experimental::ClientInterceptorFactoryInterface;
using ::grpc::experimental::ClientRpcInfo;
using ::grpc::experimental::InterceptionHookPoints;
using ::grpc::experimental::InterceptorBatchMethods;

// The floor for any interceptor design: it only proceeds; with `headers`
// (kPassThroughHeaders), after adding rpcguard's two headers to the call's
// initial metadata, as rpcguard adds them to a call it does not hijack.
class PassThroughInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit PassThroughInterceptor(bool headers) : headers_(headers) {}
  void Intercept(InterceptorBatchMethods* methods) override {
    if (headers_ && methods->QueryInterceptionHookPoint(
                        InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      auto* md = methods->GetSendInitialMetadata();
      md->emplace(kIdempotencyKeyHeader, NewUuidV4(*Random::Default()));
      md->emplace(kAttemptHeader, "1");
    }
    methods->Proceed();
  }

 private:
  const bool headers_;
};

class PassThroughFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit PassThroughFactory(bool headers) : headers_(headers) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* /*info*/) override {
    return new PassThroughInterceptor(headers_);
  }

 private:
  const bool headers_;
};

// One call of HijackFloorInterceptor: what its single attempt needs, and the
// application's receiving batch while it waits. Heap-allocated; no reference
// count: it is deleted by whichever of the two parties that meet here (the
// attempt's completion, the parked batch) comes second, which is the one
// that serves the batch.
class HijackFloorCall {
 public:
  // Takes the application's serialized `request`: it is never sent on the
  // application's call.
  HijackFloorCall(const char* method, grpc::ByteBuffer* request)
      : method_(method) {
    request_.Swap(request);
  }

  // Starts the attempt, a callback-API call on `channel` (the channel below
  // the interceptor) with the caller's deadline; `headers`: with rpcguard's
  // two (kHijackFloorHeaders).
  void Start(grpc::ChannelInterface* channel, gpr_timespec deadline,
             bool headers) {
    context_.emplace();
    context_->set_deadline(deadline);
    if (headers) {
      // As rpcguard builds them: a key drawn for the call, then each header
      // added to the attempt's context.
      const std::string key = NewUuidV4(*Random::Default());
      context_->AddMetadata(kIdempotencyKeyHeader, key);
      context_->AddMetadata(kAttemptHeader, "1");
    }
    // One pointer: the std::function keeps it without an allocation.
    HijackFloorCall* const self = this;
    grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel,
        grpc::internal::RpcMethod(method_.c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &*context_, &request_, &response_, [self](grpc::Status status) {
          self->OnAttemptDone(std::move(status));
        });
  }

  // The application's batch that waits for the result (receive message and
  // status): parks it until the attempt has ended, or serves it at once.
  // `this` may be gone when it returns.
  void Park(InterceptorBatchMethods* batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) {
        parked_ = batch;
        return;
      }
    }
    Serve(std::unique_ptr<HijackFloorCall>(this), batch);
  }

 private:
  // On a gRPC callback thread. `this` may be gone when it returns.
  void OnAttemptDone(grpc::Status status) {
    InterceptorBatchMethods* batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_ = true;
      batch = parked_;
    }
    if (batch != nullptr) Serve(std::unique_ptr<HijackFloorCall>(this), batch);
  }

  // Fills `batch` from the attempt, ends `call`, then proceeds `batch`. Runs
  // once per call, after done_, so it reads the outcome without mu_.
  static void Serve(std::unique_ptr<HijackFloorCall> call,
                    InterceptorBatchMethods* batch) {
    grpc::Status& status = call->status_;
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_MESSAGE)) {
      bool filled = false;
      if (status.ok()) {
        // Generated stubs receive into a protobuf message. Deserialize
        // consumes the response: nothing is copied.
        grpc::Status parsed =
            grpc::SerializationTraits<grpc::protobuf::MessageLite>::Deserialize(
                &call->response_, static_cast<grpc::protobuf::MessageLite*>(
                                      batch->GetRecvMessage()));
        if (parsed.ok()) {
          filled = true;
        } else {
          // What gRPC itself reports for a response it cannot parse.
          status = std::move(parsed);
        }
      }
      if (!filled) batch->FailHijackedRecvMessage();
    }
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_STATUS)) {
      *batch->GetRecvStatus() = std::move(status);
    }
    // The attempt's ClientContext holds a reference to the application's
    // channel: it goes before the application's call can end, so that it is
    // never the last reference, dropped on a gRPC callback thread (which can
    // abort gRPC 1.51; see HoldCallbackThreads in clients.h).
    call.reset();
    batch->Proceed();
  }

  // The method's name: ClientRpcInfo's pointer can die before the attempt
  // does (GenericStub callers).
  std::string method_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  // The attempt's; in place, to spare an allocation.
  std::optional<grpc::ClientContext> context_;

  std::mutex mu_;
  bool done_ = false;                          // guarded by mu_
  grpc::Status status_;                        // written under mu_ before done_
  InterceptorBatchMethods* parked_ = nullptr;  // guarded by mu_
};

// The floor for any retrying interceptor built on hijacking: every unary
// call is hijacked and tried exactly once, as an attempt of its own on the
// channel below, with nothing added (no retries, no metadata, no policy).
// What it costs beyond pass-through is the mechanism itself: a second call
// and ClientContext per call, the hijacked batches, a thread hop on the
// attempt's completion. Streams go to StreamFloorCall (stream_floor.h), the
// same for a stream.
class HijackFloorInterceptor final : public grpc::experimental::Interceptor {
 public:
  HijackFloorInterceptor(ClientRpcInfo* info, bool headers)
      : info_(info), headers_(headers) {}

  void Intercept(InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_CANCEL)) {
      // No cancel support: the floor measures the no-failure path. A
      // cancelled call still waits for its attempt, which ends by the
      // caller's deadline at the latest. gRPC continues a cancel batch by
      // itself.
      return;
    }
    if (info_->type() != ClientRpcInfo::Type::UNARY) {
      ServeStream(batch);
      return;  // `this` may be gone.
    }
    if (!hijacked_ &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA) &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      OnFirstBatch(batch);
      return;  // `this` may be gone.
    }
    // Hijack() re-enters here with the batch's receive hooks. Initial
    // metadata alone needs nothing from the attempt (none is copied).
    if (hijacked_ && (batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_MESSAGE) ||
                      batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_STATUS))) {
      call_->Park(batch);
      return;  // `this` may be gone.
    }
    batch->Proceed();
  }

 private:
  // Takes what the attempt needs, starts it and hijacks the call.
  void OnFirstBatch(InterceptorBatchMethods* batch) {
    auto* call =
        new HijackFloorCall(info_->method(), batch->GetSerializedSendMessage());
    // Only needed to create the attempt's call.
    const std::unique_ptr<grpc::ChannelInterface> channel =
        batch->GetInterceptedChannel();
    call_ = call;
    hijacked_ = true;
    call->Start(channel.get(), info_->client_context()->raw_deadline(),
                headers_);
    // Re-enters Intercept() with this batch's receive hooks, which park.
    batch->Hijack();
  }

  void ServeStream(InterceptorBatchMethods* batch) {
    // Only the first batch's: gRPC's CQ-async writers reuse one batch for
    // the initial metadata and every write, and a hijacked call never
    // clears its metadata op, so later writes show the hook again.
    if (stream_ == nullptr &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      stream_ = StreamFloorCall::Start(info_, batch);
      // Re-enters Intercept() with this batch's receive hooks.
      batch->Hijack();
      return;
    }
    if (stream_ == nullptr) {
      batch->Proceed();
      return;
    }
    stream_->Serve(batch);
  }

  ClientRpcInfo* const info_;
  const bool headers_;
  // Written by the first batch before Hijack(); read only by the batch that
  // Hijack() re-enters with, before it is parked.
  bool hijacked_ = false;
  HijackFloorCall* call_ = nullptr;
  // A streaming call's; set by its first batch, before Hijack().
  std::shared_ptr<StreamFloorCall> stream_;
};

class HijackFloorFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit HijackFloorFactory(bool headers) : headers_(headers) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* info) override {
    return new HijackFloorInterceptor(info, headers_);
  }

 private:
  const bool headers_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewPassThroughFactory(bool headers) {
  return std::make_unique<PassThroughFactory>(headers);
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewHijackFloorFactory(bool headers) {
  return std::make_unique<HijackFloorFactory>(headers);
}

}  // namespace bench
}  // namespace rpcguard
