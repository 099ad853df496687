// Copyright rpcguard authors.
//
// The report writer of //bench:compare: every mode describes its results as
// rows of named values, and this file turns them into the markdown table on
// stdout and the JSON file of --json. A value says once how it reads in each
// (text "12.3" beside JSON 12.3, "-" beside null), so the two cannot disagree,
// and every JSON byte comes from one writer (JsonValue::Write), not from
// strings pasted together per mode.

#ifndef RPCGUARD_BENCH_COMPARE_REPORT_H_
#define RPCGUARD_BENCH_COMPARE_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rpcguard {
namespace bench {

// A JSON value: null, a boolean, a number, a string, an array or an object
// (members in the order they were added, which is the order written).
class JsonValue {
 public:
  JsonValue() = default;  // null
  static JsonValue Bool(bool b);
  static JsonValue Int(int64_t n);
  // Written "%.6g"; null when not finite.
  static JsonValue Number(double v);
  static JsonValue String(absl::string_view s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object();

  // Appends a member to an object.
  JsonValue& Add(absl::string_view key, JsonValue value);
  // Appends an item to an array.
  void Push(JsonValue value);

  // Appends the value to `out`: members and items separated by ", ", keys
  // by ": ". With `rows_per_line`, this value's members that are arrays of
  // objects put each object on a line of its own (so that `grep -c` counts
  // them); nested values are written on one line.
  void Write(std::string* out, bool rows_per_line = false) const;

 private:
  enum class Kind { kNull, kLiteral, kString, kArray, kObject };
  // An array of objects (or an empty array): a list of result rows.
  bool IsRowList() const;

  Kind kind_ = Kind::kNull;
  // kLiteral: the text as written (true, 12, 0.5); kString: unescaped.
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// One value of a result row: its text in the table and its JSON.
struct Cell {
  // The table's column heading; empty: the value is in the JSON only.
  std::string heading;
  // The JSON key; empty: the value is in the table only.
  std::string key;
  std::string text;
  JsonValue json;
  // Markdown alignment: numbers right-aligned.
  bool right = true;
};

// One result: a scenario and client, a stub and client, a point in time.
// Its cells are in the JSON's order; the table shows those with a heading,
// in the same order.
class Row {
 public:
  // A column of the table and a key of the JSON.
  Row& Both(absl::string_view heading, absl::string_view key, std::string text,
            JsonValue json, bool right = true);
  // Text left-aligned in the table, the same string in the JSON.
  Row& Name(absl::string_view heading, absl::string_view key,
            absl::string_view text);
  Row& TableOnly(absl::string_view heading, std::string text,
                 bool right = true);
  Row& JsonOnly(absl::string_view key, JsonValue json);

  const std::vector<Cell>& cells() const { return cells_; }
  JsonValue ToJson() const;

 private:
  std::vector<Cell> cells_;
};

// The rows as a markdown table, headed by the first row's headings.
std::string MarkdownTable(const std::vector<Row>& rows);

// The JSON rows, in order.
JsonValue JsonRows(const std::vector<Row>& rows);

// Writes `json` to `path`, rows one per line, with a final newline.
absl::Status WriteJsonFile(const std::string& path, const JsonValue& json);

// Helpers for the usual cells.
std::string Fixed(double v, int decimals);
// "12.34%"
std::string PercentText(double percent);
// The share (0..1) of `part` in `whole`, 0 when `whole` is 0.
double Share(int64_t part, int64_t whole);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_COMPARE_REPORT_H_
