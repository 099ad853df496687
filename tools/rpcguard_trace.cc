// Copyright rpcguard authors.
//
// rpcguard_trace: summarises rpcguard's retry traces in log files.
//
//   rpcguard_trace [--slowest N] [FILE...]     per-method summary
//   rpcguard_trace --call ID [FILE...]         one call's timeline
//   rpcguard_trace --correlation ID [FILE...]  only the calls that carry a
//                                              caller's correlation id
//
// Reads standard input when no FILE is given (or for "-"). Lines that are not
// rpcguard events are ignored; event lines it cannot read are counted and
// reported. Exit status: 0, or 1 when --call found nothing, or 2 for bad
// arguments or a file that cannot be read.

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "tools/trace_reader.h"

namespace {

constexpr char kUsage[] =
    "usage: rpcguard_trace [--call ID] [--correlation ID] [--slowest N]\n"
    "                      [FILE...]\n"
    "  Summarises rpcguard trace events (logfmt or JSON lines, mixed with\n"
    "  other log lines) per method; reads stdin when no FILE is given.\n"
    "  --call ID         print the timeline of one call (its call= value)\n"
    "  --correlation ID  read only the calls that carry this correlation\n"
    "                    id: a trace_id, a correlation value, or\n"
    "                    key:value (x-request-id:r-7)\n"
    "  --slowest N       list the N slowest calls (default 5)\n";

void ReadStream(std::istream& in, absl::string_view name,
                rpcguard::TraceReader* reader) {
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) reader->AddLine(line, name, ++number);
}

}  // namespace

int main(int argc, char** argv) {
  rpcguard::ReaderOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    // Accepts "--flag value" and "--flag=value".
    const auto value = [&](absl::string_view flag) -> const char* {
      if (arg == flag) return i + 1 < argc ? argv[++i] : nullptr;
      if (arg.size() > flag.size() + 1 && arg.substr(0, flag.size()) == flag &&
          arg[flag.size()] == '=') {
        return argv[i] + flag.size() + 1;
      }
      return "";
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (const char* v = value("--call"); v == nullptr || *v != '\0') {
      std::optional<uint64_t> id =
          v == nullptr ? std::nullopt : rpcguard::ParseCallId(v);
      if (!id) {
        std::cerr << "rpcguard_trace: --call needs a hex call id\n" << kUsage;
        return 2;
      }
      options.call_id = *id;
      continue;
    }
    if (const char* v = value("--correlation"); v == nullptr || *v != '\0') {
      if (v == nullptr) {
        std::cerr << "rpcguard_trace: --correlation needs an id\n" << kUsage;
        return 2;
      }
      options.correlation = std::string(v);
      continue;
    }
    if (const char* v = value("--slowest"); v == nullptr || *v != '\0') {
      if (v == nullptr || !absl::SimpleAtoi(v, &options.slowest) ||
          options.slowest < 0) {
        std::cerr << "rpcguard_trace: --slowest needs a number\n" << kUsage;
        return 2;
      }
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::cerr << "rpcguard_trace: unknown flag " << arg << "\n" << kUsage;
      return 2;
    }
    files.emplace_back(arg);
  }
  if (files.empty()) files.push_back("-");

  rpcguard::TraceReader reader(options);
  bool read_error = false;
  for (const std::string& file : files) {
    if (file == "-") {
      ReadStream(std::cin, "<stdin>", &reader);
      continue;
    }
    std::ifstream in(file, std::ios::binary);
    if (!in.is_open()) {
      std::cerr << "rpcguard_trace: cannot open " << file << "\n";
      read_error = true;
      continue;
    }
    ReadStream(in, file, &reader);
  }

  if (options.call_id) {
    std::cout << reader.Timeline();
  } else {
    std::cout << reader.Summary();
  }
  if (read_error) return 2;
  if (options.call_id && !reader.found_call()) return 1;
  return 0;
}
