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
// The protocol between word_, the stripes and mu_ rests on three
// invariants, cited by number where they are relied on:
//
//   1. word_ (the state and generation, packed) changes only while holding
//      mu_ and every stripe lock of window_ (NextGenerationLocked), and the
//      stripes are cleared in the same step.
//   2. open_until_ns_ is stored before word_ turns OPEN, and word_ is stored
//      with release: a lock-free Admit that loads OPEN with acquire reads an
//      open_until_ns_ at least as new as that OPEN period (OpenLocked calls
//      SetOpenUntilLocked before TransitionLocked).
//   3. A result is counted only if its admission's generation equals the
//      current one, checked under the lock it is counted under: a CLOSED
//      result under its stripe's lock (StripedWindow::AddIf), so by 1 it
//      can never land in the next period's counts; a probe's under mu_.
//
// Listeners are never called under the mutex. A transition is queued under
// the mutex; after releasing it, the thread that caused the transition
// delivers the queue, unless another thread is already delivering (that one
// loops until the queue is empty). So listeners see each transition exactly
// once, in order, one at a time per breaker, and may call back into it.

#include "rpcguard/destination/breaker.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rpcguard {
namespace {

// Bucket widths below this make no sense for a clock read per call.
constexpr absl::Duration kMinBucketWidth = absl::Milliseconds(1);
constexpr int kMaxBuckets = 1000;

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// Checks a duration option: finite and greater than 0.
absl::Status CheckPositive(absl::string_view field, absl::Duration d) {
  if (d <= absl::ZeroDuration())
    return Invalid(field, "must be greater than 0");
  if (d == absl::InfiniteDuration()) return Invalid(field, "must be finite");
  return absl::OkStatus();
}

}  // namespace

absl::string_view BreakerStateName(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
    case BreakerState::kForcedOpen:
      return "forced_open";
    case BreakerState::kDisabled:
      return "disabled";
  }
  return "unknown";
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
  // The caller's own cancel or deadline, or an error the client made
  // itself, says nothing about the server.
  if (outcome.caller_cancelled || outcome.caller_deadline_expired ||
      outcome.local_error) {
    return AttemptResult::kIgnored;
  }
  return status_class == StatusClass::kRetriable ? AttemptResult::kFailure
                                                 : AttemptResult::kSuccess;
}

absl::Status BreakerOptions::Validate() const {
  if (absl::Status s = CheckPositive("circuitBreaker.window", window);
      !s.ok()) {
    return s;
  }
  if (buckets < 1 || buckets > kMaxBuckets) {
    return Invalid("circuitBreaker.buckets",
                   absl::StrCat("must be in [1, ", kMaxBuckets, "]"));
  }
  if (window / buckets < kMinBucketWidth) {
    return Invalid("circuitBreaker.window", "must be at least 1ms per bucket");
  }
  if (!(failure_ratio > 0 && failure_ratio <= 1)) {
    return Invalid("circuitBreaker.failureRatio", "must be in (0, 1]");
  }
  if (min_attempts < 1) {
    return Invalid("circuitBreaker.minAttempts", "must be at least 1");
  }
  if (absl::Status s = CheckPositive("circuitBreaker.openTime", open_time);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckPositive("circuitBreaker.maxOpenTime", max_open_time);
      !s.ok()) {
    return s;
  }
  if (max_open_time < open_time) {
    return Invalid("circuitBreaker.maxOpenTime", "must be at least openTime");
  }
  if (healthy_period < absl::ZeroDuration()) {
    return Invalid("circuitBreaker.healthyPeriod", "must not be negative");
  }
  if (healthy_period == absl::InfiniteDuration()) {
    return Invalid("circuitBreaker.healthyPeriod", "must be finite");
  }
  if (half_open_probes < 1) {
    return Invalid("circuitBreaker.halfOpenProbes", "must be at least 1");
  }
  if (half_open_successes < 1) {
    return Invalid("circuitBreaker.halfOpenSuccesses", "must be at least 1");
  }
  return CheckPositive("circuitBreaker.probeTimeout", probe_timeout);
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

// ---------------------------------------------------------------------------
// CircuitBreaker

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
      window_(options.window, options.buckets),
      closed_since_(clock->Now()) {}

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
  const absl::Time now = clock_->Now();
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
    internal::MutexLock lock(&mu_);
    BreakerState state = StateOf(word_.load(std::memory_order_relaxed));
    if (state == BreakerState::kOpen && now >= open_until_) {
      transitioned = TransitionLocked(
          BreakerState::kOpen, BreakerState::kHalfOpen, now,
          absl::StrCat("open time ", absl::FormatDuration(current_open_time_),
                       " elapsed"),
          /*manual=*/false);
      state = BreakerState::kHalfOpen;
    }
    if (state == BreakerState::kHalfOpen) {
      if (probes_in_flight_ < options_.half_open_probes) {
        ++probes_in_flight_;
        last_probe_admitted_ = now;
        admission.allowed_ = true;
        admission.probe_ = true;
      } else if (now - last_probe_admitted_ >= options_.probe_timeout) {
        // Every permit has been out for probeTimeout: treat the probes as
        // failed rather than wait for reports that may never come.
        OpenLocked(now,
                   absl::StrCat("no probe reported within ",
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
        admission.next_probe_ = open_until_;
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
  if (!admission.allowed_ || admission.state_ == BreakerState::kDisabled) {
    return;
  }
  // An ignored CLOSED attempt counts nowhere: no need for the lock.
  if (result == AttemptResult::kIgnored && !admission.probe_) return;

  const absl::Time now = clock_->Now();
  if (!admission.probe_) {
    RecordClosed(admission, result == AttemptResult::kFailure, now);
    return;
  }
  bool transitioned = false;
  {
    internal::MutexLock lock(&mu_);
    if (GenerationOf(word_.load(std::memory_order_relaxed)) !=
        admission.generation_) {
      return;  // its HALF_OPEN period is over (invariant 3)
    }
    // Never below 0, even if a caller records one admission twice.
    if (probes_in_flight_ > 0) --probes_in_flight_;
    if (result == AttemptResult::kSuccess) {
      if (++probe_successes_ >= options_.half_open_successes) {
        transitioned = TransitionLocked(
            BreakerState::kHalfOpen, BreakerState::kClosed, now,
            absl::StrCat(probe_successes_, " probe successes"),
            /*manual=*/false);
      }
    } else if (result == AttemptResult::kFailure) {
      OpenLocked(now, "probe failed");
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
  const bool added = window_.AddIf(now, 1, failed ? 1 : 0, [&] {
    return GenerationOf(word_.load(std::memory_order_relaxed)) == generation;
  });
  // Only a failure can raise the failure ratio.
  if (!added || !failed) return;
  const internal::SlidingWindow::Counts counts = window_.Sum(now);
  const double ratio =
      static_cast<double>(counts.b) / static_cast<double>(counts.a);
  if (counts.a < options_.min_attempts || ratio < options_.failure_ratio) {
    return;
  }
  {
    internal::MutexLock lock(&mu_);
    // Another caller may have tripped (or reset) it meanwhile.
    if (GenerationOf(word_.load(std::memory_order_relaxed)) != generation) {
      return;
    }
    OpenLocked(now,
               absl::StrFormat("failure ratio %.2f >= %.2f over %d attempts "
                               "in %s",
                               ratio, options_.failure_ratio, counts.a,
                               absl::FormatDuration(options_.window)));
  }
  Deliver();
}

void CircuitBreaker::OpenLocked(absl::Time now, std::string reason) {
  const BreakerState from = StateOf(word_.load(std::memory_order_relaxed));
  if (from == BreakerState::kClosed &&
      now - closed_since_ >= options_.healthy_period) {
    consecutive_trips_ = 0;  // a healthy period since the last trip
  }
  absl::Duration open_time = options_.open_time;
  for (int i = 0; i < consecutive_trips_ && open_time < options_.max_open_time;
       ++i) {
    open_time *= 2;
  }
  current_open_time_ = std::min(open_time, options_.max_open_time);
  ++consecutive_trips_;
  SetOpenUntilLocked(now + current_open_time_);
  const bool ok = TransitionLocked(from, BreakerState::kOpen, now,
                                   std::move(reason), /*manual=*/false);
  static_cast<void>(ok);  // only called from CLOSED and HALF_OPEN
}

bool CircuitBreaker::TransitionLocked(BreakerState from, BreakerState to,
                                      absl::Time now, std::string reason,
                                      bool manual) {
  const uint64_t word = word_.load(std::memory_order_relaxed);
  if (StateOf(word) != from || !internal::IsLegalTransition(from, to, manual)) {
    return false;
  }
  // Every state starts with a clean slate.
  probes_in_flight_ = 0;
  probe_successes_ = 0;
  if (to == BreakerState::kClosed) closed_since_ = now;
  if (to == BreakerState::kHalfOpen) last_probe_admitted_ = now;
  NextGenerationLocked(to);
  ++transitions_;
  if (listener_) {
    BreakerTransition t;
    t.key = key_;
    t.from = from;
    t.to = to;
    t.time = now;
    t.reason = std::move(reason);
    t.manual = manual;
    if (to == BreakerState::kOpen) t.open_time = current_open_time_;
    t.sequence = transitions_;
    pending_.push_back(std::move(t));
  }
  return true;
}

void CircuitBreaker::SetOpenUntilLocked(absl::Time t) {
  // Relaxed is enough: callers store it before word_'s release store that
  // turns OPEN (invariant 2).
  open_until_ = t;
  open_until_ns_.store(absl::ToUnixNanos(t), std::memory_order_relaxed);
}

void CircuitBreaker::NextGenerationLocked(BreakerState state) {
  // The only store to word_ after construction: under mu_ and every stripe
  // lock, clearing the counts in the same step (invariant 1). Release, for
  // Admit's lock-free acquire load (invariant 2).
  const uint32_t generation =
      GenerationOf(word_.load(std::memory_order_relaxed)) + 1;
  window_.LockAll();
  window_.ClearLocked();
  word_.store(
      (static_cast<uint64_t>(generation) << 8) | static_cast<uint64_t>(state),
      std::memory_order_release);
  window_.UnlockAll();
}

void CircuitBreaker::Deliver() {
  std::vector<BreakerTransition> batch;
  {
    internal::MutexLock lock(&mu_);
    if (delivering_ || pending_.empty()) return;
    delivering_ = true;
    batch.swap(pending_);
  }
  while (true) {
    for (const BreakerTransition& t : batch) listener_(t);
    batch.clear();
    internal::MutexLock lock(&mu_);
    if (pending_.empty()) {
      delivering_ = false;
      return;
    }
    batch.swap(pending_);
  }
}

void CircuitBreaker::ManualTransition(BreakerState to,
                                      absl::string_view reason) {
  const absl::Time now = clock_->Now();
  bool transitioned = false;
  {
    internal::MutexLock lock(&mu_);
    const uint64_t word = word_.load(std::memory_order_relaxed);
    const BreakerState from = StateOf(word);
    if (to == BreakerState::kClosed) {
      consecutive_trips_ = 0;
      SetOpenUntilLocked(absl::InfinitePast());
    }
    if (from != to) {
      transitioned = TransitionLocked(from, to, now, std::string(reason),
                                      /*manual=*/true);
    } else if (to == BreakerState::kClosed) {
      // Reset() in CLOSED: forget the history, and the results of attempts
      // admitted before it, without a transition.
      closed_since_ = now;
      NextGenerationLocked(to);
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
  const absl::Time now = clock_->Now();
  BreakerSnapshot s;
  internal::MutexLock lock(&mu_);
  s.state = StateOf(word_.load(std::memory_order_relaxed));
  const internal::SlidingWindow::Counts counts = window_.Sum(now);
  s.window_attempts = counts.a;
  s.window_failures = counts.b;
  s.probes_in_flight = probes_in_flight_;
  s.probe_successes = probe_successes_;
  s.consecutive_trips = consecutive_trips_;
  if (s.state == BreakerState::kOpen) s.open_until = open_until_;
  s.transitions = transitions_;
  s.refused = refused_.load(std::memory_order_relaxed);
  return s;
}

std::string CircuitBreaker::RefusalMessage(const Admission& admission) const {
  const std::string head = absl::StrCat("circuit breaker \"", key_, "\" is ",
                                        BreakerStateName(admission.state()));
  if (admission.allowed()) return head;
  switch (admission.state()) {
    case BreakerState::kOpen: {
      const absl::Duration wait = std::max(
          admission.next_probe() - clock_->Now(), absl::ZeroDuration());
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

// ---------------------------------------------------------------------------
// BreakerRegistry

// The registry's listeners, shared with its breakers (which may outlive it).
// Copy-on-write: Notify takes the lock only to copy a pointer, and calls the
// listeners without it.
class BreakerRegistry::Listeners {
 public:
  ListenerId Add(BreakerListener listener) {
    internal::MutexLock lock(&mu_);
    auto next = std::make_shared<List>(*list_);
    const ListenerId id = next_id_++;
    next->emplace_back(id, std::move(listener));
    list_ = std::move(next);
    return id;
  }

  void Remove(ListenerId id) {
    internal::MutexLock lock(&mu_);
    auto next = std::make_shared<List>(*list_);
    next->erase(std::remove_if(next->begin(), next->end(),
                               [id](const auto& l) { return l.first == id; }),
                next->end());
    list_ = std::move(next);
  }

  void Notify(const BreakerTransition& transition) {
    std::shared_ptr<const List> list;
    {
      internal::MutexLock lock(&mu_);
      list = list_;
    }
    for (const auto& l : *list) l.second(transition);
  }

 private:
  using List = std::vector<std::pair<ListenerId, BreakerListener>>;
  internal::Mutex mu_;
  std::shared_ptr<const List> list_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const List>();
  ListenerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

absl::StatusOr<std::shared_ptr<BreakerRegistry>> BreakerRegistry::Create(
    const Options& options) {
  if (absl::Status s = options.breaker.Validate(); !s.ok()) return s;
  if (absl::Status s = options.budget.Validate(); !s.ok()) return s;
  return std::shared_ptr<BreakerRegistry>(new BreakerRegistry(options));
}

std::shared_ptr<BreakerRegistry> BreakerRegistry::Default() {
  static const auto* registry =
      new std::shared_ptr<BreakerRegistry>(new BreakerRegistry(Options{}));
  return *registry;
}

BreakerRegistry::BreakerRegistry(const Options& options)
    : options_(options),
      clock_(options.clock == nullptr ? Clock::Real() : options.clock),
      listeners_(std::make_shared<Listeners>()) {}

BreakerRegistry::Shard& BreakerRegistry::ShardFor(absl::string_view key) {
  return shards_[absl::Hash<absl::string_view>{}(key) % kShards];
}

std::shared_ptr<CircuitBreaker> BreakerRegistry::NewBreaker(
    absl::string_view key, const BreakerOptions& options) {
  std::shared_ptr<Listeners> listeners = listeners_;
  // Cannot fail: the caller validated the options.
  return *CircuitBreaker::Create(
      std::string(key), options, clock_,
      [listeners](const BreakerTransition& t) { listeners->Notify(t); });
}

std::shared_ptr<CircuitBreaker> BreakerRegistry::Get(absl::string_view key) {
  Shard& shard = ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  Entry& entry = shard.entries[key];
  if (entry.breaker == nullptr)
    entry.breaker = NewBreaker(key, options_.breaker);
  return entry.breaker;
}

absl::StatusOr<std::shared_ptr<CircuitBreaker>> BreakerRegistry::Get(
    absl::string_view key, const BreakerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  Shard& shard = ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  Entry& entry = shard.entries[key];
  if (entry.breaker == nullptr) {
    entry.breaker = NewBreaker(key, options);
  } else if (entry.breaker->options() != options) {
    return absl::FailedPreconditionError(absl::StrCat(
        "circuit breaker \"", key, "\" already exists with other options"));
  }
  return entry.breaker;
}

std::shared_ptr<RetryBudget> BreakerRegistry::GetBudget(absl::string_view key) {
  Shard& shard = ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  Entry& entry = shard.entries[key];
  if (entry.budget == nullptr) {
    entry.budget = *RetryBudget::Create(options_.budget, clock_);
  }
  return entry.budget;
}

absl::StatusOr<std::shared_ptr<RetryBudget>> BreakerRegistry::GetBudget(
    absl::string_view key, const RetryBudgetOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  Shard& shard = ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  Entry& entry = shard.entries[key];
  if (entry.budget == nullptr) {
    entry.budget = *RetryBudget::Create(options, clock_);
  } else if (entry.budget->options() != options) {
    return absl::FailedPreconditionError(absl::StrCat(
        "retry budget \"", key, "\" already exists with other options"));
  }
  return entry.budget;
}

absl::StatusOr<std::shared_ptr<RetryThrottle>> BreakerRegistry::GetThrottle(
    absl::string_view key, const RetryThrottleOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  Shard& shard = ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  Entry& entry = shard.entries[key];
  if (entry.throttle == nullptr || entry.throttle->options() != options) {
    entry.throttle = *RetryThrottle::Create(options, entry.throttle.get());
  }
  return entry.throttle;
}

BreakerRegistry::ListenerId BreakerRegistry::AddTransitionListener(
    BreakerListener listener) {
  return listeners_->Add(std::move(listener));
}

void BreakerRegistry::RemoveTransitionListener(ListenerId id) {
  listeners_->Remove(id);
}

std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>>
BreakerRegistry::Breakers() const {
  std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>> out;
  for (const Shard& shard : shards_) {
    internal::MutexLock lock(&shard.mu);
    for (const auto& [key, entry] : shard.entries) {
      if (entry.breaker != nullptr) out.emplace_back(key, entry.breaker);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace rpcguard
