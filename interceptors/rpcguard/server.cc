// Copyright rpcguard authors.

#include "rpcguard/server.h"

#include <grpcpp/impl/server_builder_option.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc/server_interceptor.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/observability/instruments.h"

namespace rpcguard {
namespace {

// The builders that AddServerInterceptor has installed rpcguard on. The
// builder's interceptor list has no getter, so each such builder owns an
// option (below) that takes it out of this set when the builder is
// destroyed: an address reused by a later builder is never taken for it.
// absl::Mutex: taken once per builder, never on a call's path.
struct InstalledBuilders {
  absl::Mutex mu;
  absl::flat_hash_set<const grpc::ServerBuilder*> builders ABSL_GUARDED_BY(mu);
};

InstalledBuilders& Installed() {
  static InstalledBuilders* const installed = new InstalledBuilders();
  return *installed;
}

// Does nothing to the server; lives as long as its builder.
class InstalledMark final : public grpc::ServerBuilderOption {
 public:
  explicit InstalledMark(const grpc::ServerBuilder* builder)
      : builder_(builder) {}
  ~InstalledMark() override {
    InstalledBuilders& installed = Installed();
    absl::MutexLock lock(&installed.mu);
    installed.builders.erase(builder_);
  }
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  const grpc::ServerBuilder* const builder_;
};

}  // namespace

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
  {
    InstalledBuilders& installed = Installed();
    absl::MutexLock lock(&installed.mu);
    // A second list would replace the first (SetInterceptorCreators), the
    // first call's interceptors and rpcguard's own with it.
    if (!installed.builders.insert(builder).second) {
      return absl::FailedPreconditionError(
          "AddServerInterceptor: called twice on one grpc::ServerBuilder; "
          "the first call's interceptors are kept (pass all of the "
          "server's interceptors in one call)");
    }
  }
  builder->SetOption(std::make_unique<InstalledMark>(builder));
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
  // rpcguard's interceptor takes one link out, and none from a call it
  // passes through: whatever it leaves would reach the service below.
  if (auto* md = internal::MetadataToSend(child)) {
    if (md->count(kPassThroughHeader) != 0) return;
    md->erase(internal::kServerCallLinkHeader);
  }
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
  // Clamped rather than refused: a shedding handler has no better answer
  // to give, and an error status would tell callers less. Clamped before
  // rounding, which an infinite duration would not survive.
  const absl::Duration delay =
      absl::Ceil(std::clamp(*retry_after, absl::ZeroDuration(), kMaxRetryAfter),
                 absl::Milliseconds(1));
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

std::vector<MetricFamilyData> ToMetricFamilies(const ServerSignals& signals) {
  std::vector<MetricFamilyData> out;
  const auto family = [&out](Instrument id) -> MetricFamilyData& {
    return AppendFamily(id, &out);
  };
  MetricFamilyData& stops = family(Instrument::kServerStopsSent);
  for (int i = 1; i < kNumGiveUpReasons; ++i) {
    if (signals.stops_sent[i] == 0) continue;
    stops.samples.push_back({{{"reason", std::string(GiveUpReasonName(
                                             static_cast<GiveUpReason>(i)))}},
                             static_cast<double>(signals.stops_sent[i]),
                             {}});
  }
  family(Instrument::kServerHedgesSuppressed)
      .samples.push_back(
          {{}, static_cast<double>(signals.hedges_suppressed), {}});
  return out;
}

std::string ToPrometheusText(const ServerSignals& signals) {
  return ToPrometheusText(ToMetricFamilies(signals));
}

}  // namespace rpcguard
