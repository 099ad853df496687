// Copyright rpcguard authors.

#include "rpcguard/observability/instruments.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rpcguard/observability/stats.h"

namespace rpcguard {
namespace {

constexpr std::array<InstrumentInfo, kNumInstruments> kInstruments = {{
#define RPCGUARD_INSTRUMENT_INFO(id, name, type, labels, help, mirrors) \
  {Instrument::k##id, name, MetricType::type, labels, help, mirrors},
    RPCGUARD_INSTRUMENTS(RPCGUARD_INSTRUMENT_INFO)
#undef RPCGUARD_INSTRUMENT_INFO
}};

// `a` divided by `divisor` (milliseconds to seconds: 1000), as the export
// writes it: divided, so 2.5 ms is exactly the double 0.0025 reads as.
template <size_t N>
std::vector<double> Scaled(const std::array<double, N>& a, double divisor) {
  std::vector<double> v;
  for (double x : a) v.push_back(x / divisor);
  return v;
}

absl::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      break;
  }
  return "histogram";
}

}  // namespace

const InstrumentInfo& InstrumentInfoOf(Instrument id) {
  return kInstruments[static_cast<size_t>(id)];
}

const std::vector<double>& InstrumentBuckets(Instrument id) {
  // Built once; never destroyed (read by snapshots at any time).
  static const auto* const buckets = [] {
    auto* b = new std::array<std::vector<double>, kNumInstruments>();
    const auto set = [b](Instrument i, std::vector<double> v) {
      (*b)[static_cast<size_t>(i)] = std::move(v);
    };
    set(Instrument::kCallDuration, Scaled(kDurationBucketsSeconds, 1));
    set(Instrument::kAttemptDuration, Scaled(kDurationBucketsSeconds, 1));
    set(Instrument::kCallRetries, Scaled(kPerCallBuckets, 1));
    set(Instrument::kCallHedges, Scaled(kPerCallBuckets, 1));
    set(Instrument::kRetryDelay, Scaled(kRetryDelayBucketsMs, 1000));
    std::vector<double> attempts;
    for (int i = 1; i <= kAttemptsBuckets; ++i) attempts.push_back(i);
    set(Instrument::kAttemptsPerCall, std::move(attempts));
    return b;
  }();
  return (*buckets)[static_cast<size_t>(id)];
}

std::string InstrumentsMarkdownTable() {
  std::string out =
      "| metric | type | labels | buckets (upper bounds; +Inf implied) | "
      "mirrors |\n|---|---|---|---|---|\n";
  for (const InstrumentInfo& i : kInstruments) {
    std::vector<std::string> labels;
    for (absl::string_view l :
         absl::StrSplit(i.labels, ',', absl::SkipEmpty())) {
      labels.push_back(absl::StrCat("`", l, "`"));
    }
    absl::StrAppend(&out, "| `", i.name, "` | ", TypeName(i.type), " | ",
                    absl::StrJoin(labels, ", "), " | ",
                    absl::StrJoin(InstrumentBuckets(i.id), ", "), " | ",
                    i.mirrors.empty() ? "(none)" : i.mirrors, " |\n");
  }
  return out;
}

}  // namespace rpcguard
