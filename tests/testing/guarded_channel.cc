// Copyright rpcguard authors.

#include "tests/testing/guarded_channel.h"

#include <utility>

namespace rpcguard {
namespace testing {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateGuardedChannel(
    const std::string& target, absl::string_view config_json,
    const CustomizeOptions& customize, grpc::ChannelArguments args) {
  absl::StatusOr<Config> config = Config::FromJson(config_json);
  if (!config.ok()) return config.status();
  Options options;
  options.config = *std::move(config);
  if (customize) customize(options);
  return CreateChannel(target, grpc::InsecureChannelCredentials(),
                       std::move(options), std::move(args));
}

}  // namespace testing
}  // namespace rpcguard
