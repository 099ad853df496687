// Copyright rpcguard authors.
//
// chain: retries down a chain of services. An open-loop generator calls
// service A, A calls B, B calls the store C, each hop through the client
// under test; C misbehaves for a while in the middle of the run. How many
// attempts reach C for one request, what gets through, how slowly, and how
// soon after the fault goodput is back. chain_common.h describes the
// processes and their protocol, chain_driver.h the figures.
//
//   ./bazelw run -c opt //bench:chain -- [--quick] [--json=PATH]
//   ./bazelw run -c opt //bench:chain -- --scenarios=outage
//       --clients=grpc,rpcguard --runs=3
//   ./bazelw run -c opt //bench:chain -- --scenarios=overload2x_cold
//       --clients=none,rpcguard_fleet --load=0,2 --runs=5
//
// See kUsage for every flag.

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/chain_common.h"
#include "bench/chain_driver.h"
#include "bench/chain_generator.h"
#include "bench/chain_servers.h"

namespace rpcguard {
namespace bench {
namespace chain {
namespace {

constexpr char kUsage[] =
    R"(chain: retries down a chain of services.
  generator --client--> A --client--> B --client--> C (store, faults)
Four processes on 127.0.0.1, the same client at every hop, 3 attempts a hop
for the retrying ones.

Flags:
  --scenarios=A,B   outage, fail60, overload2x, overload4x, blip (the fault
                    after healthy traffic), overload2x_cold, overload4x_cold,
                    sustained2x (overloaded from the first request, no
                    warm-up; sustained2x for 30 s whatever --duration says),
                    split (Get down to the store, Put answered by B; the
                    store down, then overloaded) (default all)
  --clients=A,B     none, naive, grpc, grpc_throttled, rpcguard,
                    rpcguard_fleet, rpcguard_fleet_nomax, single_tier
                    (default all this build has: the fleet clients need
                    rpcguard's server interceptor)
  --rate=N          requests a second from the generator (default 200; 100
                    with --quick)
  --duration=S      seconds of load per run (default 12; 4 with --quick);
                    the fault starts at a quarter of it and lasts a third
                    (12 s: 3 s to 7 s; blip: 1 s, 0.5 s with --quick)
  --deadline_ms=N   each request's deadline, propagated down (default 1000)
  --runs=N          runs per scenario and client; figures are medians
                    (default 1)
  --load=N[,M...]   busy loops (sh -c 'while :; do :; done') beside the
                    runs: the matrix runs once per level, e.g. --load=0,2
                    quiet then with two loops (default 0)
  --quick           the short settings above, for smoke tests
  --json=PATH       also write every figure and series as JSON to PATH
)";

struct Flags {
  std::string role = "driver";
  // Driver.
  std::string scenarios;
  std::string clients;
  double rate = 0;  // 0: the default of the mode
  double duration_s = 0;
  int64_t duration_ms = 0;  // the children's form
  int64_t deadline_ms = 1000;
  int64_t blip_ms = 0;
  int runs = 1;
  std::vector<int> loads = {0};
  bool quick = false;
  std::string json;
  // Children.
  std::string scenario;
  std::string client;
  std::string target;
  bool answers_put = false;
};

bool ParseFlag(absl::string_view arg, Flags& flags) {
  auto value = [&arg](absl::string_view name, absl::string_view* out) {
    absl::string_view rest = arg;
    if (!absl::ConsumePrefix(&rest, name) || !absl::ConsumePrefix(&rest, "=")) {
      return false;
    }
    *out = rest;
    return true;
  };
  absl::string_view v;
  if (arg == "--quick") {
    flags.quick = true;
    return true;
  }
  if (arg == "--answers_put") {
    flags.answers_put = true;
    return true;
  }
  if (value("--load", &v)) {
    flags.loads.clear();
    for (absl::string_view item : absl::StrSplit(v, ',')) {
      int n;
      if (!absl::SimpleAtoi(item, &n) || n < 0 || n > 64) return false;
      flags.loads.push_back(n);
    }
    return !flags.loads.empty();
  }
  if (value("--role", &v)) return (flags.role = std::string(v)), true;
  if (value("--scenarios", &v)) return (flags.scenarios = std::string(v)), true;
  if (value("--clients", &v)) return (flags.clients = std::string(v)), true;
  if (value("--scenario", &v)) return (flags.scenario = std::string(v)), true;
  if (value("--client", &v)) return (flags.client = std::string(v)), true;
  if (value("--target", &v)) return (flags.target = std::string(v)), true;
  if (value("--json", &v)) return (flags.json = std::string(v)), true;
  if (value("--rate", &v)) return absl::SimpleAtod(v, &flags.rate);
  if (value("--duration", &v)) return absl::SimpleAtod(v, &flags.duration_s);
  if (value("--duration_ms", &v))
    return absl::SimpleAtoi(v, &flags.duration_ms);
  if (value("--deadline_ms", &v))
    return absl::SimpleAtoi(v, &flags.deadline_ms);
  if (value("--blip_ms", &v)) return absl::SimpleAtoi(v, &flags.blip_ms);
  if (value("--runs", &v)) {
    return absl::SimpleAtoi(v, &flags.runs) && flags.runs > 0;
  }
  return false;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "chain: %s\n%s", message.c_str(), kUsage);
  return 2;
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!ParseFlag(argv[i], flags)) {
      return Fail(std::string("bad flag ") + argv[i]);
    }
  }
  const absl::Duration deadline = absl::Milliseconds(flags.deadline_ms);
  const absl::Duration duration = absl::Milliseconds(flags.duration_ms);

  if (flags.role == "store") {
    absl::StatusOr<Scenario> scenario = ParseScenario(flags.scenario);
    if (!scenario.ok()) return Fail(scenario.status().ToString());
    StoreOptions options;
    options.plan = MakeFaultPlan(*scenario, duration, flags.rate,
                                 absl::Milliseconds(flags.blip_ms));
    options.duration = duration;
    options.requests =
        static_cast<int>(flags.rate * absl::ToDoubleSeconds(duration));
    return RunStore(options);
  }
  if (flags.role == "tier" || flags.role == "generator") {
    absl::StatusOr<Client> client = ParseClient(flags.client);
    if (!client.ok()) return Fail(client.status().ToString());
    if (flags.role == "tier") {
      return RunTier({flags.target, *client, duration, flags.answers_put});
    }
    absl::StatusOr<Scenario> scenario = ParseScenario(flags.scenario);
    if (!scenario.ok()) return Fail(scenario.status().ToString());
    return RunGenerator(
        {flags.target, *client, *scenario, flags.rate, duration, deadline});
  }
  if (flags.role != "driver") return Fail("unknown role " + flags.role);

  DriverOptions options;
  options.quick = flags.quick;
  options.rate = flags.rate > 0 ? flags.rate : (flags.quick ? 100 : 200);
  options.duration = flags.duration_s > 0 ? absl::Seconds(flags.duration_s)
                                          : absl::Seconds(flags.quick ? 4 : 12);
  options.blip = absl::Milliseconds(flags.quick ? 500 : 1000);
  options.deadline = deadline;
  options.runs = flags.runs;
  options.loads = flags.loads;
  options.json_path = flags.json;
  if (flags.scenarios.empty()) {
    options.scenarios.assign(std::begin(kAllScenarios),
                             std::end(kAllScenarios));
  } else {
    for (absl::string_view name : absl::StrSplit(flags.scenarios, ',')) {
      absl::StatusOr<Scenario> scenario = ParseScenario(name);
      if (!scenario.ok()) return Fail(scenario.status().ToString());
      options.scenarios.push_back(*scenario);
    }
  }
  if (flags.clients.empty()) {
    for (Client client : kAllClients) {
      if (IsFleet(client) && !HaveFleet()) {
        std::fprintf(stderr,
                     "chain: %s left out: no server interceptor in this "
                     "build\n",
                     std::string(ClientName(client)).c_str());
        continue;
      }
      options.clients.push_back(client);
    }
  } else {
    for (absl::string_view name : absl::StrSplit(flags.clients, ',')) {
      absl::StatusOr<Client> client = ParseClient(name);
      if (!client.ok()) return Fail(client.status().ToString());
      if (IsFleet(*client) && !HaveFleet()) {
        return Fail(absl::StrCat(ClientName(*client),
                                 ": no server interceptor in this build"));
      }
      options.clients.push_back(*client);
    }
  }
  return RunDriver(options);
}

}  // namespace
}  // namespace chain
}  // namespace bench
}  // namespace rpcguard

int main(int argc, char** argv) {
  return rpcguard::bench::chain::Main(argc, argv);
}
