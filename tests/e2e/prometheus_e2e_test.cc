// Copyright rpcguard authors.
//
// rpcguard's metrics through a real Prometheus: a client retries against
// the fault server while prometheus-cpp's Exposer serves its Stats
// (ExposeStats); a real `prometheus` server (Debian's package) on loopback
// scrapes it every second; the test reads the counts back through
// Prometheus' HTTP query API and asserts they equal what the client's own
// Stats counted.
//
// Skips when the prometheus binary is missing, except under CI=true, where
// it fails. The prometheus process is killed on every exit path (a guard's
// destructor, and PR_SET_PDEATHSIG should the test itself die).

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/exposer.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/prometheus/collector.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/fault_server.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.002s",
                   "maxBackoff": "0.005s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// How long the test waits for Prometheus to start and scrape what it needs.
constexpr absl::Duration kDeadline = absl::Seconds(25);

std::string FindPrometheus() {
  for (const char* path :
       {"/usr/bin/prometheus", "/usr/local/bin/prometheus"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// A port free now on 127.0.0.1 (the kernel's pick; another process could
// take it before Prometheus binds it, which the start-up poll would show).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// GET http://127.0.0.1:port/path; the body, or nullopt when nothing
// answered.
std::optional<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request =
      absl::StrCat("GET ", path,
                   " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return std::nullopt;
  return response.substr(body + 4);
}

// Percent-encodes a PromQL expression for a query string.
std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The value of an instant query's single sample, or nullopt when the
// result is empty (not scraped yet) or Prometheus did not answer. The
// response is `..."result":[{"metric":{...},"value":[1700000000.1,"6"]}]...`.
std::optional<double> QueryScalar(int port, const std::string& promql) {
  const std::optional<std::string> body =
      HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql));
  if (!body.has_value()) return std::nullopt;
  const size_t value = body->find("\"value\":[");
  if (value == std::string::npos) return std::nullopt;
  const size_t open = body->find(",\"", value);
  const size_t close = body->find('"', open + 2);
  if (open == std::string::npos || close == std::string::npos) {
    return std::nullopt;
  }
  double v;
  if (!absl::SimpleAtod(body->substr(open + 2, close - open - 2), &v)) {
    return std::nullopt;
  }
  return v;
}

// A prometheus server process; killed and reaped by the destructor.
class PrometheusProcess {
 public:
  PrometheusProcess(const std::string& binary, const std::string& dir, int port,
                    int target_port) {
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n"
                          << "  scrape_interval: 1s\n"
                          << "  evaluation_interval: 1s\n"
                          << "scrape_configs:\n"
                          << "  - job_name: rpcguard\n"
                          << "    static_configs:\n"
                          << "      - targets: ['127.0.0.1:" << target_port
                          << "']\n";
    const std::string log = dir + "/prometheus.log";
    std::vector<std::string> args = {
        binary,
        "--config.file=" + config,
        "--storage.tsdb.path=" + dir + "/data",
        absl::StrCat("--web.listen-address=127.0.0.1:", port),
    };
    pid_ = fork();
    if (pid_ == 0) {
      // Dies with the test, whatever the test dies of.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      FILE* out = std::fopen(log.c_str(), "w");
      if (out != nullptr) {
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(out), STDERR_FILENO);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }

  ~PrometheusProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    // Prometheus flushes its head block on SIGTERM; give it a moment,
    // then make sure.
    const absl::Time until = absl::Now() + absl::Seconds(5);
    int status;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > until) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  bool started() const { return pid_ > 0; }

  // Whether the process has exited (it could not start).
  bool exited() {
    int status;
    return waitpid(pid_, &status, WNOHANG) == pid_ && (pid_ = -1, true);
  }

 private:
  pid_t pid_ = -1;
};

TEST(PrometheusE2ETest, RetryCountsReadBackThroughPrometheusEqualStats) {
  const std::string binary = FindPrometheus();
  // ./bazelw installs Debian's `prometheus` wherever the tests run: a
  // missing prometheus is a broken set-up, never a reason to skip.
  if (binary.empty()) {
    FAIL() << "prometheus is missing: install Debian's `prometheus` package "
              "(./bazelw does)";
  }

  // The client: calls that fail UNAVAILABLE a few times each, then succeed.
  FaultServer server;
  ASSERT_TRUE(server.ok());
  auto stats = std::make_shared<Stats>();
  auto stub = FaultService::NewStub(
      *CreateGuardedChannel(server.address(), kConfig, [&](Options& options) {
        options.stats = stats;
        options.trace_verbosity = TraceVerbosity::kOff;
        options.breaker_registry = *BreakerRegistry::Create({});
      }));
  constexpr int kCalls = 5;
  for (int i = 0; i < kCalls; ++i) {
    FaultRequest request;
    request.set_op_id(absl::StrCat("prom-", i));
    request.set_fail_first(1 + i % 3);  // 1, 2, 3, 1, 2 retries
    FaultReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    ASSERT_TRUE(stub->Get(&context, request, &reply).ok()) << i;
  }
  const StatsSnapshot snap = stats->Snapshot();
  const MethodStatsSnapshot* m = snap.FindSeries(
      "/rpcguard.testing.v1.FaultService/Get", server.address());
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->retries, 9u);  // what the client's own Stats counted

  // The client's /metrics, as a prometheus-cpp user serves it.
  prometheus::Exposer exposer("127.0.0.1:0");
  auto collector = ExposeStats(exposer, stats);
  const int exporter_port = exposer.GetListeningPorts().at(0);

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/prometheus-", getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const int port = FreePort();
  ASSERT_NE(port, 0);
  PrometheusProcess prometheus(binary, dir, port, exporter_port);
  ASSERT_TRUE(prometheus.started());

  const std::string method = "method=\"/rpcguard.testing.v1.FaultService/Get\"";
  const std::vector<std::pair<std::string, double>> expected = {
      {"sum(rpcguard_retries_total{" + method + "})",
       static_cast<double>(m->retries)},
      {"sum(rpcguard_attempts_started_total{" + method + "})",
       static_cast<double>(m->attempts_started)},
      {"sum(rpcguard_call_retries_sum{" + method + "})",
       m->retries_per_call.sum},
      {"sum(rpcguard_calls_total{" + method + ",code=\"OK\"})",
       static_cast<double>(m->calls_by_code.at(0))},
  };
  const absl::Time deadline = absl::Now() + kDeadline;
  for (const auto& [query, want] : expected) {
    std::optional<double> got;
    while (absl::Now() < deadline) {
      ASSERT_FALSE(prometheus.exited())
          << "prometheus exited; see " << dir << "/prometheus.log";
      got = QueryScalar(port, query);
      if (got.has_value() && *got == want) break;
      absl::SleepFor(absl::Milliseconds(200));  // polling, not waiting it out
    }
    ASSERT_TRUE(got.has_value())
        << query << ": no answer from Prometheus within " << kDeadline
        << " (see " << dir << "/prometheus.log)";
    EXPECT_EQ(*got, want) << query;
    std::printf("%s = %g (Stats: %g)\n", query.c_str(), *got, want);
  }
}

}  // namespace
}  // namespace rpcguard
