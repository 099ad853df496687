// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/call_policy_carrier.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rpcguard/channel.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {
namespace {

absl::Status Malformed(absl::string_view field, absl::string_view why,
                       absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(kCallPolicyPath, field.empty() ? "" : ".", field, ": ", why,
                   ": \"", absl::CHexEscape(value), "\""));
}

// The keys, in CallPolicy's order; the bit of a key is its index.
constexpr absl::string_view kKeys[] = {
    "max_attempts", "per_attempt_timeout", "initial_backoff",
    "max_backoff",  "backoff_multiplier",  "jitter",
    "hedging",      "trace_verbosity",
};

absl::Status ParseDurationField(absl::string_view key, absl::string_view value,
                                std::optional<absl::Duration>* out) {
  absl::Duration d;
  if (!absl::ParseDuration(value, &d)) {
    return Malformed(key, "not a duration", value);
  }
  *out = d;
  return absl::OkStatus();
}

// Reads `value` into the field `key`.
absl::Status ParseField(absl::string_view key, absl::string_view value,
                        CallPolicy* out) {
  if (key == "max_attempts") {
    int n;
    if (!absl::SimpleAtoi(value, &n)) {
      return Malformed(key, "not an integer", value);
    }
    out->max_attempts = n;
  } else if (key == "per_attempt_timeout") {
    return ParseDurationField(key, value, &out->per_attempt_timeout);
  } else if (key == "initial_backoff") {
    return ParseDurationField(key, value, &out->initial_backoff);
  } else if (key == "max_backoff") {
    return ParseDurationField(key, value, &out->max_backoff);
  } else if (key == "backoff_multiplier") {
    double m;
    if (!absl::SimpleAtod(value, &m)) {
      return Malformed(key, "not a number", value);
    }
    out->backoff_multiplier = m;
  } else if (key == "jitter") {
    absl::StatusOr<Jitter> jitter = ParseJitter(value);
    if (!jitter.ok()) return Malformed(key, "not a jitter", value);
    out->jitter = *jitter;
  } else if (key == "hedging") {
    if (value != "true" && value != "false") {
      return Malformed(key, "not true or false", value);
    }
    out->hedging = value == "true";
  } else if (key == "trace_verbosity") {
    absl::StatusOr<TraceVerbosity> v = ParseTraceVerbosity(value);
    if (!v.ok()) return Malformed(key, "not a trace verbosity", value);
    out->trace_verbosity = *v;
  } else {
    return Malformed(key, "unknown field", value);
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeCallPolicy(const CallPolicy& call) {
  std::string out;
  auto add = [&out](absl::string_view key, absl::string_view value) {
    absl::StrAppend(&out, out.empty() ? "" : ";", key, "=", value);
  };
  if (call.max_attempts) add("max_attempts", absl::StrCat(*call.max_attempts));
  if (call.per_attempt_timeout) {
    add("per_attempt_timeout", absl::FormatDuration(*call.per_attempt_timeout));
  }
  if (call.initial_backoff) {
    add("initial_backoff", absl::FormatDuration(*call.initial_backoff));
  }
  if (call.max_backoff) {
    add("max_backoff", absl::FormatDuration(*call.max_backoff));
  }
  if (call.backoff_multiplier) {
    // Round-trips every double.
    add("backoff_multiplier",
        absl::StrFormat("%.17g", *call.backoff_multiplier));
  }
  if (call.jitter) {
    const absl::string_view name = JitterName(*call.jitter);
    // As trace_verbosity below: a value outside the enum travels as its
    // number, which fails to parse, never as a valid name.
    add("jitter", name.empty() ? absl::StrCat(static_cast<int>(*call.jitter))
                               : std::string(name));
  }
  if (call.hedging) add("hedging", *call.hedging ? "true" : "false");
  if (call.trace_verbosity) {
    const absl::string_view name = TraceVerbosityName(*call.trace_verbosity);
    // A value out of the enum's range: one that fails to parse, naming it.
    add("trace_verbosity",
        name.empty() ? absl::StrCat(static_cast<int>(*call.trace_verbosity))
                     : std::string(name));
  }
  return out;
}

absl::StatusOr<CallPolicy> ParseCallPolicy(absl::string_view text) {
  CallPolicy call;
  if (text.empty()) return call;
  uint32_t seen = 0;
  for (absl::string_view item : absl::StrSplit(text, ';')) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return Malformed("", "an item is not key=value", item);
    }
    const absl::string_view key = item.substr(0, eq);
    const absl::string_view value = item.substr(eq + 1);
    for (size_t i = 0; i < std::size(kKeys); ++i) {
      if (key != kKeys[i]) continue;
      if (seen & (1u << i)) return Malformed(key, "given twice", value);
      seen |= 1u << i;
    }
    if (absl::Status s = ParseField(key, value, &call); !s.ok()) return s;
  }
  return call;
}

absl::StatusOr<std::optional<CallPolicy>> TakeCallPolicy(
    std::multimap<std::string, std::string>* md) {
  if (md->empty()) return std::optional<CallPolicy>();
  const std::string& header = HeaderString<kCallPolicyHeader>();
  auto [first, last] = md->equal_range(header);
  if (first == last) return std::optional<CallPolicy>();
  const bool twice = std::next(first) != last;
  // Parsed before it is erased; erased whatever the answer, so that a bad
  // entry never reaches a server either.
  absl::StatusOr<CallPolicy> call =
      twice ? absl::InvalidArgumentError(absl::StrCat(
                  kCallPolicyPath, ": set more than once on one call"))
            : ParseCallPolicy(first->second);
  md->erase(first, last);
  if (!call.ok()) return call.status();
  return std::optional<CallPolicy>(*std::move(call));
}

}  // namespace internal
}  // namespace rpcguard
