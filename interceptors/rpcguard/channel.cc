// Copyright rpcguard authors.

#include "rpcguard/channel.h"

#include <grpc/support/log.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/version_info.h>

#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/internal/grpc/retry_interceptor.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/service_config/outlier_detection.h"

namespace rpcguard {
namespace {

// Built without gRPC 1.51's fast paths, attempts lose what gRPC's public API
// hides, and no call tells rpcguard whether it set any of it: said once per
// process rather than dropped silently (README, "gRPC versions").
void SayWhatAttemptsLose() {
  if (internal::ContextAccessKnowsThisGrpc()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    // Before grpc_init, gpr_log drops everything until this has read
    // GRPC_VERBOSITY (which it honours).
    gpr_log_verbosity_init();
    gpr_log(GPR_ERROR,
            "rpcguard: built for gRPC " GRPC_CPP_VERSION_STRING
            " without gRPC 1.51's fast paths: "
            "calls rpcguard may retry do not carry the caller's "
            "set_authority or parent call (ClientContext::FromServerContext), "
            "and their auth_context() and debug_error_string() are empty; "
            "see README, \"gRPC versions\"");
  });
}

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeInterceptorFactory(Options options) {
  SayWhatAttemptsLose();
  auto state = std::make_shared<internal::FactoryState>(std::move(options));
  state->Init(state);
  return internal::NewRetryInterceptorFactory(std::move(state));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    Options options, grpc::ChannelArguments args) {
  // Channels to one target share their breaker and budget.
  if (options.destination.empty()) options.destination = target;
  const grpc_channel_args c_args = args.c_channel_args();
  for (size_t i = 0; i < c_args.num_args; ++i) {
    const grpc_arg& arg = c_args.args[i];
    if (!options.allow_grpc_retry_policy && arg.type == GRPC_ARG_STRING &&
        absl::string_view(arg.key) == GRPC_ARG_SERVICE_CONFIG &&
        absl::string_view(arg.value.string).find("\"retryPolicy\"") !=
            absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "the channel's service config has a retryPolicy: gRPC's built-in "
          "retries would run inside every rpcguard attempt and multiply "
          "attempts, for unary and streaming methods alike (rpcguard retries "
          "a stream until it commits, as gRPC does); move the policy into "
          "rpcguard's Config instead, or set "
          "Options::allow_grpc_retry_policy");
    }
  }
  if (options.outlier_detection.enabled) {
    absl::Status valid =
        internal::ValidateOutlierDetection(options.outlier_detection);
    if (!valid.ok()) return valid;
    // Only the caller's own service config: one from the resolver (DNS TXT
    // records, xDS) replaces this one whole, as gRPC documents
    // GRPC_ARG_SERVICE_CONFIG, and is its author's to write.
    std::optional<std::string> wrapped = internal::WrapInOutlierDetection(
        internal::ServiceConfigOf(args), internal::LbPolicyNameOf(args),
        options.outlier_detection);
    if (wrapped.has_value()) {
      args = internal::WithServiceConfig(args, *wrapped);
    }
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(MakeInterceptorFactory(std::move(options)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(factories));
}

void MarkPassThrough(grpc::ClientContext* context) {
  // rpcguard proceeds a pass-through call untouched: a link put on it by
  // LinkToServerCall (server.h) would leave the process with it.
  if (auto* md = internal::MetadataToSend(context)) {
    md->erase(internal::kServerCallLinkHeader);
  }
  context->AddMetadata(kPassThroughHeader, "1");
}

}  // namespace rpcguard
