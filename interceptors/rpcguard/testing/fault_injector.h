// Copyright rpcguard authors.
//
// FaultInjector: puts faults between your client and your own test server,
// to check that your retry declarations are complete and that your service
// behaves when its calls are repeated.
//
//   PaymentsImpl service;                       // your service, any API
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//
//   rpcguard::testing::FaultInjector faults;
//   ASSERT_TRUE(faults.Start(server->InProcessChannel({})).ok());
//   ASSERT_TRUE(faults.SetRule(rpcguard::testing::FaultRule::ApplyThenFail(
//       "/examples.payments.v1.Payments/Charge", 1)).ok());
//   // Your client, through rpcguard, to faults.address() ...
//   // then faults.recorder() says what arrived.
//
// How: the injector is a small gRPC server of its own (on 127.0.0.1) in
// front of yours. Every call to it is forwarded to the backend channel you
// give it, messages and metadata both ways, deadline and cancellation
// included, unless a rule says otherwise for the call's attempt. It works
// with any service and any server API (sync, CQ-async, callback), for every
// method kind; faults are for what rpcguard retries, unary calls, though a
// streaming call is failed or delayed the same way.
//
// Why a server in front, not a server interceptor: a gRPC 1.51 server
// interceptor observes a call and may change its status on the way out
// (PRE_SEND_STATUS), but it cannot stop the method's handler from running:
// the handler runs once the interceptors proceed, whatever they saw. A
// failure *before* your handler, the plain "fail the first N attempts", is
// then impossible, and so the difference KEYED makes (apply, lose the reply,
// retry with the same key) could not be shown. In front of your server the
// injector decides whether your handler runs at all. The cost: your service
// sees a call from the injector, not from the client (peer address,
// authentication context), with the client's metadata copied over.

#ifndef RPCGUARD_TESTING_FAULT_INJECTOR_H_
#define RPCGUARD_TESTING_FAULT_INJECTOR_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/testing/recorder.h"

namespace rpcguard {
namespace testing {

// What happens to the first attempts of every call of one method.
//
// A rule hits attempts 1 to `attempts` of each call; later attempts pass.
// A hit attempt waits `delay`, then fails (`failure`) or passes on.
struct FaultRule {
  // Where a hit attempt fails, if it does.
  enum class Failure {
    kNone,           // it does not fail (a delay only)
    kBeforeService,  // your service never sees it
    // Your service handles it; its reply is then replaced by the failure:
    // the lost reply, which only an idempotency key makes safe to retry.
    kAfterService,
  };
  // How an attempt's number in its call is known.
  enum class CountBy {
    // The n-th attempt to arrive with this `idempotency-key` is attempt n,
    // whichever call sent it: a caller's own retry with its key counts too.
    // An attempt without a key is counted by its `rpcguard-attempt`.
    kIdempotencyKey,
    // The `rpcguard-attempt` metadata (1, 2, ...): per call, even when two
    // calls share a key. An attempt without it is attempt 1.
    kAttemptHeader,
  };

  // Hits every attempt.
  static constexpr int kEveryAttempt = INT_MAX;

  // The method as gRPC names it: "/package.Service/Method". Required.
  std::string method;
  // Attempts 1 to `attempts` of each call are hit. At least 1.
  int attempts = 1;
  CountBy count_by = CountBy::kIdempotencyKey;

  Failure failure = Failure::kBeforeService;
  // The failure's status code (not OK) and message.
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  std::string message = "rpcguard::testing: injected failure";
  // With the failure: a `grpc-retry-pushback-ms` trailer of this value (gRFC
  // A6: milliseconds before the next attempt; a negative value tells the
  // client not to retry).
  std::optional<int64_t> pushback_ms;
  // With the failure: a google.rpc.RetryInfo of this retry_delay in
  // `grpc-status-details-bin`. Not negative.
  std::optional<absl::Duration> retry_info;

  // How long a hit attempt waits before it fails or passes on (real time).
  // A call cancelled meanwhile (by its client or deadline) never reaches
  // your service. Not negative.
  absl::Duration delay = absl::ZeroDuration();

  // The first `attempts` attempts of each call fail with `code` before your
  // service sees them.
  static FaultRule Fail(std::string method, int attempts,
                        grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE);
  // The first `attempts` attempts of each call reach your service, whose
  // reply is then replaced by a failure with `code`.
  static FaultRule ApplyThenFail(
      std::string method, int attempts,
      grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE);
  // The first `attempts` attempts of each call wait `delay`, then go on.
  static FaultRule Delay(std::string method, int attempts,
                         absl::Duration delay);
};

// Returns OK if `rule` is well-formed, else InvalidArgument naming the
// field, e.g. "FaultRule /pkg.Svc/M: attempts: must be at least 1, got 0".
absl::Status ValidateFaultRule(const FaultRule& rule);

// The server in front of yours; see the top of this file. Thread-safe: rules
// may change while calls run, and each attempt obeys the rule in force when
// it arrives.
class FaultInjector {
 public:
  struct Options {
    // Stamps the recorder's arrivals; null means Clock::Real(). Delays run
    // on real time whatever this is. Must outlive the injector.
    Clock* clock = nullptr;
  };

  FaultInjector();
  explicit FaultInjector(Options options);
  // Shuts down (see Shutdown).
  ~FaultInjector();

  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Starts listening on 127.0.0.1:`port` (0: a free port) and forwarding to
  // `backend`, e.g. your server's InProcessChannel({}). Errors:
  // InvalidArgument for a null backend or a port outside 0 to 65535;
  // FailedPrecondition when already started; Unavailable when the port
  // cannot be listened on.
  absl::Status Start(std::shared_ptr<grpc::Channel> backend, int port = 0);

  // "127.0.0.1:<port>" once started, for your client's channel; else empty.
  std::string address() const;
  // The port once started, else 0.
  int port() const;

  // Stops accepting calls; calls in flight are cancelled after `grace`.
  // Returns when every call has ended. Safe to call twice.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

  // Sets the rule for `rule.method`, replacing the method's previous rule.
  // InvalidArgument (ValidateFaultRule) leaves the rules as they were.
  absl::Status SetRule(FaultRule rule);
  // Removes the method's rule; false if it had none.
  bool RemoveRule(absl::string_view method);
  // Removes every rule: calls pass untouched.
  void ClearRules();
  // The rules in force, by method.
  std::vector<FaultRule> rules() const;

  // Every attempt that arrived, with what was done to it.
  Recorder& recorder();
  const Recorder& recorder() const;

  class Core;  // shared with calls in flight; in the .cc

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTING_FAULT_INJECTOR_H_
