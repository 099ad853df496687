// Copyright rpcguard authors.

#include "rpcguard/proto_options.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "proto/rpcguard/v1/options.pb.h"

namespace rpcguard {
namespace {

using ProtoPolicy = ::rpcguard::v1::MethodPolicy;

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

// Reads one option's hedging message into `out`: `where` names the option
// in errors. Unset fields keep HedgingPolicy's defaults, but for
// max_attempts: A6 requires it, and a bare `hedging: {}` would otherwise
// send every call twice at once.
absl::Status ConvertHedging(const ::rpcguard::v1::HedgingPolicy& in,
                            const std::string& where, HedgingPolicy* out) {
  if (in.max_attempts() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".hedging.max_attempts: is required"));
  }
  out->max_attempts = in.max_attempts();
  if (in.has_hedging_delay()) out->delay = FromProto(in.hedging_delay());
  for (int i = 0; i < in.non_fatal_status_codes_size(); ++i) {
    absl::StatusOr<grpc::StatusCode> code =
        ParseStatusCode(in.non_fatal_status_codes(i));
    if (!code.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".hedging.non_fatal_status_codes[", i,
                       "]: ", code.status().message()));
    }
    out->non_fatal_codes.Add(*code);  // OK: Validate says it is not allowed
  }
  // proto3 cannot tell 0 from unset: 0 takes the default, as for retry.
  if (in.delay_percentile() != 0) {
    out->adaptive_percentile = in.delay_percentile();
  }
  if (in.has_delay_floor()) out->adaptive_floor = FromProto(in.delay_floor());
  if (in.min_samples() != 0) out->min_samples = in.min_samples();
  if (in.max_extra_load() != 0) out->max_extra_load = in.max_extra_load();
  // The JSON's rules and reasons, in the option's field names.
  return out->Validate(where, HedgingPolicy::FieldNames::kProto);
}

// Converts one option value; `where` names it in errors.
absl::Status Convert(const ProtoPolicy& in, const std::string& where,
                     Config::Entry* out) {
  auto fail = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", field, ": ", why));
  };
  MethodPolicy& p = out->policy;
  switch (in.idempotency()) {
    case ProtoPolicy::IDEMPOTENCY_UNSPECIFIED:
      break;
    case ProtoPolicy::NO_SIDE_EFFECTS:
      p.idempotency = Idempotency::kNoSideEffects;
      out->fields |= kFieldIdempotency;
      break;
    case ProtoPolicy::IDEMPOTENT:
      p.idempotency = Idempotency::kIdempotent;
      out->fields |= kFieldIdempotency;
      break;
    case ProtoPolicy::KEYED:
      p.idempotency = Idempotency::kKeyed;
      out->fields |= kFieldIdempotency;
      break;
    case ProtoPolicy::UNKNOWN:
      p.idempotency = Idempotency::kUnknown;
      out->fields |= kFieldIdempotency;
      break;
    default:
      return fail("idempotency",
                  absl::StrCat("unknown value ", in.idempotency()));
  }
  if (in.has_retry()) {
    const ::rpcguard::v1::RetryPolicy& r = in.retry();
    out->fields |= kFieldRetry;
    // Unset fields keep rpcguard's defaults: proto3 cannot say "required".
    if (r.max_attempts() != 0) {
      const std::string why = CheckMaxAttempts(r.max_attempts());
      if (!why.empty()) return fail("retry.max_attempts", why);
      p.retry.max_attempts = r.max_attempts();
    }
    if (r.has_initial_backoff()) {
      p.retry.backoff.initial = FromProto(r.initial_backoff());
      const std::string why = CheckPositiveDuration(p.retry.backoff.initial);
      if (!why.empty()) return fail("retry.initial_backoff", why);
    }
    if (r.has_max_backoff()) {
      p.retry.backoff.max = FromProto(r.max_backoff());
      const std::string why = CheckPositiveDuration(p.retry.backoff.max);
      if (!why.empty()) return fail("retry.max_backoff", why);
    }
    if (p.retry.backoff.max < p.retry.backoff.initial) {
      return fail("retry.max_backoff", "must be at least initial_backoff");
    }
    if (r.backoff_multiplier() != 0) {
      const std::string why = CheckMultiplier(r.backoff_multiplier());
      if (!why.empty()) return fail("retry.backoff_multiplier", why);
      p.retry.backoff.multiplier = r.backoff_multiplier();
    }
    if (r.retryable_status_codes_size() > 0) {
      StatusCodeSet codes;
      for (int i = 0; i < r.retryable_status_codes_size(); ++i) {
        const std::string field =
            absl::StrCat("retry.retryable_status_codes[", i, "]");
        absl::StatusOr<grpc::StatusCode> code =
            ParseStatusCode(r.retryable_status_codes(i));
        if (!code.ok()) return fail(field, code.status().message());
        if (*code == grpc::StatusCode::OK) {
          return fail(field, "OK cannot be retryable");
        }
        codes.Add(*code);
      }
      p.retry.retryable_codes = codes;
    }
  }
  if (in.has_hedging()) {
    // gRFC A6: a method config has a retry or a hedging policy, not both.
    if (in.has_retry()) {
      return fail("hedging", "conflicts with retry; set only one (gRFC A6)");
    }
    p.hedging.emplace();
    absl::Status s = ConvertHedging(in.hedging(), where, &*p.hedging);
    if (!s.ok()) return s;
    out->fields |= kFieldHedging;
  }
  if (in.has_per_attempt_timeout()) {
    p.per_attempt_timeout = FromProto(in.per_attempt_timeout());
    const std::string why = CheckPositiveDuration(p.per_attempt_timeout);
    if (!why.empty()) return fail("per_attempt_timeout", why);
    out->fields |= kFieldPerAttemptTimeout;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProtoPolicies> ReadProtoPolicies(
    const google::protobuf::ServiceDescriptor& service,
    const google::protobuf::MethodDescriptor* method) {
  ProtoPolicies out;
  const google::protobuf::ServiceDescriptor* sd = &service;
  if (sd->options().HasExtension(::rpcguard::v1::service)) {
    absl::Status s = Convert(
        sd->options().GetExtension(::rpcguard::v1::service),
        absl::StrCat(sd->full_name(), ": (rpcguard.v1.service)"), &out.service);
    if (!s.ok()) return s;
  }
  const google::protobuf::MethodDescriptor* md = method;
  if (md == nullptr) return out;
  const google::protobuf::MethodOptions& options = md->options();
  if (options.HasExtension(::rpcguard::v1::method)) {
    absl::Status s = Convert(
        options.GetExtension(::rpcguard::v1::method),
        absl::StrCat(md->full_name(), ": (rpcguard.v1.method)"), &out.method);
    if (!s.ok()) return s;
  }
  switch (options.idempotency_level()) {
    case google::protobuf::MethodOptions::NO_SIDE_EFFECTS:
      out.idempotency_level.policy.idempotency = Idempotency::kNoSideEffects;
      out.idempotency_level.fields = kFieldIdempotency;
      break;
    case google::protobuf::MethodOptions::IDEMPOTENT:
      out.idempotency_level.policy.idempotency = Idempotency::kIdempotent;
      out.idempotency_level.fields = kFieldIdempotency;
      break;
    default:
      break;
  }
  return out;
}

absl::StatusOr<ProtoPolicies> ReadProtoPolicies(absl::string_view service,
                                                absl::string_view method) {
  const google::protobuf::ServiceDescriptor* sd =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(service));
  if (sd == nullptr) return ProtoPolicies();
  return ReadProtoPolicies(*sd, sd->FindMethodByName(std::string(method)));
}

}  // namespace rpcguard
