// Copyright rpcguard authors.

#include "rpcguard/config.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "internal/proto_options.h"  // private to :config
#include "rpcguard/internal/utf8.h"

namespace rpcguard {
namespace {

// ---------------------------------------------------------------------------
// A small strict JSON reader (RFC 8259). Protobuf's JsonStringToMessage is
// lenient where a config must not be: it accepts unquoted keys, single
// quotes, trailing commas and unknown escapes ("\x41" reads as "x41"), and a
// Struct forgets the order of keys, which would make the first error reported
// depend on hashing.

struct JsonMember;

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  // In document order, so errors are reported in the order a reader sees.
  std::vector<JsonMember> object;
};

struct JsonMember {
  std::string key;
  Json value;
};

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Json> Parse() {
    Json root;
    SkipSpace();
    if (ParseValue(&root, 0)) {
      SkipSpace();
      if (AtEnd()) return root;
      Fail("unexpected text after the JSON value");
    }
    int line = 1;
    int column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid JSON: line ", line, ", column ", column, ": ", error_));
  }

 private:
  // Deep enough for any config; bounds the recursion on hostile input.
  static constexpr int kMaxDepth = 64;

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  bool PeekDigit() const { return !AtEnd() && absl::ascii_isdigit(Peek()); }

  bool Consume(char c) {
    if (AtEnd() || Peek() != c) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' ||
                        Peek() == '\r')) {
      ++pos_;
    }
  }

  bool Fail(std::string reason) {
    error_ = std::move(reason);
    return false;
  }

  bool ParseValue(Json* out, int depth) {
    if (AtEnd()) return Fail("unexpected end of input, expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"':
        out->type = Json::Type::kString;
        return ParseString(&out->string);
      case 't':
        out->type = Json::Type::kBool;
        out->boolean = true;
        return ParseWord("true");
      case 'f':
        out->type = Json::Type::kBool;
        return ParseWord("false");
      case 'n':
        out->type = Json::Type::kNull;
        return ParseWord("null");
      default:
        if (Peek() == '-' || absl::ascii_isdigit(Peek())) {
          out->type = Json::Type::kNumber;
          return ParseNumber(&out->number);
        }
        return Fail("expected a value");
    }
  }

  bool ParseWord(absl::string_view word) {
    if (!absl::StartsWith(text_.substr(pos_), word)) {
      return Fail("expected a value");
    }
    pos_ += word.size();
    return true;
  }

  bool ParseObject(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    out->type = Json::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Consume('}')) return true;
    // A repeated key would let a later value silently override an earlier
    // one, which is exactly the kind of typo a strict config must catch.
    absl::flat_hash_set<std::string> keys;
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() != '"') return Fail("expected a string key");
      const size_t key_pos = pos_;
      JsonMember member;
      if (!ParseString(&member.key)) return false;
      if (!keys.insert(member.key).second) {
        pos_ = key_pos;
        return Fail(absl::StrCat("duplicate key \"", member.key, "\""));
      }
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':'");
      SkipSpace();
      if (!ParseValue(&member.value, depth)) return false;
      out->object.push_back(std::move(member));
      SkipSpace();
      if (Consume('}')) return true;
      if (!Consume(',')) return Fail("expected ',' or '}'");
    }
  }

  bool ParseArray(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    out->type = Json::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      SkipSpace();
      out->array.emplace_back();
      if (!ParseValue(&out->array.back(), depth)) return false;
      SkipSpace();
      if (Consume(']')) return true;
      if (!Consume(',')) return Fail("expected ',' or ']'");
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Fail("invalid \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        value |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        value |= c - 'A' + 10;
      } else {
        return Fail("invalid \\u escape");
      }
    }
    pos_ += 4;
    *out = value;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("control character in string");
      }
      ++pos_;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) return Fail("unterminated string");
      const char escape = text_[pos_];
      ++pos_;
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out->push_back(escape);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail("unpaired surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low;
            if (!Consume('\\') || !Consume('u') || !ParseHex4(&low) ||
                low < 0xDC00 || low > 0xDFFF) {
              return Fail("unpaired surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          internal::AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Fail("invalid escape in string");
      }
    }
  }

  bool ParseNumber(double* out) {
    const size_t start = pos_;
    Consume('-');
    if (!Consume('0')) {
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    if (Consume('.')) {
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    if (!absl::SimpleAtod(text_.substr(start, pos_ - start), out) ||
        !std::isfinite(*out)) {
      pos_ = start;
      return Fail("number out of range");
    }
    return true;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// ---------------------------------------------------------------------------
// Reading the service config.

// Multipliers above this are taken for typos: the backoff would reach
// maxBackoff after a single retry anyway, so a larger one changes nothing a
// smaller one could not say.
constexpr double kMaxBackoffMultiplier = 1000;
// gRFC A6's bound on retryThrottling.maxTokens.
constexpr double kMaxRetryTokens = 1000;
// The largest proto3 Duration (10,000 years), as protobuf defines it.
constexpr int64_t kMaxDurationSeconds = 315576000000;

absl::string_view TypeName(Json::Type type) {
  switch (type) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return "a boolean";
    case Json::Type::kNumber:
      return "a number";
    case Json::Type::kString:
      return "a string";
    case Json::Type::kArray:
      return "an array";
    case Json::Type::kObject:
      return "an object";
  }
  return "null";
}

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
using PolicyMap = absl::flat_hash_map<std::string, Entry>;

// Reads a parsed service config into the tables of a Config. Stops at the
// first error, which status() then returns.
class ConfigReader {
 public:
  ConfigReader(PolicyMap* methods, PolicyMap* services,
               std::optional<Entry>* default_policy,
               DestinationConfig* destination)
      : methods_(methods),
        services_(services),
        default_policy_(default_policy),
        destination_(destination) {}

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
    return Fail(path, absl::StrCat("must be ", TypeName(type)));
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
  // is never what anyone meant.
  bool ReadDuration(const Json& v, absl::string_view path,
                    absl::Duration* out) {
    if (!CheckType(v, Json::Type::kString, path)) return false;
    std::string error;
    absl::Duration d;
    if (!ParseProtoDuration(v.string, &d, &error)) return Fail(path, error);
    const std::string why = CheckPositiveDuration(d);
    if (!why.empty()) return Fail(path, why);
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
        ok = ReadRpcguard(m.value, field, &entry, &has_per_attempt_timeout);
      } else if (m.key == "maxRequestMessageBytes" ||
                 m.key == "maxResponseMessageBytes") {
        // gRPC's own; it validates them when given the same JSON.
      } else if (m.key == "hedgingPolicy") {
        ok = Fail(field, "hedging is not supported; use retryPolicy");
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
    return ReadNames(names, Child(path, "name"), entry);
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
        if (default_policy_->has_value()) {
          return Fail(name_path, "duplicate default name");
        }
        *default_policy_ = policy;
        continue;
      }
      PolicyMap* table = method.empty() ? services_ : methods_;
      std::string key =
          method.empty() ? service : absl::StrCat(service, "/", method);
      if (!table->try_emplace(key, policy).second) {
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
                    bool* has_per_attempt_timeout) {
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
      } else {
        ok = Fail(field, "unknown field");
      }
      if (!ok) return false;
    }
    return true;
  }

  // Validated now so that a config that will be used later fails today;
  // nothing is stored yet.
  bool ReadRetryThrottling(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    RetryThrottleOptions throttle;
    bool has_max_tokens = false;
    bool has_token_ratio = false;
    for (const JsonMember& m : v.object) {
      const std::string field = Child(path, m.key);
      if (m.key == "maxTokens") {
        has_max_tokens = true;
        if (!CheckType(m.value, Json::Type::kNumber, field)) return false;
        if (m.value.number <= 0) return Fail(field, "must be greater than 0");
        if (m.value.number > kMaxRetryTokens) {
          return Fail(field, absl::StrCat("must be at most ", kMaxRetryTokens));
        }
        throttle.max_tokens = m.value.number;
      } else if (m.key == "tokenRatio") {
        has_token_ratio = true;
        if (!CheckType(m.value, Json::Type::kNumber, field)) return false;
        if (m.value.number <= 0) return Fail(field, "must be greater than 0");
        throttle.token_ratio = m.value.number;
      } else {
        return Fail(field, "unknown field");
      }
    }
    if (!has_max_tokens) {
      return Fail(Child(path, "maxTokens"), "field is required");
    }
    if (!has_token_ratio) {
      return Fail(Child(path, "tokenRatio"), "field is required");
    }
    // The throttle's own rules (tokenRatio keeps 3 decimals, so >= 0.001).
    const absl::Status valid = throttle.Validate();
    if (!valid.ok()) return Fail(path, valid.message());
    destination_->throttle = throttle;
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
          destination_->key_per_service = false;
        } else if (ok && m.value.string == "target_and_service") {
          destination_->key_per_service = true;
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
        ok = ReadEnabled(m.value, f, &destination_->breaker_enabled);
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
    destination_->breaker = o;
    return true;
  }

  bool ReadBudget(const Json& v, const std::string& path) {
    if (!CheckType(v, Json::Type::kObject, path)) return false;
    RetryBudgetOptions o;
    for (const JsonMember& m : v.object) {
      const std::string f = Child(path, m.key);
      bool ok = true;
      if (m.key == "enabled") {
        ok = ReadEnabled(m.value, f, &destination_->budget_enabled);
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
    destination_->budget = o;
    return true;
  }

  PolicyMap* methods_;
  PolicyMap* services_;
  std::optional<Entry>* default_policy_;
  DestinationConfig* destination_;
  absl::Status status_;
};

}  // namespace

Config::Config() : tables_(std::make_shared<Tables>()) {}

absl::StatusOr<Config> Config::FromJson(absl::string_view json) {
  absl::StatusOr<Json> root = JsonParser(json).Parse();
  if (!root.ok()) return root.status();
  Config config;
  Tables& t = *config.tables_;
  ConfigReader reader(&t.methods, &t.services, &t.default_policy,
                      &t.destination);
  absl::Status status = reader.Read(*root);
  if (!status.ok()) return status;
  return config;
}

ResolvedPolicy Config::Resolve(absl::string_view full_method) const {
  const Tables& t = *tables_;
  ResolvedPolicy r;
  uint32_t have = 0;
  auto take = [&](const MethodPolicy& from, uint32_t fields,
                  PolicySource source) {
    const uint32_t before = have;
    MergePolicy(from, fields, &r.policy, &have);
    for (int i = 0; i < kNumPolicyFields; ++i) {
      if ((have & ~before) & (1u << i)) r.sources[i] = source;
    }
  };

  absl::string_view service_name;
  absl::string_view method_name;
  absl::string_view path = full_method;
  if (absl::ConsumePrefix(&path, "/")) {
    const size_t slash = path.find('/');
    if (slash != absl::string_view::npos && slash > 0 &&
        slash + 1 < path.size()) {
      service_name = path.substr(0, slash);
      method_name = path.substr(slash + 1);
      // `path` is now "pkg.Svc/Method", the methods table's key form.
      auto method = t.methods.find(path);
      if (method != t.methods.end()) {
        take(method->second.policy, method->second.fields,
             PolicySource::kConfigMethod);
      }
      auto service = t.services.find(service_name);
      if (service != t.services.end()) {
        take(service->second.policy, service->second.fields,
             PolicySource::kConfigService);
      }
    }
  }
  if (!service_name.empty() && have != kAllPolicyFields) {
    absl::StatusOr<ProtoPolicies> proto =
        ReadProtoPolicies(service_name, method_name);
    if (!proto.ok()) {
      r.error = proto.status();
    } else {
      take(proto->method.policy, proto->method.fields,
           PolicySource::kProtoMethod);
      take(proto->service.policy, proto->service.fields,
           PolicySource::kProtoService);
      take(proto->idempotency_level.policy, proto->idempotency_level.fields,
           PolicySource::kIdempotencyLevel);
    }
  }
  if (t.default_policy.has_value()) {
    take(t.default_policy->policy, t.default_policy->fields,
         PolicySource::kConfigDefault);
  }
  return r;
}

const DestinationConfig& Config::destination() const {
  return tables_->destination;
}

void Config::set_destination(const DestinationConfig& destination) {
  if (tables_.use_count() != 1) tables_ = std::make_shared<Tables>(*tables_);
  tables_->destination = destination;
}

MethodPolicy Config::Lookup(absl::string_view full_method) const {
  return Resolve(full_method).policy;
}

std::string Config::Explain(absl::string_view full_method) const {
  const ResolvedPolicy r = Resolve(full_method);
  const MethodPolicy& p = r.policy;
  std::string out = absl::StrCat(full_method, "\n");
  if (!r.error.ok()) {
    absl::StrAppend(&out, "  error: ", r.error.message(),
                    " (calls to this method fail until it is fixed)\n");
  }
  const bool may_repeat = MayRepeat(p.idempotency) && p.retry.max_attempts > 1;
  absl::StrAppend(&out, "  => ",
                  may_repeat ? absl::StrCat("retried, up to ",
                                            p.retry.max_attempts, " attempts")
                             : "tried once",
                  "\n");
  auto duration = [](absl::Duration d) {
    return d == absl::InfiniteDuration() ? std::string("none")
                                         : absl::FormatDuration(d);
  };
  std::string codes;
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<grpc::StatusCode>(c);
    if (p.MakeClassifier().retriable().Contains(code)) {
      absl::StrAppend(&codes, codes.empty() ? "" : ",", StatusCodeName(code));
    }
  }
  const std::string values[kNumPolicyFields] = {
      std::string(IdempotencyName(p.idempotency)),
      absl::StrCat("maxAttempts=", p.retry.max_attempts,
                   " initialBackoff=", duration(p.retry.backoff.initial),
                   " maxBackoff=", duration(p.retry.backoff.max),
                   " backoffMultiplier=", p.retry.backoff.multiplier,
                   " retryableStatusCodes=", codes),
      std::string(JitterName(p.retry.backoff.jitter)),
      duration(p.per_attempt_timeout),
      duration(p.timeout),
      duration(p.min_attempt_time),
      p.wait_for_ready ? (*p.wait_for_ready ? "true" : "false") : "unset",
  };
  for (int i = 0; i < kNumPolicyFields; ++i) {
    absl::StrAppendFormat(&out, "  %-18s %s  [%s]\n",
                          absl::StrCat(PolicyFieldName(i), ":"), values[i],
                          PolicySourceName(r.sources[i]));
  }
  return out;
}

absl::string_view PolicySourceName(PolicySource source) {
  switch (source) {
    case PolicySource::kDefault:
      return "rpcguard default";
    case PolicySource::kConfigDefault:
      return "config: default entry";
    case PolicySource::kIdempotencyLevel:
      return "proto: idempotency_level";
    case PolicySource::kProtoService:
      return "proto: (rpcguard.v1.service)";
    case PolicySource::kProtoMethod:
      return "proto: (rpcguard.v1.method)";
    case PolicySource::kConfigService:
      return "config: service entry";
    case PolicySource::kConfigMethod:
      return "config: method entry";
  }
  return "";
}

void Config::Set(absl::string_view service, absl::string_view method,
                 const MethodPolicy& policy) {
  // Copies share the tables; give this Config its own before writing so the
  // copies are unaffected.
  if (tables_.use_count() != 1) tables_ = std::make_shared<Tables>(*tables_);
  const Entry entry{policy, kAllPolicyFields};
  if (service.empty()) {
    tables_->default_policy = entry;
  } else if (method.empty()) {
    tables_->services.insert_or_assign(std::string(service), entry);
  } else {
    tables_->methods.insert_or_assign(absl::StrCat(service, "/", method),
                                      entry);
  }
}

}  // namespace rpcguard
