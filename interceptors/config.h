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
// unknown field in an object rpcguard reads is an InvalidArgument whose
// message starts with the JSON path, e.g.
//   methodConfig[0].retryPolicy.maxAttempts: must be at least 2
// A typo must never silently turn retries off (or on).

#ifndef RPCGUARD_INTERCEPTORS_CONFIG_H_
#define RPCGUARD_INTERCEPTORS_CONFIG_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "interceptors/policy.h"

namespace rpcguard {

// An immutable set of per-method policies. Cheap to copy (shares its tables);
// thread-safe for concurrent lookups.
class Config {
 public:
  // An empty config: every method gets the default MethodPolicy.
  Config();

  // Parses `json` as described above. Errors: InvalidArgument naming the
  // JSON path and the reason.
  static absl::StatusOr<Config> FromJson(absl::string_view json);

  // Returns the policy for a full method path ("/pkg.Svc/Method"): exact
  // method, else its service, else the default entry, else MethodPolicy{}.
  // A path that is not of that form gets the default. The reference is valid
  // as long as any copy of this Config lives.
  const MethodPolicy& Lookup(absl::string_view full_method) const;

  // Sets the policy of one method, service or the default from code, in the
  // same precedence as JSON names (`service` empty = default; `method` empty
  // = whole service). Replaces an earlier entry for the same name.
  void Set(absl::string_view service, absl::string_view method,
           const MethodPolicy& policy);

 private:
  struct Tables {
    // Key: "pkg.Svc/Method" for methods, "pkg.Svc" for services.
    absl::flat_hash_map<std::string, MethodPolicy> methods;
    absl::flat_hash_map<std::string, MethodPolicy> services;
    std::optional<MethodPolicy> default_policy;
  };
  std::shared_ptr<Tables> tables_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_INTERCEPTORS_CONFIG_H_
