// Copyright rpcguard authors.
//
// What hedging does to a latency tail ("cut the latency tail without a
// storm"): the server answers some attempts late and fails none, and the
// question is what each client does to the tail and to the server's load.
// tail: 5% of attempts, drawn at random per attempt, 80 ms late: an
// unhedged client's p99 is the late answer itself. slowdown: every attempt
// 30 ms late: a hedge cannot help, so what counts is that hedging stays
// within its extra-load cap (no storm) and costs no latency. Every
// measurement gets a fresh channel (rpcguard: a fresh registry, so the
// hedge cap and the adaptive delay start from nothing) after a warm-up on a
// channel of its own.

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

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
  // The callers' stub: a hedged callback call rides its first copy, a sync
  // one hijacks every copy (issue 31 part 1), so both are measured.
  StubKind stub;
};

constexpr TailScenario kTailScenarios[] = {
    {TailKind::kTail, "tail", "tail: 5% of attempts 80 ms late", 5, 80, 0,
     StubKind::kSync},
    {TailKind::kSlowdown, "slowdown", "slowdown: every attempt 30 ms late", 0,
     0, 30, StubKind::kSync},
    {TailKind::kTail, "tail/callback",
     "tail, callback stub: 5% of attempts 80 ms late", 5, 80, 0,
     StubKind::kCallback},
    {TailKind::kSlowdown, "slowdown/callback",
     "slowdown, callback stub: every attempt 30 ms late", 0, 0, 30,
     StubKind::kCallback},
};

// Closed-loop callers: enough calls a second for a 10 s window of
// first attempts to fund hedges well beyond the reserve.
constexpr int kTailCallers = 8;
// rpcguard's default extra-load cap (HedgingPolicy::max_extra_load) and
// the hedge budget's reserve: 1 a second over its 10 s window.
constexpr double kMaxExtraLoad = 0.05;
constexpr double kHedgeReservePerWindow = 10;
constexpr absl::Duration kHedgeWindow = absl::Seconds(10);

// The most attempts per call the hedge cap allows, rounds pooled: each
// round's channel is fresh, so each may use maxExtraLoad of its calls plus
// the reserve of every 10 s window it spans.
double CapAttemptsPerCall(const Measured& c) {
  double allowed = 0;
  for (const Round& r : c.rounds) {
    allowed += (1 + kMaxExtraLoad) * r.load.calls +
               kHedgeReservePerWindow *
                   std::ceil(absl::FDivDuration(r.load.wall, kHedgeWindow));
  }
  return c.pooled.calls > 0 ? allowed / c.pooled.calls : 0;
}

absl::StatusOr<Round> RunTail(const Env& env, const TailScenario& scenario,
                              ClientKind client, const Plan& plan) {
  // rpcguard as shipped (its breaker and retry budget at their defaults);
  // nothing fails here, so neither ever acts.
  RetrySettings retry;
  retry.rpcguard_budget = true;
  const std::string what = absl::StrCat(scenario.key, " ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  absl::StatusOr<std::shared_ptr<RpcguardState>> state = FreshState(client);
  if (!state.ok()) return state.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, *state);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
  s = env.control->SetMode(0, scenario.delay_ms, 0, scenario.late_percent,
                           scenario.late_ms);
  if (!s.ok()) return s;
  absl::StatusOr<int64_t> before = env.control->TotalAttempts();
  if (!before.ok()) return before.status();
  LoadSpec spec;
  spec.stub = scenario.stub;
  spec.concurrency = kTailCallers;
  spec.calls = plan.tail_calls;
  spec.deadline = plan.deadline;
  spec.label = what;
  Round r;
  r.load = RunLoad(*stub, spec);
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  // Includes cancelled hedges: the server saw them arrive.
  r.attempts = *after - *before;
  ReadState(*state, &r);
  return r;
}

class Tails : public Family {
 public:
  Tails(const Flags& flags, const Plan& plan)
      : plan_(plan), clients_(ClientsOr(flags, kTailClients)) {
    for (const TailScenario& t : kTailScenarios) {
      if (absl::StrContains(t.key, flags.only)) scenarios_.push_back(&t);
    }
  }

  size_t size() const override { return scenarios_.size(); }
  const std::vector<ClientKind>& clients() const override { return clients_; }
  const char* json_key() const override { return "tails"; }

  absl::Status Run(const Env& env) override {
    for (const TailScenario* tail : scenarios_) {
      std::vector<Measured> row;
      for (ClientKind client : clients_) {
        row.push_back(Measured{tail->key, tail->title, client});
      }
      absl::Status s =
          RunRounds(plan_.rounds, row, [&](const Measured& cell, int) {
            return RunTail(env, *tail, cell.client, plan_);
          });
      if (!s.ok()) return s;
      for (Measured& cell : row) {
        std::fprintf(stderr,
                     "  %-22s %-24s %7lld calls %6.2f%% ok %.3f attempts/call "
                     "p99 %.1f ms p99.9 %.1f ms\n",
                     tail->key, std::string(ClientName(cell.client)).c_str(),
                     static_cast<long long>(cell.pooled.calls), cell.success(),
                     cell.attempts_per_call(), cell.pooled.LatencyMs(0.99),
                     cell.pooled.LatencyMs(0.999));
        cells_.push_back({tail, std::move(cell)});
      }
    }
    return absl::OkStatus();
  }

  std::string Preface(absl::Duration took) const override {
    RetrySettings shown;
    return absl::StrFormat(
        "Issue 14's scenarios, %d round(s) of %lld calls pooled; %d "
        "callers back to back (sync stub; /callback: the callback stub), "
        "deadline %lld ms; fresh channels (rpcguard: a "
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
        plan_.rounds, static_cast<long long>(plan_.tail_calls), kTailCallers,
        static_cast<long long>(absl::ToInt64Milliseconds(plan_.deadline)),
        shown.max_attempts, shown.hedge_max_attempts,
        static_cast<long long>(absl::ToInt64Milliseconds(shown.hedging_delay)),
        shown.hedging_percentile, kMaxExtraLoad, absl::ToDoubleSeconds(took));
  }

  std::vector<Row> Rows() const override {
    std::vector<Row> rows;
    for (const auto& [scenario, c] : cells_) {
      Row row;
      row.Both("scenario", "tail", c.title, JsonValue::String(c.key),
               /*right=*/false)
          .Name("client", "client", ClientName(c.client))
          .JsonOnly("rounds", JsonValue::Int(c.rounds.size()))
          .Both("calls", "calls", absl::StrCat(c.pooled.calls),
                JsonValue::Int(c.pooled.calls))
          .Both("success", "success_rate", PercentText(c.success()),
                JsonValue::Number(c.success() / 100))
          .Both("p50 ms", "p50_ms", Fixed(c.pooled.LatencyMs(0.5), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.5)))
          .Both("p99 ms", "p99_ms", Fixed(c.pooled.LatencyMs(0.99), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.99)))
          .Both("p99.9 ms", "p999_ms", Fixed(c.pooled.LatencyMs(0.999), 2),
                JsonValue::Number(c.pooled.LatencyMs(0.999)))
          .JsonOnly("max_ms", JsonValue::Number(c.pooled.LatencyMs(1.0)))
          .Both("attempts/call", "attempts_per_call",
                Fixed(c.attempts_per_call(), 3),
                JsonValue::Number(c.attempts_per_call()))
          .JsonOnly("cap_attempts_per_call",
                    JsonValue::Number(CapAttemptsPerCall(c)))
          .Both("CPU µs/call", "cpu_us_per_call", Fixed(c.cpu_us_per_call, 1),
                JsonValue::Number(c.cpu_us_per_call))
          .JsonOnly("cpu_us_per_call_rounds", NumbersJson(c.cpu_us_rounds()))
          .Both("late", "late_calls", absl::StrCat(c.pooled.late),
                JsonValue::Int(c.pooled.late))
          .JsonOnly("codes", CodesJson(c.pooled.codes));
      rows.push_back(std::move(row));
    }
    return rows;
  }

  std::string Targets() const override {
    std::string out = "\n";
    // The unhedged reference: plain, else rpcguard with retries only.
    auto unhedged = [&](const TailScenario* scenario) -> const Measured* {
      const Measured* c = Find(scenario, ClientKind::kPlain);
      return c != nullptr ? c : Find(scenario, ClientKind::kRpcguard);
    };
    for (const TailScenario* scenario : scenarios_) {
      for (ClientKind h :
           {ClientKind::kRpcguardHedged, ClientKind::kRpcguardHedgedAdaptive}) {
        const std::string name(ClientName(h));
        const Measured* c = Find(scenario, h);
        const Measured* base = unhedged(scenario);
        if (c == nullptr) continue;
        if (scenario->kind == TailKind::kTail) {
          absl::StrAppendFormat(
              &out, "%s: %s %.3f attempts/call (target <= 1.10: %s)",
              scenario->key, name, c->attempts_per_call(),
              c->attempts_per_call() <= 1.10 ? "met" : "NOT met");
          if (base != nullptr && base->pooled.LatencyMs(0.99) > 0) {
            const double ratio =
                c->pooled.LatencyMs(0.99) / base->pooled.LatencyMs(0.99);
            absl::StrAppendFormat(
                &out,
                "; p99 %.2f ms = %.2fx %s's %.2f ms (target <= 0.33x: %s)",
                c->pooled.LatencyMs(0.99), ratio, ClientName(base->client),
                base->pooled.LatencyMs(0.99),
                ratio <= 1.0 / 3 ? "met" : "NOT met");
          }
        } else {
          const double cap = CapAttemptsPerCall(*c);
          absl::StrAppendFormat(
              &out,
              "%s: %s %.3f attempts/call (target: within the cap, 1.05 + "
              "reserve = %.3f: %s)",
              scenario->key, name, c->attempts_per_call(), cap,
              c->attempts_per_call() <= cap ? "met" : "NOT met");
          if (base != nullptr) {
            absl::StrAppendFormat(
                &out, "; p99 %.2f ms vs %s's %.2f ms (target <=: %s)",
                c->pooled.LatencyMs(0.99), ClientName(base->client),
                base->pooled.LatencyMs(0.99),
                c->pooled.LatencyMs(0.99) <= base->pooled.LatencyMs(0.99)
                    ? "met"
                    : "NOT met");
          }
        }
        out.append("\n");
      }
    }
    return out;
  }

 private:
  const Measured* Find(const TailScenario* scenario, ClientKind client) const {
    for (const auto& [s, c] : cells_) {
      if (s == scenario && c.client == client) return &c;
    }
    return nullptr;
  }

  const Plan plan_;
  const std::vector<ClientKind> clients_;
  std::vector<const TailScenario*> scenarios_;
  std::vector<std::pair<const TailScenario*, Measured>> cells_;
};

}  // namespace

std::unique_ptr<Family> TailFamily(const Flags& flags, const Plan& plan) {
  return std::make_unique<Tails>(flags, plan);
}

}  // namespace bench
}  // namespace rpcguard
