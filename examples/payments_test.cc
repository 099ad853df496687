// Copyright rpcguard authors.
//
// How an application tests its service under retries with rpcguard's test
// kit (rpcguard/testing/): its own service on a real server, the fault
// injector in front, its own client through rpcguard. The example of
// docs/testing-kit.md.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "examples/payments.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "rpcguard/testing/fault_injector.h"

namespace {

using ::examples::payments::v1::ChargeReply;
using ::examples::payments::v1::ChargeRequest;
using ::examples::payments::v1::Payments;

// The application's service: it applies a charge once per idempotency key.
class PaymentsService final : public Payments::Service {
 public:
  grpc::Status Charge(grpc::ServerContext* ctx, const ChargeRequest* req,
                      ChargeReply* reply) override {
    auto key = ctx->client_metadata().find("idempotency-key");
    if (key == ctx->client_metadata().end()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no key");
    }
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = charges_.try_emplace(
        std::string(key->second.data(), key->second.size()),
        req->amount_cents());
    if (inserted) balance_ += req->amount_cents();
    reply->set_charge_id(it->first);
    return grpc::Status::OK;
  }
  int64_t balance() {
    absl::MutexLock lock(&mu_);
    return balance_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int64_t> charges_ ABSL_GUARDED_BY(mu_);
  int64_t balance_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(PaymentsUnderRetries, LostReplyIsRetriedWithOneKeyAndChargedOnce) {
  PaymentsService service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();

  // In front of the server: Charge's first attempt is applied, then its
  // reply is lost (UNAVAILABLE).
  rpcguard::testing::FaultInjector faults;
  ASSERT_TRUE(faults.Start(server->InProcessChannel({})).ok());
  ASSERT_TRUE(faults
                  .SetRule(rpcguard::testing::FaultRule::ApplyThenFail(
                      "/examples.payments.v1.Payments/Charge", 1))
                  .ok());

  // The client, through rpcguard; payments.proto declares Charge KEYED.
  auto channel = rpcguard::CreateChannel(
      faults.address(), grpc::InsecureChannelCredentials(), {});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = Payments::NewStub(*channel);
  grpc::ClientContext ctx;
  ChargeRequest req;
  req.set_amount_cents(500);
  ChargeReply reply;
  ASSERT_TRUE(stub->Charge(&ctx, req, &reply).ok());

  // Attempted twice with one key, charged once.
  auto calls = faults.recorder().Calls("/examples.payments.v1.Payments/Charge");
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].attempts.size(), 2u);
  EXPECT_EQ(calls[0].attempts[1].idempotency_key,
            calls[0].attempts[0].idempotency_key);
  EXPECT_EQ(calls[0].reached_service(), 2);
  EXPECT_EQ(service.balance(), 500);
}

}  // namespace
