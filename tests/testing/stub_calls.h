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

#include <functional>
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

// How to start each Method through each stub API: one row per Method, so
// that a new test method is an enum value and a row, not an edit of every
// call class. Member pointers keep the choice of the stub's function here
// and the call classes below free of any Method.
struct MethodRow {
  using Sync = grpc::Status (FaultService::Stub::*)(grpc::ClientContext*,
                                                    const FaultRequest&,
                                                    FaultReply*);
  using Async = std::unique_ptr<grpc::ClientAsyncResponseReader<FaultReply>> (
      FaultService::Stub::*)(grpc::ClientContext*, const FaultRequest&,
                             grpc::CompletionQueue*);
  using Callback = void (FaultService::Stub::async::*)(
      grpc::ClientContext*, const FaultRequest*, FaultReply*,
      std::function<void(grpc::Status)>);
  using Reactor = void (FaultService::Stub::async::*)(
      grpc::ClientContext*, const FaultRequest*, FaultReply*,
      grpc::ClientUnaryReactor*);

  Method method;
  Sync sync;
  Async async;
  // The callback API's two overloads of one name: with a function...
  Callback callback;
  // ... and with a reactor.
  Reactor reactor;
};

// Rows in the order of Method, so that a Method indexes its row.
inline const MethodRow& RowOf(Method m) {
  using Stub = FaultService::Stub;
  static const MethodRow kRows[] = {
      {Method::kGet, &Stub::Get, &Stub::AsyncGet, &Stub::async::Get,
       &Stub::async::Get},
      {Method::kPut, &Stub::Put, &Stub::AsyncPut, &Stub::async::Put,
       &Stub::async::Put},
      {Method::kCharge, &Stub::Charge, &Stub::AsyncCharge, &Stub::async::Charge,
       &Stub::async::Charge},
      {Method::kCreate, &Stub::Create, &Stub::AsyncCreate, &Stub::async::Create,
       &Stub::async::Create},
      {Method::kHedgedCharge, &Stub::HedgedCharge, &Stub::AsyncHedgedCharge,
       &Stub::async::HedgedCharge, &Stub::async::HedgedCharge},
  };
  const MethodRow& row = kRows[static_cast<int>(m)];
  // A row out of order would silently call another method.
  EXPECT_EQ(row.method, m) << "stub_calls.h: rows out of Method's order";
  return row;
}

class SyncCall final : public PendingCall {
 public:
  SyncCall(FaultService::Stub* stub, Method m, grpc::ClientContext* ctx,
           const FaultRequest& req, FaultReply* reply) {
    const MethodRow::Sync call = RowOf(m).sync;
    thread_ = std::thread([=] { status_ = (stub->*call)(ctx, req, reply); });
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
    rpc_ = (stub->*RowOf(m).async)(ctx, req, &cq_);
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
    (stub->async()->*RowOf(m).callback)(ctx, &req_, reply,
                                        [this](grpc::Status s) {
                                          status_ = std::move(s);
                                          done_.Notify();
                                        });
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
    (stub->async()->*RowOf(m).reactor)(ctx, &req_, reply, this);
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
