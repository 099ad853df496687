// Copyright rpcguard authors.
//
// rpcguard_lint's logic (tools/lint.h) on descriptor sets made as
// bazel/lint.bzl makes them: tests/lint/cases.proto (every kind of
// declaration, good and bad; it imports tests/lint/imported.proto) and
// declared.proto, whose generated code is also linked here so the lint can be
// compared with what the interceptor resolves (and fault.proto's, for a
// streaming method of the generated pool).

#include "tools/lint.h"

#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/config.h"

namespace rpcguard {
namespace {

using ::google::protobuf::FileDescriptorProto;
using ::google::protobuf::FileDescriptorSet;

constexpr char kCasesSet[] = "tests/lint_cases.pb";
constexpr char kDeclaredSet[] = "tests/lint_declared.pb";
constexpr char kCasesProto[] = "tests/lint/cases.proto";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

DescriptorSetFile SetFile(const std::string& path) {
  return {path, ReadFile(path)};
}

DescriptorSetFile SetOf(const FileDescriptorSet& set) {
  return {"x.pb", set.SerializeAsString()};
}

FileDescriptorSet Parsed(const std::string& path) {
  FileDescriptorSet set;
  EXPECT_TRUE(set.ParseFromString(ReadFile(path))) << path;
  return set;
}

LintReport MustLint(const std::vector<DescriptorSetFile>& sets,
                    const Config& config = Config()) {
  absl::StatusOr<LintReport> report = Lint(sets, config);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : LintReport();
}

Config MustParse(absl::string_view json) {
  absl::StatusOr<Config> c = Config::FromJson(json);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config();
}

// The RPC whose explanation starts with `path`; fails the test if none.
LintedMethod Method(const LintReport& report, absl::string_view path) {
  for (const LintedMethod& m : report.methods) {
    if (absl::StartsWith(m.explanation, absl::StrCat(path, "\n"))) return m;
  }
  ADD_FAILURE() << "no " << path;
  return LintedMethod();
}

// The problems whose message starts with `full_name` ("pkg.Svc.M").
std::vector<LintProblem> ProblemsOf(const LintReport& report,
                                    absl::string_view full_name) {
  std::vector<LintProblem> out;
  for (const LintProblem& p : report.problems) {
    if (absl::StartsWith(p.message, absl::StrCat(full_name, ":"))) {
      out.push_back(p);
    }
  }
  return out;
}

// The 1-based line of cases.proto holding `text`, at or after the line
// holding `after`: the fixture is read, so edits to it cannot desynchronize.
int LineOf(absl::string_view text, absl::string_view after = "") {
  std::ifstream in(kCasesProto);
  std::string line;
  bool found_after = after.empty();
  for (int n = 1; std::getline(in, line); ++n) {
    if (!found_after) {
      found_after = absl::StrContains(line, after);
      if (!found_after) continue;
    }
    if (absl::StrContains(line, text)) return n;
  }
  ADD_FAILURE() << "no " << text << " in " << kCasesProto;
  return 0;
}

TEST(LintTest, DeclarationsFromIdempotencyLevelAndMethodOption) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Read").explanation,
      "idempotency:       NO_SIDE_EFFECTS  [proto: idempotency_level]"));
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Put").explanation,
      "idempotency:       IDEMPOTENT  [proto: idempotency_level]"));
  const LintedMethod pay = Method(report, "/lint.cases.v1.Cases/Pay");
  EXPECT_TRUE(absl::StrContains(
      pay.explanation,
      "idempotency:       KEYED  [proto: (rpcguard.v1.method)]"))
      << pay.explanation;
  EXPECT_TRUE(absl::StrContains(pay.explanation, "=> retried, up to 3"));
  EXPECT_EQ(pay.place,
            absl::StrCat(kCasesProto, ":", LineOf("rpc Pay("), ":3"));
  for (const char* m : {"Read", "Put", "Pay"}) {
    EXPECT_TRUE(
        ProblemsOf(report, absl::StrCat("lint.cases.v1.Cases.", m)).empty())
        << m;
  }
}

TEST(LintTest, ServiceOptionAndAnExplicitUnknown) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const std::string inherit =
      Method(report, "/lint.cases.v1.Whole/Inherit").explanation;
  EXPECT_TRUE(absl::StrContains(
      inherit, "idempotency:       IDEMPOTENT  [proto: (rpcguard.v1.service)]"))
      << inherit;
  EXPECT_TRUE(absl::StrContains(inherit, "=> retried, up to 4 attempts"));
  // UNKNOWN, said on purpose, is a declaration: not a problem.
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Whole/Unsafe").explanation,
      "idempotency:       UNKNOWN  [proto: (rpcguard.v1.method)]"));
  EXPECT_TRUE(ProblemsOf(report, "lint.cases.v1.Whole.Unsafe").empty());
  EXPECT_TRUE(ProblemsOf(report, "lint.cases.v1.Whole.Inherit").empty());
}

TEST(LintTest, UndeclaredUnaryRpcIsAProblemAtItsLine) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const std::vector<LintProblem> p =
      ProblemsOf(report, "lint.cases.v1.Cases.Undeclared");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].place,
            absl::StrCat(kCasesProto, ":", LineOf("rpc Undeclared("), ":3"));
  EXPECT_TRUE(absl::StartsWith(p[0].message,
                               "lint.cases.v1.Cases.Undeclared: no idempotency "
                               "declaration from any source"))
      << p[0].message;
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Undeclared").explanation,
      "idempotency:       UNKNOWN  [rpcguard default]"));
}

TEST(LintTest, MalformedMethodOptionHasTheRunTimeMessageAtTheOption) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const std::vector<LintProblem> p =
      ProblemsOf(report, "lint.cases.v1.Cases.Broken");
  ASSERT_EQ(p.size(), 1u);  // malformed, not also undeclared
  EXPECT_EQ(p[0].message,
            "lint.cases.v1.Cases.Broken: (rpcguard.v1.method)"
            ".retry.max_attempts: must be at least 2");
  EXPECT_EQ(
      p[0].place,
      absl::StrCat(kCasesProto, ":",
                   LineOf("option (rpcguard.v1.method)", "rpc Broken("), ":5"));
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Broken").explanation,
      "error: lint.cases.v1.Cases.Broken: (rpcguard.v1.method).retry."
      "max_attempts: must be at least 2 (calls to this method fail"));
}

TEST(LintTest, MalformedServiceOptionIsOneProblemAtTheService) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const std::vector<LintProblem> p =
      ProblemsOf(report, "lint.cases.v1.BrokenService");
  ASSERT_EQ(p.size(), 1u);  // not once per method, nor "undeclared"
  EXPECT_EQ(p[0].message,
            "lint.cases.v1.BrokenService: (rpcguard.v1.service)"
            ".retry.backoff_multiplier: must be greater than 0");
  EXPECT_EQ(p[0].place, absl::StrCat(kCasesProto, ":",
                                     LineOf("option (rpcguard.v1.service)",
                                            "service BrokenService"),
                                     ":3"));
  // Its methods' calls fail with it, and say so.
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.BrokenService/Second").explanation,
      "error: lint.cases.v1.BrokenService: (rpcguard.v1.service)"));
}

TEST(LintTest, StreamingRpcsAreListedAsSuchAndRetriedWhenDeclared) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const struct {
    const char* path;
    const char* verdict;
  } cases[] = {
      {"/lint.cases.v1.Cases/Watch",
       "  => server streaming: retried until it commits"},
      {"/lint.cases.v1.Cases/Upload",
       "  => client streaming: retried until it commits"},
      {"/lint.cases.v1.Cases/Chat", "  => bidirectional streaming: sent once"},
  };
  for (const auto& c : cases) {
    const LintedMethod m = Method(report, c.path);
    EXPECT_TRUE(m.streaming) << c.path;
    EXPECT_TRUE(
        absl::StartsWith(m.explanation, absl::StrCat(c.path, "\n", c.verdict)))
        << m.explanation;
  }
  int streaming = 0;
  for (const LintedMethod& m : report.methods) streaming += m.streaming;
  EXPECT_EQ(streaming, 3);
  // Undeclared, Broken, BrokenService, and the undeclared stream Chat.
  EXPECT_EQ(report.problems.size(), 4u);
  EXPECT_EQ(ProblemsOf(report, "lint.cases.v1.Cases.Chat").size(), 1u);
}

TEST(LintTest, AHedgingPolicyForAStreamingMethodIsAProblem) {
  const Config config = MustParse(R"({"methodConfig": [
    {"name": [{"service": "lint.cases.v1.Cases", "method": "Watch"}],
     "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.1s"}}]})");
  const LintReport report = MustLint({SetFile(kCasesSet)}, config);
  const std::vector<LintProblem> p =
      ProblemsOf(report, "lint.cases.v1.Cases.Watch");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(absl::StrContains(p[0].message, "does not hedge streams"));
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Watch").explanation,
      "server streaming: calls fail (FAILED_PRECONDITION)"));
}

TEST(LintTest, ImportedFilesAreReadAndLinted) {
  const LintReport report = MustLint({SetFile(kCasesSet)});
  const LintedMethod get = Method(report, "/lint.imported.v1.Catalog/Get");
  EXPECT_TRUE(absl::StartsWith(get.place, "tests/lint/imported.proto:"))
      << get.place;
  EXPECT_TRUE(absl::StrContains(get.explanation, "NO_SIDE_EFFECTS"));
  EXPECT_EQ(report.methods.size(), 13u);  // 1 imported, Cases 8, 2 + 2
  EXPECT_TRUE(report.files_without_source_info.empty());
}

TEST(LintTest, JsonConfigOverridesAndDeclares) {
  const Config config = MustParse(R"({"methodConfig": [
    {"name": [{"service": "lint.cases.v1.Cases", "method": "Read"}],
     "rpcguard": {"idempotency": "UNKNOWN"}},
    {"name": [{"service": "lint.cases.v1.Cases", "method": "Undeclared"}],
     "rpcguard": {"idempotency": "IDEMPOTENT"},
     "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.1s",
                     "maxBackoff": "1s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  const LintReport report = MustLint({SetFile(kCasesSet)}, config);
  const std::string read =
      Method(report, "/lint.cases.v1.Cases/Read").explanation;
  EXPECT_TRUE(absl::StrContains(
      read, "idempotency:       UNKNOWN  [config: method entry]"))
      << read;
  EXPECT_TRUE(absl::StrContains(read, "=> tried once"));
  EXPECT_TRUE(ProblemsOf(report, "lint.cases.v1.Cases.Undeclared").empty());
  EXPECT_TRUE(absl::StrContains(
      Method(report, "/lint.cases.v1.Cases/Undeclared").explanation,
      "=> retried, up to 2 attempts"));
}

TEST(LintTest, JsonDefaultEntryDeclaresButCannotHideAMalformedOption) {
  const Config config = MustParse(R"({"methodConfig": [
    {"name": [{}], "rpcguard": {"idempotency": "UNKNOWN"}},
    {"name": [{"service": "lint.cases.v1.Cases", "method": "Broken"}],
     "rpcguard": {"idempotency": "UNKNOWN"}}]})");
  const LintReport report = MustLint({SetFile(kCasesSet)}, config);
  EXPECT_TRUE(ProblemsOf(report, "lint.cases.v1.Cases.Undeclared").empty());
  EXPECT_EQ(ProblemsOf(report, "lint.cases.v1.Cases.Broken").size(), 1u);
  EXPECT_EQ(ProblemsOf(report, "lint.cases.v1.BrokenService").size(), 1u);
  EXPECT_EQ(report.problems.size(), 2u);
}

// The lint reads a pool built from a set; the interceptor the generated
// pool. Both must say the same, to the letter.
TEST(LintTest, AgreesWithTheGeneratedPool) {
  ASSERT_NE(::rpcguard::testing::v1::Declared::service_full_name(), nullptr);
  const LintReport report = MustLint({SetFile(kDeclaredSet)});
  // Declared (5), Plain (2), Broken (4), and the hedging services Hedged (4),
  // BrokenHedging (10) and BrokenHedgingService (1).
  ASSERT_EQ(report.methods.size(), 26u);
  for (const LintedMethod& m : report.methods) {
    const std::string path = m.explanation.substr(0, m.explanation.find('\n'));
    EXPECT_EQ(m.explanation, Config().Explain(path));
  }
  int malformed = 0;
  for (const LintProblem& p : report.problems) {
    if (!absl::StartsWith(p.message, "rpcguard.testing.v1.Broken.")) continue;
    ++malformed;
    const std::string method = p.message.substr(
        0, p.message.find(':'));  // "rpcguard.testing.v1.Broken.OneAttempt"
    const std::string path = absl::StrCat("/rpcguard.testing.v1.Broken/",
                                          method.substr(method.rfind('.') + 1));
    EXPECT_EQ(p.message, Config().Resolve(path).error.message());
  }
  EXPECT_EQ(malformed, 4);
}

// The interceptor's own Explain, by path, says the same of a streaming method
// of the generated pool.
TEST(LintTest, ExplainByPathSaysAGeneratedStreamingMethodIsAStream) {
  ASSERT_NE(::rpcguard::testing::v1::FaultService::service_full_name(),
            nullptr);
  EXPECT_TRUE(absl::StartsWith(
      Config().Explain("/rpcguard.testing.v1.FaultService/Watch"),
      "/rpcguard.testing.v1.FaultService/Watch\n"
      "  => server streaming: sent once\n"));
}

TEST(LintTest, WithoutSourceInfoPlacesAreFiles) {
  FileDescriptorSet set = Parsed(kCasesSet);
  for (FileDescriptorProto& f : *set.mutable_file()) f.clear_source_code_info();
  const LintReport report = MustLint({SetOf(set)});
  const std::vector<LintProblem> p =
      ProblemsOf(report, "lint.cases.v1.Cases.Undeclared");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].place, kCasesProto);
  EXPECT_EQ(report.files_without_source_info,
            (std::vector<std::string>{"tests/lint/imported.proto",
                                      "tests/lint/cases.proto"}));
}

TEST(LintTest, ImportsCompiledIntoTheToolNeedNotBeInTheSet) {
  FileDescriptorSet set = Parsed(kCasesSet);
  FileDescriptorSet own_files_only;
  for (const FileDescriptorProto& f : set.file()) {
    if (absl::StartsWith(f.name(), "tests/")) *own_files_only.add_file() = f;
  }
  ASSERT_EQ(own_files_only.file_size(), 2);
  const LintReport report = MustLint({SetOf(own_files_only)});
  EXPECT_EQ(report.methods.size(), 13u);
  EXPECT_EQ(report.problems.size(), 4u);
}

TEST(LintTest, SetsMayShareIdenticalFiles) {
  // Both hold options.proto and descriptor.proto; the second copy of the
  // cases set adds nothing.
  const LintReport report =
      MustLint({SetFile(kCasesSet), SetFile(kDeclaredSet), SetFile(kCasesSet)});
  EXPECT_EQ(report.methods.size(), 13u + 26u);
  // A copy without source info does not lose the lines of one with it.
  FileDescriptorSet bare = Parsed(kCasesSet);
  for (FileDescriptorProto& f : *bare.mutable_file())
    f.clear_source_code_info();
  const LintReport both = MustLint({SetOf(bare), SetFile(kCasesSet)});
  EXPECT_TRUE(both.files_without_source_info.empty());
  EXPECT_EQ(ProblemsOf(both, "lint.cases.v1.Cases.Undeclared")[0].place,
            absl::StrCat(kCasesProto, ":", LineOf("rpc Undeclared("), ":3"));
}

TEST(LintTest, BadInputIsAClearErrorNeverACrash) {
  const FileDescriptorSet good = Parsed(kCasesSet);
  const std::string bytes = good.SerializeAsString();

  FileDescriptorSet missing_import;  // cases.proto without imported.proto
  for (const FileDescriptorProto& f : good.file()) {
    if (f.name() != "tests/lint/imported.proto") {
      *missing_import.add_file() = f;
    }
  }
  FileDescriptorSet other_version = good;  // cases.proto, changed
  FileDescriptorSet unknown_type = good;   // an RPC of a type nobody defines
  for (FileDescriptorProto& f : *other_version.mutable_file()) {
    if (f.name() == kCasesProto) f.mutable_service(0)->set_name("Renamed");
  }
  for (FileDescriptorProto& f : *unknown_type.mutable_file()) {
    if (f.name() == "tests/lint/imported.proto") {
      f.mutable_service(0)->mutable_method(0)->set_input_type(".no.Such");
    }
  }
  FileDescriptorSet cycle;  // a.proto imports b.proto imports a.proto
  FileDescriptorProto* a = cycle.add_file();
  a->set_name("a.proto");
  a->add_dependency("b.proto");
  FileDescriptorProto* b = cycle.add_file();
  b->set_name("b.proto");
  b->add_dependency("a.proto");
  FileDescriptorSet nameless;
  nameless.add_file()->set_package("p");

  const struct {
    const char* what;
    std::vector<DescriptorSetFile> sets;
    const char* error;
  } cases[] = {
      {"no sets", {}, "no descriptor sets to read"},
      {"empty", {{"x.pb", ""}}, "x.pb: empty, not a FileDescriptorSet"},
      {"a .proto",
       {{"x.pb", ReadFile(kCasesProto)}},
       "x.pb: not a FileDescriptorSet, or a truncated one"},
      {"truncated",
       {{"x.pb", bytes.substr(0, bytes.size() / 2)}},
       "x.pb: not a FileDescriptorSet, or a truncated one"},
      {"no files", {{"x.pb", "\x10\x01"}}, "x.pb: holds no files"},
      {"nameless file", {SetOf(nameless)}, "x.pb: a file without a name"},
      {"missing import",
       {SetOf(missing_import)},
       "x.pb: tests/lint/cases.proto imports tests/lint/imported.proto, which "
       "is in none of the descriptor sets"},
      {"two versions",
       {SetFile(kCasesSet), SetOf(other_version)},
       "x.pb: tests/lint/cases.proto differs from the tests/lint/cases.proto "
       "in tests/lint_cases.pb"},
      {"unknown type",
       {SetOf(unknown_type)},
       "x.pb: tests/lint/imported.proto"},
      {"import cycle", {SetOf(cycle)}, "x.pb: a.proto"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<LintReport> report = Lint(c.sets, Config());
    ASSERT_FALSE(report.ok()) << c.what;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_TRUE(absl::StartsWith(report.status().message(), c.error))
        << c.what << ": " << report.status().message();
  }
  // The pool's own words say what is wrong.
  const absl::StatusOr<LintReport> unknown = Lint({SetOf(unknown_type)}, {});
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "no.Such"))
      << unknown.status();
  const absl::StatusOr<LintReport> cyclic = Lint({SetOf(cycle)}, {});
  EXPECT_TRUE(absl::StrContains(cyclic.status().message(), "recursively"))
      << cyclic.status();
}

}  // namespace
}  // namespace rpcguard
