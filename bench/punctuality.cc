// Copyright rpcguard authors.
//
// punctuality: how late calls through rpcguard end after their deadlines,
// beside a plain channel with the same deadline (wait-for-ready where
// rpcguard waits for a connection) in the same run, with the machine loaded
// by busy processes (tests/testing/punctuality.h has the scenarios).
// A markdown table on stdout, one row per scenario and stub API.
//
//   ./bazelw run -c opt //bench:punctuality -- [--rounds=N] [--load=N]
//
//   --rounds=N  rounds of 4 calls per client and case (default 40)
//   --load=N    busy processes per core meanwhile (default 2; 0: none)

#include "tests/testing/punctuality.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Lateness;
using ::rpcguard::testing::PunctualityCase;
using ::rpcguard::testing::PunctualityScenario;
using ::rpcguard::testing::PunctualityScenarioName;
using ::rpcguard::testing::StubKind;

int Main(int argc, char** argv) {
  int rounds = 40;
  int load = 2;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--rounds=", 9) == 0 &&
        absl::SimpleAtoi(arg + 9, &rounds) && rounds > 0) {
      continue;
    }
    if (std::strncmp(arg, "--load=", 7) == 0 &&
        absl::SimpleAtoi(arg + 7, &load) && load >= 0) {
      continue;
    }
    std::fprintf(stderr,
                 "punctuality: unknown or bad flag %s\n"
                 "usage: punctuality [--rounds=N>0] [--load=N>=0]\n",
                 arg);
    return 2;
  }
  std::printf(
      "Lateness after the deadline (ms), %d busy processes per core, %d "
      "rounds of 4 calls per client (the cluster: 24 calls); control = a "
      "plain channel, same deadline, same run\n\n",
      load, rounds);
  std::printf(
      "| scenario | stub | control p50 | control p99 | control max | "
      "rpcguard p50 | rpcguard p99 | rpcguard max | within control + 5 ms |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (PunctualityScenario scenario : testing::kPunctualityScenarios) {
    for (StubKind kind :
         {StubKind::kSync, StubKind::kAsync, StubKind::kCallback}) {
      PunctualityCase c(scenario, kind);
      if (!c.status().ok()) {
        std::fprintf(stderr, "punctuality: %s\n",
                     c.status().ToString().c_str());
        return 1;
      }
      Lateness rpcguard, control;
      c.Measure(rounds, load, &rpcguard, &control);
      const bool within =
          rpcguard.Quantile(0.99) <= control.Quantile(0.99) + 5 &&
          rpcguard.Quantile(1.0) <= control.Quantile(1.0) + 5;
      std::printf(
          "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
          PunctualityScenarioName(scenario).c_str(), KindName(kind).c_str(),
          control.Quantile(0.5), control.Quantile(0.99), control.Quantile(1.0),
          rpcguard.Quantile(0.5), rpcguard.Quantile(0.99),
          rpcguard.Quantile(1.0), within ? "yes" : "no");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace rpcguard

int main(int argc, char** argv) { return rpcguard::bench::Main(argc, argv); }
