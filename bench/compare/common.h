// Copyright rpcguard authors.
//
// What every scenario family of //bench:compare shares: the command line
// (Flags), the size of a run (Plan), the server (Env), connecting and warming
// clients, and the one result type, Measured: one client through one
// scenario, its rounds pooled.

#ifndef RPCGUARD_BENCH_COMPARE_COMMON_H_
#define RPCGUARD_BENCH_COMPARE_COMMON_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/clients.h"
#include "bench/compare/report.h"
#include "bench/load.h"
#include "bench/server_process.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

namespace rpcguard {
namespace bench {

struct Flags {
  bool quick = false;
  bool headline = false;
  int64_t soak = -1;  // -1: no soak; 0: the default count
  std::string json;
  std::string only;
  // Empty: each family's own clients (kAllClients, kEvidenceClients, ...).
  std::vector<ClientKind> clients;
  int64_t calls = 0;
  double seconds = 0;
  int rounds = 0;
  int warmup = -1;
  int deadline_ms = 100;
  int hedging_delay_ms = 10;
  int soak_fail_percent = 10;
  std::string server;
  bool callback_keepalive = true;
};

// How big a run is: the flags with their defaults filled in.
struct Plan {
  int rounds;
  int64_t calls;       // per cell, call-count scenarios
  int64_t tail_calls;  // per round of a tail or slowdown cell
  double seconds;      // per cell, time-bound scenarios (0: the scenario's)
  int64_t time_cap;    // most calls of a time-bound cell
  int warmup;
  absl::Duration deadline;
  absl::Duration hedging_delay;  // the matrix's hedged clients
};

Plan MakePlan(const Flags& flags);

// The given --clients, else `defaults`.
template <size_t N>
std::vector<ClientKind> ClientsOr(const Flags& flags,
                                  const ClientKind (&defaults)[N]) {
  if (!flags.clients.empty()) return flags.clients;
  return std::vector<ClientKind>(std::begin(defaults), std::end(defaults));
}

struct Env {
  std::string address;
  ServerControl* control;
  // The fault server binary, for scenarios that start servers of their own.
  std::string server_path;
};

struct Machine {
  std::string cpu;
  int cores = 0;
  std::string kernel;
  std::string grpc;
  std::string loadavg;
};

Machine DescribeMachine();
// "CPU, N cores, kernel, gRPC v, load average at start L"
std::string MachineLine(const Machine& m);

// The members every JSON report opens with.
JsonValue RunJsonHeader(const Flags& flags, const Plan& plan,
                        const Machine& machine, absl::string_view mode);

// A channel of `client`'s kind, connected (10 s at most).
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectedChannel(
    ClientKind client, const std::string& address, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state = nullptr);

// Runs `warmup` calls with the faults off; fails when fewer than all
// succeed (the server or the client is broken, not under test).
absl::Status Warmup(rpcguard::testing::v1::FaultService::Stub& stub,
                    const Env& env, StubKind kind, int concurrency, int warmup,
                    absl::Duration deadline, absl::string_view what);

// Warms the process before the first measurement (gRPC's threads, code
// paths, allocator), so that the first client measured is not the one that
// pays for it.
absl::Status WarmProcess(const Env& env, const std::vector<ClientKind>& clients,
                         int calls, absl::Duration deadline);

// Warm-up on a channel of the client's kind that is then dropped: the
// measured channels start fresh, while gRPC's retry-throttling tokens, which
// gRPC keeps per server name for the whole process, start full.
absl::Status WarmupApart(const Env& env, ClientKind client,
                         const RetrySettings& retry, const Plan& plan,
                         absl::string_view what);

bool IsRpcguard(ClientKind client);

// A fresh registry for an rpcguard client (so that a breaker, budget or
// hedge cap never carries state over from the last measurement); null for
// the others.
absl::StatusOr<std::shared_ptr<RpcguardState>> FreshState(ClientKind client);

double Median(std::vector<double> v);

// One round of one client through one scenario.
struct Round {
  LoadResult load;
  int64_t attempts = 0;  // at the server, during the load
  // Calls and attempts after the first second of the load, when it lasted
  // that long.
  bool sampled = false;
  int64_t calls_after_1s = 0;
  int64_t attempts_after_1s = 0;
  // rpcguard only (-1 otherwise): attempts that found no connection, and
  // breaker transitions to open.
  int64_t not_sent = -1;
  int64_t breaker_openings = -1;
};

// Fills in what an rpcguard client saw (nothing when `state` is null).
void ReadState(const std::shared_ptr<RpcguardState>& state, Round* r);

// The one result type: one client through one scenario, every round, and
// the rounds pooled (Aggregate).
struct Measured {
  // The scenario's key (as --only matches it) and its title in tables.
  std::string key;
  std::string title;
  ClientKind client;
  std::vector<Round> rounds;

  // Pooled over rounds.
  LoadResult pooled;
  int64_t attempts = 0;
  int64_t calls_after_1s = 0;
  int64_t attempts_after_1s = 0;
  int64_t not_sent = -1;
  int64_t breaker_openings = -1;
  // Medians of rounds.
  double calls_per_s = 0;
  double cpu_us_per_call = 0;
  double user_us_per_call = 0;
  double rss_growth_kib = 0;

  void Aggregate();

  double success() const { return 100 * Share(pooled.ok, pooled.calls); }
  double attempts_per_call() const { return Share(attempts, pooled.calls); }
  double context_switches_per_call() const {
    return Share(pooled.context_switches, pooled.calls);
  }
  // Needs enough calls after the first second to mean anything.
  std::optional<double> attempts_per_call_after_1s() const;
  // Each round's CPU per call, in µs.
  std::vector<double> cpu_us_rounds() const;
};

// Runs `rounds` rounds of every cell, rotating the cells' order every round
// so that none always runs first. `run(cell, round)` measures one round.
template <typename Run>
absl::Status RunRounds(int rounds, std::vector<Measured>& cells, Run run) {
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < cells.size(); ++k) {
      Measured& cell = cells[(k + round) % cells.size()];
      absl::StatusOr<Round> r = run(cell, round);
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat(cell.key, " ", ClientName(cell.client),
                                         ": ", r.status().message()));
      }
      cell.rounds.push_back(*std::move(r));
    }
  }
  for (Measured& cell : cells) cell.Aggregate();
  return absl::OkStatus();
}

// The JSON of a list of numbers, each "%.6g".
JsonValue NumbersJson(const std::vector<double>& v);
// Calls per status code, codes that never came left out: {"0": 12, "14": 3}.
JsonValue CodesJson(const std::array<int64_t, 17>& codes);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_COMPARE_COMMON_H_
