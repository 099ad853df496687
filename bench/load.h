// Copyright rpcguard authors.
//
// A closed-loop load driver: `concurrency` callers each make one
// FaultService.Get at a time, every call with the same deadline, until the
// calls are spent or the time is up. Measures what the client process pays:
// CPU (getrusage, every thread of the process), wall time, each call's
// latency and status, and the growth of the process's resident set.
//
// Sync stub: one thread per caller, each blocking in the generated stub.
// Callback stub: `concurrency` chains on the generated callback stub, each
// starting its next call from the completion of the previous one; no thread
// of the driver's own waits between calls. A paced callback caller (`pace`)
// is a thread that starts a callback call, waits for its completion, then
// sleeps until its next turn: gRPC's callback threads must not sleep.

#ifndef RPCGUARD_BENCH_LOAD_H_
#define RPCGUARD_BENCH_LOAD_H_

#include <grpcpp/support/status.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

namespace rpcguard {
namespace bench {

enum class StubKind { kSync, kCallback };

// "sync", "callback".
absl::string_view StubName(StubKind stub);

// A call that ends more than this after its deadline counts as late.
inline constexpr absl::Duration kLateSlack = absl::Milliseconds(20);

struct LoadSpec {
  StubKind stub = StubKind::kSync;
  int concurrency = 1;
  // Calls to make at most.
  int64_t calls = 1000;
  // No call starts after this much time (infinite: only `calls` limit).
  absl::Duration max_time = absl::InfiniteDuration();
  // Every call's deadline, from its start.
  absl::Duration deadline = absl::Milliseconds(100);
  // Each caller starts a call at most once per `pace` (zero: back to back),
  // so that the load offered does not depend on how fast calls end.
  absl::Duration pace = absl::ZeroDuration();
  // Every call is operation "bench", or, when this is set, an operation of
  // its own: this followed by the call's index.
  std::string op_id_prefix;
  // The server fails the first `fail_first` attempts of each operation with
  // UNAVAILABLE (FaultRequest.fail_first).
  int fail_first = 0;
  // When set, called once from a thread of the driver when `sample_after`
  // of the load has passed (not when the load ends sooner), with the number
  // of calls completed so far.
  std::function<void(int64_t completed)> sample;
  absl::Duration sample_after = absl::Seconds(1);
  // Names the load in a callgrind dump when run under valgrind.
  std::string label = "load";
};

struct LoadResult {
  int64_t calls = 0;        // calls made (and ended)
  int64_t ok = 0;           // of which OK
  int64_t late = 0;         // of which ended > deadline + kLateSlack
  absl::Duration wall;      // from the first call's start to the last end
  double cpu_seconds = 0;   // user + system CPU of this process meanwhile
  double user_seconds = 0;  // of which user
  // Context switches of this process meanwhile (getrusage: voluntary, e.g.
  // a thread waiting for another, plus involuntary).
  int64_t context_switches = 0;
  int64_t rss_growth_kib = 0;
  // Calls per final status code (0..16).
  std::array<int64_t, 17> codes = {};
  // Every call's latency in nanoseconds, sorted.
  std::vector<int64_t> latency_ns;

  // The q-quantile (0..1) of latency in milliseconds, nearest rank; 0 when
  // there were no calls.
  double LatencyMs(double q) const;
};

// Runs `spec` against `stub`; blocks until every call has ended.
LoadResult RunLoad(rpcguard::testing::v1::FaultService::Stub& stub,
                   const LoadSpec& spec);

// One of the loads RunLoads runs side by side.
struct StubLoad {
  rpcguard::testing::v1::FaultService::Stub* stub;
  LoadSpec spec;
};

// Runs every load at once, each on a thread of its own, and pools their
// calls, statuses and latencies. CPU, context switches and RSS growth are
// the process's over the whole run (not the sum of the loads', which would
// count them once per load); wall is the longest load's. Use distinct
// op_id_prefix values when the loads set one.
LoadResult RunLoads(const std::vector<StubLoad>& loads);

// What this process has used so far (getrusage(RUSAGE_SELF): every thread).
struct ProcessUsage {
  double cpu_seconds = 0;  // user + system
  double user_seconds = 0;
  int64_t context_switches = 0;
};
ProcessUsage GetProcessUsage();

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_LOAD_H_
