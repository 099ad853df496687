// Copyright rpcguard authors.
//
// What retries do to a server in trouble ("a blip is not an outage"): each
// client through a burst at start, a server restart under load, a brownout
// and an overload. Every measurement gets fresh channels (rpcguard: a fresh
// registry, so a breaker or budget never carries state over from the last
// one) and reports what the server saw.

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultService;

enum class OutageKind { kBurst, kRestart, kBrownout, kOverload };

struct Outage {
  OutageKind kind;
  const char* key;
  const char* title;
};

constexpr Outage kOutages[] = {
    {OutageKind::kBurst, "burst",
     "burst: 200 concurrent calls, each failing once"},
    {OutageKind::kRestart, "restart",
     "restart: server killed, back on its port 500 ms later"},
    {OutageKind::kBrownout, "brownout",
     "brownout: 30% UNAVAILABLE, maxAttempts 2"},
    {OutageKind::kOverload, "overload",
     "overload: capacity 200/s, callers ~400/s"},
};

// The burst: calls issued at once on the callback stub.
constexpr int kBurstCalls = 200;
// Callers of the steady loads offer at most this many calls a second each.
constexpr absl::Duration kSteadyPace = absl::Milliseconds(10);
constexpr int kOverloadCapacity = 200;

// The retry parameters of an outage: the matrix's, with rpcguard's own
// budget on (rpcguard as shipped: breaker and budget at their defaults),
// and what the scenario changes.
RetrySettings OutageRetry(OutageKind kind) {
  RetrySettings retry;
  retry.rpcguard_budget = true;
  // The issue compares rpcguard and gRPC's retry at the same attempts.
  if (kind == OutageKind::kBrownout) retry.max_attempts = 2;
  // Without it gRPC's retry would not retry a shed attempt at all, and the
  // figure would not say what retries do to an overloaded server.
  if (kind == OutageKind::kOverload) retry.retry_resource_exhausted = true;
  return retry;
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

// The rpcguard clients' state. Only rpcguard itself runs here, as before the
// hedged clients existed.
absl::StatusOr<std::shared_ptr<RpcguardState>> StateFor(ClientKind client) {
  if (client != ClientKind::kRpcguard) return std::shared_ptr<RpcguardState>();
  return RpcguardState::Create();
}

absl::StatusOr<Round> RunBurst(const Env& env, ClientKind client,
                               const Plan& plan, int round) {
  const RetrySettings retry = OutageRetry(OutageKind::kBurst);
  const std::string what = absl::StrCat("burst ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  absl::StatusOr<std::shared_ptr<RpcguardState>> state = StateFor(client);
  if (!state.ok()) return state.status();
  // Connected first: the burst is about the server's answers.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, *state);
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
  Round r;
  r.load = RunLoad(*stub, spec);
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  r.attempts = *after - *before;
  ReadState(*state, &r);
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
absl::StatusOr<Round> RunRestart(const Env& env, ClientKind client,
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
  const RetrySettings retry = OutageRetry(OutageKind::kRestart);
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

  absl::StatusOr<std::shared_ptr<RpcguardState>> state = StateFor(client);
  if (!state.ok()) return state.status();
  // Several channels to one target, as an application with a few of them
  // has; rpcguard's share one registry, as in one process.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<FaultService::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        ConnectedChannel(client, address, retry, *state);
    if (!channel.ok()) return channel.status();
    channels.push_back(*channel);
    stubs.push_back(FaultService::NewStub(*channel));
  }
  absl::StatusOr<int64_t> at_start = control.TotalAttempts();
  if (!at_start.ok()) return at_start.status();
  Round r;
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
  ReadState(*state, &r);
  s = (*restarted)->Stop();
  if (!s.ok()) return s;
  return r;
}

// Brownout and overload: steady paced load on one channel with the server
// failing or shedding attempts.
absl::StatusOr<Round> RunSteady(const Env& env, OutageKind kind,
                                ClientKind client, const Plan& plan) {
  const RetrySettings retry = OutageRetry(kind);
  const bool overload = kind == OutageKind::kOverload;
  const std::string what =
      absl::StrCat(overload ? "overload " : "brownout ", ClientName(client));
  absl::Status s = WarmupApart(env, client, retry, plan, what);
  if (!s.ok()) return s;
  absl::StatusOr<std::shared_ptr<RpcguardState>> state = StateFor(client);
  if (!state.ok()) return state.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(client, env.address, retry, *state);
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
  Round r;
  r.load = RunLoads(SteadyLoads(stubs, 4, absl::Seconds(1), length, what));
  absl::StatusOr<int64_t> after = env.control->TotalAttempts();
  if (!after.ok()) return after.status();
  s = env.control->SetMode(0, 0);
  if (!s.ok()) return s;
  r.attempts = *after - *before;
  ReadState(*state, &r);
  return r;
}

absl::StatusOr<Round> RunOutage(const Env& env, const Outage& outage,
                                ClientKind client, const Plan& plan, bool quick,
                                int round) {
  switch (outage.kind) {
    case OutageKind::kBurst:
      return RunBurst(env, client, plan, round);
    case OutageKind::kRestart:
      return RunRestart(env, client, plan, quick);
    case OutageKind::kBrownout:
    case OutageKind::kOverload:
      return RunSteady(env, outage.kind, client, plan);
  }
  return absl::InvalidArgumentError("unknown outage scenario");
}

std::string OptionalCount(int64_t v) { return v >= 0 ? absl::StrCat(v) : "-"; }
JsonValue OptionalCountJson(int64_t v) {
  return v >= 0 ? JsonValue::Int(v) : JsonValue();
}

class Outages : public Family {
 public:
  Outages(const Flags& flags, const Plan& plan)
      : plan_(plan),
        quick_(flags.quick),
        clients_(ClientsOr(flags, kEvidenceClients)) {
    for (const Outage& o : kOutages) {
      if (absl::StrContains(o.key, flags.only)) outages_.push_back(&o);
    }
  }

  size_t size() const override { return outages_.size(); }
  const std::vector<ClientKind>& clients() const override { return clients_; }
  const char* json_key() const override { return "figures"; }

  absl::Status Run(const Env& env) override {
    for (const Outage* outage : outages_) {
      std::vector<Measured> row;
      for (ClientKind client : clients_) {
        row.push_back(Measured{outage->key, outage->title, client});
      }
      absl::Status s =
          RunRounds(plan_.rounds, row, [&](const Measured& cell, int round) {
            return RunOutage(env, *outage, cell.client, plan_, quick_, round);
          });
      if (!s.ok()) return s;
      for (Measured& cell : row) {
        std::fprintf(stderr,
                     "  %-22s %-20s %7lld calls %6.2f%% ok %.3f attempts/call "
                     "p99 %.1f ms %lld late\n",
                     outage->key, std::string(ClientName(cell.client)).c_str(),
                     static_cast<long long>(cell.pooled.calls), cell.success(),
                     cell.attempts_per_call(), cell.pooled.LatencyMs(0.99),
                     static_cast<long long>(cell.pooled.late));
        cells_.push_back({outage->kind, std::move(cell)});
      }
    }
    return absl::OkStatus();
  }

  std::string Preface(absl::Duration took) const override {
    return absl::StrFormat(
        "Issue 13's scenarios, %d round(s) pooled; fresh channels (rpcguard: "
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
        plan_.rounds, kBurstCalls, 6,
        static_cast<long long>(absl::ToInt64Milliseconds(kSteadyPace)),
        static_cast<long long>(absl::ToInt64Milliseconds(kSteadyPace)),
        kOverloadCapacity,
        static_cast<long long>(absl::ToInt64Milliseconds(kLateSlack)),
        absl::ToDoubleSeconds(took));
  }

  std::vector<Row> Rows() const override {
    std::vector<Row> rows;
    for (const auto& [kind, c] : cells_) {
      std::string opened = "-";
      if (c.breaker_openings == 0) opened = "no";
      if (c.breaker_openings > 0) {
        opened = absl::StrCat("yes (", c.breaker_openings, "x)");
      }
      Row row;
      row.Both("figure", "figure", c.title, JsonValue::String(c.key),
               /*right=*/false)
          .Name("client", "client", ClientName(c.client))
          .JsonOnly("rounds", JsonValue::Int(c.rounds.size()))
          .Both("calls", "calls", absl::StrCat(c.pooled.calls),
                JsonValue::Int(c.pooled.calls))
          .Both("success", "success_rate", PercentText(c.success()),
                JsonValue::Number(c.success() / 100))
          .Both("attempts/call", "attempts_per_call",
                Fixed(c.attempts_per_call(), 3),
                JsonValue::Number(c.attempts_per_call()))
          .Both("p50 ms", "p50_ms", Fixed(c.pooled.LatencyMs(0.5), 1),
                JsonValue::Number(c.pooled.LatencyMs(0.5)))
          .Both("p99 ms", "p99_ms", Fixed(c.pooled.LatencyMs(0.99), 1),
                JsonValue::Number(c.pooled.LatencyMs(0.99)))
          .Both("max ms", "max_ms", Fixed(c.pooled.LatencyMs(1.0), 1),
                JsonValue::Number(c.pooled.LatencyMs(1.0)))
          .Both("late", "late_calls", absl::StrCat(c.pooled.late),
                JsonValue::Int(c.pooled.late))
          .Both("not sent", "not_sent_attempts", OptionalCount(c.not_sent),
                OptionalCountJson(c.not_sent))
          .Both("breaker opened", "breaker_openings", opened,
                OptionalCountJson(c.breaker_openings))
          .JsonOnly("codes", CodesJson(c.pooled.codes));
      rows.push_back(std::move(row));
    }
    return rows;
  }

  // The targets, where the clients they compare were measured.
  std::string Targets() const override {
    std::string out = "\n";
    const Measured* rg = Find(OutageKind::kBurst, ClientKind::kRpcguard);
    if (rg != nullptr) {
      absl::StrAppendFormat(
          &out, "burst: rpcguard's breaker %s (target: stays closed: %s)\n",
          rg->breaker_openings > 0 ? "opened" : "stayed closed",
          rg->breaker_openings > 0 ? "NOT met" : "met");
    }
    rg = Find(OutageKind::kRestart, ClientKind::kRpcguard);
    if (rg != nullptr) {
      absl::StrAppendFormat(
          &out,
          "restart: rpcguard %.2f%% success, %lld late (target: every call "
          "succeeds, none late: %s); %s attempts found no connection\n",
          rg->success(), static_cast<long long>(rg->pooled.late),
          rg->pooled.ok == rg->pooled.calls && rg->pooled.late == 0 ? "met"
                                                                    : "NOT met",
          OptionalCount(rg->not_sent));
    }
    rg = Find(OutageKind::kBrownout, ClientKind::kRpcguard);
    const Measured* grpc = Find(OutageKind::kBrownout, ClientKind::kGrpcRetry);
    if (rg != nullptr) {
      absl::StrAppendFormat(
          &out,
          "brownout: rpcguard %.3f attempts/call at the server (target <= "
          "1.35: %s)",
          rg->attempts_per_call(),
          rg->attempts_per_call() <= 1.35 ? "met" : "NOT met");
      if (grpc != nullptr) {
        absl::StrAppendFormat(
            &out, "; success %.2f%% vs grpc-retry's %.2f%% (target >=: %s)",
            rg->success(), grpc->success(),
            rg->success() >= grpc->success() ? "met" : "NOT met");
      }
      out.append("\n");
    }
    rg = Find(OutageKind::kOverload, ClientKind::kRpcguard);
    if (rg != nullptr) {
      absl::StrAppendFormat(
          &out,
          "overload: rpcguard offered %.3f attempts/call (target <= 1.2: %s)\n",
          rg->attempts_per_call(),
          rg->attempts_per_call() <= 1.2 ? "met" : "NOT met");
    }
    return out;
  }

 private:
  const Measured* Find(OutageKind kind, ClientKind client) const {
    for (const auto& [k, c] : cells_) {
      if (k == kind && c.client == client) return &c;
    }
    return nullptr;
  }

  const Plan plan_;
  const bool quick_;
  const std::vector<ClientKind> clients_;
  std::vector<const Outage*> outages_;
  std::vector<std::pair<OutageKind, Measured>> cells_;
};

}  // namespace

std::unique_ptr<Family> OutageFamily(const Flags& flags, const Plan& plan) {
  return std::make_unique<Outages>(flags, plan);
}

}  // namespace bench
}  // namespace rpcguard
