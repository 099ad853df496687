// Copyright rpcguard authors.
//
// What rpcguard's server interceptor (server.h) costs a server call that
// nothing went wrong with, in instructions: a sync server and a sync client
// in one process, N unary calls, with and without the interceptor. Run it
// under callgrind, once each way (bench/server_cost.sh does):
//
//   valgrind --tool=callgrind bazel-bin/bench/server_interceptor_cost \
//       --interceptor=1 --calls=2000
//
// The counters are zeroed when the measured calls start and dumped when they
// end, so the dump holds exactly N calls. The difference of the two totals
// per call is the interceptor's cost (client and server side both run here,
// unchanged between the runs). --interceptor=2 runs a pass-through server
// interceptor instead: gRPC's own cost of having any.

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "rpcguard/server.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define RPCGUARD_BENCH_CALLGRIND 1
#endif

namespace {

using ::google::protobuf::Empty;
using ::rpcguard::testing::v1::Plain;

// The floor: a server interceptor that only proceeds, so that gRPC's own cost
// of running any server interceptor is told apart from rpcguard's work.
class PassThrough final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    m->Proceed();
  }
};
class PassThroughFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    return new PassThrough;
  }
};

class Service final : public Plain::Service {
  grpc::Status Level(grpc::ServerContext*, const Empty*, Empty*) override {
    return grpc::Status::OK;
  }
};

int Flag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoi(argv[i] + prefix.size());
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  // 0: none, 1: rpcguard's, 2: a pass-through one.
  const int interceptor = Flag(argc, argv, "interceptor", 1);
  const int calls = Flag(argc, argv, "calls", 2000);
  const int warmup = Flag(argc, argv, "warmup", 200);

  Service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  if (interceptor == 2) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        creators;
    creators.push_back(std::make_unique<PassThroughFactory>());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  } else if (interceptor == 1) {
    const absl::Status s = rpcguard::AddServerInterceptor(&builder);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = Plain::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));

  auto call = [&] {
    grpc::ClientContext ctx;
    Empty request, response;
    return stub->Level(&ctx, request, &response).ok();
  };
  for (int i = 0; i < warmup; ++i) {
    if (!call()) return 1;
  }
#ifdef RPCGUARD_BENCH_CALLGRIND
  CALLGRIND_ZERO_STATS;
#endif
  for (int i = 0; i < calls; ++i) {
    if (!call()) return 1;
  }
#ifdef RPCGUARD_BENCH_CALLGRIND
  CALLGRIND_DUMP_STATS_AT("measured calls");
#endif
  server->Shutdown();
  std::printf("%d calls, interceptor %d\n", calls, interceptor);
  return 0;
}
