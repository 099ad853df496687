// Copyright rpcguard authors.

#include "tests/testing/punctuality.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace testing {
namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;
using ::rpcguard::testing::v1::StreamReply;
using ::rpcguard::testing::v1::StreamRequest;
using ::rpcguard::testing::v1::Streams;

constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService"},
            {"service": "rpcguard.testing.v1.Streams",
             "method": "ServerStream"}],
   "rpcguard": {"idempotency": "IDEMPOTENT"},
   "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s",
                   "maxBackoff": "0.03s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

constexpr absl::Duration kDeadline = absl::Milliseconds(60);

// A server-streaming call, on its own thread through the `kind` API; its
// end is the status's arrival.
class StreamCall final : public PendingCall {
 public:
  StreamCall(StubKind kind, Streams::Stub* stub, grpc::ClientContext* ctx) {
    thread_ = std::thread([this, kind, stub, ctx] {
      StreamRequest req;
      req.set_n(1);
      StreamReply reply;
      switch (kind) {
        case StubKind::kSync: {
          auto reader = stub->ServerStream(ctx, req);
          while (reader->Read(&reply)) {
          }
          status_ = reader->Finish();
          break;
        }
        case StubKind::kAsync: {
          grpc::CompletionQueue cq;
          void* tag = &cq;
          bool ok = false;
          auto reader = stub->AsyncServerStream(ctx, req, &cq, tag);
          cq.Next(&tag, &ok);
          while (ok) {
            reader->Read(&reply, tag);
            cq.Next(&tag, &ok);
          }
          reader->Finish(&status_, tag);
          cq.Next(&tag, &ok);
          cq.Shutdown();
          while (cq.Next(&tag, &ok)) {
          }
          break;
        }
        default: {
          Reactor r;
          stub->async()->ServerStream(ctx, &req, &r);
          r.Begin();
          r.done.WaitForNotification();
          status_ = r.status;
          break;
        }
      }
    });
  }
  grpc::Status Wait() override {
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  struct Reactor : grpc::ClientReadReactor<StreamReply> {
    void Begin() {
      StartRead(&reply);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&reply);
    }
    void OnDone(const grpc::Status& s) override {
      status = s;
      done.Notify();
    }
    StreamReply reply;
    grpc::Status status;
    absl::Notification done;
  };
  std::thread thread_;
  grpc::Status status_;
};

// One round: `in_flight` calls at once on `stub`, each with kDeadline,
// ended by the deadline; their lateness appended to `out`.
// With `streams`, the calls are server streams on it instead.
void Round(StubKind kind, FaultService::Stub* stub, const FaultRequest& req,
           bool wait_for_ready, int in_flight, Lateness* out,
           absl::Duration deadline_in = kDeadline,
           absl::Duration stagger = absl::ZeroDuration(),
           Streams::Stub* streams = nullptr) {
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<FaultReply> replies(in_flight);
  std::vector<std::unique_ptr<PendingCall>> calls;
  std::vector<absl::Time> deadlines;
  for (int i = 0; i < in_flight; ++i) {
    if (i > 0) absl::SleepFor(stagger);
    auto ctx = std::make_unique<grpc::ClientContext>();
    const absl::Time deadline = absl::Now() + deadline_in;
    ctx->set_deadline(absl::ToChronoTime(deadline));
    if (wait_for_ready) ctx->set_wait_for_ready(true);
    FaultRequest r = req;
    r.set_op_id(absl::StrCat("op-", reinterpret_cast<uintptr_t>(ctx.get()), "-",
                             absl::ToUnixNanos(deadline)));
    if (streams != nullptr) {
      calls.push_back(std::make_unique<StreamCall>(kind, streams, ctx.get()));
    } else {
      calls.push_back(
          StartCall(kind, stub, Method::kGet, ctx.get(), r, &replies[i]));
    }
    deadlines.push_back(deadline);
    contexts.push_back(std::move(ctx));
  }
  for (int i = 0; i < in_flight; ++i) {
    const grpc::Status s = calls[i]->Wait();
    const absl::Time end = absl::Now();
    if (s.ok()) ++out->ok;
    out->ms.push_back(absl::ToDoubleMilliseconds(end - deadlines[i]));
  }
}

}  // namespace

std::string PunctualityScenarioName(PunctualityScenario s) {
  switch (s) {
    case PunctualityScenario::kHold:
      return "Hold";
    case PunctualityScenario::kRetrying:
      return "Retrying";
    case PunctualityScenario::kNoServer:
      return "NoServer";
    case PunctualityScenario::kClusterDown:
      return "ClusterDown";
    case PunctualityScenario::kStreamNoServer:
      return "StreamNoServer";
  }
  return "";
}

BusyLoops::BusyLoops(int per_core) {
  const unsigned n =
      per_core * std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      // A new program: nothing of this process's threads is touched.
      execl("/bin/sh", "sh", "-c", "while :; do :; done",
            static_cast<char*>(nullptr));
      _exit(1);
    }
    if (pid > 0) pids_.push_back(pid);
  }
}

BusyLoops::~BusyLoops() {
  for (pid_t pid : pids_) kill(pid, SIGKILL);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
}

double Lateness::Quantile(double q) const {
  if (ms.empty()) return 0;
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  const size_t i = std::min(s.size() - 1, static_cast<size_t>(q * s.size()));
  return s[i];
}

std::string Lateness::Describe() const {
  return absl::StrCat("p50 ", Quantile(0.5), " ms, p99 ", Quantile(0.99),
                      " ms, max ", Quantile(1.0), " ms over ", ms.size(),
                      " calls");
}

PunctualityCase::PunctualityCase(PunctualityScenario scenario, StubKind kind)
    : scenario_(scenario), kind_(kind), target_(server_.address()) {
  switch (scenario_) {
    case PunctualityScenario::kHold:
      rpcguard_request_.set_delay_ms(1000);
      control_request_.set_delay_ms(1000);
      break;
    case PunctualityScenario::kRetrying:
      rpcguard_request_.set_fail_first(1000);
      rpcguard_request_.set_fail_delay_ms(15);
      control_request_.set_delay_ms(1000);
      break;
    case PunctualityScenario::kNoServer:
    case PunctualityScenario::kStreamNoServer: {
      // A port nothing listens on.
      auto gone = std::make_unique<FaultServer>();
      target_ = gone->address();
      gone.reset();
      control_waits_ = true;
      break;
    }
    case PunctualityScenario::kClusterDown: {
      target_ = "ipv4:";
      for (int i = 0; i < 3; ++i) {
        auto gone = std::make_unique<FaultServer>();
        absl::StrAppend(&target_, i > 0 ? "," : "", gone->address());
      }
      control_waits_ = true;
      break;
    }
  }
  auto guarded = CreateGuardedChannel(target_, kConfig, [](Options& o) {
    o.trace_verbosity = TraceVerbosity::kOff;
    o.breaker_registry = *BreakerRegistry::Create(BreakerRegistry::Options());
  });
  if (!guarded.ok()) {
    status_ = guarded.status();
    return;
  }
  auto control_channel =
      grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  rpcguard_stub_ = FaultService::NewStub(*guarded);
  control_stub_ = FaultService::NewStub(control_channel);
  rpcguard_streams_ = Streams::NewStub(*guarded);
  control_streams_ = Streams::NewStub(control_channel);
}

void PunctualityCase::Measure(int rounds, int busy_per_core, Lateness* rpcguard,
                              Lateness* control) {
  const StubKind kind = kind_;
  BusyLoops load(busy_per_core);
  if (scenario_ == PunctualityScenario::kClusterDown) {
    // Long waits for a connection, calls started apart: rpcguard's and
    // the control's side by side.
    std::thread control_thread([&] {
      for (int round = 0; round < 3; ++round) {
        Round(kind, control_stub_.get(), control_request_, true, 8, control,
              absl::Milliseconds(1500), absl::Milliseconds(90));
      }
    });
    for (int round = 0; round < 3; ++round) {
      Round(kind, rpcguard_stub_.get(), rpcguard_request_, false, 8, rpcguard,
            absl::Milliseconds(1500), absl::Milliseconds(90));
    }
    control_thread.join();
    return;
  }
  // Busy rounds back to back, and every fourth after a second and more of
  // quiet, when gRPC's callback threads have gone to sleep.
  const bool streams = scenario_ == PunctualityScenario::kStreamNoServer;
  for (int round = 0; round < rounds; ++round) {
    if (round % 4 == 3) absl::SleepFor(absl::Milliseconds(1100));
    Round(kind, control_stub_.get(), control_request_, control_waits_, 4,
          control, kDeadline, absl::ZeroDuration(),
          streams ? control_streams_.get() : nullptr);
    if (round % 4 == 3) absl::SleepFor(absl::Milliseconds(1100));
    Round(kind, rpcguard_stub_.get(), rpcguard_request_, false, 4, rpcguard,
          kDeadline, absl::ZeroDuration(),
          streams ? rpcguard_streams_.get() : nullptr);
  }
}

}  // namespace testing
}  // namespace rpcguard
