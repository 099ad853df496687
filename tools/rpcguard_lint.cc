// Copyright rpcguard authors.
//
// rpcguard_lint: what rpcguard makes of the RPCs in FileDescriptorSets.
//
//   protoc --include_imports --include_source_info
//       --descriptor_set_out=api.pb api.proto
//   rpcguard_lint [--strict] [--config FILE.json] api.pb...
//
// Prints, for every RPC, Config::Explain's text (the policy and the source
// that decided each setting), then the problems: unary RPCs without an
// idempotency declaration and malformed declarations, as "file:line:col:".
// Exit status: 0; 1 with --strict when there are problems; 2 for bad
// arguments or input (an unreadable or malformed set or config).

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "rpcguard/config.h"
#include "tools/lint.h"

namespace {

constexpr char kUsage[] =
    "usage: rpcguard_lint [--strict] [--config FILE.json] SET...\n"
    "  For every RPC in the FileDescriptorSets (protoc --include_imports\n"
    "  --include_source_info --descriptor_set_out=SET ...), prints the retry\n"
    "  or hedging policy rpcguard gives it and the source of each setting.\n"
    "  --config FILE  a JSON config (as Config::FromJson reads), applied on\n"
    "                 top of the .proto options\n"
    "  --strict       exit 1 when a unary RPC has no idempotency declaration\n"
    "                 or a declaration is malformed\n"
    "Exit status: 0; 1 with --strict when there are problems; 2 for bad\n"
    "arguments or input.\n";

bool ReadFile(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return false;
  *bytes = buf.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Protobuf logs each invalid UTF-8 string it parses: garbage given for a
  // set would bury the one message that says what is wrong.
  google::protobuf::SetLogHandler(nullptr);
  bool strict = false;
  std::string config_path;
  std::vector<std::string> set_paths;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--strict") {
      strict = true;
    } else if (arg == "--config") {
      if (i + 1 == argc) {
        std::cerr << "rpcguard_lint: --config needs a file\n" << kUsage;
        return 2;
      }
      config_path = argv[++i];
    } else if (arg.substr(0, 9) == "--config=") {
      config_path = std::string(arg.substr(9));
    } else if (arg.size() > 1 && arg[0] == '-') {
      std::cerr << "rpcguard_lint: unknown flag " << arg << "\n" << kUsage;
      return 2;
    } else {
      set_paths.emplace_back(arg);
    }
  }
  if (set_paths.empty()) {
    std::cerr << "rpcguard_lint: no descriptor set given\n" << kUsage;
    return 2;
  }

  rpcguard::Config config;
  if (!config_path.empty()) {
    std::string json;
    if (!ReadFile(config_path, &json)) {
      std::cerr << "rpcguard_lint: cannot read " << config_path << "\n";
      return 2;
    }
    absl::StatusOr<rpcguard::Config> parsed = rpcguard::Config::FromJson(json);
    if (!parsed.ok()) {
      std::cerr << "rpcguard_lint: " << config_path << ": "
                << parsed.status().message() << "\n";
      return 2;
    }
    config = *parsed;
  }
  std::vector<rpcguard::DescriptorSetFile> sets;
  for (const std::string& path : set_paths) {
    rpcguard::DescriptorSetFile set{path, ""};
    if (!ReadFile(path, &set.bytes)) {
      std::cerr << "rpcguard_lint: cannot read " << path << "\n";
      return 2;
    }
    sets.push_back(std::move(set));
  }

  absl::StatusOr<rpcguard::LintReport> report = rpcguard::Lint(sets, config);
  if (!report.ok()) {
    std::cerr << "rpcguard_lint: " << report.status().message() << "\n";
    return 2;
  }
  int streaming = 0;
  for (const rpcguard::LintedMethod& m : report->methods) {
    // Explain's first line is the method's path: the place goes beside it.
    const size_t eol = std::min(m.explanation.find('\n'), m.explanation.size());
    std::cout << m.explanation.substr(0, eol) << "  (" << m.place << ")"
              << m.explanation.substr(eol) << "\n";
    streaming += m.streaming ? 1 : 0;
  }
  std::cout << "rpcguard_lint: " << report->methods.size()
            << (report->methods.size() == 1 ? " RPC (" : " RPCs (") << streaming
            << " streaming), " << report->problems.size()
            << (report->problems.size() == 1 ? " problem" : " problems")
            << std::endl;
  for (const std::string& file : report->files_without_source_info) {
    std::cerr << "rpcguard_lint: note: " << file
              << " has no source info, so no line numbers (make the set with "
                 "protoc --include_source_info)\n";
  }
  for (const rpcguard::LintProblem& p : report->problems) {
    std::cerr << p.place << (strict ? ": error: " : ": warning: ") << p.message
              << "\n";
  }
  return strict && !report->problems.empty() ? 1 : 0;
}
