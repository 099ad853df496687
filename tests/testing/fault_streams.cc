// Copyright rpcguard authors.

#include "tests/testing/fault_streams.h"

#include <utility>
#include <vector>

namespace rpcguard {
namespace testing {

using ::rpcguard::testing::v1::StreamReply;
using ::rpcguard::testing::v1::StreamRequest;

namespace {

grpc::Status Injected() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "injected failure before any response");
}

// Writes `n` replies one after another, then finishes.
class Writer final : public grpc::ServerWriteReactor<StreamReply> {
 public:
  Writer(int n, bool fail) : n_(n) {
    if (fail) {
      Finish(Injected());
      return;
    }
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (sent_ >= n_) {
      Finish(grpc::Status::OK);
      return;
    }
    reply_.set_n(sent_++);
    StartWrite(&reply_);
  }

  const int n_;
  int sent_ = 0;
  StreamReply reply_;
};

// Reads every request, then replies with their count.
class Reader final : public grpc::ServerReadReactor<StreamRequest> {
 public:
  Reader(StreamReply* reply, bool fail) : reply_(reply) {
    if (fail) {
      Finish(Injected());
      return;
    }
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client's writes are done (or it went away: then nobody reads
      // the reply).
      reply_->set_n(count_);
      Finish(grpc::Status::OK);
      return;
    }
    ++count_;
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  StreamReply* const reply_;
  StreamRequest request_;
  int count_ = 0;
};

// Reads every request, then echoes each, in order.
class Echo final : public grpc::ServerBidiReactor<StreamRequest, StreamReply> {
 public:
  explicit Echo(bool fail) {
    if (fail) {
      Finish(Injected());
      return;
    }
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Next();  // the client's writes are done: echo them
      return;
    }
    received_.push_back(request_.n());
    StartRead(&request_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (sent_ >= received_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    reply_.set_n(received_[sent_++]);
    StartWrite(&reply_);
  }

  StreamRequest request_;
  StreamReply reply_;
  std::vector<int32_t> received_;
  size_t sent_ = 0;
};

}  // namespace

void FaultStreams::SetFaults(int fail_percent, uint64_t seed) {
  absl::MutexLock lock(&mu_);
  fail_percent_ = fail_percent;
  gen_.seed(seed);
}

int64_t FaultStreams::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

bool FaultStreams::Arrive() {
  absl::MutexLock lock(&mu_);
  ++attempts_;
  // Drawn on every attempt, faults or not, so that the sequence depends on
  // the seed and the attempt's place only. (2^64 % 100 makes the modulo's
  // bias about 1e-18.)
  return static_cast<int>(gen_() % 100) < fail_percent_;
}

grpc::ServerWriteReactor<StreamReply>* FaultStreams::ServerStream(
    grpc::CallbackServerContext* /*ctx*/, const StreamRequest* req) {
  return new Writer(req->n(), Arrive());
}

grpc::ServerReadReactor<StreamRequest>* FaultStreams::ClientStream(
    grpc::CallbackServerContext* /*ctx*/, StreamReply* reply) {
  return new Reader(reply, Arrive());
}

grpc::ServerBidiReactor<StreamRequest, StreamReply>* FaultStreams::Bidi(
    grpc::CallbackServerContext* /*ctx*/) {
  return new Echo(Arrive());
}

}  // namespace testing
}  // namespace rpcguard
