// Copyright rpcguard authors.

#include "bench/load.h"

#include <grpcpp/client_context.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/server_process.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define RPCGUARD_BENCH_CALLGRIND 1
#endif
#endif

namespace rpcguard {
namespace bench {
namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// One call's outcome; latency_ns < 0: the slot was claimed but never used
// (the time was up).
struct Sample {
  int64_t latency_ns = -1;
  int32_t code = 0;
  bool late = false;
};

// What every caller of one load shares.
class Driver {
 public:
  Driver(FaultService::Stub& stub, const LoadSpec& spec)
      : stub_(stub),
        calls_(spec.calls),
        deadline_(spec.deadline),
        max_time_(spec.max_time),
        pace_(spec.pace),
        op_id_prefix_(spec.op_id_prefix),
        fail_first_(spec.fail_first),
        samples_(spec.calls) {}

  FaultService::Stub& stub() { return stub_; }
  absl::Duration deadline() const { return deadline_; }
  absl::Duration pace() const { return pace_; }

  // The first request of a caller.
  FaultRequest MakeRequest() const {
    FaultRequest req;
    req.set_op_id("bench");
    req.set_fail_first(fail_first_);
    return req;
  }
  // Gives `req` call `i`'s operation, when calls have operations of their
  // own.
  void SetOperation(int64_t i, FaultRequest* req) const {
    if (!op_id_prefix_.empty()) req->set_op_id(absl::StrCat(op_id_prefix_, i));
  }
  const std::vector<Sample>& samples() const { return samples_; }
  int64_t completed() const {
    return completed_.load(std::memory_order_relaxed);
  }

  void SetStart(absl::Time start) { stop_at_ = start + max_time_; }

  // Claims the next call: its index, or -1 when the load is over. `*start`
  // is the call's start time.
  int64_t Claim(absl::Time* start) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= calls_) return -1;
    *start = absl::Now();
    if (*start >= stop_at_) return -1;
    return i;
  }

  void Record(int64_t i, absl::Time start, absl::Time deadline,
              grpc::StatusCode code) {
    const absl::Time end = absl::Now();
    Sample& s = samples_[i];
    s.latency_ns = absl::ToInt64Nanoseconds(end - start);
    s.code = static_cast<int32_t>(code);
    s.late = end > deadline + kLateSlack;
    completed_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  FaultService::Stub& stub_;
  const int64_t calls_;
  const absl::Duration deadline_;
  const absl::Duration max_time_;
  const absl::Duration pace_;
  const std::string op_id_prefix_;
  const int fail_first_;
  absl::Time stop_at_ = absl::InfiniteFuture();
  std::vector<Sample> samples_;  // indexed by call; touched before the load
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> completed_{0};
};

// Sleeps until the caller's next turn when the load is paced; `*next` is
// when its previous call was due.
void AwaitTurn(const Driver& driver, absl::Time* next) {
  if (driver.pace() <= absl::ZeroDuration()) return;
  *next += driver.pace();
  absl::SleepFor(*next - absl::Now());
}

void SyncCaller(Driver& driver, const absl::Notification& go) {
  FaultRequest req = driver.MakeRequest();
  FaultReply reply;
  go.WaitForNotification();
  absl::Time next = absl::Now();
  absl::Time start;
  for (int64_t i = driver.Claim(&start); i >= 0; i = driver.Claim(&start)) {
    grpc::ClientContext ctx;
    const absl::Time deadline = start + driver.deadline();
    ctx.set_deadline(absl::ToChronoTime(deadline));
    driver.SetOperation(i, &req);
    const grpc::Status status = driver.stub().Get(&ctx, req, &reply);
    driver.Record(i, start, deadline, status.error_code());
    AwaitTurn(driver, &next);
  }
}

// A paced caller on the callback stub: a thread of its own waits for each
// call's completion, then for its next turn.
void PacedCallbackCaller(Driver& driver, const absl::Notification& go) {
  FaultRequest req = driver.MakeRequest();
  FaultReply reply;
  go.WaitForNotification();
  absl::Time next = absl::Now();
  absl::Time start;
  for (int64_t i = driver.Claim(&start); i >= 0; i = driver.Claim(&start)) {
    grpc::ClientContext ctx;
    const absl::Time deadline = start + driver.deadline();
    ctx.set_deadline(absl::ToChronoTime(deadline));
    driver.SetOperation(i, &req);
    absl::Notification done;
    grpc::StatusCode code = grpc::StatusCode::OK;
    driver.stub().async()->Get(&ctx, &req, &reply, [&](grpc::Status status) {
      code = status.error_code();
      done.Notify();
    });
    done.WaitForNotification();
    driver.Record(i, start, deadline, code);
    AwaitTurn(driver, &next);
  }
}

// One caller on the callback stub: each call's completion starts the next.
class CallbackChain {
 public:
  CallbackChain(Driver& driver, absl::BlockingCounter* finished)
      : driver_(driver), finished_(finished) {}

  // Starts the next call, or reports the chain finished.
  void Next() {
    index_ = driver_.Claim(&start_);
    if (index_ < 0) {
      // Inside the previous call's completion: gRPC allows destroying its
      // context here.
      ctx_.reset();
      finished_->DecrementCount();  // `this` may be destroyed from here on
      return;
    }
    ctx_ = std::make_unique<grpc::ClientContext>();
    deadline_ = start_ + driver_.deadline();
    ctx_->set_deadline(absl::ToChronoTime(deadline_));
    driver_.SetOperation(index_, &req_);
    driver_.stub().async()->Get(
        ctx_.get(), &req_, &reply_,
        [this](grpc::Status status) { Done(status.error_code()); });
  }

 private:
  void Done(grpc::StatusCode code) {
    driver_.Record(index_, start_, deadline_, code);
    Next();
  }

  Driver& driver_;
  absl::BlockingCounter* const finished_;
  FaultRequest req_ = driver_.MakeRequest();
  FaultReply reply_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  int64_t index_ = -1;
  absl::Time start_;
  absl::Time deadline_;
};

}  // namespace

absl::string_view StubName(StubKind stub) {
  return stub == StubKind::kSync ? "sync" : "callback";
}

ProcessUsage GetProcessUsage() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6;
  };
  ProcessUsage out;
  out.user_seconds = seconds(usage.ru_utime);
  out.cpu_seconds = out.user_seconds + seconds(usage.ru_stime);
  out.context_switches = usage.ru_nvcsw + usage.ru_nivcsw;
  return out;
}

double LoadResult::LatencyMs(double q) const {
  if (latency_ns.empty()) return 0;
  size_t rank = static_cast<size_t>(q * latency_ns.size() + 0.999999);
  rank = std::clamp<size_t>(rank, 1, latency_ns.size());
  return latency_ns[rank - 1] / 1e6;
}

LoadResult RunLoad(FaultService::Stub& stub, const LoadSpec& spec) {
  Driver driver(stub, spec);
  absl::Notification go;
  absl::Notification done;

  // Callers wait for `go`, so that starting them is not measured.
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<CallbackChain>> chains;
  // Paced callers are threads whatever the stub.
  const bool chained =
      spec.stub == StubKind::kCallback && spec.pace <= absl::ZeroDuration();
  absl::BlockingCounter finished(chained ? spec.concurrency : 0);
  if (spec.stub == StubKind::kSync) {
    for (int t = 0; t < spec.concurrency; ++t) {
      threads.emplace_back([&driver, &go] { SyncCaller(driver, go); });
    }
  } else if (!chained) {
    for (int t = 0; t < spec.concurrency; ++t) {
      threads.emplace_back([&driver, &go] { PacedCallbackCaller(driver, go); });
    }
  } else {
    for (int t = 0; t < spec.concurrency; ++t) {
      chains.push_back(std::make_unique<CallbackChain>(driver, &finished));
    }
  }
  std::thread sampler;
  if (spec.sample) {
    sampler = std::thread([&] {
      if (!done.WaitForNotificationWithTimeout(spec.sample_after)) {
        spec.sample(driver.completed());
      }
    });
  }

  const int64_t rss_before = ReadRssKib();
#ifdef RPCGUARD_BENCH_CALLGRIND
  CALLGRIND_ZERO_STATS;
#endif
  const ProcessUsage before = GetProcessUsage();
  const absl::Time start = absl::Now();
  driver.SetStart(start);
  if (!chained) {
    go.Notify();
    for (std::thread& t : threads) t.join();
  } else {
    for (auto& chain : chains) chain->Next();
    finished.Wait();
  }
  const absl::Time end = absl::Now();
  const ProcessUsage after = GetProcessUsage();
#ifdef RPCGUARD_BENCH_CALLGRIND
  CALLGRIND_DUMP_STATS_AT(spec.label.c_str());
#endif
  const int64_t rss_after = ReadRssKib();
  done.Notify();
  if (sampler.joinable()) sampler.join();

  LoadResult result;
  result.wall = end - start;
  result.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  result.user_seconds = after.user_seconds - before.user_seconds;
  result.context_switches = after.context_switches - before.context_switches;
  result.rss_growth_kib = rss_after - rss_before;
  result.latency_ns.reserve(driver.completed());
  for (const Sample& s : driver.samples()) {
    if (s.latency_ns < 0) continue;
    ++result.calls;
    if (s.code == 0) ++result.ok;
    if (s.late) ++result.late;
    if (s.code >= 0 && s.code < 17) ++result.codes[s.code];
    result.latency_ns.push_back(s.latency_ns);
  }
  std::sort(result.latency_ns.begin(), result.latency_ns.end());
  return result;
}

LoadResult RunLoads(const std::vector<StubLoad>& loads) {
  std::vector<LoadResult> results(loads.size());
  const int64_t rss_before = ReadRssKib();
  const ProcessUsage before = GetProcessUsage();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < loads.size(); ++i) {
    threads.emplace_back([&loads, &results, i] {
      results[i] = RunLoad(*loads[i].stub, loads[i].spec);
    });
  }
  for (std::thread& t : threads) t.join();
  const ProcessUsage after = GetProcessUsage();

  LoadResult pooled;
  for (const LoadResult& r : results) {
    pooled.calls += r.calls;
    pooled.ok += r.ok;
    pooled.late += r.late;
    pooled.wall = std::max(pooled.wall, r.wall);
    for (size_t c = 0; c < r.codes.size(); ++c) pooled.codes[c] += r.codes[c];
    pooled.latency_ns.insert(pooled.latency_ns.end(), r.latency_ns.begin(),
                             r.latency_ns.end());
  }
  std::sort(pooled.latency_ns.begin(), pooled.latency_ns.end());
  pooled.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  pooled.user_seconds = after.user_seconds - before.user_seconds;
  pooled.context_switches = after.context_switches - before.context_switches;
  pooled.rss_growth_kib = ReadRssKib() - rss_before;
  return pooled;
}

}  // namespace bench
}  // namespace rpcguard
