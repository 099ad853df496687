// Copyright rpcguard authors.
//
// The injector is a callback-API gRPC server with one generic service: every
// call, whatever its method, becomes a ForwardingCall. A ForwardingCall is
// decided when it arrives (the recorder numbers the attempt, the rule in
// force says what happens to it), waits out its delay on a grpc::Alarm, then
// either finishes with the injected failure or forwards the call to the
// backend as a generic bidi stream: on the wire unary and streaming calls
// are the same, and the backend server reads them by its own method kinds.
//
// Forwarding runs two loops, each one message at a time:
//   client -> service: front read, backend write, front read, ... until the
//     client half-closes (then backend writes-done) or a write fails;
//   service -> client: backend read, front write, backend read, ... until
//     the backend's stream ends (or, after the service, a failure replaces
//     the reply: its messages are read and dropped).
// Each loop starts operations on the backend stream from the front's
// reactions, so each holds the backend stream open (gRPC's AddHold) until
// it stops. The backend's OnDone, which comes after both holds are gone,
// finishes the front call with the backend's status and metadata. So the
// front call finishes once, after every operation on either side, and is
// deleted in its own OnDone, the last reaction of all.

#include "rpcguard/testing/fault_injector.h"

#include <grpc/support/time.h>
#include <grpcpp/alarm.h>
#include <grpcpp/client_context.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/server_callback.h>

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/server_hints.h"

namespace rpcguard {
namespace testing {

FaultRule FaultRule::Fail(std::string method, int attempts,
                          grpc::StatusCode code) {
  FaultRule rule;
  rule.method = std::move(method);
  rule.attempts = attempts;
  rule.failure = Failure::kBeforeService;
  rule.code = code;
  return rule;
}

FaultRule FaultRule::ApplyThenFail(std::string method, int attempts,
                                   grpc::StatusCode code) {
  FaultRule rule = Fail(std::move(method), attempts, code);
  rule.failure = Failure::kAfterService;
  return rule;
}

FaultRule FaultRule::Delay(std::string method, int attempts,
                           absl::Duration delay) {
  FaultRule rule;
  rule.method = std::move(method);
  rule.attempts = attempts;
  rule.failure = Failure::kNone;
  rule.delay = delay;
  return rule;
}

absl::Status ValidateFaultRule(const FaultRule& rule) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(rule.method), '/');
  if (parts.size() != 3 || !parts[0].empty() || parts[1].empty() ||
      parts[2].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FaultRule: method: must be \"/package.Service/Method\", "
                     "got \"",
                     rule.method, "\""));
  }
  const std::string where = absl::StrCat("FaultRule ", rule.method, ": ");
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, what));
  };
  if (rule.attempts < 1) {
    return error(
        absl::StrCat("attempts: must be at least 1, got ", rule.attempts));
  }
  if (rule.count_by != FaultRule::CountBy::kIdempotencyKey &&
      rule.count_by != FaultRule::CountBy::kAttemptHeader) {
    return error(absl::StrCat("count_by: unknown value ",
                              static_cast<int>(rule.count_by)));
  }
  if (rule.delay < absl::ZeroDuration()) {
    return error("delay: must not be negative");
  }
  if (rule.delay == absl::InfiniteDuration()) {
    return error("delay: must be finite");
  }
  switch (rule.failure) {
    case FaultRule::Failure::kNone:
      if (rule.pushback_ms.has_value()) {
        return error("pushback_ms: needs a failure");
      }
      if (rule.retry_info.has_value()) {
        return error("retry_info: needs a failure");
      }
      if (rule.delay == absl::ZeroDuration()) {
        return error("no failure and no delay: the rule would do nothing");
      }
      return absl::OkStatus();
    case FaultRule::Failure::kBeforeService:
    case FaultRule::Failure::kAfterService:
      break;
    default:
      return error(absl::StrCat("failure: unknown value ",
                                static_cast<int>(rule.failure)));
  }
  const int code = static_cast<int>(rule.code);
  if (code == 0) return error("code: OK is not a failure");
  if (code < 0 || code > 16) {
    return error(absl::StrCat("code: ", code, " is not a gRPC status code"));
  }
  if (rule.retry_info.has_value() &&
      (*rule.retry_info < absl::ZeroDuration() ||
       *rule.retry_info == absl::InfiniteDuration())) {
    return error("retry_info: must be finite and not negative");
  }
  return absl::OkStatus();
}

namespace {

// What happens to one attempt, decided when it arrives.
struct Plan {
  bool hit = false;
  FaultRule::Failure failure = FaultRule::Failure::kNone;
  absl::Duration delay = absl::ZeroDuration();
  grpc::Status status;  // the injected failure
  std::optional<int64_t> pushback_ms;
};

// Metadata a server may not copy from its client onto a call of its own
// (pseudo-headers and what gRPC itself writes).
bool ForwardRequestKey(absl::string_view key) {
  return !absl::StartsWith(key, ":") && !absl::StartsWith(key, "grpc-") &&
         key != "user-agent" && key != "te" && key != "content-type";
}

// Reply metadata to copy back: a server's own, and its pushback.
bool ForwardReplyKey(absl::string_view key) {
  if (key == kPushbackTrailer) return true;
  return !absl::StartsWith(key, ":") && !absl::StartsWith(key, "grpc-") &&
         key != "content-type";
}

std::string Value(const std::multimap<grpc::string_ref, grpc::string_ref>& md,
                  absl::string_view key) {
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

class FaultInjector::Core {
 public:
  explicit Core(Clock* clock) : recorder(clock) {}

  Plan Decide(const std::string& method, const RecordedAttempt& attempt)
      ABSL_LOCKS_EXCLUDED(mu) {
    Plan plan;
    absl::MutexLock lock(&mu);
    auto it = rules.find(method);
    if (it == rules.end()) return plan;
    const FaultRule& rule = it->second;
    const int number = rule.count_by == FaultRule::CountBy::kAttemptHeader
                           ? std::max(1, attempt.attempt_header)
                           : attempt.number;
    if (number > rule.attempts) return plan;
    plan.hit = true;
    plan.failure = rule.failure;
    plan.delay = rule.delay;
    plan.pushback_ms = rule.pushback_ms;
    plan.status = grpc::Status(
        rule.code, rule.message,
        rule.retry_info.has_value()
            ? RetryInfoStatusDetails(static_cast<int>(rule.code), rule.message,
                                     *rule.retry_info)
            : "");
    return plan;
  }

  Recorder recorder;
  absl::Mutex mu;
  std::map<std::string, FaultRule, std::less<>> rules ABSL_GUARDED_BY(mu);

  // The server and what its calls use. Set by Start while no call runs, and
  // reset by Shutdown once none runs, under server_mu; calls read stub
  // without it.
  absl::Mutex server_mu;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::CallbackGenericService> front;
  std::unique_ptr<grpc::Server> server ABSL_GUARDED_BY(server_mu);
  int port ABSL_GUARDED_BY(server_mu) = 0;
};

namespace {

// One call through the injector; see the top of this file. Deletes itself
// in OnDone.
class ForwardingCall final : public grpc::ServerGenericBidiReactor {
 public:
  ForwardingCall(FaultInjector::Core* core,
                 grpc::GenericCallbackServerContext* ctx)
      : core_(core), ctx_(ctx) {
    const auto& md = ctx->client_metadata();
    int attempt_header = 0;
    if (!absl::SimpleAtoi(Value(md, kAttemptHeader), &attempt_header)) {
      attempt_header = 0;
    }
    auto [handle, attempt] = core_->recorder.Arrive(
        ctx->method(), Value(md, kIdempotencyKeyHeader), attempt_header);
    handle_ = handle;
    plan_ = core_->Decide(ctx->method(), attempt);
    if (plan_.hit) {
      core_->recorder.SetFault(handle_, FaultOf(plan_.failure));
    }
    if (plan_.delay > absl::ZeroDuration()) {
      // OnCancel cannot run before the constructor returns, so the alarm is
      // set before OnCancel may cancel it.
      alarm_set_ = true;
      // On gRPC's monotonic clock: a wall-clock step does not move it.
      alarm_.Set(gpr_time_add(
                     gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_nanos(absl::ToInt64Nanoseconds(plan_.delay),
                                         GPR_TIMESPAN)),
                 [this](bool) { Go(); });
    } else {
      Go();
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    if (alarm_set_) alarm_.Cancel();  // no effect once it fired
    // Safe before the backend call starts, or after it ended.
    backend_ctx_.TryCancel();
  }

  // client -> service
  void OnReadDone(bool ok) override {
    if (ok) {
      backend_.StartWrite(&request_);
    } else {
      backend_.StartWritesDone();  // its reaction removes the write hold
    }
  }
  void BackendWriteDone(bool ok) {
    if (ok) {
      StartRead(&request_);
    } else {
      backend_.RemoveHold();  // the service takes no more; stop forwarding
    }
  }

  // service -> client
  void BackendReadDone(bool ok) {
    if (!ok) {
      backend_.RemoveHold();
      return;
    }
    if (plan_.failure == FaultRule::Failure::kAfterService) {
      backend_.StartRead(&reply_);  // the reply is lost
      return;
    }
    CopyInitialMetadata();
    StartWrite(&reply_);
  }
  void OnWriteDone(bool ok) override {
    if (ok) {
      backend_.StartRead(&reply_);
    } else {
      backend_ctx_.TryCancel();  // the client is gone
      backend_.RemoveHold();
    }
  }

  void BackendDone(const grpc::Status& status) {
    core_->recorder.SetServiceAnswer(handle_, status.error_code());
    if (plan_.failure == FaultRule::Failure::kAfterService) {
      End(InjectedFailure());
      return;
    }
    CopyInitialMetadata();
    for (const auto& [key, value] : backend_ctx_.GetServerTrailingMetadata()) {
      if (ForwardReplyKey(absl::string_view(key.data(), key.size()))) {
        ctx_->AddTrailingMetadata(std::string(key.data(), key.size()),
                                  std::string(value.data(), value.size()));
      }
    }
    End(status);
  }

  void OnDone() override { delete this; }

 private:
  class Backend final
      : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Backend(ForwardingCall* call) : call_(call) {}
    void OnReadDone(bool ok) override { call_->BackendReadDone(ok); }
    void OnWriteDone(bool ok) override { call_->BackendWriteDone(ok); }
    void OnWritesDoneDone(bool) override { RemoveHold(); }
    void OnDone(const grpc::Status& status) override {
      call_->BackendDone(status);
    }

   private:
    ForwardingCall* const call_;
  };

  static InjectedFault FaultOf(FaultRule::Failure failure) {
    switch (failure) {
      case FaultRule::Failure::kBeforeService:
        return InjectedFault::kFailed;
      case FaultRule::Failure::kAfterService:
        return InjectedFault::kAppliedThenFailed;
      case FaultRule::Failure::kNone:
        break;
    }
    return InjectedFault::kDelayed;
  }

  // After the delay, if any: fail, or forward.
  void Go() {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      cancelled = cancelled_;
    }
    if (cancelled) {
      End(grpc::Status(grpc::StatusCode::CANCELLED,
                       "rpcguard::testing: cancelled during the injected "
                       "delay"));
      return;
    }
    if (plan_.failure == FaultRule::Failure::kBeforeService) {
      End(InjectedFailure());
      return;
    }
    for (const auto& [key, value] : ctx_->client_metadata()) {
      if (ForwardRequestKey(absl::string_view(key.data(), key.size()))) {
        backend_ctx_.AddMetadata(std::string(key.data(), key.size()),
                                 std::string(value.data(), value.size()));
      }
    }
    backend_ctx_.set_deadline(ctx_->raw_deadline());
    core_->recorder.PassOn(handle_);
    core_->stub->PrepareBidiStreamingCall(&backend_ctx_, ctx_->method(),
                                          grpc::StubOptions(), &backend_);
    // One hold per loop that starts backend operations from outside the
    // backend's reactions (see the top of this file).
    backend_.AddMultipleHolds(2);
    StartRead(&request_);
    backend_.StartRead(&reply_);
    backend_.StartCall();
  }

  grpc::Status InjectedFailure() {
    if (plan_.pushback_ms.has_value()) {
      ctx_->AddTrailingMetadata(kPushbackTrailer,
                                absl::StrCat(*plan_.pushback_ms));
    }
    return plan_.status;
  }

  // The service's initial metadata, once, before the first reply message or
  // the status. gRPC has it by the backend's first OnReadDone or its OnDone,
  // which never run at once.
  void CopyInitialMetadata() {
    if (initial_metadata_copied_) return;
    initial_metadata_copied_ = true;
    for (const auto& [key, value] : backend_ctx_.GetServerInitialMetadata()) {
      if (ForwardReplyKey(absl::string_view(key.data(), key.size()))) {
        ctx_->AddInitialMetadata(std::string(key.data(), key.size()),
                                 std::string(value.data(), value.size()));
      }
    }
  }

  // Records the status the client gets and finishes the call. The last
  // thing a path does: OnDone (and delete) may follow at once.
  void End(const grpc::Status& status) {
    core_->recorder.Finish(handle_, status.error_code());
    Finish(status);
  }

  FaultInjector::Core* const core_;
  grpc::GenericCallbackServerContext* const ctx_;
  Recorder::Handle handle_;
  Plan plan_;
  grpc::Alarm alarm_;
  bool alarm_set_ = false;  // written in the constructor only
  grpc::ClientContext backend_ctx_;
  Backend backend_{this};
  grpc::ByteBuffer request_;  // client -> service, one message at a time
  grpc::ByteBuffer reply_;    // service -> client, one message at a time
  // Touched by the backend's reactions only, which gRPC runs one at a time
  // (a read's, then OnDone).
  bool initial_metadata_copied_ = false;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class Front final : public grpc::CallbackGenericService {
 public:
  explicit Front(FaultInjector::Core* core) : core_(core) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    return new ForwardingCall(core_, ctx);
  }

 private:
  FaultInjector::Core* const core_;
};

}  // namespace

FaultInjector::FaultInjector() : FaultInjector(Options()) {}

FaultInjector::FaultInjector(Options options)
    : core_(std::make_shared<Core>(options.clock)) {}

FaultInjector::~FaultInjector() { Shutdown(); }

absl::Status FaultInjector::Start(std::shared_ptr<grpc::Channel> backend,
                                  int port) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError(
        "FaultInjector::Start: the backend channel is null");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FaultInjector::Start: port must be 0 to 65535, got ", port));
  }
  absl::MutexLock lock(&core_->server_mu);
  if (core_->server != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FaultInjector::Start: already started on 127.0.0.1:", core_->port));
  }
  core_->stub = std::make_unique<grpc::GenericStub>(std::move(backend));
  core_->front = std::make_unique<Front>(core_.get());
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                           grpc::InsecureServerCredentials(), &bound);
  // Messages pass through as bytes: the limits are your server's and your
  // client's, not the injector's.
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  // A port in use is an error, not a port shared with another server that
  // would then take some of the calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(core_->front.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat(
        "FaultInjector::Start: cannot listen on 127.0.0.1:", port));
  }
  core_->server = std::move(server);
  core_->port = bound;
  return absl::OkStatus();
}

std::string FaultInjector::address() const {
  absl::MutexLock lock(&core_->server_mu);
  if (core_->server == nullptr) return "";
  return absl::StrCat("127.0.0.1:", core_->port);
}

int FaultInjector::port() const {
  absl::MutexLock lock(&core_->server_mu);
  return core_->server == nullptr ? 0 : core_->port;
}

void FaultInjector::Shutdown(absl::Duration grace) {
  absl::MutexLock lock(&core_->server_mu);
  if (core_->server == nullptr) return;
  // Returns once every call's OnDone has run: none uses the core after.
  core_->server->Shutdown(gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC),
      gpr_time_from_nanos(absl::ToInt64Nanoseconds(grace), GPR_TIMESPAN)));
  core_->server->Wait();
  core_->server.reset();
  core_->port = 0;
}

absl::Status FaultInjector::SetRule(FaultRule rule) {
  if (absl::Status s = ValidateFaultRule(rule); !s.ok()) return s;
  absl::MutexLock lock(&core_->mu);
  std::string method = rule.method;
  core_->rules.insert_or_assign(std::move(method), std::move(rule));
  return absl::OkStatus();
}

bool FaultInjector::RemoveRule(absl::string_view method) {
  absl::MutexLock lock(&core_->mu);
  auto it = core_->rules.find(method);
  if (it == core_->rules.end()) return false;
  core_->rules.erase(it);
  return true;
}

void FaultInjector::ClearRules() {
  absl::MutexLock lock(&core_->mu);
  core_->rules.clear();
}

std::vector<FaultRule> FaultInjector::rules() const {
  absl::MutexLock lock(&core_->mu);
  std::vector<FaultRule> out;
  for (const auto& [method, rule] : core_->rules) out.push_back(rule);
  return out;
}

Recorder& FaultInjector::recorder() { return core_->recorder; }
const Recorder& FaultInjector::recorder() const { return core_->recorder; }

}  // namespace testing
}  // namespace rpcguard
