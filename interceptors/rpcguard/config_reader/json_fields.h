// Copyright rpcguard authors.
//
// The pieces every reader of rpcguard's JSON config shares: ConfigErrors,
// which collects every error of a document with its JSON path (as gRPC's
// own service-config loader does, so one run of a config names all of its
// mistakes), and readers of single values (durations, counts, status codes)
// that report into it. Not API.

#ifndef RPCGUARD_CONFIG_READER_JSON_FIELDS_H_
#define RPCGUARD_CONFIG_READER_JSON_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/base/json.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {
namespace internal {

// Every error found in one config document, in the order found (document
// order, since the readers walk the document once, front to back).
class ConfigErrors {
 public:
  // Past this many, further errors are counted, not kept: a config with a
  // million bad entries must not make a message of a million lines.
  static constexpr size_t kMaxKept = 50;

  // Records "<path>: <reason>", e.g. path "methodConfig[1].timeout".
  void Add(absl::string_view path, absl::string_view reason);
  // Records a message that already starts with its path (an options
  // struct's Validate() result, for instance); nothing for an OK status.
  void Add(const absl::Status& status);

  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }

  // OK when there is no error. Otherwise InvalidArgument whose message is
  // the errors joined by "; " in the order found, so a config with one
  // error reads "path: reason" and nothing more; past kMaxKept it ends
  // with "; and N more errors".
  absl::Status ToStatus() const;

 private:
  std::vector<std::string> kept_;
  size_t count_ = 0;
};

// "path.key" and "path[i]": the JSON path spelling of error messages.
std::string Child(absl::string_view path, absl::string_view key);
std::string Index(absl::string_view path, size_t i);

// Each reader below checks one JSON value found at `path`. On success it
// sets `*out` and returns true; otherwise it adds one error under `path` (or
// one per bad element of an array) and returns false, leaving `*out` as it
// was.

// The value is of `type` ("must be an object" otherwise).
bool CheckType(const Json& v, Json::Type type, absl::string_view path,
               ConfigErrors& errors);
// A number with no fraction (JSON has only doubles).
bool ReadInteger(const Json& v, absl::string_view path, ConfigErrors& errors,
                 double* out);
// Any number.
bool ReadNumber(const Json& v, absl::string_view path, ConfigErrors& errors,
                double* out);
// An integer in [1, 1000000]: more is taken for a typo.
bool ReadCount(const Json& v, absl::string_view path, ConfigErrors& errors,
               int* out);
// true or false.
bool ReadBool(const Json& v, absl::string_view path, ConfigErrors& errors,
              bool* out);
// A proto3 JSON Duration ("1.5s"), greater than 0; with `zero_ok`, 0 is
// accepted too (A6's hedgingDelay: every copy at once).
bool ReadDuration(const Json& v, absl::string_view path, ConfigErrors& errors,
                  absl::Duration* out, bool zero_ok = false);
// A non-empty array of status codes, names in any case or numbers 1..16
// (OK is never retryable): every bad element is reported.
bool ReadCodes(const Json& v, absl::string_view path, ConfigErrors& errors,
               std::optional<StatusCodeSet>* out);

// One key of a JSON object whose members are read into a T: the key and
// the reader of its value (one of the above, or a lambda around one).
template <typename T>
struct JsonMemberRow {
  absl::string_view key;
  bool (*read)(const Json& v, const std::string& path, ConfigErrors& errors,
               T* out);
};

// Reads the members of the object `v` at `path` into `*out`, each through
// the row with its key; a key with no row is an "unknown field". Returns
// the rows seen, as bits (bit i = rows[i]); 0 also when `v` is not an
// object, which is then the error.
template <typename T, size_t N>
uint64_t ReadMembers(const Json& v, const std::string& path,
                     const JsonMemberRow<T> (&rows)[N], ConfigErrors& errors,
                     T* out) {
  static_assert(N <= 64, "ReadMembers returns the rows seen as 64 bits");
  uint64_t seen = 0;
  if (!CheckType(v, Json::Type::kObject, path, errors)) return seen;
  for (const JsonMember& m : v.object) {
    const std::string field = Child(path, m.key);
    size_t i = 0;
    while (i < N && rows[i].key != m.key) ++i;
    if (i == N) {
      errors.Add(field, "unknown field");
      continue;
    }
    seen |= uint64_t{1} << i;
    rows[i].read(m.value, field, errors, out);
  }
  return seen;
}

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_CONFIG_READER_JSON_FIELDS_H_
