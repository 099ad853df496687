// Copyright rpcguard authors.
//
// A small strict JSON reader (RFC 8259), shared by the config and the tools
// that read rpcguard's JSON trace lines. Internal.
//
// Protobuf's JsonStringToMessage is lenient where a config must not be: it
// accepts unquoted keys, single quotes, trailing commas and unknown escapes
// ("\x41" reads as "x41"), and a Struct forgets the order of keys, which
// would make the first error reported depend on hashing. This reader rejects
// all of those, plus comments, leading zeros, numbers beyond a double's
// range, raw control characters and lone surrogates in strings, and a key
// repeated within one object (a later value would silently win).
//
// Strings are bytes: escapes are decoded (\u as UTF-8), other bytes are kept
// as they are, without checking that they form UTF-8.

#ifndef RPCGUARD_BASE_JSON_H_
#define RPCGUARD_BASE_JSON_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rpcguard {
namespace internal {

struct JsonMember;

// One JSON value. Only the members of its type are meaningful.
struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  // kString: the decoded string. kNumber: the number as written ("2.50",
  // "1e3"), for readers that want the exact text rather than a double.
  std::string string;
  std::vector<Json> array;
  // In document order, so callers can report errors in the order a reader
  // sees them.
  std::vector<JsonMember> object;
};

struct JsonMember {
  std::string key;
  Json value;
};

// The type as an error message names it: "null", "a boolean", "a number",
// "a string", "an array", "an object".
absl::string_view JsonTypeName(Json::Type type);

// Where and why a text is not JSON.
struct JsonError {
  std::string reason;  // e.g. "expected ':'"
  size_t offset = 0;   // in bytes from the start of the text
  int line = 1;        // 1-based; a line ends at '\n'
  int column = 1;      // 1-based, in bytes
};

// Parses `text`, which must hold exactly one JSON value, with optional
// whitespace around it. Errors: InvalidArgument
// "invalid JSON: line L, column C: <reason>".
absl::StatusOr<Json> ParseJson(absl::string_view text);

// Parses the one JSON value that starts at text[pos] (after optional
// whitespace) and stops at its end: what follows is not read, so a value
// can be taken out of a longer line. On success sets `*out` and `*end` (the
// offset just past the value) and returns true; on failure fills `*error`
// and returns false. Nesting is bounded (64 levels), so hostile input
// cannot exhaust the stack; time is linear in the bytes read.
bool ParseJsonValue(absl::string_view text, size_t pos, Json* out, size_t* end,
                    JsonError* error);

// Decodes the escape sequence at text[*pos] == '\\' ("\n", "\u00e9", or a
// surrogate pair "\ud83d\ude00"), appends it to `out` as UTF-8 and moves
// `*pos` past it. Returns false when it is not a valid JSON escape: then
// nothing is appended, `*pos` is left at the offending byte and `*reason`
// says why ("invalid escape in string", "invalid \u escape", "unpaired
// surrogate", "unterminated string"). For readers of JSON-like syntaxes
// (logfmt) that share JSON's escapes.
bool ReadJsonEscape(absl::string_view text, size_t* pos, std::string* out,
                    std::string* reason);

}  // namespace internal
// Appends `v` between double quotes, escaped the same way in JSON (`json`)
// and in logfmt: \" \\ \n \r \t, \b and \f in JSON, \u00XX for other
// control characters (and DEL in logfmt), and \ufffd for each byte that is
// not part of valid UTF-8, so the result is valid text whatever `v` holds.
void AppendQuotedString(std::string* out, absl::string_view v, bool json);

}  // namespace rpcguard

#endif  // RPCGUARD_BASE_JSON_H_
