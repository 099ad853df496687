// Copyright rpcguard authors.
//
// Reading a JSON config into entries: the service config's methodConfig and
// retryThrottling, the rpcguard extension of a methodConfig entry, and the
// top-level "rpcguard" object (the destination). config.cc resolves them.
//
// One recursive-descent walk of one JSON document, in document order. A
// method's settings are read through the rows of internal/policy_fields.h,
// the destination's objects through small tables of their members below:
// this file holds what spans settings (names, conflicts, the hedging
// extensions) and the objects' shapes. Every error is collected with its
// JSON path (internal/json_fields.h) and all are returned together.

#include "rpcguard/config_reader/config_reader.h"  // private to :config

#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "rpcguard/base/json.h"
#include "rpcguard/config_reader/json_fields.h"    // private to :config
#include "rpcguard/config_reader/policy_fields.h"  // private to :config
#include "rpcguard/observability/correlation.h"

namespace rpcguard {
namespace {

using internal::Child;
using internal::ConfigErrors;
using internal::Index;
using internal::Json;
using internal::JsonMember;
using internal::JsonMemberRow;
using Entry = Config::Entry;

// rpcguard's hedging settings, read from a method config's rpcguard object
// and folded into its hedgingPolicy.
struct HedgingExtensions {
  std::optional<double> percentile;
  std::optional<absl::Duration> floor;
  std::optional<int> min_samples;
  std::optional<double> max_extra_load;
  // The first one seen, to name it when there is no hedgingPolicy.
  std::string first_field;
};

constexpr JsonMemberRow<HedgingExtensions> kHedgingExtensions[] = {
    {"hedgingDelayPercentile",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingExtensions* out) {
       double p;
       if (!ReadNumber(v, path, errors, &p)) return false;
       out->percentile = p;
       return true;
     }},
    {"hedgingDelayFloor",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingExtensions* out) {
       absl::Duration d;
       if (!ReadDuration(v, path, errors, &d, /*zero_ok=*/true)) return false;
       out->floor = d;
       return true;
     }},
    {"hedgingMinSamples",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingExtensions* out) {
       int n;
       if (!ReadCount(v, path, errors, &n)) return false;
       out->min_samples = n;
       return true;
     }},
    {"maxExtraLoad",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingExtensions* out) {
       double x;
       if (!ReadNumber(v, path, errors, &x)) return false;
       out->max_extra_load = x;
       return true;
     }},
};

// The row of `rows` with `key`, or null.
template <typename Row, size_t N>
const Row* FindRow(const Row (&rows)[N], absl::string_view key) {
  for (const Row& row : rows) {
    if (row.key == key) return &row;
  }
  return nullptr;
}

// The policy setting whose JSON key is `key` in `place`, or null.
const PolicyFieldRow* FindSetting(JsonPlace place, absl::string_view key) {
  for (const PolicyFieldRow& row : PolicyFieldRows()) {
    if (row.place == place && row.name == key) return &row;
  }
  return nullptr;
}

// A destination object that can be switched off ("enabled": false) and
// otherwise has options of type O (BreakerOptions, RetryBudgetOptions).
template <typename O>
struct Switchable {
  O options;
  bool enabled = true;
};

// A whole number of bytes from 0 to `max`.
bool ReadBytes(const Json& v, const std::string& path, uint64_t max,
               ConfigErrors& errors, uint64_t* out) {
  if (!CheckType(v, Json::Type::kNumber, path, errors)) return false;
  const double n = v.number;
  if (!(n >= 0) || n != std::floor(n) || n > static_cast<double>(max)) {
    errors.Add(path,
               absl::StrCat("must be a whole number of bytes from 0 to ", max));
    return false;
  }
  *out = static_cast<uint64_t>(n);
  return true;
}

template <typename O>
bool ReadEnabled(const Json& v, const std::string& path, ConfigErrors& errors,
                 Switchable<O>* out) {
  return ReadBool(v, path, errors, &out->enabled);
}

template <typename O, absl::Duration O::*member>
bool DurationOf(const Json& v, const std::string& path, ConfigErrors& errors,
                Switchable<O>* out) {
  return ReadDuration(v, path, errors, &(out->options.*member));
}

template <typename O, int O::*member>
bool CountOf(const Json& v, const std::string& path, ConfigErrors& errors,
             Switchable<O>* out) {
  return ReadCount(v, path, errors, &(out->options.*member));
}

template <typename O, double O::*member>
bool NumberOf(const Json& v, const std::string& path, ConfigErrors& errors,
              Switchable<O>* out) {
  return ReadNumber(v, path, errors, &(out->options.*member));
}

using BreakerJson = Switchable<BreakerOptions>;
constexpr JsonMemberRow<BreakerJson> kBreakerMembers[] = {
    {"enabled", ReadEnabled<BreakerOptions>},
    {"window", DurationOf<BreakerOptions, &BreakerOptions::window>},
    {"buckets", CountOf<BreakerOptions, &BreakerOptions::buckets>},
    {"failureRatio", NumberOf<BreakerOptions, &BreakerOptions::failure_ratio>},
    {"minAttempts", CountOf<BreakerOptions, &BreakerOptions::min_attempts>},
    {"openTime", DurationOf<BreakerOptions, &BreakerOptions::open_time>},
    {"maxOpenTime", DurationOf<BreakerOptions, &BreakerOptions::max_open_time>},
    {"healthyPeriod",
     DurationOf<BreakerOptions, &BreakerOptions::healthy_period>},
    {"halfOpenProbes",
     CountOf<BreakerOptions, &BreakerOptions::half_open_probes>},
    {"halfOpenSuccesses",
     CountOf<BreakerOptions, &BreakerOptions::half_open_successes>},
    {"probeTimeout",
     DurationOf<BreakerOptions, &BreakerOptions::probe_timeout>},
};

using BudgetJson = Switchable<RetryBudgetOptions>;
constexpr JsonMemberRow<BudgetJson> kBudgetMembers[] = {
    {"enabled", ReadEnabled<RetryBudgetOptions>},
    {"window", DurationOf<RetryBudgetOptions, &RetryBudgetOptions::window>},
    {"buckets", CountOf<RetryBudgetOptions, &RetryBudgetOptions::buckets>},
    {"ratio", NumberOf<RetryBudgetOptions, &RetryBudgetOptions::ratio>},
    {"minRetriesPerSecond",
     NumberOf<RetryBudgetOptions, &RetryBudgetOptions::min_retries_per_second>},
};

using AdaptiveJson = Switchable<AdaptiveThrottleOptions>;
constexpr JsonMemberRow<AdaptiveJson> kAdaptiveMembers[] = {
    {"enabled", ReadEnabled<AdaptiveThrottleOptions>},
    {"k", NumberOf<AdaptiveThrottleOptions, &AdaptiveThrottleOptions::k>},
    {"window",
     DurationOf<AdaptiveThrottleOptions, &AdaptiveThrottleOptions::window>},
    {"buckets",
     CountOf<AdaptiveThrottleOptions, &AdaptiveThrottleOptions::buckets>},
    {"minRequests",
     CountOf<AdaptiveThrottleOptions, &AdaptiveThrottleOptions::min_requests>},
    {"burstRejections", CountOf<AdaptiveThrottleOptions,
                                &AdaptiveThrottleOptions::burst_rejections>},
};

// Both members are required (gRFC A6).
constexpr JsonMemberRow<RetryThrottleOptions> kThrottleMembers[] = {
    {"maxTokens",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryThrottleOptions* out) {
       return ReadNumber(v, path, errors, &out->max_tokens);
     }},
    {"tokenRatio",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryThrottleOptions* out) {
       return ReadNumber(v, path, errors, &out->token_ratio);
     }},
};

// Reads a parsed service config into entries, collecting every error.
class ConfigReader {
 public:
  explicit ConfigReader(ConfigEntries* out) : out_(out) {}

  absl::Status Read(const Json& root) {
    ReadTop(root);
    return errors_.ToStatus();
  }

 private:
  void ReadTop(const Json& root) {
    if (root.type != Json::Type::kObject) {
      errors_.Add("config", "must be an object");
      return;
    }
    for (const JsonMember& m : root.object) {
      if (m.key == "methodConfig") {
        ReadMethodConfigs(m.value, m.key);
      } else if (m.key == "retryThrottling") {
        ReadRetryThrottling(m.value, m.key);
      } else if (m.key == "rpcguard") {
        ReadDestination(m.value, m.key);
      } else {
        CheckNearMiss(m.key);
      }
      // Any other key is another part of gRPC's service config
      // (loadBalancingConfig, healthCheckConfig, ...): gRPC reads it.
    }
  }

  // Unknown top-level keys are ignored, so a misspelt "methodConfig" would
  // silently drop every policy: reject keys that differ from the ones
  // rpcguard reads only in case or underscores.
  void CheckNearMiss(absl::string_view key) {
    const std::string folded =
        absl::AsciiStrToLower(absl::StrReplaceAll(key, {{"_", ""}}));
    for (absl::string_view known :
         {"methodConfig", "retryThrottling", "rpcguard"}) {
      if (folded == absl::AsciiStrToLower(known)) {
        errors_.Add(
            key, absl::StrCat("unknown field (did you mean \"", known, "\"?)"));
        return;
      }
    }
  }

  void ReadMethodConfigs(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kArray, path, errors_)) return;
    for (size_t i = 0; i < v.array.size(); ++i) {
      ReadMethodConfig(v.array[i], Index(path, i));
    }
  }

  void ReadMethodConfig(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path, errors_)) return;
    Entry entry;
    MethodJsonState state{&entry, &errors_};
    const Json* names = nullptr;
    bool has_per_attempt_timeout = false;
    HedgingExtensions hedging_ext;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      if (m.key == "name") {
        // Read last, once the policy the names get is complete.
        names = &m.value;
      } else if (m.key == "rpcguard") {
        ReadRpcguard(m.value, field, state, &has_per_attempt_timeout,
                     &hedging_ext);
      } else if (m.key == "maxRequestMessageBytes" ||
                 m.key == "maxResponseMessageBytes") {
        // gRPC's own; it validates them when given the same JSON.
      } else if (const PolicyFieldRow* row =
                     FindSetting(JsonPlace::kMethodConfig, m.key)) {
        entry.fields |= 1u << row->index;
        row->read_json(m.value, field, state);
      } else {
        errors_.Add(field, "unknown field");
      }
    }
    // Two spellings of one setting: whichever won, the other would be a lie.
    if (state.has_recv_timeout && has_per_attempt_timeout) {
      errors_.Add(Child(path, "rpcguard.perAttemptTimeout"),
                  "conflicts with retryPolicy.perAttemptRecvTimeout; set only "
                  "one");
    }
    if (entry.fields & kFieldHedging) {
      // gRFC A6: a method config has a retry or a hedging policy, not both.
      if (entry.fields & kFieldRetry) {
        errors_.Add(Child(path, "hedgingPolicy"),
                    "conflicts with retryPolicy; set only one (gRFC A6)");
      }
      HedgingPolicy& hedging = *entry.policy.hedging;
      const HedgingExtensions& ext = hedging_ext;
      if (ext.percentile) hedging.adaptive_percentile = ext.percentile;
      if (ext.floor) hedging.adaptive_floor = *ext.floor;
      if (ext.min_samples) hedging.min_samples = *ext.min_samples;
      if (ext.max_extra_load) hedging.max_extra_load = *ext.max_extra_load;
      // The checks of the whole, with the extensions: its message starts
      // with the path of the field it names.
      errors_.Add(hedging.Validate(path));
    } else if (!hedging_ext.first_field.empty()) {
      errors_.Add(
          Child(path, absl::StrCat("rpcguard.", hedging_ext.first_field)),
          "requires a hedgingPolicy in the same method config");
    }
    ReadNames(names, Child(path, "name"), entry);
  }

  // The rpcguard object of a methodConfig entry: rpcguard's own settings
  // and the hedging extensions.
  void ReadRpcguard(const Json& v, const std::string& path,
                    MethodJsonState& state, bool* has_per_attempt_timeout,
                    HedgingExtensions* ext) {
    if (!CheckType(v, Json::Type::kObject, path, errors_)) return;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      if (const PolicyFieldRow* row =
              FindSetting(JsonPlace::kRpcguard, m.key)) {
        if (row->index == kFieldIndexPerAttemptTimeout) {
          *has_per_attempt_timeout = true;
        }
        state.entry->fields |= 1u << row->index;
        row->read_json(m.value, field, state);
      } else if (const JsonMemberRow<HedgingExtensions>* row =
                     FindRow(kHedgingExtensions, m.key)) {
        if (ext->first_field.empty()) ext->first_field = m.key;
        row->read(m.value, field, errors_, ext);
      } else {
        errors_.Add(field, "unknown field");
      }
    }
  }

  void ReadNames(const Json* names, const std::string& path,
                 const Entry& policy) {
    // gRPC requires a name too; the default is written [{}].
    if (names == nullptr) {
      errors_.Add(path, "must be a non-empty array");
      return;
    }
    if (!CheckType(*names, Json::Type::kArray, path, errors_)) return;
    if (names->array.empty()) {
      errors_.Add(path, "must be a non-empty array");
      return;
    }
    for (size_t i = 0; i < names->array.size(); ++i) {
      const std::string name_path = Index(path, i);
      const Json& name = names->array[i];
      if (!CheckType(name, Json::Type::kObject, name_path, errors_)) continue;
      std::string service;
      std::string method;
      bool ok = true;
      for (const JsonMember& m : name.object) {
        const std::string field = Child(name_path, m.key);
        if (m.key != "service" && m.key != "method") {
          errors_.Add(field, "unknown field");
          ok = false;
          continue;
        }
        if (!CheckType(m.value, Json::Type::kString, field, errors_)) {
          ok = false;
          continue;
        }
        // "pkg.Svc/M" as a service would never match any call.
        if (absl::StrContains(m.value.string, '/')) {
          errors_.Add(field, "must not contain '/'");
          ok = false;
          continue;
        }
        (m.key == "service" ? service : method) = m.value.string;
      }
      // A name with a bad part is no name: not checked against the others.
      if (!ok) continue;
      if (service.empty() && !method.empty()) {
        errors_.Add(name_path, "method requires a non-empty service");
        continue;
      }
      if (service.empty()) {
        if (out_->default_entry.has_value()) {
          errors_.Add(name_path, "duplicate default name");
          continue;
        }
        out_->default_entry = policy;
        continue;
      }
      auto& table = method.empty() ? out_->services : out_->methods;
      std::string key =
          method.empty() ? service : absl::StrCat(service, "/", method);
      if (!table.try_emplace(key, policy).second) {
        errors_.Add(name_path, absl::StrCat("duplicate name \"", key, "\""));
      }
    }
  }

  // gRFC A6's retryThrottling: the destination's token bucket, which the
  // interceptor feeds with every attempt and consults before every retry.
  void ReadRetryThrottling(const Json& v, const std::string& path) {
    const size_t before = errors_.count();
    RetryThrottleOptions throttle;
    const uint64_t seen =
        internal::ReadMembers(v, path, kThrottleMembers, errors_, &throttle);
    if (v.type != Json::Type::kObject) return;
    for (size_t i = 0; i < std::size(kThrottleMembers); ++i) {
      if (!(seen & (uint64_t{1} << i))) {
        errors_.Add(Child(path, kThrottleMembers[i].key), "field is required");
      }
    }
    if (errors_.count() != before) return;
    // The bounds are the throttle's own, so they are decided in one place;
    // its message already names the JSON path ("retryThrottling.maxTokens:
    // must be greater than 0").
    const absl::Status valid = throttle.Validate();
    errors_.Add(valid);
    if (valid.ok()) out_->destination.throttle = throttle;
  }

  // The top-level "rpcguard" object: settings of the destination (breaker,
  // budget, breaker key, how many undeclared methods get state of their
  // own) rather than of a method.
  void ReadDestination(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path, errors_)) return;
    DestinationConfig& d = out_->destination;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      if (m.key == "circuitBreaker") {
        ReadSwitchable(m.value, field, kBreakerMembers, &d.breaker_enabled,
                       &d.breaker);
      } else if (m.key == "retryBudget") {
        ReadSwitchable(m.value, field, kBudgetMembers, &d.budget_enabled,
                       &d.budget);
      } else if (m.key == "adaptiveThrottling") {
        ReadSwitchable(m.value, field, kAdaptiveMembers,
                       &d.adaptive_throttle_enabled, &d.adaptive_throttle);
      } else if (m.key == "breakerKey") {
        if (!CheckType(m.value, Json::Type::kString, field, errors_)) continue;
        if (m.value.string == "target") {
          d.key_per_service = false;
        } else if (m.value.string == "target_and_service") {
          d.key_per_service = true;
        } else {
          errors_.Add(field,
                      absl::StrCat("unknown breaker key \"", m.value.string,
                                   "\" (want target or target_and_service)"));
        }
      } else if (m.key == "streamBufferBytes") {
        uint64_t n;
        if (ReadBytes(m.value, field, DestinationConfig::kMaxStreamBufferBytes,
                      errors_, &n)) {
          d.stream_buffer_bytes = static_cast<size_t>(n);
        }
      } else if (m.key == "channelStreamBufferBytes") {
        ReadBytes(m.value, field,
                  DestinationConfig::kMaxChannelStreamBufferBytes, errors_,
                  &d.channel_stream_buffer_bytes);
      } else if (m.key == "correlationKeys") {
        ReadCorrelationKeys(m.value, field, &d.correlation_keys);
      } else if (m.key == "maxUndeclaredMethods") {
        int n;
        if (internal::ReadCount(m.value, field, errors_, &n)) {
          d.max_undeclared_methods = static_cast<size_t>(n);
        }
      } else {
        errors_.Add(field, "unknown field");
      }
    }
  }

  // rpcguard.correlationKeys: an array of metadata keys, every bad element
  // reported; `*out` is set only when all are good.
  void ReadCorrelationKeys(const Json& v, const std::string& path,
                           std::vector<std::string>* out) {
    if (!CheckType(v, Json::Type::kArray, path, errors_)) return;
    const size_t before = errors_.count();
    std::vector<std::string> keys;
    for (size_t i = 0; i < v.array.size(); ++i) {
      if (!CheckType(v.array[i], Json::Type::kString, Index(path, i),
                     errors_)) {
        continue;
      }
      keys.push_back(v.array[i].string);
    }
    if (errors_.count() != before) return;
    const absl::Status valid = ValidateCorrelationKeys(keys, path);
    errors_.Add(valid);
    if (valid.ok()) *out = std::move(keys);
  }

  // circuitBreaker and retryBudget: members read through `rows`, then the
  // options' own Validate(), whose message ("circuitBreaker.x: why") is put
  // on the JSON path ("rpcguard.circuitBreaker.x: why").
  template <typename O, size_t N>
  void ReadSwitchable(const Json& v, const std::string& path,
                      const JsonMemberRow<Switchable<O>> (&rows)[N],
                      bool* enabled, std::optional<O>* out) {
    const size_t before = errors_.count();
    Switchable<O> read;
    read.enabled = *enabled;
    internal::ReadMembers(v, path, rows, errors_, &read);
    if (errors_.count() != before) return;
    *enabled = read.enabled;
    const absl::Status valid = read.options.Validate();
    if (!valid.ok()) {
      errors_.Add(absl::InvalidArgumentError(
          absl::StrCat("rpcguard.", valid.message())));
      return;
    }
    *out = read.options;
  }

  ConfigEntries* out_;
  ConfigErrors errors_;
};

}  // namespace

absl::StatusOr<ConfigEntries> ReadConfigJson(absl::string_view json) {
  absl::StatusOr<Json> root = internal::ParseJson(json);
  if (!root.ok()) return root.status();
  ConfigEntries entries;
  absl::Status status = ConfigReader(&entries).Read(*root);
  if (!status.ok()) return status;
  return entries;
}

}  // namespace rpcguard
