// Copyright rpcguard authors.
//
// The headline (--headline): client CPU per call on the no-failure path, 1
// caller, sync and callback stub, median of rounds, each ratio against
// baselines measured in the same run (a plain channel, a pass-through
// interceptor, and the hijack floor: the mechanism rpcguard is built on,
// doing nothing else).

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

// A stub's measurement of one client.
struct HeadlineRow {
  StubKind stub;
  Measured m;
};

double MinRound(const Measured& m) {
  const std::vector<double> v = m.cpu_us_rounds();
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double MaxRound(const Measured& m) {
  const std::vector<double> v = m.cpu_us_rounds();
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

}  // namespace

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

  std::vector<HeadlineRow> rows;
  absl::Status s = env.control->SetMode(0, 0);
  if (!s.ok()) {
    std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
    return 1;
  }
  for (StubKind stub_kind : {StubKind::kSync, StubKind::kCallback}) {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<FaultService::Stub>> stubs;
    std::vector<Measured> cells;
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
      cells.push_back(Measured{std::string(StubName(stub_kind)), "", client});
    }
    s = RunRounds(rounds, cells, [&](const Measured& cell, int) {
      const size_t i = &cell - cells.data();
      LoadSpec spec;
      spec.stub = stub_kind;
      spec.concurrency = 1;
      spec.calls = calls;
      spec.deadline = deadline;
      spec.label = absl::StrCat("headline ", StubName(stub_kind), " ",
                                ClientName(cell.client));
      Round r;
      r.load = RunLoad(*stubs[i], spec);
      return absl::StatusOr<Round>(std::move(r));
    });
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
      return 1;
    }
    for (Measured& m : cells) rows.push_back({stub_kind, std::move(m)});
  }

  auto find = [&](StubKind stub, ClientKind client) -> const Measured* {
    for (const HeadlineRow& r : rows) {
      if (r.stub == stub && r.m.client == client) return &r.m;
    }
    return nullptr;
  };
  auto median_of = [&](StubKind stub, ClientKind client) -> double {
    const Measured* m = find(stub, client);
    return m != nullptr ? m->cpu_us_per_call : 0;
  };
  // The median over rounds of a / b measured in the same round: robust to
  // the machine's load drifting between rounds.
  auto paired = [&](StubKind stub, ClientKind a, ClientKind b) -> double {
    const Measured* ma = find(stub, a);
    const Measured* mb = find(stub, b);
    if (ma == nullptr || mb == nullptr) return 0;
    const std::vector<double> ra = ma->cpu_us_rounds();
    const std::vector<double> rb = mb->cpu_us_rounds();
    std::vector<double> ratios;
    for (size_t i = 0; i < ra.size() && i < rb.size(); ++i) {
      if (rb[i] > 0) ratios.push_back(ra[i] / rb[i]);
    }
    return Median(ratios);
  };
  // The lowest round: interference from other processes only ever adds CPU.
  auto min_of = [&](StubKind stub, ClientKind client) -> double {
    const Measured* m = find(stub, client);
    return m != nullptr ? MinRound(*m) : 0;
  };

  std::vector<Row> report;
  for (const HeadlineRow& r : rows) {
    const Measured& m = r.m;
    const double plain = median_of(r.stub, ClientKind::kPlain);
    const double pass = median_of(r.stub, ClientKind::kPassThrough);
    const double hijack = median_of(r.stub, ClientKind::kHijackFloor);
    // A row's median against a baseline's in the same stub; "-" and null
    // when the baseline was not measured.
    auto versus = [&](Row& row, absl::string_view heading,
                      absl::string_view key, double base) {
      row.Both(
          heading, key,
          base > 0 ? absl::StrFormat("%.2fx", m.cpu_us_per_call / base) : "-",
          base > 0 ? JsonValue::Number(m.cpu_us_per_call / base) : JsonValue());
    };
    Row row;
    row.Name("stub", "stub", StubName(r.stub))
        .Name("client", "client", ClientName(m.client))
        .Both("CPU µs/call", "cpu_us_per_call", Fixed(m.cpu_us_per_call, 1),
              JsonValue::Number(m.cpu_us_per_call))
        .JsonOnly("user_us_per_call", JsonValue::Number(m.user_us_per_call))
        .JsonOnly("cpu_us_per_call_rounds", NumbersJson(m.cpu_us_rounds()))
        .TableOnly("min", Fixed(MinRound(m), 1))
        .TableOnly("max", Fixed(MaxRound(m), 1));
    versus(row, "vs plain", "vs_plain", plain);
    versus(row, "vs pass-through", "vs_pass_through", pass);
    versus(row, "vs hijack-floor", "vs_hijack_floor", hijack);
    row.TableOnly("user µs/call", Fixed(m.user_us_per_call, 1))
        .Both("cs/call", "context_switches_per_call",
              Fixed(m.context_switches_per_call(), 2),
              JsonValue::Number(m.context_switches_per_call()))
        .JsonOnly("calls", JsonValue::Int(m.pooled.calls))
        .Both("ok", "ok", absl::StrCat(m.pooled.ok, "/", m.pooled.calls),
              JsonValue::Int(m.pooled.ok));
    report.push_back(std::move(row));
  }

  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  std::printf(
      "No-failure path, 1 caller, client CPU per call (getrusage), %lld "
      "calls, median of %d rounds; server in its own process. user: the "
      "user-space part (what instruction counts track; the rest is the "
      "kernel's: wake-ups, syscalls). cs/call: the client process's context "
      "switches per call.\n\n",
      static_cast<long long>(calls), rounds);
  std::fputs(MarkdownTable(report).c_str(), stdout);

  // The targets, when every client needed was measured.
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
    JsonValue json = RunJsonHeader(flags, MakePlan(flags), machine, "headline");
    json.Add("rounds", JsonValue::Int(rounds))
        .Add("calls_per_round", JsonValue::Int(calls))
        .Add("rows", JsonRows(report));
    s = WriteJsonFile(flags.json, json);
    if (!s.ok()) {
      std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "compare: wrote %s\n", flags.json.c_str());
  }
  return 0;
}

}  // namespace bench
}  // namespace rpcguard
