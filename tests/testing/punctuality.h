// Copyright rpcguard authors.
//
// Punctuality: how late calls through rpcguard end after their deadlines,
// beside a control (a plain channel, the same deadline, wait-for-ready where
// rpcguard waits for a connection) measured in the same run, on a machine
// loaded by busy processes. A loaded machine is late for gRPC too, so
// rpcguard is judged against the control, never against a fixed bound.
// tests/e2e/punctuality_e2e_test.cc asserts it; bench/punctuality.cc prints
// the figures.
//
// Thread-safety: a PunctualityCase is used from one thread.

#ifndef RPCGUARD_TESTS_TESTING_PUNCTUALITY_H_
#define RPCGUARD_TESTS_TESTING_PUNCTUALITY_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "proto/rpcguard/testing/v1/streams.grpc.pb.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace testing {

enum class PunctualityScenario {
  kHold,            // the server never answers in time
  kRetrying,        // every attempt fails after 15 ms: retries to the end
  kNoServer,        // nothing listens: attempts wait for a connection
  kClusterDown,     // three addresses, none listening, 1.5 s deadlines
  kStreamNoServer,  // server streams to an address nothing listens on
};
inline constexpr PunctualityScenario kPunctualityScenarios[] = {
    PunctualityScenario::kHold, PunctualityScenario::kRetrying,
    PunctualityScenario::kNoServer, PunctualityScenario::kClusterDown,
    PunctualityScenario::kStreamNoServer};

// "Hold", "Retrying", "NoServer", "ClusterDown", "StreamNoServer".
std::string PunctualityScenarioName(PunctualityScenario s);

// Processes that keep every core busy while they live: `per_core` of them
// per core (0: none). Each is a new program (fork, exec of sh): nothing of
// this process's threads is touched.
class BusyLoops {
 public:
  explicit BusyLoops(int per_core);
  ~BusyLoops();
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// How late calls ended: end - deadline, in milliseconds, one per call.
struct Lateness {
  std::vector<double> ms;
  int ok = 0;  // calls that succeeded (none should: the deadline ends them)
  double Quantile(double q) const;
  // "p50 X ms, p99 Y ms, max Z ms over N calls".
  std::string Describe() const;
};

// One scenario on one stub API: a server (or none), rpcguard's channel and
// the control's, set up once.
class PunctualityCase {
 public:
  PunctualityCase(PunctualityScenario scenario, StubKind kind);
  // Not OK when rpcguard's channel could not be made.
  const absl::Status& status() const { return status_; }
  // One measurement: `rounds` rounds of 4 calls each (the cluster: 3 rounds
  // of 8 calls 90 ms apart, side by side), rpcguard's and the control's
  // interleaved, with `busy_per_core` busy processes per core meanwhile.
  void Measure(int rounds, int busy_per_core, Lateness* rpcguard,
               Lateness* control);

 private:
  const PunctualityScenario scenario_;
  const StubKind kind_;
  absl::Status status_;
  FaultServer server_;
  std::string target_;
  rpcguard::testing::v1::FaultRequest rpcguard_request_;
  rpcguard::testing::v1::FaultRequest control_request_;
  bool control_waits_ = false;
  std::unique_ptr<rpcguard::testing::v1::FaultService::Stub> rpcguard_stub_;
  std::unique_ptr<rpcguard::testing::v1::FaultService::Stub> control_stub_;
  std::unique_ptr<rpcguard::testing::v1::Streams::Stub> rpcguard_streams_;
  std::unique_ptr<rpcguard::testing::v1::Streams::Stub> control_streams_;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_PUNCTUALITY_H_
