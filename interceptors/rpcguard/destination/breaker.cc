// Copyright rpcguard authors.
//
// Design notes.
//
// The hot path is Admit + Record in CLOSED. Admit there is one atomic load
// of word_ (state + generation), so most calls never touch the mutex to ask.
// Record adds to a striped window: each thread counts into its own stripe,
// under that stripe's lock, so concurrent callers neither wait for each other
// nor bounce a cache line. Only a failure sums the stripes (only a failure
// can raise the failure ratio), and only a trip takes the breaker's mutex.
//
// The generation (the number of state periods so far: transitions, and
// Reset() in CLOSED) ties each Admission to the state period that granted
// it. A result that arrives after the breaker moved on (an attempt admitted
// in CLOSED finishing after the trip, a probe finishing after the breaker
// reopened) describes a period that is over and changes nothing; in
// particular it cannot close a breaker or free a permit of a later HALF_OPEN
// period.
//
// The lock-free atomics (word_, open_until_ns_, refused_) live in the
// breaker; the lock, what it guards and the striped window live in its
// State (destination/breaker_impl.h), where the transitions are.
//
// The protocol between word_, the stripes and the lock (State::mu) rests on
// three invariants, cited by number where they are relied on:
//
//   1. word_ (the state and generation, packed) changes only while holding
//      State::mu and every stripe lock of State::window
//      (NextGenerationLocked), and the stripes are cleared in the same step.
//   2. open_until_ns_ is stored before word_ turns OPEN, and word_ is stored
//      with release: a lock-free Admit that loads OPEN with acquire reads an
//      open_until_ns_ at least as new as that OPEN period (OpenLocked calls
//      SetOpenUntilLocked before TransitionLocked).
//   3. A result is counted only if its admission's generation equals the
//      current one, checked under the lock it is counted under: a CLOSED
//      result under its stripe's lock (StripedWindow::AddIf), so by 1 it
//      can never land in the next period's counts; a probe's under
//      State::mu.
//
// Listeners are never called under the mutex. A transition is queued under
// the mutex; after releasing it, the thread that caused the transition
// delivers the queue, unless another thread is already delivering (that one
// loops until the queue is empty). So listeners see each transition exactly
// once, in order, one at a time per breaker, and may call back into it.

#include "rpcguard/destination/breaker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpcguard/base/mutex.h"
#include "rpcguard/base/sliding_window.h"
#include "rpcguard/destination/breaker_impl.h"
#include "rpcguard/destination/option_checks.h"

namespace rpcguard {

using internal::CheckPositiveDuration;
using internal::InvalidOption;

absl::string_view BreakerStateName(BreakerState state) {
  switch (state) {
#define RPCGUARD_BREAKER_STATE_CASE(e, name) \
  case BreakerState::e:                      \
    return name;
    RPCGUARD_BREAKER_STATES(RPCGUARD_BREAKER_STATE_CASE)
#undef RPCGUARD_BREAKER_STATE_CASE
  }
  return "unknown";
}

std::optional<BreakerState> ParseBreakerState(absl::string_view name) {
#define RPCGUARD_BREAKER_STATE_PARSE(e, text) \
  if (name == text) return BreakerState::e;
  RPCGUARD_BREAKER_STATES(RPCGUARD_BREAKER_STATE_PARSE)
#undef RPCGUARD_BREAKER_STATE_PARSE
  return std::nullopt;
}

absl::string_view AttemptResultName(AttemptResult result) {
  switch (result) {
    case AttemptResult::kSuccess:
      return "success";
    case AttemptResult::kFailure:
      return "failure";
    case AttemptResult::kIgnored:
      return "ignored";
  }
  return "unknown";
}

AttemptResult AttemptResultFor(StatusClass status_class,
                               const AttemptOutcome& outcome) {
  // Only a server's answer about itself is evidence of its health. An
  // overload rejection means it is up and shedding (the adaptive throttle's
  // business: cutting it off would refuse the calls it has room for); an
  // answer about a service below it says nothing of it; the caller's own
  // ends and attempts no server took say nothing at all.
  if (OriginOf(outcome) != AttemptOrigin::kServer) {
    return AttemptResult::kIgnored;
  }
  return status_class == StatusClass::kRetriable ? AttemptResult::kFailure
                                                 : AttemptResult::kSuccess;
}

absl::Status BreakerOptions::Validate() const {
  if (absl::Status s = internal::CheckWindow("circuitBreaker", window, buckets);
      !s.ok()) {
    return s;
  }
  if (!(failure_ratio > 0 && failure_ratio <= 1)) {
    return InvalidOption("circuitBreaker.failureRatio", "must be in (0, 1]");
  }
  if (min_attempts < 1) {
    return InvalidOption("circuitBreaker.minAttempts", "must be at least 1");
  }
  if (absl::Status s =
          CheckPositiveDuration("circuitBreaker.openTime", open_time);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckPositiveDuration("circuitBreaker.maxOpenTime", max_open_time);
      !s.ok()) {
    return s;
  }
  if (max_open_time < open_time) {
    return InvalidOption("circuitBreaker.maxOpenTime",
                         "must be at least openTime");
  }
  if (healthy_period < absl::ZeroDuration()) {
    return InvalidOption("circuitBreaker.healthyPeriod",
                         "must not be negative");
  }
  if (healthy_period == absl::InfiniteDuration()) {
    return InvalidOption("circuitBreaker.healthyPeriod", "must be finite");
  }
  if (half_open_probes < 1) {
    return InvalidOption("circuitBreaker.halfOpenProbes", "must be at least 1");
  }
  if (half_open_successes < 1) {
    return InvalidOption("circuitBreaker.halfOpenSuccesses",
                         "must be at least 1");
  }
  return CheckPositiveDuration("circuitBreaker.probeTimeout", probe_timeout);
}

bool BreakerOptions::operator==(const BreakerOptions& o) const {
  return window == o.window && buckets == o.buckets &&
         failure_ratio == o.failure_ratio && min_attempts == o.min_attempts &&
         open_time == o.open_time && max_open_time == o.max_open_time &&
         healthy_period == o.healthy_period &&
         half_open_probes == o.half_open_probes &&
         half_open_successes == o.half_open_successes &&
         probe_timeout == o.probe_timeout;
}

namespace internal {

bool IsLegalTransition(BreakerState from, BreakerState to, bool manual) {
  if (from == to) return false;
  if (manual) {
    return to == BreakerState::kForcedOpen || to == BreakerState::kDisabled ||
           to == BreakerState::kClosed;
  }
  switch (from) {
    case BreakerState::kClosed:
      return to == BreakerState::kOpen;
    case BreakerState::kOpen:
      return to == BreakerState::kHalfOpen;
    case BreakerState::kHalfOpen:
      return to == BreakerState::kOpen || to == BreakerState::kClosed;
    case BreakerState::kForcedOpen:
    case BreakerState::kDisabled:
      // Only an operator leaves a manual state.
      return false;
  }
  return false;
}

}  // namespace internal

absl::StatusOr<std::shared_ptr<CircuitBreaker>> CircuitBreaker::Create(
    std::string key, const BreakerOptions& options, Clock* clock,
    BreakerListener listener) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::shared_ptr<CircuitBreaker>(new CircuitBreaker(
      std::move(key), options, clock == nullptr ? Clock::Real() : clock,
      std::move(listener)));
}

CircuitBreaker::CircuitBreaker(std::string key, const BreakerOptions& options,
                               Clock* clock, BreakerListener listener)
    : key_(std::move(key)),
      options_(options),
      clock_(clock),
      listener_(std::move(listener)),
      word_(static_cast<uint64_t>(BreakerState::kClosed)),
      impl_(std::make_unique<State>(*this, clock->MonotonicNow())) {}

CircuitBreaker::~CircuitBreaker() = default;

Admission CircuitBreaker::Admit() {
  const uint64_t word = word_.load(std::memory_order_acquire);
  Admission admission;
  admission.state_ = StateOf(word);
  admission.generation_ = GenerationOf(word);
  switch (admission.state_) {
    case BreakerState::kClosed:
    case BreakerState::kDisabled:
      admission.allowed_ = true;
      return admission;
    case BreakerState::kForcedOpen:
      admission.next_probe_ = absl::InfiniteFuture();
      refused_.fetch_add(1, std::memory_order_relaxed);
      return admission;
    case BreakerState::kOpen:
    case BreakerState::kHalfOpen:
      break;
  }

  // Read before locking, to keep the clock out of the critical section.
  const absl::Time now = clock_->MonotonicNow();
  if (admission.state_ == BreakerState::kOpen) {
    // Stored before word_ turned OPEN (invariant 2): at least as new as
    // this OPEN period.
    const absl::Time until =
        absl::FromUnixNanos(open_until_ns_.load(std::memory_order_acquire));
    if (now < until) {
      // Still open: refuse without the lock, as every call does during an
      // outage.
      admission.next_probe_ = until;
      refused_.fetch_add(1, std::memory_order_relaxed);
      return admission;
    }
  }
  bool transitioned = false;
  {
    internal::MutexLock lock(&impl_->mu);
    BreakerState state = StateOf(word_.load(std::memory_order_relaxed));
    if (state == BreakerState::kOpen && now >= impl_->open_until) {
      transitioned = impl_->TransitionLocked(
          BreakerState::kOpen, BreakerState::kHalfOpen, now,
          absl::StrCat("open time ",
                       absl::FormatDuration(impl_->current_open_time),
                       " elapsed"),
          /*manual=*/false);
      state = BreakerState::kHalfOpen;
    }
    if (state == BreakerState::kHalfOpen) {
      if (impl_->probes_in_flight < options_.half_open_probes) {
        ++impl_->probes_in_flight;
        impl_->last_probe_admitted = now;
        admission.allowed_ = true;
        admission.probe_ = true;
      } else if (now - impl_->last_probe_admitted >= options_.probe_timeout) {
        // Every permit has been out for probeTimeout: treat the probes as
        // failed rather than wait for reports that may never come.
        impl_->OpenLocked(
            now, absl::StrCat("no probe reported within ",
                              absl::FormatDuration(options_.probe_timeout)));
        transitioned = true;
        state = BreakerState::kOpen;
      } else {
        admission.next_probe_ = now;
      }
    }
    switch (state) {
      case BreakerState::kClosed:
      case BreakerState::kDisabled:
        // Changed since the lock-free read.
        admission.allowed_ = true;
        break;
      case BreakerState::kForcedOpen:
        admission.next_probe_ = absl::InfiniteFuture();
        break;
      case BreakerState::kOpen:
        admission.next_probe_ = impl_->open_until;
        break;
      case BreakerState::kHalfOpen:
        break;
    }
    admission.state_ = state;
    admission.generation_ = GenerationOf(word_.load(std::memory_order_relaxed));
  }
  if (!admission.allowed_) refused_.fetch_add(1, std::memory_order_relaxed);
  if (transitioned) Deliver();
  return admission;
}

void CircuitBreaker::Record(const Admission& admission, AttemptResult result) {
  if (!Counts(admission, result)) return;  // no clock read
  Record(admission, result, clock_->MonotonicNow());
}

bool CircuitBreaker::Counts(const Admission& admission, AttemptResult result) {
  if (!admission.allowed_ || admission.state_ == BreakerState::kDisabled) {
    return false;
  }
  // An ignored CLOSED attempt counts nowhere: no need for the lock.
  return result != AttemptResult::kIgnored || admission.probe_;
}

void CircuitBreaker::Record(const Admission& admission, AttemptResult result,
                            absl::Time now) {
  if (!Counts(admission, result)) return;
  if (!admission.probe_) {
    RecordClosed(admission, result == AttemptResult::kFailure, now);
    return;
  }
  bool transitioned = false;
  {
    internal::MutexLock lock(&impl_->mu);
    if (GenerationOf(word_.load(std::memory_order_relaxed)) !=
        admission.generation_) {
      return;  // its HALF_OPEN period is over (invariant 3)
    }
    // Never below 0, even if a caller records one admission twice.
    if (impl_->probes_in_flight > 0) --impl_->probes_in_flight;
    if (result == AttemptResult::kSuccess) {
      if (++impl_->probe_successes >= options_.half_open_successes) {
        transitioned = impl_->TransitionLocked(
            BreakerState::kHalfOpen, BreakerState::kClosed, now,
            absl::StrCat(impl_->probe_successes, " probe successes"),
            /*manual=*/false);
      }
    } else if (result == AttemptResult::kFailure) {
      impl_->OpenLocked(now, "probe failed");
      transitioned = true;
    }
  }
  if (transitioned) Deliver();
}

void CircuitBreaker::RecordClosed(const Admission& admission, bool failed,
                                  absl::Time now) {
  // Invariant 3, checked under the stripe's lock: by invariant 1 a
  // transition holds every stripe while it changes the generation and clears
  // the counts, so a result of an ended CLOSED period can never land in the
  // next one.
  const uint32_t generation = admission.generation_;
  const bool added = impl_->window.AddIf(now, 1, failed ? 1 : 0, [&] {
    return GenerationOf(word_.load(std::memory_order_relaxed)) == generation;
  });
  // Only a failure can raise the failure ratio.
  if (!added || !failed) return;
  const internal::SlidingWindow::Counts counts = impl_->window.Sum(now);
  const double ratio =
      static_cast<double>(counts.b) / static_cast<double>(counts.a);
  if (counts.a < options_.min_attempts || ratio < options_.failure_ratio) {
    return;
  }
  {
    internal::MutexLock lock(&impl_->mu);
    // Another caller may have tripped (or reset) it meanwhile.
    if (GenerationOf(word_.load(std::memory_order_relaxed)) != generation) {
      return;
    }
    impl_->OpenLocked(
        now, absl::StrFormat("failure ratio %.2f >= %.2f over %d attempts "
                             "in %s",
                             ratio, options_.failure_ratio, counts.a,
                             absl::FormatDuration(options_.window)));
  }
  Deliver();
}

void CircuitBreaker::State::OpenLocked(absl::Time now, std::string reason) {
  const BreakerState from =
      StateOf(breaker.word_.load(std::memory_order_relaxed));
  if (from == BreakerState::kClosed &&
      now - closed_since >= breaker.options_.healthy_period) {
    consecutive_trips = 0;  // a healthy period since the last trip
  }
  absl::Duration open_time = breaker.options_.open_time;
  for (int i = 0;
       i < consecutive_trips && open_time < breaker.options_.max_open_time;
       ++i) {
    open_time *= 2;
  }
  current_open_time = std::min(open_time, breaker.options_.max_open_time);
  ++consecutive_trips;
  SetOpenUntilLocked(now + current_open_time);
  const bool ok = TransitionLocked(from, BreakerState::kOpen, now,
                                   std::move(reason), /*manual=*/false);
  static_cast<void>(ok);  // only called from CLOSED and HALF_OPEN
}

bool CircuitBreaker::State::TransitionLocked(BreakerState from, BreakerState to,
                                             absl::Time now, std::string reason,
                                             bool manual) {
  const uint64_t word = breaker.word_.load(std::memory_order_relaxed);
  if (StateOf(word) != from || !internal::IsLegalTransition(from, to, manual)) {
    return false;
  }
  // Every state starts with a clean slate.
  probes_in_flight = 0;
  probe_successes = 0;
  if (to == BreakerState::kClosed) closed_since = now;
  if (to == BreakerState::kHalfOpen) last_probe_admitted = now;
  NextGenerationLocked(to);
  ++transitions;
  if (breaker.listener_) {
    BreakerTransition t;
    t.key = breaker.key_;
    t.from = from;
    t.to = to;
    t.time = now;
    // Read only for a listener, and only at a transition: rare.
    t.wall_time = breaker.clock_->WallNow();
    t.reason = std::move(reason);
    t.manual = manual;
    if (to == BreakerState::kOpen) t.open_time = current_open_time;
    t.sequence = transitions;
    pending.push_back(std::move(t));
  }
  return true;
}

void CircuitBreaker::State::SetOpenUntilLocked(absl::Time t) {
  // Relaxed is enough: callers store it before word_'s release store that
  // turns OPEN (invariant 2).
  open_until = t;
  breaker.open_until_ns_.store(absl::ToUnixNanos(t), std::memory_order_relaxed);
}

void CircuitBreaker::State::NextGenerationLocked(BreakerState state) {
  // The only store to word_ after construction: under mu and every stripe
  // lock, clearing the counts in the same step (invariant 1). Release, for
  // Admit's lock-free acquire load (invariant 2).
  const uint32_t generation =
      GenerationOf(breaker.word_.load(std::memory_order_relaxed)) + 1;
  window.LockAll();
  window.ClearLocked();
  breaker.word_.store(
      (static_cast<uint64_t>(generation) << 8) | static_cast<uint64_t>(state),
      std::memory_order_release);
  window.UnlockAll();
}

void CircuitBreaker::Deliver() {
  std::vector<BreakerTransition> batch;
  {
    internal::MutexLock lock(&impl_->mu);
    if (impl_->delivering || impl_->pending.empty()) return;
    impl_->delivering = true;
    batch.swap(impl_->pending);
  }
  while (true) {
    for (const BreakerTransition& t : batch) listener_(t);
    batch.clear();
    internal::MutexLock lock(&impl_->mu);
    if (impl_->pending.empty()) {
      impl_->delivering = false;
      return;
    }
    batch.swap(impl_->pending);
  }
}

void CircuitBreaker::ManualTransition(BreakerState to,
                                      absl::string_view reason) {
  const absl::Time now = clock_->MonotonicNow();
  bool transitioned = false;
  {
    internal::MutexLock lock(&impl_->mu);
    const uint64_t word = word_.load(std::memory_order_relaxed);
    const BreakerState from = StateOf(word);
    if (to == BreakerState::kClosed) {
      impl_->consecutive_trips = 0;
      impl_->SetOpenUntilLocked(absl::InfinitePast());
    }
    if (from != to) {
      transitioned = impl_->TransitionLocked(from, to, now, std::string(reason),
                                             /*manual=*/true);
    } else if (to == BreakerState::kClosed) {
      // Reset() in CLOSED: forget the history, and the results of attempts
      // admitted before it, without a transition.
      impl_->closed_since = now;
      impl_->NextGenerationLocked(to);
    }
  }
  if (transitioned) Deliver();
}

void CircuitBreaker::ForceOpen() {
  ManualTransition(BreakerState::kForcedOpen, "ForceOpen()");
}

void CircuitBreaker::Disable() {
  ManualTransition(BreakerState::kDisabled, "Disable()");
}

void CircuitBreaker::Reset() {
  ManualTransition(BreakerState::kClosed, "Reset()");
}

BreakerSnapshot CircuitBreaker::Snapshot() {
  const absl::Time now = clock_->MonotonicNow();
  BreakerSnapshot s;
  internal::MutexLock lock(&impl_->mu);
  s.state = StateOf(word_.load(std::memory_order_relaxed));
  const internal::SlidingWindow::Counts counts = impl_->window.Sum(now);
  s.window_attempts = counts.a;
  s.window_failures = counts.b;
  s.probes_in_flight = impl_->probes_in_flight;
  s.probe_successes = impl_->probe_successes;
  s.consecutive_trips = impl_->consecutive_trips;
  if (s.state == BreakerState::kOpen) s.open_until = impl_->open_until;
  s.transitions = impl_->transitions;
  s.refused = refused_.load(std::memory_order_relaxed);
  return s;
}

std::string CircuitBreaker::RefusalMessage(const Admission& admission) const {
  const std::string head = absl::StrCat("circuit breaker \"", key_, "\" is ",
                                        BreakerStateName(admission.state()));
  if (admission.allowed()) return head;
  switch (admission.state()) {
    case BreakerState::kOpen: {
      const absl::Duration wait =
          std::max(admission.next_probe() - clock_->MonotonicNow(),
                   absl::ZeroDuration());
      return absl::StrCat(head, "; next probe in ", absl::FormatDuration(wait));
    }
    case BreakerState::kHalfOpen:
      return absl::StrCat(head, "; ", options_.half_open_probes,
                          " probes in flight");
    case BreakerState::kForcedOpen:
      return absl::StrCat(head, " until reset");
    case BreakerState::kClosed:
    case BreakerState::kDisabled:
      break;
  }
  return head;
}

}  // namespace rpcguard
