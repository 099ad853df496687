// Copyright rpcguard authors.
//
// rpcguard's metrics served with prometheus-cpp: a client that retries
// against a server failing a share of its calls, with its Stats on a
// prometheus-cpp Exposer, one line added to what a prometheus-cpp process
// already has. Point a Prometheus at it, or look:
//
//   ./bazelw run //examples/prometheus:metrics_client -- --port=9464 &
//   curl -s 127.0.0.1:9464/metrics | grep rpcguard_call_retries
//
// Flags (all optional): --port=P (0: any free port, printed; default 9464),
// --failure_rate=PERCENT (default 30), --calls=N (default 200),
// --serve_s=S (seconds to keep serving after the calls; default 600).

#include <grpcpp/grpcpp.h>
#include <prometheus/exposer.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/prometheus/collector.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"

namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                   "maxBackoff": "0.1s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// --name=value as an int in [lo, hi]; false (and a message) otherwise.
bool IntFlag(const std::string& arg, const std::string& name, int lo, int hi,
             int* out) {
  if (!absl::StartsWith(arg, name + "=")) return false;
  int v;
  if (!absl::SimpleAtoi(arg.substr(name.size() + 1), &v) || v < lo || v > hi) {
    std::fprintf(stderr, "metrics_client: %s must be in [%d, %d]\n",
                 name.c_str(), lo, hi);
    std::exit(2);
  }
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int port = 9464, failure_rate = 30, calls = 200, serve_s = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!IntFlag(arg, "--port", 0, 65535, &port) &&
        !IntFlag(arg, "--failure_rate", 0, 100, &failure_rate) &&
        !IntFlag(arg, "--calls", 0, 10000000, &calls) &&
        !IntFlag(arg, "--serve_s", 0, 86400, &serve_s)) {
      std::fprintf(stderr, "metrics_client: unknown argument %s\n", argv[i]);
      return 2;
    }
  }

  rpcguard::testing::FaultServer server;
  if (!server.ok()) return 1;

  auto config = rpcguard::Config::FromJson(kConfig);
  if (!config.ok()) return 1;
  rpcguard::Options options;
  options.config = *config;
  options.stats = std::make_shared<rpcguard::Stats>();
  options.trace_verbosity = rpcguard::TraceVerbosity::kOff;
  auto channel = rpcguard::CreateChannel(
      server.address(), grpc::InsecureChannelCredentials(), options);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", channel.status().ToString().c_str());
    return 1;
  }

  // What a prometheus-cpp process already has...
  prometheus::Exposer exposer(absl::StrCat("127.0.0.1:", port));
  // ...and the one line that adds rpcguard's metrics (keep the pointer).
  auto rpcguard_metrics = rpcguard::ExposeStats(exposer, options.stats);
  std::printf("metrics on http://127.0.0.1:%d/metrics\n",
              exposer.GetListeningPorts().at(0));
  std::fflush(stdout);

  auto stub = FaultService::NewStub(*channel);
  for (int i = 0; i < calls; ++i) {
    FaultRequest request;
    request.set_op_id(absl::StrCat("example-", i));
    request.set_fail_percent(failure_rate);
    FaultReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(2));
    stub->Get(&context, request, &reply);
  }
  std::printf("%d calls made; serving for %d s\n", calls, serve_s);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(serve_s));
  return 0;
}
