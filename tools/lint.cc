// Copyright rpcguard authors.

#include "tools/lint.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/rpcguard/v1/options.pb.h"
#include "rpcguard/proto_options.h"

namespace rpcguard {
namespace {

// The method's hedgingPolicy was written for it (its own JSON entry or
// method option), which is what makes a stream's calls fail (PlanCall).
bool HedgedForItself(const ResolvedPolicy& r) {
  const PolicySource source = r.sources[kFieldIndexHedging];
  return r.policy.hedging.has_value() &&
         (source == PolicySource::kConfigMethod ||
          source == PolicySource::kProtoMethod);
}

namespace pb = ::google::protobuf;

// A file of the sets, and the set it was first read from.
struct SetFile {
  pb::FileDescriptorProto proto;
  std::string set_name;
};

// The sets' files, by name, for the pool to build from in dependency order.
// A file they lack falls back to this program's compiled-in copy.
class SetDatabase : public pb::DescriptorDatabase {
 public:
  explicit SetDatabase(const absl::flat_hash_map<std::string, SetFile>* files)
      : files_(files) {}

  bool FindFileByName(const std::string& name,
                      pb::FileDescriptorProto* output) override {
    auto it = files_->find(name);
    if (it != files_->end()) {
      *output = it->second.proto;
      return true;
    }
    const pb::FileDescriptor* own =
        pb::DescriptorPool::generated_pool()->FindFileByName(name);
    if (own == nullptr) return false;
    own->CopyTo(output);
    return true;
  }
  // Only files are looked up by name: every file is built explicitly.
  bool FindFileContainingSymbol(const std::string&,
                                pb::FileDescriptorProto*) override {
    return false;
  }
  bool FindFileContainingExtension(const std::string&, int,
                                   pb::FileDescriptorProto*) override {
    return false;
  }

 private:
  const absl::flat_hash_map<std::string, SetFile>* files_;
};

// Keeps the pool's errors for the message of the one that failed.
class Errors : public pb::DescriptorPool::ErrorCollector {
 public:
  void AddError(const std::string& filename, const std::string& element_name,
                const pb::Message*, ErrorLocation,
                const std::string& message) override {
    // A few say what is wrong; hundreds (from garbage) would bury it.
    if (errors_.size() >= 5) return;
    errors_.push_back(
        element_name.empty() || element_name == filename
            ? absl::StrCat(filename, ": ", message)
            : absl::StrCat(filename, ": ", element_name, ": ", message));
  }
  std::string Text() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

// `proto` without its source info, serialized: two copies of a file are the
// same file when these are equal.
std::string WithoutSourceInfo(const pb::FileDescriptorProto& proto) {
  pb::FileDescriptorProto copy = proto;
  copy.clear_source_code_info();
  return copy.SerializeAsString();
}

// The place of the declaration at `path` (SourceCodeInfo's encoding) in
// `file`; with `option` (an options field and an extension number), of that
// option in it when the set records it.
SourcePlace PlaceOf(const pb::FileDescriptor& file, std::vector<int> path,
                    std::vector<int> option = {}) {
  pb::SourceLocation where;
  std::vector<int> option_path = path;
  option_path.insert(option_path.end(), option.begin(), option.end());
  if (!file.GetSourceLocation(option_path, &where) &&
      !file.GetSourceLocation(path, &where)) {
    return file.name();
  }
  return absl::StrCat(file.name(), ":", where.start_line + 1, ":",
                      where.start_column + 1);
}

std::vector<int> PathOf(const pb::ServiceDescriptor& service) {
  return {pb::FileDescriptorProto::kServiceFieldNumber, service.index()};
}

std::vector<int> PathOf(const pb::MethodDescriptor& method) {
  std::vector<int> path = PathOf(*method.service());
  path.push_back(pb::ServiceDescriptorProto::kMethodFieldNumber);
  path.push_back(method.index());
  return path;
}

// ResolvedPolicy::sources' index of the idempotency (kFieldIdempotency's bit).
constexpr int kIdempotencyIndex = 0;
static_assert(kFieldIdempotency == 1 << kIdempotencyIndex);

constexpr char kHowToMake[] =
    "make one with protoc --include_imports --include_source_info "
    "--descriptor_set_out=FILE";

// Reads every set into `files` (in `order`), one copy per file name.
absl::Status ReadSets(const std::vector<DescriptorSetFile>& sets,
                      absl::flat_hash_map<std::string, SetFile>* files,
                      std::vector<std::string>* order) {
  for (const DescriptorSetFile& set : sets) {
    pb::FileDescriptorSet parsed;
    if (!parsed.ParseFromString(set.bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          set.name, ": not a FileDescriptorSet, or a truncated one (",
          kHowToMake, ")"));
    }
    if (parsed.file_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          set.name, set.bytes.empty() ? ": empty" : ": holds no files",
          ", not a FileDescriptorSet (", kHowToMake, ")"));
    }
    for (pb::FileDescriptorProto& proto : *parsed.mutable_file()) {
      if (proto.name().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            set.name, ": a file without a name: not a FileDescriptorSet (",
            kHowToMake, ")"));
      }
      auto [it, added] = files->try_emplace(proto.name());
      if (added) {
        order->push_back(proto.name());
        it->second = SetFile{std::move(proto), set.name};
        continue;
      }
      SetFile& seen = it->second;
      if (WithoutSourceInfo(seen.proto) != WithoutSourceInfo(proto)) {
        return absl::InvalidArgumentError(absl::StrCat(
            set.name, ": ", proto.name(), " differs from the ", proto.name(),
            " in ", seen.set_name, " (two versions of one file)"));
      }
      // The copy that can tell lines is the one to keep.
      if (!seen.proto.has_source_code_info() && proto.has_source_code_info()) {
        seen.proto = std::move(proto);
      }
    }
  }
  return absl::OkStatus();
}

void LintService(const pb::ServiceDescriptor& service, const Config& config,
                 LintReport* report) {
  // A bad service option is reported once, where it is written; its methods
  // then have no .proto declaration rpcguard would use.
  const absl::Status service_error =
      ReadProtoPolicies(service, nullptr).status();
  if (!service_error.ok()) {
    report->problems.push_back(
        {PlaceOf(*service.file(), PathOf(service),
                 {pb::ServiceDescriptorProto::kOptionsFieldNumber,
                  ::rpcguard::v1::kServiceFieldNumber}),
         std::string(service_error.message())});
  }
  for (int i = 0; i < service.method_count(); ++i) {
    const pb::MethodDescriptor& method = *service.method(i);
    LintedMethod linted;
    linted.place = PlaceOf(*service.file(), PathOf(method));
    linted.streaming = method.client_streaming() || method.server_streaming();
    linted.explanation = config.Explain(method);
    if (service_error.ok()) {
      // Checked apart from `config`: a declaration is malformed even where
      // the JSON happens to override every field of it.
      const absl::Status error = ReadProtoPolicies(service, &method).status();
      if (!error.ok()) {
        // Only rpcguard's own option can be malformed.
        report->problems.push_back(
            {PlaceOf(*service.file(), PathOf(method),
                     {pb::MethodDescriptorProto::kOptionsFieldNumber,
                      ::rpcguard::v1::kMethodFieldNumber}),
             std::string(error.message())});
      } else if (linted.streaming && HedgedForItself(config.Resolve(method))) {
        report->problems.push_back(
            {linted.place,
             absl::StrCat(method.full_name(),
                          ": a hedgingPolicy is written for this streaming "
                          "method, and rpcguard does not hedge streams: its "
                          "calls fail with FAILED_PRECONDITION; give it a "
                          "retryPolicy instead")});
      } else if (config.Resolve(method).sources[kIdempotencyIndex] ==
                 PolicySource::kDefault) {
        report->problems.push_back(
            {linted.place,
             absl::StrCat(method.full_name(),
                          ": no idempotency declaration from any source, so "
                          "rpcguard tries it once; declare it "
                          "(idempotency_level, (rpcguard.v1.method), "
                          "(rpcguard.v1.service) or a JSON config entry), "
                          "as UNKNOWN if it must not be repeated")});
      }
    }
    report->methods.push_back(std::move(linted));
  }
}

}  // namespace

absl::StatusOr<LintReport> Lint(const std::vector<DescriptorSetFile>& sets,
                                const Config& config) {
  if (sets.empty()) {
    return absl::InvalidArgumentError("no descriptor sets to read");
  }
  absl::flat_hash_map<std::string, SetFile> files;
  std::vector<std::string> order;
  absl::Status read = ReadSets(sets, &files, &order);
  if (!read.ok()) return read;

  // A missing import is the likeliest mistake: said plainly, before the
  // pool's own "was not found or had errors".
  for (const std::string& name : order) {
    const SetFile& file = files[name];
    for (const std::string& import : file.proto.dependency()) {
      if (!files.contains(import) &&
          pb::DescriptorPool::generated_pool()->FindFileByName(import) ==
              nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.set_name, ": ", name, " imports ", import,
            ", which is in none of the descriptor sets (make them with "
            "protoc --include_imports)"));
      }
    }
  }

  SetDatabase database(&files);
  Errors errors;
  pb::DescriptorPool pool(&database, &errors);
  std::vector<const pb::FileDescriptor*> built;
  for (const std::string& name : order) {
    // Builds the file's imports first, from the sets or this program.
    const pb::FileDescriptor* file = pool.FindFileByName(name);
    if (file == nullptr) {
      const std::string text = errors.Text();
      return absl::InvalidArgumentError(
          absl::StrCat(files[name].set_name, ": ",
                       text.empty() ? name + ": cannot be built" : text));
    }
    built.push_back(file);
  }

  LintReport report;
  for (const pb::FileDescriptor* file : built) {
    if (file->service_count() > 0 &&
        !files[file->name()].proto.has_source_code_info()) {
      report.files_without_source_info.push_back(file->name());
    }
    for (int i = 0; i < file->service_count(); ++i) {
      LintService(*file->service(i), config, &report);
    }
  }
  return report;
}

}  // namespace rpcguard
