// Copyright rpcguard authors.

#include "rpcguard/base/json.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpcguard/base/utf8.h"

namespace rpcguard {
namespace internal {
namespace {

// Deep enough for any config or trace line; bounds the recursion on hostile
// input.
constexpr int kMaxDepth = 64;

bool IsJsonSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Reads the 4 hex digits at text[pos..pos+4).
bool ReadHex4(absl::string_view text, size_t pos, uint32_t* out) {
  if (pos > text.size() || text.size() - pos < 4) return false;
  uint32_t value = 0;
  for (size_t i = pos; i < pos + 4; ++i) {
    const char c = text[i];
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else {
      return false;
    }
  }
  *out = value;
  return true;
}

JsonError MakeError(absl::string_view text, size_t offset, std::string reason) {
  JsonError error;
  error.reason = std::move(reason);
  error.offset = offset;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++error.line;
      error.column = 1;
    } else {
      ++error.column;
    }
  }
  return error;
}

class Parser {
 public:
  Parser(absl::string_view text, size_t pos) : text_(text), pos_(pos) {}

  bool Parse(Json* out) {
    SkipSpace();
    return ParseValue(out, 0);
  }

  size_t pos() const { return pos_; }
  std::string& error() { return error_; }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  bool PeekDigit() const { return !AtEnd() && absl::ascii_isdigit(Peek()); }

  bool Consume(char c) {
    if (AtEnd() || Peek() != c) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (!AtEnd() && IsJsonSpace(Peek())) ++pos_;
  }

  bool Fail(std::string reason) {
    error_ = std::move(reason);
    return false;
  }

  bool ParseValue(Json* out, int depth) {
    if (AtEnd()) return Fail("unexpected end of input, expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"':
        out->type = Json::Type::kString;
        return ParseString(&out->string);
      case 't':
        out->type = Json::Type::kBool;
        out->boolean = true;
        return ParseWord("true");
      case 'f':
        out->type = Json::Type::kBool;
        return ParseWord("false");
      case 'n':
        out->type = Json::Type::kNull;
        return ParseWord("null");
      default:
        if (Peek() == '-' || absl::ascii_isdigit(Peek())) {
          out->type = Json::Type::kNumber;
          return ParseNumber(out);
        }
        return Fail("expected a value");
    }
  }

  bool ParseWord(absl::string_view word) {
    if (!absl::StartsWith(text_.substr(pos_), word)) {
      return Fail("expected a value");
    }
    pos_ += word.size();
    return true;
  }

  bool ParseObject(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    out->type = Json::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Consume('}')) return true;
    absl::flat_hash_set<std::string> keys;
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() != '"') return Fail("expected a string key");
      const size_t key_pos = pos_;
      JsonMember member;
      if (!ParseString(&member.key)) return false;
      if (!keys.insert(member.key).second) {
        pos_ = key_pos;
        return Fail(absl::StrCat("duplicate key \"", member.key, "\""));
      }
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':'");
      SkipSpace();
      if (!ParseValue(&member.value, depth)) return false;
      out->object.push_back(std::move(member));
      SkipSpace();
      if (Consume('}')) return true;
      if (!Consume(',')) return Fail("expected ',' or '}'");
    }
  }

  bool ParseArray(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    out->type = Json::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      SkipSpace();
      out->array.emplace_back();
      if (!ParseValue(&out->array.back(), depth)) return false;
      SkipSpace();
      if (Consume(']')) return true;
      if (!Consume(',')) return Fail("expected ',' or ']'");
    }
  }

  bool ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      const char c = Peek();
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("control character in string");
      }
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      if (!ReadJsonEscape(text_, &pos_, out, &error_)) return false;
    }
  }

  bool ParseNumber(Json* out) {
    const size_t start = pos_;
    Consume('-');
    if (!Consume('0')) {
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    if (Consume('.')) {
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!PeekDigit()) return Fail("invalid number");
      while (PeekDigit()) ++pos_;
    }
    const absl::string_view text = text_.substr(start, pos_ - start);
    if (!absl::SimpleAtod(text, &out->number) || !std::isfinite(out->number)) {
      pos_ = start;
      return Fail("number out of range");
    }
    out->string = std::string(text);
    return true;
  }

  const absl::string_view text_;
  size_t pos_;
  std::string error_;
};

}  // namespace

absl::string_view JsonTypeName(Json::Type type) {
  switch (type) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return "a boolean";
    case Json::Type::kNumber:
      return "a number";
    case Json::Type::kString:
      return "a string";
    case Json::Type::kArray:
      return "an array";
    case Json::Type::kObject:
      return "an object";
  }
  return "null";
}

bool ParseJsonValue(absl::string_view text, size_t pos, Json* out, size_t* end,
                    JsonError* error) {
  Parser parser(text, pos);
  Json value;
  if (!parser.Parse(&value)) {
    *error = MakeError(text, parser.pos(), std::move(parser.error()));
    return false;
  }
  *out = std::move(value);
  *end = parser.pos();
  return true;
}

absl::StatusOr<Json> ParseJson(absl::string_view text) {
  Json value;
  size_t end = 0;
  JsonError error;
  if (ParseJsonValue(text, 0, &value, &end, &error)) {
    while (end < text.size() && IsJsonSpace(text[end])) ++end;
    if (end == text.size()) return value;
    error = MakeError(text, end, "unexpected text after the JSON value");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid JSON: line ", error.line, ", column ", error.column,
                   ": ", error.reason));
}

bool ReadJsonEscape(absl::string_view text, size_t* pos, std::string* out,
                    std::string* reason) {
  size_t p = *pos + 1;  // past the '\\'
  auto fail = [&](size_t at, absl::string_view why) {
    *pos = at;
    *reason = std::string(why);
    return false;
  };
  if (p >= text.size()) return fail(p, "unterminated string");
  const char escape = text[p++];
  switch (escape) {
    case '"':
    case '\\':
    case '/':
      out->push_back(escape);
      break;
    case 'b':
      out->push_back('\b');
      break;
    case 'f':
      out->push_back('\f');
      break;
    case 'n':
      out->push_back('\n');
      break;
    case 'r':
      out->push_back('\r');
      break;
    case 't':
      out->push_back('\t');
      break;
    case 'u': {
      uint32_t cp;
      if (!ReadHex4(text, p, &cp)) return fail(p, "invalid \\u escape");
      p += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "unpaired surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        // A high surrogate must be followed at once by an escaped low one.
        if (p >= text.size() || text[p] != '\\') {
          return fail(p, "unpaired surrogate");
        }
        ++p;
        if (p >= text.size() || text[p] != 'u') {
          return fail(p, "unpaired surrogate");
        }
        ++p;
        uint32_t low;
        if (!ReadHex4(text, p, &low)) return fail(p, "unpaired surrogate");
        p += 4;
        if (low < 0xDC00 || low > 0xDFFF) {
          return fail(p, "unpaired surrogate");
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      }
      AppendUtf8(cp, out);
      break;
    }
    default:
      return fail(p - 1, "invalid escape in string");
  }
  *pos = p;
  return true;
}

}  // namespace internal
void AppendQuotedString(std::string* out, absl::string_view v, bool json) {
  out->push_back('"');
  while (!v.empty()) {
    const unsigned char c = v[0];
    if (c >= 0x80) {
      const size_t n = internal::Utf8SequenceLength(v);
      if (n == 0) {
        out->append("\\ufffd");
        v.remove_prefix(1);
      } else {
        out->append(v.data(), n);
        v.remove_prefix(n);
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append(json ? "\\b" : "\\u0008");
        break;
      case '\f':
        out->append(json ? "\\f" : "\\u000c");
        break;
      default:
        if (c < 0x20 || (!json && c == 0x7f)) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    v.remove_prefix(1);
  }
  out->push_back('"');
}

}  // namespace rpcguard
