// Copyright rpcguard authors.
//
// StreamFlow: see the header for the design.

#include "rpcguard/internal/grpc/stream_flow.h"

#include <atomic>
#include <utility>

#include "rpcguard/channel.h"
#include "rpcguard/internal/grpc/sending_scope.h"

namespace rpcguard {
namespace internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

bool Has(InterceptorBatchMethods* b, InterceptionHookPoints point) {
  return b->QueryInterceptionHookPoint(point);
}

grpc::ClientContext* ContextOf(const std::shared_ptr<void>& context) {
  return static_cast<grpc::ClientContext*>(context.get());
}

// How long an application's write waits for a running event before handing
// itself to it (Serializer::RunHere): tens of microseconds at most.
constexpr int kServeSpins = 1000;

// Every flow's buffered bytes (StreamBytesBuffered).
std::atomic<int64_t> g_buffered{0};

}  // namespace

void StreamAttempt::OnReadInitialMetadataDone(bool ok) {
  flow_->OnHeaders(this, ok);
}
void StreamAttempt::OnReadDone(bool ok) { flow_->OnRead(this, ok); }
void StreamAttempt::OnWriteDone(bool ok) { flow_->OnWrite(this, ok); }
void StreamAttempt::OnWritesDoneDone(bool ok) { flow_->OnWritesDone(this, ok); }
void StreamAttempt::OnDone(const grpc::Status& status) {
  flow_->OnDone(this, status);
}

StreamFlow::StreamFlow(TransportOwner* owner, Serializer* serializer,
                       std::string method,
                       grpc::internal::RpcMethod::RpcType type,
                       size_t buffer_limit, ChannelStreamBytes* channel)
    : owner_(owner),
      serializer_(serializer),
      method_(std::move(method)),
      rpc_method_(method_.c_str(), type),
      buffer_limit_(buffer_limit),
      channel_(channel) {}

void StreamFlow::TakeFirstBatch(InterceptorBatchMethods* batch) {
  const grpc::ByteBuffer* request =
      Has(batch, InterceptionHookPoints::PRE_SEND_MESSAGE)
          ? batch->GetSerializedSendMessage()
          : nullptr;
  const bool close = Has(batch, InterceptionHookPoints::PRE_SEND_CLOSE);
  // Before the call starts: nothing else runs, so this runs now, before
  // Hijack() lets go of the batch.
  serializer_->Run([this, request, close] {
    Actions a;
    TakeSend(nullptr, request, close, a);
  });
}

void StreamFlow::Serve(InterceptorBatchMethods* batch) {
  const grpc::ByteBuffer* request =
      Has(batch, InterceptionHookPoints::PRE_SEND_MESSAGE)
          ? batch->GetSerializedSendMessage()
          : nullptr;
  const bool close = Has(batch, InterceptionHookPoints::PRE_SEND_CLOSE);
  PendingRecv r{batch,
                Has(batch, InterceptionHookPoints::PRE_RECV_INITIAL_METADATA),
                Has(batch, InterceptionHookPoints::PRE_RECV_MESSAGE),
                Has(batch, InterceptionHookPoints::PRE_RECV_STATUS)};
  if (request == nullptr && !close && !r.metadata && !r.message && !r.status) {
    // A send batch's hijacked half, or a receive batch's first pass: the
    // flow has nothing to do with it, and no event is needed. It comes
    // back synchronously from the Proceed of its other half (from inside
    // an event, where an event would only queue), so it goes on at once;
    // nothing of the flow is touched after.
    batch->Proceed();
    return;
  }
  auto serve = [this, batch, request, close, r]() mutable {
    Actions a;
    if (request != nullptr || close) {
      TakeSend(batch, request, close, a);
      // Taken at once when the attempt's window has room: proceeded here,
      // on the application's thread (unless another event runs).
      CompleteSends(a, /*resume=*/false);
    } else {
      const bool status = r.status;  // FillRecv clears what it fills
      if (!FillRecv(r)) {
        recvs_.push_back(r);
      } else {
        (status ? a.proceed_last : a.proceed).push_back(batch);
      }
    }
    Pump(a);
    Act(a);
  };
  if (request != nullptr || close) {
    // A write: served on the application's thread when the event holding
    // the serializer ends within a moment (Serializer::RunHere), so that a
    // blocking application is not woken for it. A read is not worth the
    // wait: it mostly waits for a message anyway (measured in
    // bench/RESULTS.md, "Streams near the floor").
    serializer_->RunHere(std::move(serve), kServeSpins);
  } else {
    serializer_->Run(std::move(serve));
  }
}

void StreamFlow::TakeSend(InterceptorBatchMethods* batch,
                          const grpc::ByteBuffer* request, bool close,
                          Actions& a) {
  if (outcome_ != nullptr) {
    // The call is over: a write fails, as on a finished gRPC stream.
    if (batch != nullptr) {
      if (request != nullptr) batch->FailHijackedSendMessage();
      a.proceed.push_back(batch);
    }
    return;
  }
  int64_t index = -1;
  if (request != nullptr) {
    const size_t size = request->Length();
    // Counted whatever happens: held until the attempt has written it.
    const bool channel_fits = channel_->Add(size);
    if (!committed() && (bytes_ + size > buffer_limit_ || !channel_fits)) {
      // More than a replay may hold: this attempt, or the next if none
      // runs, is the last.
      const CommitReason reason = bytes_ + size > buffer_limit_
                                      ? CommitReason::kBufferLimit
                                      : CommitReason::kChannelBufferLimit;
      if (current_ != nullptr && current_->bound_) {
        CommitTo(reason);
      } else if (!commit_at_start_.has_value()) {
        commit_at_start_ = reason;
      }
    }
    // A reference to the same slices, not a copy of the bytes.
    taken_bytes_ += size;
    replay_.push_back(Request{*request, taken_bytes_});
    bytes_ += size;
    g_buffered.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
    if (bytes_ > peak_bytes_) peak_bytes_ = bytes_.load();
    index = taken_++;
  }
  if (close) half_closed_ = true;
  if (batch != nullptr) sends_.push_back(PendingSend{batch, index, close});
}

std::shared_ptr<EngineAttempt> StreamFlow::NewAttempt() {
  auto attempt = std::make_shared<StreamAttempt>(this);
  attempt->context = std::make_shared<grpc::ClientContext>();
  return attempt;
}

void StreamFlow::Send(const std::shared_ptr<EngineAttempt>& engine_attempt,
                      grpc::ChannelInterface* channel) {
  auto attempt = std::static_pointer_cast<StreamAttempt>(engine_attempt);
  grpc::ClientContext* context = ContextOf(attempt->context);
  if (starter_) {
    starter_(channel, rpc_method_, context, attempt.get());
  } else {
    grpc::internal::ClientCallbackReaderWriterFactory<
        grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel, rpc_method_,
                                                    context, attempt.get());
  }
  // The base hold: the stream stays open for the application's next
  // request, which may come at any time. Released when the server's
  // messages end, or when the attempt is cancelled.
  attempt->AddHold();
  Actions a;
  current_ = attempt;
  attempt->bound_ = true;
  // Replays from the start: nothing is freed before the commit.
  attempt->written_ = freed_;
  attempt->written_bytes_ = freed_bytes_;
  if (commit_at_start_.has_value()) {
    CommitTo(*commit_at_start_);
    commit_at_start_.reset();
  }
  CompleteSends(a, /*resume=*/true);
  Pump(a);
  Act(a);
  // rpcguard's own call: an rpcguard interceptor below passes it through.
  SendingScope sending(context);
  attempt->StartCall();
}

void StreamFlow::Cancel(const std::shared_ptr<void>& context) {
  if (context == nullptr) return;
  ContextOf(context)->TryCancel();
  Actions a;
  StreamAttempt* attempt = current_.get();
  // With no read in flight (a response read ahead and not yet taken) the
  // stream would wait for the hold; cancelled, it has nothing to wait for.
  if (attempt != nullptr && attempt->context == context &&
      !attempt->hold_released_) {
    attempt->hold_released_ = true;
    a.attempt = attempt;
    a.release_hold = true;
  }
  Act(a);
}

void StreamFlow::OnHeaders(StreamAttempt* attempt, bool ok) {
  if (!ok) return;  // none, or trailers only: the end says the rest
  serializer_->Run([this, attempt] {
    if (attempt != current_.get() || outcome_ != nullptr) return;
    Actions a;
    if (!committed()) CommitTo(CommitReason::kHeaders);
    // Filled before this reaction ran, and not touched by gRPC again.
    CopyMetadata(ContextOf(attempt->context)->GetServerInitialMetadata(),
                 &initial_metadata_);
    metadata_ready_ = true;
    Deliver(a);
    Pump(a);
    Act(a);
  });
}

void StreamFlow::OnRead(StreamAttempt* attempt, bool ok) {
  serializer_->Run([this, attempt, ok] {
    Actions a;
    attempt->reading_ = false;
    if (!ok) {
      attempt->read_end_ = true;
      // Nothing more will be asked of this stream's server side: let it
      // finish, and its status come.
      if (!attempt->hold_released_) {
        attempt->hold_released_ = true;
        a.attempt = attempt;
        a.release_hold = true;
      }
    }
    if (attempt == current_.get() && outcome_ == nullptr) {
      if (ok) {
        if (!committed()) CommitTo(CommitReason::kMessage);
        ahead_bytes_ += attempt->read_buffer_.Length();
        ahead_.emplace_back();
        ahead_.back().Swap(&attempt->read_buffer_);
      } else if (committed()) {
        messages_ended_ = true;
      }
      Deliver(a);
      Pump(a, /*read_chain=*/true);
    }
    Act(a);
  });
}

void StreamFlow::OnWrite(StreamAttempt* attempt, bool ok) {
  serializer_->Run([this, attempt, ok] {
    Actions a;
    attempt->writing_ = false;
    if (ok) {
      // An attempt that is no longer current may write after its requests
      // were freed: only the count matters then.
      const int64_t i = attempt->written_ - freed_;
      if (i >= 0 && static_cast<size_t>(i) < replay_.size()) {
        attempt->written_bytes_ = replay_[i].end;
      }
      ++attempt->written_;
    } else {
      // The stream is failing; its end will say how.
      attempt->write_failed_ = true;
    }
    if (attempt == current_.get() && outcome_ == nullptr) {
      if (committed()) FreeWritten();
      CompleteSends(a, /*resume=*/true);
      Pump(a);
    }
    Act(a);
  });
}

void StreamFlow::OnWritesDone(StreamAttempt* attempt, bool ok) {
  serializer_->Run([this, attempt, ok] {
    Actions a;
    if (ok) attempt->closed_ = true;
    if (attempt == current_.get() && outcome_ == nullptr) {
      CompleteSends(a, /*resume=*/true);
      Pump(a);
    }
    Act(a);
  });
}

void StreamFlow::OnDone(StreamAttempt* attempt, const grpc::Status& status) {
  // The engine holds the attempt until it has heard of the end, which
  // comes after this event.
  serializer_->Run([this, attempt] {
    if (attempt == current_.get()) current_.reset();
  });
  owner_->OnAttemptEnded(attempt, status);
}

void StreamFlow::CommitTo(CommitReason reason) {
  // Made now, in this event: an attempt's end queued behind it is judged
  // committed.
  owner_->Commit(reason);
  FreeWritten();
}

void StreamFlow::FreeWritten() {
  const int64_t written = current_ == nullptr ? freed_ : current_->written_;
  while (freed_ < written && !replay_.empty()) {
    ReleaseBytes(replay_.front().bytes.Length());
    freed_bytes_ = replay_.front().end;
    replay_.pop_front();
    ++freed_;
  }
}

bool StreamFlow::Taken(int64_t index, bool resume) const {
  const StreamAttempt* attempt = current_.get();
  if (index < attempt->written_) return true;
  if (attempt->write_failed_ || attempt->hold_released_) return false;
  // The next to write, or in flight: taken whatever its size.
  if (index == attempt->written_) return true;
  // A writer that waited resumes at half the window, so that it then
  // writes half a window without waiting again.
  const int64_t messages = resume ? kWriteAhead / 2 : kWriteAhead;
  const uint64_t bytes = resume ? kAheadBytes / 2 : kAheadBytes;
  if (index - attempt->written_ >= messages) return false;
  // Requests below the attempt's written_ may be freed; this one is not.
  return replay_[index - freed_].end - attempt->written_bytes_ <= bytes;
}

void StreamFlow::CompleteSends(Actions& a, bool resume) {
  const StreamAttempt* attempt = current_.get();
  if (attempt == nullptr || !attempt->bound_ || outcome_ != nullptr) return;
  while (!sends_.empty()) {
    const PendingSend& s = sends_.front();
    if (s.message >= 0 && !Taken(s.message, resume)) break;
    if (s.close && !attempt->closed_) break;
    a.proceed.push_back(s.batch);
    sends_.pop_front();
  }
}

bool StreamFlow::FillRecv(PendingRecv& r) {
  if (r.metadata && metadata_ready_) {
    AddMetadata(initial_metadata_, r.batch->GetRecvInitialMetadata());
    r.metadata = false;
  }
  // A message after the metadata, as gRPC delivers them.
  if (r.message && !r.metadata) {
    if (!ahead_.empty()) {
      grpc::ByteBuffer& next = ahead_.front();
      ahead_bytes_ -= next.Length();
      grpc::Status error;
      if (!ParseResponse(next, method_, r.batch->GetRecvMessage(), &error)) {
        r.batch->FailHijackedRecvMessage();
        if (parse_error_.ok()) parse_error_ = error;
      }
      ahead_.pop_front();
      r.message = false;
    } else if (messages_ended_ || outcome_ != nullptr) {
      r.batch->FailHijackedRecvMessage();
      r.message = false;
    }
  }
  if (r.status && outcome_ != nullptr && !r.metadata && !r.message) {
    const FinalOutcome& o = *outcome_;
    *r.batch->GetRecvStatus() =
        parse_error_.ok() || !o.status.ok() ? o.status : parse_error_;
    auto* trailers = r.batch->GetRecvTrailingMetadata();
    AddMetadata(o.trailing_metadata, trailers);
    trailers->emplace(grpc::string_ref(kAttemptsTrailer),
                      grpc::string_ref(o.attempts_text));
    r.status = false;
  }
  return !r.metadata && !r.message && !r.status;
}

void StreamFlow::Deliver(Actions& a) {
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (FillRecv(*it)) {
      (it->batch->QueryInterceptionHookPoint(
           InterceptionHookPoints::PRE_RECV_STATUS)
           ? a.proceed_last
           : a.proceed)
          .push_back(it->batch);
      it = recvs_.erase(it);
      continue;
    }
    ++it;
  }
}

void StreamFlow::Pump(Actions& a, bool read_chain) {
  StreamAttempt* attempt = current_.get();
  if (attempt == nullptr || !attempt->bound_ || attempt->hold_released_ ||
      outcome_ != nullptr) {
    return;
  }
  a.attempt = attempt;
  if (!attempt->writing_ && !attempt->write_failed_ && !attempt->closing_) {
    if (attempt->written_ < taken_) {
      attempt->writing_ = true;
      a.write = &replay_[attempt->written_ - freed_].bytes;
      a.write_more = attempt->written_ + 1 < taken_;
      ++a.holds;
    } else if (half_closed_) {
      attempt->closing_ = true;
      a.writes_done = true;
      ++a.holds;
    }
  }
  // Ahead of the application: a response commits the call, the stream's end
  // is seen without waiting to be asked, and the application's next read
  // usually finds its message here.
  // A read completing starts the next while there is room; the
  // application's reads restart a stopped one at half the room, so that
  // gRPC's thread then reads half of it in a row.
  const size_t room = read_chain ? kReadAhead : kReadAhead / 2;
  const size_t room_bytes = read_chain ? kAheadBytes : kAheadBytes / 2;
  if (!attempt->reading_ && !attempt->read_end_ && ahead_.size() < room &&
      ahead_bytes_ < room_bytes) {
    attempt->reading_ = true;
    a.read = true;
    ++a.holds;
  }
  // Each operation started outside the lock keeps the stream open under it.
  if (a.holds > 0) attempt->AddMultipleHolds(a.holds);
}

void StreamFlow::Act(Actions& a) {
  // A status batch completes the application's call, which it may then
  // destroy, with this flow; once it has gone, any batch proceeded may be
  // the application's last (a read still out when the status came: a
  // callback reactor's OnDone waits for it, then the application frees the
  // call on its own thread). The running drain keeps the flow alive past
  // either.
  if (!a.proceed_last.empty() || (status_served_ && !a.proceed.empty())) {
    serializer_->KeepAlive(owner_->Hold());
  }
  if (!a.proceed_last.empty()) status_served_ = true;
  for (InterceptorBatchMethods* b : a.proceed) b->Proceed();
  for (InterceptorBatchMethods* b : a.proceed_last) b->Proceed();
  StreamAttempt* attempt = a.attempt;
  if (attempt == nullptr) return;
  uint32_t ops = static_cast<uint32_t>(a.holds) << StreamAttempt::kHoldShift;
  if (a.write != nullptr) {
    attempt->write_buffer_ = *a.write;
    ops |= StreamAttempt::kWrite;
    if (a.write_more) ops |= StreamAttempt::kWriteMore;
  }
  if (a.writes_done) ops |= StreamAttempt::kWritesDone;
  if (a.read) ops |= StreamAttempt::kRead;
  if (a.release_hold) ops |= StreamAttempt::kReleaseHold;
  if (ops == 0) return;
  // Started once the serializer is free: a write can reach the socket, and
  // the application's next request, or the server's next message, need not
  // wait for it. Each operation's hold, taken by this event, keeps the
  // stream (and so the attempt and the call) alive under it.
  serializer_->Defer([attempt, ops] { attempt->Operate(ops); });
}

void StreamAttempt::Operate(uint32_t ops) {
  if (ops & kWrite) {
    grpc::WriteOptions options;
    // More are queued: the transport may hold this one for them and send
    // them together (the last of a run goes without the hint, and flushes).
    if (ops & kWriteMore) options.set_buffer_hint();
    StartWrite(&write_buffer_, options);
  }
  if (ops & kWritesDone) StartWritesDone();
  if (ops & kRead) StartRead(&read_buffer_);
  for (uint32_t i = ops >> kHoldShift; i > 0; --i) RemoveHold();
  if (ops & kReleaseHold) RemoveHold();
}

void StreamFlow::Conclude(const FinalOutcome& outcome) {
  Actions a;
  outcome_ = &outcome;
  if (!metadata_ready_) {
    initial_metadata_ = outcome.initial_metadata;
    metadata_ready_ = true;
  }
  Deliver(a);
  // Requests never taken by an attempt fail; the rest are done.
  for (const PendingSend& s : sends_) {
    if (s.message >= 0) s.batch->FailHijackedSendMessage();
    a.proceed.push_back(s.batch);
  }
  sends_.clear();
  replay_.clear();
  ReleaseBytes(bytes_);
  Act(a);
}

int64_t StreamBytesBuffered() {
  return g_buffered.load(std::memory_order_relaxed);
}

void StreamFlow::ReleaseBytes(size_t n) {
  bytes_ -= n;
  g_buffered.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  channel_->Free(n);
}

StreamFlow::~StreamFlow() { ReleaseBytes(bytes_); }

size_t StreamFlow::buffered_bytes() const { return bytes_; }

size_t StreamFlow::peak_buffered_bytes() const { return peak_bytes_; }

}  // namespace internal
}  // namespace rpcguard
