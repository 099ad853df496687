// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/server_interceptor.h"

#include <grpcpp/server_context.h>

#include <string>

#include "absl/strings/numbers.h"
#include "rpcguard/channel.h"

namespace rpcguard {
namespace internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;

absl::string_view View(const grpc::string_ref& s) {
  return absl::string_view(s.data(), s.size());
}

class ServerInterceptor final : public grpc::experimental::Interceptor {
 public:
  ServerInterceptor(ServerRpcInfo* info,
                    const ServerInterceptorSettings& settings)
      : info_(info), settings_(settings) {}

  ~ServerInterceptor() override {
    // A call that ended without sending a status (cancelled).
    if (call_ != nullptr) ServerCalls::Get().End(call_, serial_);
  }

  void Intercept(InterceptorBatchMethods* batch) override {
    if (!begun_ && batch->QueryInterceptionHookPoint(
                       InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      Begin(*batch->GetRecvInitialMetadata());
    }
    if (call_ != nullptr && batch->QueryInterceptionHookPoint(
                                InterceptionHookPoints::PRE_SEND_STATUS)) {
      OnSendStatus(batch);
    }
    batch->Proceed();
  }

 private:
  void Begin(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
    begun_ = true;
    grpc_call* call = info_->server_context()->c_call();
    if (call == nullptr) return;
    absl::string_view attempt, previous;
    if (!md.empty()) {
      auto a = md.find(kAttemptHeader);
      if (a != md.end()) attempt = View(a->second);
      auto p = md.find("grpc-previous-rpc-attempts");
      if (p != md.end()) previous = View(p->second);
    }
    serial_ =
        ServerCalls::Get().Begin(call, IsRepeatedAttempt(attempt, previous));
    call_ = call;
  }

  void OnSendStatus(InterceptorBatchMethods* batch) {
    grpc_call* call = call_;
    call_ = nullptr;
    const Marks marked = ServerCalls::Get().Marked(call, serial_);
    ServerCalls::Get().End(call, serial_);
    const grpc::Status status = batch->GetSendStatus();
    if (status.ok()) return;
    // The first outgoing call to give up for a reason that travels names
    // the failure: what went wrong first, whatever the handler did next.
    const GiveUpReason reason = marked.First(settings_.propagate);
    if (reason == GiveUpReason::kNone) return;
    if (IsLocalRefusal(reason) &&
        status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // This server's own client refused to call the service below (its
      // breaker, throttle or budget). UNAVAILABLE would tell every caller,
      // rpcguard or not, that this server is down (breakers, outlier
      // ejection, retry policies count it); RESOURCE_EXHAUSTED says it is up
      // and cannot take this request now (docs/fleet.md). Edge servers too:
      // their callers read codes, not trailers.
      batch->ModifySendStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                           status.error_message(),
                                           status.error_details()));
    }
    if (settings_.edge) return;
    std::multimap<std::string, std::string>* trailers =
        batch->GetSendTrailingMetadata();
    // A pushback the handler set itself is its own answer.
    if (trailers->find(kPushbackTrailer) == trailers->end()) {
      trailers->emplace(kPushbackTrailer, "-1");
    }
    trailers->emplace(kGaveUpTrailer, std::string(GiveUpReasonName(reason)));
    CountStopSent(reason);
  }

  ServerRpcInfo* const info_;
  const ServerInterceptorSettings settings_;
  bool begun_ = false;
  // Set while the call is in ServerCalls.
  grpc_call* call_ = nullptr;
  uint64_t serial_ = 0;
};

class ServerInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerInterceptorFactory(const ServerInterceptorSettings& settings)
      : settings_(settings) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      ServerRpcInfo* info) override {
    return new ServerInterceptor(info, settings_);
  }

 private:
  const ServerInterceptorSettings settings_;
};

}  // namespace

bool IsLocalRefusal(GiveUpReason reason) {
  return reason == GiveUpReason::kThrottled ||
         reason == GiveUpReason::kBreakerOpen ||
         reason == GiveUpReason::kBudgetExhausted;
}

bool IsRepeatedAttempt(absl::string_view attempt, absl::string_view previous) {
  int n = 0;
  if (!attempt.empty() && absl::SimpleAtoi(attempt, &n) && n >= 2) return true;
  if (!previous.empty() && absl::SimpleAtoi(previous, &n) && n >= 1) {
    return true;
  }
  return false;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewServerInterceptorFactory(const ServerInterceptorSettings& settings) {
  return std::make_unique<ServerInterceptorFactory>(settings);
}

}  // namespace internal
}  // namespace rpcguard
