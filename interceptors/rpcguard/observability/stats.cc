// Copyright rpcguard authors.
//
// Stats: recording, snapshots and the export to metric families and
// Prometheus' text. One file though it is over 600 lines: the three halves
// share the per-series layout (MethodHandle's arrays, their bucket bounds
// and indexes) and must change together; split, a new counter would be
// added in one and forgotten in another. Reading order: Record (the hot
// path), Snapshot, then ToMetricFamilies and the text writer.

#include "rpcguard/observability/stats.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, kRelaxed);
}

int ReasonIndex(GiveUpReason reason) {
  const int i = static_cast<int>(reason);
  return i >= 0 && i < kNumGiveUpReasons ? i : 0;
}

std::map<GiveUpReason, uint64_t> ReasonMap(
    const std::array<std::atomic<uint64_t>, kNumGiveUpReasons>& counters) {
  std::map<GiveUpReason, uint64_t> out;
  for (size_t i = 0; i < counters.size(); ++i) {
    const uint64_t n = counters[i].load(kRelaxed);
    if (n != 0) out[static_cast<GiveUpReason>(i)] = n;
  }
  return out;
}

int CodeIndex(grpc::StatusCode code) {
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? i : static_cast<int>(grpc::StatusCode::UNKNOWN);
}

template <size_t N>
std::map<int, uint64_t> CodeMap(const std::array<std::atomic<uint64_t>, N>& c) {
  std::map<int, uint64_t> out;
  for (size_t i = 0; i < N; ++i) {
    const uint64_t n = c[i].load(kRelaxed);
    if (n != 0) out[static_cast<int>(i)] = n;
  }
  return out;
}

// The bucket of `d` among bounds in seconds: the first bound >= d, or the
// +Inf bucket. A negative duration counts as zero.
template <size_t N>
size_t BucketOf(absl::Duration d, const std::array<double, N>& bounds) {
  const double s = absl::ToDoubleSeconds(d);
  size_t i = 0;
  while (i < N && s > bounds[i]) ++i;
  return i;
}

// kDurationBucketsSeconds in nanoseconds, rounded to the nearest one.
constexpr std::array<uint64_t, kDurationBucketsSeconds.size()>
    kDurationBucketsNanos = [] {
      std::array<uint64_t, kDurationBucketsSeconds.size()> ns{};
      for (size_t i = 0; i < ns.size(); ++i) {
        ns[i] = static_cast<uint64_t>(kDurationBucketsSeconds[i] * 1e9 + 0.5);
      }
      return ns;
    }();

// A duration as the duration histograms count it: its bucket and its
// nanoseconds (negative as zero, capped at a year), from one conversion (a
// call's no-failure path records two).
struct DurationSample {
  size_t bucket = 0;
  uint64_t nanos = 0;
};

DurationSample SampleOf(absl::Duration d) {
  constexpr int64_t kYear = int64_t{365} * 24 * 3600 * 1000000000;
  const int64_t ns = absl::ToInt64Nanoseconds(d);  // saturates
  DurationSample s;
  s.nanos = ns <= 0 ? 0 : static_cast<uint64_t>(std::min(ns, kYear));
  while (s.bucket < kDurationBucketsNanos.size() &&
         s.nanos > kDurationBucketsNanos[s.bucket]) {
    ++s.bucket;
  }
  return s;
}

template <size_t N>
HistogramSnapshot MakeHistogram(const std::array<std::atomic<uint64_t>, N>& b,
                                std::vector<double> bounds, double sum) {
  HistogramSnapshot h;
  h.bounds = std::move(bounds);
  uint64_t running = 0;
  for (size_t i = 0; i < N; ++i) {
    running += b[i].load(kRelaxed);
    if (i < h.bounds.size()) h.cumulative.push_back(running);
  }
  h.count = running;
  h.sum = sum;
  return h;
}

// The shortest text that reads back as `v`: "0.0025", not
// "0.0025000000000000001"; integers without a decimal point.
std::string FormatDouble(double v) {
  for (int precision = 6; precision < 17; ++precision) {
    std::string s = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

// Label values escape backslash, double quote and newline (the exposition
// format's only three).
std::string EscapeLabel(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void Family(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
}

void Histogram(std::string* out, absl::string_view name,
               absl::string_view labels, const HistogramSnapshot& h) {
  // Labels are never empty for a histogram here (method and target).
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    absl::StrAppend(out, name, "_bucket{", labels, ",le=\"",
                    FormatDouble(h.bounds[i]), "\"} ", h.cumulative[i], "\n");
  }
  absl::StrAppend(out, name, "_bucket{", labels, ",le=\"+Inf\"} ", h.count,
                  "\n");
  absl::StrAppend(out, name, "_sum{", labels, "} ", FormatDouble(h.sum), "\n");
  absl::StrAppend(out, name, "_count{", labels, "} ", h.count, "\n");
}

}  // namespace

// Guarded by Stats::mu_ (transitions are rare).
struct Stats::BreakerCounters {
  std::array<uint64_t, kNumBreakerStates> transitions_to{};
  // The state of the last transition: only closed keys are dropped.
  std::optional<BreakerState> last_to;
};

Stats::Stats() : Stats(StatsOptions()) {}
Stats::Stats(StatsOptions options) : options_(options) {}
Stats::~Stats() = default;

Stats::MethodHandle* Stats::ForMethod(absl::string_view method) {
  return ForMethod(method, absl::string_view());
}

Stats::MethodHandle* Stats::ForMethod(absl::string_view method,
                                      absl::string_view target) {
  // '\0' cannot be in a method name (an HTTP/2 path) and keeps "a"+"bc"
  // apart from "ab"+"c".
  const std::string key =
      absl::StrCat(method, absl::string_view("\0", 1), target);
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = methods_.find(key);
    if (it != methods_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  auto it = methods_.find(key);
  if (it != methods_.end()) return it->second.get();
  if (methods_.size() >= options_.max_series) {
    ++overflows_;
    if (other_ == nullptr) {
      other_ = std::make_unique<MethodHandle>();
      other_->method = std::string(kOther);
      other_->target = std::string(kOther);
    }
    return other_.get();
  }
  auto handle = std::make_unique<MethodHandle>();
  handle->method = std::string(method);
  handle->target = std::string(target);
  MethodHandle* raw = handle.get();
  methods_.emplace(key, std::move(handle));
  return raw;
}

void Stats::RecordCallStarted(MethodHandle* h) { Add(h->calls_started); }
void Stats::RecordAttemptStarted(MethodHandle* h) { Add(h->attempts_started); }

void Stats::RecordAttemptEnded(MethodHandle* h, grpc::StatusCode code,
                               absl::Duration duration) {
  Add(h->attempts);
  Add(h->attempts_by_code[CodeIndex(code)]);
  const DurationSample sample = SampleOf(duration);
  Add(h->attempt_duration[sample.bucket]);
  Add(h->attempt_duration_ns, sample.nanos);
}

void Stats::WatchBudget(absl::string_view key,
                        std::weak_ptr<RetryBudget> budget) {
  absl::MutexLock lock(&mu_);
  if (budgets_.size() >= budgets_sweep_at_ && !budgets_.contains(key)) {
    // A weak_ptr keeps a make_shared budget's memory: drop the budgets the
    // registry forgot, amortized O(1) per new key, as for breakers.
    absl::erase_if(budgets_,
                   [](const auto& entry) { return entry.second.expired(); });
    budgets_sweep_at_ = std::max(kMinBreakersSweepAt, 2 * budgets_.size());
  }
  budgets_[key] = std::move(budget);
}

void Stats::Record(const TraceEvent& event) {
  if (event.kind == TraceEvent::Kind::kBreakerTransition) {
    RecordTransition(event);
    return;
  }
  Record(ForMethod(event.method), event);
}

void Stats::RecordRetry(MethodHandle* h, absl::Duration delay) {
  Add(h->retries);
  delay = std::max(delay, absl::ZeroDuration());
  const double ms = absl::ToDoubleMilliseconds(delay);
  size_t bucket = 0;
  while (bucket < kRetryDelayBucketsMs.size() &&
         ms > kRetryDelayBucketsMs[bucket]) {
    ++bucket;
  }
  Add(h->delay_buckets[bucket]);
  Add(h->delay_sum_us, static_cast<uint64_t>(absl::ToInt64Microseconds(
                           std::min(delay, absl::Hours(24 * 365)))));
}

void Stats::RecordCallEnded(MethodHandle* h, const CallEnd& end) {
  Add(h->calls);
  Add(h->calls_by_code[CodeIndex(end.code)]);
  const DurationSample sample = SampleOf(end.duration);
  Add(h->call_duration[sample.bucket]);
  Add(h->call_duration_ns, sample.nanos);
  if (end.reason != GiveUpReason::kNone) {
    const int reason = ReasonIndex(end.reason);
    Add(h->give_ups[reason]);
    if (end.fail_fast) Add(h->fail_fasts[reason]);
  }
  if (end.commit.has_value()) {
    Add(h->commits[static_cast<size_t>(*end.commit)]);
  }
  const int attempts = std::max(end.attempts, 0);
  Add(h->attempts_buckets[std::min(std::max(attempts, 1), 11) - 1]);
  Add(h->attempts_sum, static_cast<uint64_t>(attempts));
  if (attempts > 1 && end.retried) {
    Add(h->retries_per_call[BucketOf(absl::Seconds(attempts - 1),
                                     kPerCallBuckets)]);
    Add(h->retries_per_call_sum, static_cast<uint64_t>(attempts - 1));
  }
}

void Stats::Record(MethodHandle* h, const TraceEvent& event) {
  CallEnd end;
  end.code = event.code;
  end.duration = event.call_duration;
  switch (event.kind) {
    case TraceEvent::Kind::kBreakerTransition:
      RecordTransition(event);
      return;
    case TraceEvent::Kind::kHedge:
      // Counted by RecordHedgedCall, when the call ends.
      return;
    case TraceEvent::Kind::kFailFast:
      // A refusal fails: its reason is never kNone (the engine writes
      // kFatal for want of one).
      end.reason = event.reason == GiveUpReason::kNone ? GiveUpReason::kFatal
                                                       : event.reason;
      end.fail_fast = true;
      end.attempts = std::max(event.attempt - 1, 0);
      end.retried = event.copy == 0;
      RecordCallEnded(h, end);
      return;
    case TraceEvent::Kind::kAttempt:
      break;
  }
  RecordAttemptEnded(h, event.code, event.attempt_duration);
  switch (event.decision) {
    case TraceDecision::kHedge:
      // A hedged call's copy failed and the call goes on: not its end.
      return;
    case TraceDecision::kRetry:
      RecordRetry(h, event.backoff);
      return;
    case TraceDecision::kGiveUp:
      end.reason = event.reason;
      break;
    case TraceDecision::kDone:
      break;
  }
  end.commit = event.commit;
  end.attempts = std::max(event.attempt, 0);
  end.retried = event.copy == 0 && event.cancelled.empty();
  RecordCallEnded(h, end);
}

void Stats::RecordTransition(const TraceEvent& event) {
  const std::optional<BreakerState> to = ParseBreakerState(event.to_state);
  if (to.has_value()) RecordTransition(event.breaker_key, *to);
}

void Stats::RecordTransition(absl::string_view key, BreakerState to) {
  absl::MutexLock lock(&mu_);
  auto it = breakers_.find(key);
  if (it == breakers_.end()) {
    if (breakers_.size() >= breakers_sweep_at_) {
      // Amortized O(1) per new key, as in the breaker registry.
      for (auto b = breakers_.begin(); b != breakers_.end();) {
        if (b->second->last_to == BreakerState::kClosed) {
          breakers_.erase(b++);
        } else {
          ++b;
        }
      }
      breakers_sweep_at_ = std::max(kMinBreakersSweepAt, 2 * breakers_.size());
    }
    it =
        breakers_.emplace(std::string(key), std::make_unique<BreakerCounters>())
            .first;
  }
  ++it->second->transitions_to[static_cast<int>(to)];
  it->second->last_to = to;
}

size_t Stats::breaker_keys() const {
  absl::ReaderMutexLock lock(&mu_);
  return breakers_.size();
}

size_t Stats::method_keys() const {
  absl::ReaderMutexLock lock(&mu_);
  return methods_.size() + (other_ != nullptr ? 1 : 0);
}

void Stats::RecordHedgedCall(MethodHandle* h, int copies, bool later_copy_won,
                             int cancelled, absl::Duration delay) {
  Add(h->hedged_calls);
  if (copies > 1) {
    h->hedges.fetch_add(copies - 1, kRelaxed);
    Add(h->hedges_per_call[BucketOf(absl::Seconds(copies - 1),
                                    kPerCallBuckets)]);
  }
  if (later_copy_won) h->hedges_won.fetch_add(1, kRelaxed);
  if (cancelled > 0) h->copies_cancelled.fetch_add(cancelled, kRelaxed);
  h->hedge_delay_ns.store(absl::ToInt64Nanoseconds(delay), kRelaxed);
}

MethodStatsSnapshot Stats::SnapshotOf(const MethodHandle& h) {
  // The bounds are the instruments' (instruments.h).
  const auto bounds = [](Instrument i) { return InstrumentBuckets(i); };
  MethodStatsSnapshot m;
  m.method = h.method;
  m.target = h.target;
  m.calls_started = h.calls_started.load(kRelaxed);
  m.calls = h.calls.load(kRelaxed);
  m.calls_by_code = CodeMap(h.calls_by_code);
  m.attempts_started = h.attempts_started.load(kRelaxed);
  m.attempts = h.attempts.load(kRelaxed);
  m.attempts_by_code = CodeMap(h.attempts_by_code);
  m.retries = h.retries.load(kRelaxed);
  for (int i = 0; i < kNumCommitReasons; ++i) {
    if (const uint64_t n = h.commits[i].load(kRelaxed)) {
      m.commits[static_cast<CommitReason>(i)] = n;
    }
  }
  m.give_ups = ReasonMap(h.give_ups);
  m.fail_fasts = ReasonMap(h.fail_fasts);
  m.call_duration =
      MakeHistogram(h.call_duration, bounds(Instrument::kCallDuration),
                    h.call_duration_ns.load(kRelaxed) / 1e9);
  m.attempt_duration =
      MakeHistogram(h.attempt_duration, bounds(Instrument::kAttemptDuration),
                    h.attempt_duration_ns.load(kRelaxed) / 1e9);
  m.retries_per_call =
      MakeHistogram(h.retries_per_call, bounds(Instrument::kCallRetries),
                    static_cast<double>(h.retries_per_call_sum.load(kRelaxed)));
  m.retry_delay =
      MakeHistogram(h.delay_buckets, bounds(Instrument::kRetryDelay),
                    h.delay_sum_us.load(kRelaxed) / 1e6);
  m.attempts_per_call =
      MakeHistogram(h.attempts_buckets, bounds(Instrument::kAttemptsPerCall),
                    static_cast<double>(h.attempts_sum.load(kRelaxed)));
  m.hedged_calls = h.hedged_calls.load(kRelaxed);
  m.hedges = h.hedges.load(kRelaxed);
  m.hedges_per_call =
      MakeHistogram(h.hedges_per_call, bounds(Instrument::kCallHedges),
                    static_cast<double>(m.hedges));
  m.hedges_won = h.hedges_won.load(kRelaxed);
  m.copies_cancelled = h.copies_cancelled.load(kRelaxed);
  m.hedge_delay_seconds =
      static_cast<double>(h.hedge_delay_ns.load(kRelaxed)) / 1e9;
  return m;
}

StatsSnapshot Stats::Snapshot() const {
  StatsSnapshot snap;
  std::vector<std::pair<std::string, std::shared_ptr<RetryBudget>>> budgets;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [key, h] : methods_) {
      snap.methods.push_back(SnapshotOf(*h));
    }
    if (other_ != nullptr) snap.methods.push_back(SnapshotOf(*other_));
    snap.series_overflows = overflows_;
    for (const auto& [key, b] : breakers_) {
      BreakerStatsSnapshot s;
      s.key = key;
      for (int i = 0; i < kNumBreakerStates; ++i) {
        if (b->transitions_to[i] == 0) continue;
        s.transitions_to.emplace(
            std::string(BreakerStateName(static_cast<BreakerState>(i))),
            b->transitions_to[i]);
      }
      if (b->last_to.has_value()) {
        s.state = std::string(BreakerStateName(*b->last_to));
      }
      snap.breakers.push_back(std::move(s));
    }
    for (const auto& [key, weak] : budgets_) {
      if (auto b = weak.lock()) budgets.emplace_back(key, std::move(b));
    }
  }
  // Outside mu_: each budget takes its own lock.
  for (auto& [key, budget] : budgets) {
    BudgetStatsSnapshot b;
    b.key = key;
    b.budget = budget->Snapshot();
    b.balance = b.budget.allowance - static_cast<double>(b.budget.retries);
    snap.budgets.push_back(std::move(b));
  }
  std::sort(snap.methods.begin(), snap.methods.end(),
            [](const auto& a, const auto& b) {
              return std::tie(a.method, a.target) <
                     std::tie(b.method, b.target);
            });
  std::sort(snap.breakers.begin(), snap.breakers.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  std::sort(snap.budgets.begin(), snap.budgets.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  return snap;
}

const MethodStatsSnapshot* StatsSnapshot::FindMethod(
    absl::string_view method) const {
  for (const MethodStatsSnapshot& m : methods) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

const MethodStatsSnapshot* StatsSnapshot::FindSeries(
    absl::string_view method, absl::string_view target) const {
  for (const MethodStatsSnapshot& m : methods) {
    if (m.method == method && m.target == target) return &m;
  }
  return nullptr;
}

const BreakerStatsSnapshot* StatsSnapshot::FindBreaker(
    absl::string_view key) const {
  for (const BreakerStatsSnapshot& b : breakers) {
    if (b.key == key) return &b;
  }
  return nullptr;
}

MetricFamilyData& AppendFamily(Instrument id,
                               std::vector<MetricFamilyData>* out) {
  const InstrumentInfo& info = InstrumentInfoOf(id);
  MetricFamilyData& f = out->emplace_back();
  f.name = std::string(info.name);
  f.type = info.type;
  f.help = std::string(info.help);
  return f;
}

std::vector<MetricFamilyData> ToMetricFamilies(const StatsSnapshot& snapshot) {
  std::vector<MetricFamilyData> out;
  const auto family = [&out](Instrument id) -> MetricFamilyData& {
    return AppendFamily(id, &out);
  };
  const auto series = [](const MethodStatsSnapshot& m) {
    return MetricLabels{{"method", m.method}, {"target", m.target}};
  };
  const auto with = [](MetricLabels labels, absl::string_view name,
                       absl::string_view value) {
    labels.emplace_back(std::string(name), std::string(value));
    return labels;
  };
  // One sample per series; `skip_zero` leaves out a zero value.
  const auto counter = [&](Instrument id, uint64_t MethodStatsSnapshot::*field,
                           bool skip_zero) {
    MetricFamilyData& f = family(id);
    for (const MethodStatsSnapshot& m : snapshot.methods) {
      if (skip_zero && m.*field == 0) continue;
      f.samples.push_back({series(m), static_cast<double>(m.*field), {}});
    }
  };
  const auto by_code =
      [&](Instrument id, std::map<int, uint64_t> MethodStatsSnapshot::*field) {
        MetricFamilyData& f = family(id);
        for (const MethodStatsSnapshot& m : snapshot.methods) {
          for (const auto& [code, n] : m.*field) {
            f.samples.push_back(
                {with(series(m), "code",
                      StatusCodeName(static_cast<grpc::StatusCode>(code))),
                 static_cast<double>(n),
                 {}});
          }
        }
      };
  const auto by_reason =
      [&](Instrument id,
          std::map<GiveUpReason, uint64_t> MethodStatsSnapshot::*field) {
        MetricFamilyData& f = family(id);
        for (const MethodStatsSnapshot& m : snapshot.methods) {
          for (const auto& [reason, n] : m.*field) {
            f.samples.push_back(
                {with(series(m), "reason", GiveUpReasonName(reason)),
                 static_cast<double>(n),
                 {}});
          }
        }
      };
  const auto histogram = [&](Instrument id,
                             HistogramSnapshot MethodStatsSnapshot::*field) {
    MetricFamilyData& f = family(id);
    for (const MethodStatsSnapshot& m : snapshot.methods) {
      if ((m.*field).count == 0) continue;
      f.samples.push_back({series(m), 0, m.*field});
    }
  };

  counter(Instrument::kCallsStarted, &MethodStatsSnapshot::calls_started,
          false);
  by_code(Instrument::kCalls, &MethodStatsSnapshot::calls_by_code);
  counter(Instrument::kAttemptsStarted, &MethodStatsSnapshot::attempts_started,
          false);
  by_code(Instrument::kAttempts, &MethodStatsSnapshot::attempts_by_code);
  histogram(Instrument::kCallDuration, &MethodStatsSnapshot::call_duration);
  histogram(Instrument::kAttemptDuration,
            &MethodStatsSnapshot::attempt_duration);
  counter(Instrument::kRetries, &MethodStatsSnapshot::retries, false);
  histogram(Instrument::kCallRetries, &MethodStatsSnapshot::retries_per_call);
  histogram(Instrument::kRetryDelay, &MethodStatsSnapshot::retry_delay);
  histogram(Instrument::kAttemptsPerCall,
            &MethodStatsSnapshot::attempts_per_call);
  by_reason(Instrument::kGiveUps, &MethodStatsSnapshot::give_ups);
  {
    MetricFamilyData& f = family(Instrument::kStreamCommits);
    for (const MethodStatsSnapshot& m : snapshot.methods) {
      for (const auto& [reason, n] : m.commits) {
        f.samples.push_back(
            {with(series(m), "reason", CommitReasonName(reason)),
             static_cast<double>(n),
             {}});
      }
    }
  }
  by_reason(Instrument::kFailFasts, &MethodStatsSnapshot::fail_fasts);
  histogram(Instrument::kCallHedges, &MethodStatsSnapshot::hedges_per_call);
  counter(Instrument::kHedges, &MethodStatsSnapshot::hedges, true);
  counter(Instrument::kHedgesWon, &MethodStatsSnapshot::hedges_won, true);
  counter(Instrument::kCopiesCancelled, &MethodStatsSnapshot::copies_cancelled,
          true);
  {
    MetricFamilyData& f = family(Instrument::kHedgeDelay);
    for (const MethodStatsSnapshot& m : snapshot.methods) {
      if (m.hedged_calls == 0) continue;
      f.samples.push_back({series(m), m.hedge_delay_seconds, {}});
    }
  }
  {
    MetricFamilyData& state = family(Instrument::kBreakerState);
    MetricFamilyData& to = family(Instrument::kBreakerTransitions);
    for (const BreakerStatsSnapshot& b : snapshot.breakers) {
      if (!b.state.empty()) {
        state.samples.push_back(
            {{{"breaker", b.key}, {"state", b.state}}, 1, {}});
      }
      for (const auto& [state_to, n] : b.transitions_to) {
        to.samples.push_back({{{"breaker", b.key}, {"to", state_to}},
                              static_cast<double>(n),
                              {}});
      }
    }
  }
  const auto budget = [&](Instrument id, auto value) {
    MetricFamilyData& f = family(id);
    for (const BudgetStatsSnapshot& b : snapshot.budgets) {
      f.samples.push_back(
          {{{"budget", b.key}}, static_cast<double>(value(b)), {}});
    }
  };
  budget(Instrument::kBudgetBalance,
         [](const BudgetStatsSnapshot& b) { return b.balance; });
  budget(Instrument::kBudgetRetriesInFlight, [](const BudgetStatsSnapshot& b) {
    return b.budget.unpaid_in_flight;
  });
  budget(Instrument::kBudgetRefunds,
         [](const BudgetStatsSnapshot& b) { return b.budget.refunded; });
  budget(Instrument::kBudgetFreeRetries,
         [](const BudgetStatsSnapshot& b) { return b.budget.free; });
  budget(Instrument::kBudgetRefusals,
         [](const BudgetStatsSnapshot& b) { return b.budget.refused; });
  family(Instrument::kSeriesOverflows)
      .samples.push_back(
          {{}, static_cast<double>(snapshot.series_overflows), {}});
  return out;
}

std::string ToPrometheusText(const StatsSnapshot& snapshot) {
  return ToPrometheusText(ToMetricFamilies(snapshot));
}

std::string ToPrometheusText(const std::vector<MetricFamilyData>& families) {
  std::string out;
  std::string labels;
  for (const MetricFamilyData& f : families) {
    absl::string_view type =
        f.type == MetricFamilyData::Type::kCounter ? "counter"
        : f.type == MetricFamilyData::Type::kGauge ? "gauge"
                                                   : "histogram";
    Family(&out, f.name, type, f.help);
    for (const MetricSample& s : f.samples) {
      labels.clear();
      for (const auto& [name, value] : s.labels) {
        absl::StrAppend(&labels, labels.empty() ? "" : ",", name, "=\"",
                        EscapeLabel(value), "\"");
      }
      if (f.type == MetricFamilyData::Type::kHistogram) {
        Histogram(&out, f.name, labels, s.histogram);
      } else if (labels.empty()) {
        absl::StrAppend(&out, f.name, " ", FormatDouble(s.value), "\n");
      } else {
        absl::StrAppend(&out, f.name, "{", labels, "} ", FormatDouble(s.value),
                        "\n");
      }
    }
  }
  return out;
}

}  // namespace rpcguard
