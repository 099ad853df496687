// Copyright rpcguard authors.
//
// `promtool check metrics` (Prometheus' own linter and parser) on
// rpcguard's text output, with every metric family holding samples and
// label values that need escaping. Fails when promtool reports any problem;
// skips when promtool is not installed, except under CI=true, where a
// missing promtool fails the test (CI installs it through ./bazelw).

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/observability/stats.h"

namespace rpcguard {
namespace {

// Where promtool is, or "" (looked up on PATH, then /usr/bin: Bazel's test
// PATH may be minimal).
std::string FindPromtool() {
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    return "promtool";
  }
  if (std::ifstream("/usr/bin/promtool").good()) return "/usr/bin/promtool";
  return "";
}

// A Stats with something in every family: retried, given-up, hedged and
// fail-fast calls, a tripped breaker, a watched budget, an overflow.
std::string RichText(std::shared_ptr<RetryBudget>& budget) {
  StatsOptions options;
  options.max_series = 3;
  Stats stats(options);
  Stats::MethodHandle* h = stats.ForMethod("/pkg.Svc/M", "dns:///svc:443");
  Stats::MethodHandle* odd = stats.ForMethod("/we\"ird\\\n", "t");
  for (Stats::MethodHandle* m : {h, odd}) {
    Stats::RecordCallStarted(m);
    Stats::RecordAttemptStarted(m);
    TraceEvent retry;
    retry.attempt = 1;
    retry.code = grpc::StatusCode::UNAVAILABLE;
    retry.decision = TraceDecision::kRetry;
    retry.backoff = absl::Milliseconds(7);
    retry.attempt_duration = absl::Milliseconds(12);
    stats.Record(m, retry);
    TraceEvent give_up = retry;
    give_up.attempt = 2;
    give_up.decision = TraceDecision::kGiveUp;
    give_up.reason = GiveUpReason::kMaxAttempts;
    give_up.call_duration = absl::Milliseconds(30);
    stats.Record(m, give_up);
    TraceEvent fail_fast;
    fail_fast.kind = TraceEvent::Kind::kFailFast;
    fail_fast.attempt = 1;
    fail_fast.code = grpc::StatusCode::UNAVAILABLE;
    fail_fast.decision = TraceDecision::kGiveUp;
    fail_fast.reason = GiveUpReason::kBreakerOpen;
    stats.Record(m, fail_fast);
    stats.RecordHedgedCall(m, 3, true, 1, absl::Milliseconds(15));
  }
  for (int i = 0; i < 5; ++i) stats.ForMethod(absl::StrCat("/x.S/M", i), "t");
  TraceEvent open;
  open.kind = TraceEvent::Kind::kBreakerTransition;
  open.breaker_key = "svc:443";
  open.from_state = "closed";
  open.to_state = "open";
  stats.Record(open);
  budget = *RetryBudget::Create(RetryBudgetOptions());
  budget->RecordFirstAttempt();
  budget->TryAcquireRetry(RetryCharge::kOnFailure);
  stats.WatchBudget("svc:443", budget);
  return ToPrometheusText(stats.Snapshot());
}

TEST(PromtoolTest, CheckMetricsAcceptsRpcguardsText) {
  const std::string promtool = FindPromtool();
  // ./bazelw installs Debian's `prometheus` wherever the tests run: a
  // missing promtool is a broken set-up, never a reason to skip.
  if (promtool.empty()) {
    FAIL() << "promtool is missing: install Debian's `prometheus` package "
              "(./bazelw does)";
  }
  std::shared_ptr<RetryBudget> budget;
  const std::string text = RichText(budget);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string path = dir + "/rpcguard_metrics.txt";
  {
    std::ofstream out(path);
    out << text;
    ASSERT_TRUE(out.good()) << path;
  }
  const std::string command =
      absl::StrCat(promtool, " check metrics < ", path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string report;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) report.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << command;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool check metrics reported:\n"
                                    << report << "\non:\n"
                                    << text;
  // Lint warnings are printed even when they do not change the exit code.
  EXPECT_EQ(report, "") << report;
  std::printf("promtool check metrics: %zu bytes checked, exit %d\n",
              text.size(), WEXITSTATUS(status));
}

}  // namespace
}  // namespace rpcguard
