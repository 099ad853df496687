// Copyright rpcguard authors.
//
// The chain benchmark's load generator (chain_common.h): an open loop. The
// i-th request is due at T0 + i / rate and is started then (or at once when
// the generator is behind) on the callback API, whatever the calls before
// it are doing, so that a slow chain never lowers the load offered to it
// (no coordinated omission). Each request's latency runs from its due time
// to its end.

#ifndef RPCGUARD_BENCH_CHAIN_GENERATOR_H_
#define RPCGUARD_BENCH_CHAIN_GENERATOR_H_

#include <string>

#include "absl/time/time.h"
#include "bench/chain_common.h"

namespace rpcguard {
namespace bench {
namespace chain {

struct GeneratorOptions {
  std::string target;  // A, or C for kSingleTier
  Client client = Client::kNone;
  Scenario scenario = Scenario::kOutage;
  double rate = 200;  // Get requests a second
  absl::Duration duration = absl::Seconds(12);
  absl::Duration deadline = absl::Seconds(1);  // each request's
};

// Connects, makes 10 warm-up calls (none when the scenario IsCold), says
// "ready", waits for "start T0", runs the load, then writes "result {JSON}"
// on stdout: of the Get requests, requests, ok, codes, p50/p99 latency (ms,
// every request and the successful ones) and per bucket "sent" (by due
// time), "ok" and "failed" (by end time); "breaker_openings" (its
// rpcguard client's breakers: 0 for the other clients); with an
// independent method (kSplit), the same counts of its Puts
// ("independent_requests", "independent_ok", "independent_codes",
// "independent_ok_by_end", "independent_failed_by_end"). Returns the
// process's exit code.
int RunGenerator(const GeneratorOptions& options);

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_GENERATOR_H_
