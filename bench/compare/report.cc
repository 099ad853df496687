// Copyright rpcguard authors.

#include "bench/compare/report.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rpcguard {
namespace bench {
namespace {

void AppendString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.kind_ = Kind::kLiteral;
  v.text_ = b ? "true" : "false";
  return v;
}

JsonValue JsonValue::Int(int64_t n) {
  JsonValue v;
  v.kind_ = Kind::kLiteral;
  v.text_ = absl::StrCat(n);
  return v;
}

JsonValue JsonValue::Number(double d) {
  JsonValue v;
  if (!std::isfinite(d)) return v;
  v.kind_ = Kind::kLiteral;
  v.text_ = absl::StrFormat("%.6g", d);
  return v;
}

JsonValue JsonValue::String(absl::string_view s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::string(s);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::Object() {
  JsonValue v;
  v.kind_ = Kind::kObject;
  return v;
}

JsonValue& JsonValue::Add(absl::string_view key, JsonValue value) {
  members_.emplace_back(std::string(key), std::move(value));
  return *this;
}

void JsonValue::Push(JsonValue value) { items_.push_back(std::move(value)); }

bool JsonValue::IsRowList() const {
  return kind_ == Kind::kArray &&
         (items_.empty() || items_.front().kind_ == Kind::kObject);
}

void JsonValue::Write(std::string* out, bool rows_per_line) const {
  switch (kind_) {
    case Kind::kNull:
      out->append("null");
      return;
    case Kind::kLiteral:
      out->append(text_);
      return;
    case Kind::kString:
      AppendString(out, text_);
      return;
    case Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) out->append(", ");
        items_[i].Write(out);
      }
      out->push_back(']');
      return;
    case Kind::kObject:
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendString(out, members_[i].first);
        out->append(": ");
        const JsonValue& v = members_[i].second;
        if (rows_per_line && v.IsRowList()) {
          out->append("[\n  ");
          for (size_t k = 0; k < v.items_.size(); ++k) {
            if (k > 0) out->append(",\n  ");
            v.items_[k].Write(out);
          }
          out->append("\n]");
        } else {
          v.Write(out);
        }
      }
      out->push_back('}');
      return;
  }
}

Row& Row::Both(absl::string_view heading, absl::string_view key,
               std::string text, JsonValue json, bool right) {
  cells_.push_back(Cell{std::string(heading), std::string(key), std::move(text),
                        std::move(json), right});
  return *this;
}

Row& Row::Name(absl::string_view heading, absl::string_view key,
               absl::string_view text) {
  return Both(heading, key, std::string(text), JsonValue::String(text),
              /*right=*/false);
}

Row& Row::TableOnly(absl::string_view heading, std::string text, bool right) {
  return Both(heading, "", std::move(text), JsonValue(), right);
}

Row& Row::JsonOnly(absl::string_view key, JsonValue json) {
  return Both("", key, "", std::move(json));
}

JsonValue Row::ToJson() const {
  JsonValue object = JsonValue::Object();
  for (const Cell& c : cells_) {
    if (!c.key.empty()) object.Add(c.key, c.json);
  }
  return object;
}

std::string MarkdownTable(const std::vector<Row>& rows) {
  if (rows.empty()) return "";
  std::string out = "|";
  std::string rule = "|";
  for (const Cell& c : rows.front().cells()) {
    if (c.heading.empty()) continue;
    absl::StrAppend(&out, " ", c.heading, " |");
    absl::StrAppend(&rule, c.right ? "---:|" : "---|");
  }
  absl::StrAppend(&out, "\n", rule, "\n");
  for (const Row& row : rows) {
    out.append("|");
    for (const Cell& c : row.cells()) {
      if (!c.heading.empty()) absl::StrAppend(&out, " ", c.text, " |");
    }
    out.append("\n");
  }
  return out;
}

JsonValue JsonRows(const std::vector<Row>& rows) {
  std::vector<JsonValue> items;
  items.reserve(rows.size());
  for (const Row& r : rows) items.push_back(r.ToJson());
  return JsonValue::Array(std::move(items));
}

absl::Status WriteJsonFile(const std::string& path, const JsonValue& json) {
  std::string text;
  json.Write(&text, /*rows_per_line=*/true);
  std::ofstream out(path);
  out << text << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string Fixed(double v, int decimals) {
  return absl::StrFormat("%.*f", decimals, v);
}

std::string PercentText(double percent) {
  return absl::StrFormat("%.2f%%", percent);
}

double Share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / whole : 0;
}

}  // namespace bench
}  // namespace rpcguard
