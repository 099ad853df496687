// Copyright rpcguard authors.
//
// Chaos against a real server process.
//
// The fault server runs as a child process (fault_server_main) on
// 127.0.0.1. While steady load runs through rpcguard (sync and callback
// stubs, several concurrent callers, a mix of Get/Put/Charge/Create with
// deadlines of 200-500 ms, some calls cancelled by their caller), a timeline
// of faults hits the server: calls failing after their side effect was
// applied, SIGKILL and restart on the same port, a port that refuses
// connections for a while, a server that hangs without answering, one that
// answers close to the deadline. Every call is then checked against the
// invariants below, and the driver prints what it checked.
//
// Invariants, over every call:
//  1. no call completes more than 20 ms after its deadline (250 ms under
//     AddressSanitizer, see kLateBound), or later than a plain channel's
//     calls around it (the control, ControlCalls, + 5 ms: a loaded machine
//     is late for gRPC too). rpcguard's own
//     part is checked exactly (no attempt gets a deadline later than its
//     call's); lateness beyond 20 ms is excused only where a measured cause
//     outside rpcguard accounts for it (the test process was not scheduled,
//     gRPC core ended the attempt late past the attempt's own deadline, or
//     gRPC handed rpcguard's conclusion to the application late: rpcguard's
//     own trace says when it concluded), and excused calls are counted,
//     reported, and capped at 1%;
//  2. no attempt starts after the caller cancelled (attempts are seen by an
//     interceptor registered after rpcguard, which runs once per attempt on
//     the client, before anything is sent); one that raced the cancel and
//     started late is excused only for a measured cause: the process
//     stalled, or the caller's thread, which started it on its way, was
//     switched out by the kernel in between (its involuntary context
//     switches, getrusage), at most for 2% of the cancelled calls;
//  3. Create, which nobody declared idempotent, is never attempted twice (the
//     client-side attempt log and the server's per-op counts);
//  4. a KEYED Charge is applied at most once per server life, every attempt
//     of it carries the same key (so a durable deduplication store applies it
//     once), and every Charge the client saw succeed was applied (the server's
//     reply says so): no money charged twice, none lost;
//  5. every call completes (a watchdog), and VmRSS stays within a bound;
//  6. once the server is healthy again, calls succeed again within 5 s.
//
// A restarted server has lost its counters, so the server's per-op stats
// are fetched just before every kill and kept per server life.

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/chaos/server_process.h"

#if defined(__SANITIZE_ADDRESS__)
#define RPCGUARD_CHAOS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RPCGUARD_CHAOS_ASAN 1
#endif
#endif

namespace rpcguard {
namespace {

using ::rpcguard::testing::RunfilesPath;
using ::rpcguard::testing::ServerProcess;
using ::rpcguard::testing::v1::ControlRequest;
using ::rpcguard::testing::v1::FaultControl;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;
using ::rpcguard::testing::v1::StatsReply;
using ::rpcguard::testing::v1::StatsRequest;

// ---------------------------------------------------------------------------
// Bounds.

// End to end, a call completes at most this long after its deadline.
// AddressSanitizer slows gRPC's own threads enough that a completion rpcguard
// delivered well before the deadline can reach the application tens of
// milliseconds late with no stall the test can measure (seen with the code
// before and after rpcguard's restructuring alike: an attempt OK 231 ms
// before the deadline, seen by the caller 49 ms after it). Under ASan the
// bound is therefore looser; rpcguard's own part (no attempt deadline past
// the call's) stays exact in every build, and the plain build keeps 20 ms.
#if defined(__SANITIZE_ADDRESS__)
#define RPCGUARD_CHAOS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RPCGUARD_CHAOS_UNDER_ASAN 1
#endif
#endif
#ifdef RPCGUARD_CHAOS_UNDER_ASAN
constexpr absl::Duration kLateBound = absl::Milliseconds(250);
#else
constexpr absl::Duration kLateBound = absl::Milliseconds(20);
#endif
// An attempt may start just after the cancel when rpcguard had decided to
// start it before the cancel arrived (the two cross on different threads);
// rpcguard cancels such an attempt at once. So an attempt that starts after
// the cancel is a violation when it starts later than this, or when its
// backoff was still running at the cancel (rpcguard's own trace says when
// each backoff ends): then nothing but the cancel can have started it.
// Under ASan, for the same reason as kLateBound, the race takes longer.
#ifdef RPCGUARD_CHAOS_UNDER_ASAN
constexpr absl::Duration kCancelRaceSlack = absl::Milliseconds(50);
#else
constexpr absl::Duration kCancelRaceSlack = absl::Milliseconds(10);
#endif
// Timer and clock-conversion rounding around a backoff's end.
constexpr absl::Duration kBackoffEndSlack = absl::Milliseconds(2);
// The heartbeat thread sleeps this long in a loop; a wake-up later than
// kStallGap means the test process was not scheduled (other processes own
// the 2 cores), and no code in it could have ended a call on time.
constexpr absl::Duration kHeartbeat = absl::Milliseconds(1);
constexpr absl::Duration kStallGap = absl::Milliseconds(5);
// Lateness excused by such stalls must stay rare, or the run proves little.
constexpr double kMaxExcusedLateShare = 0.01;
// A call as late as the control's calls around it (ControlCalls), plus this,
// is on time as gRPC keeps time on this machine now.
constexpr absl::Duration kControlAllowance = absl::Milliseconds(5);
// Around a call's deadline: the control calls whose deadlines fall this
// close to it say how late gRPC itself was then.
constexpr absl::Duration kControlWindow = absl::Seconds(1);
// At most this share of the cancelled calls (and at least one) may have an
// attempt start late after the cancel excused by a switched-out caller's
// thread.
constexpr double kMaxExcusedCancelShare = 0.02;
// Calls succeed again within the breaker's longest open time (maxOpenTime in
// kConfig, 1 s), plus gRPC's reconnect backoff (capped at 1 s below), plus
// 0.5 s for the probes themselves and scheduling on a busy machine.
constexpr absl::Duration kRecoveryBound = absl::Milliseconds(2500);
// A call still running this long after its deadline has hung.
constexpr absl::Duration kHangBound = absl::Seconds(2);
// VmRSS: an absolute bound, and a bound on its growth after the warmup of a
// base plus so much per call: the driver keeps a record of every call and
// attempt (about 1.4 KB per call here), which is most of the growth.
// Calibrated by leaking every CallState on purpose (about 2 KB per hijacked
// call): that grew VmRSS by 91 MB over 29,000 calls, normal runs by 35-40.
#ifdef RPCGUARD_CHAOS_ASAN
// ASan keeps freed memory in quarantine (256 MB by default) and shadows all;
// LeakSanitizer checks for lost memory at exit instead.
constexpr int64_t kRssBoundMb = 1536;
constexpr int64_t kRssGrowthBaseMb = 384;
constexpr int64_t kRssGrowthPerCallBytes = 4096;
#else
constexpr int64_t kRssBoundMb = 256;
constexpr int64_t kRssGrowthBaseMb = 32;
constexpr int64_t kRssGrowthPerCallBytes = 1536;
#endif
// Caps the load whatever the machine's speed, so memory stays bounded.
constexpr int64_t kMaxCalls = 80000;

// Load shape.
constexpr int kSyncCallers = 3;
constexpr int kCallbackCallers = 3;
constexpr int kCallbackDepth = 3;  // calls in flight per callback caller
constexpr int kCancelPercent = 8;

// Idempotency comes from fault.proto: Get NO_SIDE_EFFECTS, Put IDEMPOTENT,
// Charge KEYED. Get and Charge are hedged (policies written for each
// method: a KEYED method is hedged only so), up to 3 copies 40 ms apart,
// every copy of a Charge carrying its one key. Put is retried; Create gets a
// retryPolicy too but no idempotency: rpcguard must still try it once. A6
// jitter keeps every backoff at 16 ms or more (see kCancelRaceSlack).
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"},
            {"service": "rpcguard.testing.v1.FaultService", "method": "Charge"}],
   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.04s",
                     "nonFatalStatusCodes": ["UNAVAILABLE"]}},
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Put"},
            {"service": "rpcguard.testing.v1.FaultService", "method": "Create"}],
   "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.02s",
                   "maxBackoff": "0.1s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"jitter": "A6"}}],
  "rpcguard": {"circuitBreaker": {"openTime": "0.5s", "maxOpenTime": "1s"}}
})json";

enum class Method { kGet, kPut, kCharge, kCreate };
enum class Api { kSync, kCallback };
constexpr const char* kMethodNames[] = {"Get", "Put", "Charge", "Create"};

// ---------------------------------------------------------------------------
// The attempt log: an interceptor registered after rpcguard, so it runs once
// per attempt (and once for calls rpcguard does not hijack).

// Realtime minus monotonic, read once: the sample whose two monotonic reads
// around the realtime one are closest. ClientContext::deadline() converts an
// attempt's monotonic deadline by reading both clocks again, and a thread
// preempted between those two reads (a loaded 2-core machine) sees the
// deadline milliseconds late: a measurement error, not rpcguard's.
absl::Duration RealtimeMinusMonotonic() {
  static const absl::Duration offset = [] {
    auto at = [](gpr_timespec t) {
      return absl::UnixEpoch() + absl::Seconds(t.tv_sec) +
             absl::Nanoseconds(t.tv_nsec);
    };
    absl::Duration best_gap = absl::InfiniteDuration();
    absl::Duration best = absl::ZeroDuration();
    for (int i = 0; i < 200; ++i) {
      const absl::Time m1 = at(gpr_now(GPR_CLOCK_MONOTONIC));
      const absl::Time r = at(gpr_now(GPR_CLOCK_REALTIME));
      const absl::Time m2 = at(gpr_now(GPR_CLOCK_MONOTONIC));
      if (m2 - m1 < best_gap) {
        best_gap = m2 - m1;
        best = r - (m1 + (m2 - m1) / 2);
      }
    }
    return best;
  }();
  return offset;
}

// An attempt's deadline on the wall clock, with the fixed offset above.
absl::Time WallDeadline(gpr_timespec t) {
  if (gpr_time_cmp(t, gpr_inf_future(t.clock_type)) == 0) {
    return absl::InfiniteFuture();
  }
  const absl::Time at = absl::UnixEpoch() + absl::Seconds(t.tv_sec) +
                        absl::Nanoseconds(t.tv_nsec);
  return t.clock_type == GPR_CLOCK_MONOTONIC ? at + RealtimeMinusMonotonic()
                                             : at;
}

// The calling thread and how often the kernel has taken the CPU from it
// (involuntary context switches): a thread that was switched out between
// two moments did not run for some of the time between them, though the
// process as a whole may have (the StallLog sees only the latter).
struct ThreadMark {
  pid_t thread = 0;
  long involuntary_switches = 0;  // NOLINT(runtime/int): getrusage's type
  // Times the thread gave up the CPU itself: it blocked (a lock, a wait).
  long voluntary_switches = 0;  // NOLINT(runtime/int)

  static ThreadMark Now() {
    ThreadMark m;
    m.thread = static_cast<pid_t>(syscall(SYS_gettid));
    struct rusage usage;
    if (getrusage(RUSAGE_THREAD, &usage) == 0) {
      m.involuntary_switches = usage.ru_nivcsw;
      m.voluntary_switches = usage.ru_nvcsw;
    }
    return m;
  }
  // Whether the same thread, marked later as `later`, was switched out in
  // between.
  bool SwitchedOutBefore(const ThreadMark& later) const {
    return thread != 0 && later.thread == thread &&
           later.involuntary_switches > involuntary_switches;
  }
  // For a violation's message: where the later mark was taken against this
  // one, so that a thread that blocked (voluntary switches: a lock, a wait)
  // is told from one the kernel preempted and from another thread.
  std::string Describe(const ThreadMark& later) const {
    if (thread == 0 || later.thread != thread) {
      return absl::StrCat("on thread ", later.thread, ", not the caller's (",
                          thread, ")");
    }
    return absl::StrCat("on the caller's thread, which blocked ",
                        later.voluntary_switches - voluntary_switches,
                        " and was preempted ",
                        later.involuntary_switches - involuntary_switches,
                        " times since the issue");
  }
};

struct AttemptRecord {
  absl::Time start;
  ThreadMark started_on;  // the thread that started it, when it did
  // The deadline rpcguard gave the attempt (its own ClientContext's).
  absl::Time deadline;
  std::string key;     // idempotency-key
  std::string number;  // rpcguard-attempt
  bool ended = false;
  absl::Time end;
  grpc::StatusCode code = grpc::StatusCode::OK;
  // The server failed it on purpose ("injected failure", "hang ended").
  bool injected = false;
};

class AttemptLog {
 public:
  class Factory final
      : public grpc::experimental::ClientInterceptorFactoryInterface {
   public:
    explicit Factory(AttemptLog* log) : log_(log) {}
    grpc::experimental::Interceptor* CreateClientInterceptor(
        grpc::experimental::ClientRpcInfo* info) override {
      return new Interceptor(log_, info);
    }

   private:
    AttemptLog* const log_;
  };

  std::vector<AttemptRecord> Of(const std::string& op) const {
    absl::MutexLock lock(&mu_);
    auto it = by_op_.find(op);
    return it == by_op_.end() ? std::vector<AttemptRecord>() : it->second;
  }
  int64_t total() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }
  int64_t injected() const {
    absl::MutexLock lock(&mu_);
    return injected_;
  }
  // Attempts that ended UNAVAILABLE without the server saying so: refused or
  // reset connections.
  int64_t transport_failures() const {
    absl::MutexLock lock(&mu_);
    return transport_failures_;
  }

 private:
  class Interceptor final : public grpc::experimental::Interceptor {
   public:
    Interceptor(AttemptLog* log, grpc::experimental::ClientRpcInfo* info)
        : log_(log), info_(info) {}
    void Intercept(grpc::experimental::InterceptorBatchMethods* b) override {
      using grpc::experimental::InterceptionHookPoints;
      if (b->QueryInterceptionHookPoint(
              InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
        AttemptRecord r;
        r.start = absl::Now();
        r.started_on = ThreadMark::Now();
        r.deadline = WallDeadline(info_->client_context()->raw_deadline());
        const auto* md = b->GetSendInitialMetadata();
        auto get = [md](const char* key) {
          auto it = md->find(key);
          return it == md->end() ? std::string() : it->second;
        };
        op_ = get("chaos-op");
        r.key = get(kIdempotencyKeyHeader);
        r.number = get(kAttemptHeader);
        absl::MutexLock lock(&log_->mu_);
        auto& v = log_->by_op_[op_];
        index_ = v.size();
        v.push_back(std::move(r));
        ++log_->total_;
      }
      if (b->QueryInterceptionHookPoint(
              InterceptionHookPoints::POST_RECV_STATUS)) {
        const grpc::Status* s = b->GetRecvStatus();
        const bool injected =
            absl::StartsWith(s->error_message(), "injected failure") ||
            s->error_message() == "hang ended";
        absl::MutexLock lock(&log_->mu_);
        AttemptRecord& r = log_->by_op_[op_][index_];
        r.ended = true;
        r.end = absl::Now();
        r.code = s->error_code();
        r.injected = injected;
        if (injected) ++log_->injected_;
        if (!injected && s->error_code() == grpc::StatusCode::UNAVAILABLE) {
          ++log_->transport_failures_;
        }
      }
      b->Proceed();
    }

   private:
    AttemptLog* const log_;
    grpc::experimental::ClientRpcInfo* const info_;
    std::string op_;
    size_t index_ = 0;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<AttemptRecord>> by_op_
      ABSL_GUARDED_BY(mu_);
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t transport_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

// When each backoff was to end, from rpcguard's own trace (its retry
// decisions), keyed by the call's idempotency key and the attempt before the
// backoff; and when rpcguard concluded each call it gave up on (its terminal
// line is written just before the status goes back to gRPC).
class RetryLog {
 public:
  std::shared_ptr<TraceSink> Sink() {
    return std::make_shared<CallbackSink>([this](const TraceEvent& e) {
      if (e.kind == TraceEvent::Kind::kBreakerTransition) {
        absl::MutexLock lock(&mu_);
        transitions_.push_back({e.time, e.to_state, e.message});
        return;
      }
      // The terminal line (trace.h); a call without a key cannot be told
      // from another.
      if (e.kind != TraceEvent::Kind::kHedge &&
          (e.decision == TraceDecision::kGiveUp ||
           e.decision == TraceDecision::kDone) &&
          !e.idempotency_key.empty()) {
        absl::MutexLock lock(&mu_);
        concluded_[e.idempotency_key] = e.time;
        return;
      }
      if (e.kind != TraceEvent::Kind::kAttempt ||
          e.decision != TraceDecision::kRetry) {
        return;
      }
      absl::MutexLock lock(&mu_);
      backoff_end_[{e.idempotency_key, e.attempt}] = e.time + e.backoff;
    });
  }

  // When rpcguard wrote the terminal line of the call keyed `key`;
  // absl::InfiniteFuture() when it wrote none (at kRetries, a call that
  // succeeded at once has none).
  absl::Time Concluded(const std::string& key) const {
    absl::MutexLock lock(&mu_);
    auto it = concluded_.find(key);
    return it == concluded_.end() ? absl::InfiniteFuture() : it->second;
  }

  struct Transition {
    absl::Time time;
    std::string to;
    std::string why;
  };
  // The breaker's transitions, in order.
  std::vector<Transition> transitions() const {
    absl::MutexLock lock(&mu_);
    return transitions_;
  }

  // absl::InfiniteFuture() when rpcguard traced no retry after `attempt`.
  absl::Time BackoffEnd(const std::string& key, int attempt) const {
    absl::MutexLock lock(&mu_);
    auto it = backoff_end_.find({key, attempt});
    return it == backoff_end_.end() ? absl::InfiniteFuture() : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Transition> transitions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, int>, absl::Time> backoff_end_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> concluded_ ABSL_GUARDED_BY(mu_);
};

// Moments the test process was not scheduled, measured by a thread that
// sleeps kHeartbeat in a loop and notes every late wake-up.
class StallLog {
 public:
  void Run(const std::atomic<bool>* stop) {
    absl::Time before = absl::Now();
    while (!stop->load()) {
      absl::SleepFor(kHeartbeat);
      const absl::Time now = absl::Now();
      if (now - before - kHeartbeat >= kStallGap) {
        absl::MutexLock lock(&mu_);
        stalls_.push_back({before + kHeartbeat, now});
      }
      before = now;
    }
  }

  // Time in [from, to] during which the process stalled.
  absl::Duration StalledWithin(absl::Time from, absl::Time to) const {
    absl::MutexLock lock(&mu_);
    absl::Duration total;
    for (const auto& [begin, end] : stalls_) {
      const absl::Time b = std::max(begin, from);
      const absl::Time e = std::min(end, to);
      if (e > b) total += e - b;
    }
    return total;
  }

  int64_t count() const {
    absl::MutexLock lock(&mu_);
    return stalls_.size();
  }
  absl::Duration longest() const {
    absl::MutexLock lock(&mu_);
    absl::Duration longest;
    for (const auto& [begin, end] : stalls_) {
      longest = std::max(longest, end - begin);
    }
    return longest;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<absl::Time, absl::Time>> stalls_ ABSL_GUARDED_BY(mu_);
};

// The control: a plain gRPC channel (no interceptor) to the same server,
// calling all through the run with deadlines the server never meets
// (wait-for-ready: through a kill too), so that each call ends by gRPC
// core's own deadline. Its lateness at a moment is what the machine did to
// gRPC itself then: rpcguard's calls are judged against it (a loaded machine
// is late for gRPC too), never against a bound only a quiet one meets.
class ControlCalls {
 public:
  // Calls, kInFlight at a time, until `stop`.
  void Run(FaultService::Stub* stub, const std::atomic<bool>* stop) {
    absl::BitGen gen;
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < kInFlight; ++lane) {
      lanes.emplace_back([this, stub, stop, lane] {
        absl::BitGen gen;
        for (int64_t n = 0; !stop->load(); ++n) {
          grpc::ClientContext ctx;
          const absl::Duration budget =
              absl::Milliseconds(absl::Uniform(gen, 150, 400));
          const absl::Time deadline = absl::Now() + budget;
          ctx.set_deadline(absl::ToChronoTime(deadline));
          ctx.set_wait_for_ready(true);
          FaultRequest req;
          req.set_op_id(absl::StrCat("control-", lane, "-", n));
          req.set_delay_ms(2000);
          FaultReply reply;
          stub->Get(&ctx, req, &reply);
          const absl::Time end = absl::Now();
          absl::MutexLock lock(&mu_);
          ends_.push_back({deadline, end});
        }
      });
    }
    for (auto& t : lanes) t.join();
  }

  // The latest a control call with its deadline in [from, to] ended after
  // it (zero if none ended late).
  absl::Duration LatestWithin(absl::Time from, absl::Time to) const {
    absl::MutexLock lock(&mu_);
    absl::Duration latest;
    for (const auto& [deadline, end] : ends_) {
      if (deadline >= from && deadline <= to) {
        latest = std::max(latest, end - deadline);
      }
    }
    return latest;
  }

  // "N calls, latest +X" for the report.
  std::string Describe() const {
    absl::MutexLock lock(&mu_);
    absl::Duration latest;
    for (const auto& [deadline, end] : ends_) {
      latest = std::max(latest, end - deadline);
    }
    return absl::StrCat(
        ends_.size(), " control calls (plain channel), latest +",
        absl::FormatDuration(absl::Trunc(latest, absl::Microseconds(100))));
  }

 private:
  static constexpr int kInFlight = 3;
  mutable absl::Mutex mu_;
  std::vector<std::pair<absl::Time, absl::Time>> ends_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// Calls.

// One logical operation, from its caller's point of view.
struct CallRecord {
  int64_t id = 0;
  Method method = Method::kGet;
  Api api = Api::kSync;
  std::string op_id;
  int phase = 0;
  absl::Time start;
  absl::Time deadline;

  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Time end ABSL_GUARDED_BY(mu);
  grpc::StatusCode code ABSL_GUARDED_BY(mu) = grpc::StatusCode::OK;
  std::string message ABSL_GUARDED_BY(mu);
  int applied ABSL_GUARDED_BY(mu) = 0;  // Charge: the server's reply
  std::string reply_key ABSL_GUARDED_BY(mu);
  std::string attempts_trailer ABSL_GUARDED_BY(mu);
  // Set by the canceller, after TryCancel() returned.
  absl::Time cancelled_at ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  // Set by the caller just before its stub call: a cancel scheduled within
  // 2 ms of `start` may come before the call exists (TryCancel on a fresh
  // context), and gRPC then still runs the call's hooks, attempt 1's
  // included, when the caller gets to it.
  absl::Time issued ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // The caller's thread as it issued the call: attempt 1 starts on it.
  ThreadMark issued_on ABSL_GUARDED_BY(mu);
};

// What a call in flight owns; shared by its caller and the canceller.
struct InFlight {
  CallRecord* record = nullptr;
  grpc::ClientContext ctx;
  FaultRequest req;
  FaultReply reply;
  std::atomic<bool> done{false};
};

void MarkIssued(CallRecord& r) {
  const ThreadMark mark = ThreadMark::Now();
  absl::MutexLock lock(&r.mu);
  r.issued = absl::Now();
  r.issued_on = mark;
}

// What the server saw of one op in one of its lives.
struct ServerOp {
  int attempts = 0;
  int side_effects = 0;
  std::vector<std::string> keys;
};

struct ServerLife {
  pid_t pid = 0;
  absl::Time started;
  int64_t total_attempts = 0;
  absl::flat_hash_map<std::string, ServerOp> ops;
};

// A moment the server became healthy again.
struct Heal {
  std::string what;
  absl::Time at;
  absl::Time window_end = absl::InfiniteFuture();  // next fault
  absl::Duration recovery = absl::InfiniteDuration();
};

struct Phase {
  std::string name;
  absl::Time start;
};

// Whether a TCP connect to 127.0.0.1:`port` is refused (ECONNREFUSED).
bool RefusesConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool refused =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno == ECONNREFUSED;
  close(fd);
  return refused;
}

int64_t VmRssMb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb / 1024;
    }
  }
  return -1;
}

// ---------------------------------------------------------------------------
// The driver.

class Chaos {
 public:
  Chaos() : server_(RunfilesPath("tests/testing/fault_server_main")) {}

  ~Chaos() { server_.Kill(); }

  void Run();

 private:
  // --- the server
  void StartServer(int port);
  void KillServer(const std::string& why, absl::Duration down);
  // Issue 13's burst at start: 200 concurrent calls, each failing once,
  // before any other load; returns how many succeeded.
  int BurstAtStart();
  bool Control(int fail_percent, int delay_ms, bool hang,
               int apply_then_fail_percent);
  bool SnapshotServer();

  // --- load
  void SyncCaller();
  void CallbackCaller(int index);
  std::shared_ptr<InFlight> NewCall(Api api, absl::BitGen& gen);
  void Complete(const std::shared_ptr<InFlight>& call,
                const grpc::Status& status);
  void Canceller();
  void Watchdog();
  [[noreturn]] void FatalHang(const std::string& what);

  // --- the timeline
  // `fault`: the phase injects faults (else the server is healthy).
  void PhaseStart(const std::string& name, bool fault);
  void Healed(const std::string& what);
  void Sleep(absl::Duration d);
  void Log(const std::string& line);

  // --- checks
  int64_t CheckAndReport();

  absl::Time t0_ = absl::Now();
  ServerProcess server_;
  std::vector<ServerLife> lives_;
  std::vector<Phase> phases_;
  std::vector<Heal> heals_;
  int kills_ = 0;
  int down_probes_ = 0;
  int down_probes_accepted_ = 0;
  absl::Duration down_total_;
  absl::Duration hang_total_;
  absl::Duration slow_total_;
  absl::Duration lossy_total_;

  // Declared before the channel: its interceptors write into these.
  AttemptLog attempts_;
  RetryLog retries_;
  // A registry of the test's own: a fresh process's, and one to ask.
  std::shared_ptr<BreakerRegistry> registry_ =
      *BreakerRegistry::Create(BreakerRegistry::Options());
  int burst_ok_ = -1;
  bool burst_breaker_closed_ = false;
  // When the quick restart's server was back.
  absl::Time quick_restart_back_ = absl::InfiniteFuture();
  StallLog stalls_;
  std::atomic<bool> heartbeat_stop_{false};
  ControlCalls control_calls_;
  std::unique_ptr<FaultService::Stub> control_stub_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
  std::unique_ptr<FaultControl::Stub> control_;

  std::atomic<bool> stopping_{false};
  std::atomic<int> phase_{0};

  absl::Mutex calls_mu_;
  std::vector<std::unique_ptr<CallRecord>> calls_ ABSL_GUARDED_BY(calls_mu_);
  absl::flat_hash_map<int64_t, CallRecord*> in_flight_
      ABSL_GUARDED_BY(calls_mu_);

  struct CancelItem {
    absl::Time due;
    std::shared_ptr<InFlight> call;
    bool operator>(const CancelItem& o) const { return due > o.due; }
  };
  absl::Mutex cancel_mu_;
  std::priority_queue<CancelItem, std::vector<CancelItem>,
                      std::greater<CancelItem>>
      cancels_ ABSL_GUARDED_BY(cancel_mu_);
  bool cancel_stop_ ABSL_GUARDED_BY(cancel_mu_) = false;
  std::atomic<int64_t> cancels_sent_{0};

  struct Lane {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
  };
  std::vector<std::unique_ptr<Lane>> lanes_;

  absl::Mutex watch_mu_;
  bool watch_stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::atomic<int64_t> rss_peak_mb_{0};
  std::atomic<int64_t> rss_after_warmup_mb_{0};
};

void Chaos::Log(const std::string& line) {
  std::printf("chaos: [%6.2fs] %s\n", absl::ToDoubleSeconds(absl::Now() - t0_),
              line.c_str());
  std::fflush(stdout);
}

void Chaos::StartServer(int port) {
  // A restart on the same port can race the old socket's release: retry.
  absl::Status started;
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  do {
    started = server_.Start(port);
    if (started.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < limit);
  ASSERT_TRUE(started.ok()) << started;
  ServerLife life;
  life.pid = server_.pid();
  life.started = absl::Now();
  lives_.push_back(std::move(life));
}

bool Chaos::Control(int fail_percent, int delay_ms, bool hang,
                    int apply_then_fail_percent) {
  ControlRequest req;
  req.set_fail_percent(fail_percent);
  req.set_delay_ms(delay_ms);
  req.set_hang(hang);
  req.set_apply_then_fail_percent(apply_then_fail_percent);
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (absl::Now() < limit) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    rpcguard::testing::v1::ControlReply reply;
    grpc::Status s = control_->Control(&ctx, req, &reply);
    if (s.ok()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "FaultControl.Control failed for 10 s";
  return false;
}

bool Chaos::SnapshotServer() {
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (absl::Now() < limit) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    StatsRequest req;  // every op
    StatsReply reply;
    grpc::Status s = control_->Stats(&ctx, req, &reply);
    if (s.ok()) {
      ServerLife& life = lives_.back();
      life.total_attempts = reply.total_attempts();
      life.ops.clear();
      for (const auto& op : reply.ops()) {
        ServerOp& out = life.ops[op.op_id()];
        out.attempts = op.attempts();
        out.side_effects = op.side_effects();
        out.keys.assign(op.keys().begin(), op.keys().end());
      }
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "FaultControl.Stats failed for 10 s";
  return false;
}

void Chaos::KillServer(const std::string& why, absl::Duration down) {
  // The server's counters die with it: keep them first.
  SnapshotServer();
  const pid_t old = server_.pid();
  const absl::Time killed = absl::Now();
  server_.Kill();
  ++kills_;
  Log(absl::StrCat(
      "kill -9 pid ", old, " (", why, ")",
      down > absl::ZeroDuration()
          ? absl::StrCat(", port ", server_.port(), " refuses connections for ",
                         absl::FormatDuration(down))
          : ""));
  if (down > absl::ZeroDuration()) {
    // Probe the port while it is down: it must refuse (nothing listens).
    const absl::Time up_at = killed + down;
    while (absl::Now() < up_at) {
      ++down_probes_;
      if (!RefusesConnections(server_.port())) ++down_probes_accepted_;
      Sleep(std::min(absl::Milliseconds(200), up_at - absl::Now()));
    }
    down_total_ += absl::Now() - killed;
  }
  StartServer(server_.port());
  Log(absl::StrCat("restarted as pid ", server_.pid(), " on ",
                   server_.address(), ", ",
                   absl::FormatDuration(absl::Trunc(absl::Now() - killed,
                                                    absl::Milliseconds(1))),
                   " after the kill"));
}

void Chaos::PhaseStart(const std::string& name, bool fault) {
  // A fault ends the healthy window in which the last heal is measured.
  if (fault && !heals_.empty() &&
      heals_.back().window_end == absl::InfiniteFuture()) {
    heals_.back().window_end = absl::Now();
  }
  phases_.push_back({name, absl::Now()});
  phase_.store(static_cast<int>(phases_.size()) - 1);
  Log(absl::StrCat("phase ", name));
}

void Chaos::Healed(const std::string& what) {
  heals_.push_back({what, absl::Now()});
}

void Chaos::Sleep(absl::Duration d) { absl::SleepFor(d); }

std::shared_ptr<InFlight> Chaos::NewCall(Api api, absl::BitGen& gen) {
  auto record = std::make_unique<CallRecord>();
  CallRecord* r = record.get();
  r->api = api;
  const int pick = absl::Uniform(gen, 0, 100);
  r->method = pick < 35   ? Method::kGet
              : pick < 55 ? Method::kPut
              : pick < 80 ? Method::kCharge
                          : Method::kCreate;
  r->phase = phase_.load();
  r->start = absl::Now();
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::Uniform(gen, 200, 501));
  r->deadline = absl::FromChrono(deadline);
  {
    absl::MutexLock lock(&calls_mu_);
    r->id = static_cast<int64_t>(calls_.size());
    r->op_id = absl::StrCat("op-", r->id, "-",
                            kMethodNames[static_cast<int>(r->method)]);
    in_flight_[r->id] = r;
    calls_.push_back(std::move(record));
  }
  auto call = std::make_shared<InFlight>();
  call->record = r;
  call->ctx.set_deadline(deadline);
  call->ctx.AddMetadata("chaos-op", r->op_id);
  call->req.set_op_id(r->op_id);
  call->req.set_payload("chaos");
  if (r->method == Method::kCharge) call->req.set_amount(100);
  if (absl::Uniform(gen, 0, 100) < kCancelPercent) {
    // Half of the cancels within 2 ms of the start, where a healthy call
    // still runs (first batch, hijack, attempt 1); the others anywhere
    // before the deadline (backoffs and retries when the server is faulty).
    const int64_t range_us =
        absl::Bernoulli(gen, 0.5)
            ? 2000
            : absl::ToInt64Microseconds(r->deadline - r->start);
    const absl::Duration after =
        absl::Microseconds(absl::Uniform<int64_t>(gen, 0, range_us));
    absl::MutexLock lock(&cancel_mu_);
    cancels_.push({r->start + after, call});
  }
  return call;
}

void Chaos::Complete(const std::shared_ptr<InFlight>& call,
                     const grpc::Status& status) {
  const absl::Time end = absl::Now();
  call->done.store(true);
  CallRecord* r = call->record;
  {
    absl::MutexLock lock(&r->mu);
    r->done = true;
    r->end = end;
    r->code = status.error_code();
    r->message = status.error_message();
    r->applied = call->reply.applied();
    r->reply_key = call->reply.idempotency_key();
    auto range =
        call->ctx.GetServerTrailingMetadata().equal_range(kAttemptsTrailer);
    for (auto it = range.first; it != range.second; ++it) {
      if (!r->attempts_trailer.empty()) r->attempts_trailer += ",";
      r->attempts_trailer.append(it->second.data(), it->second.size());
    }
  }
  absl::MutexLock lock(&calls_mu_);
  in_flight_.erase(r->id);
}

void Chaos::SyncCaller() {
  absl::BitGen gen;
  while (!stopping_.load()) {
    {
      absl::MutexLock lock(&calls_mu_);
      if (static_cast<int64_t>(calls_.size()) >= kMaxCalls) break;
    }
    std::shared_ptr<InFlight> call = NewCall(Api::kSync, gen);
    grpc::Status s;
    MarkIssued(*call->record);
    switch (call->record->method) {
      case Method::kGet:
        s = stub_->Get(&call->ctx, call->req, &call->reply);
        break;
      case Method::kPut:
        s = stub_->Put(&call->ctx, call->req, &call->reply);
        break;
      case Method::kCharge:
        s = stub_->Charge(&call->ctx, call->req, &call->reply);
        break;
      case Method::kCreate:
        s = stub_->Create(&call->ctx, call->req, &call->reply);
        break;
    }
    Complete(call, s);
    absl::SleepFor(absl::Milliseconds(absl::Uniform(gen, 3, 9)));
  }
}

void Chaos::CallbackCaller(int index) {
  Lane* lane = lanes_[index].get();
  absl::BitGen gen;
  while (!stopping_.load()) {
    {
      absl::MutexLock lock(&calls_mu_);
      if (static_cast<int64_t>(calls_.size()) >= kMaxCalls) break;
    }
    {
      absl::MutexLock lock(&lane->mu);
      auto has_room = [lane]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane->mu) {
        return lane->in_flight < kCallbackDepth;
      };
      lane->mu.AwaitWithTimeout(absl::Condition(&has_room),
                                absl::Milliseconds(100));
      if (!has_room()) continue;
      ++lane->in_flight;
    }
    std::shared_ptr<InFlight> call = NewCall(Api::kCallback, gen);
    // The completion owns the call; it may run on a gRPC thread before
    // the start returns.
    auto done = [this, call, lane](grpc::Status s) {
      Complete(call, s);
      absl::MutexLock lock(&lane->mu);
      --lane->in_flight;
    };
    InFlight* c = call.get();
    MarkIssued(*c->record);
    switch (c->record->method) {
      case Method::kGet:
        stub_->async()->Get(&c->ctx, &c->req, &c->reply, done);
        break;
      case Method::kPut:
        stub_->async()->Put(&c->ctx, &c->req, &c->reply, done);
        break;
      case Method::kCharge:
        stub_->async()->Charge(&c->ctx, &c->req, &c->reply, done);
        break;
      case Method::kCreate:
        stub_->async()->Create(&c->ctx, &c->req, &c->reply, done);
        break;
    }
    absl::SleepFor(absl::Milliseconds(absl::Uniform(gen, 3, 9)));
  }
  // Every call ends by its deadline (<= 500 ms) plus kLateBound.
  absl::MutexLock lock(&lane->mu);
  auto drained = [lane]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane->mu) {
    return lane->in_flight == 0;
  };
  if (!lane->mu.AwaitWithTimeout(absl::Condition(&drained),
                                 absl::Milliseconds(500) + kHangBound)) {
    FatalHang(absl::StrCat("callback caller ", index, ": ", lane->in_flight,
                           " calls never completed"));
  }
}

void Chaos::Canceller() {
  while (true) {
    std::vector<std::shared_ptr<InFlight>> due;
    {
      absl::MutexLock lock(&cancel_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cancel_mu_) {
        return cancel_stop_ ||
               (!cancels_.empty() && cancels_.top().due <= absl::Now());
      };
      cancel_mu_.AwaitWithTimeout(absl::Condition(&ready),
                                  absl::Milliseconds(1));
      if (cancel_stop_) return;
      while (!cancels_.empty() && cancels_.top().due <= absl::Now()) {
        due.push_back(cancels_.top().call);
        cancels_.pop();
      }
    }
    for (auto& call : due) {
      if (call->done.load()) continue;  // finished first: no cancel
      call->ctx.TryCancel();
      const absl::Time cancelled_at = absl::Now();
      ++cancels_sent_;
      absl::MutexLock lock(&call->record->mu);
      call->record->cancelled_at = cancelled_at;
    }
  }
}

void Chaos::FatalHang(const std::string& what) {
  std::printf(
      "chaos: HANG: %s\nviolations: hang (the process cannot end "
      "cleanly with calls still running)\n",
      what.c_str());
  std::fflush(stdout);
  server_.Kill();
  std::_Exit(1);
}

void Chaos::Watchdog() {
  while (true) {
    {
      absl::MutexLock lock(&watch_mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) {
        return watch_stop_;
      };
      if (watch_mu_.AwaitWithTimeout(absl::Condition(&stop),
                                     absl::Milliseconds(100))) {
        return;
      }
    }
    const int64_t rss = VmRssMb();
    int64_t peak = rss_peak_mb_.load();
    while (rss > peak && !rss_peak_mb_.compare_exchange_weak(peak, rss)) {
    }
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&calls_mu_);
    for (const auto& [id, r] : in_flight_) {
      if (now - r->deadline > kHangBound) {
        FatalHang(absl::StrCat(
            "call ", r->op_id, " (", r->api == Api::kSync ? "sync" : "callback",
            ") still running ", absl::FormatDuration(now - r->deadline),
            " after its deadline"));
      }
    }
  }
}

int Chaos::BurstAtStart() {
  constexpr int kCalls = 200;
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                  std::chrono::seconds(10))) {
    return 0;
  }
  auto stub = FaultService::NewStub(channel_);
  struct Call {
    grpc::ClientContext ctx;
    FaultRequest req;
    FaultReply reply;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls;
  absl::Mutex mu;
  int pending = kCalls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<Call>());
    Call& c = *calls.back();
    c.req.set_op_id(absl::StrCat("burst-", i));
    c.req.set_fail_first(1);
    c.ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  }
  for (auto& call : calls) {
    Call* c = call.get();
    stub->async()->Get(&c->ctx, &c->req, &c->reply,
                       [c, &mu, &pending](grpc::Status s) {
                         c->status = std::move(s);
                         absl::MutexLock lock(&mu);
                         --pending;
                       });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](int* p) { return *p == 0; }, &pending));
  int ok = 0;
  for (const auto& c : calls) ok += c->status.ok() ? 1 : 0;
  return ok;
}

void Chaos::Run() {
  StartServer(0);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Log(absl::StrCat("fault_server_main pid ", server_.pid(), " on ",
                   server_.address()));

  // The load channel: [rpcguard, attempt log]. gRPC's reconnect backoff
  // grows to 120 s by default; capped at 1 s so that recovery measures
  // rpcguard, not how long gRPC waits before it dials again.
  absl::StatusOr<Config> config = Config::FromJson(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  Options options;
  options.config = *config;
  options.stats = stats_;
  // Retry decisions only, into the RetryLog (not stderr: thousands).
  options.trace_sink = retries_.Sink();
  options.trace_verbosity = TraceVerbosity::kRetries;
  options.breaker_registry = registry_;
  options.destination = server_.address();
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(MakeInterceptorFactory(options));
  factories.push_back(std::make_unique<AttemptLog::Factory>(&attempts_));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
      server_.address(), grpc::InsecureChannelCredentials(), args,
      std::move(factories));
  stub_ = FaultService::NewStub(channel_);
  // The control channel: plain gRPC (a control call is never retried), and
  // large enough for the stats of every op.
  grpc::ChannelArguments control_args = args;
  control_args.SetMaxReceiveMessageSize(256 << 20);
  control_ = FaultControl::NewStub(grpc::CreateCustomChannel(
      server_.address(), grpc::InsecureChannelCredentials(), control_args));

  burst_ok_ = BurstAtStart();
  burst_breaker_closed_ =
      registry_->Get(server_.address())->Snapshot().transitions == 0;
  Log(absl::StrCat("burst at start: ", burst_ok_,
                   " of 200 calls failing once "
                   "succeeded; breaker ",
                   burst_breaker_closed_ ? "stayed closed" : "moved"));

  control_stub_ = FaultService::NewStub(grpc::CreateCustomChannel(
      server_.address(), grpc::InsecureChannelCredentials(), args));
  std::thread heartbeat([this] { stalls_.Run(&heartbeat_stop_); });
  std::thread control_calls(
      [this] { control_calls_.Run(control_stub_.get(), &heartbeat_stop_); });
  std::thread canceller([this] { Canceller(); });
  std::thread watchdog([this] { Watchdog(); });
  std::vector<std::thread> callers;
  PhaseStart("warmup (healthy)", /*fault=*/false);
  for (int i = 0; i < kSyncCallers; ++i) {
    callers.emplace_back([this] { SyncCaller(); });
  }
  for (int i = 0; i < kCallbackCallers; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
  }
  for (int i = 0; i < kCallbackCallers; ++i) {
    callers.emplace_back([this, i] { CallbackCaller(i); });
  }

  // --- The timeline (about 45 s).
  Sleep(absl::Seconds(3));
  rss_after_warmup_mb_.store(VmRssMb());

  PhaseStart("lossy: 30% fail, 60% of those after applying", /*fault=*/true);
  absl::Time t = absl::Now();
  Control(30, 0, false, 60);
  Sleep(absl::Seconds(4));
  lossy_total_ += absl::Now() - t;
  KillServer("while lossy", absl::ZeroDuration());
  Healed("restart after kill -9");
  PhaseStart("healthy after restart", /*fault=*/false);
  Sleep(absl::Seconds(4));

  PhaseStart("down: killed, port refuses connections", /*fault=*/true);
  KillServer("down for a while", absl::Seconds(2));
  Healed("restart after 2 s down");
  PhaseStart("healthy after down", /*fault=*/false);
  Sleep(absl::Seconds(5));

  PhaseStart("quick restart: killed, back within 0.5 s", /*fault=*/true);
  KillServer("quick restart", absl::Milliseconds(500));
  quick_restart_back_ = absl::Now();
  Healed("restart after 0.5 s down");
  PhaseStart("healthy after quick restart", /*fault=*/false);
  Sleep(absl::Seconds(3));

  PhaseStart("hang: the server answers nothing", /*fault=*/true);
  t = absl::Now();
  Control(0, 0, true, 0);
  Sleep(absl::Seconds(2));
  Control(0, 0, false, 0);  // hung attempts now end UNAVAILABLE
  hang_total_ += absl::Now() - t;
  Healed("hang ended");
  PhaseStart("healthy after hang", /*fault=*/false);
  Sleep(absl::Seconds(4));

  PhaseStart("slow: every answer 250 ms late (deadlines 200-500 ms)",
             /*fault=*/true);
  t = absl::Now();
  Control(0, 250, false, 0);
  Sleep(absl::Seconds(4));
  Control(0, 0, false, 0);
  slow_total_ += absl::Now() - t;
  Healed("slow ended");
  PhaseStart("healthy after slow", /*fault=*/false);
  Sleep(absl::Seconds(4));

  PhaseStart("lossy again, killed midway, lossy on the new server",
             /*fault=*/true);
  t = absl::Now();
  Control(40, 0, false, 80);
  Sleep(absl::Seconds(3));
  KillServer("while lossy", absl::ZeroDuration());
  Control(40, 0, false, 80);
  Sleep(absl::Seconds(3));
  Control(0, 0, false, 0);
  lossy_total_ += absl::Now() - t;
  Healed("lossy ended");
  PhaseStart("healthy (final)", /*fault=*/false);
  Sleep(absl::Seconds(4));

  // --- Stop the load; every call must end on its own.
  stopping_.store(true);
  for (auto& c : callers) c.join();
  {
    absl::MutexLock lock(&cancel_mu_);
    cancel_stop_ = true;
  }
  canceller.join();
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = true;
  }
  watchdog.join();
  heartbeat_stop_.store(true);
  heartbeat.join();
  control_calls.join();
  if (!heals_.empty() && heals_.back().window_end == absl::InfiniteFuture()) {
    heals_.back().window_end = absl::Now();
  }
  SnapshotServer();
  server_.Stop();

  const int64_t violations = CheckAndReport();
  EXPECT_EQ(violations, 0) << "see the report above";
}

// ---------------------------------------------------------------------------
// Checks.

int64_t Chaos::CheckAndReport() {
  absl::MutexLock calls_lock(&calls_mu_);
  const absl::Duration elapsed = absl::Now() - t0_;

  struct Check {
    std::string name;
    std::string detail;
    int64_t violations = 0;
    std::vector<std::string> examples;
    void Fail(std::string what) {
      ++violations;
      if (examples.size() < 5) examples.push_back(std::move(what));
    }
  };
  Check late{absl::StrCat("deadline + ", absl::ToInt64Milliseconds(kLateBound),
                          " ms")};
  Check attempt_deadline{"attempt deadline <= call deadline"};
  Check cancel{"no attempt after cancel"};
  Check create{"Create never twice"};
  Check charge{"Charge exactly once"};
  Check complete{"every call completes"};
  Check trailer{"attempts trailer = attempts seen"};
  Check memory{"memory bound"};
  Check recovery{"recovery after heal"};
  Check down{"port refuses while down"};
  Check burst{"burst at start: >= 199 of 200"};
  Check restart{"quick restart: breaker closed in 1 s"};

  std::map<grpc::StatusCode, int64_t> outcomes;
  int64_t by_api[2] = {0, 0};
  int64_t by_method[4] = {0, 0, 0, 0};
  int64_t cancelled_calls = 0;
  int64_t raced_cancel = 0;
  int64_t cancel_excused_switched_out = 0;
  absl::Duration max_late = -absl::InfiniteDuration();
  absl::Duration max_late_unexcused = -absl::InfiniteDuration();
  absl::Duration max_excused_late = absl::ZeroDuration();
  int64_t late_excused = 0;
  // Past kLateBound, but no later than the control's calls then.
  int64_t late_as_control = 0;
  // Calls over kControlAllowance late: no conclusion traced, decided late
  // at an attempt's late end, decided late otherwise (a timer), decided on
  // time but delivered late.
  int64_t late_where[4] = {};
  absl::Duration max_late_as_control;
  int64_t late_excused_grpc = 0;
  int64_t late_excused_delivery = 0;
  int64_t charges_ok = 0;
  int64_t charges_spanning = 0;
  int64_t charges_ambiguous = 0;  // applied, but the client saw a failure
  int64_t creates_attempted = 0;
  struct PhaseCount {
    int64_t calls = 0;
    int64_t ok = 0;
  };
  std::vector<PhaseCount> per_phase(phases_.size());

  // Server-side views, summed over server lives.
  auto server_view = [this](const std::string& op) {
    std::vector<const ServerOp*> seen;
    for (const ServerLife& life : lives_) {
      auto it = life.ops.find(op);
      if (it != life.ops.end() && it->second.attempts > 0) {
        seen.push_back(&it->second);
      }
    }
    return seen;
  };

  for (const auto& owned : calls_) {
    CallRecord& r = *owned;
    absl::MutexLock lock(&r.mu);
    ++by_api[static_cast<int>(r.api)];
    ++by_method[static_cast<int>(r.method)];
    ++per_phase[r.phase].calls;
    if (!r.done) {
      complete.Fail(absl::StrCat(r.op_id, " never completed"));
      continue;
    }
    ++outcomes[r.code];
    if (r.code == grpc::StatusCode::OK) ++per_phase[r.phase].ok;

    const std::vector<AttemptRecord> attempts = attempts_.Of(r.op_id);

    // 1. Deadline. rpcguard's own part is exact: no attempt may run past
    // the call's deadline (1 ms for rounding through gpr_timespec).
    for (const AttemptRecord& a : attempts) {
      if (a.deadline > r.deadline + absl::Milliseconds(1)) {
        attempt_deadline.Fail(
            absl::StrCat(r.op_id, " attempt ", a.number, " had a deadline ",
                         absl::FormatDuration(a.deadline - r.deadline),
                         " after the call's"));
      }
    }
    // End to end: 20 ms after the deadline at most, unless what delayed the
    // call is outside rpcguard and measured: the test process was not
    // scheduled, gRPC core ended the last attempt that long after the
    // attempt's own deadline (its deadline timer fired late), or gRPC took
    // that long to hand rpcguard's conclusion to the application.
    const absl::Duration lateness = r.end - r.deadline;
    max_late = std::max(max_late, lateness);
    const absl::Duration control_late = control_calls_.LatestWithin(
        r.deadline - kControlWindow, r.deadline + kControlWindow);
    if (lateness > kControlAllowance && !attempts.empty() &&
        !attempts.front().key.empty()) {
      // Where the time of a late call went: rpcguard decided late (its
      // last attempt's end or its timer reached it late), or its decision
      // reached the application late.
      const absl::Time concluded = retries_.Concluded(attempts.front().key);
      if (concluded == absl::InfiniteFuture()) {
        ++late_where[0];
      } else if (concluded - r.deadline > kControlAllowance) {
        const bool attempt_late =
            attempts.back().ended &&
            attempts.back().end - r.deadline > kControlAllowance;
        ++late_where[attempt_late ? 1 : 2];
      } else {
        ++late_where[3];
      }
    }
    if (lateness > kLateBound && lateness <= control_late + kControlAllowance) {
      // gRPC's own calls were as late then: on time for this machine.
      ++late_as_control;
      max_late_as_control = std::max(max_late_as_control, lateness);
    } else if (lateness > kLateBound) {
      const absl::Duration stalled =
          stalls_.StalledWithin(r.deadline - absl::Milliseconds(100), r.end);
      absl::Duration grpc_late;
      if (!attempts.empty() && attempts.back().ended) {
        grpc_late = std::max(absl::ZeroDuration(),
                             attempts.back().end - attempts.back().deadline);
      }
      const absl::Time concluded =
          attempts.empty() || attempts.front().key.empty()
              ? absl::InfiniteFuture()
              : retries_.Concluded(attempts.front().key);
      const absl::Duration delivery =
          concluded == absl::InfiniteFuture()
              ? absl::ZeroDuration()
              : std::max(absl::ZeroDuration(), r.end - concluded);
      const absl::Duration excuse = std::max({stalled, grpc_late, delivery});
      if (lateness - kLateBound <= excuse) {
        ++late_excused;
        if (excuse == delivery && delivery > std::max(stalled, grpc_late)) {
          ++late_excused_delivery;
        } else if (grpc_late >= stalled) {
          ++late_excused_grpc;
        }
        max_excused_late = std::max(max_excused_late, lateness);
      } else {
        // Where the time went: each attempt relative to the deadline.
        std::string timeline;
        auto rel = [&r](absl::Time t) {
          return absl::StrFormat("%+.1fms",
                                 absl::ToDoubleMilliseconds(t - r.deadline));
        };
        for (const AttemptRecord& a : attempts) {
          absl::StrAppend(&timeline, " [attempt ", a.number, " ", rel(a.start),
                          "..", a.ended ? rel(a.end) : std::string("?"),
                          " deadline ", rel(a.deadline), " ",
                          StatusCodeName(a.code), "]");
        }
        late.Fail(absl::StrCat(
            r.op_id, " (", r.api == Api::kSync ? "sync" : "callback", ", ",
            phases_[r.phase].name, ") ended ", absl::FormatDuration(lateness),
            " after its deadline (process stalled ",
            absl::FormatDuration(stalled), " around it): ", r.code, " ",
            r.message, "; started ", rel(r.start), timeline,
            concluded == absl::InfiniteFuture()
                ? std::string("; rpcguard traced no conclusion")
                : absl::StrCat("; rpcguard concluded ", rel(concluded)),
            "; the control (a plain channel, deadlines within ",
            absl::FormatDuration(kControlWindow), ") ended at most +",
            absl::FormatDuration(
                absl::Trunc(control_late, absl::Microseconds(100))),
            " late"));
      }
    } else {
      max_late_unexcused = std::max(max_late_unexcused, lateness);
    }

    // 2. Cancel.
    if (r.cancelled_at != absl::InfiniteFuture()) {
      ++cancelled_calls;
      int raced = 0;
      // Get and Charge are hedged (kConfig).
      const bool hedged =
          r.method == Method::kGet || r.method == Method::kCharge;
      for (const AttemptRecord& a : attempts) {
        if (a.start <= r.cancelled_at) continue;
        // rpcguard can act on a cancel only once the call exists: a cancel
        // before the caller issued the call counts from the issue (its
        // attempt 1 runs then, on the caller's thread, already cancelled).
        const absl::Time known = std::max(r.cancelled_at, r.issued);
        const absl::Duration after = a.start - known;
        int number = 0;
        const bool numbered = absl::SimpleAtoi(a.number, &number);
        // A retry's backoff that had not ended at the cancel: only the
        // cancel can have woken rpcguard to start this attempt.
        const absl::Time backoff_end =
            numbered && number > 1 ? retries_.BackoffEnd(a.key, number - 1)
                                   : absl::InfinitePast();
        // A legitimate race started late only when the process stalled, or
        // when the caller's thread, which issued the call and started this
        // attempt on its way (a sync call's first attempt, a callback call's
        // own), was switched out in between: it ran nothing meanwhile.
        const bool late_race =
            after > kCancelRaceSlack &&
            after - kCancelRaceSlack > stalls_.StalledWithin(known, a.start);
        if (late_race && r.issued_on.SwitchedOutBefore(a.started_on)) {
          ++cancel_excused_switched_out;
          continue;
        }
        if (late_race) {
          cancel.Fail(absl::StrCat(
              r.op_id, " attempt ", a.number, " started ",
              absl::FormatDuration(after), " after the cancel, ",
              r.issued_on.Describe(a.started_on), "; ",
              absl::FormatDuration(stalls_.StalledWithin(known, a.start)),
              " of process stalls between"));
        } else if (!numbered || number < 1) {
          cancel.Fail(absl::StrCat(r.op_id, ": an attempt numbered '", a.number,
                                   "' after the cancel"));
        } else if (hedged) {
          // A copy of a hedged call has no backoff: it may only race the
          // cancel (above), once (below).
          if (++raced > 1) {
            cancel.Fail(
                absl::StrCat(r.op_id, ": ", raced, " copies raced one cancel"));
          }
        } else if (backoff_end == absl::InfiniteFuture()) {
          cancel.Fail(absl::StrCat(r.op_id, " attempt ", number,
                                   " after the cancel, and no retry "
                                   "decision traced before it"));
        } else if (r.cancelled_at + kBackoffEndSlack < backoff_end) {
          cancel.Fail(absl::StrCat(
              r.op_id, " attempt ", number, " started ",
              absl::FormatDuration(after), " after a cancel that came ",
              absl::FormatDuration(backoff_end - r.cancelled_at),
              " before its backoff ended"));
        } else if (++raced > 1) {
          cancel.Fail(
              absl::StrCat(r.op_id, ": ", raced, " attempts raced one cancel"));
        }
      }
      raced_cancel += raced;
    }

    // Attempts made, as rpcguard reports them, against those seen.
    if (!r.attempts_trailer.empty() &&
        r.attempts_trailer != absl::StrCat(attempts.size())) {
      trailer.Fail(absl::StrCat(r.op_id, ": trailer ", r.attempts_trailer,
                                ", attempts seen ", attempts.size()));
    }

    const std::vector<const ServerOp*> server = server_view(r.op_id);
    int server_attempts = 0;
    int side_effects = 0;
    for (const ServerOp* op : server) {
      server_attempts += op->attempts;
      side_effects += op->side_effects;
    }

    // 3. Create.
    if (r.method == Method::kCreate) {
      if (!attempts.empty()) ++creates_attempted;
      if (attempts.size() > 1 || server_attempts > 1) {
        create.Fail(absl::StrCat(r.op_id, ": ", attempts.size(),
                                 " attempts on the client, ", server_attempts,
                                 " on the server"));
      }
    }

    // 4. Charge.
    if (r.method == Method::kCharge) {
      std::string key;
      for (const AttemptRecord& a : attempts) {
        if (a.key.empty()) {
          charge.Fail(
              absl::StrCat(r.op_id, ": attempt ", a.number, " without a key"));
        } else if (key.empty()) {
          key = a.key;
        } else if (a.key != key) {
          charge.Fail(absl::StrCat(r.op_id, ": keys ", key, " and ", a.key));
        }
      }
      for (const ServerOp* op : server) {
        if (op->side_effects > 1) {
          charge.Fail(absl::StrCat(r.op_id, ": applied ", op->side_effects,
                                   " times in one server life"));
        }
        for (const std::string& k : op->keys) {
          if (k != key) {
            charge.Fail(absl::StrCat(r.op_id, ": the server saw key ", k,
                                     ", the client sent ", key));
          }
        }
      }
      if (server.size() > 1) {
        // Applied once per server life at most, with one key: the test
        // server's dedup table dies with it, a durable one would not.
        ++charges_spanning;
      } else if (side_effects > 1) {
        charge.Fail(
            absl::StrCat(r.op_id, ": applied ", side_effects, " times"));
      }
      if (r.code == grpc::StatusCode::OK) {
        ++charges_ok;
        if (r.applied != 1 || r.reply_key != key) {
          charge.Fail(absl::StrCat(r.op_id,
                                   ": succeeded, but the server "
                                   "says applied=",
                                   r.applied, " for key ", r.reply_key));
        }
      } else if (side_effects > 0) {
        ++charges_ambiguous;
      }
    }
  }

  if (late_excused > kMaxExcusedLateShare * calls_.size()) {
    late.Fail(absl::StrCat(late_excused,
                           " late calls excused: too many to trust the run"));
  }
  // Switched-out callers excuse a late race only now and then: more would
  // hide rpcguard starting attempts it knew were cancelled.
  if (cancel_excused_switched_out >
      std::max<double>(1, kMaxExcusedCancelShare * cancelled_calls)) {
    cancel.Fail(absl::StrCat(cancel_excused_switched_out,
                             " late attempt starts excused by a switched-out "
                             "caller: too many to trust the run"));
  }

  // The "down" fault must really be one.
  if (down_probes_ == 0 || down_probes_accepted_ > 0) {
    down.Fail(absl::StrCat(down_probes_accepted_, " of ", down_probes_,
                           " connects to the killed server's port were not "
                           "refused"));
  }

  // 5. Memory.
  const int64_t rss_peak = rss_peak_mb_.load();
  const int64_t rss_growth = rss_peak - rss_after_warmup_mb_.load();
  if (rss_peak > kRssBoundMb) {
    memory.Fail(absl::StrCat("VmRSS peaked at ", rss_peak, " MB"));
  }
  const int64_t growth_bound_mb =
      kRssGrowthBaseMb +
      static_cast<int64_t>(calls_.size()) * kRssGrowthPerCallBytes / (1 << 20);
  if (rss_growth > growth_bound_mb) {
    memory.Fail(absl::StrCat("VmRSS grew ", rss_growth,
                             " MB after warmup, bound ", growth_bound_mb));
  }

  // 6. Recovery: the first call started after the heal that succeeded.
  for (Heal& h : heals_) {
    absl::Time first_ok = absl::InfiniteFuture();
    for (const auto& owned : calls_) {
      CallRecord& r = *owned;
      absl::MutexLock lock(&r.mu);
      if (r.start >= h.at && r.done && r.code == grpc::StatusCode::OK) {
        first_ok = std::min(first_ok, r.end);
      }
    }
    h.recovery = first_ok - h.at;
    const absl::Duration bound = std::min(kRecoveryBound, h.window_end - h.at);
    if (h.recovery > bound) {
      recovery.Fail(absl::StrCat(h.what, ": no call succeeded within ",
                                 absl::FormatDuration(bound)));
    }
  }

  // 7. Issue 13: a blip is not an outage. A burst of calls failing once
  // all succeed with the breaker closed; after a quick restart the breaker
  // is closed within 1 s of the server's return (it may open while the
  // port refuses connections only if calls kept failing after retries).
  if (burst_ok_ < 199 || !burst_breaker_closed_) {
    burst.Fail(absl::StrCat(burst_ok_, " succeeded, breaker ",
                            burst_breaker_closed_ ? "closed" : "moved"));
  }
  std::string last_state = "closed";
  std::string last_why;
  for (const RetryLog::Transition& t : retries_.transitions()) {
    if (t.time > quick_restart_back_ + absl::Seconds(1)) break;
    last_state = t.to;
    last_why = t.why;
  }
  if (quick_restart_back_ != absl::InfiniteFuture() && last_state != "closed") {
    restart.Fail(absl::StrCat("breaker ", last_state, " 1 s after the return (",
                              last_why, ")"));
  }

  // --- The report.
  const int64_t calls = static_cast<int64_t>(calls_.size());
  int64_t server_attempts_total = 0;
  for (const ServerLife& life : lives_) {
    server_attempts_total += life.total_attempts;
  }
  int64_t rpcguard_calls = 0;
  int64_t rpcguard_attempts = 0;
  int64_t rpcguard_retries = 0;
  for (const auto& m : stats_->Snapshot().methods) {
    rpcguard_calls += m.calls;
    rpcguard_attempts += m.attempts;
    rpcguard_retries += m.retries;
  }

  std::string out;
  absl::StrAppendFormat(&out,
                        "\nchaos report: %.1f s, %d server lives, "
                        "traffic on 127.0.0.1 only\n",
                        absl::ToDoubleSeconds(elapsed), lives_.size());
  absl::StrAppendFormat(
      &out,
      "  calls            %d (sync %d, callback %d; Get %d, Put %d, Charge %d, "
      "Create %d)\n",
      calls, by_api[0], by_api[1], by_method[0], by_method[1], by_method[2],
      by_method[3]);
  out += "  outcomes        ";
  for (const auto& [code, n] : outcomes) {
    absl::StrAppendFormat(&out, " %s %d", StatusCodeName(code), n);
  }
  out += "\n";
  absl::StrAppendFormat(
      &out,
      "  faults injected  %d kills (SIGKILL), %.1f s down (%d/%d connects "
      "refused), %.1f s hung, %.1f s slow, %.1f s lossy; %d attempts failed "
      "by the server on purpose, %d by the transport (refused/reset)\n",
      kills_, absl::ToDoubleSeconds(down_total_),
      down_probes_ - down_probes_accepted_, down_probes_,
      absl::ToDoubleSeconds(hang_total_), absl::ToDoubleSeconds(slow_total_),
      absl::ToDoubleSeconds(lossy_total_), attempts_.injected(),
      attempts_.transport_failures());
  absl::StrAppendFormat(
      &out,
      "  attempts         %d seen on the client (rpcguard: %d calls, %d "
      "attempts, %d retries); %d on the server (stats before each kill)\n",
      attempts_.total(), rpcguard_calls, rpcguard_attempts, rpcguard_retries,
      server_attempts_total);
  absl::StrAppendFormat(
      &out,
      "  cancels          %d sent, %d calls cancelled while running, %d "
      "attempts raced a cancel (started within %s of it), %d later on a "
      "caller's thread the kernel switched out between issuing the call and "
      "starting the attempt\n",
      cancels_sent_.load(), cancelled_calls, raced_cancel,
      absl::FormatDuration(kCancelRaceSlack), cancel_excused_switched_out);
  absl::StrAppendFormat(
      &out,
      "  charges          %d succeeded, each applied once; %d applied but "
      "reported failed (ambiguous, same key); %d spanned a restart\n",
      charges_ok, charges_ambiguous, charges_spanning);
  out += "  recovery        ";
  for (const Heal& h : heals_) {
    absl::StrAppendFormat(&out, " [%s: %s]", h.what,
                          h.recovery == absl::InfiniteDuration()
                              ? std::string("never")
                              : absl::FormatDuration(absl::Trunc(
                                    h.recovery, absl::Milliseconds(1))));
  }
  absl::StrAppendFormat(&out, " (bound %s)\n",
                        absl::FormatDuration(kRecoveryBound));
  absl::StrAppendFormat(
      &out,
      "  memory           VmRSS peak %d MB (bound %d), growth after warmup %d "
      "MB (bound %d)\n",
      rss_peak, kRssBoundMb, rss_growth, growth_bound_mb);
  absl::StrAppendFormat(
      &out,
      "  machine          %d stalls of the test process >= %s (longest %s; "
      "load from other processes on the shared cores)\n",
      stalls_.count(), absl::FormatDuration(kStallGap),
      absl::FormatDuration(
          absl::Trunc(stalls_.longest(), absl::Milliseconds(1))));
  out += "  phases:\n";
  for (size_t i = 0; i < phases_.size(); ++i) {
    absl::StrAppendFormat(&out, "    %-55s %6d calls, %5.1f%% OK\n",
                          phases_[i].name, per_phase[i].calls,
                          per_phase[i].calls == 0
                              ? 0.0
                              : 100.0 * per_phase[i].ok / per_phase[i].calls);
  }
  out += "  invariants:\n";
  late.detail = absl::StrCat(
      calls, " calls, latest +",
      absl::FormatDuration(
          absl::Trunc(max_late_unexcused, absl::Microseconds(100))),
      late_excused > 0
          ? absl::StrCat(
                "; ", late_excused, " later, excused (", late_excused_grpc,
                " gRPC timer, ", late_excused_delivery, " gRPC delivery, ",
                late_excused - late_excused_grpc - late_excused_delivery,
                " process stall; max +",
                absl::FormatDuration(
                    absl::Trunc(max_excused_late, absl::Milliseconds(1))),
                ")")
          : std::string(),
      late_as_control > 0
          ? absl::StrCat("; ", late_as_control,
                         " later but as late as the control's calls then "
                         "(max +",
                         absl::FormatDuration(absl::Trunc(
                             max_late_as_control, absl::Milliseconds(1))),
                         ")")
          : "",
      "; ", control_calls_.Describe(), "; over ",
      absl::FormatDuration(kControlAllowance), " late: ", late_where[1],
      " decided at a late attempt end, ", late_where[2],
      " decided late otherwise, ", late_where[3], " delivered late, ",
      late_where[0], " untraced");
  cancel.detail = absl::StrCat(cancelled_calls, " cancelled calls");
  create.detail =
      absl::StrCat(by_method[3], " ops, ", creates_attempted, " attempted");
  charge.detail =
      absl::StrCat(by_method[2], " ops, ", charges_ok, " succeeded");
  complete.detail = absl::StrCat(calls, " calls");
  trailer.detail = "rpcguard-attempts vs the attempt log";
  memory.detail = absl::StrCat("peak ", rss_peak, " MB");
  recovery.detail = absl::StrCat(heals_.size(), " heals");
  down.detail = absl::StrCat(down_probes_, " TCP connects while down");
  burst.detail = absl::StrCat(burst_ok_, " succeeded");
  restart.detail =
      absl::StrCat(retries_.transitions().size(), " breaker transitions");
  int64_t violations = 0;
  attempt_deadline.detail =
      absl::StrCat(attempts_.total(), " attempts (rpcguard's own part)");
  for (Check* c :
       {&attempt_deadline, &late, &cancel, &create, &charge, &complete,
        &trailer, &memory, &recovery, &down, &burst, &restart}) {
    absl::StrAppendFormat(&out, "    %-34s %-52s violations: %d\n", c->name,
                          c->detail, c->violations);
    for (const std::string& e : c->examples) {
      absl::StrAppendFormat(&out, "      e.g. %s\n", e);
    }
    violations += c->violations;
  }
  absl::StrAppendFormat(&out, "  violations: %d\n", violations);
  std::printf("%s", out.c_str());
  std::fflush(stdout);
  return violations;
}

TEST(ChaosTest, InvariantsHoldUnderServerFaults) {
  // Read the clocks' offset now, on a quiet process, not under load.
  RealtimeMinusMonotonic();
  Chaos chaos;
  chaos.Run();
}

}  // namespace
}  // namespace rpcguard
