// Copyright rpcguard authors.
//
// Config: per-method retry policies, read from JSON in the shape of gRPC's
// service config so users can bring their existing JSON along:
//
//   {"methodConfig": [{
//      "name": [{"service": "pkg.Svc", "method": "M"}],
//      "timeout": "2s",
//      "waitForReady": true,
//      "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.02s",
//                      "maxBackoff": "0.2s", "backoffMultiplier": 2,
//                      "retryableStatusCodes": ["UNAVAILABLE"]},
//      "rpcguard": {"idempotency": "KEYED", "perAttemptTimeout": "0.5s",
//                   "jitter": "FULL", "minAttemptTime": "0.002s"}}]}
//
// Name matching follows gRPC: a name with service and method matches that
// method; a name with only a service matches every method of the service; an
// empty name ({} or no "service") is the default for all methods. The most
// specific match wins; a method nothing matches gets a default MethodPolicy
// (UNKNOWN idempotency: tried once).
//
// Parsing is strict: malformed JSON, a wrong type, an out-of-range value or an
// unknown field in an object rpcguard reads is an error, named by its JSON
// path, e.g.
//   methodConfig[0].retryPolicy.maxAttempts: must be at least 2
// Every error of the document is reported, as gRPC's own loader does: the
// InvalidArgument's message is the errors in document order, joined by
// "; " (the first 50, then "; and N more errors"). A typo must never
// silently turn retries off (or on). Details:
//   - Top-level keys other than methodConfig and retryThrottling belong to
//     the rest of gRPC's service config (loadBalancingConfig,
//     healthCheckConfig, ...) and are ignored, except spellings that differ
//     from those two only in case or '_' ("methodconfig"), which are errors.
//   - retryThrottling is read as gRFC A6 says (maxTokens in (0, 1000],
//     tokenRatio > 0, both required; 3 decimal places are kept, so each is
//     at least 0.001) into DestinationConfig::throttle, which the
//     interceptor applies to retries.
//   - Every methodConfig entry needs a non-empty "name"; a name may appear
//     once in the whole config; a service or method containing '/' is an
//     error. hedgingPolicy (decision/hedging.h) or retryPolicy, not both;
//     maxRequestMessageBytes and maxResponseMessageBytes are ignored.
//   - Durations are proto3 JSON Durations ("0.02s", at most 9 fractional
//     digits) and must be greater than 0.
//   - retryPolicy needs all of maxAttempts (2..kMaxAttemptsCap),
//     initialBackoff, maxBackoff (>= initialBackoff), backoffMultiplier
//     (in (0, 1000]: more is taken for a typo) and retryableStatusCodes
//     (non-empty; names in any case or numbers; OK is an error), as in A6.
//     Its perAttemptRecvTimeout is rpcguard.perAttemptTimeout; set only one.
//   - The top-level "rpcguard" object holds what is not per method:
//     circuitBreaker, retryBudget, breakerKey, and correlationKeys (an array
//     of metadata keys whose values trace lines carry; default
//     ["traceparent", "x-request-id"]; [] for none; see
//     ValidateCorrelationKeys for the rules).
//   - Malformed JSON, including a key repeated in one object, is an error
//     whose message starts with "invalid JSON: ".

#ifndef RPCGUARD_CONFIG_H_
#define RPCGUARD_CONFIG_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/decision/call_policy.h"
#include "rpcguard/decision/policy.h"
#include "rpcguard/destination/adaptive_throttle.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/retry_budget.h"
#include "rpcguard/destination/retry_throttle.h"
#include "rpcguard/observability/correlation.h"

namespace google::protobuf {
class MethodDescriptor;
}  // namespace google::protobuf

namespace rpcguard {

struct ProtoPolicies;  // proto_options.h

// Where a setting of a method's policy came from. kPolicyPrecedence orders
// them.
enum class PolicySource {
  kDefault,           // rpcguard's built-in default
  kConfigDefault,     // the config's default entry (name [{}])
  kIdempotencyLevel,  // protobuf's own `option idempotency_level`
  kProtoService,      // `option (rpcguard.v1.service)`
  kProtoMethod,       // `option (rpcguard.v1.method)`
  kConfigService,     // the config's entry for the service
  kConfigMethod,      // the config's entry for the method
};

// The sources in precedence order, most specific first: Config::Resolve()
// takes each field of a method's policy from the first source here that
// sets it. So JSON can override a .proto declaration without a rebuild, and
// an entry for a method overrides one for its service.
inline constexpr PolicySource kPolicyPrecedence[] = {
    PolicySource::kConfigMethod,     PolicySource::kConfigService,
    PolicySource::kProtoMethod,      PolicySource::kProtoService,
    PolicySource::kIdempotencyLevel, PolicySource::kConfigDefault,
    PolicySource::kDefault,
};

// "rpcguard default", "config: method entry", "proto: idempotency_level"...
absl::string_view PolicySourceName(PolicySource source);

// A method's policy with the source that decided each field.
struct ResolvedPolicy {
  MethodPolicy policy;
  // Indexed by PolicyField bit position (0 = idempotency).
  PolicySource sources[kNumPolicyFields] = {};
  // A malformed .proto option on the method or its service. Calls to the
  // method fail with FAILED_PRECONDITION carrying this message rather than
  // run with a policy nobody wrote.
  absl::Status error;
};

// Settings of the destination rather than of a method: the top-level
// "rpcguard" object of the JSON, and gRPC's retryThrottling.
//
//   "rpcguard": {
//     "circuitBreaker": {"failureRatio": 0.5, "minAttempts": 20,
//                        "openTime": "1s", ...},   // see BreakerOptions
//     "retryBudget": {"ratio": 0.2, "minRetriesPerSecond": 10, ...},
//     "breakerKey": "target",                      // or "target_and_service"
//     "streamBufferBytes": 262144,                 // a stream's replay buffer
//     "channelStreamBufferBytes": 16777216,        // all streams' together
//     "maxUndeclaredMethods": 2000,
//     "adaptiveThrottling": {"k": 2, "window": "120s", "minRequests": 20}}
struct DestinationConfig {
  // Unset: the registry's defaults (BreakerOptions{}).
  std::optional<BreakerOptions> breaker;
  bool breaker_enabled = true;
  // Unset: the registry's defaults (RetryBudgetOptions{}).
  std::optional<RetryBudgetOptions> budget;
  bool budget_enabled = true;
  // "adaptiveThrottling": the destination's adaptive throttle
  // (destination/adaptive_throttle.h), on by default with K = 2 over two
  // minutes; {"enabled": false} turns it off. Unset: its
  // defaults.
  std::optional<AdaptiveThrottleOptions> adaptive_throttle;
  bool adaptive_throttle_enabled = true;
  // gRFC A6 retryThrottling, shared by the destination's calls; off unless
  // the JSON has it.
  std::optional<RetryThrottleOptions> throttle;
  // Breakers and budgets are shared per channel target, or per target and
  // service when this is set.
  bool key_per_service = false;
  // "streamBufferBytes": the bytes of requests a streaming call keeps for
  // replay; a call whose requests outgrow it commits to its attempt and is
  // not retried after (gRFC A6; 256 KiB, as gRPC C-core and grpc-go). A
  // whole number from 0 (a stream commits at its first request) to
  // kMaxStreamBufferBytes.
  size_t stream_buffer_bytes = kDefaultStreamBufferBytes;
  static constexpr size_t kDefaultStreamBufferBytes = 256 * 1024;
  static constexpr size_t kMaxStreamBufferBytes = size_t{1} << 30;
  // "channelStreamBufferBytes": the bytes of requests all streaming calls
  // of one channel (one CreateChannel or interceptor factory) keep for
  // replay together. A call whose request would take them past it commits
  // to its attempt, as at its own limit, so that many streams at once
  // cannot hold many times streamBufferBytes (16 MiB, grpc-java's
  // per-channel retry buffer). A whole number from 0 (streams commit at
  // their first request) to kMaxChannelStreamBufferBytes.
  uint64_t channel_stream_buffer_bytes = kDefaultChannelStreamBufferBytes;
  static constexpr uint64_t kDefaultChannelStreamBufferBytes = 16 << 20;
  static constexpr uint64_t kMaxChannelStreamBufferBytes = uint64_t{1} << 40;
  // The metadata keys whose values trace lines carry as the caller's
  // correlation ids (observability/correlation.h): "traceparent" gives its
  // trace id, any other key its value. Empty: none. JSON
  // "rpcguard.correlationKeys", checked by ValidateCorrelationKeys; set
  // from code, a key that is not lowercase never matches gRPC's metadata.
  std::vector<std::string> correlation_keys = DefaultCorrelationKeys();
  // How many methods that nothing declares (Config::Declared: a generic
  // caller's made-up names) get state of their own: policy, stats series,
  // latency estimator, hedge budget, registered method. The rest share one
  // entry per declared service, or one with the default policy, counted
  // under the stats label "other". JSON: "maxUndeclaredMethods", an integer
  // in [1, 1000000]. Declared methods always get their own: the config and
  // the linked-in protos bound them.
  size_t max_undeclared_methods = kDefaultMaxUndeclaredMethods;
  static constexpr size_t kDefaultMaxUndeclaredMethods = 2000;
};

// An immutable set of per-method policies. Cheap to copy (shares its tables);
// thread-safe for concurrent lookups.
class Config {
 public:
  // One config entry: a policy and the fields it sets (PolicyField bits).
  struct Entry {
    MethodPolicy policy;
    uint32_t fields = 0;
  };

  // An empty config: every method gets its .proto options or the defaults.
  Config();

  // Parses `json` as described above. Errors: InvalidArgument naming each
  // error's JSON path and reason, every error of the document.
  static absl::StatusOr<Config> FromJson(absl::string_view json);

  // Resolves the policy of a full method path ("/pkg.Svc/Method") field by
  // field, each from the first source in kPolicyPrecedence that sets it.
  // Options are read from the generated descriptor pool: the .proto's
  // generated code must be linked in. A path not of that form gets the
  // default entry. Does a descriptor lookup: callers on a hot path cache the
  // result per method (the interceptor does).
  ResolvedPolicy Resolve(absl::string_view full_method) const;

  // Resolve() for the method `method` describes, from any descriptor pool:
  // its .proto options are read from `method` and its service rather than
  // looked up by name in the generated pool, so a pool built from
  // FileDescriptorSets works (rpcguard_lint does this). The interceptor
  // itself resolves by path.
  ResolvedPolicy Resolve(
      const google::protobuf::MethodDescriptor& method) const;

  // Who declares `full_method` ("/pkg.Svc/M"): what tells a method of the
  // config or of the linked-in protos, which are few, from a name a generic
  // caller made up, of which there may be any number.
  struct Declaration {
    // The config has an entry for the method, or the generated descriptor
    // pool has the method.
    bool method = false;
    // The config has an entry for the service, or the pool has the service:
    // its settings apply to every method of it, made-up ones too.
    bool service = false;
    // The path's service ("pkg.Svc", a view into `full_method`); empty for
    // a path of another form.
    absl::string_view service_name;
  };

  // Looks `full_method` up in the config's tables and, unless the config
  // names the method, in the generated pool, which takes protobuf's lock:
  // callers on a hot path remember the answer (the interceptor does).
  Declaration Declared(absl::string_view full_method) const;

  // The destination-wide settings.
  const DestinationConfig& destination() const;
  void set_destination(const DestinationConfig& destination);

  // Resolve(full_method).policy.
  MethodPolicy Lookup(absl::string_view full_method) const;

  // A few lines saying, for each setting of the method's policy, its value
  // and which source decided it. For people: the format may change, but the
  // first line is the method's path. A method of the generated pool is
  // explained as Explain(descriptor) is.
  std::string Explain(absl::string_view full_method) const;

  // Explain() for the method `method` describes, from any descriptor pool
  // (see Resolve(method)). A streaming method is said to be one: retried
  // until it commits when its policy retries it, never hedged.
  std::string Explain(const google::protobuf::MethodDescriptor& method) const;

  // Explain(full_method) for a call that sets `call` (SetCallPolicy,
  // call_policy.h): the policy that call would run under, each setting
  // `call` changes marked "[call policy]", and its trace verbosity if it
  // sets one. A `call` the call would fail with says so, with the
  // INVALID_ARGUMENT's message, and nothing more.
  std::string Explain(absl::string_view full_method,
                      const CallPolicy& call) const;

  // Sets the policy of one method, service or the default from code, in the
  // same precedence as JSON names (`service` empty = default; `method` empty
  // = whole service); it sets every field. Replaces an earlier entry for the
  // same name. Copies made earlier are unaffected.
  void Set(absl::string_view service, absl::string_view method,
           const MethodPolicy& policy);

 private:
  struct Tables {
    // Key: "pkg.Svc/Method" for methods, "pkg.Svc" for services.
    absl::flat_hash_map<std::string, Entry> methods;
    absl::flat_hash_map<std::string, Entry> services;
    std::optional<Entry> default_policy;
    DestinationConfig destination;
  };
  // Resolve()'s walk for the method `method_key` ("pkg.Svc/M", empty for a
  // path of another form) of `service`; `read_proto` reads the .proto's
  // options, called at most once and only if the config leaves a field
  // unset.
  ResolvedPolicy ResolveNamed(
      absl::string_view service, absl::string_view method_key,
      absl::FunctionRef<absl::StatusOr<ProtoPolicies>()> read_proto) const;

  std::shared_ptr<Tables> tables_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_CONFIG_H_
