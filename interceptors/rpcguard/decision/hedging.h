// Copyright rpcguard authors.
//
// Hedging (gRFC A6's hedgingPolicy, with rpcguard's adaptive delay and load
// cap): the decisions, in pure code. Nothing here touches gRPC call objects;
// time comes from an injected Clock, so every rule runs under a fake clock.
//
//   HedgingPolicy     what a method's config says (A6's three fields, plus
//                     the adaptive delay and the extra-load cap)
//   LatencyEstimator  recent first-copy latency of one method, and its
//                     percentile: the adaptive delay (Finagle's
//                     BackupRequestFilter idea)
//   HedgeController   one call's copies: when the next goes, which ending
//                     wins, what is cancelled
//
// A6's semantics, as HedgeController follows them: the first attempt starts
// at once; the next after the hedging delay unless the call has ended; a
// non-fatal failure starts the next at once; a fatal one ends the call and
// cancels the rest; the first OK wins and cancels the rest; a server's
// pushback delays the next copy by its value, or stops further copies. A
// server's delay is judged as a retry's is (CheckServerDelay): one that does
// not fit before the deadline, or without a deadline exceeds kMaxServerDelay,
// stops further copies at once.
// The caller's deadline bounds every copy (the glue gives each the call's
// deadline); a caller's cancel ends all of them.

#ifndef RPCGUARD_DECISION_HEDGING_H_
#define RPCGUARD_DECISION_HEDGING_H_

#include <grpcpp/support/status_code_enum.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/clock.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {

// A method's hedging policy. JSON names are given with each field: A6's in
// the methodConfig's "hedgingPolicy", rpcguard's in its "rpcguard" object.
struct HedgingPolicy {
  // "maxAttempts": copies in all, the first included; 2 to kMaxAttemptsCap.
  int max_attempts = 2;
  // "hedgingDelay": the delay before each further copy; with an adaptive
  // delay, the delay until enough samples exist. 0 sends every copy at
  // once (A6 allows it).
  absl::Duration delay = absl::ZeroDuration();
  // "nonFatalStatusCodes": a copy failing with one of these lets the call
  // go on (and starts the next copy at once); any other failure ends it.
  StatusCodeSet non_fatal_codes;

  // rpcguard.hedgingDelayPercentile: when set (0 < p < 1), the delay is the
  // p-th percentile of the method's recent successful attempt latency, at
  // least `adaptive_floor`, once `min_samples` successes were seen.
  std::optional<double> adaptive_percentile;
  // rpcguard.hedgingDelayFloor: 1 ms, so that a fast method does not hedge
  // every call at once.
  absl::Duration adaptive_floor = absl::Milliseconds(1);
  // rpcguard.hedgingMinSamples: 100 successes before the estimate is used
  // (a percentile of fewer is mostly noise at p95 and above).
  int min_samples = 100;
  // rpcguard.maxExtraLoad: hedges may be at most this share of the method's
  // first attempts over the last 10 s, plus a reserve of 1 a second so a
  // quiet client can hedge at all. 5%: Finagle's default for backup requests
  // (1% to 5%), enough to cut a tail of a few percent.
  double max_extra_load = 0.05;

  // How Validate names a field: by its JSON path under a method config
  // ("hedgingPolicy.maxAttempts", "rpcguard.maxExtraLoad"), or as a field of
  // a .proto option ("hedging.max_attempts", "hedging.max_extra_load").
  enum class FieldNames { kJson, kProto };

  // OK, or InvalidArgument naming the first bad field under `path`, the
  // method config or the option (e.g. "methodConfig[0].hedgingPolicy.
  // maxAttempts: must be at least 2", "pkg.Svc.M: (rpcguard.v1.method).
  // hedging.max_extra_load: must be in (0, 1]"). One set of rules and
  // reasons for every source of policy.
  absl::Status Validate(absl::string_view path,
                        FieldNames names = FieldNames::kJson) const;

  bool operator==(const HedgingPolicy& o) const;
};

// The recent first-copy latencies of one method, for the adaptive
// delay. Keeps the last kSamples; the percentile is recomputed every
// kRecomputeEvery samples, so asking for it costs one lock and a read.
// Thread-safe.
class LatencyEstimator {
 public:
  static constexpr int kSamples = 512;
  static constexpr int kRecomputeEvery = 16;

  explicit LatencyEstimator(double percentile) : percentile_(percentile) {}

  // A call's first copy succeeded in `latency`.
  void Record(absl::Duration latency);

  // A call's first copy was cancelled after running `ran` because another
  // copy won: its latency was at least that. A censored sample, kept at its
  // lower bound: every such copy ran past the delay that was in force, so a
  // percentile below that delay is estimated exactly, and one above it is
  // pulled up towards it rather than down. Leaving these copies out (only
  // winners) would keep the slow ones out of the estimate altogether and
  // drag the delay to the fast copies' percentile under a tail. Failed
  // copies are not recorded at all.
  void RecordAtLeast(absl::Duration ran) { Record(ran); }

  // The percentile of the recent samples, or nullopt before `min_samples`
  // were recorded.
  std::optional<absl::Duration> Estimate(int min_samples) const;

  int64_t samples() const;

 private:
  void RecomputeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double percentile_;
  mutable internal::Mutex mu_;
  std::vector<int64_t> ring_ ABSL_GUARDED_BY(mu_);  // nanoseconds
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t since_recompute_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Duration> estimate_ ABSL_GUARDED_BY(mu_);
};

// The delay before each further copy of a call under `policy`: the adaptive
// estimate (at least the floor) once there are enough samples, else the
// fixed hedgingDelay. `estimator` may be null (no adaptive delay).
absl::Duration HedgeDelay(const HedgingPolicy& policy,
                          const LatencyEstimator* estimator);

// One call's hedging decisions. Thread-compatible: the glue serializes
// access under its own lock.
class HedgeController {
 public:
  // What the glue does after an event.
  struct Step {
    // Send one more copy now.
    bool send = false;
    // The call is decided: with the copy that just ended (`winner`), or
    // with the last failure when nothing is left to wait for.
    bool done = false;
    // Cancel every other copy in flight (the call is decided).
    bool cancel_others = false;
    // When to ask again (OnTimer): absl::InfiniteFuture() for never.
    absl::Time next_timer = absl::InfiniteFuture();
  };

  // `delay` is HedgeDelay's answer for this call; `deadline` the caller's.
  // A server's delay must leave `min_attempt_time` before the deadline, as
  // a retry's must (MethodPolicy::min_attempt_time).
  HedgeController(const HedgingPolicy& policy, absl::Duration delay,
                  absl::Time deadline, Clock* clock,
                  absl::Duration min_attempt_time = absl::ZeroDuration());

  // The first copy was sent at `first_sent` (on `clock`'s monotonic time:
  // now, or earlier for a copy that was the application's own call):
  // returns when the hedge timer is due.
  absl::Time Start(absl::Time first_sent);

  // The hedge timer fired: whether to send another copy. `allowed` is the
  // destination's say (breaker closed and hedge budget granted); a refused
  // hedge is not retried later (hedges never wait for budget).
  Step OnTimer(bool allowed);

  // Copy `number` (1-based) ended with `code` (and the server's
  // `pushback`); `caller_cancelled` when the caller gave up. `allowed`: as
  // for OnTimer, asked only if a copy would be started now.
  Step OnCopyEnd(int number, grpc::StatusCode code, const Pushback& pushback,
                 bool caller_cancelled, bool allowed);

  // The copy the last Step asked for could not be sent: the destination
  // refused it. A hedge the timer asked for (`hedge`: breaker open, hedge
  // budget spent) stops further hedges, while a copy that replaces a failed
  // one may still go (the first attempt still runs, and its failure is
  // handled as A6 says). A refused replacement stops every copy. The call
  // ends with its last failure when nothing else is in flight.
  Step OnRefused(bool hedge);

  // The delay between copies this call uses.
  absl::Duration delay() const { return delay_; }

  // Copies started so far; copies in flight.
  int started() const { return started_; }
  int in_flight() const { return in_flight_; }
  // Whether a pushback or a refusal stopped further copies, or further
  // hedges (copies the timer sends).
  bool stopped() const { return stopped_; }
  bool hedges_stopped() const { return hedges_stopped_; }
  // Why a server stopped further copies: kPushbackStop (it said not to
  // retry, or asked a call without a deadline to wait over kMaxServerDelay)
  // or kDeadline (its delay does not fit before the deadline); else kNone.
  GiveUpReason server_stop() const { return server_stop_; }

 private:
  bool CanStartMore(absl::Time now) const;

  const HedgingPolicy& policy_;
  const absl::Duration delay_;
  const absl::Time deadline_;
  Clock* const clock_;
  const absl::Duration min_attempt_time_;
  int started_ = 0;
  int in_flight_ = 0;
  bool decided_ = false;
  bool stopped_ = false;
  bool hedges_stopped_ = false;
  GiveUpReason server_stop_ = GiveUpReason::kNone;
  absl::Time next_timer_ = absl::InfiniteFuture();
};

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_HEDGING_H_
