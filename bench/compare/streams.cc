// Copyright rpcguard authors.
//
// Streams retried until they commit (issue 23): server-streaming and
// client-streaming calls of 1,000 messages each (Streams.ServerStream,
// Streams.ClientStream, served by the fault server beside FaultService), for
// a plain channel, gRPC's retry (a service-config retryPolicy for both
// methods: gRPC C-core retries a stream until it commits) and rpcguard (the
// same policy, the methods declared IDEMPOTENT).
//
//   streams/none/SHAPE/STUB    nothing fails: client CPU per message
//                              (server, client and bidi shapes; sync,
//                              callback and CQ-async stubs),
//                              rounds interleaved, ratios to plain from the
//                              same run;
//   streams/fail30/SHAPE/sync  the server fails 30% of attempts with
//                              UNAVAILABLE before any response: success,
//                              attempts per call at the server, p99.
//
// One caller, calls one after another, so that the server's seeded draws
// (reseeded per round with the round's seed, the same for every client)
// fall on the same attempts for every client that makes the same attempts.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/compare/families.h"
#include "bench/compare/stream_calls.h"
#include "proto/rpcguard/testing/v1/streams.grpc.pb.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define RPCGUARD_BENCH_CALLGRIND 1
#endif
#endif

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::Streams;

struct StreamScenario {
  const char* key;
  const char* title;
  Shape shape;
  Api stub;
  int fail_percent;
};

constexpr StreamScenario kStreamScenarios[] = {
    {"streams/none/server/sync", "server stream, no faults", Shape::kServer,
     Api::kSync, 0},
    {"streams/none/client/sync", "client stream, no faults", Shape::kClient,
     Api::kSync, 0},
    {"streams/none/server/callback", "server stream, no faults", Shape::kServer,
     Api::kCallback, 0},
    {"streams/none/client/callback", "client stream, no faults", Shape::kClient,
     Api::kCallback, 0},
    {"streams/none/bidi/sync", "bidi stream, no faults", Shape::kBidi,
     Api::kSync, 0},
    {"streams/none/bidi/callback", "bidi stream, no faults", Shape::kBidi,
     Api::kCallback, 0},
    {"streams/none/server/cq", "server stream, no faults", Shape::kServer,
     Api::kCq, 0},
    {"streams/none/client/cq", "client stream, no faults", Shape::kClient,
     Api::kCq, 0},
    {"streams/fail30/server/sync", "server stream, 30% fail first",
     Shape::kServer, Api::kSync, 30},
    {"streams/fail30/client/sync", "client stream, 30% fail first",
     Shape::kClient, Api::kSync, 30},
};

// The clients that make these calls: hijack-floor hijacks a stream and
// forwards every operation to one attempt (bench/stream_floor.h), the floor
// for any design built on hijacking.
constexpr ClientKind kStreamClients[] = {
    ClientKind::kPlain, ClientKind::kHijackFloor, ClientKind::kGrpcRetry,
    ClientKind::kRpcguard};

// The server's seed for round r is kSeed + r.
constexpr uint64_t kSeed = 23;

// `calls` calls one after another; CPU is the whole process's (getrusage).
// Under callgrind (bench/callgrind.sh --stream=SHAPE) a measured round,
// `label` given, is dumped on its own, named by `label`: its instructions
// are those of exactly `calls` streams.
LoadResult RunCalls(Streams::Stub& stub, Shape shape, Api kind, int64_t calls,
                    int64_t* wrong, const std::string* label = nullptr) {
  LoadResult r;
  r.latency_ns.reserve(calls);
#ifdef RPCGUARD_BENCH_CALLGRIND
  if (label != nullptr) CALLGRIND_ZERO_STATS;
#endif
  const ProcessUsage before = GetProcessUsage();
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < calls; ++i) {
    const absl::Time t0 = absl::Now();
    const Outcome o = OneStreamCall(stub, shape, kind);
    const absl::Duration took = absl::Now() - t0;
    r.latency_ns.push_back(absl::ToInt64Nanoseconds(took));
    ++r.calls;
    ++r.codes[static_cast<int>(o.code) & 15];
    if (o.wrong) {
      // The first of a run, for the report; the count is in the table.
      if (*wrong == 0) {
        std::fprintf(stderr,
                     "  wrong result: status OK with %d messages, not %d "
                     "(Write() true for %d)\n",
                     o.got, kMessages, o.written);
      }
      ++*wrong;
    } else if (o.code == grpc::StatusCode::OK) {
      ++r.ok;
    }
    if (took > kStreamDeadline + kLateSlack) ++r.late;
  }
  r.wall = absl::Now() - start;
  const ProcessUsage after = GetProcessUsage();
#ifdef RPCGUARD_BENCH_CALLGRIND
  if (label != nullptr) CALLGRIND_DUMP_STATS_AT(label->c_str());
#endif
  r.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  r.user_seconds = after.user_seconds - before.user_seconds;
  r.context_switches = after.context_switches - before.context_switches;
  std::sort(r.latency_ns.begin(), r.latency_ns.end());
  return r;
}

// One client's channel through one scenario.
struct Lane {
  std::shared_ptr<RpcguardState> state;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Streams::Stub> stub;
  int64_t wrong = 0;
};

class StreamsFamily : public Family {
 public:
  StreamsFamily(const Flags& flags, const Plan& plan)
      : rounds_(flags.rounds > 0 ? flags.rounds : (flags.quick ? 3 : 7)),
        calls_none_(flags.calls > 0 ? flags.calls : (flags.quick ? 5 : 20)),
        calls_fail_(flags.calls > 0 ? flags.calls : (flags.quick ? 20 : 50)),
        warmup_(std::min(plan.warmup, 20)) {
    for (ClientKind c : ClientsOr(flags, kStreamClients)) {
      for (ClientKind s : kStreamClients) {
        if (c == s) clients_.push_back(c);
      }
    }
    if (clients_.empty()) return;
    for (const StreamScenario& s : kStreamScenarios) {
      if (absl::StrContains(s.key, flags.only)) scenarios_.push_back(&s);
    }
  }

  size_t size() const override { return scenarios_.size(); }
  const std::vector<ClientKind>& clients() const override { return clients_; }
  const char* json_key() const override { return "streams"; }

  absl::Status Run(const Env& env) override {
    for (const StreamScenario* sc : scenarios_) {
      absl::Status s = RunScenario(env, *sc);
      if (!s.ok()) return s;
    }
    return env.control->SetStreamFaults(0, 0);
  }

  std::string Preface(absl::Duration took) const override {
    const RetrySettings retry;
    return absl::StrFormat(
        "Issue 23's scenarios: streams of %d messages (server stream: %d "
        "replies to one request; client stream: %d requests, one reply; bidi: "
        "as many requests, then their echoes; cq: the completion-queue API, "
        "one operation at a time), one "
        "caller, calls back to back, deadline %lld ms; %d interleaved "
        "round(s), %lld calls per round without faults, %lld with. fail30: "
        "the server fails 30%% of attempts with UNAVAILABLE before any "
        "response, drawn per attempt from a generator seeded %llu + round "
        "(the same for every client). hijack-floor: each stream hijacked and "
        "forwarded to one attempt, nothing kept (bench/stream_floor.h). "
        "grpc-retry and rpcguard: retryPolicy "
        "maxAttempts %d, backoff %lld..%lld ms x%.0f, UNAVAILABLE retried; "
        "rpcguard's methods IDEMPOTENT, its retry budget off. CPU: the "
        "client process's (getrusage), median of rounds, per message; vs "
        "plain: the median of per-round ratios. attempts/call: attempts the "
        "server saw per call. wrong: calls that ended OK without every "
        "message. Run took %.0f s.\n",
        kMessages, kMessages, kMessages,
        static_cast<long long>(absl::ToInt64Milliseconds(kStreamDeadline)),
        rounds_, static_cast<long long>(calls_none_),
        static_cast<long long>(calls_fail_),
        static_cast<unsigned long long>(kSeed), retry.max_attempts,
        static_cast<long long>(
            absl::ToInt64Milliseconds(retry.initial_backoff)),
        static_cast<long long>(absl::ToInt64Milliseconds(retry.max_backoff)),
        retry.backoff_multiplier, absl::ToDoubleSeconds(took));
  }

  std::vector<Row> Rows() const override {
    std::vector<Row> rows;
    for (const Cell& c : cells_) {
      const Measured& m = c.m;
      const std::vector<double> per_msg = PerMessageRounds(m);
      const double cpu = Median(per_msg);
      const double vs = VsPlain(c);
      Row row;
      row.Both("scenario", "stream",
               absl::StrCat(c.scenario->title, ", ", ApiName(c.scenario->stub)),
               JsonValue::String(c.scenario->key), /*right=*/false)
          .Name("client", "client", ClientName(m.client))
          .JsonOnly("rounds", JsonValue::Int(m.rounds.size()))
          .JsonOnly("messages_per_call", JsonValue::Int(kMessages))
          .Both("calls", "calls", absl::StrCat(m.pooled.calls),
                JsonValue::Int(m.pooled.calls))
          .Both("success", "success_rate", PercentText(m.success()),
                JsonValue::Number(m.success() / 100))
          .Both("wrong", "wrong", absl::StrCat(c.wrong),
                JsonValue::Int(c.wrong))
          .Both("attempts/call", "attempts_per_call",
                Fixed(m.attempts_per_call(), 3),
                JsonValue::Number(m.attempts_per_call()))
          .Both("p50 ms", "p50_ms", Fixed(m.pooled.LatencyMs(0.5), 2),
                JsonValue::Number(m.pooled.LatencyMs(0.5)))
          .Both("p99 ms", "p99_ms", Fixed(m.pooled.LatencyMs(0.99), 2),
                JsonValue::Number(m.pooled.LatencyMs(0.99)))
          .Both("CPU µs/msg", "cpu_us_per_message", Fixed(cpu, 2),
                JsonValue::Number(cpu))
          .JsonOnly("cpu_us_per_message_rounds", NumbersJson(per_msg))
          .JsonOnly("slowest_ms", NumbersJson(Slowest(m.pooled, 5)))
          .Both("vs plain", "vs_plain",
                vs > 0 ? absl::StrFormat("%.2fx", vs) : "-",
                vs > 0 ? JsonValue::Number(vs) : JsonValue())
          .Both("cs/msg", "context_switches_per_message",
                Fixed(m.context_switches_per_call() / kMessages, 3),
                JsonValue::Number(m.context_switches_per_call() / kMessages))
          .JsonOnly("breaker_openings", m.breaker_openings >= 0
                                            ? JsonValue::Int(m.breaker_openings)
                                            : JsonValue())
          .JsonOnly("codes", CodesJson(m.pooled.codes));
      rows.push_back(std::move(row));
    }
    return rows;
  }

  std::string Targets() const override {
    std::string out = "\n";
    for (const Cell& c : cells_) {
      if (c.m.client != ClientKind::kRpcguard) continue;
      const StreamScenario& sc = *c.scenario;
      if (sc.fail_percent == 0) {
        const Cell* plain = Find(sc, ClientKind::kPlain);
        if (plain == nullptr) continue;
        const double vs = VsPlain(c);
        const double medians =
            Median(PerMessageRounds(c.m)) / Median(PerMessageRounds(plain->m));
        absl::StrAppendFormat(
            &out,
            "%s: rpcguard / plain = %.2fx CPU per message, median of "
            "per-round ratios (target <= 1.10x: %s); ratio of medians %.2fx",
            sc.key, vs, vs <= 1.10 ? "met" : "NOT met", medians);
        if (const Cell* g = Find(sc, ClientKind::kGrpcRetry)) {
          absl::StrAppendFormat(&out, "; grpc-retry / plain = %.2fx",
                                VsPlain(*g));
        }
        if (Find(sc, ClientKind::kHijackFloor) != nullptr) {
          const double floor = Vs(c, ClientKind::kHijackFloor);
          absl::StrAppendFormat(
              &out,
              "; rpcguard / hijack-floor = %.2fx (issue 31's target <= "
              "1.10x: %s)",
              floor, floor <= 1.10 ? "met" : "NOT met");
        }
        out.append("\n");
      } else {
        const Cell* g = Find(sc, ClientKind::kGrpcRetry);
        if (g == nullptr) continue;
        absl::StrAppendFormat(
            &out,
            "%s: rpcguard success %.2f%% vs grpc-retry %.2f%% (target >=: "
            "%s); attempts/call %.3f vs %.3f; p99 %.2f ms vs %.2f ms\n",
            sc.key, c.m.success(), g->m.success(),
            c.m.success() >= g->m.success() ? "met" : "NOT met",
            c.m.attempts_per_call(), g->m.attempts_per_call(),
            c.m.pooled.LatencyMs(0.99), g->m.pooled.LatencyMs(0.99));
      }
    }
    return out;
  }

 private:
  struct Cell {
    const StreamScenario* scenario;
    Measured m;
    int64_t wrong;
  };

  // The `n` longest calls in ms, longest first: whether a p99 is a tail
  // or a few stalls.
  static std::vector<double> Slowest(const LoadResult& l, size_t n) {
    std::vector<double> v;
    for (auto it = l.latency_ns.rbegin();
         it != l.latency_ns.rend() && v.size() < n; ++it) {
      v.push_back(*it / 1e6);
    }
    return v;
  }

  static std::vector<double> PerMessageRounds(const Measured& m) {
    std::vector<double> v = m.cpu_us_rounds();
    for (double& d : v) d /= kMessages;
    return v;
  }

  // The median over rounds of this cell's CPU over plain's in the same
  // round: robust to the machine's load drifting between rounds.
  double VsPlain(const Cell& c) const { return Vs(c, ClientKind::kPlain); }

  // The same, over `base`'s cell of the scenario; 0 without one.
  double Vs(const Cell& c, ClientKind base) const {
    const Cell* b_cell = Find(*c.scenario, base);
    if (b_cell == nullptr) return 0;
    const std::vector<double> a = c.m.cpu_us_rounds();
    const std::vector<double> b = b_cell->m.cpu_us_rounds();
    std::vector<double> ratios;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (b[i] > 0) ratios.push_back(a[i] / b[i]);
    }
    return Median(ratios);
  }

  const Cell* Find(const StreamScenario& sc, ClientKind client) const {
    for (const Cell& c : cells_) {
      if (c.scenario == &sc && c.m.client == client) return &c;
    }
    return nullptr;
  }

  absl::Status RunScenario(const Env& env, const StreamScenario& sc) {
    const RetrySettings retry;
    std::vector<Lane> lanes;
    std::vector<Measured> row;
    absl::Status s = env.control->SetStreamFaults(0, 0);
    if (!s.ok()) return s;
    for (ClientKind client : clients_) {
      Lane lane;
      absl::StatusOr<std::shared_ptr<RpcguardState>> state = FreshState(client);
      if (!state.ok()) return state.status();
      lane.state = *state;
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          MakeStreamChannel(client, env.address, retry, lane.state);
      if (!channel.ok()) return channel.status();
      if (!(*channel)->WaitForConnected(
              absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
        return absl::UnavailableError(
            absl::StrCat(ClientName(client), ": cannot connect"));
      }
      lane.channel = *channel;
      lane.stub = Streams::NewStub(lane.channel);
      // Warm-up, faults off: every call must succeed.
      int64_t wrong = 0;
      const LoadResult w =
          RunCalls(*lane.stub, sc.shape, sc.stub, warmup_, &wrong);
      if (w.ok != w.calls) {
        return absl::InternalError(absl::StrCat(
            sc.key, " ", ClientName(client), ": warm-up without faults: ", w.ok,
            " of ", w.calls, " calls succeeded, ", wrong, " wrong"));
      }
      lanes.push_back(std::move(lane));
      row.push_back(Measured{sc.key, sc.title, client});
    }
    const int64_t calls = sc.fail_percent > 0 ? calls_fail_ : calls_none_;
    std::vector<std::string> labels;
    for (const Measured& m : row) {
      labels.push_back(absl::StrCat(sc.key, " ", ClientName(m.client)));
    }
    s = RunRounds(rounds_, row, [&](const Measured& cell, int round) {
      Lane& lane = lanes[&cell - row.data()];
      absl::Status st =
          env.control->SetStreamFaults(sc.fail_percent, kSeed + round);
      if (!st.ok()) return absl::StatusOr<Round>(st);
      absl::StatusOr<int64_t> before = env.control->StreamAttempts();
      if (!before.ok()) return absl::StatusOr<Round>(before.status());
      Round r;
      r.load = RunCalls(*lane.stub, sc.shape, sc.stub, calls, &lane.wrong,
                        &labels[&cell - row.data()]);
      absl::StatusOr<int64_t> after = env.control->StreamAttempts();
      if (!after.ok()) return absl::StatusOr<Round>(after.status());
      r.attempts = *after - *before;
      ReadState(lane.state, &r);
      return absl::StatusOr<Round>(std::move(r));
    });
    if (!s.ok()) return s;
    for (size_t i = 0; i < row.size(); ++i) {
      Measured& m = row[i];
      std::fprintf(stderr,
                   "  %-30s %-11s %5lld calls %6.2f%% ok %lld wrong %.3f "
                   "attempts/call p99 %.2f ms %.3f CPU µs/msg\n",
                   sc.key, std::string(ClientName(m.client)).c_str(),
                   static_cast<long long>(m.pooled.calls), m.success(),
                   static_cast<long long>(lanes[i].wrong),
                   m.attempts_per_call(), m.pooled.LatencyMs(0.99),
                   Median(PerMessageRounds(m)));
      cells_.push_back(Cell{&sc, std::move(m), lanes[i].wrong});
    }
    return absl::OkStatus();
  }

  const int rounds_;
  const int64_t calls_none_;
  const int64_t calls_fail_;
  const int warmup_;
  std::vector<ClientKind> clients_;
  std::vector<const StreamScenario*> scenarios_;
  std::vector<Cell> cells_;
};

}  // namespace

std::unique_ptr<Family> StreamFamily(const Flags& flags, const Plan& plan) {
  return std::make_unique<StreamsFamily>(flags, plan);
}

}  // namespace bench
}  // namespace rpcguard
