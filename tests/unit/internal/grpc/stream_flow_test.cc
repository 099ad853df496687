// Copyright rpcguard authors.
//
// StreamFlow, a hijacked stream's data plane, without a server: each
// attempt's stream is a fake (a grpc::ClientCallbackReaderWriter bound to
// the attempt's reactor) whose operations the test completes, and the
// application's batches are fakes too. The flow's events run on a
// serializer of the test's, as on the call's; what the engine would ask
// (Send, Cancel, Conclude) runs inside an event, as from the engine's.

#include "rpcguard/internal/grpc/stream_flow.h"

#include <google/protobuf/wrappers.pb.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rpcguard/channel.h"
#include "rpcguard/internal/engine/serializer.h"
#include "rpcguard/internal/grpc/attempt_transport.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/internal/grpc/final_outcome.h"

namespace rpcguard {
namespace internal {
namespace {

// ClientContext::initial_metadata_received_, reached by name as
// grpc_1_51/context.h reaches private members (explicit instantiation):
// GetServerInitialMetadata() asserts it, and a fake stream's headers
// arrive without gRPC setting it.
bool grpc::ClientContext::*HeadersReceived();
template <bool grpc::ClientContext::*Member>
struct HeadersReceivedAccess {
  friend bool grpc::ClientContext::*HeadersReceived() { return Member; }
};
template struct HeadersReceivedAccess<
    &grpc::ClientContext::initial_metadata_received_>;

using grpc::experimental::InterceptionHookPoints;

grpc::ByteBuffer Bytes(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Text(const grpc::ByteBuffer& buffer) {
  grpc::Slice slice;
  EXPECT_TRUE(buffer.TrySingleSlice(&slice).ok() ||
              buffer.DumpToSingleSlice(&slice).ok());
  return std::string(reinterpret_cast<const char*>(slice.begin()),
                     slice.size());
}

// A response as the server would send it: a serialized StringValue.
grpc::ByteBuffer Response(const std::string& value) {
  google::protobuf::StringValue message;
  message.set_value(value);
  return Bytes(message.SerializeAsString());
}

// One attempt's stream: records what the flow asks, and lets the test
// complete it as gRPC would. Its operations are started once the call's
// serializer is free (Serializer::Defer), never inside an event.
class FakeStream final
    : public grpc::ClientCallbackReaderWriter<grpc::ByteBuffer,
                                              grpc::ByteBuffer> {
 public:
  FakeStream(StreamAttempt* reactor, const Serializer* serializer)
      : reactor_(reactor), serializer_(serializer) {
    BindReactor(reactor);
  }

  void StartCall() override { started = true; }
  void Write(const grpc::ByteBuffer* request, grpc::WriteOptions) override {
    EXPECT_FALSE(serializer_->running()) << "a write inside an event";
    EXPECT_FALSE(write_in_flight) << "one write at a time";
    write_in_flight = true;
    writes.push_back(Text(*request));
  }
  void WritesDone() override {
    EXPECT_FALSE(serializer_->running()) << "a half-close inside an event";
    writes_done = true;
  }
  void Read(grpc::ByteBuffer* response) override {
    EXPECT_FALSE(serializer_->running()) << "a read inside an event";
    read_into = response;
  }
  void AddHold(int holds) override { this->holds += holds; }
  void RemoveHold() override { --holds; }

  // gRPC's side.
  void CompleteWrite(bool ok = true) {
    ASSERT_TRUE(write_in_flight);
    write_in_flight = false;
    reactor_->OnWriteDone(ok);
  }
  void CompleteWritesDone() { reactor_->OnWritesDoneDone(true); }
  void Headers() { reactor_->OnReadInitialMetadataDone(true); }
  void Respond(const std::string& value) {
    ASSERT_NE(read_into, nullptr) << "no read in flight";
    grpc::ByteBuffer* into = read_into;
    read_into = nullptr;
    *into = Response(value);
    reactor_->OnReadDone(true);
  }
  void Finish(const grpc::Status& status) { reactor_->OnDone(status); }

  bool started = false;
  bool write_in_flight = false;
  bool writes_done = false;
  int holds = 0;
  grpc::ByteBuffer* read_into = nullptr;
  std::vector<std::string> writes;

 private:
  StreamAttempt* const reactor_;
  const Serializer* const serializer_;
};

// An application batch: the hooks it has, and what the flow did with it.
class FakeBatch final : public grpc::experimental::InterceptorBatchMethods {
 public:
  static FakeBatch Write(const std::string& request) {
    FakeBatch b;
    b.hooks = {InterceptionHookPoints::PRE_SEND_MESSAGE};
    b.send = Bytes(request);
    return b;
  }
  static FakeBatch Read() {
    FakeBatch b;
    b.hooks = {InterceptionHookPoints::PRE_RECV_MESSAGE};
    return b;
  }
  static FakeBatch Finish() {
    FakeBatch b;
    b.hooks = {InterceptionHookPoints::PRE_RECV_STATUS};
    return b;
  }

  bool QueryInterceptionHookPoint(InterceptionHookPoints type) override {
    for (InterceptionHookPoints h : hooks) {
      if (h == type) return true;
    }
    return false;
  }
  void Proceed() override {
    ++proceeded;
    if (on_proceed) on_proceed();
  }
  void Hijack() override {}
  grpc::ByteBuffer* GetSerializedSendMessage() override { return &send; }
  const void* GetSendMessage() override { return nullptr; }
  void ModifySendMessage(const void*) override {}
  bool GetSendMessageStatus() override { return true; }
  std::multimap<std::string, std::string>* GetSendInitialMetadata() override {
    return &send_metadata;
  }
  grpc::Status GetSendStatus() override { return grpc::Status::OK; }
  void ModifySendStatus(const grpc::Status&) override {}
  std::multimap<std::string, std::string>* GetSendTrailingMetadata() override {
    return &send_metadata;
  }
  void* GetRecvMessage() override { return &message; }
  std::multimap<grpc::string_ref, grpc::string_ref>* GetRecvInitialMetadata()
      override {
    return &recv_initial;
  }
  grpc::Status* GetRecvStatus() override { return &status; }
  std::multimap<grpc::string_ref, grpc::string_ref>* GetRecvTrailingMetadata()
      override {
    return &recv_trailing;
  }
  std::unique_ptr<grpc::ChannelInterface> GetInterceptedChannel() override {
    return nullptr;
  }
  void FailHijackedRecvMessage() override { recv_failed = true; }
  void FailHijackedSendMessage() override { send_failed = true; }

  std::vector<InterceptionHookPoints> hooks;
  // Runs as the flow proceeds the batch: what the application would do then.
  std::function<void()> on_proceed;
  grpc::ByteBuffer send;
  std::multimap<std::string, std::string> send_metadata;
  google::protobuf::StringValue message;
  std::multimap<grpc::string_ref, grpc::string_ref> recv_initial;
  std::multimap<grpc::string_ref, grpc::string_ref> recv_trailing;
  grpc::Status status;
  int proceeded = 0;
  bool recv_failed = false;
  bool send_failed = false;
};

class StreamFlowTest : public ::testing::Test, public TransportOwner {
 protected:
  void Make(size_t buffer_limit = 1 << 20, uint64_t channel_limit = 1 << 30) {
    channel_bytes_ = std::make_unique<ChannelStreamBytes>(channel_limit);
    flow_ = std::make_unique<StreamFlow>(
        this, &serializer_, "/rpcguard.test.Streams/Bidi",
        grpc::internal::RpcMethod::BIDI_STREAMING, buffer_limit,
        channel_bytes_.get());
    flow_->SetStreamStarterForTest([this](grpc::ChannelInterface*,
                                          const grpc::internal::RpcMethod&,
                                          grpc::ClientContext* context,
                                          StreamAttempt* attempt) {
      // The fake's headers, when they come, are none.
      context->*HeadersReceived() = true;
      streams_.push_back(std::make_unique<FakeStream>(attempt, &serializer_));
    });
    FakeBatch first;  // the call's first batch: no message yet
    flow_->TakeFirstBatch(&first);
  }

  // A new attempt, sent as the engine would (from its event).
  FakeStream& SendAttempt() {
    std::shared_ptr<EngineAttempt> attempt = flow_->NewAttempt();
    attempts_.push_back(attempt);
    serializer_.Run([&] { flow_->Send(attempt, nullptr); });
    EXPECT_TRUE(streams_.back()->started);
    return *streams_.back();
  }

  void Serve(FakeBatch& batch) { flow_->Serve(&batch); }
  // Serves n application writes, "m0" onwards, in order. The flow keeps
  // pointers to the batches: returning the vector moves its buffer, never
  // the batches.
  std::vector<FakeBatch> ServeWrites(int n) {
    std::vector<FakeBatch> writes;
    writes.reserve(n);
    for (int i = 0; i < n; ++i) {
      writes.push_back(FakeBatch::Write("m" + std::to_string(i)));
      Serve(writes.back());
    }
    return writes;
  }

  void Conclude(const grpc::Status& status) {
    outcome_.status = status;
    outcome_.attempts_text = "1";
    serializer_.Run([&] { flow_->Conclude(outcome_); });
  }

  // TransportOwner.
  void OnAttemptEnded(EngineAttempt* attempt, grpc::Status status) override {
    ended_.push_back(status.error_code());
  }
  // Every commit the flow makes is kept; the first is the fact it reads.
  void Commit(CommitReason reason) override { commits_.push_back(reason); }
  std::optional<CommitReason> commit() const override {
    if (commits_.empty()) return std::nullopt;
    return commits_.front();
  }
  std::shared_ptr<void> Hold() override { return hold_; }

  Serializer serializer_;
  std::unique_ptr<ChannelStreamBytes> channel_bytes_;
  std::unique_ptr<StreamFlow> flow_;
  std::vector<std::unique_ptr<FakeStream>> streams_;
  std::vector<std::shared_ptr<EngineAttempt>> attempts_;
  std::vector<grpc::StatusCode> ended_;
  std::vector<CommitReason> commits_;
  FinalOutcome outcome_;
  std::shared_ptr<void> hold_ = std::make_shared<int>(0);
};

TEST_F(StreamFlowTest, WritesWithinTheWindowProceedAtOnceAndTheNextWaits) {
  Make();
  FakeStream& stream = SendAttempt();
  std::vector<FakeBatch> writes = ServeWrites(StreamFlow::kWriteAhead + 1);
  // The window: kWriteAhead requests ahead of what the stream has written.
  for (int i = 0; i < StreamFlow::kWriteAhead; ++i) {
    EXPECT_EQ(writes[i].proceeded, 1) << i;
  }
  FakeBatch& held = writes.back();
  EXPECT_EQ(held.proceeded, 0);
  // One write at a time on the stream, in order.
  ASSERT_EQ(stream.writes.size(), 1u);
  EXPECT_EQ(stream.writes[0], "m0");
  // A waiting writer resumes at half the window: once fewer than
  // kWriteAhead / 2 requests are ahead of what the stream has written.
  int completed = 0;
  while (held.proceeded == 0 && completed <= StreamFlow::kWriteAhead) {
    stream.CompleteWrite();
    ++completed;
  }
  EXPECT_EQ(completed, StreamFlow::kWriteAhead / 2 + 1);
  for (int i = 0; i < completed + 1; ++i) {
    EXPECT_EQ(stream.writes[i], "m" + std::to_string(i));
  }
}

TEST_F(StreamFlowTest, ARetryReplaysEveryRequestInOrder) {
  Make();
  FakeStream& first = SendAttempt();
  FakeBatch a = FakeBatch::Write("a"), b = FakeBatch::Write("b");
  Serve(a);
  Serve(b);
  first.CompleteWrite();
  first.CompleteWrite();
  // Not committed (no headers, no response): the end goes to the engine,
  // and the requests stay for the next attempt.
  first.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "reset"));
  ASSERT_EQ(ended_.size(), 1u);
  EXPECT_EQ(ended_[0], grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(commits_.empty());
  EXPECT_GT(flow_->buffered_bytes(), 0u);
  FakeStream& second = SendAttempt();
  second.CompleteWrite();
  EXPECT_EQ(second.writes, (std::vector<std::string>{"a", "b"}));
}

TEST_F(StreamFlowTest, HeadersCommitAndFreeWhatWasWritten) {
  Make();
  FakeStream& stream = SendAttempt();
  FakeBatch a = FakeBatch::Write("a");
  Serve(a);
  stream.CompleteWrite();
  EXPECT_EQ(flow_->buffered_bytes(), 1u);
  stream.Headers();
  EXPECT_EQ(commits_, (std::vector<CommitReason>{CommitReason::kHeaders}));
  // Committed: a written request is never replayed, so it is not kept.
  EXPECT_EQ(flow_->buffered_bytes(), 0u);
  EXPECT_EQ(channel_bytes_->held(), 0u);
  // Decided once: the flow reads the owner's fact, so a response after the
  // headers commits nothing more.
  FakeBatch read = FakeBatch::Read();
  Serve(read);
  stream.Respond("r");
  EXPECT_EQ(read.proceeded, 1);
  EXPECT_EQ(commits_, (std::vector<CommitReason>{CommitReason::kHeaders}));
}

TEST_F(StreamFlowTest, AResponseCommitsAndReachesTheApplicationOnce) {
  Make();
  FakeStream& stream = SendAttempt();
  FakeBatch read = FakeBatch::Read();
  Serve(read);
  EXPECT_EQ(read.proceeded, 0);
  stream.Respond("hello");
  EXPECT_EQ(commits_, (std::vector<CommitReason>{CommitReason::kMessage}));
  EXPECT_EQ(read.proceeded, 1);
  EXPECT_EQ(read.message.value(), "hello");
  EXPECT_FALSE(read.recv_failed);
  // The next response waits, read ahead, for the application's next read.
  stream.Respond("again");
  FakeBatch next = FakeBatch::Read();
  Serve(next);
  EXPECT_EQ(next.proceeded, 1);
  EXPECT_EQ(next.message.value(), "again");
  EXPECT_EQ(read.message.value(), "hello");
}

TEST_F(StreamFlowTest, RequestsPastTheCallsBufferCommit) {
  Make(/*buffer_limit=*/4);
  SendAttempt();
  FakeBatch a = FakeBatch::Write("abc"), b = FakeBatch::Write("de");
  Serve(a);
  EXPECT_TRUE(commits_.empty());
  Serve(b);  // 5 bytes: more than a replay may hold
  EXPECT_EQ(commits_, (std::vector<CommitReason>{CommitReason::kBufferLimit}));
}

TEST_F(StreamFlowTest, RequestsPastTheChannelsCapCommit) {
  Make(/*buffer_limit=*/1 << 20, /*channel_limit=*/4);
  SendAttempt();
  FakeBatch a = FakeBatch::Write("abcde");
  Serve(a);
  EXPECT_EQ(commits_,
            (std::vector<CommitReason>{CommitReason::kChannelBufferLimit}));
}

TEST_F(StreamFlowTest, ABufferOutgrownWithNoAttemptCommitsTheNext) {
  Make(/*buffer_limit=*/2);
  FakeBatch a = FakeBatch::Write("abc");
  Serve(a);
  EXPECT_TRUE(commits_.empty());  // nothing to commit to yet
  SendAttempt();
  EXPECT_EQ(commits_, (std::vector<CommitReason>{CommitReason::kBufferLimit}));
}

TEST_F(StreamFlowTest, ACancelLetsTheStreamFinish) {
  Make();
  FakeStream& stream = SendAttempt();
  const int before = stream.holds;
  EXPECT_GE(before, 1);  // the base hold, for the application's next write
  serializer_.Run([&] { flow_->Cancel(attempts_.back()->context); });
  EXPECT_EQ(stream.holds, before - 1);
  // Twice is once.
  serializer_.Run([&] { flow_->Cancel(attempts_.back()->context); });
  EXPECT_EQ(stream.holds, before - 1);
}

TEST_F(StreamFlowTest, TheEndServesTheStatusAndFailsWhatWasNeverTaken) {
  Make();
  FakeStream& stream = SendAttempt();
  std::vector<FakeBatch> writes = ServeWrites(StreamFlow::kWriteAhead + 1);
  FakeBatch read = FakeBatch::Read();
  FakeBatch finish = FakeBatch::Finish();
  Serve(read);
  Serve(finish);
  EXPECT_EQ(finish.proceeded, 0);
  // The deadline, mid-stream: the engine concludes the call.
  Conclude(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline"));
  EXPECT_EQ(writes.back().proceeded, 1);
  EXPECT_TRUE(writes.back().send_failed);  // never taken by an attempt
  EXPECT_FALSE(writes.front().send_failed);
  EXPECT_EQ(read.proceeded, 1);
  EXPECT_TRUE(read.recv_failed);  // no message will come
  EXPECT_EQ(finish.proceeded, 1);
  EXPECT_EQ(finish.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  auto attempts = finish.recv_trailing.find(kAttemptsTrailer);
  ASSERT_NE(attempts, finish.recv_trailing.end());
  EXPECT_EQ(attempts->second, "1");
  EXPECT_EQ(flow_->buffered_bytes(), 0u);
  EXPECT_EQ(channel_bytes_->held(), 0u);
  // A write after the end fails, as on a finished gRPC stream.
  FakeBatch late = FakeBatch::Write("late");
  Serve(late);
  EXPECT_EQ(late.proceeded, 1);
  EXPECT_TRUE(late.send_failed);
  static_cast<void>(stream);
}

// Found by ASan in CI (compare --only=streams, callback server stream): a
// read still out when the status was served completes after it, and a
// callback reactor's OnDone waits for that read; the application may then
// free its call, flow and serializer, on its own thread. The post-receive
// half of such a read needs nothing of the flow: it is proceeded at once,
// outside any event, and nothing of the flow is touched after, so the
// application may destroy the flow inside that Proceed (under ASan, in CI,
// any touch after fails).
TEST_F(StreamFlowTest, ABatchProceededAfterTheStatusTouchesNothingAfter) {
  Make();
  SendAttempt();
  FakeBatch finish = FakeBatch::Finish();
  Serve(finish);
  Conclude(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline"));
  ASSERT_EQ(finish.proceeded, 1);
  // The post-receive half of the read that was still out.
  FakeBatch read_end;
  read_end.hooks = {InterceptionHookPoints::POST_RECV_MESSAGE};
  bool in_event = true;
  read_end.on_proceed = [&] {
    in_event = serializer_.running();
    flow_.reset();  // the application frees its call
  };
  Serve(read_end);
  EXPECT_EQ(read_end.proceeded, 1);
  EXPECT_FALSE(in_event);
  EXPECT_EQ(flow_, nullptr);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
