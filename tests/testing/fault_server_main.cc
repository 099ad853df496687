// Copyright rpcguard authors.
//
// The fault-injecting server as a process of its own, for benchmarks and
// chaos tests that must measure or kill the client and server apart.
//
//   fault_server_main [--port=N]
//
// Prints "listening on 127.0.0.1:PORT" on stdout once it serves, then runs
// until SIGTERM or SIGINT. Faults are set per request (FaultRequest) or
// server-wide through the FaultControl service.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "tests/testing/fault_server.h"

int main(int argc, char** argv) {
  int port = 0;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--port=", 7) == 0 &&
        absl::SimpleAtoi(arg + 7, &port) && port >= 0 && port < 65536) {
      continue;
    }
    std::fprintf(stderr, "usage: %s [--port=N]\n", argv[0]);
    return 2;
  }
  // Block the stop signals before gRPC starts threads, so sigwait gets them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  rpcguard::testing::FaultServer server(port);
  if (!server.ok()) {
    std::fprintf(stderr, "fault_server_main: cannot listen on port %d\n", port);
    return 1;
  }
  std::printf("listening on %s\n", server.address().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  server.Shutdown();
  return 0;
}
