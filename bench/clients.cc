// Copyright rpcguard authors.

#include "bench/clients.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/version_info.h>

// proto_utils.h left impl/codegen/ in gRPC 1.52.
#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR < 52
#include <grpcpp/impl/codegen/proto_utils.h>
#else
#include <grpcpp/impl/proto_utils.h>
#endif

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "bench/stream_floor.h"
#include "rpcguard/base/uuid.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace bench {
namespace {

using ::grpc::experimental::ClientInterceptorFactoryInterface;
using ::grpc::experimental::ClientRpcInfo;
using ::grpc::experimental::InterceptionHookPoints;
using ::grpc::experimental::InterceptorBatchMethods;

// The floor for any interceptor design: it only proceeds; with `headers`
// (kPassThroughHeaders), after adding rpcguard's two headers to the call's
// initial metadata, as rpcguard adds them to a call it does not hijack.
class PassThroughInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit PassThroughInterceptor(bool headers) : headers_(headers) {}
  void Intercept(InterceptorBatchMethods* methods) override {
    if (headers_ && methods->QueryInterceptionHookPoint(
                        InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      auto* md = methods->GetSendInitialMetadata();
      md->emplace(kIdempotencyKeyHeader, NewUuidV4(*Random::Default()));
      md->emplace(kAttemptHeader, "1");
    }
    methods->Proceed();
  }

 private:
  const bool headers_;
};

class PassThroughFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit PassThroughFactory(bool headers) : headers_(headers) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* /*info*/) override {
    return new PassThroughInterceptor(headers_);
  }

 private:
  const bool headers_;
};

// One call of HijackFloorInterceptor: what its single attempt needs, and the
// application's receiving batch while it waits. Heap-allocated; no reference
// count: it is deleted by whichever of the two parties that meet here (the
// attempt's completion, the parked batch) comes second, which is the one
// that serves the batch.
class HijackFloorCall {
 public:
  // Takes the application's serialized `request`: it is never sent on the
  // application's call.
  HijackFloorCall(const char* method, grpc::ByteBuffer* request)
      : method_(method) {
    request_.Swap(request);
  }

  // Starts the attempt, a callback-API call on `channel` (the channel below
  // the interceptor) with the caller's deadline; `headers`: with rpcguard's
  // two (kHijackFloorHeaders).
  void Start(grpc::ChannelInterface* channel, gpr_timespec deadline,
             bool headers) {
    context_.emplace();
    context_->set_deadline(deadline);
    if (headers) {
      // As rpcguard builds them: a key drawn for the call, then each header
      // added to the attempt's context.
      const std::string key = NewUuidV4(*Random::Default());
      context_->AddMetadata(kIdempotencyKeyHeader, key);
      context_->AddMetadata(kAttemptHeader, "1");
    }
    // One pointer: the std::function keeps it without an allocation.
    HijackFloorCall* const self = this;
    grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel,
        grpc::internal::RpcMethod(method_.c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &*context_, &request_, &response_, [self](grpc::Status status) {
          self->OnAttemptDone(std::move(status));
        });
  }

  // The application's batch that waits for the result (receive message and
  // status): parks it until the attempt has ended, or serves it at once.
  // `this` may be gone when it returns.
  void Park(InterceptorBatchMethods* batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) {
        parked_ = batch;
        return;
      }
    }
    Serve(std::unique_ptr<HijackFloorCall>(this), batch);
  }

 private:
  // On a gRPC callback thread. `this` may be gone when it returns.
  void OnAttemptDone(grpc::Status status) {
    InterceptorBatchMethods* batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_ = true;
      batch = parked_;
    }
    if (batch != nullptr) Serve(std::unique_ptr<HijackFloorCall>(this), batch);
  }

  // Fills `batch` from the attempt, ends `call`, then proceeds `batch`. Runs
  // once per call, after done_, so it reads the outcome without mu_.
  static void Serve(std::unique_ptr<HijackFloorCall> call,
                    InterceptorBatchMethods* batch) {
    grpc::Status& status = call->status_;
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_MESSAGE)) {
      bool filled = false;
      if (status.ok()) {
        // Generated stubs receive into a protobuf message. Deserialize
        // consumes the response: nothing is copied.
        grpc::Status parsed =
            grpc::SerializationTraits<grpc::protobuf::MessageLite>::Deserialize(
                &call->response_, static_cast<grpc::protobuf::MessageLite*>(
                                      batch->GetRecvMessage()));
        if (parsed.ok()) {
          filled = true;
        } else {
          // What gRPC itself reports for a response it cannot parse.
          status = std::move(parsed);
        }
      }
      if (!filled) batch->FailHijackedRecvMessage();
    }
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_STATUS)) {
      *batch->GetRecvStatus() = std::move(status);
    }
    // The attempt's ClientContext holds a reference to the application's
    // channel: it goes before the application's call can end, so that it is
    // never the last reference, dropped on a gRPC callback thread (which can
    // abort gRPC 1.51; see HoldCallbackThreads in clients.h).
    call.reset();
    batch->Proceed();
  }

  // The method's name: ClientRpcInfo's pointer can die before the attempt
  // does (GenericStub callers).
  std::string method_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  // The attempt's; in place, to spare an allocation.
  std::optional<grpc::ClientContext> context_;

  std::mutex mu_;
  bool done_ = false;                          // guarded by mu_
  grpc::Status status_;                        // written under mu_ before done_
  InterceptorBatchMethods* parked_ = nullptr;  // guarded by mu_
};

// The floor for any retrying interceptor built on hijacking: every unary
// call is hijacked and tried exactly once, as an attempt of its own on the
// channel below, with nothing added (no retries, no metadata, no policy).
// What it costs beyond pass-through is the mechanism itself: a second call
// and ClientContext per call, the hijacked batches, a thread hop on the
// attempt's completion. Streams go to StreamFloorCall (stream_floor.h), the
// same for a stream.
class HijackFloorInterceptor final : public grpc::experimental::Interceptor {
 public:
  HijackFloorInterceptor(ClientRpcInfo* info, bool headers)
      : info_(info), headers_(headers) {}

  void Intercept(InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_CANCEL)) {
      // No cancel support: the floor measures the no-failure path. A
      // cancelled call still waits for its attempt, which ends by the
      // caller's deadline at the latest. gRPC continues a cancel batch by
      // itself.
      return;
    }
    if (info_->type() != ClientRpcInfo::Type::UNARY) {
      ServeStream(batch);
      return;  // `this` may be gone.
    }
    if (!hijacked_ &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA) &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      OnFirstBatch(batch);
      return;  // `this` may be gone.
    }
    // Hijack() re-enters here with the batch's receive hooks. Initial
    // metadata alone needs nothing from the attempt (none is copied).
    if (hijacked_ && (batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_MESSAGE) ||
                      batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_STATUS))) {
      call_->Park(batch);
      return;  // `this` may be gone.
    }
    batch->Proceed();
  }

 private:
  // Takes what the attempt needs, starts it and hijacks the call.
  void OnFirstBatch(InterceptorBatchMethods* batch) {
    auto* call =
        new HijackFloorCall(info_->method(), batch->GetSerializedSendMessage());
    // Only needed to create the attempt's call.
    const std::unique_ptr<grpc::ChannelInterface> channel =
        batch->GetInterceptedChannel();
    call_ = call;
    hijacked_ = true;
    call->Start(channel.get(), info_->client_context()->raw_deadline(),
                headers_);
    // Re-enters Intercept() with this batch's receive hooks, which park.
    batch->Hijack();
  }

  void ServeStream(InterceptorBatchMethods* batch) {
    // Only the first batch's: gRPC's CQ-async writers reuse one batch for
    // the initial metadata and every write, and a hijacked call never
    // clears its metadata op, so later writes show the hook again.
    if (stream_ == nullptr &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      stream_ = StreamFloorCall::Start(info_, batch);
      // Re-enters Intercept() with this batch's receive hooks.
      batch->Hijack();
      return;
    }
    if (stream_ == nullptr) {
      batch->Proceed();
      return;
    }
    stream_->Serve(batch);
  }

  ClientRpcInfo* const info_;
  const bool headers_;
  // Written by the first batch before Hijack(); read only by the batch that
  // Hijack() re-enters with, before it is parked.
  bool hijacked_ = false;
  HijackFloorCall* call_ = nullptr;
  // A streaming call's; set by its first batch, before Hijack().
  std::shared_ptr<StreamFloorCall> stream_;
};

class HijackFloorFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit HijackFloorFactory(bool headers) : headers_(headers) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* info) override {
    return new HijackFloorInterceptor(info, headers_);
  }

 private:
  const bool headers_;
};

// Arguments every client starts from: a subchannel pool of its own, so no
// two channels share a connection.
grpc::ChannelArguments BaseArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
}

// /dev/null as a stdio stream, for traces that are written but not kept.
FILE* DevNull() {
  static FILE* const file = std::fopen("/dev/null", "w");
  return file;
}

}  // namespace

absl::string_view ClientName(ClientKind kind) {
  switch (kind) {
    case ClientKind::kPlain:
      return "plain";
    case ClientKind::kPassThrough:
      return "pass-through";
    case ClientKind::kPassThroughHeaders:
      return "pass-through-headers";
    case ClientKind::kHijackFloor:
      return "hijack-floor";
    case ClientKind::kHijackFloorHeaders:
      return "hijack-floor-headers";
    case ClientKind::kGrpcRetry:
      return "grpc-retry";
    case ClientKind::kGrpcRetryThrottled:
      return "grpc-retry-throttled";
    case ClientKind::kRpcguard:
      return "rpcguard";
    case ClientKind::kRpcguardHedged:
      return "rpcguard-hedged";
    case ClientKind::kRpcguardHedgedAdaptive:
      return "rpcguard-hedged-adaptive";
  }
  return "?";
}

absl::StatusOr<ClientKind> ParseClientName(absl::string_view name) {
  for (ClientKind kind : kAllClients) {
    if (ClientName(kind) == name) return kind;
  }
  for (ClientKind kind :
       {ClientKind::kPassThroughHeaders, ClientKind::kHijackFloorHeaders,
        ClientKind::kGrpcRetryThrottled, ClientKind::kRpcguardHedged,
        ClientKind::kRpcguardHedgedAdaptive}) {
    if (ClientName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown client \"", name,
                   "\" (want plain, pass-through, pass-through-headers, "
                   "hijack-floor, hijack-floor-headers, grpc-retry, "
                   "grpc-retry-throttled, rpcguard, rpcguard-hedged or "
                   "rpcguard-hedged-adaptive)"));
}

std::string ServiceConfigJson(const RetrySettings& retry) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kService,
      R"(", "method": ")", kMethod, R"("}], "retryPolicy": {"maxAttempts": )",
      retry.max_attempts, R"(, "initialBackoff": ")",
      Seconds(retry.initial_backoff), R"(", "maxBackoff": ")",
      Seconds(retry.max_backoff), R"(", "backoffMultiplier": )",
      retry.backoff_multiplier, R"(, "retryableStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "",
      R"(]}}])");
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  json += "}";
  return json;
}

std::string HedgedConfigJson(const RetrySettings& retry, bool adaptive) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kService,
      R"(", "method": ")", kMethod, R"("}], "hedgingPolicy": {"maxAttempts": )",
      retry.hedge_max_attempts, R"(, "hedgingDelay": ")",
      Seconds(retry.hedging_delay),
      R"(", "nonFatalStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "", "]}");
  if (adaptive) {
    absl::StrAppend(&json, R"(, "rpcguard": {"hedgingDelayPercentile": )",
                    retry.hedging_percentile,
                    R"(, "hedgingDelayFloor": "0.001s"})");
  }
  json += "}]";
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  json += "}";
  return json;
}

// Counts on the way through; the trace itself goes to /dev/null.
class RpcguardState::CountingSink final : public TraceSink {
 public:
  void Write(const TraceEvent& e) override {
    if (e.kind == TraceEvent::Kind::kBreakerTransition) {
      if (e.to_state == "open") {
        openings_.fetch_add(1, std::memory_order_relaxed);
      }
    } else if (e.kind == TraceEvent::Kind::kAttempt &&
               e.code != grpc::StatusCode::OK && IsNotSent(e.code, e.message)) {
      not_sent_.fetch_add(1, std::memory_order_relaxed);
    }
    out_.Write(e);
  }

  // Written by Write on gRPC's threads; read when the load is over.
  std::atomic<int64_t> not_sent_{0};
  std::atomic<int64_t> openings_{0};

 private:
  LogfmtSink out_{DevNull()};
};

RpcguardState::RpcguardState(std::shared_ptr<BreakerRegistry> registry,
                             std::shared_ptr<CountingSink> sink)
    : registry_(std::move(registry)), sink_(std::move(sink)) {}

absl::StatusOr<std::shared_ptr<RpcguardState>> RpcguardState::Create() {
  absl::StatusOr<std::shared_ptr<BreakerRegistry>> registry =
      BreakerRegistry::Create({});
  if (!registry.ok()) return registry.status();
  return std::shared_ptr<RpcguardState>(new RpcguardState(
      *std::move(registry), std::make_shared<CountingSink>()));
}

std::shared_ptr<TraceSink> RpcguardState::sink() const { return sink_; }

int64_t RpcguardState::not_sent_attempts() const {
  return sink_->not_sent_.load(std::memory_order_relaxed);
}

int64_t RpcguardState::breaker_openings() const {
  return sink_->openings_.load(std::memory_order_relaxed);
}

// An rpcguard channel with `json` as its Config: the one place where the
// benchmarks' rpcguard Options are set.
absl::StatusOr<std::shared_ptr<grpc::Channel>> RpcguardChannelFromJson(
    const std::string& target, const std::string& json,
    std::shared_ptr<RpcguardState> state);

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRpcguardChannel(
    const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state, ClientKind kind) {
  // The same JSON the built-in client gets (retryThrottling included, which
  // rpcguard honours as A6 says), plus rpcguard's own defaults: a circuit
  // breaker and a retry budget per target. Every benchmark builds its
  // rpcguard client through this function. The budget is rpcguard's only
  // where the built-in client has one too (retry.budget): elsewhere both
  // retry as far as the policy allows, so that success rates compare at the
  // same retry parameters. (With its default budget, 20% of calls plus 10
  // retries/s, rpcguard gives up about one call in ten at 30% failures,
  // rather than add 45% more load: README, "Benchmarks".)
  std::string json =
      kind == ClientKind::kRpcguard
          ? ServiceConfigJson(retry)
          : HedgedConfigJson(retry,
                             kind == ClientKind::kRpcguardHedgedAdaptive);
  if (!retry.budget && !retry.rpcguard_budget) {
    json.pop_back();  // the closing brace
    json += R"(, "rpcguard": {"retryBudget": {"enabled": false}}})";
  }
  return RpcguardChannelFromJson(target, json, std::move(state));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> RpcguardChannelFromJson(
    const std::string& target, const std::string& json,
    std::shared_ptr<RpcguardState> state) {
  absl::StatusOr<Config> config = Config::FromJson(json);
  if (!config.ok()) return config.status();
  Options options;
  options.config = *std::move(config);
  // A registry per client (or per measurement, shared by its channels), so
  // that one scenario's breaker state (an outage opens it) does not carry
  // over into the next.
  if (state == nullptr) {
    absl::StatusOr<std::shared_ptr<RpcguardState>> fresh =
        RpcguardState::Create();
    if (!fresh.ok()) return fresh.status();
    state = *std::move(fresh);
  }
  options.breaker_registry = state->registry();
  // Default verbosity (kRetries): traces are formatted and written as in
  // production, to a sink that discards them.
  options.trace_sink = state->sink();
  return CreateChannel(target, grpc::InsecureChannelCredentials(),
                       std::move(options), BaseArgs());
}

std::string StreamServiceConfigJson(const RetrySettings& retry,
                                    bool for_rpcguard) {
  std::string json = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": ")", kStreamService,
      R"(", "method": "ServerStream"}, {"service": ")", kStreamService,
      R"(", "method": "ClientStream"}, {"service": ")", kStreamService,
      R"(", "method": "Bidi"}], "retryPolicy": {"maxAttempts": )",
      retry.max_attempts, R"(, "initialBackoff": ")",
      Seconds(retry.initial_backoff), R"(", "maxBackoff": ")",
      Seconds(retry.max_backoff), R"(", "backoffMultiplier": )",
      retry.backoff_multiplier, R"(, "retryableStatusCodes": ["UNAVAILABLE")",
      retry.retry_resource_exhausted ? R"(, "RESOURCE_EXHAUSTED")" : "",
      R"(]})",
      for_rpcguard ? R"(, "rpcguard": {"idempotency": "IDEMPOTENT"})" : "",
      "}]");
  if (retry.budget) {
    absl::StrAppend(&json, R"(, "retryThrottling": {"maxTokens": )",
                    retry.max_tokens, R"(, "tokenRatio": )", retry.token_ratio,
                    "}");
  }
  if (for_rpcguard && !retry.budget && !retry.rpcguard_budget) {
    json += R"(, "rpcguard": {"retryBudget": {"enabled": false}})";
  }
  json += "}";
  return json;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeStreamChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state) {
  switch (kind) {
    case ClientKind::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), BaseArgs());
    case ClientKind::kGrpcRetry: {
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(StreamServiceConfigJson(retry, false));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kHijackFloor:
      return MakeClientChannel(kind, target, retry, std::move(state));
    case ClientKind::kRpcguard:
      return RpcguardChannelFromJson(
          target, StreamServiceConfigJson(retry, true), std::move(state));
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ClientName(kind),
                   ": not a client of the stream benchmarks "
                   "(plain, hijack-floor, grpc-retry, rpcguard)"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeClientChannel(
    ClientKind kind, const std::string& target, const RetrySettings& retry,
    std::shared_ptr<RpcguardState> state) {
  switch (kind) {
    case ClientKind::kPlain:
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), BaseArgs());
    case ClientKind::kPassThrough:
    case ClientKind::kPassThroughHeaders: {
      std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> factories;
      factories.push_back(std::make_unique<PassThroughFactory>(
          kind == ClientKind::kPassThroughHeaders));
      return grpc::experimental::CreateCustomChannelWithInterceptors(
          target, grpc::InsecureChannelCredentials(), BaseArgs(),
          std::move(factories));
    }
    case ClientKind::kHijackFloor:
    case ClientKind::kHijackFloorHeaders: {
      std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> factories;
      factories.push_back(std::make_unique<HijackFloorFactory>(
          kind == ClientKind::kHijackFloorHeaders));
      return grpc::experimental::CreateCustomChannelWithInterceptors(
          target, grpc::InsecureChannelCredentials(), BaseArgs(),
          std::move(factories));
    }
    case ClientKind::kGrpcRetry: {
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(ServiceConfigJson(retry));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kGrpcRetryThrottled: {
      RetrySettings throttled = retry;
      throttled.budget = true;
      grpc::ChannelArguments args = BaseArgs();
      args.SetServiceConfigJSON(ServiceConfigJson(throttled));
      return grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
    }
    case ClientKind::kRpcguard:
    case ClientKind::kRpcguardHedged:
    case ClientKind::kRpcguardHedgedAdaptive:
      return MakeRpcguardChannel(target, retry, std::move(state), kind);
  }
  return absl::InvalidArgumentError("unknown client kind");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> HoldCallbackThreads(
    const std::string& target) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), BaseArgs());
  auto stub = rpcguard::testing::v1::FaultControl::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpcguard::testing::v1::StatsRequest req;
  req.add_op_ids("-");
  rpcguard::testing::v1::StatsReply reply;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Stats(&ctx, &req, &reply, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "FaultControl.Stats (callback): ", status.error_message()));
  }
  return channel;
}

ServerControl::ServerControl(const std::string& target)
    : stub_(rpcguard::testing::v1::FaultControl::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                    BaseArgs()))) {}

absl::Status ServerControl::SetMode(int fail_percent, int delay_ms,
                                    int capacity_per_second, int late_percent,
                                    int late_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // A server that was just restarted may not be connected yet.
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::ControlRequest req;
  req.set_fail_percent(fail_percent);
  req.set_delay_ms(delay_ms);
  req.set_capacity_per_second(capacity_per_second);
  req.set_late_percent(late_percent);
  req.set_late_ms(late_ms);
  rpcguard::testing::v1::ControlReply reply;
  const grpc::Status s = stub_->Control(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Control: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerControl::TotalAttempts() {
  absl::StatusOr<rpcguard::testing::v1::StatsReply> stats = Stats();
  if (!stats.ok()) return stats.status();
  return stats->total_attempts();
}

absl::StatusOr<int64_t> ServerControl::StreamAttempts() {
  absl::StatusOr<rpcguard::testing::v1::StatsReply> stats = Stats();
  if (!stats.ok()) return stats.status();
  return stats->stream_attempts();
}

absl::Status ServerControl::SetStreamFaults(int fail_percent, uint64_t seed) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::ControlRequest req;
  req.set_stream_fail_percent(fail_percent);
  req.set_stream_seed(seed);
  rpcguard::testing::v1::ControlReply reply;
  const grpc::Status s = stub_->Control(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Control: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<rpcguard::testing::v1::StatsReply> ServerControl::Stats() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);
  rpcguard::testing::v1::StatsRequest req;
  // An operation nobody uses: the reply carries only the total, never the
  // per-attempt records of every operation.
  req.add_op_ids("-");
  rpcguard::testing::v1::StatsReply reply;
  const grpc::Status s = stub_->Stats(&ctx, req, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("FaultControl.Stats: ", s.error_message()));
  }
  return reply;
}

}  // namespace bench
}  // namespace rpcguard
