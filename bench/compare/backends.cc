// Copyright rpcguard authors.
//
// Three backends behind one target (issue 46 §3, "retries and hedges leave
// the backend that failed"): three fault servers, each its own process,
// behind "ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3", round_robin chosen
// by every client's service config, one backend in trouble:
//   backends/unavailable  it answers UNAVAILABLE to everything;
//   backends/refused      nothing listens on its port (connections refused);
//   backends/slow         it answers 300 ms late; hedged clients;
//   backends/healthy      nothing wrong: the latency backends/slow is
//                         judged against, same clients, same run.
// rpcguard with CreateChannel's outlier detection (its default) and without
// it, beside a plain channel and gRPC's own retry (its retryPolicy in the
// service config). Every measurement gets a fresh channel (rpcguard: a
// fresh registry), created after the fault is set and loaded at once, so
// that "after the first second" is the second after outlier detection's
// first look. A sampler reads the bad backend's attempt count at 1 s.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

enum class Trouble { kUnavailable, kRefused, kSlow, kHealthy };

struct BackendScenario {
  Trouble trouble;
  const char* key;
  const char* title;
};

constexpr BackendScenario kBackendScenarios[] = {
    {Trouble::kUnavailable, "backends/unavailable",
     "one of 3 backends answers UNAVAILABLE to everything"},
    {Trouble::kRefused, "backends/refused",
     "one of 3 backends refuses connections"},
    {Trouble::kHealthy, "backends/healthy", "3 healthy backends, hedged"},
    {Trouble::kSlow, "backends/slow", "one of 3 backends 300 ms slow, hedged"},
};

// The clients of this family: the retrying ones for the failures, the
// hedged ones for latency, rpcguard with and without its outlier detection,
// and variants that show what the figures depend on.
enum class FleetClient {
  kPlain,
  kGrpcRetry,
  kRpcguardOff,   // outlier detection off (Options)
  kRpcguard,      // as shipped
  kRpcguardHalf,  // outlier detection looking every 0.5 s
  kHedgedOff,
  kHedged,
  // The extra-load cap raised to 50%, so that every slow first copy can be
  // hedged, and its cancelled copy counts against the slow backend.
  kHedgedUncapped,
  // Retries (no hedging) with a 50 ms per-attempt timeout: an attempt at
  // the slow backend ends DEADLINE_EXCEEDED, a failure A50 counts.
  kAttemptTimeout,
};

struct FleetClientSpec {
  FleetClient client;
  const char* name;
  // Hedged (the benchmarks' hedgingPolicy) rather than retried.
  bool hedged;
  bool outlier_detection;
  // Added to the method's entry of the config (its "rpcguard" object).
  const char* method_rpcguard;
  absl::Duration interval;
};

constexpr FleetClientSpec kFleetClients[] = {
    {FleetClient::kPlain, "plain", false, false, "", absl::Seconds(1)},
    {FleetClient::kGrpcRetry, "grpc-retry", false, false, "", absl::Seconds(1)},
    {FleetClient::kRpcguardOff, "rpcguard, outlier detection off", false, false,
     "", absl::Seconds(1)},
    {FleetClient::kRpcguard, "rpcguard", false, true, "", absl::Seconds(1)},
    {FleetClient::kRpcguardHalf, "rpcguard, interval 0.5 s", false, true, "",
     absl::Milliseconds(500)},
    {FleetClient::kHedgedOff, "rpcguard-hedged, outlier detection off", true,
     false, "", absl::Seconds(1)},
    {FleetClient::kHedged, "rpcguard-hedged", true, true, "", absl::Seconds(1)},
    {FleetClient::kHedgedUncapped, "rpcguard-hedged, maxExtraLoad 0.5", true,
     true, R"("maxExtraLoad": 0.5)", absl::Seconds(1)},
    {FleetClient::kAttemptTimeout, "rpcguard, perAttemptTimeout 50 ms", false,
     true, R"("perAttemptTimeout": "0.05s")", absl::Seconds(1)},
};

const FleetClientSpec& SpecOf(FleetClient c) {
  for (const FleetClientSpec& s : kFleetClients) {
    if (s.client == c) return s;
  }
  return kFleetClients[0];
}

absl::string_view FleetClientName(FleetClient c) { return SpecOf(c).name; }

bool IsRpcguardClient(FleetClient c) {
  return c != FleetClient::kPlain && c != FleetClient::kGrpcRetry;
}

std::vector<FleetClient> ClientsOf(Trouble t) {
  switch (t) {
    case Trouble::kUnavailable:
      return {FleetClient::kPlain, FleetClient::kGrpcRetry,
              FleetClient::kRpcguardOff, FleetClient::kRpcguard,
              FleetClient::kRpcguardHalf};
    case Trouble::kRefused:
      return {FleetClient::kPlain, FleetClient::kGrpcRetry,
              FleetClient::kRpcguardOff, FleetClient::kRpcguard};
    case Trouble::kSlow:
    case Trouble::kHealthy:
      break;
  }
  return {FleetClient::kPlain,          FleetClient::kGrpcRetry,
          FleetClient::kHedgedOff,      FleetClient::kHedged,
          FleetClient::kHedgedUncapped, FleetClient::kAttemptTimeout};
}

constexpr int kBackends = 3;
// The bad backend is the middle one: round_robin starts nowhere in
// particular, so its place does not matter.
constexpr int kBad = 1;
constexpr int kSlowMs = 300;
// 8 sync callers, each starting a call at most every 10 ms (~800 calls a
// second, ~270 per backend: well above outlier detection's 10 per interval,
// and what 2 cores carry beside 3 server processes).
constexpr int kCallers = 8;
constexpr absl::Duration kPace = absl::Milliseconds(10);
// Long enough for the slow backend's answer: latency, not failures.
constexpr absl::Duration kDeadline = absl::Seconds(1);
constexpr absl::Duration kFirstSecond = absl::Seconds(1);
constexpr char kRoundRobin[] =
    R"({"loadBalancingConfig": [{"round_robin": {}}]})";

// The retry parameters: the issue's 3 attempts; rpcguard as shipped (its
// breaker and retry budget at their defaults). Hedged: the benchmarks'
// hedgingPolicy (maxAttempts 2, hedgingDelay 10 ms), the extra-load cap at
// its default.
RetrySettings FleetRetry() {
  RetrySettings retry;
  retry.max_attempts = 3;
  retry.rpcguard_budget = true;
  return retry;
}

// `json` (an object) with round_robin chosen in it.
std::string WithRoundRobin(std::string json) {
  json.pop_back();  // the closing brace
  return json + R"(, "loadBalancingConfig": [{"round_robin": {}}]})";
}

grpc::ChannelArguments Args(const std::string& service_config) {
  grpc::ChannelArguments args;
  // No two channels share a connection (as every client of compare).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetServiceConfigJSON(service_config);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> FleetChannel(
    FleetClient client, const std::string& target,
    const std::shared_ptr<RpcguardState>& state) {
  const RetrySettings retry = FleetRetry();
  switch (client) {
    case FleetClient::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), Args(kRoundRobin));
    case FleetClient::kGrpcRetry:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(),
          Args(WithRoundRobin(ServiceConfigJson(retry))));
    default:
      break;
  }
  const FleetClientSpec& spec = SpecOf(client);
  std::string json =
      spec.hedged ? HedgedConfigJson(retry, false) : ServiceConfigJson(retry);
  if (*spec.method_rpcguard != '\0') {
    // {"methodConfig": [{... "retryPolicy" or "hedgingPolicy": {...}}]}:
    // the method's rpcguard object goes beside its policy.
    const std::string tail = "}]}";
    if (!absl::EndsWith(json, tail)) {
      return absl::InternalError(absl::StrCat("unexpected config ", json));
    }
    json = absl::StrCat(json.substr(0, json.size() - tail.size()),
                        ", \"rpcguard\": {", spec.method_rpcguard, "}}]}");
  }
  absl::StatusOr<Config> config = Config::FromJson(json);
  if (!config.ok()) return config.status();
  Options options;
  options.config = *std::move(config);
  options.breaker_registry = state->registry();
  options.trace_sink = state->sink();
  options.outlier_detection.enabled = spec.outlier_detection;
  options.outlier_detection.interval = spec.interval;
  // The caller's choice of round_robin, as an application writes it.
  return CreateChannel(target, grpc::InsecureChannelCredentials(),
                       std::move(options), Args(kRoundRobin));
}

// One call as the driver saw it.
struct CallRecord {
  absl::Duration start;  // from the load's start
  absl::Duration latency;
  grpc::StatusCode code;
};

// `kCallers` paced sync callers for `length`.
std::vector<CallRecord> Drive(FaultService::Stub& stub, absl::Duration length) {
  absl::Mutex mu;
  std::vector<CallRecord> all;
  absl::Notification go;
  const absl::Time start = absl::Now() + absl::Milliseconds(20);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      std::vector<CallRecord> mine;
      absl::Time next = start;
      int n = 0;
      while (next < start + length) {
        absl::SleepFor(next - absl::Now());
        const absl::Time t0 = absl::Now();
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(t0 + kDeadline));
        FaultRequest req;
        req.set_op_id(absl::StrCat("backends-", i, "-", n++));
        FaultReply reply;
        const grpc::Status s = stub.Get(&ctx, req, &reply);
        const absl::Time t1 = absl::Now();
        mine.push_back({t0 - start, t1 - t0, s.error_code()});
        next = std::max(next + kPace, t1);
      }
      absl::MutexLock lock(&mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  return all;
}

// A port bound on 127.0.0.1 with nothing listening: connections to it are
// refused, and it is nobody else's while this lives.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 &&
        bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;

  // Empty when no port could be had.
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

// One client through one scenario, its rounds pooled.
struct FleetCell {
  const BackendScenario* scenario;
  FleetClient client;
  int rounds = 0;
  std::vector<CallRecord> calls;
  int64_t attempts = 0;           // at every backend
  int64_t bad_attempts = 0;       // at the bad backend
  int64_t bad_after_1s = 0;       // at the bad backend after the first second
  int64_t breaker_openings = -1;  // rpcguard only

  int64_t ok(bool after_1s) const {
    int64_t n = 0;
    for (const CallRecord& c : calls) {
      if ((!after_1s || c.start >= kFirstSecond) && c.code == grpc::OK) ++n;
    }
    return n;
  }
  int64_t count(bool after_1s) const {
    if (!after_1s) return static_cast<int64_t>(calls.size());
    int64_t n = 0;
    for (const CallRecord& c : calls) n += c.start >= kFirstSecond;
    return n;
  }
  // Calls per final status code.
  std::array<int64_t, 17> codes() const {
    std::array<int64_t, 17> out = {};
    for (const CallRecord& c : calls) {
      if (c.code >= 0 && c.code < 17) ++out[c.code];
    }
    return out;
  }
  double success(bool after_1s) const {
    return 100 * Share(ok(after_1s), count(after_1s));
  }
  // The q-quantile of latency in ms (nearest rank), all calls or those
  // started after the first second.
  double LatencyMs(double q, bool after_1s) const {
    LoadResult r;
    for (const CallRecord& c : calls) {
      if (!after_1s || c.start >= kFirstSecond) {
        r.latency_ns.push_back(absl::ToInt64Nanoseconds(c.latency));
      }
    }
    std::sort(r.latency_ns.begin(), r.latency_ns.end());
    return r.LatencyMs(q);
  }
};

class Backends : public Family {
 public:
  Backends(const Flags& flags, const Plan& plan)
      : plan_(plan),
        length_(absl::Seconds(plan.seconds > 0 ? plan.seconds : 2)) {
    for (const BackendScenario& s : kBackendScenarios) {
      if (absl::StrContains(s.key, flags.only)) scenarios_.push_back(&s);
    }
  }

  size_t size() const override { return scenarios_.size(); }
  // For the process warm-up only: the kinds of channel this family makes.
  const std::vector<ClientKind>& clients() const override {
    static const std::vector<ClientKind> kinds = {
        ClientKind::kPlain, ClientKind::kGrpcRetry, ClientKind::kRpcguard,
        ClientKind::kRpcguardHedged};
    return kinds;
  }
  const char* json_key() const override { return "backends"; }

  absl::Status Run(const Env& env) override {
    if (scenarios_.empty()) return absl::OkStatus();
    // Three servers of this family's own, started from this thread (they
    // get SIGTERM when it ends).
    std::vector<std::unique_ptr<ServerProcess>> servers;
    std::vector<std::unique_ptr<ServerControl>> controls;
    for (int i = 0; i < kBackends; ++i) {
      absl::StatusOr<std::unique_ptr<ServerProcess>> s =
          ServerProcess::Start(env.server_path);
      if (!s.ok()) return s.status();
      controls.push_back(std::make_unique<ServerControl>((*s)->address()));
      servers.push_back(*std::move(s));
    }
    RefusingPort refusing;
    if (refusing.address().empty()) {
      return absl::InternalError("backends: no port to refuse connections on");
    }
    for (const BackendScenario* scenario : scenarios_) {
      std::vector<FleetCell> row;
      for (FleetClient c : ClientsOf(scenario->trouble)) {
        row.push_back(FleetCell{scenario, c});
      }
      // Each round in another order, so that no client always goes first.
      for (int round = 0; round < plan_.rounds; ++round) {
        for (size_t k = 0; k < row.size(); ++k) {
          FleetCell& cell = row[(k + round) % row.size()];
          absl::Status s = Measure(servers, controls, refusing, &cell);
          if (!s.ok()) {
            return absl::Status(
                s.code(),
                absl::StrCat(scenario->key, " ", FleetClientName(cell.client),
                             ": ", s.message()));
          }
        }
      }
      for (FleetCell& cell : row) {
        std::fprintf(
            stderr,
            "  %-22s %-40s %7zu calls %7.3f%% ok (%7.3f%% after 1 s) p99 "
            "%.1f ms (%.1f after 1 s) %.3f attempts/call, bad backend %lld "
            "(%lld after 1 s)\n",
            scenario->key, std::string(FleetClientName(cell.client)).c_str(),
            cell.calls.size(), cell.success(false), cell.success(true),
            cell.LatencyMs(0.99, false), cell.LatencyMs(0.99, true),
            Share(cell.attempts, cell.count(false)),
            static_cast<long long>(cell.bad_attempts),
            static_cast<long long>(cell.bad_after_1s));
        cells_.push_back(std::move(cell));
      }
    }
    for (auto& s : servers) {
      absl::Status stopped = s->Stop();
      if (!stopped.ok()) return stopped;
    }
    return absl::OkStatus();
  }

  std::string Preface(absl::Duration took) const override {
    return absl::StrFormat(
        "Issue 46 §3: three fault servers (each its own process) behind one "
        "target, ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3, round_robin "
        "chosen by every client's service config; %d round(s) of %.1f s "
        "pooled; %d sync callers each starting a call at most every %lld ms, "
        "deadline %lld ms; a fresh channel per measurement (rpcguard: a fresh "
        "registry, its default breaker and retry budget), made after the "
        "fault is set and loaded at once. grpc-retry and rpcguard: "
        "maxAttempts 3 (UNAVAILABLE); rpcguard-hedged: hedgingPolicy "
        "maxAttempts 2, hedgingDelay 10 ms, extra-load cap at its default "
        "(5%% of first attempts plus 1 a second), or raised to 50%%; "
        "perAttemptTimeout 50 ms: retries, each attempt 50 ms at most. "
        "rpcguard's outlier "
        "detection: CreateChannel's default (interval 1 s, failure "
        "percentage > 85%% of >= 10 calls, at least 2 backends). after 1 s: "
        "calls started after the load's first second; bad: attempts the "
        "troubled backend received (after 1 s: sampled at 1 s). Run took "
        "%.0f s.\n",
        plan_.rounds, absl::ToDoubleSeconds(length_), kCallers,
        static_cast<long long>(absl::ToInt64Milliseconds(kPace)),
        static_cast<long long>(absl::ToInt64Milliseconds(kDeadline)),
        absl::ToDoubleSeconds(took));
  }

  std::vector<Row> Rows() const override {
    std::vector<Row> rows;
    for (const FleetCell& c : cells_) {
      std::string opened = "-";
      if (c.breaker_openings == 0) opened = "no";
      if (c.breaker_openings > 0) {
        opened = absl::StrCat("yes (", c.breaker_openings, "x)");
      }
      const bool has_bad = c.scenario->trouble != Trouble::kHealthy;
      Row row;
      row.Both("backends", "backends", c.scenario->title,
               JsonValue::String(c.scenario->key), /*right=*/false)
          .Name("client", "client", FleetClientName(c.client))
          .JsonOnly("rounds", JsonValue::Int(c.rounds))
          .Both("calls", "calls", absl::StrCat(c.count(false)),
                JsonValue::Int(c.count(false)))
          .Both("success", "success_rate", PercentText(c.success(false)),
                JsonValue::Number(c.success(false) / 100))
          .Both("after 1 s", "success_rate_after_1s",
                PercentText(c.success(true)),
                JsonValue::Number(c.success(true) / 100))
          .Both("p50 ms", "p50_ms", Fixed(c.LatencyMs(0.5, false), 2),
                JsonValue::Number(c.LatencyMs(0.5, false)))
          .Both("p99 ms", "p99_ms", Fixed(c.LatencyMs(0.99, false), 2),
                JsonValue::Number(c.LatencyMs(0.99, false)))
          .Both("p99 after 1 s", "p99_ms_after_1s",
                Fixed(c.LatencyMs(0.99, true), 2),
                JsonValue::Number(c.LatencyMs(0.99, true)))
          .JsonOnly("max_ms", JsonValue::Number(c.LatencyMs(1.0, false)))
          .Both("attempts/call", "attempts_per_call",
                Fixed(Share(c.attempts, c.count(false)), 3),
                JsonValue::Number(Share(c.attempts, c.count(false))))
          .Both("bad", "bad_backend_attempts",
                has_bad ? absl::StrCat(c.bad_attempts) : "-",
                has_bad ? JsonValue::Int(c.bad_attempts) : JsonValue())
          .Both("bad after 1 s", "bad_backend_attempts_after_1s",
                has_bad ? absl::StrCat(c.bad_after_1s) : "-",
                has_bad ? JsonValue::Int(c.bad_after_1s) : JsonValue())
          .Both("breaker opened", "breaker_openings", opened,
                c.breaker_openings >= 0 ? JsonValue::Int(c.breaker_openings)
                                        : JsonValue())
          .JsonOnly("codes", CodesJson(c.codes()));
      rows.push_back(std::move(row));
    }
    return rows;
  }

  // The issue's targets, for rpcguard as shipped, gRPC's retry beside it.
  std::string Targets() const override {
    std::string out = "\n";
    auto met = [](bool b) { return b ? "met" : "NOT met"; };
    const FleetCell* grpc =
        Find(Trouble::kUnavailable, FleetClient::kGrpcRetry);
    for (FleetClient c : {FleetClient::kRpcguard, FleetClient::kRpcguardHalf}) {
      const FleetCell* rg = Find(Trouble::kUnavailable, c);
      if (rg == nullptr) continue;
      absl::StrAppendFormat(
          &out,
          "backends/unavailable: %s %.3f%% success after the first second "
          "(target >= 99.9%%: %s), %.3f%% over the run (target >= 99.5%%: "
          "%s), breaker %s (target: closed: %s)",
          FleetClientName(c), rg->success(true), met(rg->success(true) >= 99.9),
          rg->success(false), met(rg->success(false) >= 99.5),
          rg->breaker_openings > 0 ? "opened" : "closed",
          met(rg->breaker_openings == 0));
      if (grpc != nullptr) {
        absl::StrAppendFormat(&out, "; grpc-retry %.3f%% and %.3f%%",
                              grpc->success(true), grpc->success(false));
      }
      out.append("\n");
    }
    for (FleetClient c : {FleetClient::kHedged, FleetClient::kHedgedUncapped,
                          FleetClient::kAttemptTimeout}) {
      const FleetCell* slow = Find(Trouble::kSlow, c);
      const FleetCell* healthy = Find(Trouble::kHealthy, c);
      if (slow == nullptr || healthy == nullptr) continue;
      const double base = healthy->LatencyMs(0.99, false);
      const double ratio = base > 0 ? slow->LatencyMs(0.99, false) / base : 0;
      const double base_1s = healthy->LatencyMs(0.99, true);
      const double ratio_1s =
          base_1s > 0 ? slow->LatencyMs(0.99, true) / base_1s : 0;
      absl::StrAppendFormat(
          &out,
          "backends/slow: %s p99 %.2f ms = %.2fx its healthy p99 %.2f ms "
          "(target <= 2x: %s); after the first second %.2f ms = %.2fx %.2f "
          "ms (%s)\n",
          FleetClientName(c), slow->LatencyMs(0.99, false), ratio, base,
          met(ratio <= 2), slow->LatencyMs(0.99, true), ratio_1s, base_1s,
          met(ratio_1s <= 2));
    }
    const FleetCell* rg = Find(Trouble::kRefused, FleetClient::kRpcguard);
    grpc = Find(Trouble::kRefused, FleetClient::kGrpcRetry);
    if (rg != nullptr) {
      absl::StrAppendFormat(
          &out, "backends/refused: rpcguard %.3f%% success (target 100%%: %s)",
          rg->success(false), met(rg->ok(false) == rg->count(false)));
      if (grpc != nullptr) {
        absl::StrAppendFormat(&out, "; grpc-retry %.3f%%",
                              grpc->success(false));
      }
      out.append("\n");
    }
    return out;
  }

 private:
  // One round of `cell`: the fault set, a fresh channel, the load.
  absl::Status Measure(
      const std::vector<std::unique_ptr<ServerProcess>>& servers,
      const std::vector<std::unique_ptr<ServerControl>>& controls,
      const RefusingPort& refusing, FleetCell* cell) {
    const Trouble trouble = cell->scenario->trouble;
    for (int i = 0; i < kBackends; ++i) {
      const bool bad = i == kBad;
      absl::Status s = controls[i]->SetMode(
          bad && trouble == Trouble::kUnavailable ? 100 : 0,
          bad && trouble == Trouble::kSlow ? kSlowMs : 0);
      if (!s.ok()) return s;
    }
    std::string target = "ipv4:";
    for (int i = 0; i < kBackends; ++i) {
      absl::StrAppend(&target, i > 0 ? "," : "",
                      i == kBad && trouble == Trouble::kRefused
                          ? refusing.address()
                          : servers[i]->address());
    }
    absl::StatusOr<std::shared_ptr<RpcguardState>> state =
        RpcguardState::Create();
    if (!state.ok()) return state.status();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        FleetChannel(cell->client, target, *state);
    if (!channel.ok()) return channel.status();
    if (!(*channel)->WaitForConnected(
            absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", target));
    }
    std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);
    absl::StatusOr<std::vector<int64_t>> before = Attempts(controls);
    if (!before.ok()) return before.status();
    // The bad backend's count at 1 s, from a thread of its own.
    absl::Notification load_done;
    absl::StatusOr<int64_t> bad_at_1s = absl::UnavailableError("not sampled");
    std::thread sampler([&] {
      if (!load_done.WaitForNotificationWithTimeout(kFirstSecond)) {
        bad_at_1s = controls[kBad]->TotalAttempts();
      }
    });
    std::vector<CallRecord> calls = Drive(*stub, length_);
    load_done.Notify();
    sampler.join();
    absl::StatusOr<std::vector<int64_t>> after = Attempts(controls);
    if (!after.ok()) return after.status();
    if (!bad_at_1s.ok()) return bad_at_1s.status();
    for (int i = 0; i < kBackends; ++i) {
      cell->attempts += (*after)[i] - (*before)[i];
    }
    if (trouble != Trouble::kRefused) {
      cell->bad_attempts += (*after)[kBad] - (*before)[kBad];
      cell->bad_after_1s += (*after)[kBad] - *bad_at_1s;
    }
    if (IsRpcguardClient(cell->client)) {
      cell->breaker_openings = std::max<int64_t>(cell->breaker_openings, 0) +
                               (*state)->breaker_openings();
    }
    cell->calls.insert(cell->calls.end(), calls.begin(), calls.end());
    ++cell->rounds;
    return absl::OkStatus();
  }

  static absl::StatusOr<std::vector<int64_t>> Attempts(
      const std::vector<std::unique_ptr<ServerControl>>& controls) {
    std::vector<int64_t> out;
    for (const auto& c : controls) {
      absl::StatusOr<int64_t> n = c->TotalAttempts();
      if (!n.ok()) return n.status();
      out.push_back(*n);
    }
    return out;
  }

  const FleetCell* Find(Trouble t, FleetClient client) const {
    for (const FleetCell& c : cells_) {
      if (c.scenario->trouble == t && c.client == client) return &c;
    }
    return nullptr;
  }

  const Plan plan_;
  const absl::Duration length_;
  std::vector<const BackendScenario*> scenarios_;
  std::vector<FleetCell> cells_;
};

}  // namespace

std::unique_ptr<Family> BackendFamily(const Flags& flags, const Plan& plan) {
  return std::make_unique<Backends>(flags, plan);
}

}  // namespace bench
}  // namespace rpcguard
