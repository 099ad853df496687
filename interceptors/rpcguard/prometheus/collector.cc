// Copyright rpcguard authors.

#include "rpcguard/prometheus/collector.h"

#include <limits>
#include <utility>

namespace rpcguard {

StatsCollector::StatsCollector(std::shared_ptr<const Stats> stats)
    : stats_(std::move(stats)) {}

std::vector<prometheus::MetricFamily> StatsCollector::Collect() const {
  return ToPrometheusCpp(ToMetricFamilies(stats_->Snapshot()));
}

std::vector<prometheus::MetricFamily> ServerSignalsCollector::Collect() const {
  return ToPrometheusCpp(ToMetricFamilies(ServerSignalsSnapshot()));
}

std::vector<prometheus::MetricFamily> ToPrometheusCpp(
    const std::vector<MetricFamilyData>& families) {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families.size());
  for (const MetricFamilyData& f : families) {
    prometheus::MetricFamily& family = out.emplace_back();
    family.name = f.name;
    family.help = f.help;
    switch (f.type) {
      case MetricFamilyData::Type::kCounter:
        family.type = prometheus::MetricType::Counter;
        break;
      case MetricFamilyData::Type::kGauge:
        family.type = prometheus::MetricType::Gauge;
        break;
      case MetricFamilyData::Type::kHistogram:
        family.type = prometheus::MetricType::Histogram;
        break;
    }
    family.metric.reserve(f.samples.size());
    for (const MetricSample& s : f.samples) {
      prometheus::ClientMetric& metric = family.metric.emplace_back();
      for (const auto& [name, value] : s.labels) {
        metric.label.push_back({name, value});
      }
      switch (f.type) {
        case MetricFamilyData::Type::kCounter:
          metric.counter.value = s.value;
          break;
        case MetricFamilyData::Type::kGauge:
          metric.gauge.value = s.value;
          break;
        case MetricFamilyData::Type::kHistogram: {
          const HistogramSnapshot& h = s.histogram;
          metric.histogram.sample_count = h.count;
          metric.histogram.sample_sum = h.sum;
          for (size_t i = 0; i < h.bounds.size(); ++i) {
            metric.histogram.bucket.push_back({h.cumulative[i], h.bounds[i]});
          }
          // Explicit: prometheus-cpp writes the buckets it is given.
          metric.histogram.bucket.push_back(
              {h.count, std::numeric_limits<double>::infinity()});
          break;
        }
      }
    }
  }
  return out;
}

std::shared_ptr<StatsCollector> ExposeStats(prometheus::Exposer& exposer,
                                            std::shared_ptr<const Stats> stats,
                                            const std::string& uri) {
  auto collector = std::make_shared<StatsCollector>(std::move(stats));
  exposer.RegisterCollectable(collector, uri);
  return collector;
}

std::shared_ptr<ServerSignalsCollector> ExposeServerSignals(
    prometheus::Exposer& exposer, const std::string& uri) {
  auto collector = std::make_shared<ServerSignalsCollector>();
  exposer.RegisterCollectable(collector, uri);
  return collector;
}

}  // namespace rpcguard
