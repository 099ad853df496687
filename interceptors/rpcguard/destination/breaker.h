// Copyright rpcguard authors.
//
// CircuitBreaker: stops sending attempts to a destination that is failing,
// and lets a few probes find out when it has recovered. BreakerRegistry
// (registry.h) keeps a process's breakers, one per key, shared by every
// channel that uses the same key, so that all clients of one destination
// learn together.
//
// States:
//
//   CLOSED --(failure ratio >= failureRatio over >= minAttempts)--> OPEN
//   OPEN --(openTime elapsed; decided at the next Admit)--> HALF_OPEN
//   HALF_OPEN --(halfOpenSuccesses probe successes)--> CLOSED
//   HALF_OPEN --(a probe failed, or no probe reported in probeTimeout)--> OPEN
//
//   any --ForceOpen()--> FORCED_OPEN   (refuses everything until Reset())
//   any --Disable()--> DISABLED        (admits everything, records nothing)
//   any --Reset()--> CLOSED            (manual; forgets all history)
//
// No other transition can happen (internal::IsLegalTransition lists them).
// Time comes only from the injected Clock and is read when Admit or Record
// is called: there are no timers and no threads.
//
// What counts (AttemptResultFor): only a server's answer about itself
// (OriginOf in decision/status_class.h says kServer). Of those, an attempt
// ending in the retriable class (UNAVAILABLE, ABORTED, a per-attempt
// timeout) is a failure; any other answer, fatal and auth included, is a
// success (the server is up and answering). Everything else is ignored: an
// overload rejection (RESOURCE_EXHAUSTED: a server shedding load is up, and
// cutting it off would refuse even the calls it has room for; the adaptive
// throttle hears it, as brpc does not count overload either), an answer
// about a service below the server (an rpcguard give-up trailer, or a
// negative pushback: the server answered, its store failed), the caller's
// own cancel or deadline, an error the client made itself (IsLocalError),
// and an attempt that never reached a server (no transport took it). A
// failed attempt that its call retries
// is not recorded either (internal/engine/retry_gate.h): the retry's result
// speaks for the call, so a blip that one retry hides (a restart, a GOAWAY) is
// no evidence of an outage, while calls that fail after their retries are.
//
// Open time: openTime on the first trip, doubled on each further trip
// (a probe failing, or CLOSED tripping again within healthyPeriod of closing),
// up to maxOpenTime. After healthyPeriod in CLOSED the next trip starts over
// at openTime.
//
// How the interceptor is meant to use one (per attempt, retries included):
//
//   Admission a = breaker->Admit();
//   if (!a.allowed()) {  // fail fast: UNAVAILABLE, no I/O, no budget spent
//     return Status(UNAVAILABLE, breaker->RefusalMessage(a));  // breaker_open
//   }
//   if (!is_retry) {
//     budget->RecordFirstAttempt();  // only calls that really go out earn
//   } else if (!budget->TryAcquireRetry()) {
//     breaker->Record(a, AttemptResult::kIgnored);  // gives back a probe
//     ...give up: budget_exhausted
//   }
//   ...send the attempt...
//   breaker->Record(a, AttemptResultFor(status_class, outcome));
//   ...A6 throttle, if configured: see retry_throttle.h...
//
// Every allowed Admission must be recorded exactly once (kIgnored when the
// attempt was never sent); a lost HALF_OPEN probe is reclaimed only after
// probeTimeout.

#ifndef RPCGUARD_DESTINATION_BREAKER_H_
#define RPCGUARD_DESTINATION_BREAKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/clock.h"
#include "rpcguard/decision/status_class.h"
#include "rpcguard/destination/retry_budget.h"

namespace rpcguard {

// The breaker's states, one list: the enum, its names (traces, the
// `state` and `to` labels of the metrics) and its size come from it.
#define RPCGUARD_BREAKER_STATES(X) \
  X(kClosed, "closed")             \
  X(kOpen, "open")                 \
  X(kHalfOpen, "half_open")        \
  X(kForcedOpen, "forced_open")    \
  X(kDisabled, "disabled")

enum class BreakerState {
#define RPCGUARD_BREAKER_STATE_ENUM(e, name) e,
  RPCGUARD_BREAKER_STATES(RPCGUARD_BREAKER_STATE_ENUM)
#undef RPCGUARD_BREAKER_STATE_ENUM
};

inline constexpr int kNumBreakerStates = 0
#define RPCGUARD_BREAKER_STATE_COUNT(e, name) +1
    RPCGUARD_BREAKER_STATES(RPCGUARD_BREAKER_STATE_COUNT)
#undef RPCGUARD_BREAKER_STATE_COUNT
    ;

// Returns "closed", "open", "half_open", "forced_open" or "disabled".
absl::string_view BreakerStateName(BreakerState state);

// The state named `name` (as BreakerStateName writes it); nullopt for any
// other text.
std::optional<BreakerState> ParseBreakerState(absl::string_view name);

// How an admitted attempt ended, as far as the breaker is concerned.
enum class AttemptResult {
  kSuccess,  // the server answered about itself (OK, fatal or auth class)
  kFailure,  // the server failed itself: retriable class, per-attempt
             // timeout included
  kIgnored,  // any other origin (overload, a service below, the caller,
             // no server); or never sent
};

// Returns "success", "failure" or "ignored".
absl::string_view AttemptResultName(AttemptResult result);

// Maps a classified attempt to what the breaker records: any origin but
// kServer (OriginOf) is kIgnored whatever the class; of a server's own
// answers, kRetriable is kFailure, and kOk, kFatal and kAuth are kSuccess.
AttemptResult AttemptResultFor(StatusClass status_class,
                               const AttemptOutcome& outcome);

// Tuning of one breaker. JSON names (rpcguard.circuitBreaker.<name>) are
// given with each field; durations are proto3 JSON strings ("10s").
struct BreakerOptions {
  // "window", "buckets": outcomes are counted over the last `window`, in
  // `buckets` buckets that age out one at a time. 10 s in 1 s buckets sees an
  // outage within seconds, yet needs a sustained failure rate, not one burst
  // (Polly samples 30 s in 10 buckets; a shorter window reacts sooner).
  absl::Duration window = absl::Seconds(10);
  int buckets = 10;

  // "failureRatio": trips when failures / attempts in the window reaches
  // this. 0.5 (resilience4j's default): a destination failing half of the
  // time is down for practical purposes; retries mask lower rates.
  double failure_ratio = 0.5;

  // "minAttempts": no trip before this many attempts in the window, so that
  // 2 failures out of 3 attempts do not cut off a quiet client. 20 is 2/s
  // over the default window (resilience4j's default is 100 calls; Polly's
  // 100 over 30 s); lower traffic than that is better served by retries.
  int min_attempts = 20;

  // "openTime", "maxOpenTime": how long OPEN refuses before it lets probes
  // through: openTime on a first trip, doubled on each repeated trip, up to
  // maxOpenTime. 1 s is short enough that a blip costs little; doubling to
  // 30 s keeps a long outage from being probed more than twice a minute
  // (brpc doubles its isolation time the same way; Envoy caps ejection at
  // 300 s, for hosts rather than whole destinations).
  absl::Duration open_time = absl::Seconds(1);
  absl::Duration max_open_time = absl::Seconds(30);

  // "healthyPeriod": after this long in CLOSED, the next trip counts as a
  // first trip again (openTime). 60 s: twice the longest open time, so a
  // flapping destination keeps its long open time.
  absl::Duration healthy_period = absl::Seconds(60);

  // "halfOpenProbes": HALF_OPEN admits at most this many attempts in flight
  // at once; others are refused. A probe that reports frees its permit.
  // 3: one probe can be unlucky (one bad backend behind a balancer), and a
  // recovering server should not get more than a handful at once.
  int half_open_probes = 3;

  // "halfOpenSuccesses": probe successes that close the breaker; any probe
  // failure reopens it. 3, so that one lucky probe does not release full
  // traffic on a server that is still mostly failing.
  int half_open_successes = 3;

  // "probeTimeout": when every probe permit has been out this long without a
  // report, the breaker reopens (as for a failed probe) instead of waiting
  // for ever. 10 s: a probe slower than that is no sign of health, and a
  // lost report must not lock out a destination for long.
  absl::Duration probe_timeout = absl::Seconds(10);

  // OK, or InvalidArgument naming the first bad field by its JSON name, e.g.
  // "circuitBreaker.failureRatio: must be in (0, 1]".
  absl::Status Validate() const;

  bool operator==(const BreakerOptions& other) const;
  bool operator!=(const BreakerOptions& other) const {
    return !(*this == other);
  }
};

// One state change of one breaker, as listeners see it.
struct BreakerTransition {
  std::string key;  // the breaker's registry key
  BreakerState from = BreakerState::kClosed;
  BreakerState to = BreakerState::kClosed;
  // When it happened: on the breaker clock's monotonic time (to order and
  // compare transitions), and on its wall clock (for people: trace lines).
  absl::Time time;
  absl::Time wall_time;
  // Why, for logs: "failure ratio 0.60 >= 0.50 over 25 attempts in 10s",
  // "open time 1s elapsed", "probe failed", "3 probe successes",
  // "no probe reported within 10s", "ForceOpen()", "Disable()", "Reset()".
  std::string reason;
  // ForceOpen(), Disable() and Reset(); false for the automatic ones.
  bool manual = false;
  // For to == kOpen: how long it stays open.
  absl::Duration open_time = absl::ZeroDuration();
  // 1 for the breaker's first transition, then 2, 3...: listeners see them
  // in this order.
  uint64_t sequence = 0;
};

using BreakerListener = std::function<void(const BreakerTransition&)>;

// The answer of CircuitBreaker::Admit. A small value; pass it back to Record.
class Admission {
 public:
  // Whether the attempt may be sent.
  bool allowed() const { return allowed_; }
  // The state that decided (kHalfOpen for a probe).
  BreakerState state() const { return state_; }
  // Whether this attempt is a HALF_OPEN probe.
  bool probe() const { return probe_; }
  // For a refusal: the earliest time Admit may allow again. The end of the
  // open time when OPEN; the decision time when HALF_OPEN with every probe
  // permit taken (any probe's report frees one); absl::InfiniteFuture() when
  // FORCED_OPEN (until Reset()). absl::InfinitePast() when allowed.
  absl::Time next_probe() const { return next_probe_; }

 private:
  friend class CircuitBreaker;
  bool allowed_ = false;
  bool probe_ = false;
  BreakerState state_ = BreakerState::kClosed;
  uint32_t generation_ = 0;  // the state period that admitted it
  absl::Time next_probe_ = absl::InfinitePast();
};

// What a breaker knows, for tests, stats and debug pages.
struct BreakerSnapshot {
  // As of the last Admit or Record: an OPEN breaker whose open time has
  // passed still reads kOpen until the next Admit turns it HALF_OPEN.
  BreakerState state = BreakerState::kClosed;
  int64_t window_attempts = 0;  // successes + failures in the window (CLOSED)
  int64_t window_failures = 0;
  int probes_in_flight = 0;  // HALF_OPEN only
  int probe_successes = 0;   // HALF_OPEN only
  // Trips since the last healthy period; unless healthyPeriod passes in
  // CLOSED first, the next open time is min(openTime * 2^trips,
  // maxOpenTime).
  int consecutive_trips = 0;
  absl::Time open_until = absl::InfinitePast();  // OPEN only
  uint64_t transitions = 0;                      // in all
  uint64_t refused = 0;                          // Admit refusals in all
};

namespace internal {
class BreakerTestPeer;  // tests/testing/breaker_test_peer.h

// Whether `from` -> `to` is an edge of the state machine above: the four
// automatic edges, or (manual) a change into FORCED_OPEN, DISABLED or CLOSED
// from any other state. A state never transitions to itself.
bool IsLegalTransition(BreakerState from, BreakerState to, bool manual);
}  // namespace internal

// One destination's breaker.
//
// Thread-safe, and lock-free where traffic is heavy: Admit in CLOSED or
// DISABLED is one atomic load, and in OPEN (before the open time is over) a
// clock read and a few atomics; Record in CLOSED adds to one of several
// striped counters (so concurrent callers rarely share a lock), and only a
// failure sums them. Everything else holds a per-breaker mutex for the few
// nanoseconds of counter updates, never while calling out: listeners run after
// the lock is released, one at a time and in transition order, on the thread of
// a caller whose Admit, Record or manual call caused a transition (or of
// another caller that was delivering at that moment). Listeners may call back
// into the breaker.
class CircuitBreaker {
 public:
  // Errors: InvalidArgument from options.Validate(). `clock` (null:
  // Clock::Real()) must outlive the breaker. `listener` (may be empty) sees
  // every transition exactly once, in order; it must be quick and must not
  // block: it runs on an RPC's thread.
  static absl::StatusOr<std::shared_ptr<CircuitBreaker>> Create(
      std::string key, const BreakerOptions& options, Clock* clock = nullptr,
      BreakerListener listener = nullptr);

  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;
  ~CircuitBreaker();

  // May an attempt be sent now? CLOSED and DISABLED: yes. OPEN: no, until
  // the open time has passed; then the breaker turns HALF_OPEN and this call
  // becomes its first probe. HALF_OPEN: yes, taking a probe permit, while
  // fewer than halfOpenProbes are in flight. FORCED_OPEN: no.
  Admission Admit();

  // Records how an admitted attempt ended. Refused admissions, admissions
  // from DISABLED, and admissions from before the latest transition (their
  // state period is over) change nothing. kIgnored changes no count but
  // gives a probe's permit back.
  void Record(const Admission& admission, AttemptResult result);
  // The same, the attempt having ended at `now`, a reading of this
  // breaker's clock the caller has already taken.
  void Record(const Admission& admission, AttemptResult result, absl::Time now);

  // Manual control, for operators and tests. Each is a transition (seen by
  // the listener) unless the breaker is already in the target state.
  // ForceOpen: refuse every attempt until Reset(). Disable: admit every
  // attempt and count nothing until Reset(). Reset: back to CLOSED with an
  // empty window and the open time back at openTime (from CLOSED, it only
  // clears the history).
  void ForceOpen();
  void Disable();
  void Reset();

  // The current state; see BreakerSnapshot::state.
  BreakerState state() const {
    return StateOf(word_.load(std::memory_order_acquire));
  }

  BreakerSnapshot Snapshot();

  // The message of the UNAVAILABLE status for a refused attempt, naming the
  // key and when the next probe may go:
  //   circuit breaker "dns:///db:443" is open; next probe in 850ms
  //   circuit breaker "dns:///db:443" is half_open; 3 probes in flight
  //   circuit breaker "dns:///db:443" is forced_open until reset
  std::string RefusalMessage(const Admission& admission) const;

  const std::string& key() const { return key_; }
  const BreakerOptions& options() const { return options_; }

 private:
  friend class internal::BreakerTestPeer;

  // What the lock guards, the striped window of CLOSED's outcomes, and the
  // transitions, which need both. Defined in destination/breaker_impl.h, so
  // that this header needs none of rpcguard's internal primitives.
  struct State;

  CircuitBreaker(std::string key, const BreakerOptions& options, Clock* clock,
                 BreakerListener listener);

  // Whether Record would count `result` under `admission` at all (a
  // refused, DISABLED or ignored CLOSED attempt does not): checked before
  // the clock is read.
  static bool Counts(const Admission& admission, AttemptResult result);

  // word_ packs the state (low 8 bits) and the generation, which counts
  // transitions, so that Admit reads both with one atomic load.
  static BreakerState StateOf(uint64_t word) {
    return static_cast<BreakerState>(word & 0xff);
  }
  static uint32_t GenerationOf(uint64_t word) {
    return static_cast<uint32_t>(word >> 8);
  }

  // Record for an admission from CLOSED.
  void RecordClosed(const Admission& admission, bool failed, absl::Time now);
  void ManualTransition(BreakerState to, absl::string_view reason);
  // Calls the listener for queued transitions, unless another thread is
  // already doing so (it will pick these up too).
  void Deliver();

  const std::string key_;
  const BreakerOptions options_;
  Clock* const clock_;
  const BreakerListener listener_;

  // Written under the lock (State::mu); read without it by Admit and
  // state().
  std::atomic<uint64_t> word_;
  // Admit refusals; incremented without the lock.
  std::atomic<uint64_t> refused_{0};
  // State::open_until in Unix nanoseconds, for Admit in OPEN without the
  // lock. Written under the lock before word_ turns OPEN.
  std::atomic<int64_t> open_until_ns_{INT64_MIN};

  const std::unique_ptr<State> impl_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DESTINATION_BREAKER_H_
