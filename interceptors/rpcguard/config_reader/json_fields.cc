// Copyright rpcguard authors.

#include "rpcguard/config_reader/json_fields.h"  // private to :config

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {
namespace internal {
namespace {

// The largest proto3 Duration (10,000 years), as protobuf defines it.
constexpr int64_t kMaxDurationSeconds = 315576000000;

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

}  // namespace

void ConfigErrors::Add(absl::string_view path, absl::string_view reason) {
  ++count_;
  if (kept_.size() < kMaxKept)
    kept_.push_back(absl::StrCat(path, ": ", reason));
}

void ConfigErrors::Add(const absl::Status& status) {
  if (status.ok()) return;
  ++count_;
  if (kept_.size() < kMaxKept) kept_.emplace_back(status.message());
}

absl::Status ConfigErrors::ToStatus() const {
  if (count_ == 0) return absl::OkStatus();
  std::string message = absl::StrJoin(kept_, "; ");
  if (count_ > kept_.size()) {
    absl::StrAppend(&message, "; and ", count_ - kept_.size(), " more errors");
  }
  return absl::InvalidArgumentError(message);
}

std::string Child(absl::string_view path, absl::string_view key) {
  return absl::StrCat(path, ".", key);
}

std::string Index(absl::string_view path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

bool CheckType(const Json& v, Json::Type type, absl::string_view path,
               ConfigErrors& errors) {
  if (v.type == type) return true;
  errors.Add(path, absl::StrCat("must be ", JsonTypeName(type)));
  return false;
}

bool ReadInteger(const Json& v, absl::string_view path, ConfigErrors& errors,
                 double* out) {
  if (!CheckType(v, Json::Type::kNumber, path, errors)) return false;
  if (std::trunc(v.number) != v.number) {
    errors.Add(path, "must be an integer");
    return false;
  }
  *out = v.number;
  return true;
}

bool ReadNumber(const Json& v, absl::string_view path, ConfigErrors& errors,
                double* out) {
  if (!CheckType(v, Json::Type::kNumber, path, errors)) return false;
  *out = v.number;
  return true;
}

bool ReadCount(const Json& v, absl::string_view path, ConfigErrors& errors,
               int* out) {
  double n;
  if (!ReadInteger(v, path, errors, &n)) return false;
  if (n < 1 || n > 1e6) {
    errors.Add(path, "must be in [1, 1000000]");
    return false;
  }
  *out = static_cast<int>(n);
  return true;
}

bool ReadBool(const Json& v, absl::string_view path, ConfigErrors& errors,
              bool* out) {
  if (!CheckType(v, Json::Type::kBool, path, errors)) return false;
  *out = v.boolean;
  return true;
}

bool ReadDuration(const Json& v, absl::string_view path, ConfigErrors& errors,
                  absl::Duration* out, bool zero_ok) {
  // Every duration rpcguard reads must be positive: a zero timeout or
  // backoff is never what anyone meant.
  if (!CheckType(v, Json::Type::kString, path, errors)) return false;
  std::string error;
  absl::Duration d;
  if (!ParseProtoDuration(v.string, &d, &error)) {
    errors.Add(path, error);
    return false;
  }
  if (zero_ok && d < absl::ZeroDuration()) {
    errors.Add(path, "must be 0 or more");
    return false;
  }
  const std::string why = CheckPositiveDuration(d);
  if (!why.empty() && !(zero_ok && d == absl::ZeroDuration())) {
    errors.Add(path, why);
    return false;
  }
  *out = d;
  return true;
}

bool ReadCodes(const Json& v, absl::string_view path, ConfigErrors& errors,
               std::optional<StatusCodeSet>* out) {
  if (!CheckType(v, Json::Type::kArray, path, errors)) return false;
  // An empty set would disable retries while looking like a retry policy.
  if (v.array.empty()) {
    errors.Add(path, "must be a non-empty array");
    return false;
  }
  StatusCodeSet codes;
  bool ok = true;
  for (size_t i = 0; i < v.array.size(); ++i) {
    const std::string code_path = Index(path, i);
    const Json& e = v.array[i];
    absl::StatusOr<grpc::StatusCode> code;
    if (e.type == Json::Type::kString) {
      code = ParseStatusCode(e.string);
    } else if (e.type == Json::Type::kNumber) {
      double n;
      if (!ReadInteger(e, code_path, errors, &n)) {
        ok = false;
        continue;
      }
      // Same words as ParseStatusCode uses for "17".
      if (n < 0 || n > 16) {
        code = absl::InvalidArgumentError(
            absl::StrCat("status code ", n, " is out of range 0..16"));
      } else {
        code = static_cast<grpc::StatusCode>(static_cast<int>(n));
      }
    } else {
      errors.Add(code_path, "must be a string or a number");
      ok = false;
      continue;
    }
    if (!code.ok()) {
      errors.Add(code_path, code.status().message());
      ok = false;
    } else if (*code == grpc::StatusCode::OK) {
      errors.Add(code_path, "OK cannot be retryable");
      ok = false;
    } else {
      codes.Add(*code);
    }
  }
  if (ok) *out = codes;
  return ok;
}

}  // namespace internal
}  // namespace rpcguard
