// Copyright rpcguard authors.
//
// One unary call of the test FaultService through any of gRPC's stub APIs
// (sync, CQ-async, callback with a function or with a ClientUnaryReactor),
// started without waiting for it: end-to-end tests run each case once per
// API.

#ifndef RPCGUARD_TESTS_TESTING_STUB_CALLS_H_
#define RPCGUARD_TESTS_TESTING_STUB_CALLS_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

namespace rpcguard {
namespace testing {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

enum class StubKind { kSync, kAsync, kCallback, kReactor };
enum class Method { kGet, kPut, kCharge, kCreate, kHedgedCharge };

inline std::string KindName(StubKind k) {
  switch (k) {
    case StubKind::kSync:
      return "Sync";
    case StubKind::kAsync:
      return "Async";
    case StubKind::kCallback:
      return "Callback";
    case StubKind::kReactor:
      return "Reactor";
  }
  return "";
}

// A call started without waiting for it.
class PendingCall {
 public:
  virtual ~PendingCall() = default;
  virtual grpc::Status Wait() = 0;
};

class SyncCall final : public PendingCall {
 public:
  SyncCall(FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
           const FaultRequest& req, FaultReply* reply) {
    thread_ = std::thread([=] {
      switch (m) {
        case Method::kGet:
          status_ = stub->Get(ctx, req, reply);
          break;
        case Method::kPut:
          status_ = stub->Put(ctx, req, reply);
          break;
        case Method::kCharge:
          status_ = stub->Charge(ctx, req, reply);
          break;
        case Method::kCreate:
          status_ = stub->Create(ctx, req, reply);
          break;
        case Method::kHedgedCharge:
          status_ = stub->HedgedCharge(ctx, req, reply);
          break;
      }
    });
  }
  grpc::Status Wait() override {
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  std::thread thread_;
  grpc::Status status_;
};

class AsyncCall final : public PendingCall {
 public:
  AsyncCall(FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
            const FaultRequest& req, FaultReply* reply) {
    switch (m) {
      case Method::kGet:
        rpc_ = stub->AsyncGet(ctx, req, &cq_);
        break;
      case Method::kPut:
        rpc_ = stub->AsyncPut(ctx, req, &cq_);
        break;
      case Method::kCharge:
        rpc_ = stub->AsyncCharge(ctx, req, &cq_);
        break;
      case Method::kCreate:
        rpc_ = stub->AsyncCreate(ctx, req, &cq_);
        break;
      case Method::kHedgedCharge:
        rpc_ = stub->AsyncHedgedCharge(ctx, req, &cq_);
        break;
    }
    rpc_->Finish(reply, &status_, this);
  }
  grpc::Status Wait() override {
    void* tag;
    bool ok;
    EXPECT_TRUE(cq_.Next(&tag, &ok));
    EXPECT_EQ(tag, this);
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) {
    }
    return status_;
  }

 private:
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<FaultReply>> rpc_;
  grpc::Status status_;
};

class CallbackCall final : public PendingCall {
 public:
  CallbackCall(FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
               const FaultRequest& req, FaultReply* reply)
      : req_(req) {
    auto done = [this](grpc::Status s) {
      status_ = std::move(s);
      done_.Notify();
    };
    auto* async = stub->async();
    switch (m) {
      case Method::kGet:
        async->Get(ctx, &req_, reply, done);
        break;
      case Method::kPut:
        async->Put(ctx, &req_, reply, done);
        break;
      case Method::kCharge:
        async->Charge(ctx, &req_, reply, done);
        break;
      case Method::kCreate:
        async->Create(ctx, &req_, reply, done);
        break;
      case Method::kHedgedCharge:
        async->HedgedCharge(ctx, &req_, reply, done);
        break;
    }
  }
  grpc::Status Wait() override {
    done_.WaitForNotification();
    return status_;
  }

 private:
  FaultRequest req_;
  absl::Notification done_;
  grpc::Status status_;
};

// The callback API with a reactor rather than a function.
class ReactorCall final : public PendingCall, public grpc::ClientUnaryReactor {
 public:
  ReactorCall(FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
              const FaultRequest& req, FaultReply* reply)
      : req_(req) {
    auto* async = stub->async();
    switch (m) {
      case Method::kGet:
        async->Get(ctx, &req_, reply, this);
        break;
      case Method::kPut:
        async->Put(ctx, &req_, reply, this);
        break;
      case Method::kCharge:
        async->Charge(ctx, &req_, reply, this);
        break;
      case Method::kCreate:
        async->Create(ctx, &req_, reply, this);
        break;
      case Method::kHedgedCharge:
        async->HedgedCharge(ctx, &req_, reply, this);
        break;
    }
    StartCall();
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    done_.Notify();
  }
  grpc::Status Wait() override {
    done_.WaitForNotification();
    return status_;
  }

 private:
  FaultRequest req_;
  absl::Notification done_;
  grpc::Status status_;
};

// Starts `m` through the `kind` API; `ctx`, `req` and `reply` must outlive
// Wait().
inline std::unique_ptr<PendingCall> StartCall(
    StubKind kind, FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
    const FaultRequest& req, FaultReply* reply) {
  switch (kind) {
    case StubKind::kSync:
      return std::make_unique<SyncCall>(stub, m, ctx, req, reply);
    case StubKind::kAsync:
      return std::make_unique<AsyncCall>(stub, m, ctx, req, reply);
    case StubKind::kCallback:
      return std::make_unique<CallbackCall>(stub, m, ctx, req, reply);
    case StubKind::kReactor:
      return std::make_unique<ReactorCall>(stub, m, ctx, req, reply);
  }
  return nullptr;
}

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_STUB_CALLS_H_
