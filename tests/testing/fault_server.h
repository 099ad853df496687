// Copyright rpcguard authors.
//
// FaultServer: a real gRPC server on 127.0.0.1 running the fault-injecting
// rpcguard.testing.v1.FaultService (proto/rpcguard/testing/v1/fault.proto),
// and beside it the Streams service of streams.proto (fault_streams.h).
// Used by the end-to-end tests, the demo and the benchmarks. It records what
// every attempt carried, so tests assert on what the server really saw.

#ifndef RPCGUARD_TESTS_TESTING_FAULT_SERVER_H_
#define RPCGUARD_TESTS_TESTING_FAULT_SERVER_H_

#include <grpcpp/server.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/testing/fault_streams.h"

namespace rpcguard {
namespace testing {

// What the server saw of one operation (one op_id).
struct OpRecord {
  int attempts = 0;
  std::vector<std::string> keys;             // idempotency-key per attempt
  std::vector<std::string> attempt_headers;  // rpcguard-attempt per attempt
  std::vector<absl::Time> arrivals;          // when each attempt arrived
  std::vector<std::string> authorities;      // :authority per attempt
  std::vector<absl::Time> deadlines;  // each attempt's deadline as received
  int side_effects = 0;  // Create/Charge side effects actually applied
  // Every metadata key any attempt carried (gRPC's own pseudo-headers and
  // "grpc-" keys included as gRPC shows them to a server).
  std::set<std::string> metadata_keys;
};

class FaultServer {
 public:
  // Starts the server on 127.0.0.1, on `port` (0: an ephemeral one). Check
  // ok() for a port already taken.
  explicit FaultServer(int port = 0);

  // Starts the server on `host` ("0.0.0.0": every address, so that a test
  // can reach it at many distinct targets such as 127.0.3.7:<port>, since
  // Linux routes all of 127.0.0.0/8 to loopback). address() still says
  // 127.0.0.1.
  FaultServer(int port, const std::string& host);

  // Whether the server is listening.
  bool ok() const { return server_ != nullptr && port_ != 0; }
  int port() const { return port_; }
  ~FaultServer();

  // "127.0.0.1:<port>".
  const std::string& address() const { return address_; }

  // A snapshot of what the server saw for `op_id` (empty if nothing).
  OpRecord Op(const std::string& op_id) const;

  // Attempts received in all, by every method.
  int64_t total_attempts() const;

  // Server-wide faults (see ControlRequest in fault.proto). `late_percent`
  // of attempts, drawn at random, answer `late_ms` later still.
  void SetMode(int fail_percent, int delay_ms, bool hang,
               int apply_then_fail_percent, int capacity_per_second = 0,
               int late_percent = 0, int late_ms = 0);

  // Attempts rejected for capacity so far (capacity_per_second).
  int64_t shed_attempts() const;

  // Stops accepting calls and waits for those in flight.
  void Shutdown();

  class Impl;

 private:
  class ControlService;
  std::unique_ptr<Impl> impl_;
  // The Streams service (fault_streams.h), for the stream benchmarks.
  std::unique_ptr<FaultStreams> streams_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_FAULT_SERVER_H_
