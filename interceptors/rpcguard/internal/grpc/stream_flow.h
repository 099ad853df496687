// Copyright rpcguard authors.
//
// StreamFlow: the streams of a hijacked streaming call (server-, client- or
// bidi-streaming), between the application's batches and the attempts'
// streams. The call's state machine stays the one engine's (call_engine.h):
// this class is what a stream needs beyond a unary call's seam, and
// HijackedCall delegates to it.
//
// Retried until it commits (gRFC A6): the requests the application has
// written are kept for replay, and every attempt is a callback-API bidi
// stream of serialized bytes on the channel below rpcguard that writes
// them again, in order. The call commits to an attempt when the server's
// response headers or a response message come, or when the requests
// outgrow the replay buffer; from then on the attempt's end is the call's
// (CallEngine::Commit), and the buffered requests are freed as soon as the
// attempt has written them.
//
// The application's batches keep their meaning:
//  - a write completes when the current attempt has taken it: written, or
//    queued on it behind fewer than kWriteAhead messages and kAheadBytes
//    bytes (a transport's send buffer does the same), never copied into an
//    unbounded buffer; a retry's replay, or a backoff, holds the
//    application's next write back, as a slow server would. The window
//    lets the application's thread go on writing while gRPC's threads
//    write, instead of waking for every message;
//  - a read delivers the committed attempt's messages in order, exactly
//    once; an attempt reads up to kReadAhead messages (and kAheadBytes)
//    ahead of the application, to see a response (the commit) or the
//    stream's end before being asked, and so that the application's read
//    usually finds its message waiting, on its own thread;
//  - initial metadata is delivered at the commit (or at the call's end);
//  - the status, with the trailers, when the engine concludes the call.
//
// Threads: application batches arrive on the application's threads,
// attempt reactions on gRPC's callback threads; each runs as an event on
// the call's serializer (the engine's: serializer.h), one at a time with
// the engine's own, so the flow's state needs no lock. What the engine asks
// (Send, Cancel, Conclude) comes from its events and runs in them. An
// application batch proceeded may run a reaction inline: it queues behind
// the running event. The operations an event decides on an attempt's
// stream (write, half-close, read, holds let go) are started once the
// serializer is free (Serializer::Defer), each under a hold of its own
// taken by the event, so the stream cannot finish under it: a write can
// reach the socket, and made inside the event it held back the
// application's next request, whose batch was then served from gRPC's
// thread and the stream flushed once a message (bench/RESULTS.md, "The
// stream floor").

#ifndef RPCGUARD_INTERNAL_GRPC_STREAM_FLOW_H_
#define RPCGUARD_INTERNAL_GRPC_STREAM_FLOW_H_

#include <grpcpp/client_context.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/interceptor.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "rpcguard/internal/engine/call_engine.h"
#include "rpcguard/internal/engine/serializer.h"
#include "rpcguard/internal/grpc/attempt_transport.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/internal/grpc/final_outcome.h"

namespace rpcguard {
namespace internal {

class StreamFlow;

// Bytes of requests held for replay by every streaming call of the process
// now: for tests, and a gauge for operators.
int64_t StreamBytesBuffered();

// One attempt of a stream: the engine's attempt and the reactor of its
// stream. Its fields are the flow's, touched only by the flow's events.
class StreamAttempt final
    : public EngineAttempt,
      public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit StreamAttempt(StreamFlow* flow) : flow_(flow) {}

  void OnReadInitialMetadataDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  friend class StreamFlow;

  // The operations an event decided (StreamFlow::Act), as bits.
  enum Op : uint32_t {
    kWrite = 1,
    kWriteMore = 2,  // more requests queued behind the write
    kWritesDone = 4,
    kRead = 8,
    kReleaseHold = 16,
    kHoldShift = 8,  // above: the holds its operations took
  };
  // Starts `ops` on the stream, outside the serializer (Serializer::Defer),
  // then lets go of the holds the event took for them.
  void Operate(uint32_t ops);

  StreamFlow* const flow_;
  grpc::ByteBuffer read_buffer_;
  // The request being written: a reference of its own to the slices,
  // which the replay buffer may let go of (the call concluding) while the
  // write is started. Set by the event that decides a write, never while
  // one is in flight.
  grpc::ByteBuffer write_buffer_;
  bool bound_ = false;     // its stream exists (StartCall may come)
  bool reading_ = false;   // a read in flight
  bool read_end_ = false;  // the server's messages ended
  bool writing_ = false;   // a write in flight, of message `written_`
  bool write_failed_ = false;
  bool closing_ = false;        // WritesDone started
  bool closed_ = false;         // and done
  bool hold_released_ = false;  // the base hold: no operation after it
  int64_t written_ = 0;         // messages it has written, counted from 0
  uint64_t written_bytes_ = 0;  // and their bytes, counted from 0 as well
};

class StreamFlow final : public AttemptTransport {
 public:
  // The windows of the header's comment: small, so that what is held is a
  // transport's worth, and enough that a steady stream rarely waits.
  static constexpr int64_t kWriteAhead = 16;
  static constexpr size_t kReadAhead = 16;
  static constexpr size_t kAheadBytes = 64 * 1024;

  // `method` names the method in messages; `type` is the call's
  // (ClientRpcInfo); `buffer_limit`: bytes of requests kept for replay
  // before the call commits; `channel`: what all streams of the channel
  // hold, and their limit (it outlives the flow); `serializer`: the call's,
  // on which the flow's events run (the owner's, outliving the flow).
  StreamFlow(TransportOwner* owner, Serializer* serializer, std::string method,
             grpc::internal::RpcMethod::RpcType type, size_t buffer_limit,
             ChannelStreamBytes* channel);
  ~StreamFlow();
  StreamFlow(const StreamFlow&) = delete;
  StreamFlow& operator=(const StreamFlow&) = delete;

  // The call's first batch (before Hijack): its message and half-close, if
  // it has them, are the first requests.
  void TakeFirstBatch(grpc::experimental::InterceptorBatchMethods* batch);

  // A later batch of the application's call: its send half (PRE_SEND_*
  // hooks), its receive half (PRE_RECV_* hooks, hijacked), or an empty one.
  // Proceeded when done.
  void Serve(grpc::experimental::InterceptorBatchMethods* batch);

  // AttemptTransport: from the engine's events, which the flow's own run
  // beside, one at a time.
  std::shared_ptr<EngineAttempt> NewAttempt() override;
  bool RunsToCallDeadline() const override { return true; }
  // Starts the attempt's stream on `channel`; its context is prepared.
  void Send(const std::shared_ptr<EngineAttempt>& attempt,
            grpc::ChannelInterface* channel) override;
  // Cancels the attempt whose context this is.
  void Cancel(const std::shared_ptr<void>& context) override;
  // The responses went to the application as they came: nothing to take.
  void TakeResponse(EngineAttempt& last, FinalOutcome* out) override {}
  // The call is decided: every batch waiting, and every later one, is
  // served from `outcome`, which outlives the flow.
  void Conclude(const FinalOutcome& outcome) override;

  // Makes an attempt's stream and binds it to `attempt` (its reactor):
  // gRPC's callback API unless a test gives a fake stream
  // (grpc::ClientCallbackReaderWriter, which binds itself with
  // BindReactor).
  using StreamStarter = std::function<void(
      grpc::ChannelInterface* channel, const grpc::internal::RpcMethod& method,
      grpc::ClientContext* context, StreamAttempt* attempt)>;
  void SetStreamStarterForTest(StreamStarter starter) {
    starter_ = std::move(starter);
  }

  // Bytes of requests held for replay now (a test's window on the buffer),
  // from any thread.
  size_t buffered_bytes() const;
  // Requests and their bytes buffered at the most, for stats and tests.
  size_t peak_buffered_bytes() const;

 private:
  friend class StreamAttempt;

  // An application batch's send half, waiting for the attempt to take it.
  struct PendingSend {
    grpc::experimental::InterceptorBatchMethods* batch;
    int64_t message;  // its request's index, or -1
    bool close;       // WritesDone
  };
  // An application batch's receive half.
  struct PendingRecv {
    grpc::experimental::InterceptorBatchMethods* batch;
    bool metadata, message, status;
  };
  // What an event does once its state is written, in this order.
  struct Actions {
    absl::InlinedVector<grpc::experimental::InterceptorBatchMethods*, 2>
        proceed;
    // The status batches, proceeded last: they complete the call.
    absl::InlinedVector<grpc::experimental::InterceptorBatchMethods*, 2>
        proceed_last;
    StreamAttempt* attempt = nullptr;         // for the operations below
    const grpc::ByteBuffer* write = nullptr;  // copied by Act
    bool write_more = false;  // more requests queued behind `write`
    bool writes_done = false;
    bool read = false;
    int holds = 0;  // one per operation above, added by the event
    bool release_hold = false;
  };

  void OnHeaders(StreamAttempt* a, bool ok);
  void OnRead(StreamAttempt* a, bool ok);
  void OnWrite(StreamAttempt* a, bool ok);
  void OnWritesDone(StreamAttempt* a, bool ok);
  void OnDone(StreamAttempt* a, const grpc::Status& status);

  // Takes a send half: `request` (may be null) then the half-close;
  // `batch` (null for the first, which Hijack() completes) proceeds once
  // the current attempt has taken them.
  void TakeSend(grpc::experimental::InterceptorBatchMethods* batch,
                const grpc::ByteBuffer* request, bool close, Actions& a);
  // Commits to the current attempt (its headers are copied when they come):
  // the owner keeps the fact.
  void CommitTo(CommitReason reason);
  // Whether the call has committed: the owner's fact, kept once.
  bool committed() const { return owner_->commit().has_value(); }
  // Completes what the current attempt has taken; `resume`: its progress,
  // not a new request, is why (Taken).
  void CompleteSends(Actions& a, bool resume);
  // Whether the current attempt has taken request `index` (header): a
  // waiting writer resumes at half the window.
  bool Taken(int64_t index, bool resume) const;
  void Deliver(Actions& a);
  // Drops the requests the committed attempt has written.
  void FreeWritten();
  // Counts `n` bytes fewer held, in bytes_ and the gauges.
  void ReleaseBytes(size_t n);
  // The current attempt's next operations; `read_chain`: a read has just
  // completed (reading goes on to the full read-ahead).
  void Pump(Actions& a, bool read_chain = false);
  // Fills the receive half `r` as far as it can; true when complete.
  bool FillRecv(PendingRecv& r);
  void Act(Actions& a);

  TransportOwner* const owner_;
  Serializer* const serializer_;
  const std::string method_;
  const grpc::internal::RpcMethod rpc_method_;
  const size_t buffer_limit_;
  ChannelStreamBytes* const channel_;
  StreamStarter starter_;  // empty: gRPC's

  // A request kept for replay, and the bytes of every request up to and
  // including it (to measure a write window).
  struct Request {
    grpc::ByteBuffer bytes;
    uint64_t end;
  };
  // Requests kept for replay: indexes [freed_, taken_).
  std::deque<Request> replay_;
  int64_t freed_ = 0;
  uint64_t freed_bytes_ = 0;  // of requests [0, freed_)
  int64_t taken_ = 0;
  uint64_t taken_bytes_ = 0;  // of requests [0, taken_)
  // Written by events only; atomic for the accessors above.
  std::atomic<size_t> bytes_{0};
  std::atomic<size_t> peak_bytes_{0};
  bool half_closed_ = false;
  std::deque<PendingSend> sends_;
  std::deque<PendingRecv> recvs_;

  std::shared_ptr<StreamAttempt> current_;
  // The requests outgrew a buffer while no attempt ran: the next commits,
  // for this reason.
  std::optional<CommitReason> commit_at_start_;
  Metadata initial_metadata_;
  bool metadata_ready_ = false;
  // The committed attempt's messages read ahead of the application.
  std::deque<grpc::ByteBuffer> ahead_;
  size_t ahead_bytes_ = 0;
  bool messages_ended_ = false;
  // The application's status batch has been proceeded (Act).
  bool status_served_ = false;
  // A response the application's object could not take: the call's status.
  grpc::Status parse_error_;
  const FinalOutcome* outcome_ = nullptr;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_STREAM_FLOW_H_
