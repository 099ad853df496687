// Copyright rpcguard authors.

#include "rpcguard/base/json.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace internal {
namespace {

using Type = Json::Type;

Json MustParse(absl::string_view text) {
  absl::StatusOr<Json> json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << text;
  return json.ok() ? *std::move(json) : Json();
}

// The whole error message ParseJson gives for `text`.
std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<Json> json = ParseJson(text);
  EXPECT_FALSE(json.ok()) << text;
  if (json.ok()) return "";
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(json.status().message());
}

std::string StringOf(absl::string_view text) {
  const Json json = MustParse(text);
  EXPECT_EQ(json.type, Type::kString) << text;
  return json.string;
}

TEST(JsonTest, Literals) {
  EXPECT_EQ(MustParse("null").type, Type::kNull);
  const Json t = MustParse("true");
  EXPECT_EQ(t.type, Type::kBool);
  EXPECT_TRUE(t.boolean);
  const Json f = MustParse("false");
  EXPECT_EQ(f.type, Type::kBool);
  EXPECT_FALSE(f.boolean);
  EXPECT_EQ(MustParse(" \t\r\n{}\n ").type, Type::kObject);
  EXPECT_EQ(MustParse("[ ]").type, Type::kArray);
  for (absl::string_view bad : {"tru", "nul", "True", "NULL", "\f1", "'a'"}) {
    EXPECT_EQ(ErrorOf(bad), "invalid JSON: line 1, column 1: expected a value")
        << bad;
  }
  EXPECT_EQ(ErrorOf(""),
            "invalid JSON: line 1, column 1: unexpected end of input, "
            "expected a value");
  EXPECT_EQ(ErrorOf("  "),
            "invalid JSON: line 1, column 3: unexpected end of input, "
            "expected a value");
}

TEST(JsonTest, TypeNames) {
  EXPECT_EQ(JsonTypeName(Type::kNull), "null");
  EXPECT_EQ(JsonTypeName(Type::kBool), "a boolean");
  EXPECT_EQ(JsonTypeName(Type::kNumber), "a number");
  EXPECT_EQ(JsonTypeName(Type::kString), "a string");
  EXPECT_EQ(JsonTypeName(Type::kArray), "an array");
  EXPECT_EQ(JsonTypeName(Type::kObject), "an object");
}

TEST(JsonTest, NestingKeepsDocumentOrder) {
  const Json json = MustParse(
      R"({"b": [1, {"z": null, "y": [true, []]}], "a": {}, "c": "x"})");
  ASSERT_EQ(json.type, Type::kObject);
  ASSERT_EQ(json.object.size(), 3u);
  EXPECT_EQ(json.object[0].key, "b");
  EXPECT_EQ(json.object[1].key, "a");
  EXPECT_EQ(json.object[2].key, "c");
  const Json& b = json.object[0].value;
  ASSERT_EQ(b.type, Type::kArray);
  ASSERT_EQ(b.array.size(), 2u);
  EXPECT_EQ(b.array[0].number, 1);
  const Json& inner = b.array[1];
  ASSERT_EQ(inner.type, Type::kObject);
  ASSERT_EQ(inner.object.size(), 2u);
  EXPECT_EQ(inner.object[0].key, "z");
  EXPECT_EQ(inner.object[0].value.type, Type::kNull);
  EXPECT_EQ(inner.object[1].key, "y");
  ASSERT_EQ(inner.object[1].value.array.size(), 2u);
  EXPECT_TRUE(inner.object[1].value.array[0].boolean);
  EXPECT_EQ(inner.object[1].value.array[1].type, Type::kArray);
  EXPECT_EQ(json.object[1].value.type, Type::kObject);
  EXPECT_TRUE(json.object[1].value.object.empty());
  EXPECT_EQ(json.object[2].value.string, "x");
}

TEST(JsonTest, NestingIsBounded) {
  // 64 levels of containers are fine, the 65th is not.
  EXPECT_EQ(MustParse(std::string(64, '[') + std::string(64, ']')).type,
            Type::kArray);
  EXPECT_EQ(ErrorOf(std::string(65, '[') + std::string(65, ']')),
            "invalid JSON: line 1, column 65: nested too deeply");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += R"({"a":)";
  EXPECT_EQ(ErrorOf(objects),
            "invalid JSON: line 1, column 321: nested too deeply");
  // Far deeper input fails the same way rather than exhausting the stack.
  EXPECT_EQ(ErrorOf(std::string(100000, '[')),
            "invalid JSON: line 1, column 65: nested too deeply");
}

TEST(JsonTest, StructuralErrors) {
  EXPECT_EQ(ErrorOf(R"({"a" 1})"),
            "invalid JSON: line 1, column 6: expected ':'");
  EXPECT_EQ(ErrorOf(R"({"a":1,})"),
            "invalid JSON: line 1, column 8: expected a string key");
  EXPECT_EQ(ErrorOf(R"({a: 1})"),
            "invalid JSON: line 1, column 2: expected a string key");
  EXPECT_EQ(ErrorOf(R"({"a":1 "b":2})"),
            "invalid JSON: line 1, column 8: expected ',' or '}'");
  EXPECT_EQ(ErrorOf("[1 2]"),
            "invalid JSON: line 1, column 4: expected ',' or ']'");
  EXPECT_EQ(ErrorOf("[1,]"),
            "invalid JSON: line 1, column 4: expected a value");
  EXPECT_EQ(ErrorOf("{"),
            "invalid JSON: line 1, column 2: expected a string key");
  EXPECT_EQ(ErrorOf("["),
            "invalid JSON: line 1, column 2: unexpected end of input, "
            "expected a value");
  EXPECT_EQ(ErrorOf("// comment\n{}"),
            "invalid JSON: line 1, column 1: expected a value");
}

TEST(JsonTest, EveryEscape) {
  EXPECT_EQ(StringOf(R"("\"\\\/\b\f\n\r\t")"), "\"\\/\b\f\n\r\t");
  // \u in 1, 2 and 3 UTF-8 bytes, either case of hex digit.
  EXPECT_EQ(StringOf(R"("\u0041\u00e9\u20AC\uffff")"),
            "A\xc3\xa9\xe2\x82\xac\xef\xbf\xbf");
  EXPECT_EQ(StringOf(R"("\u0000")"), std::string(1, '\0'));
  EXPECT_EQ(StringOf(R"("plain text")"), "plain text");
  for (absl::string_view bad : {R"("\x41")", R"("\')", R"("\a")", R"("\0")",
                                R"("\U0041")", R"("\ ")"}) {
    EXPECT_EQ(ErrorOf(bad),
              "invalid JSON: line 1, column 3: invalid escape in string")
        << bad;
  }
  for (absl::string_view bad : {R"("\u12")", R"("\u12g4")", R"("\u")"}) {
    EXPECT_EQ(ErrorOf(bad),
              "invalid JSON: line 1, column 4: invalid \\u escape")
        << bad;
  }
}

TEST(JsonTest, SurrogatePairs) {
  EXPECT_EQ(StringOf(R"("\ud83d\ude00")"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(StringOf(R"("\uD83D\uDE00")"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(StringOf(R"("\ud800\udc00")"), "\xf0\x90\x80\x80");  // U+10000
  EXPECT_EQ(StringOf(R"("\udbff\udfff")"), "\xf4\x8f\xbf\xbf");  // U+10FFFF
}

TEST(JsonTest, LoneSurrogates) {
  struct Case {
    absl::string_view json;
    int column;
  };
  for (const Case& c : {
           Case{R"("\udc00")", 8},         // a low one alone
           Case{R"("\ude00\ud83d")", 8},   // a pair the wrong way round
           Case{R"("\ud800")", 8},         // a high one at the end
           Case{R"("\ud800x")", 8},        // followed by a character
           Case{R"("\ud800\n")", 9},       // by another escape
           Case{R"("\ud800\u0041")", 14},  // by a \u that is not low
           Case{R"("\ud800\ud800")", 14},  // by another high one
           Case{R"("\ud800\u12")", 10},    // by a broken \u
       }) {
    EXPECT_EQ(ErrorOf(c.json), absl::StrCat("invalid JSON: line 1, column ",
                                            c.column, ": unpaired surrogate"))
        << c.json;
  }
}

TEST(JsonTest, StringErrors) {
  EXPECT_EQ(ErrorOf(R"("ab)"),
            "invalid JSON: line 1, column 4: unterminated string");
  EXPECT_EQ(ErrorOf("\"a\\"),
            "invalid JSON: line 1, column 4: unterminated string");
  EXPECT_EQ(ErrorOf("\"a\tb\""),
            "invalid JSON: line 1, column 3: control character in string");
  EXPECT_EQ(ErrorOf(std::string("\"a\0\"", 4)),
            "invalid JSON: line 1, column 3: control character in string");
  EXPECT_EQ(ErrorOf("\"a\nb\""),
            "invalid JSON: line 1, column 3: control character in string");
  // DEL is not a control character to JSON.
  EXPECT_EQ(StringOf("\"\x7f\""), "\x7f");
}

TEST(JsonTest, BytesThatAreNotUtf8AreKeptAsTheyAre) {
  // Not checked: a config's names then simply match nothing, and a trace
  // writer never produces such bytes.
  EXPECT_EQ(StringOf("\"\xff\xfe\xc3\""), "\xff\xfe\xc3");
  EXPECT_EQ(StringOf("\"\xc0\xaf \xed\xa0\x80\""), "\xc0\xaf \xed\xa0\x80");
  const Json json = MustParse("{\"k\xff\": 1}");
  ASSERT_EQ(json.object.size(), 1u);
  EXPECT_EQ(json.object[0].key, "k\xff");
  // Outside strings they are not JSON at all.
  EXPECT_EQ(ErrorOf("[\xff]"),
            "invalid JSON: line 1, column 2: expected a value");
}

TEST(JsonTest, DuplicateKeys) {
  EXPECT_EQ(ErrorOf(R"({"a": 1, "a": 2})"),
            "invalid JSON: line 1, column 10: duplicate key \"a\"");
  EXPECT_EQ(ErrorOf(R"({"a": {"b": 1, "b": 2}})"),
            "invalid JSON: line 1, column 16: duplicate key \"b\"");
  // Compared after decoding.
  EXPECT_EQ(ErrorOf(R"({"a": 1, "\u0061": 2})"),
            "invalid JSON: line 1, column 10: duplicate key \"a\"");
  // The same key in different objects is fine, and so is case.
  const Json json = MustParse(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}],
                                  "A": 3})");
  EXPECT_EQ(json.object.size(), 3u);
}

TEST(JsonTest, TrailingText) {
  for (absl::string_view bad : {"{} x", "{} {}", "[] ]", "1 2"}) {
    EXPECT_EQ(ErrorOf(bad),
              absl::StrCat("invalid JSON: line 1, column ", bad.find(' ') + 2,
                           ": unexpected text after the JSON value"))
        << bad;
  }
  EXPECT_EQ(ErrorOf("{}\n\n,"),
            "invalid JSON: line 3, column 1: unexpected text after the JSON "
            "value");
  EXPECT_EQ(MustParse("{}  \n\t").type, Type::kObject);
}

TEST(JsonTest, Numbers) {
  struct Case {
    absl::string_view text;
    double value;
  };
  for (const Case& c : {
           Case{"0", 0},
           Case{"-0", 0},
           Case{"12", 12},
           Case{"2.50", 2.5},
           Case{"-12.5e+3", -12500},
           Case{"1E2", 100},
           Case{"1e-2", 0.01},
           Case{"0.001", 0.001},
           Case{"1.7976931348623157e308", 1.7976931348623157e308},
       }) {
    const Json json = MustParse(c.text);
    EXPECT_EQ(json.type, Type::kNumber) << c.text;
    EXPECT_EQ(json.number, c.value) << c.text;
    // The text as written, for readers that want it.
    EXPECT_EQ(json.string, c.text);
  }
  EXPECT_TRUE(std::signbit(MustParse("-0").number));

  struct Bad {
    absl::string_view text;
    absl::string_view error;
  };
  for (const Bad& b : {
           Bad{"-", "line 1, column 2: invalid number"},
           Bad{"-a", "line 1, column 2: invalid number"},
           Bad{"1.", "line 1, column 3: invalid number"},
           Bad{"1.e5", "line 1, column 3: invalid number"},
           Bad{"1e", "line 1, column 3: invalid number"},
           Bad{"1e+", "line 1, column 4: invalid number"},
           Bad{".5", "line 1, column 1: expected a value"},
           Bad{"+1", "line 1, column 1: expected a value"},
           Bad{"NaN", "line 1, column 1: expected a value"},
           Bad{"Infinity", "line 1, column 1: expected a value"},
           Bad{"-Infinity", "line 1, column 2: invalid number"},
           Bad{"01", "line 1, column 2: unexpected text after the JSON value"},
           Bad{"0x10",
               "line 1, column 2: unexpected text after the JSON value"},
           Bad{"1e400", "line 1, column 1: number out of range"},
           Bad{"[1, -1e400]", "line 1, column 5: number out of range"},
       }) {
    EXPECT_EQ(ErrorOf(b.text), absl::StrCat("invalid JSON: ", b.error))
        << b.text;
  }
}

TEST(JsonTest, LineAndColumn) {
  EXPECT_EQ(ErrorOf("{\n  \"a\": tru\n}"),
            "invalid JSON: line 2, column 8: expected a value");
  EXPECT_EQ(ErrorOf("[\n\n  1,\n  x]"),
            "invalid JSON: line 4, column 3: expected a value");
  // '\r' is a column like any other byte; only '\n' ends a line.
  EXPECT_EQ(ErrorOf("[\r\n x]"),
            "invalid JSON: line 2, column 2: expected a value");
  // Columns count bytes: "é" is two.
  EXPECT_EQ(ErrorOf("[\"\xc3\xa9\", x]"),
            "invalid JSON: line 1, column 8: expected a value");
}

TEST(JsonValueTest, StopsAtTheEndOfTheValue) {
  const absl::string_view line = R"(prefix {"a": [1, "}"]} suffix {)";
  Json json;
  size_t end = 0;
  JsonError error;
  ASSERT_TRUE(ParseJsonValue(line, line.find('{'), &json, &end, &error))
      << error.reason;
  EXPECT_EQ(line.substr(end), " suffix {");
  ASSERT_EQ(json.type, Type::kObject);
  ASSERT_EQ(json.object.size(), 1u);
  EXPECT_EQ(json.object[0].value.array[1].string, "}");

  // Whitespace before the value is skipped.
  ASSERT_TRUE(ParseJsonValue(" \n [1]x", 0, &json, &end, &error));
  EXPECT_EQ(end, 6u);
  EXPECT_EQ(json.type, Type::kArray);
}

TEST(JsonValueTest, ErrorsSayWhereInTheWholeText) {
  const absl::string_view text = "ab\n{\"a\" 1}";
  Json json;
  size_t end = 0;
  JsonError error;
  ASSERT_FALSE(ParseJsonValue(text, 3, &json, &end, &error));
  EXPECT_EQ(error.reason, "expected ':'");
  EXPECT_EQ(error.offset, 8u);
  EXPECT_EQ(error.line, 2);
  EXPECT_EQ(error.column, 6);

  // A value cut short fails: it never reads past the text.
  const std::string whole = R"({"msg": "rpcguard", "n": [1, 2]})";
  for (size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(ParseJsonValue(whole.substr(0, n), 0, &json, &end, &error))
        << whole.substr(0, n);
  }
}

TEST(ReadJsonEscapeTest, DecodesAndAdvances) {
  std::string out = "x";
  size_t pos = 1;
  std::string reason;
  ASSERT_TRUE(ReadJsonEscape(R"(a\u00e9b)", &pos, &out, &reason));
  EXPECT_EQ(out, "x\xc3\xa9");
  EXPECT_EQ(pos, 7u);

  pos = 0;
  ASSERT_TRUE(ReadJsonEscape(R"(\ud83d\ude00!)", &pos, &out, &reason));
  EXPECT_EQ(out, "x\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(pos, 12u);
}

TEST(ReadJsonEscapeTest, FailureAppendsNothingAndPointsAtTheProblem) {
  struct Case {
    absl::string_view text;
    size_t pos;
    absl::string_view reason;
  };
  for (const Case& c : {
           Case{R"(\q)", 1, "invalid escape in string"},
           Case{R"(\u12)", 2, "invalid \\u escape"},
           Case{R"(\ud800)", 6, "unpaired surrogate"},
           Case{R"(\ud800\u0041)", 12, "unpaired surrogate"},
           Case{"\\", 1, "unterminated string"},
       }) {
    std::string out = "kept";
    size_t pos = 0;
    std::string reason;
    EXPECT_FALSE(ReadJsonEscape(c.text, &pos, &out, &reason)) << c.text;
    EXPECT_EQ(out, "kept") << c.text;
    EXPECT_EQ(pos, c.pos) << c.text;
    EXPECT_EQ(reason, c.reason) << c.text;
  }
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
