// Copyright rpcguard authors.

#include "rpcguard/observability/stats.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
  std::map<std::string, uint64_t> transitions_to;
  // The state of the last transition: only "closed" keys are dropped.
  std::string last_to;
};

Stats::Stats() = default;
Stats::~Stats() = default;

Stats::MethodHandle* Stats::ForMethod(absl::string_view method) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = methods_.find(method);
    if (it != methods_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<MethodHandle>& slot = methods_[method];
  if (slot == nullptr) slot = std::make_unique<MethodHandle>();
  return slot.get();
}

void Stats::Record(const TraceEvent& event) {
  if (event.kind == TraceEvent::Kind::kBreakerTransition) {
    RecordTransition(event);
    return;
  }
  Record(ForMethod(event.method), event);
}

void Stats::Record(MethodHandle* h, const TraceEvent& event) {
  switch (event.kind) {
    case TraceEvent::Kind::kBreakerTransition:
      RecordTransition(event);
      return;
    case TraceEvent::Kind::kFailFast: {
      const int reason = ReasonIndex(event.reason);
      Add(h->calls);
      Add(h->fail_fasts[reason]);
      Add(h->give_ups[reason]);
      const int sent = std::max(event.attempt - 1, 0);
      Add(h->attempts_buckets[std::min(std::max(sent, 1), 11) - 1]);
      Add(h->attempts_sum, static_cast<uint64_t>(sent));
      return;
    }
    case TraceEvent::Kind::kHedge:
      // Counted by RecordHedgedCall, when the call ends.
      return;
    case TraceEvent::Kind::kAttempt:
      break;
  }
  Add(h->attempts);
  // A hedged call's copy failed and the call goes on: not its end.
  if (event.decision == TraceDecision::kHedge) return;
  if (event.decision == TraceDecision::kRetry) {
    Add(h->retries);
    const absl::Duration delay = std::max(event.backoff, absl::ZeroDuration());
    const double ms = absl::ToDoubleMilliseconds(delay);
    size_t bucket = 0;
    while (bucket < kRetryDelayBucketsMs.size() &&
           ms > kRetryDelayBucketsMs[bucket]) {
      ++bucket;
    }
    Add(h->delay_buckets[bucket]);
    Add(h->delay_sum_us, static_cast<uint64_t>(absl::ToInt64Microseconds(
                             std::min(delay, absl::Hours(24 * 365)))));
    return;
  }
  // The call's terminal event.
  Add(h->calls);
  if (event.decision == TraceDecision::kGiveUp) {
    Add(h->give_ups[ReasonIndex(event.reason)]);
  }
  const int attempts = std::max(event.attempt, 0);
  Add(h->attempts_buckets[std::min(std::max(attempts, 1), 11) - 1]);
  Add(h->attempts_sum, static_cast<uint64_t>(attempts));
}

void Stats::RecordTransition(const TraceEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = breakers_.find(event.breaker_key);
  if (it == breakers_.end()) {
    if (breakers_.size() >= breakers_sweep_at_) {
      // Amortized O(1) per new key, as in the breaker registry.
      for (auto b = breakers_.begin(); b != breakers_.end();) {
        if (b->second->last_to == "closed") {
          breakers_.erase(b++);
        } else {
          ++b;
        }
      }
      breakers_sweep_at_ = std::max(kMinBreakersSweepAt, 2 * breakers_.size());
    }
    it = breakers_
             .emplace(event.breaker_key, std::make_unique<BreakerCounters>())
             .first;
  }
  ++it->second->transitions_to[event.to_state];
  it->second->last_to = event.to_state;
}

size_t Stats::breaker_keys() const {
  absl::ReaderMutexLock lock(&mu_);
  return breakers_.size();
}

size_t Stats::method_keys() const {
  absl::ReaderMutexLock lock(&mu_);
  return methods_.size();
}

void Stats::RecordHedgedCall(MethodHandle* h, int copies, bool later_copy_won,
                             int cancelled, absl::Duration delay) {
  if (copies > 1) h->hedges.fetch_add(copies - 1, kRelaxed);
  if (later_copy_won) h->hedges_won.fetch_add(1, kRelaxed);
  if (cancelled > 0) h->copies_cancelled.fetch_add(cancelled, kRelaxed);
  h->hedge_delay_ns.store(absl::ToInt64Nanoseconds(delay), kRelaxed);
}

StatsSnapshot Stats::Snapshot() const {
  std::vector<double> delay_bounds;
  for (double ms : kRetryDelayBucketsMs) delay_bounds.push_back(ms / 1000);
  std::vector<double> attempts_bounds;
  for (int i = 1; i <= kAttemptsBuckets; ++i) attempts_bounds.push_back(i);

  StatsSnapshot snap;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [name, h] : methods_) {
    MethodStatsSnapshot m;
    m.method = name;
    m.calls = h->calls.load(kRelaxed);
    m.attempts = h->attempts.load(kRelaxed);
    m.retries = h->retries.load(kRelaxed);
    m.give_ups = ReasonMap(h->give_ups);
    m.fail_fasts = ReasonMap(h->fail_fasts);
    m.retry_delay = MakeHistogram(h->delay_buckets, delay_bounds,
                                  h->delay_sum_us.load(kRelaxed) / 1e6);
    m.attempts_per_call =
        MakeHistogram(h->attempts_buckets, attempts_bounds,
                      static_cast<double>(h->attempts_sum.load(kRelaxed)));
    m.hedges = h->hedges.load(kRelaxed);
    m.hedges_won = h->hedges_won.load(kRelaxed);
    m.copies_cancelled = h->copies_cancelled.load(kRelaxed);
    m.hedge_delay_seconds =
        static_cast<double>(h->hedge_delay_ns.load(kRelaxed)) / 1e9;
    snap.methods.push_back(std::move(m));
  }
  for (const auto& [key, b] : breakers_) {
    BreakerStatsSnapshot s;
    s.key = key;
    s.transitions_to = b->transitions_to;
    snap.breakers.push_back(std::move(s));
  }
  std::sort(snap.methods.begin(), snap.methods.end(),
            [](const auto& a, const auto& b) { return a.method < b.method; });
  std::sort(snap.breakers.begin(), snap.breakers.end(),
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

const BreakerStatsSnapshot* StatsSnapshot::FindBreaker(
    absl::string_view key) const {
  for (const BreakerStatsSnapshot& b : breakers) {
    if (b.key == key) return &b;
  }
  return nullptr;
}

std::string ToPrometheusText(const StatsSnapshot& snapshot) {
  std::string out;
  std::vector<std::string> labels;  // method="..." per method
  for (const MethodStatsSnapshot& m : snapshot.methods) {
    labels.push_back(absl::StrCat("method=\"", EscapeLabel(m.method), "\""));
  }
  const auto counter = [&](absl::string_view name, absl::string_view help,
                           uint64_t MethodStatsSnapshot::*field) {
    Family(&out, name, "counter", help);
    for (size_t i = 0; i < snapshot.methods.size(); ++i) {
      absl::StrAppend(&out, name, "{", labels[i], "} ",
                      snapshot.methods[i].*field, "\n");
    }
  };
  const auto by_reason =
      [&](absl::string_view name, absl::string_view help,
          std::map<GiveUpReason, uint64_t> MethodStatsSnapshot::*field) {
        Family(&out, name, "counter", help);
        for (size_t i = 0; i < snapshot.methods.size(); ++i) {
          for (const auto& [reason, n] : snapshot.methods[i].*field) {
            absl::StrAppend(&out, name, "{", labels[i], ",reason=\"",
                            GiveUpReasonName(reason), "\"} ", n, "\n");
          }
        }
      };
  const auto histogram = [&](absl::string_view name, absl::string_view help,
                             HistogramSnapshot MethodStatsSnapshot::*field) {
    Family(&out, name, "histogram", help);
    for (size_t i = 0; i < snapshot.methods.size(); ++i) {
      Histogram(&out, name, labels[i], snapshot.methods[i].*field);
    }
  };

  counter("rpcguard_calls_total", "Calls that ended.",
          &MethodStatsSnapshot::calls);
  counter("rpcguard_attempts_total", "Attempts that ended.",
          &MethodStatsSnapshot::attempts);
  counter("rpcguard_retries_total", "Attempts followed by a retry.",
          &MethodStatsSnapshot::retries);
  by_reason("rpcguard_give_ups_total", "Calls that gave up, by reason.",
            &MethodStatsSnapshot::give_ups);
  by_reason("rpcguard_fail_fasts_total",
            "Calls ended without sending their next attempt, by reason.",
            &MethodStatsSnapshot::fail_fasts);
  histogram("rpcguard_retry_delay_seconds", "Backoff before each retry.",
            &MethodStatsSnapshot::retry_delay);
  histogram("rpcguard_attempts_per_call", "Attempts sent per call.",
            &MethodStatsSnapshot::attempts_per_call);
  counter("rpcguard_hedges_total", "Hedged copies sent after the first.",
          &MethodStatsSnapshot::hedges);
  counter("rpcguard_hedges_won_total",
          "Hedged calls decided by a copy after the first.",
          &MethodStatsSnapshot::hedges_won);
  counter("rpcguard_copies_cancelled_total",
          "Hedged copies cancelled because another decided the call.",
          &MethodStatsSnapshot::copies_cancelled);
  Family(&out, "rpcguard_hedge_delay_seconds", "gauge",
         "The hedge delay the method's last hedged call used.");
  for (size_t i = 0; i < snapshot.methods.size(); ++i) {
    absl::StrAppend(&out, "rpcguard_hedge_delay_seconds{", labels[i], "} ",
                    snapshot.methods[i].hedge_delay_seconds, "\n");
  }

  Family(&out, "rpcguard_breaker_transitions_total", "counter",
         "Circuit breaker state changes, by the state entered.");
  for (const BreakerStatsSnapshot& b : snapshot.breakers) {
    for (const auto& [to, n] : b.transitions_to) {
      absl::StrAppend(&out, "rpcguard_breaker_transitions_total{breaker=\"",
                      EscapeLabel(b.key), "\",to=\"", EscapeLabel(to), "\"} ",
                      n, "\n");
    }
  }
  return out;
}

}  // namespace rpcguard
