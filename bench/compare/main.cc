// Copyright rpcguard authors.
//
// compare: rpcguard side by side with a plain channel, a pass-through
// interceptor, a hijacking interceptor that makes one attempt and nothing
// else (the floor of the mechanism rpcguard is built on) and gRPC's built-in
// retry, against the fault server running as a separate process on
// 127.0.0.1. This file reads the command line and runs one mode; the
// scenario families are in the files families.h lists.
//
//   ./bazelw run -c opt //bench:compare -- [--quick] [--json=PATH]
//   ./bazelw run -c opt //bench:compare -- --only=restart [--quick]
//   ./bazelw run -c opt //bench:compare -- --only=tail [--quick]
//   ./bazelw run -c opt //bench:compare -- --only=streams [--quick]
//   ./bazelw run -c opt //bench:compare -- --only=backends [--quick]
//   ./bazelw run -c opt //bench:compare -- --headline [--quick]
//   ./bazelw run -c opt //bench:compare -- --soak[=N] [--quick]
//
// See kUsage for every flag.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/compare/common.h"
#include "bench/compare/families.h"
#include "bench/compare/report.h"

namespace rpcguard {
namespace bench {
namespace {

constexpr char kUsage[] =
    R"(compare: rpcguard beside a plain channel, a pass-through interceptor, a
hijacking interceptor that makes one attempt (hijack-floor) and gRPC's built-in
retry, same load, same deadline, server in its own process.

Modes (one per run):
  (default)          every scenario x client; a markdown table on stdout,
                     then the outages (burst, restart, brownout, overload;
                     issue 13) for plain, grpc-retry, grpc-retry-throttled
                     and rpcguard in a second table, then the tails (tail,
                     slowdown; issue 14) for plain, grpc-retry, rpcguard and
                     rpcguard hedged (fixed and adaptive delay) in a third,
                     then the streams (issue 23: CPU per message of 1,000-
                     message server and client streams, sync and callback;
                     30% of attempts failing first) for plain, grpc-retry
                     and rpcguard in a fourth, then three backends behind
                     one target, one failing, refusing connections or 300 ms
                     slow (issue 46 §3; round_robin, rpcguard with and
                     without its outlier detection) in a fifth
  --headline         no-failure client CPU per call, sync and callback stub,
                     1 caller: median of rounds, ratios vs plain,
                     pass-through and hijack-floor measured in the same run
  --soak[=N]         N calls through rpcguard (default 1,000,000; 100,000
                     with --quick), 10% UNAVAILABLE, reports RSS growth

Flags:
  --quick            small run: every scenario and client in under 2 minutes,
                     each outage in under 30 s
  --json=PATH        also write every figure as JSON to PATH
  --only=TEXT        only scenarios whose key contains TEXT, e.g. none/sync/c1
                     (keys: FAULT/STUB/cN, FAULT one of none fail10 fail30
                     outage slow; outages: burst restart brownout
                     overload; tails: tail slowdown, on the callback
                     stub tail/callback slowdown/callback; streams:
                     streams/{none,fail30}/{server,client}/STUB, e.g.
                     --only=streams; backends: backends/{unavailable,
                     refused,healthy,slow}, e.g. --only=backends)
  --clients=A,B      only these clients (plain, pass-through, hijack-floor,
                     grpc-retry, grpc-retry-throttled, rpcguard,
                     rpcguard-hedged, rpcguard-hedged-adaptive)
  --calls=N          calls per cell of a call-count scenario (default 3000;
                     300 with --quick), per round in --headline; per round
                     of a tail or slowdown cell (default 2000; 300 with
                     --quick); per round of a stream cell (default 20
                     without faults, 50 with; 5 and 20 with --quick)
  --seconds=S        length of a time-bound cell (outage, slow, brownout,
                     overload, backends; default 4, with --quick 1.5 for
                     outage, 1 for slow, 2 for brownout, overload and
                     backends); restart runs 1 s, 0.5 s down, then 3 s (1.5 s
                     with --quick)
  --rounds=N         rounds per cell (default 3, 1 with --quick; --headline
                     and streams: 7, 3 with --quick)
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

// The default mode: the matrix, the outages and the tails, one table each,
// and one JSON report.
int RunCompare(const Flags& flags, const Env& env, const Machine& machine) {
  const Plan plan = MakePlan(flags);
  std::unique_ptr<Family> families[] = {
      MatrixFamily(flags, plan), OutageFamily(flags, plan),
      TailFamily(flags, plan), StreamFamily(flags, plan),
      BackendFamily(flags, plan)};
  Family& matrix = *families[0];
  Family& outages = *families[1];
  Family& tails = *families[2];
  Family& streams = *families[3];
  Family& backends = *families[4];
  if (matrix.size() + outages.size() + tails.size() + streams.size() +
          backends.size() ==
      0) {
    std::fprintf(stderr, "compare: no scenario matches --only=%s\n",
                 flags.only.c_str());
    return 2;
  }
  // Only what will run: a streams-only run has a plan of its own.
  if (matrix.size() + outages.size() + tails.size() > 0) {
    std::fprintf(
        stderr,
        "compare: %zu scenarios x %zu clients, %zu figures x %zu clients, %zu "
        "tail scenarios x %zu clients, %d round(s); %lld calls per call-count "
        "cell, %lld per tail cell, deadline %lld ms\n",
        matrix.size(), matrix.clients().size(), outages.size(),
        outages.clients().size(), tails.size(), tails.clients().size(),
        plan.rounds, static_cast<long long>(plan.calls),
        static_cast<long long>(plan.tail_calls),
        static_cast<long long>(absl::ToInt64Milliseconds(plan.deadline)));
  }
  if (streams.size() > 0) {
    std::fprintf(stderr, "compare: %zu stream scenarios x %zu clients\n",
                 streams.size(), streams.clients().size());
  }
  if (backends.size() > 0) {
    std::fprintf(stderr,
                 "compare: %zu backend scenarios x 4 to 6 clients, 3 "
                 "servers of their own\n",
                 backends.size());
  }
  // Every client that will be measured, each once.
  std::vector<ClientKind> warm_clients;
  for (const auto& family : families) {
    if (family->size() == 0) continue;
    for (ClientKind c : family->clients()) {
      if (std::find(warm_clients.begin(), warm_clients.end(), c) ==
          warm_clients.end()) {
        warm_clients.push_back(c);
      }
    }
  }
  absl::Status warm =
      WarmProcess(env, warm_clients, 3 * plan.warmup, plan.deadline);
  if (!warm.ok()) {
    std::fprintf(stderr, "compare: %s\n", warm.ToString().c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  for (const auto& family : families) {
    absl::Status s = family->Run(env);
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const absl::Duration took = absl::Now() - start;

  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  bool first = true;
  JsonValue json = RunJsonHeader(flags, plan, machine, "compare");
  json.Add("rounds", JsonValue::Int(plan.rounds))
      .Add("calls_per_cell", JsonValue::Int(plan.calls))
      .Add("seconds",
           JsonValue::Int(absl::ToInt64Seconds(absl::Now() - start)));
  for (const auto& family : families) {
    const std::vector<Row> rows = family->Rows();
    json.Add(family->json_key(), JsonRows(rows));
    if (rows.empty()) continue;
    std::printf("%s%s\n%s%s", first ? "" : "\n", family->Preface(took).c_str(),
                MarkdownTable(rows).c_str(), family->Targets().c_str());
    std::fflush(stdout);
    first = false;
  }

  if (!flags.json.empty()) {
    absl::Status s = WriteJsonFile(flags.json, json);
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
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
