// Copyright rpcguard authors.

#include "bench/chain_common.h"

#include <cstdio>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rpcguard {
namespace bench {
namespace chain {

absl::string_view ClientName(Client client) {
  switch (client) {
    case Client::kNone:
      return "none";
    case Client::kNaive:
      return "naive";
    case Client::kGrpc:
      return "grpc";
    case Client::kGrpcThrottled:
      return "grpc_throttled";
    case Client::kRpcguard:
      return "rpcguard";
    case Client::kRpcguardFleet:
      return "rpcguard_fleet";
    case Client::kRpcguardFleetNoMax:
      return "rpcguard_fleet_nomax";
    case Client::kSingleTier:
      return "single_tier";
  }
  return "?";
}

absl::StatusOr<Client> ParseClient(absl::string_view name) {
  for (Client client : kAllClients) {
    if (ClientName(client) == name) return client;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown client \"", name,
      "\" (want none, naive, grpc, grpc_throttled, rpcguard, rpcguard_fleet, "
      "rpcguard_fleet_nomax or single_tier)"));
}

absl::string_view ScenarioName(Scenario scenario) {
  switch (scenario) {
    case Scenario::kOutage:
      return "outage";
    case Scenario::kFail60:
      return "fail60";
    case Scenario::kOverload2x:
      return "overload2x";
    case Scenario::kOverload4x:
      return "overload4x";
    case Scenario::kBlip:
      return "blip";
  }
  return "?";
}

absl::StatusOr<Scenario> ParseScenario(absl::string_view name) {
  for (Scenario scenario : kAllScenarios) {
    if (ScenarioName(scenario) == name) return scenario;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scenario \"", name,
                   "\" (want outage, fail60, overload2x, overload4x or blip)"));
}

FaultPlan MakeFaultPlan(Scenario scenario, absl::Duration duration, double rate,
                        absl::Duration blip) {
  FaultPlan plan;
  plan.scenario = scenario;
  // Whole buckets, so that the window's edges fall on the series' edges.
  plan.start = absl::Floor(duration / 4, kBucket);
  plan.end = plan.start + absl::Floor(duration / 3, kBucket);
  switch (scenario) {
    case Scenario::kOutage:
      plan.fail_percent = 100;
      break;
    case Scenario::kFail60:
      plan.fail_percent = 60;
      break;
    case Scenario::kOverload2x:
    case Scenario::kOverload4x: {
      const double capacity =
          rate / (scenario == Scenario::kOverload2x ? 2.0 : 4.0);
      plan.max_concurrent = 2;
      plan.service_time = absl::Seconds(plan.max_concurrent / capacity);
      break;
    }
    case Scenario::kBlip:
      plan.fail_percent = 100;
      plan.end = plan.start + blip;
      break;
  }
  return plan;
}

BucketCounter::BucketCounter(int buckets)
    : counts_(new std::atomic<int64_t>[buckets]), size_(buckets) {
  for (int i = 0; i < size_; ++i) counts_[i].store(0);
}

void BucketCounter::Start(absl::Time t0) {
  for (int i = 0; i < size_; ++i) counts_[i].store(0);
  t0_ns_.store(absl::ToUnixNanos(t0), std::memory_order_release);
}

std::optional<absl::Duration> BucketCounter::SinceStart(absl::Time now) const {
  const int64_t t0 = t0_ns_.load(std::memory_order_acquire);
  if (t0 == 0) return std::nullopt;
  return now - absl::FromUnixNanos(t0);
}

void BucketCounter::Add(absl::Time now) {
  const std::optional<absl::Duration> since = SinceStart(now);
  if (!since.has_value() || *since < absl::ZeroDuration()) return;
  int64_t index = *since / kBucket;
  if (index >= size_) index = size_ - 1;
  counts_[index].fetch_add(1, std::memory_order_relaxed);
}

std::vector<int64_t> BucketCounter::Snapshot() const {
  std::vector<int64_t> out(size_);
  for (int i = 0; i < size_; ++i) out[i] = counts_[i].load();
  return out;
}

int BucketsFor(absl::Duration duration) {
  return static_cast<int>((duration + absl::Seconds(30)) / kBucket);
}

std::optional<std::string> ReadStdinLine() {
  std::string line;
  if (!std::getline(std::cin, line)) return std::nullopt;
  return line;
}

void WriteStdoutLine(absl::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::optional<absl::Time> ParseStart(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, "start ")) return std::nullopt;
  int64_t ns;
  if (!absl::SimpleAtoi(line, &ns)) return std::nullopt;
  return absl::FromUnixNanos(ns);
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
