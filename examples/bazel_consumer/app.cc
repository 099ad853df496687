// An application in a workspace of its own that uses rpcguard as a
// repository. It starts an Orders server on 127.0.0.1 whose every call fails
// its first attempt with UNAVAILABLE, calls it through an rpcguard channel
// whose policies come from orders.proto's options alone, and checks:
//   - rpcguard's options extension is registered once (protobuf aborts a
//     binary that links two copies before main) and is the one rpcguard
//     reads: orders.proto's declarations are found through it;
//   - Place (KEYED) was retried and succeeded, the server seeing 2 attempts
//     carrying one idempotency key;
//   - Get (NO_SIDE_EFFECTS) was retried and succeeded.
// Prints one line per check and exits 0 only when every check holds.

#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "interceptors/config.h"  // the application's own
#include "orders/orders.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "rpcguard/v1/options.pb.h"

namespace {

// What the server saw of one call: the idempotency key of each attempt.
using Attempts = std::vector<std::string>;

// Fails the first `failures` attempts of every call with UNAVAILABLE (an
// attempt's number is rpcguard's `rpcguard-attempt` metadata) and records
// each attempt's idempotency key under the call's item or id.
class OrdersService final : public orders::v1::Orders::Service {
 public:
  explicit OrdersService(int failures) : failures_(failures) {}

  grpc::Status Place(grpc::ServerContext* context,
                     const orders::v1::Order* order,
                     orders::v1::OrderId* id) override {
    if (!Attempt("Place " + order->item(), context)) return Unavailable();
    id->set_id(order->item() + "-1");
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context, const orders::v1::OrderId* id,
                   orders::v1::Order* order) override {
    if (!Attempt("Get " + id->id(), context)) return Unavailable();
    order->set_item(id->id());
    order->set_quantity(3);
    return grpc::Status::OK;
  }

  Attempts Seen(const std::string& call) {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_[call];
  }

 private:
  // Records the attempt; whether it may succeed.
  bool Attempt(const std::string& call, grpc::ServerContext* context) {
    const auto& md = context->client_metadata();
    auto key = md.find(rpcguard::kIdempotencyKeyHeader);
    auto number = md.find(rpcguard::kAttemptHeader);
    std::lock_guard<std::mutex> lock(mu_);
    seen_[call].push_back(
        key == md.end() ? std::string()
                        : std::string(key->second.data(), key->second.size()));
    const std::string n =
        number == md.end()
            ? std::string("1")
            : std::string(number->second.data(), number->second.size());
    return std::stoi(n) > failures_;
  }
  static grpc::Status Unavailable() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not yet");
  }

  const int failures_;
  std::mutex mu_;
  std::map<std::string, Attempts> seen_;
};

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// The `rpcguard-attempts` trailer of a finished call, or "(none)".
std::string AttemptsTrailer(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(rpcguard::kAttemptsTrailer);
  return it == trailers.end()
             ? "(none)"
             : std::string(it->second.data(), it->second.size());
}

// The server saw `want` attempts of `call`, all with the same non-empty key.
void CheckAttempts(const Attempts& seen, int want, const std::string& call) {
  bool one_key = !seen.empty() && !seen[0].empty();
  for (const std::string& key : seen) one_key = one_key && key == seen[0];
  Check(static_cast<int>(seen.size()) == want && one_key,
        call + ": the server saw " + std::to_string(seen.size()) +
            " attempts, key " + (seen.empty() ? "-" : seen[0]) +
            (one_key ? " on each" : " NOT the same on each"));
}

}  // namespace

int main() {
  const app::Config config;
  std::printf("rpcguard %s\n", rpcguard::Version());

  // The extension rpcguard reads is the one orders.proto's options use:
  // both come from rpcguard's options.pb.cc, linked once.
  const google::protobuf::MethodDescriptor* place =
      orders::v1::Order::descriptor()
          ->file()
          ->FindServiceByName("Orders")
          ->FindMethodByName("Place");
  Check(place != nullptr &&
            place->options().GetExtension(rpcguard::v1::method).idempotency() ==
                rpcguard::v1::MethodPolicy::KEYED,
        "orders.proto's (rpcguard.v1.method) option on Place reads KEYED");

  OrdersService service(config.failures_per_call);
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

  // No config: every policy comes from orders.proto.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpcguard::CreateChannel("127.0.0.1:" + std::to_string(port),
                              grpc::InsecureChannelCredentials(),
                              rpcguard::Options());
  if (!channel.ok()) {
    std::fprintf(stderr, "app: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "%s\n",
      rpcguard::Options().config.Explain("/orders.v1.Orders/Place").c_str());
  auto stub = orders::v1::Orders::NewStub(*channel);
  const int want = config.failures_per_call + 1;

  grpc::ClientContext place_context;
  place_context.set_deadline(std::chrono::system_clock::now() +
                             config.deadline);
  orders::v1::Order order;
  order.set_item(config.item);
  order.set_quantity(3);
  orders::v1::OrderId id;
  grpc::Status status = stub->Place(&place_context, order, &id);
  Check(status.ok() && id.id() == config.item + "-1",
        "Place (KEYED): " + std::to_string(status.error_code()) + " " +
            status.error_message() + " " + id.id());
  Check(AttemptsTrailer(place_context) == std::to_string(want),
        "Place: rpcguard-attempts " + AttemptsTrailer(place_context));
  CheckAttempts(service.Seen("Place " + config.item), want, "Place");

  grpc::ClientContext get_context;
  get_context.set_deadline(std::chrono::system_clock::now() + config.deadline);
  orders::v1::Order got;
  status = stub->Get(&get_context, id, &got);
  Check(status.ok() && got.item() == id.id(),
        "Get (NO_SIDE_EFFECTS): " + std::to_string(status.error_code()) + " " +
            status.error_message());
  Check(AttemptsTrailer(get_context) == std::to_string(want),
        "Get: rpcguard-attempts " + AttemptsTrailer(get_context));
  CheckAttempts(service.Seen("Get " + id.id()), want, "Get");

  server->Shutdown();
  std::printf("%s\n", failures == 0 ? "PASS" : "FAILED");
  return failures == 0 ? 0 : 1;
}
