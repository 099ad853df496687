// Copyright rpcguard authors.
//
// The floor for a retrying interceptor's streams, as the hijack floor
// (clients.cc) is for unary calls: a streaming call is hijacked and tried
// exactly once, as a callback-API bidi stream of serialized bytes on the
// channel below, every application operation forwarded to it. Nothing is
// kept for replay and nothing added (no metadata, no policy, no commit).
// What it costs beyond a plain stream is the mechanism any design built on
// hijacking pays: a second call and ClientContext, the hijacked batches,
// hand-overs between the application's threads and gRPC's, the responses
// parsed from bytes.
//
// Its windows are rpcguard's (stream_flow.h): a write completes when the
// attempt has taken it, at most 16 messages ahead of the stream's own
// writes (a writer that waited resumes at 8); the attempt reads up to 16
// messages ahead of the application (a stopped reader restarts at 8). So
// the two hand work between threads alike, and rpcguard's ratio to this
// floor is the cost of what rpcguard keeps and decides. The byte windows
// are left out: the benchmark's messages are a few bytes.
//
// Cancels are not forwarded: a cancelled call waits for its stream, which
// ends by the caller's deadline at the latest (the floor measures the
// no-failure path). Server initial metadata is not copied to the
// application (the unary floor copies none either).

#ifndef RPCGUARD_BENCH_STREAM_FLOOR_H_
#define RPCGUARD_BENCH_STREAM_FLOOR_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/interceptor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace rpcguard {
namespace bench {

// One hijacked streaming call and its single attempt. Owned by the
// interceptor and, until the attempt's OnDone, by itself.
class StreamFloorCall final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public std::enable_shared_from_this<StreamFloorCall> {
 public:
  // Takes what `first` (the batch with the initial metadata) sends and
  // starts the attempt on the channel below the interceptor. The caller
  // then calls first->Hijack(), whose re-entry goes to Serve().
  static std::shared_ptr<StreamFloorCall> Start(
      grpc::experimental::ClientRpcInfo* info,
      grpc::experimental::InterceptorBatchMethods* first);

  // Every later pass of the application's batches: sends are taken (and
  // their batch completed when the window allows), receives filled or
  // parked until the attempt has what they ask for.
  void Serve(grpc::experimental::InterceptorBatchMethods* batch);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  using Batch = grpc::experimental::InterceptorBatchMethods;
  static constexpr int64_t kWriteAhead = 16;
  static constexpr size_t kReadAhead = 16;

  // An application batch that sends: message (-1: none, else its index)
  // and close.
  struct PendingSend {
    Batch* batch;
    int64_t message;
    bool close;
  };
  struct PendingRecv {
    Batch* batch;
    bool message;
    bool status;
  };
  // What one handler decided under mu_, done after it lets go: calls into
  // gRPC are made without the lock.
  struct Actions {
    std::vector<Batch*> proceed;
    Batch* proceed_last = nullptr;  // the status batch
    grpc::ByteBuffer* write = nullptr;
    bool write_more = false;
    bool writes_done = false;
    bool read = false;
    int holds = 0;
    bool release_hold = false;
  };

  explicit StreamFloorCall(const char* method);

  void TakeSend(Batch* batch, const grpc::ByteBuffer* request, bool close,
                Actions& a);
  bool Taken(int64_t index, bool resume) const;
  void CompleteSends(Actions& a, bool resume);
  bool FillRecv(PendingRecv& r);
  void Deliver(Actions& a);
  void Pump(Actions& a, bool read_chain = false);
  void Act(Actions& a);

  const std::string method_;
  std::optional<grpc::ClientContext> context_;

  std::mutex mu_;
  // Requests taken from the application and not yet written: the front is
  // message written_, the back taken_ - 1.
  std::deque<grpc::ByteBuffer> queue_;
  int64_t taken_ = 0;
  int64_t written_ = 0;
  bool writing_ = false;
  bool write_failed_ = false;
  bool half_closed_ = false;  // the application's
  bool closing_ = false;      // WritesDone started
  bool closed_ = false;       // and done
  std::deque<PendingSend> sends_;
  grpc::ByteBuffer read_buffer_;
  std::deque<grpc::ByteBuffer> ahead_;
  bool reading_ = false;
  bool read_end_ = false;
  std::deque<PendingRecv> recvs_;
  // The stream's base hold (kept while the server may still send) is gone:
  // no operation may start any more.
  bool hold_released_ = false;
  bool done_ = false;
  grpc::Status status_;
  // Itself, until OnDone.
  std::shared_ptr<StreamFloorCall> self_;
};

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_STREAM_FLOOR_H_
