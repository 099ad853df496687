// Copyright rpcguard authors.

#include "bench/stream_floor.h"

#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/version_info.h>

// proto_utils.h left impl/codegen/ in gRPC 1.52.
#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR < 52
#include <grpcpp/impl/codegen/proto_utils.h>
#else
#include <grpcpp/impl/proto_utils.h>
#endif

#include <utility>

namespace rpcguard {
namespace bench {

using ::grpc::experimental::InterceptionHookPoints;

namespace {

bool Has(grpc::experimental::InterceptorBatchMethods* batch,
         InterceptionHookPoints point) {
  return batch->QueryInterceptionHookPoint(point);
}

}  // namespace

StreamFloorCall::StreamFloorCall(const char* method) : method_(method) {}

std::shared_ptr<StreamFloorCall> StreamFloorCall::Start(
    grpc::experimental::ClientRpcInfo* info, Batch* first) {
  std::shared_ptr<StreamFloorCall> call(new StreamFloorCall(info->method()));
  call->self_ = call;
  call->context_.emplace();
  call->context_->set_deadline(info->client_context()->raw_deadline());
  Actions a;
  {
    std::lock_guard<std::mutex> lock(call->mu_);
    call->TakeSend(nullptr,
                   Has(first, InterceptionHookPoints::PRE_SEND_MESSAGE)
                       ? first->GetSerializedSendMessage()
                       : nullptr,
                   Has(first, InterceptionHookPoints::PRE_SEND_CLOSE), a);
  }
  // Only needed to create the attempt's call.
  const std::unique_ptr<grpc::ChannelInterface> channel =
      first->GetInterceptedChannel();
  grpc::internal::ClientCallbackReaderWriterFactory<
      grpc::ByteBuffer,
      grpc::ByteBuffer>::Create(channel.get(),
                                grpc::internal::RpcMethod(
                                    call->method_.c_str(),
                                    grpc::internal::RpcMethod::BIDI_STREAMING),
                                &*call->context_, call.get());
  // The base hold: the stream stays open for the application's next
  // request; released when the server's messages end.
  call->AddHold();
  {
    std::lock_guard<std::mutex> lock(call->mu_);
    call->Pump(a);
  }
  // Operations started before StartCall wait for it.
  call->Act(a);
  call->StartCall();
  return call;
}

void StreamFloorCall::Serve(Batch* batch) {
  // The application may end its call (and drop the interceptor's reference)
  // as soon as a status batch proceeds.
  const std::shared_ptr<StreamFloorCall> keep = shared_from_this();
  const grpc::ByteBuffer* request =
      Has(batch, InterceptionHookPoints::PRE_SEND_MESSAGE)
          ? batch->GetSerializedSendMessage()
          : nullptr;
  const bool close = Has(batch, InterceptionHookPoints::PRE_SEND_CLOSE);
  // Receive hooks show only in a batch's hijacked pass; its first pass has
  // the sends.
  PendingRecv r{batch, Has(batch, InterceptionHookPoints::PRE_RECV_MESSAGE),
                Has(batch, InterceptionHookPoints::PRE_RECV_STATUS)};
  Actions a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (request != nullptr || close) {
      TakeSend(batch, request, close, a);
      CompleteSends(a, /*resume=*/false);
    } else if (r.message || r.status) {
      const bool status = r.status;  // FillRecv clears what it filled
      if (!FillRecv(r)) {
        recvs_.push_back(r);
      } else if (status) {
        a.proceed_last = batch;
      } else {
        a.proceed.push_back(batch);
      }
    } else {
      // Initial metadata alone (none is copied), or a send batch's
      // hijacked pass.
      a.proceed.push_back(batch);
    }
    Pump(a);
  }
  Act(a);
}

void StreamFloorCall::TakeSend(Batch* batch, const grpc::ByteBuffer* request,
                               bool close, Actions& a) {
  if (done_) {
    // As on a finished gRPC stream.
    if (batch != nullptr) {
      if (request != nullptr) batch->FailHijackedSendMessage();
      a.proceed.push_back(batch);
    }
    return;
  }
  int64_t index = -1;
  if (request != nullptr) {
    // A reference to the same slices, not a copy of the bytes.
    queue_.push_back(*request);
    index = taken_++;
  }
  if (close) half_closed_ = true;
  if (batch != nullptr) sends_.push_back({batch, index, close});
}

bool StreamFloorCall::Taken(int64_t index, bool resume) const {
  if (index < written_) return true;
  if (write_failed_ || hold_released_) return false;
  const int64_t window = resume ? kWriteAhead / 2 : kWriteAhead;
  return index - written_ < window;
}

void StreamFloorCall::CompleteSends(Actions& a, bool resume) {
  while (!sends_.empty()) {
    const PendingSend& s = sends_.front();
    if (s.message >= 0 && !Taken(s.message, resume)) break;
    if (s.close && !closed_) break;
    a.proceed.push_back(s.batch);
    sends_.pop_front();
  }
}

bool StreamFloorCall::FillRecv(PendingRecv& r) {
  if (r.message) {
    if (!ahead_.empty()) {
      // Generated stubs receive into a protobuf message; Deserialize
      // consumes the bytes.
      grpc::Status parsed =
          grpc::SerializationTraits<grpc::protobuf::MessageLite>::Deserialize(
              &ahead_.front(), static_cast<grpc::protobuf::MessageLite*>(
                                   r.batch->GetRecvMessage()));
      if (!parsed.ok()) r.batch->FailHijackedRecvMessage();
      ahead_.pop_front();
      r.message = false;
    } else if (read_end_ || done_) {
      r.batch->FailHijackedRecvMessage();
      r.message = false;
    }
  }
  if (r.status && done_ && !r.message) {
    *r.batch->GetRecvStatus() = status_;
    r.status = false;
  }
  return !r.message && !r.status;
}

void StreamFloorCall::Deliver(Actions& a) {
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (FillRecv(*it)) {
      if (Has(it->batch, InterceptionHookPoints::PRE_RECV_STATUS)) {
        a.proceed_last = it->batch;
      } else {
        a.proceed.push_back(it->batch);
      }
      it = recvs_.erase(it);
      continue;
    }
    ++it;
  }
}

void StreamFloorCall::Pump(Actions& a, bool read_chain) {
  if (hold_released_ || done_) return;
  if (!writing_ && !write_failed_ && !closing_) {
    if (written_ < taken_) {
      writing_ = true;
      a.write = &queue_.front();
      a.write_more = written_ + 1 < taken_;
      ++a.holds;
    } else if (half_closed_) {
      closing_ = true;
      a.writes_done = true;
      ++a.holds;
    }
  }
  const size_t room = read_chain ? kReadAhead : kReadAhead / 2;
  if (!reading_ && !read_end_ && ahead_.size() < room) {
    reading_ = true;
    a.read = true;
    ++a.holds;
  }
  // Taken under mu_, while the base hold is surely there: released first,
  // it could let the stream finish under the operations started below.
  // (A hold is a counter: it runs no reaction.)
  if (a.holds > 0) AddMultipleHolds(a.holds);
}

void StreamFloorCall::Act(Actions& a) {
  for (Batch* b : a.proceed) b->Proceed();
  if (a.proceed_last != nullptr) a.proceed_last->Proceed();
  if (a.write != nullptr) {
    grpc::WriteOptions options;
    if (a.write_more) options.set_buffer_hint();
    StartWrite(a.write, options);
  }
  if (a.writes_done) StartWritesDone();
  if (a.read) StartRead(&read_buffer_);
  for (int i = 0; i < a.holds; ++i) RemoveHold();
  if (a.release_hold) RemoveHold();
}

void StreamFloorCall::OnReadDone(bool ok) {
  Actions a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (ok) {
      ahead_.emplace_back();
      ahead_.back().Swap(&read_buffer_);
    } else {
      read_end_ = true;
      // Nothing more will be asked of the stream's server side: let it
      // finish, and its status come.
      if (!hold_released_) {
        hold_released_ = true;
        a.release_hold = true;
      }
    }
    Deliver(a);
    Pump(a, /*read_chain=*/true);
  }
  Act(a);
}

void StreamFloorCall::OnWriteDone(bool ok) {
  Actions a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (ok) {
      queue_.pop_front();
      ++written_;
    } else {
      write_failed_ = true;  // the stream's end says how
    }
    CompleteSends(a, /*resume=*/true);
    Pump(a);
  }
  Act(a);
}

void StreamFloorCall::OnWritesDoneDone(bool ok) {
  Actions a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) closed_ = true;
    CompleteSends(a, /*resume=*/true);
    Pump(a);
  }
  Act(a);
}

void StreamFloorCall::OnDone(const grpc::Status& status) {
  Actions a;
  std::shared_ptr<StreamFloorCall> keep;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = status;
    Deliver(a);
    // Requests the stream never took fail; the rest are done.
    for (const PendingSend& s : sends_) {
      if (s.message >= 0 && s.message >= written_) {
        s.batch->FailHijackedSendMessage();
      }
      a.proceed.push_back(s.batch);
    }
    sends_.clear();
    queue_.clear();
    keep = std::move(self_);
  }
  // The attempt's ClientContext holds a reference to the application's
  // channel: it goes before the application's call can end, so that it is
  // never the last one, dropped on this gRPC thread (see HoldCallbackThreads
  // in clients.h).
  context_.reset();
  Act(a);
}

}  // namespace bench
}  // namespace rpcguard
