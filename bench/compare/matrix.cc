// Copyright rpcguard authors.
//
// The matrix: every client through steady faults, each fault on both stubs
// with 1 and 8 callers. Call-count cells make a fixed number of calls;
// time-bound ones (an outage, a slow server) run for a time, and report the
// attempts per call after their first second, when a breaker or budget has
// had time to act.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

// What the server does to every attempt during a scenario.
struct Fault {
  const char* key;
  const char* title;
  int fail_percent;
  // The server's delay, as a share of the call deadline.
  int delay_percent_of_deadline;
  // Retry budget: gRPC's retryThrottling for the built-in client.
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

absl::StatusOr<Round> RunCell(const Env& env, const Scenario& scenario,
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
  Round cell;
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

class Matrix : public Family {
 public:
  Matrix(const Flags& flags, const Plan& plan)
      : plan_(plan), clients_(ClientsOr(flags, kAllClients)) {
    for (const Fault& f : kFaults) {
      for (StubKind stub : {StubKind::kSync, StubKind::kCallback}) {
        for (int c : {1, 8}) {
          const Scenario s{&f, stub, c};
          if (absl::StrContains(s.Key(), flags.only)) scenarios_.push_back(s);
        }
      }
    }
  }

  size_t size() const override { return scenarios_.size(); }
  const std::vector<ClientKind>& clients() const override { return clients_; }
  const char* json_key() const override { return "cells"; }

  absl::Status Run(const Env& env) override {
    for (const Scenario& scenario : scenarios_) {
      std::vector<Measured> row;
      for (ClientKind client : clients_) {
        row.push_back(Measured{scenario.Key(), scenario.fault->title, client});
      }
      absl::Status s =
          RunRounds(plan_.rounds, row, [&](const Measured& cell, int) {
            return RunCell(env, scenario, cell.client, plan_);
          });
      if (!s.ok()) return s;
      for (size_t i = 0; i < row.size(); ++i) {
        const Measured& cell = row[i];
        std::fprintf(
            stderr,
            "  %-22s %-12s %7lld calls %8.1f µs/call %6.2f%% ok "
            "%.2f attempts/call\n",
            cell.key.c_str(), std::string(ClientName(cell.client)).c_str(),
            static_cast<long long>(cell.pooled.calls), cell.cpu_us_per_call,
            cell.success(), cell.attempts_per_call());
        cells_.push_back({scenario, row[i]});
      }
    }
    return absl::OkStatus();
  }

  std::string Preface(absl::Duration took) const override {
    return absl::StrFormat(
        "Deadline %lld ms per call; late = ended more than %lld ms after its "
        "deadline; attempts counted by the server; CPU is the client "
        "process's (getrusage), median of %d round(s); 'after 1 s' = "
        "attempts per call after the first second of a time-bound cell. Run "
        "took %.0f s.\n",
        static_cast<long long>(absl::ToInt64Milliseconds(plan_.deadline)),
        static_cast<long long>(absl::ToInt64Milliseconds(kLateSlack)),
        plan_.rounds, absl::ToDoubleSeconds(took));
  }

  std::vector<Row> Rows() const override {
    std::vector<Row> rows;
    for (const auto& [scenario, c] : cells_) {
      JsonValue rss_rounds = JsonValue::Array({});
      for (const Round& r : c.rounds) {
        rss_rounds.Push(JsonValue::Int(r.load.rss_growth_kib));
      }
      const std::optional<double> after = c.attempts_per_call_after_1s();
      const std::string stub(StubName(scenario.stub));
      Row row;
      row.Both("scenario", "scenario", c.title, JsonValue::String(c.key),
               /*right=*/false)
          .JsonOnly("fault", JsonValue::String(scenario.fault->key))
          .Name("stub", "stub", stub)
          .Both("callers", "callers", absl::StrCat(scenario.concurrency),
                JsonValue::Int(scenario.concurrency))
          .Name("client", "client", ClientName(c.client))
          .JsonOnly("rounds", JsonValue::Int(c.rounds.size()))
          .Both("calls", "calls", absl::StrCat(c.pooled.calls),
                JsonValue::Int(c.pooled.calls))
          .Both("calls/s", "calls_per_s", Fixed(c.calls_per_s, 0),
                JsonValue::Number(c.calls_per_s))
          .Both("CPU µs/call", "cpu_us_per_call", Fixed(c.cpu_us_per_call, 1),
                JsonValue::Number(c.cpu_us_per_call))
          .JsonOnly("cpu_us_per_call_rounds", NumbersJson(c.cpu_us_rounds()))
          .JsonOnly("context_switches_per_call",
                    JsonValue::Number(c.context_switches_per_call()))
          .Both("p50 ms", "p50_ms", Fixed(c.pooled.LatencyMs(0.5), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.5)))
          .Both("p99 ms", "p99_ms", Fixed(c.pooled.LatencyMs(0.99), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.99)))
          .Both("p99.9 ms", "p999_ms", Fixed(c.pooled.LatencyMs(0.999), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.999)))
          .JsonOnly("max_ms", JsonValue::Number(c.pooled.LatencyMs(1.0)))
          .Both("success", "success_rate", PercentText(c.success()),
                JsonValue::Number(c.success() / 100))
          .Both("attempts/call", "attempts_per_call",
                Fixed(c.attempts_per_call(), 2),
                JsonValue::Number(c.attempts_per_call()))
          .Both("after 1 s", "attempts_per_call_after_1s",
                after ? Fixed(*after, 2) : "-",
                after ? JsonValue::Number(*after) : JsonValue())
          .Both("late", "late_calls", absl::StrCat(c.pooled.late),
                JsonValue::Int(c.pooled.late))
          .Both("RSS Δ KiB", "rss_growth_kib", Fixed(c.rss_growth_kib, 0),
                JsonValue::Number(c.rss_growth_kib))
          .JsonOnly("rss_growth_kib_rounds", std::move(rss_rounds))
          .JsonOnly("codes", CodesJson(c.pooled.codes));
      rows.push_back(std::move(row));
    }
    return rows;
  }

  std::string Targets() const override { return ""; }

 private:
  const Plan plan_;
  const std::vector<ClientKind> clients_;
  std::vector<Scenario> scenarios_;
  std::vector<std::pair<Scenario, Measured>> cells_;
};

}  // namespace

std::unique_ptr<Family> MatrixFamily(const Flags& flags, const Plan& plan) {
  return std::make_unique<Matrix>(flags, plan);
}

}  // namespace bench
}  // namespace rpcguard
