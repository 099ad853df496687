// Copyright rpcguard authors.

#include "rpcguard/observability/correlation.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace {

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZeros(absl::string_view s) {
  return s.find_first_not_of('0') == absl::string_view::npos;
}

bool IsKeyChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '_' ||
         c == '.' || c == '-';
}

}  // namespace

std::vector<std::string> DefaultCorrelationKeys() {
  return {std::string(kTraceparentKey), "x-request-id"};
}

absl::Status ValidateCorrelationKeys(absl::Span<const std::string> keys,
                                     absl::string_view path) {
  if (keys.size() > kMaxCorrelationKeys) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": at most ", kMaxCorrelationKeys, " keys, not ", keys.size()));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& k = keys[i];
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, "[", i, "]: ", why));
    };
    if (k.empty() || k.size() > kMaxCorrelationKeyLength ||
        !std::all_of(k.begin(), k.end(), IsKeyChar)) {
      return bad(absl::StrCat("must be a metadata key of 1 to ",
                              kMaxCorrelationKeyLength,
                              " characters from [0-9a-z_.-]"));
    }
    if (absl::EndsWith(k, "-bin")) {
      return bad("binary metadata (\"-bin\") cannot be a correlation id");
    }
    if (absl::StartsWith(k, "grpc-")) return bad("\"grpc-\" keys are gRPC's");
    if (!seen.insert(k).second) {
      return bad(absl::StrCat("\"", k, "\" is listed twice"));
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> TraceIdFromTraceparent(absl::string_view header) {
  header = absl::StripAsciiWhitespace(header);
  // version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2.
  constexpr size_t kLength = 55;
  if (header.size() < kLength) return std::nullopt;
  const absl::string_view version = header.substr(0, 2);
  const absl::string_view trace_id = header.substr(3, 32);
  const absl::string_view parent_id = header.substr(36, 16);
  const absl::string_view flags = header.substr(53, 2);
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') {
    return std::nullopt;
  }
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace_id) ||
      AllZeros(trace_id) || !IsLowerHex(parent_id) || AllZeros(parent_id) ||
      !IsLowerHex(flags)) {
    return std::nullopt;
  }
  // Version 00 is exactly this long; a later one may append "-" fields.
  if (header.size() > kLength && (version == "00" || header[kLength] != '-')) {
    return std::nullopt;
  }
  return std::string(trace_id);
}

bool IsCorrelationValue(absl::string_view value) {
  if (value.empty() || value.size() > kMaxCorrelationValue) return false;
  for (char c : value) {
    // Printable ASCII but space; no comma, which separates the ids on a line.
    if (c <= ' ' || c > '~' || c == ',') return false;
  }
  return true;
}

CorrelationIds ReadCorrelationIds(
    const std::multimap<std::string, std::string>& metadata,
    absl::Span<const std::string> keys) {
  CorrelationIds ids;
  for (const std::string& key : keys) {
    auto it = metadata.find(key);
    if (it == metadata.end()) continue;
    if (key == kTraceparentKey) {
      if (std::optional<std::string> id = TraceIdFromTraceparent(it->second)) {
        ids.trace_id = *std::move(id);
      }
    } else if (IsCorrelationValue(it->second)) {
      ids.others.push_back({key, it->second});
    }
  }
  return ids;
}

}  // namespace rpcguard
