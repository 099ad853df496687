// Copyright rpcguard authors.
//
// The guarded channel of the end-to-end tests: a channel through rpcguard to
// a test server, built from a JSON config and the test's own Options fields.
// Each e2e file used to parse the config, fill Options and call
// CreateChannel by hand; this is that preamble once, so that a test says only
// what differs (its registry, sink, stats, hooks, channel arguments).
//
// Thread-safety: a plain function; safe from any thread.

#ifndef RPCGUARD_TESTS_TESTING_GUARDED_CHANNEL_H_
#define RPCGUARD_TESTS_TESTING_GUARDED_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace testing {

// Sets the test's own Options fields; it sees `config` already parsed, so it
// may also replace or amend it.
using CustomizeOptions = std::function<void(Options&)>;

// A channel to `target` (insecure credentials) through rpcguard with the
// config `config_json`, Options otherwise at their defaults (the default
// breaker registry included: a test that wants breakers of its own sets
// breaker_registry in `customize`), then `customize` applied.
// Errors: the config's error when `config_json` does not parse, else
// CreateChannel's.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateGuardedChannel(
    const std::string& target, absl::string_view config_json,
    const CustomizeOptions& customize = nullptr,
    grpc::ChannelArguments args = {});

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_GUARDED_CHANNEL_H_
