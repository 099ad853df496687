// Copyright rpcguard authors.
//
// rpcguard_lint's logic, apart from its command line: reads FileDescriptorSets
// (`protoc --include_imports --include_source_info --descriptor_set_out=F`)
// into a descriptor pool and says, for every RPC in them, what rpcguard makes
// of it (Config::Explain) and which declarations are missing or malformed.
// Options are read by the library's own code (Config::Resolve and
// ReadProtoPolicies on the pool's descriptors), so the lint accepts and
// rejects exactly what the interceptor does, with the same messages.

#ifndef RPCGUARD_TOOLS_LINT_H_
#define RPCGUARD_TOOLS_LINT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpcguard/config.h"

namespace rpcguard {

// One FileDescriptorSet: a name for messages (its path) and its bytes.
struct DescriptorSetFile {
  std::string name;
  std::string bytes;
};

// Where something is declared: "file.proto:12:3" (line and column from 1),
// or "file.proto" when the set carries no source info.
using SourcePlace = std::string;

// A declaration `rpcguard_lint --strict` fails on.
struct LintProblem {
  SourcePlace place;
  // For a malformed declaration, the message calls to the method fail with
  // (after "rpcguard: bad retry declaration: ").
  std::string message;
};

// One RPC, as rpcguard sees it.
struct LintedMethod {
  SourcePlace place;
  bool streaming = false;
  // Config::Explain's text: the first line is the method's path.
  std::string explanation;
};

struct LintReport {
  // Every RPC of every file in the sets, imported files included, in the
  // order of the files in the sets, then of services and methods.
  std::vector<LintedMethod> methods;
  // Unary RPCs no source declares idempotent or not (a JSON default entry
  // counts as a declaration, and an explicit UNKNOWN), and malformed .proto
  // options, placed at the option (a bad service option once, not per
  // method), whatever the config overrides.
  std::vector<LintProblem> problems;
  // Files with RPCs whose set has no source info: their places have no line.
  std::vector<std::string> files_without_source_info;
};

// Reads `sets` and lints every RPC in them, with `config` on top of the
// .proto options. A file may be in several sets if every copy is the same
// (source info aside). A file the sets lack but this program has compiled
// in (protobuf's descriptor.proto and well-known types, rpcguard's
// options.proto) is taken from the program, so sets made without
// --include_imports work when they import only those.
// Errors: InvalidArgument naming the set, e.g. "x.pb: not a
// FileDescriptorSet", "x.pb: a.proto: Import "b.proto" was not found...".
absl::StatusOr<LintReport> Lint(const std::vector<DescriptorSetFile>& sets,
                                const Config& config);

}  // namespace rpcguard

#endif  // RPCGUARD_TOOLS_LINT_H_
