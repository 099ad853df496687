// Copyright rpcguard authors.
//
// The server roles of the chain benchmark (chain_common.h):
//
//   store (C)  FaultService.Get with the scenario's faults, answered on the
//              callback API; delayed answers (overload) wait on a timer
//              thread of its own, never on a gRPC thread;
//   tier (A, B)  FaultService.Get whose handler makes one call to the next
//              tier through the client under test, its context made by
//              ClientContext::FromServerContext (deadline and cancellation
//              propagated), and answers with that call's status; Put the
//              same, except on the tier told to answer it itself (B in
//              kSplit), which answers OK at once.
//
// Both count the attempts they receive per bucket (chain_common.h), speak
// the driver's line protocol on stdin and stdout, and end the process on
// "stop" without destroying their channels or server (a run's process has
// nothing to clean up, and gRPC 1.51 can abort when the last channel that
// made callback calls goes away on one of its own threads:
// bench/clients.h, HoldCallbackThreads).

#ifndef RPCGUARD_BENCH_CHAIN_SERVERS_H_
#define RPCGUARD_BENCH_CHAIN_SERVERS_H_

#include <string>

#include "absl/time/time.h"
#include "bench/chain_common.h"

namespace rpcguard {
namespace bench {
namespace chain {

struct StoreOptions {
  FaultPlan plan;
  absl::Duration duration;  // the run's, to size the counters
  // Generator requests in the run ("r0" .. "r<requests - 1>"): the per-
  // request counts are this many, whatever op_id a caller sends.
  int requests = 0;
};

struct TierOptions {
  std::string target;  // the next tier
  Client client = Client::kNone;
  absl::Duration duration;
  // Put is answered here, not passed on (B, in kSplit).
  bool answers_put = false;
};

// Each serves on 127.0.0.1 (an ephemeral port) until the driver says stop
// or goes away; returns the process's exit code.
int RunStore(const StoreOptions& options);
int RunTier(const TierOptions& options);

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_SERVERS_H_
