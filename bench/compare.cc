// Copyright rpcguard authors.
//
// compare: rpcguard side by side with a plain channel, a pass-through
// interceptor, a hijacking interceptor that makes one attempt and nothing
// else (the floor of the mechanism rpcguard is built on) and gRPC's built-in
// retry, against the fault server running as a separate process on
// 127.0.0.1. A second table measures issue 13's scenarios (a burst at start,
// a server restart, a brownout, an overload) for plain, gRPC's retry with
// and without retryThrottling, and rpcguard as shipped. A third measures
// issue 14's (a latency tail, a slowdown) for plain, gRPC's retry, rpcguard
// with retries only and rpcguard hedged.
//
//   ./bazelw run -c opt //bench:compare -- [--quick] [--json=PATH]
//   ./bazelw run -c opt //bench:compare -- --only=restart [--quick]
//   ./bazelw run -c opt //bench:compare -- --only=tail [--quick]
//   ./bazelw run -c opt //bench:compare -- --headline [--quick]
//   ./bazelw run -c opt //bench:compare -- --soak[=N] [--quick]
//
// See kUsage for every flag.

#include <grpcpp/grpcpp.h>
#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/clients.h"
#include "bench/load.h"
#include "bench/server_process.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

constexpr char kUsage[] =
    R"(compare: rpcguard beside a plain channel, a pass-through interceptor, a
hijacking interceptor that makes one attempt (hijack-floor) and gRPC's built-in
retry, same load, same deadline, server in its own process.

Modes (one per run):
  (default)          every scenario x client; a markdown table on stdout,
                     then issue 13's scenarios (burst, restart, brownout,
                     overload) for plain, grpc-retry, grpc-retry-throttled
                     and rpcguard in a second table, then issue 14's
                     (tail, slowdown) for plain, grpc-retry, rpcguard and
                     rpcguard hedged (fixed and adaptive delay) in a third
  --headline         no-failure client CPU per call, sync and callback stub,
                     1 caller: median of rounds, ratios vs plain,
                     pass-through and hijack-floor measured in the same run
  --soak[=N]         N calls through rpcguard (default 1,000,000; 100,000
                     with --quick), 10% UNAVAILABLE, reports RSS growth

Flags:
  --quick            small run: every scenario and client in under 2 minutes,
                     each of issue 13's in under 30 s
  --json=PATH        also write every figure as JSON to PATH
  --only=TEXT        only scenarios whose key contains TEXT, e.g. none/sync/c1
                     (keys: FAULT/STUB/cN, FAULT one of none fail10 fail30
                     outage slow; issue 13's burst restart brownout
                     overload; issue 14's tail slowdown)
  --clients=A,B      only these clients (plain, pass-through, hijack-floor,
                     grpc-retry, grpc-retry-throttled, rpcguard,
                     rpcguard-hedged, rpcguard-hedged-adaptive)
  --calls=N          calls per cell of a call-count scenario (default 3000;
                     300 with --quick), per round in --headline; per round
                     of a tail or slowdown cell (default 2000; 300 with
                     --quick)
  --seconds=S        length of a time-bound cell (outage, slow, brownout,
                     overload; default 4, with --quick 1.5 for outage, 1 for
                     slow, 2 for brownout and overload); restart runs 1 s,
                     0.5 s down, then 3 s (1.5 s with --quick)
  --rounds=N         rounds per cell (default 3, 1 with --quick; --headline:
                     7, 3 with --quick)
  --warmup=N         calls per cell before measuring, faults off
  --deadline_ms=D    every call's deadline (default 100)
  --hedging_delay_ms=D  the hedged clients' hedgingDelay in the main table
                     (default 10; bench/callgrind.sh sets 1000 so that
                     valgrind's slowdown does not make them hedge)
  --soak_fail_percent=P  faults during --soak (default 10)
  --server=PATH      the fault server binary (default: from runfiles)
  --callback_keepalive=0  do not hold gRPC's callback thread pool up for the
                     whole run (reproduces an abort; see bench/clients.h)
  --help             this text
)";

struct Flags {
  bool quick = false;
  bool headline = false;
  int64_t soak = -1;  // -1: no soak; 0: the default count
  std::string json;
  std::string only;
  // Empty: each table's own clients (kAllClients, kEvidenceClients).
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

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const bool has_value = eq != std::string::npos;
    const std::string value = has_value ? arg.substr(eq + 1) : "";
    auto bad = [&] {
      std::fprintf(stderr, "compare: bad flag %s\n\n%s", arg.c_str(), kUsage);
      return false;
    };
    auto int_value = [&](auto* out, int64_t min) {
      int64_t v;
      if (!has_value || !absl::SimpleAtoi(value, &v) || v < min) return false;
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(v);
      return true;
    };
    if (name == "--help" || name == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (name == "--quick" && !has_value) {
      flags->quick = true;
    } else if (name == "--headline" && !has_value) {
      flags->headline = true;
    } else if (name == "--soak") {
      if (!has_value) {
        flags->soak = 0;
      } else if (!int_value(&flags->soak, 1)) {
        return bad();
      }
    } else if (name == "--json" && has_value && !value.empty()) {
      flags->json = value;
    } else if (name == "--only" && has_value) {
      flags->only = value;
    } else if (name == "--server" && has_value) {
      flags->server = value;
    } else if (name == "--clients" && has_value) {
      flags->clients.clear();
      for (absl::string_view c : absl::StrSplit(value, ',')) {
        absl::StatusOr<ClientKind> kind = ParseClientName(c);
        if (!kind.ok()) {
          std::fprintf(stderr, "compare: %s\n",
                       kind.status().ToString().c_str());
          return false;
        }
        flags->clients.push_back(*kind);
      }
    } else if (name == "--calls") {
      if (!int_value(&flags->calls, 1)) return bad();
    } else if (name == "--seconds") {
      if (!has_value || !absl::SimpleAtod(value, &flags->seconds) ||
          flags->seconds <= 0) {
        return bad();
      }
    } else if (name == "--rounds") {
      if (!int_value(&flags->rounds, 1)) return bad();
    } else if (name == "--warmup") {
      if (!int_value(&flags->warmup, 0)) return bad();
    } else if (name == "--deadline_ms") {
      if (!int_value(&flags->deadline_ms, 1)) return bad();
    } else if (name == "--hedging_delay_ms") {
      if (!int_value(&flags->hedging_delay_ms, 0)) return bad();
    } else if (name == "--callback_keepalive") {
      int keep;
      if (!int_value(&keep, 0) || keep > 1) return bad();
      flags->callback_keepalive = keep == 1;
    } else if (name == "--soak_fail_percent") {
      if (!int_value(&flags->soak_fail_percent, 0) ||
          flags->soak_fail_percent > 100) {
        return bad();
      }
    } else {
      return bad();
    }
  }
  if (flags->headline && flags->soak >= 0) {
    std::fprintf(stderr, "compare: --headline and --soak are separate runs\n");
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Scenarios.

// What the server does to every attempt during a scenario.
struct Fault {
  const char* key;
  const char* title;
  int fail_percent;
  // The server's delay, as a share of the call deadline.
  int delay_percent_of_deadline;
  // Retry budget: gRPC's retryThrottling for the built-in client (and,
  // once it exists, rpcguard's budget; see MakeRpcguardChannel).
  bool budget;
  // Runs for a time rather than a number of calls (calls are slow, or the
  // steady state after the first second is what counts).
  bool time_bound;
  double quick_seconds;
};

constexpr Fault kFaults[] = {
    {"none", "no faults", 0, 0, false, false, 0},
    {"fail10", "10% UNAVAILABLE", 10, 0, false, false, 0},
    {"fail30", "30% UNAVAILABLE", 30, 0, false, false, 0},
    {"outage", "outage: 100% UNAVAILABLE, with budget", 100, 0, true, true,
     1.5},
    {"slow", "slow: server delay 80% of deadline", 0, 80, false, true, 1.0},
};

struct Scenario {
  const Fault* fault;
  StubKind stub;
  int concurrency;

  std::string Key() const {
    return absl::StrCat(fault->key, "/", StubName(stub), "/c", concurrency);
  }
};

std::vector<Scenario> AllScenarios() {
  std::vector<Scenario> out;
  for (const Fault& f : kFaults) {
    for (StubKind stub : {StubKind::kSync, StubKind::kCallback}) {
      for (int c : {1, 8}) out.push_back({&f, stub, c});
    }
  }
  return out;
}

// How big a run is.
struct Plan {
  int rounds;
  int64_t calls;     // per cell, call-count scenarios
  double seconds;    // per cell, time-bound scenarios (0: the fault's)
  int64_t time_cap;  // most calls of a time-bound cell
  int warmup;
  absl::Duration deadline;
  absl::Duration hedging_delay;  // the main table's hedged clients
};

Plan MakePlan(const Flags& flags) {
  Plan plan;
  plan.rounds = flags.rounds > 0 ? flags.rounds : (flags.quick ? 1 : 3);
  plan.calls = flags.calls > 0 ? flags.calls : (flags.quick ? 300 : 3000);
  plan.seconds = flags.seconds > 0 ? flags.seconds : (flags.quick ? 0 : 4);
  plan.time_cap = 400000;
  plan.warmup = flags.warmup >= 0 ? flags.warmup : (flags.quick ? 100 : 300);
  plan.deadline = absl::Milliseconds(flags.deadline_ms);
  plan.hedging_delay = absl::Milliseconds(flags.hedging_delay_ms);
  return plan;
}

// ---------------------------------------------------------------------------
// Measuring one cell: one client through one scenario, one round.

struct Env {
  std::string address;
  ServerControl* control;
  // The fault server binary, for scenarios that start servers of their own.
  std::string server_path;
};

struct CellRound {
  LoadResult load;
  int64_t attempts = 0;  // server-side, during the load
  // Calls and attempts after the first second of the load, when it lasted
  // that long.
  int64_t calls_after_1s = 0;
  int64_t attempts_after_1s = 0;
  bool sampled = false;
};

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectedChannel(
    ClientKind client, const std::string& address, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state = nullptr) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeClientChannel(client, address, retry, std::move(state));
  if (!channel.ok()) return channel.status();
  if (!(*channel)->WaitForConnected(std::chrono::system_clock::now() +
                                    std::chrono::seconds(10))) {
    return absl::UnavailableError(
        absl::StrCat(ClientName(client), ": cannot connect to ", address));
  }
  return channel;
}

// Runs `warmup` calls with the faults off; fails when fewer than all
// succeed (the server or the client is broken, not under test).
absl::Status Warmup(FaultService::Stub& stub, const Env& env, StubKind kind,
                    int concurrency, int warmup, absl::Duration deadline,
                    absl::string_view what) {
  if (warmup <= 0) return absl::OkStatus();
  absl::Status s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  LoadSpec spec;
  spec.stub = kind;
  spec.concurrency = concurrency;
  spec.calls = warmup;
  // The warm-up is not what a profile should see.
  spec.deadline = std::max(deadline, absl::Seconds(1));
  spec.label = "warmup";
  const LoadResult r = RunLoad(stub, spec);
  if (r.ok != r.calls) {
    return absl::InternalError(
        absl::StrCat(what, ": warm-up without faults: ", r.ok, " of ", r.calls,
                     " calls succeeded"));
  }
  return absl::OkStatus();
}

// Warms the process before the first measurement (gRPC's threads, code
// paths, allocator), so that the first client measured is not the one that
// pays for it.
absl::Status WarmProcess(const Env& env, const std::vector<ClientKind>& clients,
                         int calls, absl::Duration deadline) {
  for (ClientKind client : clients) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        ConnectedChannel(client, env.address, RetrySettings());
    if (!channel.ok()) return channel.status();
    std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
    for (StubKind kind : {StubKind::kSync, StubKind::kCallback}) {
      absl::Status s =
          Warmup(*stub, env, kind, 1, calls, deadline,
                 absl::StrCat("process warm-up, ", ClientName(client)));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CellRound> RunCell(const Env& env, const Scenario& scenario,
                                  ClientKind client, const Plan& plan) {
  const std::string what =
      absl::StrCat(scenario.Key(), " ", ClientName(client));
  RetrySettings retry;
  retry.budget = scenario.fault->budget;
  retry.hedging_delay = plan.hedging_delay;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);

  // The warm-up also refills gRPC's retry-throttling tokens, which gRPC keeps
  // per server name for the whole process, across channels.
  absl::Status s = Warmup(*stub, env, scenario.stub, scenario.concurrency,
                          plan.warmup, plan.deadline, what);
  if (!s.ok()) return s;
  const int delay_ms =
      static_cast<int>(absl::ToInt64Milliseconds(plan.deadline) *
                       scenario.fault->delay_percent_of_deadline / 100);
  s = env.control->SetMode(scenario.fault->fail_percent, delay_ms);
  if (!s.ok()) return s;
  absl::StatusOr<int64_t> attempts_before = env.control->TotalAttempts();
  if (!attempts_before.ok()) return attempts_before.status();

  LoadSpec spec;
  spec.stub = scenario.stub;
  spec.concurrency = scenario.concurrency;
  spec.deadline = plan.deadline;
  spec.label = what;
  if (scenario.fault->time_bound) {
    spec.calls = plan.time_cap;
    spec.max_time = absl::Seconds(
        plan.seconds > 0 ? plan.seconds : scenario.fault->quick_seconds);
  } else {
    spec.calls = plan.calls;
  }
  CellRound cell;
  absl::Mutex mu;
  int64_t sampled_calls = 0;
  int64_t sampled_attempts = -1;
  spec.sample = [&](int64_t completed) {
    absl::StatusOr<int64_t> a = env.control->TotalAttempts();
    absl::MutexLock lock(&mu);
    sampled_calls = completed;
    sampled_attempts = a.ok() ? *a : -1;
  };
  cell.load = RunLoad(*stub, spec);
  absl::StatusOr<int64_t> attempts_after = env.control->TotalAttempts();
  if (!attempts_after.ok()) return attempts_after.status();
  s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  cell.attempts = *attempts_after - *attempts_before;
  absl::MutexLock lock(&mu);
  if (sampled_attempts >= 0) {
    cell.sampled = true;
    cell.calls_after_1s = cell.load.calls - sampled_calls;
    cell.attempts_after_1s = *attempts_after - sampled_attempts;
  }
  return cell;
}

// ---------------------------------------------------------------------------
// Aggregating rounds.

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Cell {
  Scenario scenario;
  ClientKind client;
  std::vector<CellRound> rounds;

  // Pooled over rounds.
  LoadResult pooled;
  int64_t attempts = 0;
  int64_t calls_after_1s = 0;
  int64_t attempts_after_1s = 0;
  // Medians of rounds.
  double calls_per_s = 0;
  double cpu_us_per_call = 0;
  double rss_growth_kib = 0;
  double context_switches_per_call = 0;  // pooled

  void Aggregate() {
    std::vector<double> rates, cpu, rss;
    pooled = LoadResult();
    for (const CellRound& r : rounds) {
      const LoadResult& l = r.load;
      pooled.calls += l.calls;
      pooled.ok += l.ok;
      pooled.late += l.late;
      pooled.wall += l.wall;
      pooled.cpu_seconds += l.cpu_seconds;
      pooled.context_switches += l.context_switches;
      for (int c = 0; c < 17; ++c) pooled.codes[c] += l.codes[c];
      pooled.latency_ns.insert(pooled.latency_ns.end(), l.latency_ns.begin(),
                               l.latency_ns.end());
      attempts += r.attempts;
      if (r.sampled) {
        calls_after_1s += r.calls_after_1s;
        attempts_after_1s += r.attempts_after_1s;
      }
      if (l.calls > 0) {
        rates.push_back(l.calls / absl::ToDoubleSeconds(l.wall));
        cpu.push_back(l.cpu_seconds * 1e6 / l.calls);
      }
      rss.push_back(static_cast<double>(l.rss_growth_kib));
    }
    std::sort(pooled.latency_ns.begin(), pooled.latency_ns.end());
    calls_per_s = Median(rates);
    cpu_us_per_call = Median(cpu);
    rss_growth_kib = Median(rss);
    context_switches_per_call =
        pooled.calls > 0
            ? static_cast<double>(pooled.context_switches) / pooled.calls
            : 0;
  }

  double success() const {
    return pooled.calls > 0 ? 100.0 * pooled.ok / pooled.calls : 0;
  }
  double attempts_per_call() const {
    return pooled.calls > 0 ? static_cast<double>(attempts) / pooled.calls : 0;
  }
  // Needs enough calls after the first second to mean anything.
  std::optional<double> attempts_per_call_after_1s() const {
    if (calls_after_1s < 20) return std::nullopt;
    return static_cast<double>(attempts_after_1s) / calls_after_1s;
  }
};

// ---------------------------------------------------------------------------
// Output.

std::string ReadFirstLine(const std::string& path, absl::string_view prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, prefix)) return line;
  }
  return "";
}

struct Machine {
  std::string cpu;
  int cores = 0;
  std::string kernel;
  std::string grpc;
  std::string loadavg;
};

Machine DescribeMachine() {
  Machine m;
  std::string model = ReadFirstLine("/proc/cpuinfo", "model name");
  const size_t colon = model.find(':');
  m.cpu =
      colon == std::string::npos
          ? "unknown"
          : std::string(absl::StripAsciiWhitespace(model.substr(colon + 1)));
  m.cores = static_cast<int>(std::thread::hardware_concurrency());
  utsname u;
  if (uname(&u) == 0) m.kernel = absl::StrCat(u.sysname, " ", u.release);
  m.grpc = grpc::Version();
  std::ifstream in("/proc/loadavg");
  std::getline(in, m.loadavg);
  return m;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string MachineJson(const Machine& m) {
  return absl::StrCat("{\"cpu\": ", JsonString(m.cpu), ", \"cores\": ", m.cores,
                      ", \"kernel\": ", JsonString(m.kernel),
                      ", \"grpc\": ", JsonString(m.grpc),
                      ", \"loadavg_at_start\": ", JsonString(m.loadavg), "}");
}

std::string MachineLine(const Machine& m) {
  return absl::StrCat(m.cpu, ", ", m.cores, " cores, ", m.kernel, ", gRPC ",
                      m.grpc, ", load average at start ", m.loadavg);
}

std::string CodesJson(const std::array<int64_t, 17>& codes) {
  std::vector<std::string> parts;
  for (int c = 0; c < 17; ++c) {
    if (codes[c] == 0) continue;
    parts.push_back(absl::StrCat("\"", c, "\": ", codes[c]));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string CellJson(const Cell& c) {
  std::vector<std::string> cpu_rounds;
  std::vector<std::string> rss_rounds;
  for (const CellRound& r : c.rounds) {
    cpu_rounds.push_back(JsonNumber(
        r.load.calls > 0 ? r.load.cpu_seconds * 1e6 / r.load.calls : 0));
    rss_rounds.push_back(absl::StrCat(r.load.rss_growth_kib));
  }
  const std::optional<double> after = c.attempts_per_call_after_1s();
  return absl::StrCat(
      "{\"scenario\": ", JsonString(c.scenario.Key()),
      ", \"fault\": ", JsonString(c.scenario.fault->key),
      ", \"stub\": ", JsonString(StubName(c.scenario.stub)),
      ", \"callers\": ", c.scenario.concurrency,
      ", \"client\": ", JsonString(ClientName(c.client)),
      ", \"rounds\": ", c.rounds.size(), ", \"calls\": ", c.pooled.calls,
      ", \"calls_per_s\": ", JsonNumber(c.calls_per_s),
      ", \"cpu_us_per_call\": ", JsonNumber(c.cpu_us_per_call),
      ", \"cpu_us_per_call_rounds\": [", absl::StrJoin(cpu_rounds, ", "), "]",
      ", \"context_switches_per_call\": ",
      JsonNumber(c.context_switches_per_call),
      ", \"p50_ms\": ", JsonNumber(c.pooled.LatencyMs(0.5)),
      ", \"p99_ms\": ", JsonNumber(c.pooled.LatencyMs(0.99)),
      ", \"p999_ms\": ", JsonNumber(c.pooled.LatencyMs(0.999)),
      ", \"max_ms\": ", JsonNumber(c.pooled.LatencyMs(1.0)),
      ", \"success_rate\": ", JsonNumber(c.success() / 100),
      ", \"attempts_per_call\": ", JsonNumber(c.attempts_per_call()),
      ", \"attempts_per_call_after_1s\": ",
      after ? JsonNumber(*after) : std::string("null"),
      ", \"late_calls\": ", c.pooled.late,
      ", \"rss_growth_kib\": ", JsonNumber(c.rss_growth_kib),
      ", \"rss_growth_kib_rounds\": [", absl::StrJoin(rss_rounds, ", "), "]",
      ", \"codes\": ", CodesJson(c.pooled.codes), "}");
}

void PrintTable(const std::vector<Cell>& cells) {
  std::printf(
      "| scenario | stub | callers | client | calls | calls/s | CPU µs/call "
      "| p50 ms | p99 ms | p99.9 ms | success | attempts/call | after 1 s "
      "| late | RSS Δ KiB |\n"
      "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
      "|\n");
  for (const Cell& c : cells) {
    const std::optional<double> after = c.attempts_per_call_after_1s();
    std::printf(
        "| %s | %s | %d | %s | %lld | %.0f | %.1f | %.2f | %.2f | %.2f | "
        "%.2f%% | %.2f | %s | %lld | %.0f |\n",
        c.scenario.fault->title, std::string(StubName(c.scenario.stub)).c_str(),
        c.scenario.concurrency, std::string(ClientName(c.client)).c_str(),
        static_cast<long long>(c.pooled.calls), c.calls_per_s,
        c.cpu_us_per_call, c.pooled.LatencyMs(0.5), c.pooled.LatencyMs(0.99),
        c.pooled.LatencyMs(0.999), c.success(), c.attempts_per_call(),
        after ? absl::StrFormat("%.2f", *after).c_str() : "-",
        static_cast<long long>(c.pooled.late), c.rss_growth_kib);
  }
  std::fflush(stdout);
}

absl::Status WriteJson(const std::string& path, const std::string& json) {
  std::ofstream out(path);
  out << json << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string RunJsonHeader(const Flags& flags, const Plan& plan,
                          const Machine& machine, absl::string_view mode) {
  RetrySettings retry;
  retry.budget = true;
  return absl::StrCat(
      "\"mode\": ", JsonString(mode),
      ", \"quick\": ", flags.quick ? "true" : "false",
      ", \"machine\": ", MachineJson(machine),
      ", \"deadline_ms\": ", absl::ToInt64Milliseconds(plan.deadline),
      ", \"late_slack_ms\": ", absl::ToInt64Milliseconds(kLateSlack),
      ", \"service_config_with_budget\": ",
      JsonString(ServiceConfigJson(retry)));
}

// ---------------------------------------------------------------------------
// Issue 13's scenarios ("a blip is not an outage"), as figures beside the
// table above: each client through a burst at start, a server restart under
// load, a brownout and an overload. Every measurement gets fresh channels
// (rpcguard: a fresh registry, so a breaker or budget never carries state
// over from the last one) and reports what the server saw.

enum class FigureKind { kBurst, kRestart, kBrownout, kOverload };

struct Figure {
  FigureKind kind;
  const char* key;
  const char* title;
};

constexpr Figure kFigures[] = {
    {FigureKind::kBurst, "burst",
     "burst: 200 concurrent calls, each failing once"},
    {FigureKind::kRestart, "restart",
     "restart: server killed, back on its port 500 ms later"},
    {FigureKind::kBrownout, "brownout",
     "brownout: 30% UNAVAILABLE, maxAttempts 2"},
    {FigureKind::kOverload, "overload",
     "overload: capacity 200/s, callers ~400/s"},
};

// The burst: calls issued at once on the callback stub.
constexpr int kBurstCalls = 200;
// Callers of the steady loads offer at most this many calls a second each.
constexpr absl::Duration kSteadyPace = absl::Milliseconds(10);
constexpr int kOverloadCapacity = 200;

struct FigureRound {
  LoadResult load;
  int64_t attempts = 0;  // at the server
  // rpcguard only (-1 otherwise): attempts that found no connection, and
  // breaker transitions to open.
  int64_t not_sent = -1;
  int64_t breaker_openings = -1;
};

struct FigureCell {
  const Figure* figure;
  ClientKind client;
  std::vector<FigureRound> rounds;

  LoadResult pooled;
  int64_t attempts = 0;
  int64_t not_sent = -1;
  int64_t breaker_openings = -1;

  void Aggregate() {
    pooled = LoadResult();
    for (const FigureRound& r : rounds) {
      pooled.calls += r.load.calls;
      pooled.ok += r.load.ok;
      pooled.late += r.load.late;
      for (int c = 0; c < 17; ++c) pooled.codes[c] += r.load.codes[c];
      pooled.latency_ns.insert(pooled.latency_ns.end(),
                               r.load.latency_ns.begin(),
                               r.load.latency_ns.end());
      attempts += r.attempts;
      if (r.not_sent >= 0)
        not_sent = std::max<int64_t>(not_sent, 0) + r.not_sent;
      if (r.breaker_openings >= 0) {
        breaker_openings =
            std::max<int64_t>(breaker_openings, 0) + r.breaker_openings;
      }
    }
    std::sort(pooled.latency_ns.begin(), pooled.latency_ns.end());
  }
  double success() const {
    return pooled.calls > 0 ? 100.0 * pooled.ok / pooled.calls : 0;
  }
  double attempts_per_call() const {
    return pooled.calls > 0 ? static_cast<double>(attempts) / pooled.calls : 0;
  }
};

// The retry parameters of a figure: the main table's, with rpcguard's own
// budget on (rpcguard as shipped: breaker and budget at their defaults),
// and what the scenario changes.
RetrySettings FigureRetry(FigureKind kind) {
  RetrySettings retry;
  retry.rpcguard_budget = true;
  // The issue compares rpcguard and gRPC's retry at the same attempts.
  if (kind == FigureKind::kBrownout) retry.max_attempts = 2;
  // Without it gRPC's retry would not retry a shed attempt at all, and the
  // figure would not say what retries do to an overloaded server.
  if (kind == FigureKind::kOverload) retry.retry_resource_exhausted = true;
  return retry;
}

// Warm-up on a channel of the client's kind that is then dropped: the
// measured channels start fresh, while gRPC's retry-throttling tokens, which
// gRPC keeps per server name for the whole process, start full.
absl::Status WarmupApart(const Env& env, ClientKind client,
                         const RetrySettings& retry, const Plan& plan,
                         absl::string_view what) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
  return Warmup(*stub, env, StubKind::kSync, 4, plan.warmup, plan.deadline,
                what);
}

// Fills in what an rpcguard client saw.
void ReadState(const std::shared_ptr<RpcguardState>& state, FigureRound* r) {
  if (state == nullptr) return;
  r->not_sent = state->not_sent_attempts();
  r->breaker_openings = state->breaker_openings();
}

// A few sync and callback callers on `stubs` in turn, each paced.
std::vector<StubLoad> SteadyLoads(
    const std::vector<std::unique_ptr<FaultService::Stub>>& stubs, int callers,
    absl::Duration deadline, absl::Duration length, absl::string_view label) {
  std::vector<StubLoad> loads;
  for (int i = 0; i < callers; ++i) {
    LoadSpec spec;
    spec.stub = i % 2 == 0 ? StubKind::kSync : StubKind::kCallback;
    spec.concurrency = 1;
    spec.calls = 400000;
    spec.max_time = length;
    spec.deadline = deadline;
    spec.pace = kSteadyPace;
    spec.label = std::string(label);
    loads.push_back({stubs[i % stubs.size()].get(), spec});
  }
  return loads;
}

absl::StatusOr<FigureRound> RunBurst(const Env& env, ClientKind client,
                                     const Plan& plan, int round) {
  const RetrySettings retry = FigureRetry(FigureKind::kBurst);
  const std::string what = absl::StrCat("burst ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  std::shared_ptr<RpcguardState> state;
  if (client == ClientKind::kRpcguard) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  // Connected first: the burst is about the server's answers.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, state);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
  absl::StatusOr<int64_t> before = env.control->TotalAttempts();
  if (!before.ok()) return before.status();
  LoadSpec spec;
  spec.stub = StubKind::kCallback;
  spec.concurrency = kBurstCalls;
  spec.calls = kBurstCalls;
  // Long enough for every retry: the figure is about what the clients
  // decide, not about deadlines.
  spec.deadline = absl::Seconds(2);
  spec.op_id_prefix =
      absl::StrCat("burst-", ClientName(client), "-", round, "-");
  spec.fail_first = 1;
  spec.label = what;
  FigureRound r;
  r.load = RunLoad(*stub, spec);
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  r.attempts = *after - *before;
  ReadState(state, &r);
  return r;
}

absl::StatusOr<int> PortOf(const std::string& address) {
  int port;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InternalError(absl::StrCat("no port in ", address));
  }
  return port;
}

// A server of its own, killed (SIGKILL) after `before` of steady load and
// started again on its port `down` later; the load goes on for `after`.
// Attempts are the old process's, counted right before the kill (those in
// the moment between the count and the kill are missed), plus the new
// one's.
absl::StatusOr<FigureRound> RunRestart(const Env& env, ClientKind client,
                                       const Plan& plan, bool quick) {
  const absl::Duration before = absl::Seconds(1);
  const absl::Duration down = absl::Milliseconds(500);
  const absl::Duration after =
      quick ? absl::Milliseconds(1500) : absl::Seconds(3);
  // Outlasts the restart and gRPC's reconnect backoff (1 s +- 20% after a
  // refused connection).
  const absl::Duration deadline = absl::Seconds(5);
  constexpr int kChannels = 3;
  constexpr int kCallers = 6;
  const RetrySettings retry = FigureRetry(FigureKind::kRestart);
  const std::string what = absl::StrCat("restart ", ClientName(client));

  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(env.server_path);
  if (!server.ok()) return server.status();
  const std::string address = (*server)->address();
  absl::StatusOr<int> port = PortOf(address);
  if (!port.ok()) return port.status();
  ServerControl control(address);
  const Env own{address, &control, env.server_path};
  absl::Status s = WarmupApart(own, client, retry, plan, what);
  if (!s.ok()) return s;

  std::shared_ptr<RpcguardState> state;
  if (client == ClientKind::kRpcguard) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  // Several channels to one target, as an application with a few of them
  // has; rpcguard's share one registry, as in one process.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<FaultService::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        ConnectedChannel(client, address, retry, state);
    if (!channel.ok()) return channel.status();
    channels.push_back(*channel);
    stubs.push_back(FaultService::NewStub(*channel));
  }
  absl::StatusOr<int64_t> at_start = control.TotalAttempts();
  if (!at_start.ok()) return at_start.status();
  FigureRound r;
  std::thread load([&] {
    r.load = RunLoads(
        SteadyLoads(stubs, kCallers, deadline, before + down + after, what));
  });
  absl::SleepFor(before);
  absl::StatusOr<int64_t> at_kill = control.TotalAttempts();
  (*server)->Kill();
  absl::SleepFor(down);
  // From this thread, which outlives the server (PR_SET_PDEATHSIG).
  absl::StatusOr<std::unique_ptr<ServerProcess>> restarted =
      ServerProcess::Start(env.server_path, *port);
  load.join();
  if (!at_kill.ok()) return at_kill.status();
  if (!restarted.ok()) return restarted.status();
  absl::StatusOr<int64_t> at_end = control.TotalAttempts();
  if (!at_end.ok()) return at_end.status();
  r.attempts = *at_kill - *at_start + *at_end;
  ReadState(state, &r);
  s = (*restarted)->Stop();
  if (!s.ok()) return s;
  return r;
}

// Brownout and overload: steady paced load on one channel with the server
// failing or shedding attempts.
absl::StatusOr<FigureRound> RunSteady(const Env& env, FigureKind kind,
                                      ClientKind client, const Plan& plan) {
  const RetrySettings retry = FigureRetry(kind);
  const bool overload = kind == FigureKind::kOverload;
  const std::string what =
      absl::StrCat(overload ? "overload " : "brownout ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  std::shared_ptr<RpcguardState> state;
  if (client == ClientKind::kRpcguard) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, state);
  if (!channel.ok()) return channel.status();
  std::vector<std::unique_ptr<FaultService::Stub>> stubs;
  stubs.push_back(FaultService::NewStub(*channel));
  // Overload: 4 callers at 100 calls/s each, twice what the server takes.
  s = overload ? env.control->SetMode(0, 0, kOverloadCapacity)
               : env.control->SetMode(30, 0);
  if (!s.ok()) return s;
  absl::StatusOr<int64_t> before = env.control->TotalAttempts();
  if (!before.ok()) return before.status();
  const absl::Duration length =
      absl::Seconds(plan.seconds > 0 ? plan.seconds : 2);
  FigureRound r;
  r.load = RunLoads(SteadyLoads(stubs, 4, absl::Seconds(1), length, what));
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  r.attempts = *after - *before;
  ReadState(state, &r);
  return r;
}

absl::StatusOr<FigureRound> RunFigure(const Env& env, const Figure& figure,
                                      ClientKind client, const Plan& plan,
                                      bool quick, int round) {
  switch (figure.kind) {
    case FigureKind::kBurst:
      return RunBurst(env, client, plan, round);
    case FigureKind::kRestart:
      return RunRestart(env, client, plan, quick);
    case FigureKind::kBrownout:
    case FigureKind::kOverload:
      return RunSteady(env, figure.kind, client, plan);
  }
  return absl::InvalidArgumentError("unknown figure");
}

std::string OptionalCount(int64_t v) { return v >= 0 ? absl::StrCat(v) : "-"; }

void PrintFigures(const std::vector<FigureCell>& cells) {
  std::printf(
      "\n| figure | client | calls | success | attempts/call | p50 ms | p99 "
      "ms | max ms | late | not sent | breaker opened |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const FigureCell& c : cells) {
    std::string opened = "-";
    if (c.breaker_openings == 0) opened = "no";
    if (c.breaker_openings > 0) {
      opened = absl::StrCat("yes (", c.breaker_openings, "x)");
    }
    std::printf(
        "| %s | %s | %lld | %.2f%% | %.3f | %.1f | %.1f | %.1f | %lld | %s | "
        "%s |\n",
        c.figure->title, std::string(ClientName(c.client)).c_str(),
        static_cast<long long>(c.pooled.calls), c.success(),
        c.attempts_per_call(), c.pooled.LatencyMs(0.5),
        c.pooled.LatencyMs(0.99), c.pooled.LatencyMs(1.0),
        static_cast<long long>(c.pooled.late),
        OptionalCount(c.not_sent).c_str(), opened.c_str());
  }
  // The issue's targets, where the clients they compare were measured.
  auto find = [&](FigureKind kind, ClientKind client) -> const FigureCell* {
    for (const FigureCell& c : cells) {
      if (c.figure->kind == kind && c.client == client) return &c;
    }
    return nullptr;
  };
  std::printf("\n");
  const FigureCell* rg = find(FigureKind::kBurst, ClientKind::kRpcguard);
  if (rg != nullptr) {
    std::printf("burst: rpcguard's breaker %s (target: stays closed: %s)\n",
                rg->breaker_openings > 0 ? "opened" : "stayed closed",
                rg->breaker_openings > 0 ? "NOT met" : "met");
  }
  rg = find(FigureKind::kRestart, ClientKind::kRpcguard);
  if (rg != nullptr) {
    std::printf(
        "restart: rpcguard %.2f%% success, %lld late (target: every call "
        "succeeds, none late: %s); %s attempts found no connection\n",
        rg->success(), static_cast<long long>(rg->pooled.late),
        rg->pooled.ok == rg->pooled.calls && rg->pooled.late == 0 ? "met"
                                                                  : "NOT met",
        OptionalCount(rg->not_sent).c_str());
  }
  rg = find(FigureKind::kBrownout, ClientKind::kRpcguard);
  const FigureCell* grpc = find(FigureKind::kBrownout, ClientKind::kGrpcRetry);
  if (rg != nullptr) {
    std::printf(
        "brownout: rpcguard %.3f attempts/call at the server (target <= 1.35: "
        "%s)",
        rg->attempts_per_call(),
        rg->attempts_per_call() <= 1.35 ? "met" : "NOT met");
    if (grpc != nullptr) {
      std::printf("; success %.2f%% vs grpc-retry's %.2f%% (target >=: %s)",
                  rg->success(), grpc->success(),
                  rg->success() >= grpc->success() ? "met" : "NOT met");
    }
    std::printf("\n");
  }
  rg = find(FigureKind::kOverload, ClientKind::kRpcguard);
  if (rg != nullptr) {
    std::printf(
        "overload: rpcguard offered %.3f attempts/call (target <= 1.2: %s)\n",
        rg->attempts_per_call(),
        rg->attempts_per_call() <= 1.2 ? "met" : "NOT met");
  }
  std::fflush(stdout);
}

std::string FigureJson(const FigureCell& c) {
  auto optional = [](int64_t v) {
    return v >= 0 ? absl::StrCat(v) : std::string("null");
  };
  return absl::StrCat(
      "{\"figure\": ", JsonString(c.figure->key),
      ", \"client\": ", JsonString(ClientName(c.client)),
      ", \"rounds\": ", c.rounds.size(), ", \"calls\": ", c.pooled.calls,
      ", \"success_rate\": ", JsonNumber(c.success() / 100),
      ", \"attempts_per_call\": ", JsonNumber(c.attempts_per_call()),
      ", \"p50_ms\": ", JsonNumber(c.pooled.LatencyMs(0.5)),
      ", \"p99_ms\": ", JsonNumber(c.pooled.LatencyMs(0.99)),
      ", \"max_ms\": ", JsonNumber(c.pooled.LatencyMs(1.0)),
      ", \"late_calls\": ", c.pooled.late,
      ", \"not_sent_attempts\": ", optional(c.not_sent),
      ", \"breaker_openings\": ", optional(c.breaker_openings),
      ", \"codes\": ", CodesJson(c.pooled.codes), "}");
}

// ---------------------------------------------------------------------------
// Issue 14's scenarios ("cut the latency tail without a storm"), a third
// table: the server answers some attempts late and fails none, and the
// question is what each client does to the tail and to the server's load.
// tail: 5% of attempts, drawn at random per attempt, 80 ms late: an
// unhedged client's p99 is the late answer itself. slowdown: every attempt
// 30 ms late: a hedge cannot help, so what counts is that hedging stays
// within its extra-load cap (no storm) and costs no latency. Every
// measurement gets a fresh channel (rpcguard: a fresh registry, so the
// hedge cap and the adaptive delay start from nothing) after a warm-up on a
// channel of its own.

enum class TailKind { kTail, kSlowdown };

struct TailScenario {
  TailKind kind;
  const char* key;
  const char* title;
  // The server's mode: this share of attempts `late_ms` late, and every
  // attempt `delay_ms` late.
  int late_percent;
  int late_ms;
  int delay_ms;
};

constexpr TailScenario kTailScenarios[] = {
    {TailKind::kTail, "tail", "tail: 5% of attempts 80 ms late", 5, 80, 0},
    {TailKind::kSlowdown, "slowdown", "slowdown: every attempt 30 ms late", 0,
     0, 30},
};

// Closed-loop sync callers: enough calls a second for a 10 s window of
// first attempts to fund hedges well beyond the reserve.
constexpr int kTailCallers = 8;
// rpcguard's default extra-load cap (HedgingPolicy::max_extra_load) and
// the hedge budget's reserve: 1 a second over its 10 s window.
constexpr double kMaxExtraLoad = 0.05;
constexpr double kHedgeReservePerWindow = 10;
constexpr absl::Duration kHedgeWindow = absl::Seconds(10);

bool IsRpcguard(ClientKind client) {
  return client == ClientKind::kRpcguard ||
         client == ClientKind::kRpcguardHedged ||
         client == ClientKind::kRpcguardHedgedAdaptive;
}

struct TailCell {
  const TailScenario* scenario;
  ClientKind client;
  std::vector<FigureRound> rounds;

  LoadResult pooled;
  int64_t attempts = 0;
  double cpu_us_per_call = 0;  // median of rounds
  // The most attempts per call the hedge cap allows, rounds pooled: each
  // round's channel is fresh, so each may use maxExtraLoad of its calls
  // plus the reserve of every 10 s window it spans.
  double cap_attempts_per_call = 0;

  void Aggregate() {
    pooled = LoadResult();
    std::vector<double> cpu;
    double allowed = 0;
    for (const FigureRound& r : rounds) {
      pooled.calls += r.load.calls;
      pooled.ok += r.load.ok;
      pooled.late += r.load.late;
      pooled.wall += r.load.wall;
      for (int c = 0; c < 17; ++c) pooled.codes[c] += r.load.codes[c];
      pooled.latency_ns.insert(pooled.latency_ns.end(),
                               r.load.latency_ns.begin(),
                               r.load.latency_ns.end());
      attempts += r.attempts;
      if (r.load.calls > 0) {
        cpu.push_back(r.load.cpu_seconds * 1e6 / r.load.calls);
      }
      allowed += (1 + kMaxExtraLoad) * r.load.calls +
                 kHedgeReservePerWindow *
                     std::ceil(absl::FDivDuration(r.load.wall, kHedgeWindow));
    }
    std::sort(pooled.latency_ns.begin(), pooled.latency_ns.end());
    cpu_us_per_call = Median(cpu);
    cap_attempts_per_call = pooled.calls > 0 ? allowed / pooled.calls : 0;
  }
  double success() const {
    return pooled.calls > 0 ? 100.0 * pooled.ok / pooled.calls : 0;
  }
  double attempts_per_call() const {
    return pooled.calls > 0 ? static_cast<double>(attempts) / pooled.calls : 0;
  }
};

absl::StatusOr<FigureRound> RunTail(const Env& env,
                                    const TailScenario& scenario,
                                    ClientKind client, const Plan& plan,
                                    int64_t calls) {
  // rpcguard as shipped (its breaker and retry budget at their defaults);
  // nothing fails here, so neither ever acts.
  RetrySettings retry;
  retry.rpcguard_budget = true;
  const std::string what = absl::StrCat(scenario.key, " ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  std::shared_ptr<RpcguardState> state;
  if (IsRpcguard(client)) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, state);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
  s = env.control->SetMode(0, scenario.delay_ms, 0, scenario.late_percent,
                           scenario.late_ms);
  if (!s.ok()) return s;
  absl::StatusOr<int64_t> before = env.control->TotalAttempts();
  if (!before.ok()) return before.status();
  LoadSpec spec;
  spec.stub = StubKind::kSync;
  spec.concurrency = kTailCallers;
  spec.calls = calls;
  spec.deadline = plan.deadline;
  spec.label = what;
  FigureRound r;
  r.load = RunLoad(*stub, spec);
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  // Includes cancelled hedges: the server saw them arrive.
  r.attempts = *after - *before;
  ReadState(state, &r);
  return r;
}

void PrintTails(const std::vector<TailCell>& cells) {
  std::printf(
      "\n| scenario | client | calls | success | p50 ms | p99 ms | p99.9 ms "
      "| attempts/call | CPU µs/call | late |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const TailCell& c : cells) {
    std::printf(
        "| %s | %s | %lld | %.2f%% | %.2f | %.2f | %.2f | %.3f | %.1f | %lld "
        "|\n",
        c.scenario->title, std::string(ClientName(c.client)).c_str(),
        static_cast<long long>(c.pooled.calls), c.success(),
        c.pooled.LatencyMs(0.5), c.pooled.LatencyMs(0.99),
        c.pooled.LatencyMs(0.999), c.attempts_per_call(), c.cpu_us_per_call,
        static_cast<long long>(c.pooled.late));
  }
  auto find = [&](TailKind kind, ClientKind client) -> const TailCell* {
    for (const TailCell& c : cells) {
      if (c.scenario->kind == kind && c.client == client) return &c;
    }
    return nullptr;
  };
  // The unhedged reference: plain, else rpcguard with retries only.
  auto unhedged = [&](TailKind kind) -> const TailCell* {
    const TailCell* c = find(kind, ClientKind::kPlain);
    return c != nullptr ? c : find(kind, ClientKind::kRpcguard);
  };
  std::printf("\n");
  for (ClientKind h :
       {ClientKind::kRpcguardHedged, ClientKind::kRpcguardHedgedAdaptive}) {
    const std::string name(ClientName(h));
    const TailCell* c = find(TailKind::kTail, h);
    const TailCell* base = unhedged(TailKind::kTail);
    if (c != nullptr) {
      std::printf("tail: %s %.3f attempts/call (target <= 1.10: %s)",
                  name.c_str(), c->attempts_per_call(),
                  c->attempts_per_call() <= 1.10 ? "met" : "NOT met");
      if (base != nullptr && base->pooled.LatencyMs(0.99) > 0) {
        const double ratio =
            c->pooled.LatencyMs(0.99) / base->pooled.LatencyMs(0.99);
        std::printf("; p99 %.2f ms = %.2fx %s's %.2f ms (target <= 0.33x: %s)",
                    c->pooled.LatencyMs(0.99), ratio,
                    std::string(ClientName(base->client)).c_str(),
                    base->pooled.LatencyMs(0.99),
                    ratio <= 1.0 / 3 ? "met" : "NOT met");
      }
      std::printf("\n");
    }
    c = find(TailKind::kSlowdown, h);
    base = unhedged(TailKind::kSlowdown);
    if (c != nullptr) {
      std::printf(
          "slowdown: %s %.3f attempts/call (target: within the cap, 1.05 + "
          "reserve = %.3f: %s)",
          name.c_str(), c->attempts_per_call(), c->cap_attempts_per_call,
          c->attempts_per_call() <= c->cap_attempts_per_call ? "met"
                                                             : "NOT met");
      if (base != nullptr) {
        std::printf("; p99 %.2f ms vs %s's %.2f ms (target <=: %s)",
                    c->pooled.LatencyMs(0.99),
                    std::string(ClientName(base->client)).c_str(),
                    base->pooled.LatencyMs(0.99),
                    c->pooled.LatencyMs(0.99) <= base->pooled.LatencyMs(0.99)
                        ? "met"
                        : "NOT met");
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
}

std::string TailJson(const TailCell& c) {
  std::vector<std::string> cpu_rounds;
  for (const FigureRound& r : c.rounds) {
    cpu_rounds.push_back(JsonNumber(
        r.load.calls > 0 ? r.load.cpu_seconds * 1e6 / r.load.calls : 0));
  }
  return absl::StrCat(
      "{\"tail\": ", JsonString(c.scenario->key),
      ", \"client\": ", JsonString(ClientName(c.client)),
      ", \"rounds\": ", c.rounds.size(), ", \"calls\": ", c.pooled.calls,
      ", \"success_rate\": ", JsonNumber(c.success() / 100),
      ", \"p50_ms\": ", JsonNumber(c.pooled.LatencyMs(0.5)),
      ", \"p99_ms\": ", JsonNumber(c.pooled.LatencyMs(0.99)),
      ", \"p999_ms\": ", JsonNumber(c.pooled.LatencyMs(0.999)),
      ", \"max_ms\": ", JsonNumber(c.pooled.LatencyMs(1.0)),
      ", \"attempts_per_call\": ", JsonNumber(c.attempts_per_call()),
      ", \"cap_attempts_per_call\": ", JsonNumber(c.cap_attempts_per_call),
      ", \"cpu_us_per_call\": ", JsonNumber(c.cpu_us_per_call),
      ", \"cpu_us_per_call_rounds\": [", absl::StrJoin(cpu_rounds, ", "), "]",
      ", \"late_calls\": ", c.pooled.late,
      ", \"codes\": ", CodesJson(c.pooled.codes), "}");
}

// ---------------------------------------------------------------------------
// Modes.

int RunCompare(const Flags& flags, const Env& env, const Machine& machine) {
  const Plan plan = MakePlan(flags);
  std::vector<Scenario> scenarios;
  for (const Scenario& s : AllScenarios()) {
    if (absl::StrContains(s.Key(), flags.only)) scenarios.push_back(s);
  }
  std::vector<const Figure*> figures;
  for (const Figure& f : kFigures) {
    if (absl::StrContains(f.key, flags.only)) figures.push_back(&f);
  }
  std::vector<const TailScenario*> tails;
  for (const TailScenario& t : kTailScenarios) {
    if (absl::StrContains(t.key, flags.only)) tails.push_back(&t);
  }
  if (scenarios.empty() && figures.empty() && tails.empty()) {
    std::fprintf(stderr, "compare: no scenario matches --only=%s\n",
                 flags.only.c_str());
    return 2;
  }
  const std::vector<ClientKind> clients =
      flags.clients.empty() ? std::vector<ClientKind>(std::begin(kAllClients),
                                                      std::end(kAllClients))
                            : flags.clients;
  const std::vector<ClientKind> figure_clients =
      flags.clients.empty()
          ? std::vector<ClientKind>(std::begin(kEvidenceClients),
                                    std::end(kEvidenceClients))
          : flags.clients;
  const std::vector<ClientKind> tail_clients =
      flags.clients.empty() ? std::vector<ClientKind>(std::begin(kTailClients),
                                                      std::end(kTailClients))
                            : flags.clients;
  // Per round: 3 rounds pool 6,000 calls a cell, enough for a p99.9 that
  // rests on 6 calls.
  const int64_t tail_calls =
      flags.calls > 0 ? flags.calls : (flags.quick ? 300 : 2000);
  std::fprintf(
      stderr,
      "compare: %zu scenarios x %zu clients, %zu figures x %zu clients, %zu "
      "tail scenarios x %zu clients, %d round(s); %lld calls per call-count "
      "cell, %lld per tail cell, deadline %lld ms\n",
      scenarios.size(), clients.size(), figures.size(), figure_clients.size(),
      tails.size(), tail_clients.size(), plan.rounds,
      static_cast<long long>(plan.calls), static_cast<long long>(tail_calls),
      static_cast<long long>(absl::ToInt64Milliseconds(plan.deadline)));
  std::vector<ClientKind> warm_clients;
  if (!scenarios.empty()) warm_clients = clients;
  auto warm_too = [&](const std::vector<ClientKind>& more) {
    for (ClientKind c : more) {
      if (std::find(warm_clients.begin(), warm_clients.end(), c) ==
          warm_clients.end()) {
        warm_clients.push_back(c);
      }
    }
  };
  if (!figures.empty()) warm_too(figure_clients);
  if (!tails.empty()) warm_too(tail_clients);
  absl::Status warm =
      WarmProcess(env, warm_clients, 3 * plan.warmup, plan.deadline);
  if (!warm.ok()) {
    std::fprintf(stderr, "compare: %s\n", warm.ToString().c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  std::vector<Cell> cells;
  for (const Scenario& scenario : scenarios) {
    std::vector<Cell> row;
    for (ClientKind client : clients) {
      row.push_back(Cell{scenario, client, {}});
    }
    for (int round = 0; round < plan.rounds; ++round) {
      // Rotate the clients' order every round, so none always runs first.
      for (size_t k = 0; k < row.size(); ++k) {
        Cell& cell = row[(k + round) % row.size()];
        absl::StatusOr<CellRound> r = RunCell(env, scenario, cell.client, plan);
        if (!r.ok()) {
          std::fprintf(stderr, "compare: %s %s: %s\n", scenario.Key().c_str(),
                       std::string(ClientName(cell.client)).c_str(),
                       r.status().ToString().c_str());
          return 1;
        }
        cell.rounds.push_back(*std::move(r));
      }
    }
    for (Cell& cell : row) {
      cell.Aggregate();
      std::fprintf(
          stderr,
          "  %-22s %-12s %7lld calls %8.1f µs/call %6.2f%% ok "
          "%.2f attempts/call\n",
          scenario.Key().c_str(), std::string(ClientName(cell.client)).c_str(),
          static_cast<long long>(cell.pooled.calls), cell.cpu_us_per_call,
          cell.success(), cell.attempts_per_call());
      cells.push_back(std::move(cell));
    }
  }
  std::vector<FigureCell> figure_cells;
  for (const Figure* figure : figures) {
    std::vector<FigureCell> row;
    for (ClientKind client : figure_clients) {
      row.push_back(FigureCell{figure, client, {}});
    }
    for (int round = 0; round < plan.rounds; ++round) {
      for (size_t k = 0; k < row.size(); ++k) {
        FigureCell& cell = row[(k + round) % row.size()];
        absl::StatusOr<FigureRound> r =
            RunFigure(env, *figure, cell.client, plan, flags.quick, round);
        if (!r.ok()) {
          std::fprintf(stderr, "compare: %s %s: %s\n", figure->key,
                       std::string(ClientName(cell.client)).c_str(),
                       r.status().ToString().c_str());
          return 1;
        }
        cell.rounds.push_back(*std::move(r));
      }
    }
    for (FigureCell& cell : row) {
      cell.Aggregate();
      std::fprintf(stderr,
                   "  %-22s %-20s %7lld calls %6.2f%% ok %.3f attempts/call "
                   "p99 %.1f ms %lld late\n",
                   figure->key, std::string(ClientName(cell.client)).c_str(),
                   static_cast<long long>(cell.pooled.calls), cell.success(),
                   cell.attempts_per_call(), cell.pooled.LatencyMs(0.99),
                   static_cast<long long>(cell.pooled.late));
      figure_cells.push_back(std::move(cell));
    }
  }
  std::vector<TailCell> tail_cells;
  for (const TailScenario* tail : tails) {
    std::vector<TailCell> row;
    for (ClientKind client : tail_clients) {
      row.push_back(TailCell{tail, client, {}});
    }
    for (int round = 0; round < plan.rounds; ++round) {
      for (size_t k = 0; k < row.size(); ++k) {
        TailCell& cell = row[(k + round) % row.size()];
        absl::StatusOr<FigureRound> r =
            RunTail(env, *tail, cell.client, plan, tail_calls);
        if (!r.ok()) {
          std::fprintf(stderr, "compare: %s %s: %s\n", tail->key,
                       std::string(ClientName(cell.client)).c_str(),
                       r.status().ToString().c_str());
          return 1;
        }
        cell.rounds.push_back(*std::move(r));
      }
    }
    for (TailCell& cell : row) {
      cell.Aggregate();
      std::fprintf(stderr,
                   "  %-22s %-24s %7lld calls %6.2f%% ok %.3f attempts/call "
                   "p99 %.1f ms p99.9 %.1f ms\n",
                   tail->key, std::string(ClientName(cell.client)).c_str(),
                   static_cast<long long>(cell.pooled.calls), cell.success(),
                   cell.attempts_per_call(), cell.pooled.LatencyMs(0.99),
                   cell.pooled.LatencyMs(0.999));
      tail_cells.push_back(std::move(cell));
    }
  }
  const absl::Duration took = absl::Now() - start;

  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  if (!cells.empty()) {
    std::printf(
        "Deadline %lld ms per call; late = ended more than %lld ms after its "
        "deadline; attempts counted by the server; CPU is the client "
        "process's (getrusage), median of %d round(s); 'after 1 s' = "
        "attempts per call after the first second of a time-bound cell. Run "
        "took %.0f s.\n\n",
        static_cast<long long>(absl::ToInt64Milliseconds(plan.deadline)),
        static_cast<long long>(absl::ToInt64Milliseconds(kLateSlack)),
        plan.rounds, absl::ToDoubleSeconds(took));
    PrintTable(cells);
  }
  if (!figure_cells.empty()) {
    std::printf(
        "%sIssue 13's scenarios, %d round(s) pooled; fresh channels (rpcguard: "
        "a fresh registry, its default breaker and budget) per measurement. "
        "burst: %d callback calls issued at once, each failing once, deadline "
        "2 s. restart: %d sync and callback callers on 3 channels, each "
        "pacing %lld ms, deadline 5 s; the server is SIGKILLed after 1 s and "
        "back on its port 500 ms later. brownout: 4 callers pacing %lld ms, "
        "deadline 1 s, maxAttempts 2. overload: the same callers (~400 "
        "calls/s), server capacity %d/s, RESOURCE_EXHAUSTED retriable for "
        "every client. attempts/call: attempts the server saw per call; late: "
        "ended more than %lld ms after its deadline; not sent: rpcguard's "
        "attempts that found no connection. Run took %.0f s.\n",
        cells.empty() ? "" : "\n", plan.rounds, kBurstCalls, 6,
        static_cast<long long>(absl::ToInt64Milliseconds(kSteadyPace)),
        static_cast<long long>(absl::ToInt64Milliseconds(kSteadyPace)),
        kOverloadCapacity,
        static_cast<long long>(absl::ToInt64Milliseconds(kLateSlack)),
        absl::ToDoubleSeconds(took));
    PrintFigures(figure_cells);
  }
  if (!tail_cells.empty()) {
    RetrySettings shown;
    std::printf(
        "%sIssue 14's scenarios, %d round(s) of %lld calls pooled; %d sync "
        "callers back to back, deadline %lld ms; fresh channels (rpcguard: a "
        "fresh registry, its default breaker, retry budget and hedge cap) "
        "per measurement. tail: each attempt, drawn at random, is 80 ms late "
        "with probability 5%%. slowdown: every attempt 30 ms late. Nothing "
        "fails. rpcguard: retries only (maxAttempts %d); rpcguard-hedged: "
        "hedgingPolicy maxAttempts %d, hedgingDelay %lld ms; "
        "rpcguard-hedged-adaptive: the same with hedgingDelayPercentile %.2f, "
        "floor 1 ms, the fixed delay until 100 samples; hedges capped at "
        "maxExtraLoad %.2f of first attempts plus 1 a second (defaults). "
        "attempts/call: attempts the server saw per call, cancelled hedges "
        "included; CPU: the client process's, median of rounds. Run took %.0f "
        "s.\n",
        cells.empty() && figure_cells.empty() ? "" : "\n", plan.rounds,
        static_cast<long long>(tail_calls), kTailCallers,
        static_cast<long long>(absl::ToInt64Milliseconds(plan.deadline)),
        shown.max_attempts, shown.hedge_max_attempts,
        static_cast<long long>(absl::ToInt64Milliseconds(shown.hedging_delay)),
        shown.hedging_percentile, kMaxExtraLoad, absl::ToDoubleSeconds(took));
    PrintTails(tail_cells);
  }

  if (!flags.json.empty()) {
    std::vector<std::string> parts;
    for (const Cell& c : cells) parts.push_back(CellJson(c));
    std::vector<std::string> figure_parts;
    for (const FigureCell& c : figure_cells) {
      figure_parts.push_back(FigureJson(c));
    }
    std::vector<std::string> tail_parts;
    for (const TailCell& c : tail_cells) tail_parts.push_back(TailJson(c));
    const std::string json = absl::StrCat(
        "{", RunJsonHeader(flags, plan, machine, "compare"),
        ", \"rounds\": ", plan.rounds, ", \"calls_per_cell\": ", plan.calls,
        ", \"seconds\": ", absl::ToInt64Seconds(absl::Now() - start),
        ", \"cells\": [\n  ", absl::StrJoin(parts, ",\n  "),
        "\n], \"figures\": [\n  ", absl::StrJoin(figure_parts, ",\n  "),
        "\n], \"tails\": [\n  ", absl::StrJoin(tail_parts, ",\n  "), "\n]}");
    absl::Status s = WriteJson(flags.json, json);
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "compare: wrote %s\n", flags.json.c_str());
  }
  return 0;
}

// The issue's headline: client CPU per call on the no-failure path, 1
// caller, sync and callback stub, median of rounds, each ratio against
// baselines measured in the same run.
int RunHeadline(const Flags& given, const Env& env, const Machine& machine) {
  Flags flags = given;
  if (flags.clients.empty()) {
    flags.clients.assign(std::begin(kAllClients), std::end(kAllClients));
  }
  const int rounds = flags.rounds > 0 ? flags.rounds : (flags.quick ? 3 : 7);
  const int64_t calls =
      flags.calls > 0 ? flags.calls : (flags.quick ? 1000 : 3000);
  const int warmup = flags.warmup >= 0 ? flags.warmup : 300;
  const absl::Duration deadline = absl::Milliseconds(flags.deadline_ms);
  std::fprintf(stderr,
               "compare --headline: %lld calls x %d rounds per client and "
               "stub, no faults, 1 caller\n",
               static_cast<long long>(calls), rounds);

  struct Row {
    StubKind stub;
    ClientKind client;
    std::vector<double> cpu_us;   // per round
    std::vector<double> user_us;  // per round: the user part of cpu_us
    int64_t context_switches = 0;
    int64_t calls = 0;
    int64_t ok = 0;
    double median = 0;
  };
  std::vector<Row> rows;
  absl::Status s = env.control->SetMode(0, 0);
  if (!s.ok()) {
    std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
    return 1;
  }
  for (StubKind stub_kind : {StubKind::kSync, StubKind::kCallback}) {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<FaultService::Stub>> stubs;
    const size_t first = rows.size();
    for (ClientKind client : flags.clients) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          ConnectedChannel(client, env.address, RetrySettings());
      if (!channel.ok()) {
        std::fprintf(stderr, "compare: %s\n",
                     channel.status().ToString().c_str());
        return 1;
      }
      channels.push_back(*channel);
      stubs.push_back(FaultService::NewStub(*channel));
      s = Warmup(*stubs.back(), env, stub_kind, 1, warmup, deadline,
                 ClientName(client));
      if (!s.ok()) {
        std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
        return 1;
      }
      rows.push_back(Row{stub_kind, client, {}});
    }
    const size_t n = flags.clients.size();
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k + round) % n;
        LoadSpec spec;
        spec.stub = stub_kind;
        spec.concurrency = 1;
        spec.calls = calls;
        spec.deadline = deadline;
        spec.label = absl::StrCat("headline ", StubName(stub_kind), " ",
                                  ClientName(flags.clients[i]));
        const LoadResult r = RunLoad(*stubs[i], spec);
        Row& row = rows[first + i];
        row.user_us.push_back(r.user_seconds * 1e6 /
                              std::max<int64_t>(1, r.calls));
        row.cpu_us.push_back(r.cpu_seconds * 1e6 /
                             std::max<int64_t>(1, r.calls));
        row.context_switches += r.context_switches;
        row.calls += r.calls;
        row.ok += r.ok;
      }
    }
    for (size_t i = first; i < rows.size(); ++i) {
      rows[i].median = Median(rows[i].cpu_us);
    }
  }

  auto find = [&](StubKind stub, ClientKind client) -> const Row* {
    for (const Row& r : rows) {
      if (r.stub == stub && r.client == client) return &r;
    }
    return nullptr;
  };
  auto median_of = [&](StubKind stub, ClientKind client) -> double {
    const Row* r = find(stub, client);
    return r != nullptr ? r->median : 0;
  };
  // The median over rounds of a / b measured in the same round: robust to
  // the machine's load drifting between rounds.
  auto paired = [&](StubKind stub, ClientKind a, ClientKind b) -> double {
    const Row* ra = find(stub, a);
    const Row* rb = find(stub, b);
    if (ra == nullptr || rb == nullptr) return 0;
    std::vector<double> ratios;
    for (size_t i = 0; i < ra->cpu_us.size() && i < rb->cpu_us.size(); ++i) {
      if (rb->cpu_us[i] > 0) ratios.push_back(ra->cpu_us[i] / rb->cpu_us[i]);
    }
    return Median(ratios);
  };
  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  std::printf(
      "No-failure path, 1 caller, client CPU per call (getrusage), %lld "
      "calls, median of %d rounds; server in its own process. user: the "
      "user-space part (what instruction counts track; the rest is the "
      "kernel's: wake-ups, syscalls). cs/call: the client process's context "
      "switches per call.\n\n",
      static_cast<long long>(calls), rounds);
  std::printf(
      "| stub | client | CPU µs/call | min | max | vs plain | vs "
      "pass-through | vs hijack-floor | user µs/call | cs/call | ok |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  // A row's median against `base`'s in the same stub; "-" when `base` was
  // not measured.
  auto versus = [&](const Row& r, ClientKind base) -> std::string {
    const double b = median_of(r.stub, base);
    return b > 0 ? absl::StrFormat("%.2fx", r.median / b) : "-";
  };
  for (const Row& r : rows) {
    std::printf(
        "| %s | %s | %.1f | %.1f | %.1f | %s | %s | %s | %.1f | %.2f | "
        "%lld/%lld |\n",
        std::string(StubName(r.stub)).c_str(),
        std::string(ClientName(r.client)).c_str(), r.median,
        *std::min_element(r.cpu_us.begin(), r.cpu_us.end()),
        *std::max_element(r.cpu_us.begin(), r.cpu_us.end()),
        versus(r, ClientKind::kPlain).c_str(),
        versus(r, ClientKind::kPassThrough).c_str(),
        versus(r, ClientKind::kHijackFloor).c_str(), Median(r.user_us),
        r.calls > 0 ? static_cast<double>(r.context_switches) / r.calls : 0.0,
        static_cast<long long>(r.ok), static_cast<long long>(r.calls));
  }
  // The lowest round: interference from other processes only ever adds CPU.
  auto min_of = [&](StubKind stub, ClientKind client) -> double {
    const Row* r = find(stub, client);
    if (r == nullptr || r->cpu_us.empty()) return 0;
    return *std::min_element(r->cpu_us.begin(), r->cpu_us.end());
  };
  // The issue's targets, when every client needed was measured.
  struct Target {
    StubKind stub;
    ClientKind base;
    double target;
    double goal;
  };
  const Target targets[] = {
      {StubKind::kSync, ClientKind::kPlain, 1.25, 1.15},
      {StubKind::kCallback, ClientKind::kPassThrough, 1.10, 1.00}};
  std::printf("\n");
  for (const Target& t : targets) {
    const double base = median_of(t.stub, t.base);
    const double rg = median_of(t.stub, ClientKind::kRpcguard);
    if (base <= 0 || rg <= 0) continue;
    const double ratio = rg / base;
    std::printf(
        "%s: rpcguard / %s = %.2fx (target <= %.2fx: %s; goal %.2fx: %s); "
        "median of per-round ratios %.2fx; ratio of the lowest rounds "
        "%.2fx\n",
        std::string(StubName(t.stub)).c_str(),
        std::string(ClientName(t.base)).c_str(), ratio, t.target,
        ratio <= t.target ? "met" : "NOT met", t.goal,
        ratio <= t.goal ? "met" : "not met",
        paired(t.stub, ClientKind::kRpcguard, t.base),
        min_of(t.stub, ClientKind::kRpcguard) / min_of(t.stub, t.base));
  }
  // rpcguard must hijack every retriable call: how much of its cost over
  // the target's baseline is the hijacking mechanism (hijack-floor) and how
  // much is rpcguard's own work.
  for (const Target& t : targets) {
    const double base = median_of(t.stub, t.base);
    const double hijack = median_of(t.stub, ClientKind::kHijackFloor);
    const double rg = median_of(t.stub, ClientKind::kRpcguard);
    if (hijack <= 0 || rg <= 0) continue;
    std::string split;
    if (base > 0) {
      split = absl::StrFormat(
          ": hijack-floor / %s = %.2fx; of rpcguard's %+.1f µs/call over %s, "
          "%+.1f is the mechanism, %+.1f rpcguard's own work",
          ClientName(t.base), hijack / base, rg - base, ClientName(t.base),
          hijack - base, rg - hijack);
    } else {
      split = absl::StrFormat("; rpcguard's own work beyond it %+.1f µs/call",
                              rg - hijack);
    }
    std::printf(
        "%s: rpcguard / hijack-floor = %.2fx (the mechanism's floor%s); "
        "median of per-round ratios %.2fx; ratio of the lowest rounds "
        "%.2fx\n",
        std::string(StubName(t.stub)).c_str(), rg / hijack, split.c_str(),
        paired(t.stub, ClientKind::kRpcguard, ClientKind::kHijackFloor),
        min_of(t.stub, ClientKind::kRpcguard) /
            min_of(t.stub, ClientKind::kHijackFloor));
  }
  std::string loadavg;
  std::ifstream in("/proc/loadavg");
  std::getline(in, loadavg);
  std::printf("load average at the end: %s\n", loadavg.c_str());
  std::fflush(stdout);

  if (!flags.json.empty()) {
    std::vector<std::string> parts;
    for (const Row& r : rows) {
      std::vector<std::string> rounds_json;
      for (double v : r.cpu_us) rounds_json.push_back(JsonNumber(v));
      const double plain = median_of(r.stub, ClientKind::kPlain);
      const double pass = median_of(r.stub, ClientKind::kPassThrough);
      const double hijack = median_of(r.stub, ClientKind::kHijackFloor);
      parts.push_back(absl::StrCat(
          "{\"stub\": ", JsonString(StubName(r.stub)),
          ", \"client\": ", JsonString(ClientName(r.client)),
          ", \"cpu_us_per_call\": ", JsonNumber(r.median),
          ", \"user_us_per_call\": ", JsonNumber(Median(r.user_us)),
          ", \"cpu_us_per_call_rounds\": [", absl::StrJoin(rounds_json, ", "),
          "], \"vs_plain\": ",
          plain > 0 ? JsonNumber(r.median / plain) : "null",
          ", \"vs_pass_through\": ",
          pass > 0 ? JsonNumber(r.median / pass) : "null",
          ", \"vs_hijack_floor\": ",
          hijack > 0 ? JsonNumber(r.median / hijack) : "null",
          ", \"context_switches_per_call\": ",
          JsonNumber(r.calls > 0
                         ? static_cast<double>(r.context_switches) / r.calls
                         : 0),
          ", \"calls\": ", r.calls, ", \"ok\": ", r.ok, "}"));
    }
    Plan plan = MakePlan(flags);
    const std::string json = absl::StrCat(
        "{", RunJsonHeader(flags, plan, machine, "headline"),
        ", \"rounds\": ", rounds, ", \"calls_per_round\": ", calls,
        ", \"rows\": [\n  ", absl::StrJoin(parts, ",\n  "), "\n]}");
    s = WriteJson(flags.json, json);
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "compare: wrote %s\n", flags.json.c_str());
  }
  return 0;
}

// Many calls through rpcguard, alternating sync and callback chunks of 8
// callers, with faults; reports the client's RSS as it goes.
int RunSoak(const Flags& flags, const Env& env, ServerProcess& server,
            const Machine& machine) {
  const int64_t total =
      flags.soak > 0 ? flags.soak : (flags.quick ? 100000 : 1000000);
  const int chunks = 20;
  const int64_t chunk = std::max<int64_t>(1, total / chunks);
  const absl::Duration deadline = absl::Milliseconds(flags.deadline_ms);
  std::fprintf(stderr,
               "compare --soak: %lld calls through rpcguard, %d%% "
               "UNAVAILABLE, 8 callers, sync and callback chunks of %lld\n",
               static_cast<long long>(total), flags.soak_fail_percent,
               static_cast<long long>(chunk));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(ClientKind::kRpcguard, env.address, RetrySettings());
  if (!channel.ok()) {
    std::fprintf(stderr, "compare: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);

  auto run_chunk = [&](int index, int64_t calls) {
    LoadSpec spec;
    spec.stub = index % 2 == 0 ? StubKind::kSync : StubKind::kCallback;
    spec.concurrency = 8;
    spec.calls = calls;
    spec.deadline = deadline;
    spec.label = "soak";
    return RunLoad(*stub, spec);
  };
  absl::Status s = env.control->SetMode(flags.soak_fail_percent, 0);
  if (!s.ok()) {
    std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
    return 1;
  }
  // Warm-up: one chunk of each stub, not counted, same size as the rest so
  // that the driver's own buffers are already at their size.
  run_chunk(0, chunk);
  run_chunk(1, chunk);
  const int64_t rss_start = ReadRssKib();
  const int64_t server_start = server.RssKib();
  const absl::Time start = absl::Now();
  struct Point {
    int64_t calls;
    int64_t rss_kib;
    int64_t server_rss_kib;
  };
  std::vector<Point> points = {{0, rss_start, server_start}};
  int64_t done = 0;
  int64_t ok = 0;
  int64_t late = 0;
  int64_t peak = rss_start;
  for (int i = 0; i < chunks; ++i) {
    const LoadResult r = run_chunk(i, chunk);
    done += r.calls;
    ok += r.ok;
    late += r.late;
    const int64_t rss = ReadRssKib();
    peak = std::max(peak, rss);
    points.push_back({done, rss, server.RssKib()});
    std::fprintf(stderr, "  %9lld calls  client RSS %7.1f MiB\n",
                 static_cast<long long>(done), rss / 1024.0);
  }
  env.control->SetMode(0, 0).IgnoreError();
  const absl::Duration took = absl::Now() - start;
  const int64_t growth = points.back().rss_kib - rss_start;
  const int64_t second_half =
      points.back().rss_kib - points[points.size() / 2].rss_kib;

  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  std::printf(
      "Soak: %lld calls through rpcguard (after %lld warm-up calls), %d%% "
      "UNAVAILABLE, 8 callers, sync and callback stub in alternate chunks, "
      "deadline %lld ms; took %s.\n\n",
      static_cast<long long>(done), static_cast<long long>(2 * chunk),
      flags.soak_fail_percent,
      static_cast<long long>(absl::ToInt64Milliseconds(deadline)),
      absl::FormatDuration(absl::Trunc(took, absl::Seconds(1))).c_str());
  std::printf(
      "| calls | client RSS MiB | server RSS MiB |\n|---:|---:|---:|\n");
  for (const Point& p : points) {
    std::printf("| %lld | %.1f | %.1f |\n", static_cast<long long>(p.calls),
                p.rss_kib / 1024.0, p.server_rss_kib / 1024.0);
  }
  std::printf(
      "\nclient RSS growth: %.2f MiB over %lld calls (second half: %.2f MiB; "
      "peak %.1f MiB); target < 5 MiB: %s. Success %.2f%%, late calls %lld.\n",
      growth / 1024.0, static_cast<long long>(done), second_half / 1024.0,
      peak / 1024.0, growth < 5 * 1024 ? "met" : "NOT met",
      done > 0 ? 100.0 * ok / done : 0.0, static_cast<long long>(late));
  std::fflush(stdout);

  if (!flags.json.empty()) {
    std::vector<std::string> parts;
    for (const Point& p : points) {
      parts.push_back(
          absl::StrCat("{\"calls\": ", p.calls, ", \"rss_kib\": ", p.rss_kib,
                       ", \"server_rss_kib\": ", p.server_rss_kib, "}"));
    }
    Plan plan = MakePlan(flags);
    const std::string json = absl::StrCat(
        "{", RunJsonHeader(flags, plan, machine, "soak"), ", \"calls\": ", done,
        ", \"fail_percent\": ", flags.soak_fail_percent, ", \"ok\": ", ok,
        ", \"late_calls\": ", late, ", \"rss_growth_kib\": ", growth,
        ", \"rss_growth_second_half_kib\": ", second_half,
        ", \"seconds\": ", absl::ToInt64Seconds(took), ", \"points\": [",
        absl::StrJoin(parts, ", "), "]}");
    absl::Status w = WriteJson(flags.json, json);
    if (!w.ok()) {
      std::fprintf(stderr, "compare: %s\n", w.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "compare: wrote %s\n", flags.json.c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  const std::string path =
      flags.server.empty() ? FindFaultServer(argv[0]) : flags.server;
  if (path.empty()) {
    std::fprintf(stderr,
                 "compare: cannot find fault_server_main in the runfiles; run "
                 "through `./bazelw run` or pass --server=PATH\n");
    return 2;
  }
  // Before any gRPC object exists: this forks.
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(path);
  if (!server.ok()) {
    std::fprintf(stderr, "compare: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "compare: fault server pid %d on %s\n",
               static_cast<int>((*server)->pid()),
               (*server)->address().c_str());
  // Destroyed last, after every client channel (see clients.h).
  std::shared_ptr<grpc::Channel> keep_callback_threads;
  if (flags.callback_keepalive) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> keeper =
        HoldCallbackThreads((*server)->address());
    if (!keeper.ok()) {
      std::fprintf(stderr, "compare: %s\n", keeper.status().ToString().c_str());
      return 1;
    }
    keep_callback_threads = *std::move(keeper);
  }
  const Machine machine = DescribeMachine();
  int rc;
  {
    ServerControl control((*server)->address());
    const Env env{(*server)->address(), &control, path};
    if (flags.headline) {
      rc = RunHeadline(flags, env, machine);
    } else if (flags.soak >= 0) {
      rc = RunSoak(flags, env, **server, machine);
    } else {
      rc = RunCompare(flags, env, machine);
    }
  }
  const absl::Status stopped = (*server)->Stop();
  if (!stopped.ok()) {
    std::fprintf(stderr, "compare: %s\n", stopped.ToString().c_str());
    if (rc == 0) rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace bench
}  // namespace rpcguard

int main(int argc, char** argv) { return rpcguard::bench::Main(argc, argv); }
