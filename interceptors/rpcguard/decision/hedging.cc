// Copyright rpcguard authors.

#include "rpcguard/decision/hedging.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {
namespace {

// A HedgingPolicy field, to name it in either vocabulary.
enum Field {
  kMaxAttempts,
  kDelay,
  kNonFatalCodes,
  kPercentile,
  kFloor,
  kMinSamples,
  kMaxExtraLoad,
};

absl::string_view FieldName(Field f, HedgingPolicy::FieldNames names) {
  // Indexed by Field.
  static constexpr absl::string_view kJson[] = {
      "hedgingPolicy.maxAttempts",
      "hedgingPolicy.hedgingDelay",
      "hedgingPolicy.nonFatalStatusCodes",
      "rpcguard.hedgingDelayPercentile",
      "rpcguard.hedgingDelayFloor",
      "rpcguard.hedgingMinSamples",
      "rpcguard.maxExtraLoad"};
  static constexpr absl::string_view kProto[] = {
      "hedging.max_attempts",
      "hedging.hedging_delay",
      "hedging.non_fatal_status_codes",
      "hedging.delay_percentile",
      "hedging.delay_floor",
      "hedging.min_samples",
      "hedging.max_extra_load"};
  return names == HedgingPolicy::FieldNames::kJson ? kJson[f] : kProto[f];
}

}  // namespace

absl::Status HedgingPolicy::Validate(absl::string_view path,
                                     FieldNames names) const {
  auto bad = [&](Field field, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".", FieldName(field, names), ": ", why));
  };
  if (max_attempts < 2) return bad(kMaxAttempts, "must be at least 2");
  if (max_attempts > kMaxAttemptsCap) {
    return bad(kMaxAttempts, absl::StrCat("must be at most ", kMaxAttemptsCap));
  }
  if (delay < absl::ZeroDuration() || delay == absl::InfiniteDuration()) {
    return bad(kDelay, "must be 0 or more, and finite");
  }
  if (non_fatal_codes.Contains(grpc::StatusCode::OK)) {
    return bad(kNonFatalCodes, "must not contain OK");
  }
  if (adaptive_percentile.has_value() &&
      !(*adaptive_percentile > 0 && *adaptive_percentile < 1)) {
    return bad(kPercentile, "must be in (0, 1)");
  }
  if (adaptive_floor < absl::ZeroDuration() ||
      adaptive_floor == absl::InfiniteDuration()) {
    return bad(kFloor, "must be 0 or more, and finite");
  }
  // The JSON reader's bound for counts: more is taken for a typo.
  if (min_samples < 1 || min_samples > 1000000) {
    return bad(kMinSamples, "must be in [1, 1000000]");
  }
  if (!(max_extra_load > 0 && max_extra_load <= 1)) {
    return bad(kMaxExtraLoad, "must be in (0, 1]");
  }
  return absl::OkStatus();
}

bool HedgingPolicy::operator==(const HedgingPolicy& o) const {
  return max_attempts == o.max_attempts && delay == o.delay &&
         non_fatal_codes == o.non_fatal_codes &&
         adaptive_percentile == o.adaptive_percentile &&
         adaptive_floor == o.adaptive_floor && min_samples == o.min_samples &&
         max_extra_load == o.max_extra_load;
}

void LatencyEstimator::Record(absl::Duration latency) {
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(latency));
  internal::MutexLock lock(&mu_);
  if (ring_.size() < static_cast<size_t>(kSamples)) {
    ring_.push_back(ns);
  } else {
    ring_[next_] = ns;
  }
  next_ = (next_ + 1) % kSamples;
  ++recorded_;
  // Early samples recompute every time, so a new method gets an estimate
  // as soon as it has enough; later ones every kRecomputeEvery.
  if (++since_recompute_ >= kRecomputeEvery || recorded_ <= kSamples) {
    RecomputeLocked();
  }
}

void LatencyEstimator::RecomputeLocked() {
  since_recompute_ = 0;
  if (ring_.empty()) return;
  std::vector<int64_t> sorted = ring_;
  // Nearest rank: the smallest sample with at least p of them at or below.
  const size_t rank = static_cast<size_t>(
      std::ceil(percentile_ * static_cast<double>(sorted.size())));
  const size_t index = std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(sorted.begin(), sorted.begin() + index, sorted.end());
  estimate_ = absl::Nanoseconds(sorted[index]);
}

std::optional<absl::Duration> LatencyEstimator::Estimate(
    int min_samples) const {
  internal::MutexLock lock(&mu_);
  if (recorded_ < min_samples) return std::nullopt;
  return estimate_;
}

int64_t LatencyEstimator::samples() const {
  internal::MutexLock lock(&mu_);
  return recorded_;
}

absl::Duration HedgeDelay(const HedgingPolicy& policy,
                          const LatencyEstimator* estimator) {
  if (!policy.adaptive_percentile.has_value() || estimator == nullptr) {
    return policy.delay;
  }
  const std::optional<absl::Duration> estimate =
      estimator->Estimate(policy.min_samples);
  if (!estimate.has_value()) return policy.delay;
  return std::max(*estimate, policy.adaptive_floor);
}

HedgeController::HedgeController(const HedgingPolicy& policy,
                                 absl::Duration delay, absl::Time deadline,
                                 Clock* clock, absl::Duration min_attempt_time)
    : policy_(policy),
      delay_(delay),
      deadline_(deadline),
      clock_(clock),
      min_attempt_time_(min_attempt_time) {}

absl::Time HedgeController::Start(absl::Time first_sent) {
  started_ = 1;
  in_flight_ = 1;
  const absl::Time now = clock_->MonotonicNow();
  next_timer_ =
      CanStartMore(now) ? first_sent + delay_ : absl::InfiniteFuture();
  return next_timer_;
}

bool HedgeController::CanStartMore(absl::Time now) const {
  // A copy with no time left could not succeed, and would only add load.
  return !decided_ && !stopped_ && started_ < policy_.max_attempts &&
         now < deadline_;
}

HedgeController::Step HedgeController::OnTimer(bool allowed) {
  Step step;
  const absl::Time now = clock_->MonotonicNow();
  if (!CanStartMore(now)) {
    // Nothing in flight and nothing more to start (a deadline passed while
    // a pushback delay ran): the call ends with its last failure.
    if (!decided_ && in_flight_ == 0) {
      decided_ = true;
      step.done = true;
    }
    return step;
  }
  if (hedges_stopped_ && in_flight_ > 0) return step;
  if (now < next_timer_) {
    // Early (a pushback moved it): ask again when it is due.
    step.next_timer = next_timer_;
    return step;
  }
  if (!allowed) {
    // Hedges never wait for budget, nor for a breaker to close: the copies
    // in flight carry on alone.
    hedges_stopped_ = true;
    next_timer_ = absl::InfiniteFuture();
    if (in_flight_ == 0) {  // waiting on a pushback delay, with nothing out
      decided_ = true;
      step.done = true;
    }
    return step;
  }
  step.send = true;
  ++started_;
  ++in_flight_;
  next_timer_ = CanStartMore(now) && !hedges_stopped_ ? now + delay_
                                                      : absl::InfiniteFuture();
  step.next_timer = next_timer_;
  return step;
}

HedgeController::Step HedgeController::OnCopyEnd(int number,
                                                 grpc::StatusCode code,
                                                 const Pushback& pushback,
                                                 bool caller_cancelled,
                                                 bool allowed) {
  static_cast<void>(number);
  Step step;
  if (in_flight_ > 0) --in_flight_;
  if (decided_) return step;  // a copy cancelled after the call was decided
  const absl::Time now = clock_->MonotonicNow();
  const bool fatal = code == grpc::StatusCode::OK || caller_cancelled ||
                     !policy_.non_fatal_codes.Contains(code) ||
                     now >= deadline_;
  if (fatal) {
    // The first OK wins; a fatal failure, the caller's cancel or the
    // deadline ends the call with this copy's status.
    decided_ = true;
    step.done = true;
    step.cancel_others = in_flight_ > 0;
    next_timer_ = absl::InfiniteFuture();
    return step;
  }
  // A non-fatal failure.
  if (pushback.kind == Pushback::Kind::kStop) {
    stopped_ = true;
    server_stop_ = pushback.StopReason();
    next_timer_ = absl::InfiniteFuture();
  } else if (pushback.kind == Pushback::Kind::kRetryAfter ||
             pushback.min_delay.has_value()) {
    // The server named a delay: the next copy waits for it (A6), if it may.
    absl::Duration wait = pushback.kind == Pushback::Kind::kRetryAfter
                              ? pushback.delay
                              : absl::ZeroDuration();
    if (pushback.min_delay.has_value())
      wait = std::max(wait, *pushback.min_delay);
    next_timer_ = absl::InfiniteFuture();
    // Judged only when a copy could follow: with the copies spent, the
    // delay is moot, as a retry's is after its last attempt.
    if (CanStartMore(now)) {
      server_stop_ =
          CheckServerDelay(wait, deadline_ - now - min_attempt_time_);
      if (server_stop_ == GiveUpReason::kNone) {
        next_timer_ = now + wait;
      } else {
        stopped_ = true;
      }
    }
    step.next_timer = next_timer_;
  } else if (CanStartMore(now)) {
    // A6: a non-fatal failure sends the next copy at once.
    if (allowed) {
      step.send = true;
      ++started_;
      ++in_flight_;
      next_timer_ = CanStartMore(now) && !hedges_stopped_
                        ? now + delay_
                        : absl::InfiniteFuture();
    } else {
      stopped_ = true;
      next_timer_ = absl::InfiniteFuture();
    }
    step.next_timer = next_timer_;
  }
  if (!step.send && in_flight_ == 0 && next_timer_ == absl::InfiniteFuture()) {
    // Nothing left to wait for: the call ends with this failure.
    decided_ = true;
    step.done = true;
  }
  return step;
}

HedgeController::Step HedgeController::OnRefused(bool hedge) {
  Step step;
  if (started_ > 0) --started_;
  if (in_flight_ > 0) --in_flight_;
  if (hedge) {
    hedges_stopped_ = true;
  } else {
    stopped_ = true;
  }
  next_timer_ = absl::InfiniteFuture();
  if (!decided_ && in_flight_ == 0) {
    decided_ = true;
    step.done = true;
  }
  return step;
}

}  // namespace rpcguard
