// Copyright rpcguard authors.
//
// The table of MethodPolicy's settings: one row per entry of
// RPCGUARD_POLICY_FIELDS (decision/policy.h), in its order, and the one
// place each setting's JSON key, .proto option field, readers, merge and
// Explain text are written. The JSON reader (config_reader.cc), the .proto
// option reader (proto_options.cc), Config::Resolve's merge and Explain all
// walk it, so adding a setting is adding a MethodPolicy member, a list entry
// in policy.h, a row here (the compiler refuses a list entry without its
// row) and, if it has one, its field in options.proto. Not API.

#ifndef RPCGUARD_CONFIG_READER_POLICY_FIELDS_H_
#define RPCGUARD_CONFIG_READER_POLICY_FIELDS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rpcguard/base/json.h"
#include "rpcguard/config.h"
#include "rpcguard/config_reader/json_fields.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {
namespace v1 {
class MethodPolicy;  // proto/rpcguard/v1/options.proto
}  // namespace v1

// Which object of a methodConfig entry holds a setting's JSON key: gRPC's
// own settings sit in the entry itself, rpcguard's in its "rpcguard" object.
enum class JsonPlace { kMethodConfig, kRpcguard };

// What the reader of one methodConfig entry keeps while it reads: the entry
// being filled, the document's errors, and what checks across settings need
// once every key was read.
struct MethodJsonState {
  Config::Entry* entry;
  internal::ConfigErrors* errors;
  // retryPolicy.perAttemptRecvTimeout was given: gRPC's spelling of
  // rpcguard.perAttemptTimeout, so it sets that setting.
  bool has_recv_timeout = false;
};

// One setting of MethodPolicy.
struct PolicyFieldRow {
  // Its position (and bit) in RPCGUARD_POLICY_FIELDS.
  PolicyFieldIndex index;
  // Its JSON key, which Explain prints too ("retryPolicy").
  absl::string_view name;
  JsonPlace place;
  // Its field in (rpcguard.v1.method) and (rpcguard.v1.service), or "" when
  // the .proto options cannot say it (they declare what is safe, not how
  // the deployment tunes timeouts).
  absl::string_view proto_field;
  // Reads the JSON value at `path` into state.entry->policy, reporting every
  // problem to state.errors. The caller has set the setting's bit.
  void (*read_json)(const internal::Json& v, const std::string& path,
                    MethodJsonState& state);
  // Reads the option's field into `*out`; false when the option leaves it
  // unset. Problems go to `errors`, under `where` ("pkg.Svc.M:
  // (rpcguard.v1.method)"). Null when proto_field is "".
  bool (*read_proto)(const v1::MethodPolicy& in, const std::string& where,
                     internal::ConfigErrors& errors, MethodPolicy* out);
  // Copies this setting, and only it, from `from` to `*to`.
  void (*merge)(const MethodPolicy& from, MethodPolicy* to);
  // Explain's text for the setting's value in `p`.
  std::string (*explain)(const MethodPolicy& p);
};

// The rows, row i for PolicyFieldIndex i.
absl::Span<const PolicyFieldRow> PolicyFieldRows();

// Copies into `*to` the settings of `from` that `from_fields` names and
// `*to_fields` does not yet have, and adds them to `*to_fields`.
void MergePolicy(const MethodPolicy& from, uint32_t from_fields,
                 MethodPolicy* to, uint32_t* to_fields);

// Reads one (rpcguard.v1.method) or (rpcguard.v1.service) value into `*out`,
// row by row; `where` names the option in errors, all of which go to
// `errors`.
void ReadPolicyOption(const v1::MethodPolicy& in, const std::string& where,
                      internal::ConfigErrors& errors, Config::Entry* out);

}  // namespace rpcguard

#endif  // RPCGUARD_CONFIG_READER_POLICY_FIELDS_H_
