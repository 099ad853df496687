// Copyright rpcguard authors.
//
// RetryController: every decision about one call's attempts, and nothing
// else. It never touches gRPC call objects: the interceptor tells it when an
// attempt starts and how it ended, and does what it answers. Time comes from
// an injected Clock and randomness from an injected generator, so the whole
// decision sequence runs under a fake clock in tests.
//
// The caller's remaining deadline is the retry budget: a retry is started only
// when its backoff plus a minimal attempt time still fits before the deadline;
// otherwise the call gives up at once with the last attempt's status, rather
// than sleeping into a deadline it cannot meet. The same holds for a delay the
// server chose, whatever its length (CheckServerDelay in server_hints.h).

#ifndef RPCGUARD_DECISION_RETRY_CONTROLLER_H_
#define RPCGUARD_DECISION_RETRY_CONTROLLER_H_

#include <optional>
#include <string>

#include "absl/random/bit_gen_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/decision/backoff.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/policy.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {

// How an attempt ended, as the interceptor saw it.
struct AttemptEnd {
  grpc::StatusCode code = grpc::StatusCode::OK;
  // The caller cancelled while it ran.
  bool caller_cancelled = false;
  // gRPC's client library made the failure itself (IsLocalError): the call
  // ends at once, and the destination is told nothing.
  bool local_error = false;
  // The attempt never reached the server (no transport took it).
  // When its retry may wait for the connection (`may_wait`) and the call
  // has a deadline, the retry waits (wait_for_connection) and does not use
  // up maxAttempts (the server never saw the attempt; like gRPC's
  // transparent retries), within kMaxAttemptsCap attempts in all. A retry
  // that may not wait (an explicit waitForReady false, the caller's or the
  // config's) counts as any other.
  bool not_sent = false;
  bool may_wait = true;
  // The server said not to retry (a negative pushback), and named a give-up
  // of a service below it (AttemptOutcome's, for OriginOf).
  bool server_said_stop = false;
  bool downstream_gave_up = false;
};

// What to do after an attempt.
struct Decision {
  // kRefreshAuth: ask the credential refresher, then make one more attempt
  // with what it returns.
  enum class Action { kDone, kRetry, kGiveUp, kRefreshAuth };
  Action action = Action::kDone;
  GiveUpReason reason = GiveUpReason::kNone;
  StatusClass status_class = StatusClass::kOk;
  // For kRetry: how long to wait before the next attempt.
  absl::Duration delay = absl::ZeroDuration();
  // The attempt as the classifier saw it (for the breaker: AttemptResultFor).
  AttemptOutcome outcome;
  // For kRetry after an attempt that never reached the server, on a call
  // with a deadline: send the retry with wait_for_ready, so that it waits
  // for the channel to reconnect (bounded by the deadline) instead of
  // failing again at once. A call without a deadline does not wait.
  bool wait_for_connection = false;
};

// The decisions of one call. Thread-compatible: the interceptor serializes
// access under its own lock.
class RetryController {
 public:
  // `deadline` is the caller's (absl::InfiniteFuture() for none); the
  // policy's `timeout` may shorten it. `may_repeat`: whether the call is safe
  // to send more than once (declared idempotent, or carrying a key).
  // `policy` and `clock` must outlive the controller.
  RetryController(const MethodPolicy& policy, bool may_repeat,
                  absl::Time deadline, Clock* clock);

  // Allows one credential refresh on UNAUTHENTICATED (a refresher exists).
  // It is still only used for calls safe to repeat: the server may have
  // acted before it checked the credentials.
  void EnableAuthRefresh() { can_refresh_ = true; }

  // Starts the next attempt: returns its deadline, the caller's deadline or
  // the per-attempt timeout from now, whichever is earlier.
  absl::Time StartAttempt();

  // Records how the current attempt ended and decides what comes next.
  Decision OnAttemptEnd(const AttemptEnd& end, const Pushback& pushback,
                        absl::BitGenRef gen) {
    return OnAttemptEnd(end, pushback, gen, clock_->MonotonicNow());
  }
  // The same, the attempt having ended at `now`, a reading of this
  // controller's clock the caller has already taken.
  Decision OnAttemptEnd(const AttemptEnd& end, const Pushback& pushback,
                        absl::BitGenRef gen, absl::Time now);
  // The same for an attempt that ended with `code`, not a local error;
  // `caller_cancelled`: the caller cancelled while it ran.
  Decision OnAttemptEnd(grpc::StatusCode code, const Pushback& pushback,
                        bool caller_cancelled, absl::BitGenRef gen) {
    AttemptEnd end;
    end.code = code;
    end.caller_cancelled = caller_cancelled;
    return OnAttemptEnd(end, pushback, gen);
  }

  // How the current attempt, ended as `end` says, looks to the classifier
  // now: whether the caller's deadline or the attempt's own timeout has
  // passed. OnAttemptEnd decides on exactly this; the glue uses it to tell
  // the breaker before the decision.
  //
  // A DEADLINE_EXCEEDED from an attempt whose deadline was the call's, within
  // kDeadlineSlack of that deadline, is the caller's deadline: gRPC's own
  // timers (client and server) read time in cached milliseconds and can end
  // an attempt a little before rpcguard's clock reaches the same deadline.
  AttemptOutcome OutcomeOf(const AttemptEnd& end) const;
  // The same at `now`, a reading of this controller's clock the caller has
  // already taken (one read an event, not one per question).
  AttemptOutcome OutcomeOf(const AttemptEnd& end, absl::Time now) const {
    return OutcomeAt(end, now);
  }

  // How early gRPC may end an attempt at the call's deadline (see OutcomeOf).
  static constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(20);

  // The classifier of the policy.
  const Classifier& classifier() const { return classifier_; }

  // Attempts started so far.
  int attempts() const { return attempts_; }
  // The effective deadline of the whole call.
  absl::Time deadline() const { return deadline_; }
  // The clock's monotonic time now.
  absl::Time Now() const { return clock_->MonotonicNow(); }

  // Time left until the deadline (may be negative; infinite without one).
  absl::Duration Remaining() const {
    return deadline_ - clock_->MonotonicNow();
  }

 private:
  AttemptOutcome OutcomeAt(const AttemptEnd& end, absl::Time now) const;

  const MethodPolicy& policy_;
  const Classifier classifier_;
  const bool may_repeat_;
  Clock* const clock_;
  absl::Time deadline_;
  absl::Time attempt_deadline_ = absl::InfiniteFuture();
  Backoff backoff_;
  int attempts_ = 0;
  // Attempts that never reached the server: not counted against
  // maxAttempts.
  int not_sent_ = 0;
  bool can_refresh_ = false;
};

// Appends rpcguard's account of the call to a status message:
// "<message> [rpcguard: 3 attempts, gave up: deadline]". Returns the message
// unchanged when there is nothing to say (one attempt, and a final status
// that retrying could not have changed: fatal, auth, cancelled, or an error
// the client made itself, which stays gRPC's own).
std::string AnnotateMessage(absl::string_view message, int attempts,
                            GiveUpReason reason);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_RETRY_CONTROLLER_H_
