// Copyright rpcguard authors.
//
// Reading a JSON config into its entries, before any resolution: Config
// keeps them and resolves a method's policy from them. Private to :config.

#ifndef RPCGUARD_CONFIG_READER_CONFIG_READER_H_
#define RPCGUARD_CONFIG_READER_CONFIG_READER_H_

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/config.h"

namespace rpcguard {

// What a JSON config says.
struct ConfigEntries {
  // Key: "pkg.Svc/Method".
  absl::flat_hash_map<std::string, Config::Entry> methods;
  // Key: "pkg.Svc".
  absl::flat_hash_map<std::string, Config::Entry> services;
  // The entry named [{}], if any.
  std::optional<Config::Entry> default_entry;
  DestinationConfig destination;
};

// Reads `json` as config.h describes. Errors: InvalidArgument, either
// "invalid JSON: line L, column C: <reason>" or every error of the document
// as its JSON path and reason, joined by "; " in document order
// ("methodConfig[0].retryPolicy.maxAttempts: must be at least 2").
absl::StatusOr<ConfigEntries> ReadConfigJson(absl::string_view json);

}  // namespace rpcguard

#endif  // RPCGUARD_CONFIG_READER_CONFIG_READER_H_
