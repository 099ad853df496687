// Copyright rpcguard authors.

#include "rpcguard/service_config/outlier_detection.h"

#include <grpc/grpc.h>
#include <grpc/impl/codegen/grpc_types.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "rpcguard/base/json.h"

namespace rpcguard {
namespace internal {
namespace {

// Policies that spread calls over the resolver's addresses, so that a
// failing backend is one of several that outlier detection can steer
// around. Not pick_first (one backend at a time: nothing to steer around),
// not outlier detection itself, not the policies that take balancer
// addresses or a tree of children (grpclb, xDS's, rls, priority,
// weighted_target: xDS brings its own outlier detection), and not a policy
// of the caller's own, whose children are unknown.
constexpr absl::string_view kSpreadingPolicies[] = {
    "round_robin", "weighted_round_robin", "weighted_round_robin_experimental",
    "ring_hash_experimental"};

bool Spreads(absl::string_view policy) {
  for (absl::string_view p : kSpreadingPolicies) {
    if (p == policy) return true;
  }
  return false;
}

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat("Options::outlier_detection.", field, ": ", reason));
}

// A google.protobuf.Duration in JSON ("1s", "0.25s"), as gRPC reads it.
std::string DurationJson(absl::Duration d) {
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  const int64_t nanos = absl::ToInt64Nanoseconds(d);
  if (nanos == 0) return absl::StrCat("\"", seconds, "s\"");
  std::string fraction = absl::StrFormat("%09d", nanos);
  while (fraction.back() == '0') fraction.pop_back();
  return absl::StrCat("\"", seconds, ".", fraction, "s\"");
}

void AppendString(absl::string_view s, std::string* out) {
  AppendQuotedString(out, s, /*json=*/true);
}

// Writes a value back as compact JSON: numbers as the caller wrote them,
// members in the caller's order, so that nothing gRPC reads changes.
void AppendJson(const Json& v, std::string* out) {
  switch (v.type) {
    case Json::Type::kNull:
      out->append("null");
      return;
    case Json::Type::kBool:
      out->append(v.boolean ? "true" : "false");
      return;
    case Json::Type::kNumber:
      out->append(v.string);
      return;
    case Json::Type::kString:
      AppendString(v.string, out);
      return;
    case Json::Type::kArray:
      out->push_back('[');
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendJson(v.array[i], out);
      }
      out->push_back(']');
      return;
    case Json::Type::kObject:
      out->push_back('{');
      for (size_t i = 0; i < v.object.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendString(v.object[i].key, out);
        out->push_back(':');
        AppendJson(v.object[i].value, out);
      }
      out->push_back('}');
      return;
  }
}

// The policy an entry of a "loadBalancingConfig" list names: its one key.
std::optional<absl::string_view> EntryPolicy(const Json& entry) {
  if (entry.type != Json::Type::kObject || entry.object.size() != 1) {
    return std::nullopt;
  }
  return entry.object[0].key;
}

// `child` (a "loadBalancingConfig" list, as JSON) under outlier detection,
// then `child`'s own entries as the fallback of a gRPC without it.
std::string WrappedList(const std::vector<Json>& child,
                        const OutlierDetectionOptions& o) {
  std::string children;
  for (const Json& entry : child) {
    absl::StrAppend(&children, children.empty() ? "" : ",");
    AppendJson(entry, &children);
  }
  return absl::StrCat(
      "[{\"", kOutlierDetectionPolicy,
      "\":{\"interval\":", DurationJson(o.interval),
      ",\"baseEjectionTime\":", DurationJson(o.base_ejection_time),
      ",\"maxEjectionTime\":", DurationJson(o.max_ejection_time),
      ",\"maxEjectionPercent\":", o.max_ejection_percent,
      // enforcementPercentage defaults to 0 in A50 (Envoy's default): the
      // algorithm would run and never eject.
      ",\"failurePercentageEjection\":{\"threshold\":",
      o.failure_percentage_threshold,
      ",\"enforcementPercentage\":100,\"minimumHosts\":", o.minimum_hosts,
      ",\"requestVolume\":", o.request_volume, "},\"childPolicy\":[", children,
      "]}},", children, "]");
}

// A "loadBalancingConfig" list of one policy without settings.
std::vector<Json> OnePolicy(absl::string_view policy) {
  Json entry;
  entry.type = Json::Type::kObject;
  Json empty;
  empty.type = Json::Type::kObject;
  entry.object.push_back({std::string(policy), std::move(empty)});
  return {std::move(entry)};
}

std::optional<std::string> LastString(const grpc::ChannelArguments& args,
                                      absl::string_view key) {
  const grpc_channel_args c = args.c_channel_args();
  std::optional<std::string> found;
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_STRING && c.args[i].key == key) {
      found = c.args[i].value.string;
    }
  }
  return found;
}

}  // namespace

absl::Status ValidateOutlierDetection(const OutlierDetectionOptions& o) {
  // Every bound is one gRPC's parser would also refuse, or would take as
  // something else than the caller meant.
  if (o.interval <= absl::ZeroDuration() ||
      o.interval == absl::InfiniteDuration()) {
    return Invalid("interval", "must be positive and finite");
  }
  if (o.base_ejection_time <= absl::ZeroDuration() ||
      o.base_ejection_time == absl::InfiniteDuration()) {
    return Invalid("base_ejection_time", "must be positive and finite");
  }
  if (o.max_ejection_time < o.base_ejection_time ||
      o.max_ejection_time == absl::InfiniteDuration()) {
    return Invalid("max_ejection_time",
                   "must be finite and at least base_ejection_time");
  }
  if (o.max_ejection_percent < 0 || o.max_ejection_percent > 100) {
    return Invalid("max_ejection_percent", "must be in [0, 100]");
  }
  if (o.failure_percentage_threshold < 0 ||
      o.failure_percentage_threshold > 100) {
    return Invalid("failure_percentage_threshold", "must be in [0, 100]");
  }
  if (o.minimum_hosts < 0) return Invalid("minimum_hosts", "must be >= 0");
  if (o.request_volume < 0) return Invalid("request_volume", "must be >= 0");
  return absl::OkStatus();
}

std::optional<std::string> WrapInOutlierDetection(
    std::optional<absl::string_view> service_config,
    std::optional<absl::string_view> lb_policy_name,
    const OutlierDetectionOptions& options) {
  Json config;
  config.type = Json::Type::kObject;
  if (service_config.has_value()) {
    absl::StatusOr<Json> parsed = ParseJson(*service_config);
    if (!parsed.ok() || parsed->type != Json::Type::kObject) {
      return std::nullopt;
    }
    config = *std::move(parsed);
  }
  // gRPC's order: the list, else the deprecated name (which it lowercases),
  // else the channel argument.
  JsonMember* list = nullptr;
  JsonMember* deprecated = nullptr;
  for (JsonMember& m : config.object) {
    if (m.key == "loadBalancingConfig") list = &m;
    if (m.key == "loadBalancingPolicy") deprecated = &m;
  }
  std::vector<Json> child;
  if (list != nullptr) {
    if (list->value.type != Json::Type::kArray || list->value.array.empty()) {
      return std::nullopt;
    }
    // Every entry, not only the first: gRPC takes the first it knows, which
    // rpcguard cannot ask it.
    for (const Json& entry : list->value.array) {
      const std::optional<absl::string_view> policy = EntryPolicy(entry);
      if (!policy.has_value() || !Spreads(*policy)) return std::nullopt;
    }
    child = list->value.array;
  } else if (deprecated != nullptr) {
    if (deprecated->value.type != Json::Type::kString) return std::nullopt;
    const std::string policy = absl::AsciiStrToLower(deprecated->value.string);
    if (!Spreads(policy)) return std::nullopt;
    child = OnePolicy(policy);
  } else if (lb_policy_name.has_value() && Spreads(*lb_policy_name)) {
    child = OnePolicy(*lb_policy_name);
  } else {
    return std::nullopt;
  }
  // The caller's members in their order, the list in place of the policy
  // that chose it (the deprecated name goes: the list now says it).
  std::string out = "{";
  bool wrote_list = false;
  auto write_list = [&] {
    absl::StrAppend(&out, out.size() > 1 ? "," : "",
                    "\"loadBalancingConfig\":", WrappedList(child, options));
    wrote_list = true;
  };
  for (const JsonMember& m : config.object) {
    if (&m == list || (list == nullptr && &m == deprecated)) {
      write_list();
      continue;
    }
    if (out.size() > 1) out.push_back(',');
    AppendString(m.key, &out);
    out.push_back(':');
    AppendJson(m.value, &out);
  }
  if (!wrote_list) write_list();
  out.push_back('}');
  return out;
}

std::optional<std::string> ServiceConfigOf(const grpc::ChannelArguments& args) {
  return LastString(args, GRPC_ARG_SERVICE_CONFIG);
}

std::optional<std::string> LbPolicyNameOf(const grpc::ChannelArguments& args) {
  return LastString(args, GRPC_ARG_LB_POLICY_NAME);
}

grpc::ChannelArguments WithServiceConfig(const grpc::ChannelArguments& args,
                                         const std::string& service_config) {
  // ChannelArguments can add an argument but not replace or remove one, and
  // two service configs would leave gRPC's choice to the order it reads
  // them in: the arguments are copied one by one instead.
  grpc::ChannelArguments out;
  // A new ChannelArguments starts with gRPC's user agent; the caller's
  // first user agent argument is that one, with any prefix
  // SetUserAgentPrefix put in front of it.
  const std::optional<std::string> plain_agent =
      LastString(out, GRPC_ARG_PRIMARY_USER_AGENT_STRING);
  bool first_agent = true;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    const grpc_arg& arg = c.args[i];
    const absl::string_view key = arg.key;
    if (key == GRPC_ARG_SERVICE_CONFIG) continue;
    switch (arg.type) {
      case GRPC_ARG_STRING: {
        const absl::string_view value = arg.value.string;
        if (key == GRPC_ARG_PRIMARY_USER_AGENT_STRING && first_agent &&
            plain_agent.has_value()) {
          first_agent = false;
          if (value == *plain_agent) break;
          const std::string suffix = absl::StrCat(" ", *plain_agent);
          if (absl::EndsWith(value, suffix)) {
            out.SetUserAgentPrefix(
                std::string(value.substr(0, value.size() - suffix.size())));
            break;
          }
        }
        out.SetString(std::string(key), std::string(value));
        break;
      }
      case GRPC_ARG_INTEGER:
        out.SetInt(std::string(key), arg.value.integer);
        break;
      case GRPC_ARG_POINTER:
        // The copy is the new argument's own, released through the same
        // vtable when `out` is destroyed.
        out.SetPointerWithVtable(
            std::string(key),
            arg.value.pointer.vtable->copy(arg.value.pointer.p),
            arg.value.pointer.vtable);
        break;
    }
  }
  out.SetServiceConfigJSON(service_config);
  return out;
}

}  // namespace internal
}  // namespace rpcguard
