// Copyright rpcguard authors.

#include "bench/compare/stream_calls.h"

#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace bench {

using ::rpcguard::testing::v1::StreamReply;
using ::rpcguard::testing::v1::StreamRequest;
using ::rpcguard::testing::v1::Streams;

const char* ApiName(Api api) {
  switch (api) {
    case Api::kSync:
      return "sync";
    case Api::kCallback:
      return "callback";
    case Api::kCq:
      return "cq";
  }
  return "?";
}

namespace {

Outcome Judge(const grpc::Status& status, int got) {
  Outcome o;
  o.code = status.error_code();
  o.wrong = status.ok() && got != kMessages;
  o.got = got;
  return o;
}

Outcome SyncCall(Streams::Stub& stub, Shape shape) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kStreamDeadline));
  StreamReply reply;
  if (shape == Shape::kServer) {
    StreamRequest req;
    req.set_n(kMessages);
    std::unique_ptr<grpc::ClientReader<StreamReply>> reader =
        stub.ServerStream(&ctx, req);
    int got = 0;
    while (reader->Read(&reply)) ++got;
    return Judge(reader->Finish(), got);
  }
  if (shape == Shape::kBidi) {
    std::unique_ptr<grpc::ClientReaderWriter<StreamRequest, StreamReply>>
        stream = stub.Bidi(&ctx);
    StreamRequest req;
    int written = 0;
    for (; written < kMessages; ++written) {
      req.set_n(written);
      if (!stream->Write(req)) break;
    }
    stream->WritesDone();
    int got = 0;
    while (stream->Read(&reply)) ++got;
    Outcome o = Judge(stream->Finish(), got);
    o.written = written;
    return o;
  }
  std::unique_ptr<grpc::ClientWriter<StreamRequest>> writer =
      stub.ClientStream(&ctx, &reply);
  StreamRequest req;
  int written = 0;
  for (; written < kMessages; ++written) {
    req.set_n(written);
    if (!writer->Write(req)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  Outcome o = Judge(status, status.ok() ? reply.n() : 0);
  o.written = written;
  return o;
}

// The end of a callback-stub call; the calling thread waits for it (one
// caller: no thread of gRPC's ever blocks).
class Done {
 public:
  void Set(const grpc::Status& s) {
    status_ = s;
    done_.Notify();
  }
  const grpc::Status& Wait() {
    done_.WaitForNotification();
    return status_;
  }

 private:
  grpc::Status status_;
  absl::Notification done_;
};

// A writing reactor's next request (client or bidi stream), or its
// half-close once every request is written.
template <typename Reactor>
void WriteNext(Reactor& reactor, StreamRequest& request, int& sent) {
  if (sent == kMessages) {
    reactor.StartWritesDone();
    return;
  }
  request.set_n(sent++);
  reactor.StartWrite(&request);
}

// Reads every reply of a server stream.
class ReadAll final : public grpc::ClientReadReactor<StreamReply> {
 public:
  explicit ReadAll(Streams::Stub& stub) {
    ctx_.set_deadline(absl::ToChronoTime(absl::Now() + kStreamDeadline));
    request_.set_n(kMessages);
    stub.async()->ServerStream(&ctx_, &request_, this);
    StartRead(&reply_);
    StartCall();
  }
  Outcome Wait() {
    const grpc::Status& s = done_.Wait();
    return Judge(s, got_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // the end: OnDone follows
    ++got_;
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& s) override { done_.Set(s); }

 private:
  grpc::ClientContext ctx_;
  StreamRequest request_;
  StreamReply reply_;
  int got_ = 0;
  Done done_;
};

// Writes every request of a client stream, one at a time.
class WriteAll final : public grpc::ClientWriteReactor<StreamRequest> {
 public:
  explicit WriteAll(Streams::Stub& stub) {
    ctx_.set_deadline(absl::ToChronoTime(absl::Now() + kStreamDeadline));
    stub.async()->ClientStream(&ctx_, &reply_, this);
    Next();
    StartCall();
  }
  Outcome Wait() {
    const grpc::Status& s = done_.Wait();
    return Judge(s, s.ok() ? reply_.n() : 0);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call has failed: OnDone follows
    Next();
  }
  void OnDone(const grpc::Status& s) override { done_.Set(s); }

 private:
  void Next() { WriteNext(*this, request_, sent_); }

  grpc::ClientContext ctx_;
  StreamRequest request_;
  StreamReply reply_;
  int sent_ = 0;
  Done done_;
};

// Writes every request of a bidi stream, one at a time, while reading
// every echo.
class EchoAll final
    : public grpc::ClientBidiReactor<StreamRequest, StreamReply> {
 public:
  explicit EchoAll(Streams::Stub& stub) {
    ctx_.set_deadline(absl::ToChronoTime(absl::Now() + kStreamDeadline));
    stub.async()->Bidi(&ctx_, this);
    Next();
    StartRead(&reply_);
    StartCall();
  }
  Outcome Wait() {
    const grpc::Status& s = done_.Wait();
    Outcome o = Judge(s, got_);
    o.written = sent_;
    return o;
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call has failed: OnDone follows
    Next();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // the end: OnDone follows
    ++got_;
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& s) override { done_.Set(s); }

 private:
  void Next() { WriteNext(*this, request_, sent_); }

  grpc::ClientContext ctx_;
  StreamRequest request_;
  StreamReply reply_;
  int sent_ = 0;
  int got_ = 0;
  Done done_;
};

// The CQ-async API: each operation's tag waited for on the call's own
// completion queue, one at a time.
Outcome CqCall(Streams::Stub& stub, Shape shape) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kStreamDeadline));
  // Waits for the one operation in flight; false when it failed.
  auto wait = [&cq] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  grpc::Status status;
  Outcome o;
  if (shape == Shape::kServer) {
    StreamRequest req;
    req.set_n(kMessages);
    auto reader = stub.PrepareAsyncServerStream(&ctx, req, &cq);
    reader->StartCall(nullptr);
    int got = 0;
    if (wait()) {
      StreamReply reply;
      for (;;) {
        reader->Read(&reply, nullptr);
        if (!wait()) break;
        ++got;
      }
    }
    reader->Finish(&status, nullptr);
    wait();
    o = Judge(status, got);
  } else {
    StreamReply reply;
    auto writer = stub.PrepareAsyncClientStream(&ctx, &reply, &cq);
    writer->StartCall(nullptr);
    int written = 0;
    if (wait()) {
      StreamRequest req;
      for (; written < kMessages; ++written) {
        req.set_n(written);
        writer->Write(req, nullptr);
        if (!wait()) break;
      }
      writer->WritesDone(nullptr);
      wait();
    }
    writer->Finish(&status, nullptr);
    wait();
    o = Judge(status, status.ok() ? reply.n() : 0);
    o.written = written;
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  return o;
}

}  // namespace

Outcome OneStreamCall(Streams::Stub& stub, Shape shape, Api kind) {
  if (kind == Api::kSync) return SyncCall(stub, shape);
  if (kind == Api::kCq) return CqCall(stub, shape);
  if (shape == Shape::kBidi) return EchoAll(stub).Wait();
  if (shape == Shape::kServer) return ReadAll(stub).Wait();
  return WriteAll(stub).Wait();
}

}  // namespace bench
}  // namespace rpcguard
