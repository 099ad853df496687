// An application that has its own "interceptors/config.h" and uses rpcguard
// from another Bazel workspace. It starts an Echo server on 127.0.0.1 that
// fails the first attempt with UNAVAILABLE, makes one call through an
// rpcguard channel configured from JSON, and checks that rpcguard retried it.
// Exits 0 when every check holds.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "echo/echo.grpc.pb.h"
#include "interceptors/config.h"  // the application's own
#include "rpcguard/rpcguard.h"

namespace {

constexpr char kMethod[] = "/consumer.echo.v1.Echo/Say";

class EchoService final : public consumer::echo::v1::Echo::Service {
 public:
  explicit EchoService(int failures) : failures_left_(failures) {}

  grpc::Status Say(grpc::ServerContext*,
                   const consumer::echo::v1::EchoRequest* request,
                   consumer::echo::v1::EchoReply* reply) override {
    if (failures_left_.fetch_sub(1) > 0) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not yet");
    }
    reply->set_text(request->text());
    return grpc::Status::OK;
  }

 private:
  std::atomic<int> failures_left_;
};

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main() {
  const app::Config config = app::DefaultConfig();

  EchoService service(config.failures_before_success);
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

  absl::StatusOr<rpcguard::Config> retry_config =
      rpcguard::Config::FromJson(config.retry_json);
  Check(retry_config.ok(),
        "rpcguard::Config::FromJson: " + retry_config.status().ToString());
  if (!retry_config.ok()) return 1;
  // Touching a generated message registers echo.proto's descriptors, and
  // with them its rpcguard options.
  consumer::echo::v1::EchoRequest request;
  request.set_text(config.greeting);
  std::printf("%s\n", retry_config->Explain(kMethod).c_str());

  rpcguard::Options options;
  options.config = *retry_config;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpcguard::CreateChannel("127.0.0.1:" + std::to_string(port),
                              grpc::InsecureChannelCredentials(), options);
  Check(channel.ok(),
        "rpcguard::CreateChannel: " + channel.status().ToString());
  if (!channel.ok()) return 1;

  auto stub = consumer::echo::v1::Echo::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  consumer::echo::v1::EchoReply reply;
  grpc::Status status = stub->Say(&context, request, &reply);
  Check(status.ok(), "Say: " + std::to_string(status.error_code()) + " " +
                         status.error_message());
  Check(reply.text() == config.greeting, "reply: \"" + reply.text() + "\"");
  const auto& trailers = context.GetServerTrailingMetadata();
  auto attempts = trailers.find(rpcguard::kAttemptsTrailer);
  std::string attempts_text =
      attempts == trailers.end()
          ? "(none)"
          : std::string(attempts->second.data(), attempts->second.size());
  Check(attempts_text == std::to_string(config.failures_before_success + 1),
        std::string(rpcguard::kAttemptsTrailer) + ": " + attempts_text);

  server->Shutdown();
  std::printf("%s\n", failures == 0 ? "PASS" : "FAILED");
  return failures == 0 ? 0 : 1;
}
