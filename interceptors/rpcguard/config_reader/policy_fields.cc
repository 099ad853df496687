// Copyright rpcguard authors.

#include "rpcguard/config_reader/policy_fields.h"  // private to :config

#include <algorithm>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/rpcguard/v1/options.pb.h"

namespace rpcguard {
namespace {

using internal::Child;
using internal::ConfigErrors;
using internal::Json;
using internal::JsonMemberRow;
using ProtoPolicy = ::rpcguard::v1::MethodPolicy;

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string ExplainDuration(absl::Duration d) {
  return d == absl::InfiniteDuration() ? std::string("none")
                                       : absl::FormatDuration(d);
}

// A proto Duration option field, which must be positive as in the JSON.
void ReadProtoDuration(const google::protobuf::Duration& d,
                       const std::string& where, absl::string_view field,
                       ConfigErrors& errors, absl::Duration* out) {
  const absl::Duration value = FromProto(d);
  const std::string why = CheckPositiveDuration(value);
  if (!why.empty()) {
    errors.Add(absl::StrCat(where, ".", field), why);
    return;
  }
  *out = value;
}

// --- idempotency ----------------------------------------------------------

void ReadIdempotencyJson(const Json& v, const std::string& path,
                         MethodJsonState& state) {
  if (!CheckType(v, Json::Type::kString, path, *state.errors)) return;
  absl::StatusOr<Idempotency> idempotency = ParseIdempotency(v.string);
  if (!idempotency.ok()) {
    state.errors->Add(path, idempotency.status().message());
    return;
  }
  state.entry->policy.idempotency = *idempotency;
}

bool ReadIdempotencyProto(const ProtoPolicy& in, const std::string& where,
                          ConfigErrors& errors, MethodPolicy* out) {
  switch (in.idempotency()) {
    case ProtoPolicy::IDEMPOTENCY_UNSPECIFIED:
      return false;
    case ProtoPolicy::NO_SIDE_EFFECTS:
      out->idempotency = Idempotency::kNoSideEffects;
      return true;
    case ProtoPolicy::IDEMPOTENT:
      out->idempotency = Idempotency::kIdempotent;
      return true;
    case ProtoPolicy::KEYED:
      out->idempotency = Idempotency::kKeyed;
      return true;
    case ProtoPolicy::UNKNOWN:
      out->idempotency = Idempotency::kUnknown;
      return true;
    default:
      errors.Add(absl::StrCat(where, ".idempotency"),
                 absl::StrCat("unknown value ", in.idempotency()));
      return false;
  }
}

// --- retryPolicy ----------------------------------------------------------

// What the retryPolicy members are read into.
struct RetryJson {
  MethodJsonState* state;
  RetryPolicy* retry;
  // Whether each bound was read, for the check between them.
  bool initial_ok = false;
  bool max_ok = false;
};

constexpr JsonMemberRow<RetryJson> kRetryMembers[] = {
    {"maxAttempts",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       double n;
       if (!ReadInteger(v, path, errors, &n)) return false;
       // Clamped before the cast: a huge double does not fit an int64.
       const std::string why = CheckMaxAttempts(
           static_cast<int64_t>(std::min(std::max(n, -1.0), 1e9)));
       if (!why.empty()) {
         errors.Add(path, why);
         return false;
       }
       out->retry->max_attempts = static_cast<int>(n);
       return true;
     }},
    {"initialBackoff",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       return out->initial_ok =
                  ReadDuration(v, path, errors, &out->retry->backoff.initial);
     }},
    {"maxBackoff",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       return out->max_ok =
                  ReadDuration(v, path, errors, &out->retry->backoff.max);
     }},
    {"backoffMultiplier",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       double m;
       if (!ReadNumber(v, path, errors, &m)) return false;
       const std::string why = CheckMultiplier(m);
       if (!why.empty()) {
         errors.Add(path, why);
         return false;
       }
       out->retry->backoff.multiplier = m;
       return true;
     }},
    {"retryableStatusCodes",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       return ReadCodes(v, path, errors, &out->retry->retryable_codes);
     }},
    // gRPC's spelling of rpcguard.perAttemptTimeout: it sets that setting.
    {"perAttemptRecvTimeout",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        RetryJson* out) {
       out->state->has_recv_timeout = true;
       out->state->entry->fields |= kFieldPerAttemptTimeout;
       return ReadDuration(v, path, errors,
                           &out->state->entry->policy.per_attempt_timeout);
     }},
};

void ReadRetryJson(const Json& v, const std::string& path,
                   MethodJsonState& state) {
  RetryJson read{&state, &state.entry->policy.retry};
  const uint64_t seen =
      internal::ReadMembers(v, path, kRetryMembers, *state.errors, &read);
  if (v.type != Json::Type::kObject) return;
  // Required as in gRFC A6 (all but perAttemptRecvTimeout, the last row): a
  // policy with a field left out is more likely a mistake than a wish for
  // rpcguard's defaults.
  for (size_t i = 0; i + 1 < std::size(kRetryMembers); ++i) {
    if (!(seen & (uint64_t{1} << i))) {
      state.errors->Add(Child(path, kRetryMembers[i].key), "field is required");
    }
  }
  if (read.initial_ok && read.max_ok &&
      read.retry->backoff.max < read.retry->backoff.initial) {
    state.errors->Add(Child(path, "maxBackoff"),
                      "must be at least initialBackoff");
  }
}

bool ReadRetryProto(const ProtoPolicy& in, const std::string& where,
                    ConfigErrors& errors, MethodPolicy* out) {
  if (!in.has_retry()) return false;
  const ::rpcguard::v1::RetryPolicy& r = in.retry();
  RetryPolicy& retry = out->retry;
  auto fail = [&](absl::string_view field, absl::string_view why) {
    errors.Add(absl::StrCat(where, ".retry.", field), why);
  };
  // Unset fields keep rpcguard's defaults: proto3 cannot say "required".
  if (r.max_attempts() != 0) {
    const std::string why = CheckMaxAttempts(r.max_attempts());
    if (why.empty()) {
      retry.max_attempts = r.max_attempts();
    } else {
      fail("max_attempts", why);
    }
  }
  const size_t before = errors.count();
  if (r.has_initial_backoff()) {
    ReadProtoDuration(r.initial_backoff(), where, "retry.initial_backoff",
                      errors, &retry.backoff.initial);
  }
  if (r.has_max_backoff()) {
    ReadProtoDuration(r.max_backoff(), where, "retry.max_backoff", errors,
                      &retry.backoff.max);
  }
  if (errors.count() == before && retry.backoff.max < retry.backoff.initial) {
    fail("max_backoff", "must be at least initial_backoff");
  }
  if (r.backoff_multiplier() != 0) {
    const std::string why = CheckMultiplier(r.backoff_multiplier());
    if (why.empty()) {
      retry.backoff.multiplier = r.backoff_multiplier();
    } else {
      fail("backoff_multiplier", why);
    }
  }
  if (r.retryable_status_codes_size() > 0) {
    StatusCodeSet codes;
    for (int i = 0; i < r.retryable_status_codes_size(); ++i) {
      const std::string field = absl::StrCat("retryable_status_codes[", i, "]");
      absl::StatusOr<grpc::StatusCode> code =
          ParseStatusCode(r.retryable_status_codes(i));
      if (!code.ok()) {
        fail(field, code.status().message());
      } else if (*code == grpc::StatusCode::OK) {
        fail(field, "OK cannot be retryable");
      } else {
        codes.Add(*code);
      }
    }
    retry.retryable_codes = codes;
  }
  return true;
}

// The jitter is a member of the retry policy's backoff but a setting of its
// own (rpcguard.jitter): a retryPolicy from one source keeps the jitter that
// another source set, so this copies all of `retry` but the jitter.
void MergeRetry(const MethodPolicy& from, MethodPolicy* to) {
  const Jitter jitter = to->retry.backoff.jitter;
  to->retry = from.retry;
  to->retry.backoff.jitter = jitter;
}

std::string ExplainRetry(const MethodPolicy& p) {
  std::string codes;
  const StatusCodeSet retriable = p.MakeClassifier().retriable();
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<grpc::StatusCode>(c);
    if (retriable.Contains(code)) {
      absl::StrAppend(&codes, codes.empty() ? "" : ",", StatusCodeName(code));
    }
  }
  const BackoffParams& b = p.retry.backoff;
  return absl::StrCat("maxAttempts=", p.retry.max_attempts,
                      " initialBackoff=", ExplainDuration(b.initial),
                      " maxBackoff=", ExplainDuration(b.max),
                      " backoffMultiplier=", b.multiplier,
                      " retryableStatusCodes=", codes);
}

// --- hedgingPolicy --------------------------------------------------------

constexpr JsonMemberRow<HedgingPolicy> kHedgingMembers[] = {
    {"maxAttempts",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingPolicy* out) {
       double n;
       if (!ReadInteger(v, path, errors, &n)) return false;
       // Clamped into the int range; HedgingPolicy::Validate names the
       // bound it breaks.
       out->max_attempts = static_cast<int>(std::min(
           std::max(n, -1.0), static_cast<double>(kMaxAttemptsCap + 1)));
       return true;
     }},
    {"hedgingDelay",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingPolicy* out) {
       return ReadDuration(v, path, errors, &out->delay, /*zero_ok=*/true);
     }},
    {"nonFatalStatusCodes",
     [](const Json& v, const std::string& path, ConfigErrors& errors,
        HedgingPolicy* out) {
       // Unlike retryableStatusCodes, empty is fine: every failure is fatal.
       if (!CheckType(v, Json::Type::kArray, path, errors)) return false;
       if (v.array.empty()) return true;
       std::optional<StatusCodeSet> codes;
       if (!ReadCodes(v, path, errors, &codes)) return false;
       out->non_fatal_codes = *codes;
       return true;
     }},
};

// Reads the hedgingPolicy object itself. Its rpcguard extensions
// (hedgingDelayPercentile, ...) live in the entry's rpcguard object, so the
// entry's reader folds them in and validates the whole once it has read
// every key (config_reader.cc).
void ReadHedgingJson(const Json& v, const std::string& path,
                     MethodJsonState& state) {
  HedgingPolicy& hedging = state.entry->policy.hedging.emplace();
  const uint64_t seen =
      internal::ReadMembers(v, path, kHedgingMembers, *state.errors, &hedging);
  if (v.type == Json::Type::kObject && !(seen & 1)) {
    state.errors->Add(Child(path, "maxAttempts"), "is required");
  }
}

bool ReadHedgingProto(const ProtoPolicy& proto, const std::string& where,
                      ConfigErrors& errors, MethodPolicy* policy) {
  if (!proto.has_hedging()) return false;
  const ::rpcguard::v1::HedgingPolicy& in = proto.hedging();
  HedgingPolicy& out = policy->hedging.emplace();
  // Unset fields keep HedgingPolicy's defaults, but for max_attempts: A6
  // requires it, and a bare `hedging: {}` would otherwise send every call
  // twice at once.
  if (in.max_attempts() == 0) {
    errors.Add(absl::StrCat(where, ".hedging.max_attempts"), "is required");
    return true;
  }
  out.max_attempts = in.max_attempts();
  if (in.has_hedging_delay()) out.delay = FromProto(in.hedging_delay());
  bool codes_ok = true;
  for (int i = 0; i < in.non_fatal_status_codes_size(); ++i) {
    absl::StatusOr<grpc::StatusCode> code =
        ParseStatusCode(in.non_fatal_status_codes(i));
    if (!code.ok()) {
      errors.Add(
          absl::StrCat(where, ".hedging.non_fatal_status_codes[", i, "]"),
          code.status().message());
      codes_ok = false;
      continue;
    }
    out.non_fatal_codes.Add(*code);  // OK: Validate says it is not allowed
  }
  // proto3 cannot tell 0 from unset: 0 takes the default, as for retry.
  if (in.delay_percentile() != 0)
    out.adaptive_percentile = in.delay_percentile();
  if (in.has_delay_floor()) out.adaptive_floor = FromProto(in.delay_floor());
  if (in.min_samples() != 0) out.min_samples = in.min_samples();
  if (in.max_extra_load() != 0) out.max_extra_load = in.max_extra_load();
  // The JSON's rules and reasons, in the option's field names; a code that
  // did not parse is reported once, above.
  if (codes_ok) {
    errors.Add(out.Validate(where, HedgingPolicy::FieldNames::kProto));
  }
  return true;
}

std::string ExplainHedging(const MethodPolicy& p) {
  if (!p.hedging) return "none";
  const HedgingPolicy& h = *p.hedging;
  return absl::StrCat(
      "maxAttempts=", h.max_attempts,
      " hedgingDelay=", ExplainDuration(h.delay),
      h.adaptive_percentile
          ? absl::StrCat(" percentile=", *h.adaptive_percentile,
                         " floor=", ExplainDuration(h.adaptive_floor),
                         " minSamples=", h.min_samples)
          : "",
      " maxExtraLoad=", h.max_extra_load);
}

// --- the simple settings --------------------------------------------------

// A positive duration read into the member `member` of MethodPolicy.
template <absl::Duration MethodPolicy::*member>
void ReadDurationJson(const Json& v, const std::string& path,
                      MethodJsonState& state) {
  ReadDuration(v, path, *state.errors, &(state.entry->policy.*member));
}

template <auto member>
void Copy(const MethodPolicy& from, MethodPolicy* to) {
  to->*member = from.*member;
}

template <absl::Duration MethodPolicy::*member>
std::string ExplainDurationMember(const MethodPolicy& p) {
  return ExplainDuration(p.*member);
}

constexpr PolicyFieldRow kRows[] = {
    {kFieldIndexIdempotency, "idempotency", JsonPlace::kRpcguard, "idempotency",
     ReadIdempotencyJson, ReadIdempotencyProto,
     Copy<&MethodPolicy::idempotency>,
     [](const MethodPolicy& p) {
       return std::string(IdempotencyName(p.idempotency));
     }},
    {kFieldIndexRetry, "retryPolicy", JsonPlace::kMethodConfig, "retry",
     ReadRetryJson, ReadRetryProto, MergeRetry, ExplainRetry},
    {kFieldIndexJitter, "jitter", JsonPlace::kRpcguard, "",
     [](const Json& v, const std::string& path, MethodJsonState& state) {
       if (!CheckType(v, Json::Type::kString, path, *state.errors)) return;
       absl::StatusOr<Jitter> jitter = ParseJitter(v.string);
       if (!jitter.ok()) {
         state.errors->Add(path, jitter.status().message());
         return;
       }
       state.entry->policy.retry.backoff.jitter = *jitter;
     },
     nullptr,
     [](const MethodPolicy& from, MethodPolicy* to) {
       to->retry.backoff.jitter = from.retry.backoff.jitter;
     },
     [](const MethodPolicy& p) {
       return std::string(JitterName(p.retry.backoff.jitter));
     }},
    {kFieldIndexPerAttemptTimeout, "perAttemptTimeout", JsonPlace::kRpcguard,
     "per_attempt_timeout",
     ReadDurationJson<&MethodPolicy::per_attempt_timeout>,
     [](const ProtoPolicy& in, const std::string& where, ConfigErrors& errors,
        MethodPolicy* out) {
       if (!in.has_per_attempt_timeout()) return false;
       ReadProtoDuration(in.per_attempt_timeout(), where, "per_attempt_timeout",
                         errors, &out->per_attempt_timeout);
       return true;
     },
     Copy<&MethodPolicy::per_attempt_timeout>,
     ExplainDurationMember<&MethodPolicy::per_attempt_timeout>},
    {kFieldIndexTimeout, "timeout", JsonPlace::kMethodConfig, "",
     ReadDurationJson<&MethodPolicy::timeout>, nullptr,
     Copy<&MethodPolicy::timeout>,
     ExplainDurationMember<&MethodPolicy::timeout>},
    {kFieldIndexMinAttemptTime, "minAttemptTime", JsonPlace::kRpcguard, "",
     ReadDurationJson<&MethodPolicy::min_attempt_time>, nullptr,
     Copy<&MethodPolicy::min_attempt_time>,
     ExplainDurationMember<&MethodPolicy::min_attempt_time>},
    {kFieldIndexWaitForReady, "waitForReady", JsonPlace::kMethodConfig, "",
     [](const Json& v, const std::string& path, MethodJsonState& state) {
       bool b;
       if (ReadBool(v, path, *state.errors, &b)) {
         state.entry->policy.wait_for_ready = b;
       }
     },
     nullptr, Copy<&MethodPolicy::wait_for_ready>,
     [](const MethodPolicy& p) {
       return std::string(
           p.wait_for_ready ? (*p.wait_for_ready ? "true" : "false") : "unset");
     }},
    {kFieldIndexHedging, "hedgingPolicy", JsonPlace::kMethodConfig, "hedging",
     ReadHedgingJson, ReadHedgingProto, Copy<&MethodPolicy::hedging>,
     ExplainHedging},
};

// One row per entry of RPCGUARD_POLICY_FIELDS, in its order.
constexpr bool RowsMatchTheList() {
  if (std::size(kRows) != kNumPolicyFields) return false;
  for (int i = 0; i < kNumPolicyFields; ++i) {
    if (kRows[i].index != i) return false;
    // A row with a proto field reads it, and only such a row does.
    if (kRows[i].proto_field.empty() != (kRows[i].read_proto == nullptr)) {
      return false;
    }
  }
  return true;
}
static_assert(RowsMatchTheList(),
              "kRows needs one row per RPCGUARD_POLICY_FIELDS entry, in order");

}  // namespace

absl::Span<const PolicyFieldRow> PolicyFieldRows() { return kRows; }

void MergePolicy(const MethodPolicy& from, uint32_t from_fields,
                 MethodPolicy* to, uint32_t* to_fields) {
  const uint32_t take = from_fields & ~*to_fields;
  for (const PolicyFieldRow& row : kRows) {
    if (take & (1u << row.index)) row.merge(from, to);
  }
  *to_fields |= take;
}

void ReadPolicyOption(const ProtoPolicy& in, const std::string& where,
                      ConfigErrors& errors, Config::Entry* out) {
  for (const PolicyFieldRow& row : kRows) {
    if (row.read_proto != nullptr &&
        row.read_proto(in, where, errors, &out->policy)) {
      out->fields |= 1u << row.index;
    }
  }
  // gRFC A6: a method config has a retry or a hedging policy, not both.
  if (in.has_retry() && in.has_hedging()) {
    errors.Add(absl::StrCat(where, ".hedging"),
               "conflicts with retry; set only one (gRFC A6)");
  }
}

}  // namespace rpcguard
