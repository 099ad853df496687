// Copyright rpcguard authors.
//
// The chain benchmark's driver (chain_common.h): for every scenario, client
// and run, starts the store, B, A and the generator (this binary again,
// each with its role), runs the load, collects the generator's result and
// every server's attempt counts, then reports per scenario and client the
// median of the runs: attempts at the store per generator request (over the
// run, over the fault window, and in the worst 1-s window), goodput and
// success ratio, p50/p99 latency at the generator, and the recovery time
// (from the fault's end until the start of the first 1-s window whose
// goodput, successes by end time, is back to 95% of the load offered in
// it; the window is cut short at the run's end, down to 0.5 s; none
// within the run: null in JSON, "never" in the table; a fault that lasts
// to the end has none to measure: null, "-"), the breaker openings of the
// generator's, A's and B's clients, and with an independent method (kSplit)
// its success, as markdown tables on stdout and, with a path, as JSON with
// the per-second series and every run's figures (with the 1-minute load
// average when it started).

#ifndef RPCGUARD_BENCH_CHAIN_DRIVER_H_
#define RPCGUARD_BENCH_CHAIN_DRIVER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/chain_common.h"

namespace rpcguard {
namespace bench {
namespace chain {

struct DriverOptions {
  std::vector<Scenario> scenarios;
  std::vector<Client> clients;
  // Busy loops beside the runs (chain_common.h): the matrix runs once at
  // each of these levels, the loops started before a level's first run and
  // killed after its last.
  std::vector<int> loads = {0};
  double rate = 200;
  absl::Duration duration = absl::Seconds(12);
  absl::Duration deadline = absl::Seconds(1);
  absl::Duration blip = absl::Seconds(1);
  int runs = 1;
  bool quick = false;
  std::string json_path;  // empty: no JSON
};

// Runs the matrix; returns the process's exit code (1 when a run failed:
// the others are still reported).
int RunDriver(const DriverOptions& options);

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_DRIVER_H_
