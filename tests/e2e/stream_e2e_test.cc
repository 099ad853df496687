// Copyright rpcguard authors.
//
// Streams retried until they commit (gRFC A6), end to end: real
// server-streaming, client-streaming and bidi calls through rpcguard to a
// real server on 127.0.0.1, with the sync, CQ-async and callback stubs. The
// server records what every attempt carried and received; the tests assert
// on that, on what the application read, and on the trace.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/streams.grpc.pb.h"
#include "rpcguard/internal/grpc/stream_flow.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::StreamReply;
using ::rpcguard::testing::v1::StreamRequest;
using ::rpcguard::testing::v1::Streams;

// The three streaming methods retried (IDEMPOTENT, 3 attempts, short
// backoff, A6's jitter of +-20% so that a long backoff stays long);
// UnsafeBidi left undeclared. `extra` goes into the top-level
// "rpcguard" object.
std::string Config(const std::string& extra = "",
                   const std::string& backoff = "0.005s") {
  return absl::StrCat(
      R"json({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.Streams", "method": "ServerStream"},
              {"service": "rpcguard.testing.v1.Streams", "method": "ClientStream"},
              {"service": "rpcguard.testing.v1.Streams", "method": "Bidi"}],
     "retryPolicy": {"maxAttempts": 3, "initialBackoff": ")json",
      backoff, R"json(",
                     "maxBackoff": ")json",
      backoff, R"json(", "backoffMultiplier": 1,
                     "retryableStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}},
    {"name": [{"service": "rpcguard.testing.v1.Streams", "method": "UnsafeBidi"}],
     "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s",
                     "maxBackoff": "0.005s", "backoffMultiplier": 1,
                     "retryableStatusCodes": ["UNAVAILABLE"]}}]
    )json",
      extra.empty() ? "" : absl::StrCat(", \"rpcguard\": {", extra, "}"), "}");
}

std::string Meta(const grpc::ServerContext* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "<none>";
  return std::string(it->second.data(), it->second.size());
}

// Fails the first `fail_before` attempts of any method with UNAVAILABLE
// before any response; with `fail_after_first`, the first attempt sends one
// response (or, for ClientStream, its headers) and then fails.
class StreamsServer final : public Streams::Service {
 public:
  struct Attempt {
    std::string method, key, attempt;
    std::vector<int> requests;
  };

  StreamsServer() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~StreamsServer() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  const std::string& address() const { return address_; }
  void FailBefore(int n) {
    absl::MutexLock lock(&mu_);
    fail_before_ = n;
  }
  void FailAfterFirst() {
    absl::MutexLock lock(&mu_);
    fail_after_first_ = true;
  }
  // After its first response, every ServerStream waits until the client
  // gives up.
  void StallAfterFirst() {
    absl::MutexLock lock(&mu_);
    stall_ = true;
  }
  // ClientStream sends its headers after the first request, then waits for
  // Release() before reading the rest.
  void HeadersAfterFirstRequest() {
    absl::MutexLock lock(&mu_);
    early_headers_ = true;
  }
  std::vector<Attempt> attempts() {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

  grpc::Status ServerStream(grpc::ServerContext* ctx, const StreamRequest* req,
                            grpc::ServerWriter<StreamReply>* writer) override {
    const Script s = Record(ctx, "ServerStream", {req->n()});
    if (s.fail) return Unavailable("before any response");
    for (int i = 0; i < req->n(); ++i) {
      StreamReply reply;
      reply.set_n(i);
      reply.set_attempt(Meta(ctx, kAttemptHeader));
      writer->Write(reply);
      if (i == 0 && s.fail_after_first) return Unavailable("after a response");
      if (i == 0 && s.stall) return Stall(ctx);
    }
    return grpc::Status::OK;
  }

  grpc::Status ClientStream(grpc::ServerContext* ctx,
                            grpc::ServerReader<StreamRequest>* reader,
                            StreamReply* reply) override {
    const Script s = Record(ctx, "ClientStream", {});
    StreamRequest req;
    int count = 0;
    while (reader->Read(&req)) {
      Received(s.index, req.n());
      if (++count == 1 && (s.early_headers || s.fail_after_first)) {
        reader->SendInitialMetadata();
        if (s.fail_after_first) return Unavailable("after its headers");
      }
    }
    if (s.fail) return Unavailable("before any response");
    reply->set_n(count);
    reply->set_attempt(Meta(ctx, kAttemptHeader));
    return grpc::Status::OK;
  }

  grpc::Status Bidi(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<StreamReply, StreamRequest>* stream) override {
    return Echo(ctx, "Bidi", stream);
  }
  grpc::Status UnsafeBidi(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<StreamReply, StreamRequest>* stream) override {
    return Echo(ctx, "UnsafeBidi", stream);
  }

 private:
  struct Script {
    int index;
    bool fail, fail_after_first, stall, early_headers;
  };

  static grpc::Status Unavailable(const std::string& when) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("injected ", when));
  }

  static grpc::Status Stall(grpc::ServerContext* ctx) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (!ctx->IsCancelled() && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
  }

  grpc::Status Echo(
      grpc::ServerContext* ctx, const std::string& method,
      grpc::ServerReaderWriter<StreamReply, StreamRequest>* stream) {
    const Script s = Record(ctx, method, {});
    StreamRequest req;
    std::vector<int> got;
    while (stream->Read(&req)) {
      Received(s.index, req.n());
      got.push_back(req.n());
    }
    if (s.fail) return Unavailable("before any response");
    for (size_t i = 0; i < got.size(); ++i) {
      StreamReply reply;
      reply.set_n(got[i]);
      reply.set_attempt(Meta(ctx, kAttemptHeader));
      stream->Write(reply);
      if (i == 0 && s.fail_after_first) return Unavailable("after a response");
    }
    return grpc::Status::OK;
  }

  Script Record(grpc::ServerContext* ctx, const std::string& method,
                std::vector<int> requests) {
    absl::MutexLock lock(&mu_);
    const int index = static_cast<int>(attempts_.size());
    attempts_.push_back(Attempt{method, Meta(ctx, kIdempotencyKeyHeader),
                                Meta(ctx, kAttemptHeader),
                                std::move(requests)});
    const bool first = index == 0;
    return Script{index, index < fail_before_, first && fail_after_first_,
                  stall_, early_headers_};
  }
  void Received(int index, int n) {
    absl::MutexLock lock(&mu_);
    attempts_[index].requests.push_back(n);
  }

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  int fail_before_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_after_first_ ABSL_GUARDED_BY(mu_) = false;
  bool stall_ ABSL_GUARDED_BY(mu_) = false;
  bool early_headers_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Attempt> attempts_ ABSL_GUARDED_BY(mu_);
};

enum class Stub { kSync, kAsync, kCallback };
enum class Shape { kServer, kClient, kBidi };

std::string Name(Stub s) {
  switch (s) {
    case Stub::kSync:
      return "sync";
    case Stub::kAsync:
      return "async";
    case Stub::kCallback:
      break;
  }
  return "callback";
}
std::string Name(Shape s) {
  switch (s) {
    case Shape::kServer:
      return "ServerStream";
    case Shape::kClient:
      return "ClientStream";
    case Shape::kBidi:
      break;
  }
  return "Bidi";
}

// What the application saw.
struct Outcome {
  grpc::Status status;
  std::vector<int> replies;
  std::string attempts_trailer = "<none>";
};

std::string AttemptsTrailer(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(kAttemptsTrailer);
  if (it == md.end()) return "<none>";
  return std::string(it->second.data(), it->second.size());
}

StreamRequest Request(int n) {
  StreamRequest r;
  r.set_n(n);
  return r;
}

// --- sync ----------------------------------------------------------------

Outcome SyncCall(Streams::Stub* stub, grpc::ClientContext* ctx, Shape shape,
                 const std::vector<int>& requests, bool unsafe) {
  Outcome o;
  StreamReply reply;
  switch (shape) {
    case Shape::kServer: {
      auto reader = stub->ServerStream(ctx, Request(requests.at(0)));
      while (reader->Read(&reply)) o.replies.push_back(reply.n());
      o.status = reader->Finish();
      break;
    }
    case Shape::kClient: {
      auto writer = stub->ClientStream(ctx, &reply);
      for (int n : requests) {
        if (!writer->Write(Request(n))) break;
      }
      writer->WritesDone();
      o.status = writer->Finish();
      if (o.status.ok()) o.replies.push_back(reply.n());
      break;
    }
    case Shape::kBidi: {
      auto stream = unsafe ? stub->UnsafeBidi(ctx) : stub->Bidi(ctx);
      for (int n : requests) {
        if (!stream->Write(Request(n))) break;
      }
      stream->WritesDone();
      while (stream->Read(&reply)) o.replies.push_back(reply.n());
      o.status = stream->Finish();
      break;
    }
  }
  o.attempts_trailer = AttemptsTrailer(*ctx);
  return o;
}

// --- CQ-async --------------------------------------------------------------

// One operation at a time: its completion.
bool Next(grpc::CompletionQueue* cq) {
  void* tag;
  bool ok = false;
  EXPECT_TRUE(cq->Next(&tag, &ok));
  return ok;
}

Outcome AsyncCall(Streams::Stub* stub, grpc::ClientContext* ctx, Shape shape,
                  const std::vector<int>& requests) {
  grpc::CompletionQueue cq;
  void* const tag = &cq;
  Outcome o;
  StreamReply reply;
  switch (shape) {
    case Shape::kServer: {
      auto reader =
          stub->AsyncServerStream(ctx, Request(requests.at(0)), &cq, tag);
      if (Next(&cq)) {
        for (;;) {
          reader->Read(&reply, tag);
          if (!Next(&cq)) break;
          o.replies.push_back(reply.n());
        }
      }
      reader->Finish(&o.status, tag);
      Next(&cq);
      break;
    }
    case Shape::kClient: {
      auto writer = stub->AsyncClientStream(ctx, &reply, &cq, tag);
      bool ok = Next(&cq);
      for (int n : requests) {
        if (!ok) break;
        writer->Write(Request(n), tag);
        ok = Next(&cq);
      }
      if (ok) {
        writer->WritesDone(tag);
        Next(&cq);
      }
      writer->Finish(&o.status, tag);
      Next(&cq);
      if (o.status.ok()) o.replies.push_back(reply.n());
      break;
    }
    case Shape::kBidi: {
      auto stream = stub->AsyncBidi(ctx, &cq, tag);
      bool ok = Next(&cq);
      for (int n : requests) {
        if (!ok) break;
        stream->Write(Request(n), tag);
        ok = Next(&cq);
      }
      if (ok) {
        stream->WritesDone(tag);
        Next(&cq);
        for (;;) {
          stream->Read(&reply, tag);
          if (!Next(&cq)) break;
          o.replies.push_back(reply.n());
        }
      }
      stream->Finish(&o.status, tag);
      Next(&cq);
      break;
    }
  }
  cq.Shutdown();
  void* ignored;
  bool ok;
  while (cq.Next(&ignored, &ok)) {
  }
  o.attempts_trailer = AttemptsTrailer(*ctx);
  return o;
}

// --- callback --------------------------------------------------------------

// The end of a callback call.
class Done {
 public:
  void Set(const grpc::Status& s) {
    status_ = s;
    done_.Notify();
  }
  grpc::Status Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return status_;
  }

 private:
  grpc::Status status_;
  absl::Notification done_;
};

class ServerReactor final : public grpc::ClientReadReactor<StreamReply> {
 public:
  explicit ServerReactor(Outcome* o) : o_(o) {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    o_->replies.push_back(reply_.n());
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& s) override { done.Set(s); }
  void Begin() {
    StartRead(&reply_);
    StartCall();
  }
  Done done;

 private:
  Outcome* const o_;
  StreamReply reply_;
};

class ClientReactor final : public grpc::ClientWriteReactor<StreamRequest> {
 public:
  explicit ClientReactor(std::vector<int> requests)
      : requests_(std::move(requests)) {}
  void Begin() {
    WriteNext();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) {
      WriteNext();
    } else {
      StartWritesDone();
    }
  }
  void OnDone(const grpc::Status& s) override { done.Set(s); }
  Done done;

 private:
  void WriteNext() {
    if (next_ == requests_.size()) {
      StartWritesDone();
      return;
    }
    request_ = Request(requests_[next_++]);
    StartWrite(&request_);
  }
  const std::vector<int> requests_;
  size_t next_ = 0;
  StreamRequest request_;
};

class BidiReactor final
    : public grpc::ClientBidiReactor<StreamRequest, StreamReply> {
 public:
  BidiReactor(std::vector<int> requests, Outcome* o)
      : requests_(std::move(requests)), o_(o) {}
  void Begin() {
    StartRead(&reply_);
    WriteNext();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) {
      WriteNext();
    } else {
      StartWritesDone();
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    o_->replies.push_back(reply_.n());
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& s) override { done.Set(s); }
  Done done;

 private:
  void WriteNext() {
    if (next_ == requests_.size()) {
      StartWritesDone();
      return;
    }
    request_ = Request(requests_[next_++]);
    StartWrite(&request_);
  }
  const std::vector<int> requests_;
  Outcome* const o_;
  size_t next_ = 0;
  StreamRequest request_;
  StreamReply reply_;
};

Outcome CallbackCall(Streams::Stub* stub, grpc::ClientContext* ctx, Shape shape,
                     const std::vector<int>& requests) {
  Outcome o;
  switch (shape) {
    case Shape::kServer: {
      StreamRequest req = Request(requests.at(0));
      ServerReactor r(&o);
      stub->async()->ServerStream(ctx, &req, &r);
      r.Begin();
      o.status = r.done.Wait();
      break;
    }
    case Shape::kClient: {
      StreamReply reply;
      ClientReactor r(requests);
      stub->async()->ClientStream(ctx, &reply, &r);
      r.Begin();
      o.status = r.done.Wait();
      if (o.status.ok()) o.replies.push_back(reply.n());
      break;
    }
    case Shape::kBidi: {
      BidiReactor r(requests, &o);
      stub->async()->Bidi(ctx, &r);
      r.Begin();
      o.status = r.done.Wait();
      break;
    }
  }
  o.attempts_trailer = AttemptsTrailer(*ctx);
  return o;
}

Outcome Call(Stub stub_kind, Streams::Stub* stub, grpc::ClientContext* ctx,
             Shape shape, const std::vector<int>& requests) {
  switch (stub_kind) {
    case Stub::kSync:
      return SyncCall(stub, ctx, shape, requests, /*unsafe=*/false);
    case Stub::kAsync:
      return AsyncCall(stub, ctx, shape, requests);
    case Stub::kCallback:
      break;
  }
  return CallbackCall(stub, ctx, shape, requests);
}

// What each shape's server answers for `requests`.
std::vector<int> Expected(Shape shape, const std::vector<int>& requests) {
  switch (shape) {
    case Shape::kServer: {
      std::vector<int> v;
      for (int i = 0; i < requests.at(0); ++i) v.push_back(i);
      return v;
    }
    case Shape::kClient:
      return {static_cast<int>(requests.size())};
    case Shape::kBidi:
      break;
  }
  return requests;
}

class StreamE2ETest : public ::testing::Test {
 protected:
  void Connect(const std::string& json) {
    channel_ = *CreateGuardedChannel(server_.address(), json, [&](Options& o) {
      o.breaker_registry = registry_;
      o.trace_verbosity = TraceVerbosity::kAll;
      o.trace_sink =
          std::make_shared<CallbackSink>([this](const TraceEvent& e) {
            absl::MutexLock lock(&mu_);
            events_.push_back(e);
          });
    });
    stub_ = Streams::NewStub(channel_);
  }
  // The terminal trace event of the test's one call.
  TraceEvent Terminal() {
    absl::MutexLock lock(&mu_);
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->kind != TraceEvent::Kind::kBreakerTransition &&
          it->decision != TraceDecision::kRetry) {
        return *it;
      }
    }
    ADD_FAILURE() << "no terminal trace event";
    return {};
  }

  StreamsServer server_;
  std::shared_ptr<BreakerRegistry> registry_ = *BreakerRegistry::Create({});
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Streams::Stub> stub_;
  absl::Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
};

const std::vector<int> kRequests = {3, 1, 4, 1, 5};

// Every shape and stub: an attempt that fails before its first response is
// retried; the retry replays every request, in order, with the same key.
TEST_F(StreamE2ETest, FailsBeforeTheFirstResponseThenSucceeds) {
  for (Shape shape : {Shape::kServer, Shape::kClient, Shape::kBidi}) {
    for (Stub kind : {Stub::kSync, Stub::kAsync, Stub::kCallback}) {
      SCOPED_TRACE(absl::StrCat(Name(shape), " ", Name(kind)));
      StreamsServer server;
      server.FailBefore(1);
      auto channel = *CreateGuardedChannel(
          server.address(), Config(),
          [&](Options& o) { o.breaker_registry = registry_; });
      auto stub = Streams::NewStub(channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
      const Outcome o = Call(kind, stub.get(), &ctx, shape, kRequests);
      ASSERT_TRUE(o.status.ok()) << o.status.error_message();
      EXPECT_EQ(o.replies, Expected(shape, kRequests));
      EXPECT_EQ(o.attempts_trailer, "2");
      const auto attempts = server.attempts();
      ASSERT_EQ(attempts.size(), 2u);
      EXPECT_EQ(attempts[0].method, Name(shape));
      EXPECT_EQ(attempts[0].attempt, "1");
      EXPECT_EQ(attempts[1].attempt, "2");
      EXPECT_NE(attempts[0].key, "<none>");
      EXPECT_EQ(attempts[0].key, attempts[1].key);
      // The retry was sent every request again, in order.
      const std::vector<int> sent =
          shape == Shape::kServer ? std::vector<int>{kRequests[0]} : kRequests;
      EXPECT_EQ(attempts[1].requests, sent);
    }
  }
}

// A failure after a response reaches the application as it is: the call
// had committed.
TEST_F(StreamE2ETest, FailsAfterTheFirstResponseIsNotRetried) {
  for (Shape shape : {Shape::kServer, Shape::kClient, Shape::kBidi}) {
    for (Stub kind : {Stub::kSync, Stub::kAsync, Stub::kCallback}) {
      SCOPED_TRACE(absl::StrCat(Name(shape), " ", Name(kind)));
      StreamsServer server;
      server.FailAfterFirst();
      std::vector<TraceEvent> events;
      absl::Mutex mu;
      auto channel =
          *CreateGuardedChannel(server.address(), Config(), [&](Options& o) {
            o.breaker_registry = registry_;
            o.trace_verbosity = TraceVerbosity::kAll;
            o.trace_sink =
                std::make_shared<CallbackSink>([&](const TraceEvent& e) {
                  absl::MutexLock lock(&mu);
                  events.push_back(e);
                });
          });
      auto stub = Streams::NewStub(channel);
      grpc::ClientContext ctx;
      const Outcome o = Call(kind, stub.get(), &ctx, shape, kRequests);
      EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_EQ(server.attempts().size(), 1u);
      // ClientStream's server sent its headers, the others a response.
      if (shape != Shape::kClient) {
        EXPECT_EQ(o.replies, std::vector<int>{Expected(shape, kRequests)[0]});
      }
      absl::MutexLock lock(&mu);
      ASSERT_FALSE(events.empty());
      const TraceEvent& last = events.back();
      EXPECT_EQ(last.reason, GiveUpReason::kCommitted);
      // A server's first response comes after its headers: the headers
      // commit the call, unless gRPC runs the read's reaction first.
      ASSERT_TRUE(last.commit.has_value());
      if (shape == Shape::kClient) {
        EXPECT_EQ(CommitReasonName(*last.commit), "headers");
      } else {
        EXPECT_TRUE(*last.commit == CommitReason::kHeaders ||
                    *last.commit == CommitReason::kMessage)
            << CommitReasonName(*last.commit);
      }
      EXPECT_EQ(last.attempt, 1);
    }
  }
}

// Requests beyond the replay buffer commit the call: its failure is final.
TEST_F(StreamE2ETest, RequestsOverTheBufferLimitCommit) {
  server_.FailBefore(1);
  // Each request is a few bytes: 6 bytes hold one or two.
  Connect(Config("\"streamBufferBytes\": 6"));
  for (Stub kind : {Stub::kSync, Stub::kCallback}) {
    SCOPED_TRACE(Name(kind));
    grpc::ClientContext ctx;
    const Outcome o = Call(kind, stub_.get(), &ctx, Shape::kClient, kRequests);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(Terminal().commit, CommitReason::kBufferLimit);
    EXPECT_EQ(Terminal().reason, GiveUpReason::kCommitted);
    server_.FailBefore(static_cast<int>(server_.attempts().size()) + 1);
  }
  EXPECT_EQ(server_.attempts().size(), 2u);  // one each: never retried
}

// Under the limit, the same call is retried.
TEST_F(StreamE2ETest, RequestsUnderTheBufferLimitAreReplayed) {
  server_.FailBefore(1);
  Connect(Config("\"streamBufferBytes\": 1000"));
  grpc::ClientContext ctx;
  const Outcome o =
      Call(Stub::kSync, stub_.get(), &ctx, Shape::kClient, kRequests);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(server_.attempts().size(), 2u);
}

// The streams of one channel share channelStreamBufferBytes: a call whose
// request takes the channel's total past it commits, though its own
// buffer has room, and is not retried; the call that fit still is.
TEST_F(StreamE2ETest, TheChannelsStreamsShareOneReplayBuffer) {
  server_.FailBefore(2);  // each call's first attempt
  StreamRequest req;
  req.set_n(1);
  req.set_payload(std::string(20, 'x'));
  const size_t size = req.ByteSizeLong();
  // Room for one call's request, not two.
  Connect(
      Config(absl::StrCat("\"channelStreamBufferBytes\": ", size + size / 2)));
  grpc::ClientContext ctx_a;
  StreamReply reply_a;
  auto a = stub_->ClientStream(&ctx_a, &reply_a);
  ASSERT_TRUE(a->Write(req));
  grpc::ClientContext ctx_b;
  StreamReply reply_b;
  auto b = stub_->ClientStream(&ctx_b, &reply_b);
  ASSERT_TRUE(b->Write(req));
  b->WritesDone();
  const grpc::Status status_b = b->Finish();
  EXPECT_EQ(status_b.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status_b.error_message();
  EXPECT_EQ(Terminal().commit, CommitReason::kChannelBufferLimit);
  EXPECT_EQ(Terminal().reason, GiveUpReason::kCommitted);
  a->WritesDone();
  const grpc::Status status_a = a->Finish();
  ASSERT_TRUE(status_a.ok()) << status_a.error_message();
  EXPECT_EQ(reply_a.n(), 1);
  EXPECT_EQ(server_.attempts().size(), 3u);  // a twice, b once
}

// A stream whose requests were buffered holds none once it has committed,
// but the requests its attempt has taken and not yet written: at most the
// write window (StreamFlow::kAheadBytes, or one request larger than it).
TEST_F(StreamE2ETest, CommitFreesTheBufferedRequests) {
  server_.HeadersAfterFirstRequest();
  Connect(Config());
  const int64_t before = internal::StreamBytesBuffered();
  grpc::ClientContext ctx;
  StreamReply reply;
  auto writer = stub_->ClientStream(&ctx, &reply);
  StreamRequest big;
  big.set_n(1);
  big.set_payload(std::string(10000, 'x'));
  ASSERT_TRUE(writer->Write(big));
  // Buffered for a replay until the server's headers commit the call.
  writer->WaitForInitialMetadata();
  EXPECT_EQ(internal::StreamBytesBuffered(), before);
  constexpr int kMore = 20;
  for (int i = 0; i < kMore; ++i) {
    ASSERT_TRUE(writer->Write(big));
    // Not kept for a replay: only what the attempt has yet to write.
    EXPECT_LE(internal::StreamBytesBuffered() - before,
              static_cast<int64_t>(internal::StreamFlow::kAheadBytes +
                                   big.ByteSizeLong()))
        << i;
  }
  // WritesDone completes once every request is written: none is left.
  writer->WritesDone();
  EXPECT_EQ(internal::StreamBytesBuffered(), before);
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(reply.n(), kMore + 1);
  EXPECT_EQ(Terminal().commit, CommitReason::kHeaders);
}

// Before the commit the requests are buffered: the gauge sees them.
TEST_F(StreamE2ETest, RequestsAreBufferedBeforeTheCommit) {
  server_.FailBefore(100);  // never answers: every attempt fails
  Connect(Config("", "0.2s"));
  const int64_t before = internal::StreamBytesBuffered();
  grpc::ClientContext ctx;
  StreamReply reply;
  auto writer = stub_->ClientStream(&ctx, &reply);
  StreamRequest big;
  big.set_payload(std::string(10000, 'x'));
  ASSERT_TRUE(writer->Write(big));
  EXPECT_GE(internal::StreamBytesBuffered() - before, 10000);
  ctx.TryCancel();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(internal::StreamBytesBuffered(), before);
}

// A stream whose next attempt would not fit in its deadline gives up at
// once, with the last failure, as a unary call does (a deadline that comes
// mid-stream: DeadlineAndCancelMidStream). At once: before the deadline
// (300 ms) on a quiet machine, or as soon as the control, a plain channel's
// stream that the server fails the same way, started in the same moment
// (tests/testing/deadline_control.h).
TEST_F(StreamE2ETest, DeadlineAndTheBackoff) {
  server_.FailBefore(100);
  Connect(Config("", "5s"));
  auto plain = Streams::NewStub(grpc::CreateChannel(
      server_.address(), grpc::InsecureChannelCredentials()));
  for (Stub kind : {Stub::kSync, Stub::kAsync, Stub::kCallback}) {
    SCOPED_TRACE(Name(kind));
    ExpectWithinControl(
        absl::StrCat(Name(kind), ", time to give up"), absl::Milliseconds(300),
        [&] {
          const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
          absl::Duration control_took;
          std::thread control([&] {
            grpc::ClientContext ctx;
            ctx.set_deadline(absl::ToChronoTime(deadline));
            const absl::Time start = absl::Now();
            const Outcome o =
                Call(kind, plain.get(), &ctx, Shape::kBidi, kRequests);
            control_took = absl::Now() - start;
            EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE)
                << o.status.error_message();
          });
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(deadline));
          const absl::Time start = absl::Now();
          const Outcome o =
              Call(kind, stub_.get(), &ctx, Shape::kBidi, kRequests);
          const absl::Duration took = absl::Now() - start;
          control.join();
          EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE)
              << o.status.error_message();
          EXPECT_EQ(Terminal().reason, GiveUpReason::kDeadline);
          return Timing{took, control_took};
        });
  }
}

// A caller's cancel ends a stream that waits for its next attempt.
TEST_F(StreamE2ETest, CancelDuringTheBackoff) {
  server_.FailBefore(100);
  Connect(Config("", "5s"));
  grpc::ClientContext ctx;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ctx.TryCancel();
  });
  const absl::Time start = absl::Now();
  const Outcome o = Call(Stub::kSync, stub_.get(), &ctx, Shape::kServer, {3});
  canceller.join();
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(server_.attempts().size(), 1u);
}

// After the commit, the deadline and a cancel end the stream as on a plain
// channel.
TEST_F(StreamE2ETest, DeadlineAndCancelMidStream) {
  server_.StallAfterFirst();
  Connect(Config());
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
    const Outcome o =
        Call(Stub::kCallback, stub_.get(), &ctx, Shape::kServer, {3});
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(o.replies, std::vector<int>{0});
  }
  {
    grpc::ClientContext ctx;
    auto reader = stub_->ServerStream(&ctx, Request(3));
    StreamReply reply;
    ASSERT_TRUE(reader->Read(&reply));
    ctx.TryCancel();
    EXPECT_FALSE(reader->Read(&reply));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The first attempt of each: neither was retried.
  EXPECT_EQ(server_.attempts().size(), 2u);
}

// An open breaker fails a stream fast, before anything is sent.
TEST_F(StreamE2ETest, OpenBreakerFailsFast) {
  Connect(Config());
  registry_->Get(server_.address())->ForceOpen();
  grpc::ClientContext ctx;
  const Outcome o =
      Call(Stub::kSync, stub_.get(), &ctx, Shape::kBidi, kRequests);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(server_.attempts().empty());
  EXPECT_EQ(Terminal().reason, GiveUpReason::kBreakerOpen);
}

// A stream not safe to repeat is sent once, with rpcguard's metadata.
TEST_F(StreamE2ETest, NonIdempotentStreamIsSentOnce) {
  server_.FailBefore(1);
  Connect(Config());
  grpc::ClientContext ctx;
  const Outcome o = SyncCall(stub_.get(), &ctx, Shape::kBidi, kRequests,
                             /*unsafe=*/true);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const auto attempts = server_.attempts();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].attempt, "1");
  EXPECT_NE(attempts[0].key, "<none>");
  EXPECT_EQ(attempts[0].requests, kRequests);
  EXPECT_EQ(Terminal().reason, GiveUpReason::kNotIdempotent);
}

// A caller's own idempotency key makes an undeclared stream retriable.
TEST_F(StreamE2ETest, CallerKeyMakesAStreamRetriable) {
  server_.FailBefore(1);
  Connect(Config());
  grpc::ClientContext ctx;
  ctx.AddMetadata(kIdempotencyKeyHeader, "order-7");
  const Outcome o = SyncCall(stub_.get(), &ctx, Shape::kBidi, kRequests,
                             /*unsafe=*/true);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  const auto attempts = server_.attempts();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].key, "order-7");
  EXPECT_EQ(attempts[1].key, "order-7");
  EXPECT_EQ(attempts[1].requests, kRequests);
}

// The attempts run out: the last failure, annotated, as for a unary call.
TEST_F(StreamE2ETest, AttemptsRunOut) {
  server_.FailBefore(100);
  Connect(Config());
  grpc::ClientContext ctx;
  const Outcome o = Call(Stub::kAsync, stub_.get(), &ctx, Shape::kServer, {2});
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.attempts().size(), 3u);
  EXPECT_EQ(o.attempts_trailer, "3");
  EXPECT_EQ(Terminal().reason, GiveUpReason::kMaxAttempts);
}

// Stats count a stream's commit and the give-up it caused.
TEST_F(StreamE2ETest, StatsCountCommits) {
  server_.FailAfterFirst();
  auto stats = std::make_shared<Stats>();
  channel_ =
      *CreateGuardedChannel(server_.address(), Config(), [&](Options& o) {
        o.breaker_registry = registry_;
        o.stats = stats;
      });
  stub_ = Streams::NewStub(channel_);
  grpc::ClientContext ctx;
  const Outcome o = Call(Stub::kSync, stub_.get(), &ctx, Shape::kServer, {3});
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const StatsSnapshot snapshot = stats->Snapshot();
  const MethodStatsSnapshot* m =
      snapshot.FindMethod("/rpcguard.testing.v1.Streams/ServerStream");
  ASSERT_NE(m, nullptr);
  uint64_t commits = 0;
  for (const auto& [reason, n] : m->commits) commits += n;
  EXPECT_EQ(commits, 1u);
  ASSERT_EQ(m->give_ups.count(GiveUpReason::kCommitted), 1u);
  EXPECT_EQ(m->give_ups.at(GiveUpReason::kCommitted), 1u);
  EXPECT_TRUE(absl::StrContains(ToPrometheusText(snapshot),
                                "rpcguard_stream_commits_total{"));
}

// A policy for one call (SetCallPolicy) applies to streams too.
TEST_F(StreamE2ETest, ACallPolicyOfOneAttemptIsNotRetried) {
  server_.FailBefore(1);
  Connect(Config());
  for (Stub kind : {Stub::kSync, Stub::kAsync, Stub::kCallback}) {
    SCOPED_TRACE(Name(kind));
    server_.FailBefore(static_cast<int>(server_.attempts().size()) + 1);
    const size_t before = server_.attempts().size();
    grpc::ClientContext ctx;
    CallPolicy call;
    call.max_attempts = 1;
    ASSERT_TRUE(SetCallPolicy(&ctx, call).ok());
    const Outcome o = Call(kind, stub_.get(), &ctx, Shape::kBidi, kRequests);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(server_.attempts().size(), before + 1);
  }
}

TEST_F(StreamE2ETest, ACallPolicyCannotHedgeAStream) {
  Connect(Config());
  grpc::ClientContext ctx;
  CallPolicy call;
  call.hedging = true;
  (void)SetCallPolicy(&ctx, call);  // refused when the call starts
  const Outcome o = Call(Stub::kSync, stub_.get(), &ctx, Shape::kServer, {2});
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(o.status.error_message(), "CallPolicy.hedging"))
      << o.status.error_message();
  EXPECT_TRUE(server_.attempts().empty());
}

TEST_F(StreamE2ETest, ACallPolicyCannotMakeAnUndeclaredStreamRetriable) {
  server_.FailBefore(1);
  Connect(Config());
  grpc::ClientContext ctx;
  CallPolicy call;
  call.max_attempts = 5;
  ASSERT_TRUE(SetCallPolicy(&ctx, call).ok());
  const Outcome o = SyncCall(stub_.get(), &ctx, Shape::kBidi, kRequests,
                             /*unsafe=*/true);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.attempts().size(), 1u);
}

}  // namespace
}  // namespace rpcguard
