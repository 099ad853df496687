// Copyright rpcguard authors.
//
// The JSON's destination-wide settings: the top-level "rpcguard" object
// (circuit breaker, retry budget, breaker key) and gRPC's retryThrottling.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpcguard/config.h"

namespace rpcguard {
namespace {

TEST(DestinationConfigTest, ReadsEverySetting) {
  absl::StatusOr<Config> c = Config::FromJson(R"({
    "rpcguard": {
      "circuitBreaker": {"window": "20s", "buckets": 20, "failureRatio": 0.25,
                         "minAttempts": 50, "openTime": "2s",
                         "maxOpenTime": "60s", "healthyPeriod": "120s",
                         "halfOpenProbes": 5, "halfOpenSuccesses": 4,
                         "probeTimeout": "5s"},
      "retryBudget": {"window": "30s", "buckets": 30, "ratio": 0.1,
                      "minRetriesPerSecond": 2},
      "breakerKey": "target_and_service", "maxUndeclaredMethods": 50,
      "streamBufferBytes": 1000, "channelStreamBufferBytes": 1048576},
    "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.5}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const DestinationConfig& d = c->destination();
  EXPECT_EQ(d.max_undeclared_methods, 50u);
  EXPECT_EQ(d.stream_buffer_bytes, 1000u);
  EXPECT_EQ(d.channel_stream_buffer_bytes, 1048576u);
  ASSERT_TRUE(d.breaker.has_value());
  EXPECT_EQ(d.breaker->window, absl::Seconds(20));
  EXPECT_EQ(d.breaker->buckets, 20);
  EXPECT_EQ(d.breaker->failure_ratio, 0.25);
  EXPECT_EQ(d.breaker->min_attempts, 50);
  EXPECT_EQ(d.breaker->open_time, absl::Seconds(2));
  EXPECT_EQ(d.breaker->max_open_time, absl::Seconds(60));
  EXPECT_EQ(d.breaker->healthy_period, absl::Seconds(120));
  EXPECT_EQ(d.breaker->half_open_probes, 5);
  EXPECT_EQ(d.breaker->half_open_successes, 4);
  EXPECT_EQ(d.breaker->probe_timeout, absl::Seconds(5));
  ASSERT_TRUE(d.budget.has_value());
  EXPECT_EQ(d.budget->window, absl::Seconds(30));
  EXPECT_EQ(d.budget->ratio, 0.1);
  EXPECT_EQ(d.budget->min_retries_per_second, 2);
  EXPECT_TRUE(d.key_per_service);
  ASSERT_TRUE(d.throttle.has_value());
  EXPECT_EQ(d.throttle->max_tokens, 100);
  EXPECT_EQ(d.throttle->token_ratio, 0.5);
  EXPECT_TRUE(d.breaker_enabled);
  EXPECT_TRUE(d.budget_enabled);
}

TEST(DestinationConfigTest, DefaultsAndSwitchingOff) {
  absl::StatusOr<Config> c = Config::FromJson("{}");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->destination().breaker.has_value());
  EXPECT_FALSE(c->destination().throttle.has_value());
  EXPECT_TRUE(c->destination().breaker_enabled);
  c = Config::FromJson(R"({"rpcguard": {"circuitBreaker": {"enabled": false},
                                        "retryBudget": {"enabled": false}}})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->destination().breaker_enabled);
  EXPECT_FALSE(c->destination().budget_enabled);
}

TEST(DestinationConfigTest, CorrelationKeysDefaultToTraceparentAndRequestId) {
  EXPECT_EQ(Config().destination().correlation_keys,
            (std::vector<std::string>{"traceparent", "x-request-id"}));
  absl::StatusOr<Config> c = Config::FromJson(R"({"rpcguard": {}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->destination().correlation_keys,
            (std::vector<std::string>{"traceparent", "x-request-id"}));
}

TEST(DestinationConfigTest, CorrelationKeysAreReadInOrder) {
  absl::StatusOr<Config> c = Config::FromJson(
      R"({"rpcguard": {"correlationKeys": ["x-correlation-id",
                                           "traceparent"]}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->destination().correlation_keys,
            (std::vector<std::string>{"x-correlation-id", "traceparent"}));
  // An empty list turns the ids off.
  c = Config::FromJson(R"({"rpcguard": {"correlationKeys": []}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->destination().correlation_keys.empty());
}

TEST(DestinationConfigTest, BadSettingsNameTheirPath) {
  const struct {
    const char* json;
    const char* error;
  } cases[] = {
      {R"({"rpcguard": []})", "rpcguard: must be an object"},
      {R"({"rpcguard": {"circuitBreaker": {"failureRatio": 2}}})",
       "rpcguard.circuitBreaker.failureRatio: must be in (0, 1]"},
      {R"({"rpcguard": {"circuitBreaker": {"openTime": "-1s"}}})",
       "rpcguard.circuitBreaker.openTime: must be greater than 0"},
      {R"({"rpcguard": {"circuitBreaker": {"minAttempts": 0}}})",
       "rpcguard.circuitBreaker.minAttempts: must be in [1, 1000000]"},
      {R"({"rpcguard": {"circuitBreaker": {"failureRatoi": 0.5}}})",
       "rpcguard.circuitBreaker.failureRatoi: unknown field"},
      {R"({"rpcguard": {"circuitBreaker": {"enabled": "no"}}})",
       "rpcguard.circuitBreaker.enabled: must be a boolean"},
      {R"({"rpcguard": {"retryBudget": {"ratio": "0.2"}}})",
       "rpcguard.retryBudget.ratio: must be a number"},
      {R"({"rpcguard": {"breakerKey": "host"}})",
       "rpcguard.breakerKey: unknown breaker key \"host\" (want target or "
       "target_and_service)"},
      {R"({"rpcguard": {"budget": {}}})", "rpcguard.budget: unknown field"},
      {R"({"rpcguard": {"correlationKeys": "x-request-id"}})",
       "rpcguard.correlationKeys: must be an array"},
      {R"({"rpcguard": {"correlationKeys": ["a", 7, "b"]}})",
       "rpcguard.correlationKeys[1]: must be a string"},
      {R"({"rpcguard": {"correlationKeys": ["X-Request-Id"]}})",
       "rpcguard.correlationKeys[0]: must be a metadata key of 1 to 64 "
       "characters from [0-9a-z_.-]"},
      {R"({"rpcguard": {"correlationKeys": [""]}})",
       "rpcguard.correlationKeys[0]: must be a metadata key of 1 to 64 "
       "characters from [0-9a-z_.-]"},
      {R"({"rpcguard": {"correlationKeys": ["trace-bin"]}})",
       "rpcguard.correlationKeys[0]: binary metadata (\"-bin\") cannot be a "
       "correlation id"},
      {R"({"rpcguard": {"correlationKeys": ["grpc-timeout"]}})",
       "rpcguard.correlationKeys[0]: \"grpc-\" keys are gRPC's"},
      {R"({"rpcguard": {"correlationKeys": ["a", "b", "a"]}})",
       "rpcguard.correlationKeys[2]: \"a\" is listed twice"},
      {R"({"rpcguard": {"correlationKeys":
             ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}})",
       "rpcguard.correlationKeys: at most 8 keys, not 9"},
      {R"({"rpcguard": {"maxUndeclaredMethods": 0}})",
       "rpcguard.maxUndeclaredMethods: must be in [1, 1000000]"},
      {R"({"rpcguard": {"maxUndeclaredMethods": 2000000}})",
       "rpcguard.maxUndeclaredMethods: must be in [1, 1000000]"},
      {R"({"rpcguard": {"maxUndeclaredMethods": 2.5}})",
       "rpcguard.maxUndeclaredMethods: must be an integer"},
      {R"({"rpcguard": {"maxUndeclaredMethods": "100"}})",
       "rpcguard.maxUndeclaredMethods: must be a number"},
      {R"({"rpcguard": {"streamBufferBytes": -1}})",
       "rpcguard.streamBufferBytes: must be a whole number of bytes from 0 to "
       "1073741824"},
      {R"({"rpcguard": {"streamBufferBytes": 10.5}})",
       "rpcguard.streamBufferBytes: must be a whole number of bytes from 0 to "
       "1073741824"},
      {R"({"rpcguard": {"streamBufferBytes": "1k"}})",
       "rpcguard.streamBufferBytes: must be a number"},
      {R"({"rpcguard": {"channelStreamBufferBytes": 2e12}})",
       "rpcguard.channelStreamBufferBytes: must be a whole number of bytes "
       "from 0 to 1099511627776"},
      {R"({"rpcguard": {"channelStreamBufferBytes": null}})",
       "rpcguard.channelStreamBufferBytes: must be a number"},
      {R"({"rpcguard": {"adaptiveThrottling": {"k": 0.5}}})",
       "rpcguard.adaptiveThrottling.k: must be a finite number, at least 1"},
      {R"({"rpcguard": {"adaptiveThrottling": {"k": "2"}}})",
       "rpcguard.adaptiveThrottling.k: must be a number"},
      {R"({"rpcguard": {"adaptiveThrottling": {"window": "0s"}}})",
       "rpcguard.adaptiveThrottling.window: must be greater than 0"},
      {R"({"rpcguard": {"adaptiveThrottling": {"kay": 2}}})",
       "rpcguard.adaptiveThrottling.kay: unknown field"},
      {R"({"rpcguard": {"adaptiveThrottling": false}})",
       "rpcguard.adaptiveThrottling: must be an object"},
      {R"({"RPCGuard": {}})",
       "RPCGuard: unknown field (did you mean \"rpcguard\"?)"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Config> config = Config::FromJson(c.json);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
        << c.json;
    EXPECT_EQ(config.status().message(), c.error) << c.json;
  }
}

TEST(DestinationConfigTest, AdaptiveThrottlingIsOnByDefaultAndSwitchable) {
  absl::StatusOr<Config> c = Config::FromJson("{}");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->destination().adaptive_throttle_enabled);
  EXPECT_FALSE(c->destination().adaptive_throttle.has_value());
  EXPECT_EQ(AdaptiveThrottleOptions().k, 2);
  EXPECT_EQ(AdaptiveThrottleOptions().window, absl::Minutes(2));

  c = Config::FromJson(R"({"rpcguard": {"adaptiveThrottling":
      {"k": 1.5, "window": "60s", "buckets": 30}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->destination().adaptive_throttle.has_value());
  EXPECT_EQ(c->destination().adaptive_throttle->k, 1.5);
  EXPECT_EQ(c->destination().adaptive_throttle->window, absl::Seconds(60));
  EXPECT_EQ(c->destination().adaptive_throttle->buckets, 30);

  c = Config::FromJson(
      R"({"rpcguard": {"adaptiveThrottling": {"enabled": false}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->destination().adaptive_throttle_enabled);
}

// gRPC C-core's and grpc-go's per-call retry buffer; grpc-java's
// per-channel one.
TEST(DestinationConfigTest, StreamBuffersDefault) {
  absl::StatusOr<Config> c = Config::FromJson("{}");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->destination().stream_buffer_bytes, 256u * 1024);
  EXPECT_EQ(c->destination().channel_stream_buffer_bytes, 16u << 20);
}

TEST(DestinationConfigTest, UndeclaredMethodsBoundDefaultsToTwoThousand) {
  absl::StatusOr<Config> c = Config::FromJson(R"({"rpcguard": {}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->destination().max_undeclared_methods, 2000u);
  EXPECT_EQ(Config().destination().max_undeclared_methods, 2000u);
}

// What the interceptor bounds by: a config entry or a method of the linked-in
// protos is declared; a made-up name is not, though its service may be.
TEST(DestinationConfigTest, DeclaredTellsNamedMethodsFromMadeUpOnes) {
  absl::StatusOr<Config> c = Config::FromJson(R"({"methodConfig": [
      {"name": [{"service": "pkg.A", "method": "M"}]},
      {"name": [{"service": "pkg.B"}]}]})");
  ASSERT_TRUE(c.ok()) << c.status();
  Config::Declaration d = c->Declared("/pkg.A/M");
  EXPECT_TRUE(d.method);
  EXPECT_FALSE(d.service);
  EXPECT_EQ(d.service_name, "pkg.A");
  d = c->Declared("/pkg.A/Other");
  EXPECT_FALSE(d.method);
  EXPECT_FALSE(d.service);
  d = c->Declared("/pkg.B/Anything");
  EXPECT_FALSE(d.method);
  EXPECT_TRUE(d.service);
  EXPECT_EQ(d.service_name, "pkg.B");
  d = c->Declared("/nobody.Knows/This");
  EXPECT_FALSE(d.method);
  EXPECT_FALSE(d.service);
  d = c->Declared("not a path");
  EXPECT_FALSE(d.method);
  EXPECT_FALSE(d.service);
  EXPECT_EQ(d.service_name, "");
}

}  // namespace
}  // namespace rpcguard
