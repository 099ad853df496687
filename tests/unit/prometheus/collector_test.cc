// Copyright rpcguard authors.

#include "rpcguard/prometheus/collector.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace {

using ::testing::HasSubstr;

const prometheus::MetricFamily* Find(
    const std::vector<prometheus::MetricFamily>& families,
    const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::shared_ptr<Stats> OneRetriedCall() {
  auto stats = std::make_shared<Stats>();
  Stats::MethodHandle* h = stats->ForMethod("/pkg.Svc/M", "svc:443");
  Stats::RecordCallStarted(h);
  TraceEvent retry;
  retry.attempt = 1;
  retry.code = grpc::StatusCode::UNAVAILABLE;
  retry.decision = TraceDecision::kRetry;
  retry.backoff = absl::Milliseconds(7);
  retry.attempt_duration = absl::Milliseconds(3);
  stats->Record(h, retry);
  TraceEvent done;
  done.attempt = 2;
  done.attempt_duration = absl::Milliseconds(3);
  done.call_duration = absl::Milliseconds(13);
  stats->Record(h, done);
  return stats;
}

TEST(StatsCollectorTest, CollectCarriesTheStatsFamiliesAndValues) {
  StatsCollector collector(OneRetriedCall());
  const std::vector<prometheus::MetricFamily> families = collector.Collect();
  EXPECT_EQ(families.size(),
            ToMetricFamilies(OneRetriedCall()->Snapshot()).size());

  const prometheus::MetricFamily* calls =
      Find(families, "rpcguard_calls_total");
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls->type, prometheus::MetricType::Counter);
  ASSERT_EQ(calls->metric.size(), 1u);
  const auto& labels = calls->metric[0].label;
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_EQ(labels[0].name, "method");
  EXPECT_EQ(labels[0].value, "/pkg.Svc/M");
  EXPECT_EQ(labels[1].value, "svc:443");
  EXPECT_EQ(labels[2].value, "OK");
  EXPECT_EQ(calls->metric[0].counter.value, 1);

  const prometheus::MetricFamily* retries =
      Find(families, "rpcguard_call_retries");
  ASSERT_NE(retries, nullptr);
  EXPECT_EQ(retries->type, prometheus::MetricType::Histogram);
  const auto& h = retries->metric.at(0).histogram;
  EXPECT_EQ(h.sample_count, 1u);
  EXPECT_EQ(h.sample_sum, 1);
  ASSERT_EQ(h.bucket.size(), kPerCallBuckets.size() + 1);
  EXPECT_EQ(h.bucket[0].upper_bound, 1);
  EXPECT_EQ(h.bucket[0].cumulative_count, 1u);
  EXPECT_TRUE(std::isinf(h.bucket.back().upper_bound));
  EXPECT_EQ(h.bucket.back().cumulative_count, 1u);
}

TEST(StatsCollectorTest, PrometheusCppWritesOneInfBucketPerHistogram) {
  StatsCollector collector(OneRetriedCall());
  const std::string text =
      prometheus::TextSerializer().Serialize(collector.Collect());
  EXPECT_THAT(text, HasSubstr("rpcguard_calls_total{method=\"/pkg.Svc/M\","
                              "target=\"svc:443\",code=\"OK\"} 1"));
  const std::string inf =
      "rpcguard_call_retries_bucket{method=\"/pkg.Svc/M\",target=\"svc:443\","
      "le=\"+Inf\"} 1";
  const size_t first = text.find(inf);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(inf, first + 1), std::string::npos) << text;
}

TEST(ServerSignalsCollectorTest, ServerSignalsAreExportedLikeAStatsFamily) {
  ServerSignals signals;
  signals.stops_sent[static_cast<int>(GiveUpReason::kMaxAttempts)] = 3;
  signals.stops_sent[static_cast<int>(GiveUpReason::kBreakerOpen)] = 1;
  signals.hedges_suppressed = 2;
  const std::vector<prometheus::MetricFamily> families =
      ToPrometheusCpp(ToMetricFamilies(signals));
  const prometheus::MetricFamily* stops =
      Find(families, "rpcguard_server_stops_sent_total");
  ASSERT_NE(stops, nullptr);
  EXPECT_EQ(stops->type, prometheus::MetricType::Counter);
  EXPECT_EQ(stops->help, InstrumentInfoOf(Instrument::kServerStopsSent).help);
  // Reasons that caused no stop are left out.
  ASSERT_EQ(stops->metric.size(), 2u);
  EXPECT_EQ(stops->metric[0].label.at(0).name, "reason");
  EXPECT_EQ(stops->metric[0].label.at(0).value, "max_attempts");
  EXPECT_EQ(stops->metric[0].counter.value, 3);
  EXPECT_EQ(stops->metric[1].label.at(0).value, "breaker_open");
  EXPECT_EQ(stops->metric[1].counter.value, 1);
  const prometheus::MetricFamily* hedges =
      Find(families, "rpcguard_server_hedges_suppressed_total");
  ASSERT_NE(hedges, nullptr);
  ASSERT_EQ(hedges->metric.size(), 1u);
  EXPECT_TRUE(hedges->metric[0].label.empty());
  EXPECT_EQ(hedges->metric[0].counter.value, 2);
  // prometheus-cpp writes what the text export writes.
  const std::string text = prometheus::TextSerializer().Serialize(families);
  EXPECT_THAT(text, HasSubstr("rpcguard_server_stops_sent_total{reason=\""
                              "max_attempts\"} 3"));
  EXPECT_THAT(ToPrometheusText(signals),
              HasSubstr("rpcguard_server_stops_sent_total{reason=\""
                        "max_attempts\"} 3\n"));
  EXPECT_THAT(ToPrometheusText(signals),
              HasSubstr("\nrpcguard_server_hedges_suppressed_total 2\n"));
}

TEST(ServerSignalsCollectorTest, CollectReadsTheProcesssSignals) {
  ServerSignalsCollector collector;
  const std::vector<prometheus::MetricFamily> families = collector.Collect();
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "rpcguard_server_stops_sent_total");
  const prometheus::MetricFamily* hedges =
      Find(families, "rpcguard_server_hedges_suppressed_total");
  ASSERT_NE(hedges, nullptr);
  ASSERT_EQ(hedges->metric.size(), 1u);
  EXPECT_EQ(hedges->metric[0].counter.value,
            static_cast<double>(ServerSignalsSnapshot().hedges_suppressed));
}

}  // namespace
}  // namespace rpcguard
