// Copyright rpcguard authors.
//
// What a channel keeps per method name (issue 24): a generic caller
// (grpc::GenericStub, ByteBuffer unary calls) sends one call to each of
// --names distinct made-up method names through one channel, to the fault
// server in a process of its own, which answers UNIMPLEMENTED. Each client
// runs in a child process of its own, so that none inherits another's heap:
//
//   plain                  a plain channel
//   rpcguard               rpcguard, no policy (the default bound)
//   rpcguard-hedging       rpcguard, a default hedging policy
//   rpcguard-unbounded     rpcguard, no policy, maxUndeclaredMethods 1000000
//                          (what every name cost before the bound)
//   rpcguard-hedging-unbounded   the same with the hedging policy
//
// Per client: RSS growth (VmRSS after the calls minus before them; names and
// channel made and warmed up before), bytes a name, and beyond the plain
// channel; microseconds a call (wall, and this process's CPU) over the first
// and the last --window names, and over the last --window names called again (a
// name past the bound found again: no lock, nothing built); the stats series
// the channel's Stats holds.
//
//   ./bazelw run -c opt //bench:method_names [-- --names=50000 --window=5000]

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/server_process.h"
#include "rpcguard/rpcguard.h"

extern char** environ;

namespace rpcguard {
namespace bench {
namespace {

constexpr const char* kModes[] = {
    "plain",
    "rpcguard",
    "rpcguard-hedging",
    "rpcguard-unbounded",
    "rpcguard-hedging-unbounded",
};

constexpr char kHedgingEntry[] = R"({"name": [{}],
    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.03s",
                      "nonFatalStatusCodes": ["UNAVAILABLE"]},
    "rpcguard": {"idempotency": "IDEMPOTENT",
                 "hedgingDelayPercentile": 0.95,
                 "hedgingDelayFloor": "0.005s"}})";

struct Flags {
  std::string mode;    // empty: the parent, which runs every mode
  std::string target;  // the server, for a child
  int names = 50000;
  int window = 5000;
};

std::shared_ptr<grpc::Channel> MakeChannel(const Flags& flags,
                                           std::shared_ptr<Stats> stats) {
  if (flags.mode == "plain") {
    return grpc::CreateChannel(flags.target,
                               grpc::InsecureChannelCredentials());
  }
  const bool hedging = absl::StrContains(flags.mode, "hedging");
  const bool unbounded = absl::StrContains(flags.mode, "unbounded");
  const std::string json =
      absl::StrCat(R"({"methodConfig": [)", hedging ? kHedgingEntry : "",
                   R"(], "rpcguard": {"maxUndeclaredMethods": )",
                   unbounded ? 1000000 : 2000, "}}");
  absl::StatusOr<Config> config = Config::FromJson(json);
  if (!config.ok()) {
    fprintf(stderr, "method_names: %s\n", config.status().ToString().c_str());
    exit(2);
  }
  Options options;
  options.config = *config;
  options.stats = std::move(stats);
  // Traces off: this measures state, not the sink.
  options.trace_verbosity = TraceVerbosity::kOff;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(
      flags.target, grpc::InsecureChannelCredentials(), std::move(options));
  if (!channel.ok()) {
    fprintf(stderr, "method_names: %s\n", channel.status().ToString().c_str());
    exit(2);
  }
  return *channel;
}

// One unary call of `method`, to its end.
void Call(grpc::GenericStub& stub, const std::string& method) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // An empty message: a ByteBuffer with no slice at all is no message.
  static const grpc::Slice* const empty = new grpc::Slice("");
  grpc::ByteBuffer request(empty, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status) { done.Notify(); });
  done.WaitForNotification();
}

// This process's CPU time (every thread's, gRPC's included), in µs.
double CpuMicros() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

struct Timing {
  double wall_us = 0;  // a call, wall time
  double cpu_us = 0;   // a call, this process's CPU: less hurt by other load
};

// Time a call over `names[from, to)`.
Timing TimeCalls(grpc::GenericStub& stub, const std::vector<std::string>& names,
                 int from, int to) {
  const absl::Time start = absl::Now();
  const double cpu = CpuMicros();
  for (int i = from; i < to; ++i) Call(stub, names[i]);
  Timing t;
  t.wall_us = absl::ToDoubleMicroseconds(absl::Now() - start) / (to - from);
  t.cpu_us = (CpuMicros() - cpu) / (to - from);
  return t;
}

// A child: one client, one line of key=value results on stdout.
int RunMode(const Flags& flags) {
  std::vector<std::string> names;
  names.reserve(flags.names);
  for (int i = 0; i < flags.names; ++i) {
    names.push_back(absl::StrCat("/bench.gateway.v1.Backend/Method", i));
  }
  auto stats = std::make_shared<Stats>();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(flags, stats);
  grpc::GenericStub stub(channel);
  // Connected, and gRPC's and rpcguard's one-time state built, first.
  for (int i = 0; i < 200; ++i) Call(stub, "/bench.gateway.v1.Backend/Warm");
  const int64_t before = ReadRssKib();
  const int w = std::min(flags.window, flags.names / 2);
  const Timing first = TimeCalls(stub, names, 0, w);
  TimeCalls(stub, names, w, flags.names - w);
  const Timing last = TimeCalls(stub, names, flags.names - w, flags.names);
  const int64_t after = ReadRssKib();
  const Timing again = TimeCalls(stub, names, flags.names - w, flags.names);
  printf(
      "rss_growth_kib=%lld bytes_per_name=%.1f first_us=%.1f last_us=%.1f "
      "again_us=%.1f first_cpu=%.1f last_cpu=%.1f again_cpu=%.1f "
      "stats_series=%zu\n",
      static_cast<long long>(after - before),
      (after - before) * 1024.0 / flags.names, first.wall_us, last.wall_us,
      again.wall_us, first.cpu_us, last.cpu_us, again.cpu_us,
      stats->Snapshot().methods.size());
  return 0;
}

// Runs this binary again as `mode`; its output line parsed.
std::map<std::string, double> RunChild(const char* self, const Flags& flags,
                                       const std::string& mode) {
  std::vector<std::string> args = {
      self,
      absl::StrCat("--mode=", mode),
      absl::StrCat("--target=", flags.target),
      absl::StrCat("--names=", flags.names),
      absl::StrCat("--window=", flags.window),
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return {};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return {};
  }
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::map<std::string, double> result;
  for (absl::string_view kv : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    double v;
    if (p.size() == 2 && absl::SimpleAtod(p[1], &v)) result[p[0]] = v;
  }
  return result;
}

int RunAll(const char* argv0, Flags flags) {
  const std::string path = FindFaultServer(argv0);
  if (path.empty()) {
    fprintf(stderr, "method_names: no fault_server_main in the runfiles\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(path);
  if (!server.ok()) {
    fprintf(stderr, "method_names: %s\n", server.status().ToString().c_str());
    return 2;
  }
  flags.target = (*server)->address();
  printf("%d distinct method names, one call each, through one channel to %s\n",
         flags.names, flags.target.c_str());
  printf("%-27s %8s %7s %7s %8s %8s %8s %8s %8s %8s %6s\n", "client", "RSS KiB",
         "B/name", "beyond", "first us", "last us", "again us", "1st cpu",
         "last cpu", "agn cpu", "series");
  double plain = 0;
  for (const char* mode : kModes) {
    std::map<std::string, double> r = RunChild(argv0, flags, mode);
    if (r.empty()) {
      printf("%-27s failed\n", mode);
      continue;
    }
    if (std::string(mode) == "plain") plain = r["bytes_per_name"];
    printf(
        "%-27s %8.0f %7.1f %7.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %6.0f\n",
        mode, r["rss_growth_kib"], r["bytes_per_name"],
        r["bytes_per_name"] - plain, r["first_us"], r["last_us"], r["again_us"],
        r["first_cpu"], r["last_cpu"], r["again_cpu"], r["stats_series"]);
    fflush(stdout);
  }
  return (*server)->Stop().ok() ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace rpcguard

int main(int argc, char** argv) {
  rpcguard::bench::Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--mode=")) {
      flags.mode = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--target=")) {
      flags.target = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--names=")) {
      if (!absl::SimpleAtoi(a, &flags.names) || flags.names < 2) return 2;
    } else if (absl::ConsumePrefix(&a, "--window=")) {
      if (!absl::SimpleAtoi(a, &flags.window) || flags.window < 1) return 2;
    } else {
      fprintf(stderr, "usage: method_names [--names=50000] [--window=5000]\n");
      return 2;
    }
  }
  if (!flags.mode.empty()) return rpcguard::bench::RunMode(flags);
  return rpcguard::bench::RunAll(argv[0], flags);
}
