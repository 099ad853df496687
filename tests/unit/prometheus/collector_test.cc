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

}  // namespace
}  // namespace rpcguard
