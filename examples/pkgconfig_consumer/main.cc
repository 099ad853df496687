// The smallest program built with pkg-config against an installed rpcguard:
//   g++ -std=c++17 main.cc $(pkg-config --cflags --libs rpcguard) -o x && ./x
// Prints rpcguard's version and creates a channel (no call is made).

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstring>

#include "rpcguard/rpcguard.h"

int main() {
  std::printf("rpcguard %s\n", rpcguard::Version());
  if (std::strcmp(rpcguard::Version(), RPCGUARD_VERSION_STRING) != 0) {
    std::fprintf(stderr, "headers %s, library %s\n", RPCGUARD_VERSION_STRING,
                 rpcguard::Version());
    return 1;
  }
  auto channel = rpcguard::CreateChannel(
      "127.0.0.1:1", grpc::InsecureChannelCredentials(), rpcguard::Options());
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", channel.status().ToString().c_str());
    return 1;
  }
  std::printf("channel created\n");
  return 0;
}
