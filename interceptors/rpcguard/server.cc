// Copyright rpcguard authors.

#include "rpcguard/server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc/server_interceptor.h"

namespace rpcguard {

std::vector<GiveUpReason> DefaultPropagatedReasons() {
  return {GiveUpReason::kMaxAttempts,  GiveUpReason::kBudgetExhausted,
          GiveUpReason::kBreakerOpen,  GiveUpReason::kThrottled,
          GiveUpReason::kPushbackStop, GiveUpReason::kDownstreamGaveUp};
}

absl::Status ServerOptions::Validate() const {
  for (size_t i = 0; i < propagate.size(); ++i) {
    const int r = static_cast<int>(propagate[i]);
    if (r <= 0 || r >= kNumGiveUpReasons) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ServerOptions.propagate[", i, "]: ",
          r == 0 ? "none is not a give-up reason" : "not a GiveUpReason"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MakeServerInterceptorFactory(ServerOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  internal::ServerInterceptorSettings settings;
  settings.edge = options.edge;
  for (GiveUpReason r : options.propagate) {
    settings.propagate |= internal::ReasonBit(r);
  }
  return internal::NewServerInterceptorFactory(settings);
}

absl::Status AddServerInterceptor(
    grpc::ServerBuilder* builder, ServerOptions options,
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        creators) {
  auto factory = MakeServerInterceptorFactory(std::move(options));
  if (!factory.ok()) return factory.status();
  creators.push_back(*std::move(factory));
  builder->experimental().SetInterceptorCreators(std::move(creators));
  return absl::OkStatus();
}

void LinkToServerCall(grpc::ClientContext* child,
                      grpc::ServerContextBase* parent) {
  if (child == nullptr || parent == nullptr) return;
  const internal::ServerCallLink link =
      internal::ServerCalls::Get().Find(parent->c_call());
  if (!link.linked()) return;
  child->AddMetadata(internal::kServerCallLinkHeader,
                     internal::EncodeLink(link));
}

grpc::Status Overloaded(grpc::ServerContextBase* context,
                        absl::string_view message,
                        std::optional<absl::Duration> retry_after) {
  const std::string text(message);
  if (!retry_after.has_value()) {
    if (context != nullptr)
      context->AddTrailingMetadata(kPushbackTrailer, "-1");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, text);
  }
  const absl::Duration delay = std::max(*retry_after, absl::ZeroDuration());
  if (context != nullptr) {
    context->AddTrailingMetadata(
        kPushbackTrailer, absl::StrCat(absl::ToInt64Milliseconds(delay)));
  }
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED, text,
      RetryInfoStatusDetails(
          static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED), text, delay));
}

ServerSignals ServerSignalsSnapshot() {
  ServerSignals s;
  internal::ReadServerCounters(s.stops_sent, &s.hedges_suppressed);
  return s;
}

}  // namespace rpcguard
