// Copyright rpcguard authors.

#include "bench/compare/common.h"

#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

std::string ReadFirstLine(const std::string& path, absl::string_view prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, prefix)) return line;
  }
  return "";
}

}  // namespace

Plan MakePlan(const Flags& flags) {
  Plan plan;
  plan.rounds = flags.rounds > 0 ? flags.rounds : (flags.quick ? 1 : 3);
  plan.calls = flags.calls > 0 ? flags.calls : (flags.quick ? 300 : 3000);
  // Per round: 3 rounds pool 6,000 calls a cell, enough for a p99.9 that
  // rests on 6 calls.
  plan.tail_calls = flags.calls > 0 ? flags.calls : (flags.quick ? 300 : 2000);
  plan.seconds = flags.seconds > 0 ? flags.seconds : (flags.quick ? 0 : 4);
  plan.time_cap = 400000;
  plan.warmup = flags.warmup >= 0 ? flags.warmup : (flags.quick ? 100 : 300);
  plan.deadline = absl::Milliseconds(flags.deadline_ms);
  plan.hedging_delay = absl::Milliseconds(flags.hedging_delay_ms);
  return plan;
}

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

std::string MachineLine(const Machine& m) {
  return absl::StrCat(m.cpu, ", ", m.cores, " cores, ", m.kernel, ", gRPC ",
                      m.grpc, ", load average at start ", m.loadavg);
}

JsonValue RunJsonHeader(const Flags& flags, const Plan& plan,
                        const Machine& machine, absl::string_view mode) {
  RetrySettings retry;
  retry.budget = true;
  JsonValue m = JsonValue::Object();
  m.Add("cpu", JsonValue::String(machine.cpu))
      .Add("cores", JsonValue::Int(machine.cores))
      .Add("kernel", JsonValue::String(machine.kernel))
      .Add("grpc", JsonValue::String(machine.grpc))
      .Add("loadavg_at_start", JsonValue::String(machine.loadavg));
  JsonValue header = JsonValue::Object();
  header.Add("mode", JsonValue::String(mode))
      .Add("quick", JsonValue::Bool(flags.quick))
      .Add("machine", std::move(m))
      .Add("deadline_ms",
           JsonValue::Int(absl::ToInt64Milliseconds(plan.deadline)))
      .Add("late_slack_ms",
           JsonValue::Int(absl::ToInt64Milliseconds(kLateSlack)))
      .Add("service_config_with_budget",
           JsonValue::String(ServiceConfigJson(retry)));
  return header;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectedChannel(
    ClientKind client, const std::string& address, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state) {
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

bool IsRpcguard(ClientKind client) {
  return client == ClientKind::kRpcguard ||
         client == ClientKind::kRpcguardHedged ||
         client == ClientKind::kRpcguardHedgedAdaptive;
}

absl::StatusOr<std::shared_ptr<RpcguardState>> FreshState(ClientKind client) {
  if (!IsRpcguard(client)) return std::shared_ptr<RpcguardState>();
  return RpcguardState::Create();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void ReadState(const std::shared_ptr<RpcguardState>& state, Round* r) {
  if (state == nullptr) return;
  r->not_sent = state->not_sent_attempts();
  r->breaker_openings = state->breaker_openings();
}

void Measured::Aggregate() {
  std::vector<double> rates, cpu, user, rss;
  pooled = LoadResult();
  attempts = calls_after_1s = attempts_after_1s = 0;
  not_sent = breaker_openings = -1;
  for (const Round& r : rounds) {
    const LoadResult& l = r.load;
    pooled.calls += l.calls;
    pooled.ok += l.ok;
    pooled.late += l.late;
    pooled.wall += l.wall;
    pooled.cpu_seconds += l.cpu_seconds;
    pooled.user_seconds += l.user_seconds;
    pooled.context_switches += l.context_switches;
    for (int c = 0; c < 17; ++c) pooled.codes[c] += l.codes[c];
    pooled.latency_ns.insert(pooled.latency_ns.end(), l.latency_ns.begin(),
                             l.latency_ns.end());
    attempts += r.attempts;
    if (r.sampled) {
      calls_after_1s += r.calls_after_1s;
      attempts_after_1s += r.attempts_after_1s;
    }
    // -1 until a round reports one: a client without the figure shows "-".
    if (r.not_sent >= 0) not_sent = std::max<int64_t>(not_sent, 0) + r.not_sent;
    if (r.breaker_openings >= 0) {
      breaker_openings =
          std::max<int64_t>(breaker_openings, 0) + r.breaker_openings;
    }
    if (l.calls > 0) {
      rates.push_back(l.calls / absl::ToDoubleSeconds(l.wall));
      cpu.push_back(l.cpu_seconds * 1e6 / l.calls);
    }
    // The headline's: a round without calls counts as one call.
    user.push_back(l.user_seconds * 1e6 / std::max<int64_t>(1, l.calls));
    rss.push_back(static_cast<double>(l.rss_growth_kib));
  }
  std::sort(pooled.latency_ns.begin(), pooled.latency_ns.end());
  calls_per_s = Median(rates);
  cpu_us_per_call = Median(cpu);
  user_us_per_call = Median(user);
  rss_growth_kib = Median(rss);
}

std::optional<double> Measured::attempts_per_call_after_1s() const {
  if (calls_after_1s < 20) return std::nullopt;
  return static_cast<double>(attempts_after_1s) / calls_after_1s;
}

std::vector<double> Measured::cpu_us_rounds() const {
  std::vector<double> out;
  for (const Round& r : rounds) {
    out.push_back(r.load.calls > 0 ? r.load.cpu_seconds * 1e6 / r.load.calls
                                   : 0);
  }
  return out;
}

JsonValue NumbersJson(const std::vector<double>& v) {
  std::vector<JsonValue> items;
  for (double d : v) items.push_back(JsonValue::Number(d));
  return JsonValue::Array(std::move(items));
}

JsonValue CodesJson(const std::array<int64_t, 17>& codes) {
  JsonValue out = JsonValue::Object();
  for (int c = 0; c < 17; ++c) {
    if (codes[c] != 0) out.Add(absl::StrCat(c), JsonValue::Int(codes[c]));
  }
  return out;
}

}  // namespace bench
}  // namespace rpcguard
