// Copyright rpcguard authors.
//
// The rpcguard demo: starts a server that fails a share of its calls, sends
// the same load through a plain gRPC channel and through rpcguard, shows a
// few retry decisions as they happen, and prints a side-by-side table.
//
//   ./bazelw run //examples:demo -- --help

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"

namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

struct Flags {
  int calls = 2000;
  int failure_percent = 20;
  int deadline_ms = 300;
  int concurrency = 8;
  int create_percent = 10;
  int show = 8;
  int prometheus = 0;
  std::string trace_log;
};

constexpr char kUsage[] =
    R"(rpcguard demo: the same load through a plain channel and through rpcguard.

A local server fails each attempt with UNAVAILABLE at the given rate. Get is
declared NO_SIDE_EFFECTS (retried); Create is not declared (never repeated).

Flags:
  --calls=N            calls per client (default 2000)
  --failure_rate=P     percent of attempts the server fails (default 20)
  --deadline_ms=D      each call's deadline in milliseconds (default 300)
  --concurrency=C      concurrent callers (default 8)
  --create_percent=P   percent of calls that are the undeclared Create (default 10)
  --show=K             trace lines to print as they happen (default 8)
  --trace_log=PATH     write every trace line (logfmt) to PATH, for
                       ./bazelw run //tools:rpcguard_trace -- PATH
  --prometheus=1       end with the stats in Prometheus text format
  --help               this text
)";

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (name == "--trace_log" && eq != std::string::npos) {
      flags->trace_log = arg.substr(eq + 1);
      continue;
    }
    int value;
    if (eq == std::string::npos ||
        !absl::SimpleAtoi(arg.substr(eq + 1), &value)) {
      std::fprintf(stderr, "demo: bad argument %s (want --name=number)\n%s",
                   arg.c_str(), kUsage);
      return false;
    }
    struct {
      const char* name;
      int* field;
      int min, max;
    } table[] = {
        {"--calls", &flags->calls, 1, 10000000},
        {"--failure_rate", &flags->failure_percent, 0, 100},
        {"--deadline_ms", &flags->deadline_ms, 1, 3600000},
        {"--concurrency", &flags->concurrency, 1, 256},
        {"--create_percent", &flags->create_percent, 0, 100},
        {"--show", &flags->show, 0, 1000},
        {"--prometheus", &flags->prometheus, 0, 1},
    };
    bool known = false;
    for (auto& f : table) {
      if (name != f.name) continue;
      known = true;
      if (value < f.min || value > f.max) {
        std::fprintf(stderr, "demo: %s must be in [%d, %d]\n", f.name, f.min,
                     f.max);
        return false;
      }
      *f.field = value;
    }
    if (!known) {
      std::fprintf(stderr, "demo: unknown flag %s\n%s", name.c_str(), kUsage);
      return false;
    }
  }
  return true;
}

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s",
                   "maxBackoff": "0.1s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"idempotency": "NO_SIDE_EFFECTS"}}]})json";

struct Result {
  int64_t calls = 0;
  int64_t succeeded = 0;
  int64_t attempts = 0;  // counted by the server
  std::map<std::string, int64_t> gave_up;
  std::vector<double> latencies_ms;
};

// The reason rpcguard wrote into a failed call's message, or a fallback.
std::string ReasonOf(const grpc::Status& status, const std::string& fallback) {
  const std::string& m = status.error_message();
  const std::string marker = "gave up: ";
  const size_t at = m.rfind(marker);
  if (at == std::string::npos) return fallback;
  const size_t end = m.find(']', at);
  return m.substr(at + marker.size(), end - at - marker.size());
}

Result RunLoad(const std::string& label, std::shared_ptr<grpc::Channel> channel,
               const Flags& flags, rpcguard::testing::FaultServer& server) {
  auto stub = FaultService::NewStub(channel);
  const int64_t attempts_before = server.total_attempts();
  Result result;
  absl::Mutex mu;
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < flags.concurrency; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < flags.calls; i = next++) {
        FaultRequest req;
        req.set_op_id(absl::StrCat(label, "-", i));
        req.set_fail_percent(flags.failure_percent);
        // Every call is the same on both channels: call i is Create or Get.
        const bool create = (i * 37 % 100) < flags.create_percent;
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(flags.deadline_ms));
        const absl::Time start = absl::Now();
        grpc::Status s = create ? stub->Create(&ctx, req, &reply)
                                : stub->Get(&ctx, req, &reply);
        const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
        absl::MutexLock lock(&mu);
        ++result.calls;
        result.latencies_ms.push_back(ms);
        if (s.ok()) {
          ++result.succeeded;
        } else {
          ++result.gave_up[ReasonOf(s, "not retried")];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  result.attempts = server.total_attempts() - attempts_before;
  std::sort(result.latencies_ms.begin(), result.latencies_ms.end());
  return result;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p * (sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

std::string GaveUp(const Result& r) {
  std::string out;
  int64_t total = 0;
  for (const auto& [reason, n] : r.gave_up) {
    total += n;
    absl::StrAppend(&out, out.empty() ? "" : ", ", reason, " ", n);
  }
  return total == 0 ? "0" : absl::StrCat(total, " (", out, ")");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  rpcguard::testing::FaultServer server;
  std::printf(
      "rpcguard demo: server on %s fails %d%% of attempts with UNAVAILABLE\n"
      "%d calls per client, %d concurrent, deadline %d ms; Get is declared "
      "NO_SIDE_EFFECTS, Create (%d%% of calls) is not declared\n\n",
      server.address().c_str(), flags.failure_percent, flags.calls,
      flags.concurrency, flags.deadline_ms, flags.create_percent);

  auto plain =
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  const Result plain_result = RunLoad("plain", plain, flags, server);

  absl::StatusOr<rpcguard::Config> config = rpcguard::Config::FromJson(kConfig);
  if (!config.ok()) {
    std::fprintf(stderr, "demo: %s\n", config.status().ToString().c_str());
    return 1;
  }
  rpcguard::Options options;
  options.config = *config;
  // Trace lines: the first --show to stdout as they happen, all of them to
  // --trace_log when given.
  FILE* log = nullptr;
  if (!flags.trace_log.empty()) {
    log = std::fopen(flags.trace_log.c_str(), "w");
    if (log == nullptr) {
      std::fprintf(stderr, "demo: cannot write %s\n", flags.trace_log.c_str());
      return 1;
    }
  }
  auto to_stdout = std::make_shared<rpcguard::LogfmtSink>(stdout);
  auto to_log =
      log != nullptr ? std::make_shared<rpcguard::LogfmtSink>(log) : nullptr;
  auto shown = std::make_shared<std::atomic<int>>(0);
  const int show = flags.show;
  options.trace_sink = std::make_shared<rpcguard::CallbackSink>(
      [=](const rpcguard::TraceEvent& e) {
        if (shown->fetch_add(1) < show) to_stdout->Write(e);
        if (to_log) to_log->Write(e);
      });
  auto stats = std::make_shared<rpcguard::Stats>();
  options.stats = stats;
  auto guarded = rpcguard::CreateChannel(
      server.address(), grpc::InsecureChannelCredentials(), options);
  if (!guarded.ok()) {
    std::fprintf(stderr, "demo: %s\n", guarded.status().ToString().c_str());
    return 1;
  }
  std::printf("Retry decisions as they happen (the first %d trace lines):\n",
              flags.show);
  const Result guarded_result = RunLoad("rpcguard", *guarded, flags, server);
  if (log != nullptr) std::fclose(log);

  std::printf("\n| %-9s | %6s | %9s | %8s | %7s | %-40s | %8s | %8s |\n",
              "client", "calls", "succeeded", "attempts", "retries",
              "gave up (by reason)", "p50 ms", "p99 ms");
  std::printf(
      "|-----------|--------|-----------|----------|---------|-------"
      "-----------------------------------|----------|----------|\n");
  for (const auto& [name, r] :
       {std::pair<const char*, const Result*>{"plain", &plain_result},
        {"rpcguard", &guarded_result}}) {
    std::printf(
        "| %-9s | %6lld | %9lld | %8lld | %7lld | %-40s | %8.2f | %8.2f |\n",
        name, static_cast<long long>(r->calls),
        static_cast<long long>(r->succeeded),
        static_cast<long long>(r->attempts),
        static_cast<long long>(r->attempts - r->calls), GaveUp(*r).c_str(),
        Percentile(r->latencies_ms, 0.5), Percentile(r->latencies_ms, 0.99));
  }
  std::printf(
      "\nplain: every failed attempt is a failed call. rpcguard: Get is "
      "retried within its deadline;\nCreate is never sent twice "
      "(not_idempotent), since the server might have applied it.\n");

  const rpcguard::StatsSnapshot snapshot = stats->Snapshot();
  std::printf("\nrpcguard stats (rpcguard::Stats):\n");
  for (const rpcguard::MethodStatsSnapshot& m : snapshot.methods) {
    std::string give_ups;
    for (const auto& [reason, n] : m.give_ups) {
      absl::StrAppend(&give_ups, give_ups.empty() ? "" : ", ",
                      rpcguard::GiveUpReasonName(reason), " ", n);
    }
    std::string per_call;
    uint64_t below = 0;
    for (size_t i = 0; i < m.attempts_per_call.bounds.size(); ++i) {
      const uint64_t n = m.attempts_per_call.cumulative[i] - below;
      below = m.attempts_per_call.cumulative[i];
      if (n > 0) {
        absl::StrAppend(&per_call, per_call.empty() ? "" : " ",
                        m.attempts_per_call.bounds[i], ":", n);
      }
    }
    std::printf(
        "  %s: calls %llu, attempts %llu, retries %llu, gave up {%s}, "
        "attempts/call {%s}\n",
        m.method.c_str(), static_cast<unsigned long long>(m.calls),
        static_cast<unsigned long long>(m.attempts),
        static_cast<unsigned long long>(m.retries), give_ups.c_str(),
        per_call.c_str());
  }
  if (flags.prometheus) {
    std::printf("\n%s", rpcguard::ToPrometheusText(snapshot).c_str());
  }
  if (!flags.trace_log.empty()) {
    std::printf(
        "\nEvery trace line is in %s; summarise it with\n"
        "  ./bazelw run //tools:rpcguard_trace -- %s\n",
        flags.trace_log.c_str(), flags.trace_log.c_str());
  }
  server.Shutdown();
  return 0;
}
