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
    case Scenario::kOverload2xCold:
      return "overload2x_cold";
    case Scenario::kOverload4xCold:
      return "overload4x_cold";
    case Scenario::kSustained2x:
      return "sustained2x";
    case Scenario::kSplit:
      return "split";
  }
  return "?";
}

absl::StatusOr<Scenario> ParseScenario(absl::string_view name) {
  for (Scenario scenario : kAllScenarios) {
    if (ScenarioName(scenario) == name) return scenario;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scenario \"", name,
                   "\" (want outage, fail60, overload2x, overload4x, blip, "
                   "overload2x_cold, overload4x_cold, sustained2x or split)"));
}

absl::Duration ScenarioDuration(Scenario scenario, absl::Duration duration) {
  return scenario == Scenario::kSustained2x ? kSustainedDuration : duration;
}

bool IsCold(Scenario scenario) {
  return scenario == Scenario::kOverload2xCold ||
         scenario == Scenario::kOverload4xCold ||
         scenario == Scenario::kSustained2x;
}

bool HasIndependentMethod(Scenario scenario, Client client) {
  return scenario == Scenario::kSplit && client != Client::kSingleTier;
}

namespace {

// Limits the store to `share` of `rate` (0.5: 2x overload) from `from`.
void Overload(FaultPlan& plan, double rate, double share, absl::Duration from) {
  const double capacity = rate * share;
  plan.max_concurrent = kStoreConcurrency;
  plan.service_time = absl::Seconds(plan.max_concurrent / capacity);
  plan.overload_start = from;
}

}  // namespace

FaultPlan MakeFaultPlan(Scenario scenario, absl::Duration duration, double rate,
                        absl::Duration blip) {
  FaultPlan plan;
  plan.scenario = scenario;
  // Whole buckets, so that the window's edges fall on the series' edges.
  plan.start = absl::Floor(duration / 4, kBucket);
  plan.end = plan.start + absl::Floor(duration / 3, kBucket);
  plan.fail_end = plan.end;
  switch (scenario) {
    case Scenario::kOutage:
      plan.fail_percent = 100;
      break;
    case Scenario::kFail60:
      plan.fail_percent = 60;
      break;
    case Scenario::kOverload2x:
      Overload(plan, rate, 0.5, plan.start);
      break;
    case Scenario::kOverload4x:
      Overload(plan, rate, 0.25, plan.start);
      break;
    case Scenario::kBlip:
      plan.fail_percent = 100;
      plan.end = plan.start + blip;
      plan.fail_end = plan.end;
      break;
    case Scenario::kOverload2xCold:
    case Scenario::kOverload4xCold:
    case Scenario::kSustained2x:
      plan.start = absl::ZeroDuration();
      plan.end = absl::Floor(duration, kBucket);
      plan.fail_end = plan.start;
      plan.to_the_end = true;
      Overload(plan, rate, scenario == Scenario::kOverload4xCold ? 0.25 : 0.5,
               plan.start);
      break;
    case Scenario::kSplit:
      // Down long enough (two thirds of the calls in the breaker's 10-s
      // window failing) for B's breaker on the store to open.
      plan.start = absl::Floor(duration / 6, kBucket);
      plan.fail_percent = 100;
      plan.fail_end = absl::Floor(duration / 2, kBucket);
      plan.end = absl::Floor(duration * 3 / 4, kBucket);
      Overload(plan, rate, 0.5, plan.fail_end);
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
