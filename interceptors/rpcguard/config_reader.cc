// Copyright rpcguard authors.
//
// Reading a JSON config into entries: the service config's methodConfig and
// retryThrottling, the rpcguard extension of a methodConfig entry, and the
// top-level "rpcguard" object (the destination). config.cc resolves them.
//
// One file over 600 lines, on purpose for now: it is one recursive-descent
// reader of one JSON document, in document order (top level, methodConfig,
// retryPolicy and hedgingPolicy, the rpcguard objects, the destination),
// and every Read* shares the reader's error state and the exact-path
// messages. A newcomer finds a field by its JSON name. If it grows further,
// the split is the destination part (ReadDestination, ReadBreaker,
// ReadBudget, ReadRetryThrottling) into a file of its own.

#include "rpcguard/config_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "rpcguard/internal/base/json.h"

namespace rpcguard {
namespace {

using internal::Json;
using internal::JsonMember;

// The largest proto3 Duration (10,000 years), as protobuf defines it.
constexpr int64_t kMaxDurationSeconds = 315576000000;

std::string Child(absl::string_view path, absl::string_view key) {
  return absl::StrCat(path, ".", key);
}

std::string Index(absl::string_view path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// Parses proto3's JSON form of a Duration: an optional '-', decimal seconds
// with at most 9 fractional digits, and an "s" suffix ("1.5s"). On failure
// sets `error` to the reason.
bool ParseProtoDuration(absl::string_view text, absl::Duration* out,
                        std::string* error) {
  auto bad = [&](absl::string_view why) {
    *error = absl::StrCat("invalid duration \"", text, "\" (", why, ")");
    return false;
  };
  constexpr absl::string_view kWant =
      "want decimal seconds ending in \"s\", like \"1.5s\"";
  absl::string_view rest = text;
  const bool negative = absl::ConsumePrefix(&rest, "-");
  if (!absl::ConsumeSuffix(&rest, "s")) return bad(kWant);
  absl::string_view whole = rest;
  absl::string_view fraction;
  const size_t dot = rest.find('.');
  if (dot != absl::string_view::npos) {
    whole = rest.substr(0, dot);
    fraction = rest.substr(dot + 1);
    if (!AllDigits(fraction)) return bad(kWant);
  }
  if (!AllDigits(whole)) return bad(kWant);
  if (fraction.size() > 9) return bad("at most 9 fractional digits");
  int64_t seconds;
  if (!absl::SimpleAtoi(whole, &seconds) || seconds > kMaxDurationSeconds) {
    return bad(absl::StrCat("at most ", kMaxDurationSeconds, " seconds"));
  }
  int64_t nanos = 0;
  for (size_t i = 0; i < 9; ++i) {
    nanos = nanos * 10 + (i < fraction.size() ? fraction[i] - '0' : 0);
  }
  const absl::Duration d = absl::Seconds(seconds) + absl::Nanoseconds(nanos);
  *out = negative ? -d : d;
  return true;
}

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
  void Saw(absl::string_view field) {
    if (first_field.empty()) first_field = std::string(field);
  }
};

// Reads a parsed service config into entries. Stops at the first error,
// which Read() then returns.
class ConfigReader {
 public:
  explicit ConfigReader(ConfigEntries* out) : out_(out) {}

  absl::Status Read(const Json& root) {
    ReadTop(root);
    return status_;
  }

 private:
  bool Fail(absl::string_view path, absl::string_view reason) {
    status_ = absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
    return false;
  }

  bool CheckType(const Json& v, Json::Type type, absl::string_view path) {
    if (v.type == type) return true;
    return Fail(path, absl::StrCat("must be ", internal::JsonTypeName(type)));
  }

  // JSON has only doubles; an integer is a number with no fraction.
  bool ReadInteger(const Json& v, absl::string_view path, double* out) {
    if (!CheckType(v, Json::Type::kNumber, path)) return false;
    if (std::trunc(v.number) != v.number) {
      return Fail(path, "must be an integer");
    }
    *out = v.number;
    return true;
  }

  // Every duration rpcguard reads must be positive: a zero timeout or backoff
  // is never what anyone meant. `zero_ok` for the one that may be 0: A6's
  // hedgingDelay (every copy at once).
  bool ReadDuration(const Json& v, absl::string_view path, absl::Duration* out,
                    bool zero_ok = false) {
    if (!CheckType(v, Json::Type::kString, path)) return false;
    std::string error;
    absl::Duration d;
    if (!ParseProtoDuration(v.string, &d, &error)) return Fail(path, error);
    if (zero_ok && d < absl::ZeroDuration()) {
      return Fail(path, "must be 0 or more");
    }
    const std::string why = CheckPositiveDuration(d);
    if (!why.empty() && !(zero_ok && d == absl::ZeroDuration())) {
      return Fail(path, why);
    }
    *out = d;
    return true;
  }

  bool ReadTop(const Json& root) {
    if (root.type != Json::Type::kObject) {
      return Fail("config", "must be an object");
    }
    for (const JsonMember& m : root.object) {
      if (m.key == "methodConfig") {
        if (!ReadMethodConfigs(m.value, m.key)) return false;
      } else if (m.key == "retryThrottling") {
        if (!ReadRetryThrottling(m.value, m.key)) return false;
      } else if (m.key == "rpcguard") {
        if (!ReadDestination(m.value, m.key)) return false;
      } else if (!CheckNearMiss(m.key)) {
        return false;
      }
      // Any other key is another part of gRPC's service config
      // (loadBalancingConfig, healthCheckConfig, ...): gRPC reads it.
    }
    return true;
  }

  // Unknown top-level keys are ignored, so a misspelt "methodConfig" would
  // silently drop every policy: reject keys that differ from the ones
  // rpcguard reads only in case or underscores.
  bool CheckNearMiss(absl::string_view key) {
    const std::string folded =
        absl::AsciiStrToLower(absl::StrReplaceAll(key, {{"_", ""}}));
    for (absl::string_view known :
         {"methodConfig", "retryThrottling", "rpcguard"}) {
      if (folded == absl::AsciiStrToLower(known)) {
        return Fail(
            key, absl::StrCat("unknown field (did you mean \"", known, "\"?)"));
      }
    }
    return true;
  }

  bool ReadMethodConfigs(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kArray, path)) return false;
    for (size_t i = 0; i < v.array.size(); ++i) {
      if (!ReadMethodConfig(v.array[i], Index(path, i))) return false;
    }
    return true;
  }

  bool ReadMethodConfig(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    Entry entry;
    MethodPolicy& policy = entry.policy;
    uint32_t& fields = entry.fields;
    const Json* names = nullptr;
    bool has_recv_timeout = false;
    bool has_per_attempt_timeout = false;
    // Read after the rpcguard object, whose hedging extensions it takes.
    const Json* hedging_json = nullptr;
    HedgingExtensions hedging_ext;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "name") {
        // Read last, once the policy the names get is complete.
        names = &m.value;
      } else if (m.key == "timeout") {
        fields |= kFieldTimeout;
        ok = ReadDuration(m.value, field, &policy.timeout);
      } else if (m.key == "waitForReady") {
        fields |= kFieldWaitForReady;
        ok = CheckType(m.value, Json::Type::kBool, field);
        if (ok) policy.wait_for_ready = m.value.boolean;
      } else if (m.key == "retryPolicy") {
        fields |= kFieldRetry;
        ok = ReadRetryPolicy(m.value, field, &policy, &has_recv_timeout);
      } else if (m.key == "rpcguard") {
        ok = ReadRpcguard(m.value, field, &entry, &has_per_attempt_timeout,
                          &hedging_ext);
      } else if (m.key == "maxRequestMessageBytes" ||
                 m.key == "maxResponseMessageBytes") {
        // gRPC's own; it validates them when given the same JSON.
      } else if (m.key == "hedgingPolicy") {
        fields |= kFieldHedging;
        hedging_json = &m.value;
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    // Two spellings of one setting: whichever won, the other would be a lie.
    if (has_recv_timeout && has_per_attempt_timeout) {
      return Fail(Child(path, "rpcguard.perAttemptTimeout"),
                  "conflicts with retryPolicy.perAttemptRecvTimeout; set only "
                  "one");
    }
    if (has_recv_timeout) fields |= kFieldPerAttemptTimeout;
    if (hedging_json != nullptr) {
      // gRFC A6: a method config has a retry or a hedging policy, not both.
      if (fields & kFieldRetry) {
        return Fail(Child(path, "hedgingPolicy"),
                    "conflicts with retryPolicy; set only one (gRFC A6)");
      }
      policy.hedging.emplace();
      if (!ReadHedgingPolicy(*hedging_json, path, hedging_ext,
                             &*policy.hedging)) {
        return false;
      }
    } else if (!hedging_ext.first_field.empty()) {
      return Fail(
          Child(path, absl::StrCat("rpcguard.", hedging_ext.first_field)),
          "requires a hedgingPolicy in the same method config");
    }
    return ReadNames(names, Child(path, "name"), entry);
  }

  // gRFC A6's hedgingPolicy, with rpcguard's extensions (`ext`, from the
  // method config's rpcguard object) folded in and validated together.
  bool ReadHedgingPolicy(const Json& v, const std::string& config_path,
                         const HedgingExtensions& ext, HedgingPolicy* out) {
    const std::string path = Child(config_path, "hedgingPolicy");
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    bool has_attempts = false;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "maxAttempts") {
        has_attempts = true;
        double n;
        ok = ReadInteger(m.value, field, &n);
        if (ok)
          out->max_attempts = static_cast<int>(std::min(
              std::max(n, -1.0), static_cast<double>(kMaxAttemptsCap + 1)));
      } else if (m.key == "hedgingDelay") {
        ok = ReadDuration(m.value, field, &out->delay, /*zero_ok=*/true);
      } else if (m.key == "nonFatalStatusCodes") {
        std::optional<StatusCodeSet> codes;
        ok = CheckType(m.value, Json::Type::kArray, field) &&
             (m.value.array.empty() || ReadCodes(m.value, field, &codes));
        if (ok && codes) out->non_fatal_codes = *codes;
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    if (!has_attempts) return Fail(Child(path, "maxAttempts"), "is required");
    if (ext.percentile) out->adaptive_percentile = ext.percentile;
    if (ext.floor) out->adaptive_floor = *ext.floor;
    if (ext.min_samples) out->min_samples = *ext.min_samples;
    if (ext.max_extra_load) out->max_extra_load = *ext.max_extra_load;
    const absl::Status s = out->Validate(config_path);
    if (!s.ok()) {
      status_ = s;
      return false;
    }
    return true;
  }

  bool ReadNames(const Json* names, const std::string& path,
                 const Entry& policy) {
    // gRPC requires a name too; the default is written [{}].
    if (names == nullptr) return Fail(path, "must be a non-empty array");
    if (!CheckType(*names, Json::Type::kArray, path)) return false;
    if (names->array.empty()) return Fail(path, "must be a non-empty array");
    for (size_t i = 0; i < names->array.size(); ++i) {
      const std::string name_path = Index(path, i);
      const Json& name = names->array[i];
      if (!CheckType(name, Json::Type::kObject, name_path)) return false;
      std::string service;
      std::string method;
      for (const JsonMember& m : name.object) {
        const std::string field = Child(name_path, m.key);
        if (m.key != "service" && m.key != "method") {
          return Fail(field, "unknown field");
        }
        if (!CheckType(m.value, Json::Type::kString, field)) return false;
        // "pkg.Svc/M" as a service would never match any call.
        if (absl::StrContains(m.value.string, '/')) {
          return Fail(field, "must not contain '/'");
        }
        (m.key == "service" ? service : method) = m.value.string;
      }
      if (service.empty() && !method.empty()) {
        return Fail(name_path, "method requires a non-empty service");
      }
      if (service.empty()) {
        if (out_->default_entry.has_value()) {
          return Fail(name_path, "duplicate default name");
        }
        out_->default_entry = policy;
        continue;
      }
      auto& table = method.empty() ? out_->services : out_->methods;
      std::string key =
          method.empty() ? service : absl::StrCat(service, "/", method);
      if (!table.try_emplace(key, policy).second) {
        return Fail(name_path, absl::StrCat("duplicate name \"", key, "\""));
      }
    }
    return true;
  }

  bool ReadRetryPolicy(const Json& v, const std::string& path,
                       MethodPolicy* policy, bool* has_recv_timeout) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    RetryPolicy& retry = policy->retry;
    bool has_attempts = false;
    bool has_initial = false;
    bool has_max = false;
    bool has_multiplier = false;
    bool has_codes = false;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "maxAttempts") {
        has_attempts = true;
        ok = ReadMaxAttempts(m.value, field, &retry.max_attempts);
      } else if (m.key == "initialBackoff") {
        has_initial = true;
        ok = ReadDuration(m.value, field, &retry.backoff.initial);
      } else if (m.key == "maxBackoff") {
        has_max = true;
        ok = ReadDuration(m.value, field, &retry.backoff.max);
      } else if (m.key == "backoffMultiplier") {
        has_multiplier = true;
        ok = ReadMultiplier(m.value, field, &retry.backoff.multiplier);
      } else if (m.key == "retryableStatusCodes") {
        has_codes = true;
        ok = ReadCodes(m.value, field, &retry.retryable_codes);
      } else if (m.key == "perAttemptRecvTimeout") {
        *has_recv_timeout = true;
        ok = ReadDuration(m.value, field, &policy->per_attempt_timeout);
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    // Required as in gRFC A6: a policy with a field left out is more likely
    // a mistake than a wish for rpcguard's defaults.
    const std::pair<absl::string_view, bool> required[] = {
        {"maxAttempts", has_attempts},
        {"initialBackoff", has_initial},
        {"maxBackoff", has_max},
        {"backoffMultiplier", has_multiplier},
        {"retryableStatusCodes", has_codes},
    };
    for (const auto& [name, present] : required) {
      if (!present) return Fail(Child(path, name), "field is required");
    }
    if (retry.backoff.max < retry.backoff.initial) {
      return Fail(Child(path, "maxBackoff"), "must be at least initialBackoff");
    }
    return true;
  }

  bool ReadMaxAttempts(const Json& v, const std::string& path, int* out) {
    double n;
    if (!ReadInteger(v, path, &n)) return false;
    // Clamped before the cast: a huge double does not fit an int64.
    const std::string why = CheckMaxAttempts(
        static_cast<int64_t>(std::min(std::max(n, -1.0), 1e9)));
    if (!why.empty()) return Fail(path, why);
    *out = static_cast<int>(n);
    return true;
  }

  bool ReadMultiplier(const Json& v, const std::string& path, double* out) {
    if (!CheckType(v, Json::Type::kNumber, path)) return false;
    const std::string why = CheckMultiplier(v.number);
    if (!why.empty()) return Fail(path, why);
    *out = v.number;
    return true;
  }

  bool ReadCodes(const Json& v, const std::string& path,
                 std::optional<StatusCodeSet>* out) {
    if (!CheckType(v, Json::Type::kArray, path)) return false;
    // An empty set would disable retries while looking like a retry policy.
    if (v.array.empty()) return Fail(path, "must be a non-empty array");
    StatusCodeSet codes;
    for (size_t i = 0; i < v.array.size(); ++i) {
      const std::string code_path = Index(path, i);
      const Json& e = v.array[i];
      absl::StatusOr<grpc::StatusCode> code;
      if (e.type == Json::Type::kString) {
        code = ParseStatusCode(e.string);
      } else if (e.type == Json::Type::kNumber) {
        double n;
        if (!ReadInteger(e, code_path, &n)) return false;
        // Same words as ParseStatusCode uses for "17".
        if (n < 0 || n > 16) {
          code = absl::InvalidArgumentError(
              absl::StrCat("status code ", n, " is out of range 0..16"));
        } else {
          code = static_cast<grpc::StatusCode>(static_cast<int>(n));
        }
      } else {
        return Fail(code_path, "must be a string or a number");
      }
      if (!code.ok()) return Fail(code_path, code.status().message());
      if (*code == grpc::StatusCode::OK) {
        return Fail(code_path, "OK cannot be retryable");
      }
      codes.Add(*code);
    }
    *out = codes;
    return true;
  }

  bool ReadIdempotency(const Json& v, const std::string& path,
                       Idempotency* out) {
    if (!CheckType(v, Json::Type::kString, path)) return false;
    absl::StatusOr<Idempotency> idempotency = ParseIdempotency(v.string);
    if (!idempotency.ok()) return Fail(path, idempotency.status().message());
    *out = *idempotency;
    return true;
  }

  bool ReadJitter(const Json& v, const std::string& path, Jitter* out) {
    if (!CheckType(v, Json::Type::kString, path)) return false;
    absl::StatusOr<Jitter> jitter = ParseJitter(v.string);
    if (!jitter.ok()) return Fail(path, jitter.status().message());
    *out = *jitter;
    return true;
  }

  bool ReadRpcguard(const Json& v, const std::string& path, Entry* entry,
                    bool* has_per_attempt_timeout, HedgingExtensions* ext) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    MethodPolicy* policy = &entry->policy;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "idempotency") {
        entry->fields |= kFieldIdempotency;
        ok = ReadIdempotency(m.value, field, &policy->idempotency);
      } else if (m.key == "perAttemptTimeout") {
        *has_per_attempt_timeout = true;
        entry->fields |= kFieldPerAttemptTimeout;
        ok = ReadDuration(m.value, field, &policy->per_attempt_timeout);
      } else if (m.key == "jitter") {
        entry->fields |= kFieldJitter;
        ok = ReadJitter(m.value, field, &policy->retry.backoff.jitter);
      } else if (m.key == "minAttemptTime") {
        entry->fields |= kFieldMinAttemptTime;
        ok = ReadDuration(m.value, field, &policy->min_attempt_time);
      } else if (m.key == "hedgingDelayPercentile") {
        ext->Saw(m.key);
        double p;
        ok = ReadNumber(m.value, field, &p);
        if (ok) ext->percentile = p;
      } else if (m.key == "hedgingDelayFloor") {
        ext->Saw(m.key);
        absl::Duration d;
        ok = ReadDuration(m.value, field, &d, /*zero_ok=*/true);
        if (ok) ext->floor = d;
      } else if (m.key == "hedgingMinSamples") {
        ext->Saw(m.key);
        int n;
        ok = ReadCount(m.value, field, &n);
        if (ok) ext->min_samples = n;
      } else if (m.key == "maxExtraLoad") {
        ext->Saw(m.key);
        double x;
        ok = ReadNumber(m.value, field, &x);
        if (ok) ext->max_extra_load = x;
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    return true;
  }

  // gRFC A6's retryThrottling: the destination's token bucket, which the
  // interceptor feeds with every attempt and consults before every retry.
  bool ReadRetryThrottling(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    RetryThrottleOptions throttle;
    bool has_max_tokens = false;
    bool has_token_ratio = false;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "maxTokens") {
        has_max_tokens = true;
        ok = ReadNumber(m.value, field, &throttle.max_tokens);
      } else if (m.key == "tokenRatio") {
        has_token_ratio = true;
        ok = ReadNumber(m.value, field, &throttle.token_ratio);
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    if (!has_max_tokens) {
      return Fail(Child(path, "maxTokens"), "field is required");
    }
    if (!has_token_ratio) {
      return Fail(Child(path, "tokenRatio"), "field is required");
    }
    // The bounds are the throttle's own, so they are decided in one place;
    // its message already names the JSON path ("retryThrottling.maxTokens:
    // must be greater than 0").
    const absl::Status valid = throttle.Validate();
    if (!valid.ok()) {
      status_ = valid;
      return false;
    }
    out_->destination.throttle = throttle;
    return true;
  }

  // The top-level "rpcguard" object: settings of the destination (breaker,
  // budget, breaker key) rather than of a method.
  bool ReadDestination(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      bool ok = true;
      if (m.key == "circuitBreaker") {
        ok = ReadBreaker(m.value, field);
      } else if (m.key == "retryBudget") {
        ok = ReadBudget(m.value, field);
      } else if (m.key == "breakerKey") {
        ok = CheckType(m.value, Json::Type::kString, field);
        if (ok && m.value.string == "target") {
          out_->destination.key_per_service = false;
        } else if (ok && m.value.string == "target_and_service") {
          out_->destination.key_per_service = true;
        } else if (ok) {
          ok = Fail(field,
                    absl::StrCat("unknown breaker key \"", m.value.string,
                                 "\" (want target or target_and_service)"));
        }
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    return true;
  }

  bool ReadCount(const Json& v, const std::string& path, int* out) {
    double n;
    if (!ReadInteger(v, path, &n)) return false;
    if (n < 1 || n > 1e6) return Fail(path, "must be in [1, 1000000]");
    *out = static_cast<int>(n);
    return true;
  }

  bool ReadNumber(const Json& v, const std::string& path, double* out) {
    if (!CheckType(v, Json::Type::kNumber, path)) return false;
    *out = v.number;
    return true;
  }

  bool ReadEnabled(const Json& v, const std::string& path, bool* out) {
    if (!CheckType(v, Json::Type::kBool, path)) return false;
    *out = v.boolean;
    return true;
  }

  // Maps an options struct's own Validate() message ("circuitBreaker.x: why")
  // onto the JSON path ("rpcguard.circuitBreaker.x: why").
  bool Validated(const absl::Status& status) {
    if (status.ok()) return true;
    status_ =
        absl::InvalidArgumentError(absl::StrCat("rpcguard.", status.message()));
    return false;
  }

  bool ReadBreaker(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    BreakerOptions o;
    for (const JsonMember& m : v.object) {
      const std::string f = Child(path, m.key);
      bool ok = true;
      if (m.key == "enabled") {
        ok = ReadEnabled(m.value, f, &out_->destination.breaker_enabled);
      } else if (m.key == "window") {
        ok = ReadDuration(m.value, f, &o.window);
      } else if (m.key == "buckets") {
        ok = ReadCount(m.value, f, &o.buckets);
      } else if (m.key == "failureRatio") {
        ok = ReadNumber(m.value, f, &o.failure_ratio);
      } else if (m.key == "minAttempts") {
        ok = ReadCount(m.value, f, &o.min_attempts);
      } else if (m.key == "openTime") {
        ok = ReadDuration(m.value, f, &o.open_time);
      } else if (m.key == "maxOpenTime") {
        ok = ReadDuration(m.value, f, &o.max_open_time);
      } else if (m.key == "healthyPeriod") {
        ok = ReadDuration(m.value, f, &o.healthy_period);
      } else if (m.key == "halfOpenProbes") {
        ok = ReadCount(m.value, f, &o.half_open_probes);
      } else if (m.key == "halfOpenSuccesses") {
        ok = ReadCount(m.value, f, &o.half_open_successes);
      } else if (m.key == "probeTimeout") {
        ok = ReadDuration(m.value, f, &o.probe_timeout);
      } else {
        ok = Fail(f, "unknown field");
      }
      if (!ok) return false;
    }
    if (!Validated(o.Validate())) return false;
    out_->destination.breaker = o;
    return true;
  }

  bool ReadBudget(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    RetryBudgetOptions o;
    for (const JsonMember& m : v.object) {
      const std::string f = Child(path, m.key);
      bool ok = true;
      if (m.key == "enabled") {
        ok = ReadEnabled(m.value, f, &out_->destination.budget_enabled);
      } else if (m.key == "window") {
        ok = ReadDuration(m.value, f, &o.window);
      } else if (m.key == "buckets") {
        ok = ReadCount(m.value, f, &o.buckets);
      } else if (m.key == "ratio") {
        ok = ReadNumber(m.value, f, &o.ratio);
      } else if (m.key == "minRetriesPerSecond") {
        ok = ReadNumber(m.value, f, &o.min_retries_per_second);
      } else {
        ok = Fail(f, "unknown field");
      }
      if (!ok) return false;
    }
    if (!Validated(o.Validate())) return false;
    out_->destination.budget = o;
    return true;
  }

  ConfigEntries* out_;
  absl::Status status_;
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
