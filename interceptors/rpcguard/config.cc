// Copyright rpcguard authors.

#include "rpcguard/config.h"

#include <google/protobuf/descriptor.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "rpcguard/config_reader/config_reader.h"  // private to :config
#include "rpcguard/config_reader/policy_fields.h"  // private to :config
#include "rpcguard/decision/call_plan.h"
#include "rpcguard/observability/trace.h"
#include "rpcguard/proto_options.h"

namespace rpcguard {
namespace {

// Each source once, and the built-in default, which sets every field, last.
constexpr bool IsValidPrecedence() {
  uint32_t seen = 0;
  for (PolicySource source : kPolicyPrecedence) {
    const uint32_t bit = 1u << static_cast<int>(source);
    if (seen & bit) return false;
    seen |= bit;
  }
  return kPolicyPrecedence[std::size(kPolicyPrecedence) - 1] ==
         PolicySource::kDefault;
}
static_assert(IsValidPrecedence());

// Splits "/pkg.Svc/Method" into its service and method; false for a path of
// any other form.
bool SplitMethodPath(absl::string_view path, absl::string_view* service,
                     absl::string_view* method) {
  if (!absl::ConsumePrefix(&path, "/")) return false;
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos || slash == 0 ||
      slash + 1 >= path.size()) {
    return false;
  }
  *service = path.substr(0, slash);
  *method = path.substr(slash + 1);
  return true;
}

}  // namespace

Config::Config() : tables_(std::make_shared<Tables>()) {}

absl::StatusOr<Config> Config::FromJson(absl::string_view json) {
  absl::StatusOr<ConfigEntries> entries = ReadConfigJson(json);
  if (!entries.ok()) return entries.status();
  Config config;
  Tables& t = *config.tables_;
  t.methods = std::move(entries->methods);
  t.services = std::move(entries->services);
  t.default_policy = std::move(entries->default_entry);
  t.destination = std::move(entries->destination);
  return config;
}

ResolvedPolicy Config::Resolve(absl::string_view full_method) const {
  absl::string_view service_name;
  absl::string_view method_name;
  if (!SplitMethodPath(full_method, &service_name, &method_name)) {
    // A path of another form has only the sources that need no name.
    return ResolveNamed("", "", [] { return ProtoPolicies(); });
  }
  // "pkg.Svc/Method", the methods table's key.
  const absl::string_view method_key = full_method.substr(1);
  return ResolveNamed(service_name, method_key, [&] {
    return ReadProtoPolicies(service_name, method_name);
  });
}

ResolvedPolicy Config::Resolve(
    const google::protobuf::MethodDescriptor& method) const {
  const std::string& service_name = method.service()->full_name();
  const std::string method_key = absl::StrCat(service_name, "/", method.name());
  return ResolveNamed(service_name, method_key, [&] {
    return ReadProtoPolicies(*method.service(), &method);
  });
}

Config::Declaration Config::Declared(absl::string_view full_method) const {
  Declaration d;
  absl::string_view method_name;
  if (!SplitMethodPath(full_method, &d.service_name, &method_name)) {
    d.service_name = absl::string_view();
    return d;
  }
  const Tables& t = *tables_;
  d.method = t.methods.contains(full_method.substr(1));
  d.service = t.services.contains(d.service_name);
  if (d.method) return d;
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(d.service_name));
  if (service == nullptr) return d;
  d.service = true;
  d.method = service->FindMethodByName(std::string(method_name)) != nullptr;
  return d;
}

ResolvedPolicy Config::ResolveNamed(
    absl::string_view service_name, absl::string_view method_key,
    absl::FunctionRef<absl::StatusOr<ProtoPolicies>()> read_proto) const {
  const Tables& t = *tables_;
  // The .proto's options, read once, when the walk first needs them: it is a
  // descriptor lookup, skipped when the config alone decides every field.
  std::optional<absl::StatusOr<ProtoPolicies>> proto;
  const Entry built_in{MethodPolicy(), kAllPolicyFields};
  auto entry_of = [&](PolicySource source) -> const Entry* {
    switch (source) {
      case PolicySource::kConfigMethod: {
        if (service_name.empty()) return nullptr;
        auto it = t.methods.find(method_key);
        return it == t.methods.end() ? nullptr : &it->second;
      }
      case PolicySource::kConfigService: {
        if (service_name.empty()) return nullptr;
        auto it = t.services.find(service_name);
        return it == t.services.end() ? nullptr : &it->second;
      }
      case PolicySource::kProtoMethod:
      case PolicySource::kProtoService:
      case PolicySource::kIdempotencyLevel:
        if (service_name.empty()) return nullptr;
        if (!proto.has_value()) proto = read_proto();
        if (!proto->ok()) return nullptr;
        if (source == PolicySource::kProtoMethod) return &(*proto)->method;
        if (source == PolicySource::kProtoService) return &(*proto)->service;
        return &(*proto)->idempotency_level;
      case PolicySource::kConfigDefault:
        return t.default_policy.has_value() ? &*t.default_policy : nullptr;
      case PolicySource::kDefault:
        return &built_in;
    }
    return nullptr;
  };

  ResolvedPolicy r;
  uint32_t have = 0;
  for (PolicySource source : kPolicyPrecedence) {
    if (have == kAllPolicyFields) break;
    const Entry* entry = entry_of(source);
    if (entry == nullptr) continue;
    const uint32_t before = have;
    MergePolicy(entry->policy, entry->fields, &r.policy, &have);
    for (int i = 0; i < kNumPolicyFields; ++i) {
      if ((have & ~before) & (1u << i)) r.sources[i] = source;
    }
  }
  if (proto.has_value() && !proto->ok()) r.error = proto->status();
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

namespace {

// "client streaming", "server streaming", "bidirectional streaming", or ""
// for a unary method (or none).
absl::string_view StreamingKind(const google::protobuf::MethodDescriptor* m) {
  if (m == nullptr) return "";
  if (m->client_streaming() && m->server_streaming()) {
    return "bidirectional streaming";
  }
  if (m->client_streaming()) return "client streaming";
  if (m->server_streaming()) return "server streaming";
  return "";
}

// The rows (PolicyFieldIndex bits) whose value a call's `call` changes for a
// method of policy `p`.
uint32_t FieldsSetBy(const CallPolicy& call, const MethodPolicy& p) {
  uint32_t fields = 0;
  if (call.max_attempts || call.initial_backoff || call.max_backoff ||
      call.backoff_multiplier) {
    fields |= kFieldRetry;
  }
  if (call.jitter) fields |= kFieldJitter;
  if (call.per_attempt_timeout) fields |= kFieldPerAttemptTimeout;
  if (call.hedging || (call.max_attempts && p.hedging)) fields |= kFieldHedging;
  return fields;
}

// Explain()'s text for `full_method`, resolved as `resolved`; `method` is its
// descriptor when known, `call` the call's own policy if it has one.
std::string Explanation(absl::string_view full_method,
                        const ResolvedPolicy& resolved,
                        const google::protobuf::MethodDescriptor* method,
                        const CallPolicy* call = nullptr) {
  ResolvedPolicy r = resolved;
  uint32_t call_fields = 0;
  std::string out = absl::StrCat(full_method, "\n");
  const absl::string_view streaming = StreamingKind(method);
  if (call != nullptr) {
    absl::StatusOr<MethodPolicy> applied = ApplyCallPolicy(r.policy, *call);
    if (!applied.ok()) {
      absl::StrAppend(&out, "  call policy error: ", applied.status().message(),
                      " (the call fails with INVALID_ARGUMENT)\n");
      return out;
    }
    call_fields = FieldsSetBy(*call, r.policy);
    r.policy = *std::move(applied);
  }
  const MethodPolicy& p = r.policy;
  if (!r.error.ok()) {
    absl::StrAppend(&out, "  error: ", r.error.message(),
                    " (calls to this method fail until it is fixed)\n");
  }
  const bool may_repeat = MayRepeat(p.idempotency) && p.retry.max_attempts > 1;
  const PolicySource hedging_source = r.sources[kFieldIndexHedging];
  const bool hedging_for_method =
      HedgingForMethod(hedging_source == PolicySource::kConfigMethod ||
                           hedging_source == PolicySource::kProtoMethod,
                       call);
  const bool hedged =
      streaming.empty() && MayHedge(p, p.idempotency, hedging_for_method);
  auto duration = [](absl::Duration d) {
    return d == absl::InfiniteDuration() ? std::string("none")
                                         : absl::FormatDuration(d);
  };
  std::string verdict = "tried once";
  if (!streaming.empty()) {
    // PlanCall's rules for streams (call_plan.cc).
    if (p.hedging.has_value() && hedging_for_method) {
      verdict = absl::StrCat(
          streaming,
          ": calls fail (FAILED_PRECONDITION): its hedgingPolicy is for "
          "this method, and rpcguard does not hedge streams");
    } else if (may_repeat) {
      verdict = absl::StrCat(
          streaming,
          ": retried until it commits (a response or its headers "
          "came, or the requests outgrew the replay buffer), up to ",
          p.retry.max_attempts, " attempts");
    } else {
      verdict = absl::StrCat(streaming, ": sent once");
    }
  } else if (hedged) {
    verdict =
        absl::StrCat("hedged, up to ", p.hedging->max_attempts,
                     " copies, the next after ", duration(p.hedging->delay));
    if (p.hedging->adaptive_percentile) {
      absl::StrAppend(&verdict, " (then p",
                      *p.hedging->adaptive_percentile * 100,
                      " of recent latency)");
    }
  } else if (may_repeat) {
    verdict =
        absl::StrCat("retried, up to ", p.retry.max_attempts, " attempts");
    if (p.hedging.has_value()) {
      absl::StrAppend(&verdict,
                      " (the hedgingPolicy is not for this method itself: "
                      "an IDEMPOTENT or KEYED method is hedged only by a "
                      "policy written for it)");
    }
  }
  absl::StrAppend(&out, "  => ", verdict, "\n");
  for (const PolicyFieldRow& row : PolicyFieldRows()) {
    absl::StrAppendFormat(&out, "  %-18s %s  [%s]\n",
                          absl::StrCat(row.name, ":"), row.explain(p),
                          call_fields & (1u << row.index)
                              ? absl::string_view("call policy")
                              : PolicySourceName(r.sources[row.index]));
  }
  if (call != nullptr && call->trace_verbosity) {
    absl::StrAppendFormat(
        &out, "  %-18s %s  [call policy]\n",
        "traceVerbosity:", TraceVerbosityName(*call->trace_verbosity));
  }
  return out;
}

}  // namespace

namespace {

// The generated pool's descriptor of `full_method`, or null.
const google::protobuf::MethodDescriptor* GeneratedMethod(
    absl::string_view full_method) {
  absl::string_view service_name;
  absl::string_view method_name;
  if (!SplitMethodPath(full_method, &service_name, &method_name)) {
    return nullptr;
  }
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(service_name));
  return service == nullptr
             ? nullptr
             : service->FindMethodByName(std::string(method_name));
}

}  // namespace

std::string Config::Explain(absl::string_view full_method) const {
  const google::protobuf::MethodDescriptor* method =
      GeneratedMethod(full_method);
  if (method != nullptr) return Explain(*method);
  return Explanation(full_method, Resolve(full_method), nullptr);
}

std::string Config::Explain(absl::string_view full_method,
                            const CallPolicy& call) const {
  const google::protobuf::MethodDescriptor* method =
      GeneratedMethod(full_method);
  return Explanation(
      full_method, method != nullptr ? Resolve(*method) : Resolve(full_method),
      method, &call);
}

std::string Config::Explain(
    const google::protobuf::MethodDescriptor& method) const {
  return Explanation(
      absl::StrCat("/", method.service()->full_name(), "/", method.name()),
      Resolve(method), &method);
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
