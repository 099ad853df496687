// Copyright rpcguard authors.
//
// rpcguard's metrics for prometheus-cpp: a prometheus::Collectable that
// reads a Stats at every scrape, so that a process already serving
// /metrics with prometheus-cpp's Exposer serves rpcguard's metrics too:
//
//   prometheus::Exposer exposer("127.0.0.1:9464");
//   auto rpcguard_metrics = rpcguard::ExposeStats(exposer, stats);
//
// The metrics are those of ToPrometheusText (rpcguard/observability/
// stats.h, and docs/metrics.md), the same names, labels and values: both
// are built from ToMetricFamilies. The server interceptors' counters
// (rpcguard/server.h, ServerSignals) are process-wide, not a Stats': a
// server exposes them once, beside its Stats:
//
//   auto server_metrics = rpcguard::ExposeServerSignals(exposer);
//
// An optional library (Bazel //interceptors/rpcguard/prometheus, CMake
// option RPCGUARD_PROMETHEUS): the core rpcguard library does not depend on
// prometheus-cpp. Written against prometheus-cpp 1.0.1 (Debian 12's
// prometheus-cpp-dev).

#ifndef RPCGUARD_PROMETHEUS_COLLECTOR_H_
#define RPCGUARD_PROMETHEUS_COLLECTOR_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <memory>
#include <string>
#include <vector>

#include "rpcguard/observability/stats.h"
#include "rpcguard/server.h"

namespace rpcguard {

// Hands a Stats' metrics to prometheus-cpp at each Collect(). Thread-safe:
// Collect only takes a Snapshot of the Stats.
class StatsCollector final : public prometheus::Collectable {
 public:
  // `stats` must be non-null.
  explicit StatsCollector(std::shared_ptr<const Stats> stats);

  // A snapshot of the Stats as prometheus-cpp metric families.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::shared_ptr<const Stats> stats_;
};

// Hands the process's ServerSignals (ServerSignalsSnapshot) to prometheus-cpp
// at each Collect(). Thread-safe.
class ServerSignalsCollector final : public prometheus::Collectable {
 public:
  // rpcguard_server_stops_sent_total{reason} and
  // rpcguard_server_hedges_suppressed_total, now.
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// `families` (ToMetricFamilies) as prometheus-cpp metric families.
std::vector<prometheus::MetricFamily> ToPrometheusCpp(
    const std::vector<MetricFamilyData>& families);

// Registers a StatsCollector of `stats` (non-null) with `exposer` at `uri`
// and returns it. The Exposer holds collectables weakly: keep the returned
// pointer for as long as the metrics should be served; dropping it
// unregisters them at the next scrape.
[[nodiscard]] std::shared_ptr<StatsCollector> ExposeStats(
    prometheus::Exposer& exposer, std::shared_ptr<const Stats> stats,
    const std::string& uri = "/metrics");

// Registers a ServerSignalsCollector with `exposer` at `uri` and returns
// it, to keep as ExposeStats' is kept. Once per process: the signals are
// the process's, and two collectors would export each series twice.
[[nodiscard]] std::shared_ptr<ServerSignalsCollector> ExposeServerSignals(
    prometheus::Exposer& exposer, const std::string& uri = "/metrics");

}  // namespace rpcguard

#endif  // RPCGUARD_PROMETHEUS_COLLECTOR_H_
