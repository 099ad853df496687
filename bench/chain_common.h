// Copyright rpcguard authors.
//
// What every process of the chain benchmark (//bench:chain) agrees on: the
// clients compared, the faults injected at the store, the time buckets
// every process counts in, and the line protocol the driver speaks with its
// children over their stdin and stdout.
//
//   generator --(client)--> A --(client)--> B --(client)--> C (store)
//
// One binary, four roles (--role=): the driver (the default) forks and execs
// the store, B, A and the generator for each run, so that every run starts
// with fresh processes (no breaker, budget or token bucket carries over) and
// the driver itself never creates a gRPC object.
//
// The protocol, one line each way:
//   child  -> driver  "listening on 127.0.0.1:PORT" (servers) or "ready"
//                     (the generator, once its channel is connected);
//   driver -> child   "start T0" (T0: Unix nanoseconds, the run's time zero,
//                     shared through CLOCK_REALTIME: every process is on one
//                     machine);
//   generator -> driver  "result {JSON}" once its last call has ended;
//   driver -> server  "stop"; the server answers "counts N0 N1 ..." (the
//                     Get attempts it received per bucket since T0); the
//                     store then adds "max_per_request M" (the most attempts
//                     any one generator request made at it), a tier
//                     "breaker_openings K" (how often a breaker of its
//                     client opened: rpcguard's clients; 0 for the others),
//                     and exits.
//
// Every generator request names itself in `op_id` ("r<index>"; a Put of
// kSplit "p<index>"); A and B pass the request on as it came, so that the
// store counts each one's attempts.
//
// Busy loops (--load=N): the driver starts N `sh -c 'while :; do :; done'`
// processes beside the runs of that load, so that the chain competes for
// the CPU as on a busy machine, and kills them when those runs are over.

#ifndef RPCGUARD_BENCH_CHAIN_COMMON_H_
#define RPCGUARD_BENCH_CHAIN_COMMON_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace bench {
namespace chain {

// The client every tier uses to call the next one. The same at every tier
// of a run.
enum class Client {
  kNone,                // a plain channel: one attempt
  kNaive,               // a plain channel and an application loop: up to 3
                        // attempts on UNAVAILABLE or RESOURCE_EXHAUSTED, no
                        // backoff (what a hand-written retry usually is)
  kGrpc,                // gRPC's retry: retryPolicy, 3 attempts, no throttling
  kGrpcThrottled,       // the same plus retryThrottling {10, 0.1}
  kRpcguard,            // rpcguard::CreateChannel, its defaults, same policy
  kRpcguardFleet,       // the same plus rpcguard's server interceptor on A, B
  kRpcguardFleetNoMax,  // rpcguard_fleet, but a give-up by max_attempts
                        // stays home (what the default's choice is
                        // measured against)
  kSingleTier,          // the generator calls C directly through rpcguard
};

inline constexpr Client kAllClients[] = {Client::kNone,
                                         Client::kNaive,
                                         Client::kGrpc,
                                         Client::kGrpcThrottled,
                                         Client::kRpcguard,
                                         Client::kRpcguardFleet,
                                         Client::kRpcguardFleetNoMax,
                                         Client::kSingleTier};

// Whether A and B run rpcguard's server interceptor.
inline bool IsFleet(Client client) {
  return client == Client::kRpcguardFleet ||
         client == Client::kRpcguardFleetNoMax;
}

// "none", "naive", "grpc", "grpc_throttled", "rpcguard", "rpcguard_fleet",
// "rpcguard_fleet_nomax", "single_tier".
absl::string_view ClientName(Client client);
absl::StatusOr<Client> ParseClient(absl::string_view name);

// Whether this build has rpcguard's server interceptor
// (interceptors/rpcguard/server.h) linked in; without it the fleet clients
// are refused.
bool HaveFleet();

// The faults at the store. The first five start at a quarter of the run,
// after healthy traffic (kSplit's at a sixth); the overloads marked "cold" are
// on from the first request (T0) to the end of the run, with no healthy history
// anywhere: no warm-up call is made, every tier's channel is connected but has
// carried nothing.
enum class Scenario {
  kOutage,          // every call fails UNAVAILABLE (the store answers; its
                    // listener stays up, so that every attempt is counted)
  kFail60,          // 60% of calls fail UNAVAILABLE, drawn at random
  kOverload2x,      // the store's capacity drops to half the offered load
  kOverload4x,      // ... to a quarter
  kBlip,            // 1 s of UNAVAILABLE (0.5 s with --quick)
  kOverload2xCold,  // half the offered load, from T0 to the end (cold)
  kOverload4xCold,  // a quarter, from T0 to the end (cold)
  kSustained2x,     // half, from T0, for a run of kSustainedDuration (cold)
  // Two methods: Get goes down the chain to the store, Put is answered by B
  // (the middle above the store) on its own. The store is down from a sixth
  // to half of the run (12 s: 2 s to 6 s), long enough for B's breaker on
  // it to open, then overloaded 2x (of the Get load) to three quarters
  // (9 s).
  kSplit,
};

inline constexpr Scenario kAllScenarios[] = {
    Scenario::kOutage,         Scenario::kFail60,
    Scenario::kOverload2x,     Scenario::kOverload4x,
    Scenario::kBlip,           Scenario::kOverload2xCold,
    Scenario::kOverload4xCold, Scenario::kSustained2x,
    Scenario::kSplit};

// "outage", "fail60", "overload2x", "overload4x", "blip", "overload2x_cold",
// "overload4x_cold", "sustained2x", "split".
absl::string_view ScenarioName(Scenario scenario);
absl::StatusOr<Scenario> ParseScenario(absl::string_view name);

// The length of kSustained2x's run, whatever --duration says: a sustained
// overload is one that outlasts every short window (the breaker's 10 s, the
// burst rule's 1 s).
inline constexpr absl::Duration kSustainedDuration = absl::Seconds(30);

// The run's length for `scenario`: kSustainedDuration for kSustained2x,
// else `duration`.
absl::Duration ScenarioDuration(Scenario scenario, absl::Duration duration);

// Whether the scenario starts cold: no warm-up call before T0 (the
// generator's and every tier's channel is connected, nothing more).
bool IsCold(Scenario scenario);

// Whether the generator also calls Put, the method the store has no part in
// (kSplit): every other request (even indices) sends a Put beside its Get.
// Not for kSingleTier: it has no middle to answer Put.
bool HasIndependentMethod(Scenario scenario, Client client);

// The store's concurrency limit while overloaded: it serves this many calls
// at once (each for max_concurrent / capacity) and rejects the rest at once.
inline constexpr int kStoreConcurrency = 4;

// Every series is counted in buckets of this length from T0.
inline constexpr absl::Duration kBucket = absl::Milliseconds(100);
inline constexpr int kBucketsPerSecond = 10;

// When and how the store misbehaves, relative to T0.
struct FaultPlan {
  Scenario scenario = Scenario::kOutage;
  // The fault's window, for the figures ("over the fault", recovery after
  // its end).
  absl::Duration start;
  absl::Duration end;
  // The fault lasts to the end of the run (and past it, for the last
  // calls' retries): there is no recovery to measure.
  bool to_the_end = false;
  // UNAVAILABLE for this share (0-100) of calls in [start, fail_end).
  int fail_percent = 0;
  absl::Duration fail_end;
  // Overload: in [overload_start, end) (to the end: from overload_start on)
  // the store serves at most `max_concurrent` calls at once, each for
  // `service_time`, and rejects the rest with RESOURCE_EXHAUSTED (capacity
  // = max_concurrent / service_time). Zero: no limit. Outside the window
  // every call is answered at once.
  int max_concurrent = 0;
  absl::Duration service_time;
  absl::Duration overload_start;

  // Whether a call arriving `since` T0 fails UNAVAILABLE (before the draw
  // of fail_percent), and whether it meets the concurrency limit.
  bool Failing(absl::Duration since) const {
    return fail_percent > 0 && since >= start && since < fail_end;
  }
  bool Limited(absl::Duration since) const {
    return max_concurrent > 0 && since >= overload_start &&
           (to_the_end || since < end);
  }
};

// The plan of `scenario` for a run of `duration` (ScenarioDuration's) at
// `rate` requests a second (Get requests, for kSplit). The warm faults'
// window starts at a quarter of the run and lasts a third of it (12 s: 3 s
// to 7 s), so that the run goes on for longer after the fault than before
// it, to see recovery; the blip lasts `blip` from the same start. The cold
// overloads last from T0 to the end. kSplit: down from a sixth to half of
// the run, overloaded 2x from half to three quarters. Overload's capacity
// is rate / 2 or rate / 4, kStoreConcurrency calls at once, each for
// kStoreConcurrency / capacity.
FaultPlan MakeFaultPlan(Scenario scenario, absl::Duration duration, double rate,
                        absl::Duration blip);

// Attempts received per bucket since T0, by any thread. Attempts before T0
// (the warm-up) are not counted; attempts past the last bucket count in it.
class BucketCounter {
 public:
  explicit BucketCounter(int buckets);

  void Start(absl::Time t0);
  void Add(absl::Time now);
  // Seconds since T0, or nullopt before Start.
  std::optional<absl::Duration> SinceStart(absl::Time now) const;
  std::vector<int64_t> Snapshot() const;

 private:
  // Written once by Start (the driver's "start" line), read by every
  // handler: Unix nanoseconds, 0 before Start.
  std::atomic<int64_t> t0_ns_{0};
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
  int size_;
};

// The number of buckets a process counts: the run plus 30 s of drain.
int BucketsFor(absl::Duration duration);

// Reads one line from stdin (blocking), without the newline; nullopt at
// EOF (the driver is gone).
std::optional<std::string> ReadStdinLine();
// Writes `line` and a newline to stdout and flushes.
void WriteStdoutLine(absl::string_view line);

// Parses "start T0"; nullopt when the line is not one.
std::optional<absl::Time> ParseStart(absl::string_view line);

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_CHAIN_COMMON_H_
