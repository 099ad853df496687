// An application built with CMake against an installed rpcguard. It starts
// an in-process Ledger server that fails the first attempt of each call
// with UNAVAILABLE, calls it through rpcguard::CreateChannel (the retry
// policy comes from ledger.proto's options alone), and exits 0 only when
// both calls succeeded after exactly 2 attempts.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "ledger.grpc.pb.h"
#include "rpcguard/rpcguard.h"

namespace {

// Fails the first attempt of every call (told apart by its
// `rpcguard-attempt` metadata) with UNAVAILABLE.
class LedgerService final : public ledger::v1::Ledger::Service {
 public:
  grpc::Status Record(grpc::ServerContext* context,
                      const ledger::v1::Entry* entry,
                      ledger::v1::EntryId* id) override {
    if (FirstAttempt(context)) return Unavailable();
    id->set_id(entry->account() + "-1");
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context, const ledger::v1::EntryId*,
                   ledger::v1::Entry* entry) override {
    if (FirstAttempt(context)) return Unavailable();
    entry->set_cents(42);
    return grpc::Status::OK;
  }

 private:
  static bool FirstAttempt(grpc::ServerContext* context) {
    auto it = context->client_metadata().find(rpcguard::kAttemptHeader);
    return it == context->client_metadata().end() || it->second == "1";
  }
  static grpc::Status Unavailable() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "first attempt");
  }
};

// The `rpcguard-attempts` trailer of a finished call, or "(none)".
std::string Attempts(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(rpcguard::kAttemptsTrailer);
  return it == trailers.end()
             ? "(none)"
             : std::string(it->second.data(), it->second.size());
}

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main() {
  std::printf("rpcguard %s\n", rpcguard::Version());
  LedgerService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      grpc::ServerBuilder()
          .AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                            &port)
          .RegisterService(&service)
          .BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "app: the server did not start\n");
    return 1;
  }

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpcguard::CreateChannel("127.0.0.1:" + std::to_string(port),
                              grpc::InsecureChannelCredentials(),
                              rpcguard::Options());
  if (!channel.ok()) {
    std::fprintf(stderr, "app: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  auto stub = ledger::v1::Ledger::NewStub(*channel);
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(10);

  grpc::ClientContext record_context;
  record_context.set_deadline(deadline);
  ledger::v1::Entry entry;
  entry.set_account("acct");
  entry.set_cents(42);
  ledger::v1::EntryId id;
  grpc::Status status = stub->Record(&record_context, entry, &id);
  Check(status.ok() && id.id() == "acct-1",
        "Record (KEYED): " + status.error_message() + " " + id.id());
  Check(Attempts(record_context) == "2",
        "Record attempts: " + Attempts(record_context));

  grpc::ClientContext get_context;
  get_context.set_deadline(deadline);
  ledger::v1::Entry got;
  status = stub->Get(&get_context, id, &got);
  Check(status.ok() && got.cents() == 42,
        "Get (NO_SIDE_EFFECTS): " + status.error_message());
  Check(Attempts(get_context) == "2", "Get attempts: " + Attempts(get_context));

  server->Shutdown();
  std::printf("%s\n", failures == 0 ? "PASS" : "FAILED");
  return failures == 0 ? 0 : 1;
}
