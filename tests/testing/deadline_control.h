// Copyright rpcguard authors.
//
// Timing judged against a control (issue 47): "a deadline is kept as gRPC
// keeps it, on a loaded machine too; judge timing against a plain channel
// in the same run, never against a bound that only a quiet machine meets".
//
// A test measures rpcguard's call (how late after its deadline it ended, how
// long after a cancel, how long it took) and, beside it, a control: a plain
// channel's call (no rpcguard) to the same server, started at the same
// moment with the same deadline and held by the server past it, or
// cancelled at the same moment. One measurement holds when rpcguard's time
// is at most max(the quiet machine's bound, the control's + 5 ms): the
// quiet bound stays a floor, and a loaded machine, late for gRPC too, moves
// the bound by what it costs gRPC. ExpectWithinControl takes up to three
// measurements and passes when one holds: the times of a few calls on a
// loaded machine are noisy, while lateness of rpcguard's own making shows in
// every one. tests/e2e/hedging_deadline_e2e_test.cc and
// punctuality_e2e_test.cc judge the same way with controls of their own.
//
// Thread-safety: ExpectWithinControl and PlainStub are plain functions,
// safe from any thread. A ControlCall's or ControlAttempts' methods are not:
// call them from one thread at a time (a thread that hands one on, as a
// server handler does, notifies the next).

#ifndef RPCGUARD_TESTS_TESTING_DEADLINE_CONTROL_H_
#define RPCGUARD_TESTS_TESTING_DEADLINE_CONTROL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace testing {

// What a measurement allows rpcguard beyond the control's own time.
inline constexpr absl::Duration kControlAllowance = absl::Milliseconds(5);

// One measurement: rpcguard's time and, in the same moment, the control's.
struct Timing {
  absl::Duration rpcguard;
  absl::Duration control;
};

// Runs `measure` up to three times, until rpcguard's time is at most
// max(`quiet_bound`, the control's + kControlAllowance). When none of the
// three holds, adds a test failure that names `what` and shows every
// measurement. Returns whether one held. `measure` may make assertions of
// its own; each run must be independent of the last (fresh op ids).
bool ExpectWithinControl(absl::string_view what, absl::Duration quiet_bound,
                         absl::FunctionRef<Timing()> measure);

// A stub on a new plain channel (insecure, no rpcguard) to `target`: the
// control's.
std::unique_ptr<FaultService::Stub> PlainStub(const std::string& target);

// The control: a plain channel's FaultService.Get through the `kind` stub
// API, started at construction and waited for on a thread of its own, so
// that its end is stamped when it comes, whatever the test's thread does.
class ControlCall {
 public:
  // Starts `req` (its op_id replaced by a unique "control-<n>") on `plain`,
  // which must outlive the call, with `deadline` (absl::InfiniteFuture():
  // none) and, when `wait_for_ready`, waiting for a connection as rpcguard's
  // attempts do.
  ControlCall(StubKind kind, FaultService::Stub* plain, FaultRequest req,
              absl::Time deadline = absl::InfiniteFuture(),
              bool wait_for_ready = false);
  // Starts `req` (op_id as above) with `ctx` as the test made it: a child
  // of a server call (ClientContext::FromCallbackServerContext), say, whose
  // end gRPC propagates. `deadline` is the one LateBy() measures from.
  ControlCall(StubKind kind, FaultService::Stub* plain, FaultRequest req,
              std::unique_ptr<grpc::ClientContext> ctx, absl::Time deadline);
  // Waits for the call's end.
  ~ControlCall();

  ControlCall(const ControlCall&) = delete;
  ControlCall& operator=(const ControlCall&) = delete;

  // A request the server holds for `hold` before answering OK.
  static FaultRequest Held(absl::Duration hold);
  // A request the server holds until 1 s past `deadline`: a call with that
  // deadline ends by it.
  static FaultRequest HeldPast(absl::Time deadline);

  // The op_id the server records the call under.
  const std::string& op_id() const { return req_.op_id(); }

  // Cancels the call (ClientContext::TryCancel) and stamps when.
  void Cancel();

  // Waits for the call's end and returns its status.
  grpc::Status Wait();

  // After Wait(): when the call ended; how long it took from its start; how
  // late after its deadline it ended; how long after Cancel() it ended.
  absl::Time end() const { return end_; }
  absl::Duration Took() const { return end_ - start_; }
  absl::Duration LateBy() const { return end_ - deadline_; }
  absl::Duration SinceCancel() const { return end_ - cancelled_at_; }

 private:
  void Start(StubKind kind, FaultService::Stub* plain);

  std::unique_ptr<grpc::ClientContext> ctx_;
  FaultRequest req_;
  FaultReply reply_;
  const absl::Time deadline_;
  absl::Time start_;
  absl::Time cancelled_at_ = absl::InfiniteFuture();
  std::unique_ptr<PendingCall> call_;
  // Written by waiter_ before it ends; read after joining it.
  grpc::Status status_;
  absl::Time end_;
  std::thread waiter_;
};

// One call of a ControlAttempts: a request and the call's timeout
// (absl::InfiniteDuration(): none).
struct ControlAttempt {
  FaultRequest request;
  absl::Duration timeout = absl::InfiniteDuration();
};

// The control of a call whose attempts follow one another (a retry, a next
// hedge sent at once): a plain channel's Get of each of `attempts` in turn,
// through the `kind` stub API, on a thread of its own started at
// construction.
class ControlAttempts {
 public:
  ControlAttempts(StubKind kind, FaultService::Stub* plain,
                  std::vector<ControlAttempt> attempts);
  // Waits for the last call's end.
  ~ControlAttempts();

  ControlAttempts(const ControlAttempts&) = delete;
  ControlAttempts& operator=(const ControlAttempts&) = delete;

  // Waits for the last call's end; every call's status, in turn.
  std::vector<grpc::Status> Wait();
  // After Wait(): from the construction to the last call's end.
  absl::Duration Took() const { return took_; }

 private:
  // Written by thread_ before it ends; read after joining it.
  std::vector<grpc::Status> statuses_;
  absl::Duration took_;
  std::thread thread_;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_DEADLINE_CONTROL_H_
