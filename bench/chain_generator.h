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
  double rate = 200;  // requests a second
  absl::Duration duration = absl::Seconds(12);
  absl::Duration deadline = absl::Seconds(1);  // each request's
};

// Connects, says "ready", waits for "start T0", runs the load, then writes
// "result {JSON}" on stdout: requests, ok, codes, p50/p99 latency (ms, every
// request and the successful ones) and per bucket "sent" (by due time),
// "ok" and "failed" (by end time). Returns the process's exit code.
int RunGenerator(const GeneratorOptions& options);

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_GENERATOR_H_
