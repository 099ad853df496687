// Copyright rpcguard authors.
//
// Recorder: what arrived at a test server, per call and per attempt, so a
// test asserts what the server really saw rather than what the client
// believes it sent:
//
//   std::vector<RecordedCall> calls = faults.recorder().Calls(
//       "/examples.payments.v1.Payments/Charge");
//   ASSERT_EQ(calls.size(), 1);               // one call...
//   EXPECT_EQ(calls[0].attempts.size(), 2);   // ...attempted twice...
//   EXPECT_EQ(calls[0].reached_service(), 2); // ...your service ran twice,
//   // and your service's own state says whether it applied the charge once.
//
// A FaultInjector (fault_injector.h) fills its recorder with every attempt
// that passes through it. A call is identified by its `idempotency-key`
// metadata, which rpcguard sends on every attempt (the same on each): all
// the attempts of one method with one key are one RecordedCall. An attempt
// without a key is a call of its own.

#ifndef RPCGUARD_TESTING_RECORDER_H_
#define RPCGUARD_TESTING_RECORDER_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"

namespace rpcguard {
namespace testing {

// What a FaultInjector did to an attempt.
enum class InjectedFault {
  kNone,               // passed on untouched
  kDelayed,            // passed on after a delay
  kFailed,             // failed before your service saw it
  kAppliedThenFailed,  // your service handled it; its reply was replaced
};

// Returns "none", "delayed", "failed" or "applied_then_failed".
absl::string_view InjectedFaultName(InjectedFault fault);

// One attempt as the server saw it.
struct RecordedAttempt {
  // "/package.Service/Method".
  std::string method;
  // The `idempotency-key` metadata; empty when the attempt had none.
  std::string idempotency_key;
  // The `rpcguard-attempt` metadata (1, 2, ...); 0 when absent or not a
  // positive number.
  int attempt_header = 0;
  // The attempt's number in its call as the server counts it: the n-th
  // attempt to arrive with this key (with no key: attempt_header, else 1).
  int number = 1;
  // When it arrived, on the recorder clock's monotonic time: subtract two
  // arrivals to measure the gap between attempts (a wall-clock step does
  // not change it); not a time to print.
  absl::Time arrival;
  // What was done to it.
  InjectedFault fault = InjectedFault::kNone;
  // Whether it was passed on to your service (whatever the service then
  // answered). False for an attempt failed before the service, or cancelled
  // (by its client, or by its deadline) before it got there.
  bool reached_service = false;
  // Whether it has ended. An attempt's record is complete before its client
  // receives the status, so once a call returns, its last attempt is
  // finished; a copy its client cancelled (hedging) may finish a moment
  // later.
  bool finished = false;
  // What your service answered (when reached_service and finished).
  grpc::StatusCode service_code = grpc::StatusCode::UNKNOWN;
  // What the client was answered (when finished).
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
};

// The attempts of one call: of one method, with one idempotency key.
struct RecordedCall {
  std::string method;
  // Empty for an attempt that carried no key (a call of its own).
  std::string idempotency_key;
  // In order of arrival.
  std::vector<RecordedAttempt> attempts;

  // How many of its attempts your service handled.
  int reached_service() const;
};

// A thread-safe record of attempts. Reads return snapshots: copies that
// later attempts do not change.
class Recorder {
 public:
  // `clock` stamps arrivals; null means Clock::Real(). It must outlive the
  // recorder.
  explicit Recorder(Clock* clock = nullptr);

  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The calls of `method` ("/package.Service/Method"), in order of their
  // first attempt's arrival; every method's when `method` is empty.
  std::vector<RecordedCall> Calls(absl::string_view method = "") const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The attempts of `method` (every method's when empty), in order of
  // arrival.
  std::vector<RecordedAttempt> Attempts(absl::string_view method = "") const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Attempts recorded since construction or the last Clear().
  int64_t total_attempts() const ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets everything recorded. Attempts in flight finish unrecorded, and a
  // key seen before counts its attempts from 1 again.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  // Identifies an attempt being recorded, for the updates below.
  struct Handle {
    int64_t generation = -1;
    size_t call = 0;
    size_t attempt = 0;
  };

  // Records an attempt's arrival now and returns its record, with `number`
  // set. Called by FaultInjector; a test's own server code may call it too.
  std::pair<Handle, RecordedAttempt> Arrive(absl::string_view method,
                                            absl::string_view idempotency_key,
                                            int attempt_header)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Updates an attempt's record. A handle from before a Clear() is ignored.
  void SetFault(const Handle& handle, InjectedFault fault)
      ABSL_LOCKS_EXCLUDED(mu_);
  void PassOn(const Handle& handle) ABSL_LOCKS_EXCLUDED(mu_);
  void SetServiceAnswer(const Handle& handle, grpc::StatusCode code)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const Handle& handle, grpc::StatusCode code)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  RecordedAttempt* Find(const Handle& handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RecordedCall> calls_ ABSL_GUARDED_BY(mu_);
  // (method, key) to its index in calls_, for attempts with a key.
  std::map<std::pair<std::string, std::string>, size_t> by_key_
      ABSL_GUARDED_BY(mu_);
  int64_t total_attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTING_RECORDER_H_
