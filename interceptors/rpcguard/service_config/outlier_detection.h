// Copyright rpcguard authors.
//
// Not API: how CreateChannel puts the caller's balancing policy under gRPC's
// outlier detection (OutlierDetectionOptions in channel.h). Public in the
// build only so that tests can assert the service config it writes.
//
// gRPC takes the first policy of a service config's "loadBalancingConfig"
// list that it knows. The list written here is the caller's own list with
// outlier detection in front of it, holding that same list as its child:
//
//   {"loadBalancingConfig": [
//     {"outlier_detection_experimental": {
//        "interval": "1s", ..., "childPolicy": [{"round_robin": {}}]}},
//     {"round_robin": {}}]}
//
// so that a gRPC without outlier detection (an older one, or one that
// registers it only with GRPC_EXPERIMENTAL_ENABLE_OUTLIER_DETECTION=true)
// takes the caller's policy as if nothing had been added, rather than
// failing the channel on an unknown policy.
//
// Thread-safety: plain functions; safe from any thread.

#ifndef RPCGUARD_SERVICE_CONFIG_OUTLIER_DETECTION_H_
#define RPCGUARD_SERVICE_CONFIG_OUTLIER_DETECTION_H_

#include <grpcpp/support/channel_arguments.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rpcguard/channel.h"

namespace rpcguard {
namespace internal {

// The balancing policy gRPC registers outlier detection under.
inline constexpr char kOutlierDetectionPolicy[] =
    "outlier_detection_experimental";

// OK, or InvalidArgument naming the first bad field, e.g.
// "Options::outlier_detection.interval: must be positive".
absl::Status ValidateOutlierDetection(const OutlierDetectionOptions& options);

// The service config to give a channel whose caller set `service_config`
// (GRPC_ARG_SERVICE_CONFIG; nullopt: none) and `lb_policy_name`
// (GRPC_ARG_LB_POLICY_NAME; nullopt: none), with the chosen policy under
// outlier detection configured by `options` (which must be valid). nullopt
// when the channel is to be left as it is: no policy chosen (gRPC's
// pick_first), pick_first or a policy that does not spread calls over the
// resolver's addresses chosen, outlier detection already there, or a
// service config that is not a JSON object (gRPC reports that one itself).
// Policies are chosen as gRPC chooses them: "loadBalancingConfig", else
// "loadBalancingPolicy" (any case), else the policy name.
std::optional<std::string> WrapInOutlierDetection(
    std::optional<absl::string_view> service_config,
    std::optional<absl::string_view> lb_policy_name,
    const OutlierDetectionOptions& options);

// The service config and balancing policy name `args` carry (the last of
// each, as gRPC reads them); nullopt where absent.
std::optional<std::string> ServiceConfigOf(const grpc::ChannelArguments& args);
std::optional<std::string> LbPolicyNameOf(const grpc::ChannelArguments& args);

// `args` with `service_config` as their only GRPC_ARG_SERVICE_CONFIG, every
// other argument kept in order (pointers copied through their vtables, the
// user agent with its prefix).
grpc::ChannelArguments WithServiceConfig(const grpc::ChannelArguments& args,
                                         const std::string& service_config);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_SERVICE_CONFIG_OUTLIER_DETECTION_H_
