// Copyright rpcguard authors.

#include "bench/chain_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace bench {
namespace chain {
namespace {

// This binary, to exec for every role.
std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

// A child process of one run: this binary with a role, its stdin and stdout
// piped to the driver (its stderr is the driver's). SIGKILLed when
// destroyed, and by the kernel when the driver dies (PR_SET_PDEATHSIG).
class Child {
 public:
  static absl::StatusOr<std::unique_ptr<Child>> Spawn(
      const std::string& name, const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
    }
    const std::string self = SelfPath();
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0) {
        _exit(1);
      }
      execv(self.c_str(), argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    return std::unique_ptr<Child>(new Child(name, pid, in[1], out[0]));
  }

  ~Child() {
    close(stdin_);
    close(stdout_);
    // A child that has said everything has exited or is about to: give it
    // a moment before the kill, so that a clean exit is not reported as one.
    int status;
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }

  absl::Status WriteLine(absl::string_view line) {
    std::string data = absl::StrCat(line, "\n");
    if (write(stdin_, data.data(), data.size()) !=
        static_cast<ssize_t>(data.size())) {
      return absl::InternalError(
          absl::StrCat(name_, ": write: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  // The next line, within `timeout`.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const int64_t left =
          std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now()));
      pollfd p = {stdout_, POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            name_, ": nothing said within ", absl::FormatDuration(timeout)));
      }
      char buf[65536];
      const ssize_t n = read(stdout_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::InternalError(absl::StrCat(name_, ": exited"));
      buffer_.append(buf, n);
    }
  }

  // The address from "listening on ADDRESS".
  absl::StatusOr<std::string> Address() {
    absl::StatusOr<std::string> line = ReadLine(absl::Seconds(30));
    if (!line.ok()) return line.status();
    absl::string_view rest = *line;
    if (!absl::ConsumePrefix(&rest, "listening on ")) {
      return absl::InternalError(absl::StrCat(name_, " said \"", *line, "\""));
    }
    return std::string(rest);
  }

 private:
  Child(std::string name, pid_t pid, int in, int out)
      : name_(std::move(name)), pid_(pid), stdin_(in), stdout_(out) {}

  std::string name_;
  pid_t pid_;
  int stdin_;
  int stdout_;
  std::string buffer_;
};

// N busy-loop processes (`sh -c 'while :; do :; done'`), for a machine as
// loaded as a busy one: started by the constructor, SIGKILLed by the
// destructor (and by the kernel when the driver dies: PR_SET_PDEATHSIG).
// The shell runs the loop itself, so its pid is the whole of it.
class BusyLoops {
 public:
  explicit BusyLoops(int n) {
    const pid_t parent = getpid();
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid < 0) {
        std::fprintf(stderr, "chain: fork (busy loop): %s\n", strerror(errno));
        continue;
      }
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        execl("/bin/sh", "sh", "-c", "while :; do :; done",
              static_cast<char*>(nullptr));
        _exit(127);
      }
      pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) {
      int status;
      waitpid(pid, &status, 0);
    }
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// The 1-minute load average (/proc/loadavg), or NaN.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one;
  if (in >> one) return one;
  return std::numeric_limits<double>::quiet_NaN();
}

// The numbers of `"key": N` in the generator's JSON (it writes no nesting
// but arrays of numbers).
std::optional<double> Number(absl::string_view json, absl::string_view key) {
  const std::string needle = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(needle);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = json.substr(at + needle.size());
  rest = rest.substr(0, rest.find_first_of(",}"));
  double v;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(rest), &v)) {
    return std::nullopt;
  }
  return v;
}

std::vector<double> Array(absl::string_view json, absl::string_view key) {
  std::vector<double> out;
  const std::string needle = absl::StrCat("\"", key, "\": [");
  const size_t at = json.find(needle);
  if (at == absl::string_view::npos) return out;
  absl::string_view rest = json.substr(at + needle.size());
  rest = rest.substr(0, rest.find(']'));
  for (absl::string_view item : absl::StrSplit(rest, ',', absl::SkipEmpty())) {
    double v;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(item), &v))
      out.push_back(v);
  }
  return out;
}

std::vector<double> ParseCounts(absl::string_view line) {
  std::vector<double> out;
  absl::ConsumePrefix(&line, "counts ");
  for (absl::string_view item : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    double v;
    if (absl::SimpleAtod(item, &v)) out.push_back(v);
  }
  return out;
}

// One run's figures; NaN where there is none (no recovery within the run).
struct Figures {
  double c_per_request = 0;
  double c_per_request_fault = 0;
  double c_worst_1s = 0;
  double c_max_per_request = 0;  // the most attempts of any one request
  double goodput = 0;
  double success = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double ok_p99_ms = 0;
  double recovery_s = 0;
  // Breaker openings of the generator's, A's and B's clients (rpcguard's;
  // 0 for the others).
  double breakers_generator = 0;
  double breakers_a = 0;
  double breakers_b = 0;
  // The independent method's success ratio (kSplit; NaN elsewhere).
  double independent_success = std::numeric_limits<double>::quiet_NaN();
  // The 1-minute load average when the run started.
  double loadavg = 0;
};

// The scalar figures in one place, for the medians, the JSON and the table.
struct FigureField {
  const char* name;
  double Figures::*field;
};
constexpr FigureField kFigureFields[] = {
    {"attempts_c_per_request", &Figures::c_per_request},
    {"attempts_c_per_request_fault", &Figures::c_per_request_fault},
    {"attempts_c_worst_1s", &Figures::c_worst_1s},
    {"attempts_c_max_per_request", &Figures::c_max_per_request},
    {"goodput_per_s", &Figures::goodput},
    {"success_ratio", &Figures::success},
    {"p50_ms", &Figures::p50_ms},
    {"p99_ms", &Figures::p99_ms},
    {"ok_p99_ms", &Figures::ok_p99_ms},
    {"recovery_s", &Figures::recovery_s},
    {"breaker_openings_generator", &Figures::breakers_generator},
    {"breaker_openings_a", &Figures::breakers_a},
    {"breaker_openings_b", &Figures::breakers_b},
    {"independent_success_ratio", &Figures::independent_success},
    {"loadavg_1m", &Figures::loadavg},
};

// Per-bucket series, all the same length.
struct Series {
  std::vector<double> sent, ok, failed, a, b, c;
  // The independent method's (kSplit; empty elsewhere).
  std::vector<double> independent_ok, independent_failed;
};

struct Run {
  Figures figures;
  Series series;
};

double Sum(const std::vector<double>& v, int from, int to) {
  double s = 0;
  for (int i = std::max(0, from); i < std::min<int>(to, v.size()); ++i) {
    s += v[i];
  }
  return s;
}

Figures Compute(const Series& s, const FaultPlan& plan, double requests,
                double ok, double duration_s) {
  Figures f;
  const int run_buckets =
      static_cast<int>(std::lround(duration_s * kBucketsPerSecond));
  const int fault_start = static_cast<int>(plan.start / kBucket);
  const int fault_end = static_cast<int>(plan.end / kBucket);
  const int total = static_cast<int>(s.c.size());
  f.c_per_request = requests > 0 ? Sum(s.c, 0, total) / requests : 0;
  const double fault_sent = Sum(s.sent, fault_start, fault_end);
  f.c_per_request_fault =
      fault_sent > 0 ? Sum(s.c, fault_start, fault_end) / fault_sent : 0;
  for (int k = 0; k + kBucketsPerSecond <= run_buckets; ++k) {
    const double sent = Sum(s.sent, k, k + kBucketsPerSecond);
    if (sent <= 0) continue;
    f.c_worst_1s =
        std::max(f.c_worst_1s, Sum(s.c, k, k + kBucketsPerSecond) / sent);
  }
  f.goodput = ok / duration_s;
  f.success = requests > 0 ? ok / requests : 0;
  f.recovery_s = std::numeric_limits<double>::quiet_NaN();
  if (plan.to_the_end) return f;  // nothing to recover from within the run
  // The window is cut short by the run's end, down to half a second: a
  // recovery late in the run is still seen, a 100-ms bucket alone is too
  // noisy to say.
  for (int k = fault_end; k + kBucketsPerSecond / 2 <= run_buckets; ++k) {
    const int end = std::min(k + kBucketsPerSecond, run_buckets);
    const double sent = Sum(s.sent, k, end);
    if (sent > 0 && Sum(s.ok, k, end) >= 0.95 * sent) {
      f.recovery_s = static_cast<double>(k - fault_end) / kBucketsPerSecond;
      break;
    }
  }
  return f;
}

// "NAME N" from `child`, within 10 s.
absl::StatusOr<double> ReadNamedNumber(Child* child, absl::string_view name,
                                       absl::string_view who) {
  absl::StatusOr<std::string> line = child->ReadLine(absl::Seconds(10));
  if (!line.ok()) return line.status();
  absl::string_view value = *line;
  double v;
  if (!absl::ConsumePrefix(&value, name) || !absl::ConsumePrefix(&value, " ") ||
      !absl::SimpleAtod(value, &v)) {
    return absl::InternalError(absl::StrCat(who, " said \"", *line, "\""));
  }
  return v;
}

// One run of `client` in `scenario`.
absl::StatusOr<Run> RunOnce(const DriverOptions& options, Scenario scenario,
                            Client client) {
  const absl::Duration duration = ScenarioDuration(scenario, options.duration);
  const std::string duration_ms =
      absl::StrCat("--duration_ms=", absl::ToInt64Milliseconds(duration));
  const std::string rate = absl::StrCat("--rate=", options.rate);
  const std::string client_flag = absl::StrCat("--client=", ClientName(client));
  const std::string scenario_flag =
      absl::StrCat("--scenario=", ScenarioName(scenario));
  const double loadavg = LoadAverage();

  absl::StatusOr<std::unique_ptr<Child>> store = Child::Spawn(
      "store",
      {"--role=store", scenario_flag, rate, duration_ms,
       absl::StrCat("--blip_ms=", absl::ToInt64Milliseconds(options.blip))});
  if (!store.ok()) return store.status();
  absl::StatusOr<std::string> target = (*store)->Address();
  if (!target.ok()) return target.status();

  // B then A, each calling the tier below; none for the single tier. B
  // answers the independent method itself.
  std::vector<std::unique_ptr<Child>> tiers;
  if (client != Client::kSingleTier) {
    for (const char* name : {"B", "A"}) {
      std::vector<std::string> args = {"--role=tier",
                                       absl::StrCat("--target=", *target),
                                       client_flag, duration_ms};
      if (std::string(name) == "B") args.push_back("--answers_put");
      absl::StatusOr<std::unique_ptr<Child>> tier = Child::Spawn(name, args);
      if (!tier.ok()) return tier.status();
      target = (*tier)->Address();
      if (!target.ok()) return target.status();
      tiers.push_back(*std::move(tier));
    }
  }
  absl::StatusOr<std::unique_ptr<Child>> generator = Child::Spawn(
      "generator", {"--role=generator", absl::StrCat("--target=", *target),
                    client_flag, scenario_flag, rate, duration_ms,
                    absl::StrCat("--deadline_ms=",
                                 absl::ToInt64Milliseconds(options.deadline))});
  if (!generator.ok()) return generator.status();
  absl::StatusOr<std::string> ready = (*generator)->ReadLine(absl::Seconds(30));
  if (!ready.ok()) return ready.status();
  if (*ready != "ready") {
    return absl::InternalError(absl::StrCat("generator said \"", *ready, "\""));
  }

  // Time zero a little ahead, so that every process has it before it comes.
  const absl::Time t0 = absl::Now() + absl::Milliseconds(200);
  const std::string start = absl::StrCat("start ", absl::ToUnixNanos(t0));
  std::vector<Child*> servers = {store->get()};
  for (auto& tier : tiers) servers.push_back(tier.get());
  for (Child* child : servers) {
    if (absl::Status s = child->WriteLine(start); !s.ok()) return s;
  }
  if (absl::Status s = (*generator)->WriteLine(start); !s.ok()) return s;

  absl::StatusOr<std::string> result =
      (*generator)->ReadLine(duration + options.deadline + absl::Seconds(60));
  if (!result.ok()) return result.status();
  absl::string_view json = *result;
  if (!absl::ConsumePrefix(&json, "result ")) {
    return absl::InternalError(
        absl::StrCat("generator said \"", *result, "\""));
  }
  std::vector<std::vector<double>> counts;
  double max_per_request = 0;
  std::vector<double> tier_openings;  // B's, then A's
  for (Child* child : servers) {
    if (absl::Status s = child->WriteLine("stop"); !s.ok()) return s;
    absl::StatusOr<std::string> line = child->ReadLine(absl::Seconds(10));
    if (!line.ok()) return line.status();
    counts.push_back(ParseCounts(*line));
    if (child == servers.front()) {
      absl::StatusOr<double> max =
          ReadNamedNumber(child, "max_per_request", "store");
      if (!max.ok()) return max.status();
      max_per_request = *max;
    } else {
      absl::StatusOr<double> openings =
          ReadNamedNumber(child, "breaker_openings", "tier");
      if (!openings.ok()) return openings.status();
      tier_openings.push_back(*openings);
    }
  }

  // The series up to 2 s past the run (the last calls' retries).
  const double duration_s = absl::ToDoubleSeconds(duration);
  const size_t length =
      static_cast<size_t>(std::lround((duration_s + 2) * kBucketsPerSecond));
  auto cut = [length](std::vector<double> v) {
    // Whatever came later counts in the last bucket kept.
    if (v.size() > length) {
      double rest = 0;
      for (size_t i = length; i < v.size(); ++i) rest += v[i];
      v.resize(length);
      v.back() += rest;
    }
    v.resize(length, 0);
    return v;
  };
  Run run;
  run.series.sent = cut(Array(json, "sent"));
  run.series.ok = cut(Array(json, "ok_by_end"));
  run.series.failed = cut(Array(json, "failed_by_end"));
  run.series.c = cut(counts[0]);
  if (counts.size() == 3) {
    run.series.b = cut(counts[1]);
    run.series.a = cut(counts[2]);
  }
  const FaultPlan plan =
      MakeFaultPlan(scenario, duration, options.rate, options.blip);
  run.figures = Compute(run.series, plan, Number(json, "requests").value_or(0),
                        Number(json, "ok").value_or(0), duration_s);
  run.figures.p50_ms = Number(json, "p50_ms").value_or(0);
  run.figures.p99_ms = Number(json, "p99_ms").value_or(0);
  run.figures.ok_p99_ms = Number(json, "ok_p99_ms").value_or(0);
  run.figures.c_max_per_request = max_per_request;
  run.figures.breakers_generator = Number(json, "breaker_openings").value_or(0);
  if (tier_openings.size() == 2) {
    run.figures.breakers_b = tier_openings[0];
    run.figures.breakers_a = tier_openings[1];
  }
  if (HasIndependentMethod(scenario, client)) {
    const double requests = Number(json, "independent_requests").value_or(0);
    run.figures.independent_success =
        requests > 0 ? Number(json, "independent_ok").value_or(0) / requests
                     : 0;
    run.series.independent_ok = cut(Array(json, "independent_ok_by_end"));
    run.series.independent_failed =
        cut(Array(json, "independent_failed_by_end"));
  }
  run.figures.loadavg = loadavg;
  return run;
}

// The median, NaN (never recovered) counted as the largest.
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) {
    if (std::isnan(x)) x = std::numeric_limits<double>::infinity();
  }
  std::sort(v.begin(), v.end());
  const double m = v.size() % 2 == 1
                       ? v[v.size() / 2]
                       : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return std::isinf(m) ? std::numeric_limits<double>::quiet_NaN() : m;
}

std::vector<double> MedianSeries(const std::vector<Run>& runs,
                                 std::vector<double> Series::*field) {
  const size_t n = (runs.front().series.*field).size();
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> at;
    for (const Run& r : runs) at.push_back((r.series.*field)[i]);
    out[i] = Median(at);
  }
  return out;
}

struct Cell {
  Scenario scenario;
  Client client;
  int load;  // busy loops beside the runs
  absl::Duration duration;
  FaultPlan plan;
  std::vector<Run> runs;
  Figures median;
  Series series;  // element-wise medians
};

std::string Json(double v) {
  if (std::isnan(v)) return "null";
  return absl::StrFormat("%.4g", v);
}

std::string JsonArray(const std::vector<double>& v) {
  return absl::StrCat("[",
                      absl::StrJoin(v, ", ",
                                    [](std::string* out, double x) {
                                      absl::StrAppend(out, Json(x));
                                    }),
                      "]");
}

// Sums of kBucketsPerSecond buckets.
std::vector<double> PerSecond(const std::vector<double>& v) {
  std::vector<double> out((v.size() + kBucketsPerSecond - 1) /
                          kBucketsPerSecond);
  for (size_t i = 0; i < v.size(); ++i) out[i / kBucketsPerSecond] += v[i];
  return out;
}

std::string SeriesJson(const Series& s, bool per_second) {
  auto f = [per_second](const std::vector<double>& v) {
    return JsonArray(per_second ? PerSecond(v) : v);
  };
  const size_t n = per_second ? PerSecond(s.sent).size() : s.sent.size();
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) {
    t[i] = per_second ? static_cast<double>(i)
                      : static_cast<double>(i) / kBucketsPerSecond;
  }
  std::string out =
      absl::StrCat("{\"t_s\": ", JsonArray(t), ", \"sent\": ", f(s.sent),
                   ", \"ok\": ", f(s.ok), ", \"failed\": ", f(s.failed),
                   ", \"attempts_a\": ", f(s.a), ", \"attempts_b\": ", f(s.b),
                   ", \"attempts_c\": ", f(s.c));
  if (!s.independent_ok.empty()) {
    absl::StrAppend(&out, ", \"independent_ok\": ", f(s.independent_ok),
                    ", \"independent_failed\": ", f(s.independent_failed));
  }
  return out + "}";
}

std::string FiguresJson(const Figures& figures) {
  std::vector<std::string> parts;
  for (const FigureField& field : kFigureFields) {
    parts.push_back(
        absl::StrCat("\"", field.name, "\": ", Json(figures.*field.field)));
  }
  return absl::StrJoin(parts, ", ");
}

std::string ReportJson(const DriverOptions& options,
                       const std::vector<Cell>& cells) {
  std::string out = absl::StrCat(
      "{\n  \"benchmark\": \"chain\",\n  \"rate_per_s\": ", options.rate,
      ",\n  \"duration_s\": ", absl::ToDoubleSeconds(options.duration),
      ",\n  \"deadline_ms\": ", absl::ToInt64Milliseconds(options.deadline),
      ",\n  \"runs\": ", options.runs,
      ",\n  \"quick\": ", options.quick ? "true" : "false", ",\n  \"loads\": [",
      absl::StrJoin(options.loads, ", "), "]",
      ",\n  \"store_concurrency\": ", kStoreConcurrency,
      ",\n  \"max_attempts_per_hop\": 3", ",\n  \"recovery_threshold\": 0.95",
      ",\n  \"cells\": [");
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& cell = cells[i];
    absl::StrAppend(
        &out, i == 0 ? "\n" : ",\n", "    {\"scenario\": \"",
        ScenarioName(cell.scenario), "\", \"client\": \"",
        ClientName(cell.client), "\", \"load\": ", cell.load,
        ", \"duration_s\": ", absl::ToDoubleSeconds(cell.duration),
        ", \"cold\": ", IsCold(cell.scenario) ? "true" : "false",
        ", \"fault_start_s\": ", absl::ToDoubleSeconds(cell.plan.start),
        ", \"fault_end_s\": ", absl::ToDoubleSeconds(cell.plan.end),
        ", \"offered_per_s\": ", options.rate, ", ", FiguresJson(cell.median),
        ",\n     \"series\": ", SeriesJson(cell.series, true),
        ",\n     \"series_100ms\": ", SeriesJson(cell.series, false),
        ",\n     \"per_run\": [");
    for (size_t r = 0; r < cell.runs.size(); ++r) {
      absl::StrAppend(&out, r == 0 ? "" : ", ", "{",
                      FiguresJson(cell.runs[r].figures), "}");
    }
    out += "]}";
  }
  out += "\n  ]\n}\n";
  return out;
}

// The largest and the smallest value of `field` over a cell's runs.
double WorstRun(const Cell& cell, double Figures::*field) {
  double worst = 0;
  for (const Run& run : cell.runs) worst = std::max(worst, run.figures.*field);
  return worst;
}
double LowestRun(const Cell& cell, double Figures::*field) {
  double lowest = std::numeric_limits<double>::infinity();
  for (const Run& run : cell.runs) {
    lowest = std::min(lowest, run.figures.*field);
  }
  return lowest;
}

// The scenario as the tables name it: with its busy loops, if any.
std::string CellName(const Cell& cell) {
  std::string name(ScenarioName(cell.scenario));
  if (cell.load > 0) {
    absl::StrAppend(&name, ", ", cell.load,
                    cell.load == 1 ? " loop" : " loops");
  }
  return name;
}

void PrintTable(const DriverOptions& options, const std::vector<Cell>& cells) {
  std::printf(
      "\nchain: generator -> A -> B -> C, %.0f req/s for %.0f s (sustained2x: "
      "%.0f s), deadline %lld ms, median of %d run(s) (\"most for one req\": "
      "the median of the runs' maxima, and in brackets the largest of any "
      "run; success: in brackets the lowest run; breakers opened: the "
      "generator's, A's and B's clients, medians, in brackets the most in "
      "any run)\n\n",
      options.rate, absl::ToDoubleSeconds(options.duration),
      absl::ToDoubleSeconds(kSustainedDuration),
      static_cast<long long>(absl::ToInt64Milliseconds(options.deadline)),
      options.runs);
  std::printf(
      "| scenario | client | C att/req | C att/req (fault) | C att/req "
      "(worst 1 s) | C att, most for one req | goodput/s | success | p50 ms "
      "| p99 ms | recovery s | breakers opened gen/A/B |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Cell& cell : cells) {
    const Figures& f = cell.median;
    const std::string recovery = cell.plan.to_the_end ? "-"
                                 : std::isnan(f.recovery_s)
                                     ? "never"
                                     : absl::StrFormat("%.1f", f.recovery_s);
    std::printf(
        "| %s | %s | %.2f | %.2f | %.2f | %.0f (%.0f) | %.1f | %.1f%% "
        "(%.1f%%) | %.1f | %.1f | %s | %.0f/%.0f/%.0f (%.0f/%.0f/%.0f) |\n",
        CellName(cell).c_str(), std::string(ClientName(cell.client)).c_str(),
        f.c_per_request, f.c_per_request_fault, f.c_worst_1s,
        f.c_max_per_request, WorstRun(cell, &Figures::c_max_per_request),
        f.goodput, 100 * f.success, 100 * LowestRun(cell, &Figures::success),
        f.p50_ms, f.p99_ms, recovery.c_str(), f.breakers_generator,
        f.breakers_a, f.breakers_b,
        WorstRun(cell, &Figures::breakers_generator),
        WorstRun(cell, &Figures::breakers_a),
        WorstRun(cell, &Figures::breakers_b));
  }
  // The independent method's own table.
  bool any = false;
  for (const Cell& cell : cells) {
    if (cell.scenario != Scenario::kSplit) continue;
    if (!any) {
      std::printf(
          "\nThe independent method (Put, answered by B; the store down then "
          "overloaded for Get): success, median (lowest run)\n\n"
          "| scenario | client | Put success | Get success | breakers "
          "opened gen/A/B |\n|---|---|---:|---:|---:|\n");
      any = true;
    }
    const Figures& f = cell.median;
    // The single tier has no middle, and sends no Put.
    const std::string put =
        std::isnan(f.independent_success)
            ? "-"
            : absl::StrFormat(
                  "%.1f%% (%.1f%%)", 100 * f.independent_success,
                  100 * LowestRun(cell, &Figures::independent_success));
    std::printf(
        "| %s | %s | %s | %.1f%% (%.1f%%) | %.0f/%.0f/%.0f "
        "(%.0f/%.0f/%.0f) |\n",
        CellName(cell).c_str(), std::string(ClientName(cell.client)).c_str(),
        put.c_str(), 100 * f.success, 100 * LowestRun(cell, &Figures::success),
        f.breakers_generator, f.breakers_a, f.breakers_b,
        WorstRun(cell, &Figures::breakers_generator),
        WorstRun(cell, &Figures::breakers_a),
        WorstRun(cell, &Figures::breakers_b));
  }
  std::fflush(stdout);
}

// Runs every scenario and client at the current load.
int RunLevel(const DriverOptions& options, int load, std::vector<Cell>& cells) {
  int failures = 0;
  for (Scenario scenario : options.scenarios) {
    const absl::Duration duration =
        ScenarioDuration(scenario, options.duration);
    for (Client client : options.clients) {
      Cell cell{scenario,
                client,
                load,
                duration,
                MakeFaultPlan(scenario, duration, options.rate, options.blip),
                {},
                {},
                {}};
      for (int r = 0; r < options.runs; ++r) {
        const absl::Time begin = absl::Now();
        absl::StatusOr<Run> run = RunOnce(options, scenario, client);
        if (!run.ok()) {
          std::fprintf(stderr, "chain: %s/%s run %d failed: %s\n",
                       CellName(cell).c_str(),
                       std::string(ClientName(client)).c_str(), r + 1,
                       run.status().ToString().c_str());
          ++failures;
          continue;
        }
        std::fprintf(
            stderr,
            "chain: %s/%s run %d: C att/req %.2f, success %.1f%%, recovery "
            "%s s, breakers %.0f/%.0f/%.0f, load %.2f (%.1f s)\n",
            CellName(cell).c_str(), std::string(ClientName(client)).c_str(),
            r + 1, run->figures.c_per_request, 100 * run->figures.success,
            Json(run->figures.recovery_s).c_str(),
            run->figures.breakers_generator, run->figures.breakers_a,
            run->figures.breakers_b, run->figures.loadavg,
            absl::ToDoubleSeconds(absl::Now() - begin));
        cell.runs.push_back(*std::move(run));
      }
      if (cell.runs.empty()) continue;
      for (const FigureField& field : kFigureFields) {
        std::vector<double> values;
        for (const Run& run : cell.runs)
          values.push_back(run.figures.*field.field);
        cell.median.*field.field = Median(values);
      }
      for (auto field :
           {&Series::sent, &Series::ok, &Series::failed, &Series::a, &Series::b,
            &Series::c, &Series::independent_ok, &Series::independent_failed}) {
        cell.series.*field = MedianSeries(cell.runs, field);
      }
      cells.push_back(std::move(cell));
    }
  }
  return failures;
}

}  // namespace

int RunDriver(const DriverOptions& options) {
  // A run whose children die must not kill the driver by SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  std::vector<Cell> cells;
  int failures = 0;
  for (int load : options.loads) {
    BusyLoops loops(load);
    failures += RunLevel(options, load, cells);
  }
  PrintTable(options, cells);
  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path);
    out << ReportJson(options, cells);
    if (!out) {
      std::fprintf(stderr, "chain: cannot write %s\n",
                   options.json_path.c_str());
      return 1;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
