// Copyright rpcguard authors.

#include "tests/testing/fault_server.h"

#include <grpcpp/alarm.h>
#include <grpcpp/server_builder.h>

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/decision/server_hints.h"

namespace rpcguard {
namespace testing {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;

namespace {

std::string Header(grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

class FaultServer::Impl final
    : public rpcguard::testing::v1::FaultService::CallbackService {
 public:
  enum class Kind { kRead, kWrite, kKeyed, kCreate };

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const FaultRequest* req,
                                FaultReply* reply) override {
    return Handle(Kind::kRead, ctx, req, reply);
  }
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx,
                                const FaultRequest* req,
                                FaultReply* reply) override {
    return Handle(Kind::kWrite, ctx, req, reply);
  }
  grpc::ServerUnaryReactor* Charge(grpc::CallbackServerContext* ctx,
                                   const FaultRequest* req,
                                   FaultReply* reply) override {
    return Handle(Kind::kKeyed, ctx, req, reply);
  }
  grpc::ServerUnaryReactor* HedgedCharge(grpc::CallbackServerContext* ctx,
                                         const FaultRequest* req,
                                         FaultReply* reply) override {
    return Handle(Kind::kKeyed, ctx, req, reply);
  }
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* ctx,
                                   const FaultRequest* req,
                                   FaultReply* reply) override {
    return Handle(Kind::kCreate, ctx, req, reply);
  }

  grpc::ServerWriteReactor<FaultReply>* Watch(
      grpc::CallbackServerContext* ctx, const FaultRequest* req) override {
    // Writes three replies one after another, then finishes.
    class Writer final : public grpc::ServerWriteReactor<FaultReply> {
     public:
      explicit Writer(const FaultRequest& req) {
        reply_.set_op_id(req.op_id());
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
          return;
        }
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (sent_ == 3) {
          Finish(grpc::Status::OK);
          return;
        }
        reply_.set_attempts_seen(++sent_);
        StartWrite(&reply_);
      }
      FaultReply reply_;
      int sent_ = 0;
    };
    {
      // Recorded like a unary attempt's metadata, so that tests can assert
      // what a stream carried.
      absl::MutexLock lock(&mu_);
      OpRecord& op = ops_[req->op_id()];
      ++op.attempts;
      for (const auto& [k, v] : ctx->client_metadata()) {
        op.metadata_keys.emplace(k.data(), k.size());
      }
    }
    return new Writer(*req);
  }

  OpRecord Op(const std::string& op_id) const {
    absl::MutexLock lock(&mu_);
    auto it = ops_.find(op_id);
    return it == ops_.end() ? OpRecord{} : it->second;
  }

  int64_t total_attempts() const {
    absl::MutexLock lock(&mu_);
    return total_attempts_;
  }

  int64_t shed_attempts() const {
    absl::MutexLock lock(&mu_);
    return shed_attempts_;
  }

  void SetMode(int fail_percent, int delay_ms, bool hang,
               int apply_then_fail_percent, int capacity_per_second,
               int late_percent, int late_ms) {
    std::vector<grpc::ServerUnaryReactor*> release;
    {
      absl::MutexLock lock(&mu_);
      capacity_per_second_ = capacity_per_second;
      mode_late_percent_ = late_percent;
      mode_late_ms_ = late_ms;
      mode_fail_percent_ = fail_percent;
      mode_delay_ms_ = delay_ms;
      mode_hang_ = hang;
      mode_apply_then_fail_percent_ = apply_then_fail_percent;
      if (!hang) release.swap(hung_);
    }
    for (auto* r : release) {
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "hang ended"));
    }
  }

  void Stats(const rpcguard::testing::v1::StatsRequest& req,
             rpcguard::testing::v1::StatsReply* reply) const {
    absl::MutexLock lock(&mu_);
    reply->set_total_attempts(total_attempts_);
    auto add = [&](const std::string& id, const OpRecord& op) {
      auto* out = reply->add_ops();
      out->set_op_id(id);
      out->set_attempts(op.attempts);
      out->set_side_effects(op.side_effects);
      for (const auto& k : op.keys) out->add_keys(k);
    };
    if (req.op_ids().empty()) {
      for (const auto& [id, op] : ops_) add(id, op);
    } else {
      for (const auto& id : req.op_ids()) {
        auto it = ops_.find(id);
        if (it != ops_.end()) add(id, it->second);
      }
    }
  }

 private:
  grpc::ServerUnaryReactor* Handle(Kind kind, grpc::CallbackServerContext* ctx,
                                   const FaultRequest* req, FaultReply* reply) {
    const std::string key = Header(ctx, "idempotency-key");
    const std::string attempt_header = Header(ctx, "rpcguard-attempt");
    int attempt;
    bool fail;
    bool unauthenticated;
    int mode_delay_ms;
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    {
      absl::MutexLock lock(&mu_);
      ++total_attempts_;
      OpRecord& op = ops_[req->op_id()];
      attempt = ++op.attempts;
      op.keys.push_back(key);
      op.attempt_headers.push_back(attempt_header);
      op.arrivals.push_back(absl::Now());
      const grpc::string_ref authority = ctx->ExperimentalGetAuthority();
      op.authorities.emplace_back(authority.data(), authority.size());
      op.deadlines.push_back(absl::FromChrono(ctx->deadline()));
      for (const auto& [k, v] : ctx->client_metadata()) {
        op.metadata_keys.emplace(k.data(), k.size());
      }
      unauthenticated =
          !req->require_token().empty() &&
          Header(ctx, "authorization") != "Bearer " + req->require_token();
      if (mode_hang_) {
        // Answered when the hang ends (or at shutdown).
        hung_.push_back(reactor);
        return reactor;
      }
      mode_delay_ms = mode_delay_ms_;
      // Drawn per attempt, not per operation: a hedge of a late attempt is
      // as likely to be late as any attempt, as on a real server.
      if (mode_late_percent_ > 0 &&
          absl::Uniform(gen_, 0, 100) < mode_late_percent_) {
        mode_delay_ms += mode_late_ms_;
      }
      if (capacity_per_second_ > 0) {
        // Capacity per 100 ms slice: a shed attempt is answered at once.
        const int64_t slice = absl::ToUnixMillis(absl::Now()) / 100;
        if (slice != slice_) {
          slice_ = slice;
          slice_attempts_ = 0;
        }
        if (++slice_attempts_ > std::max(1, capacity_per_second_ / 10)) {
          ++shed_attempts_;
          reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       "over capacity"));
          return reactor;
        }
      }
      fail = attempt <= req->fail_first() ||
             attempt == req->fail_only_attempt() ||
             (req->fail_percent() > 0 &&
              absl::Uniform(gen_, 0, 100) < req->fail_percent());
      bool apply_anyway = req->apply_then_fail();
      if (!fail && mode_fail_percent_ > 0 &&
          absl::Uniform(gen_, 0, 100) < mode_fail_percent_) {
        fail = true;
        apply_anyway =
            mode_apply_then_fail_percent_ > 0 &&
            absl::Uniform(gen_, 0, 100) < mode_apply_then_fail_percent_;
      }
      const bool apply = !unauthenticated && (!fail || apply_anyway);
      if (apply && kind == Kind::kCreate) ++op.side_effects;
      if (apply && kind == Kind::kKeyed) {
        // Deduplicate by key: a repeat of an applied key changes nothing.
        if (applied_keys_.insert(key).second) ++op.side_effects;
      }
      reply->set_applied(op.side_effects);
    }
    reply->set_op_id(req->op_id());
    reply->set_attempts_seen(attempt);
    reply->set_idempotency_key(key);
    reply->set_attempt_header(attempt_header);
    if (req->reply_payload_bytes() > 0) {
      reply->set_payload(std::string(req->reply_payload_bytes(), 'r'));
    } else {
      reply->set_payload(req->payload());
    }
    if (req->reply_metadata_bytes() > 0) {
      ctx->AddInitialMetadata("fault-padding",
                              std::string(req->reply_metadata_bytes(), 'm'));
    }
    if (req->echo_attempt_metadata()) {
      ctx->AddInitialMetadata("fault-attempt", absl::StrCat(attempt));
      ctx->AddTrailingMetadata("fault-attempt-trailer", absl::StrCat(attempt));
    }

    grpc::Status status = grpc::Status::OK;
    if (unauthenticated) {
      status =
          grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token rejected");
    } else if (fail) {
      const int code = req->fail_code() != 0
                           ? req->fail_code()
                           : static_cast<int>(grpc::StatusCode::UNAVAILABLE);
      std::string details = req->status_details();
      const std::string message =
          absl::StrCat("injected failure on attempt ", attempt);
      if (details.empty() && req->retry_info_ms() > 0) {
        details = RetryInfoStatusDetails(
            code, message, absl::Milliseconds(req->retry_info_ms()));
      }
      status =
          grpc::Status(static_cast<grpc::StatusCode>(code), message, details);
      if (!req->pushback_ms().empty()) {
        ctx->AddTrailingMetadata("grpc-retry-pushback-ms", req->pushback_ms());
      }
    }
    int delay_ms = req->delay_ms() + mode_delay_ms;
    if (attempt <= req->fail_first()) delay_ms += req->fail_delay_ms();
    if (attempt == 1) delay_ms += req->slow_first_ms();

    if (delay_ms <= 0) {
      reactor->Finish(status);
      return reactor;
    }
    // Delay without holding a server thread: answer from an alarm. The alarm
    // deletes itself after firing (its impl stays alive for the callback).
    auto* alarm = new grpc::Alarm();
    alarm->Set(
        std::chrono::system_clock::now() + std::chrono::milliseconds(delay_ms),
        [reactor, status, alarm](bool) {
          reactor->Finish(status);
          delete alarm;
        });
    return reactor;
  }

  mutable absl::Mutex mu_;
  std::map<std::string, OpRecord> ops_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> applied_keys_ ABSL_GUARDED_BY(mu_);
  int64_t total_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int mode_fail_percent_ ABSL_GUARDED_BY(mu_) = 0;
  int mode_delay_ms_ ABSL_GUARDED_BY(mu_) = 0;
  bool mode_hang_ ABSL_GUARDED_BY(mu_) = false;
  int mode_apply_then_fail_percent_ ABSL_GUARDED_BY(mu_) = 0;
  int capacity_per_second_ ABSL_GUARDED_BY(mu_) = 0;
  int mode_late_percent_ ABSL_GUARDED_BY(mu_) = 0;
  int mode_late_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slice_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slice_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<grpc::ServerUnaryReactor*> hung_ ABSL_GUARDED_BY(mu_);
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
};

class FaultServer::ControlService final
    : public rpcguard::testing::v1::FaultControl::CallbackService {
 public:
  ControlService(Impl* impl, FaultStreams* streams)
      : impl_(impl), streams_(streams) {}

  grpc::ServerUnaryReactor* Control(
      grpc::CallbackServerContext* ctx,
      const rpcguard::testing::v1::ControlRequest* req,
      rpcguard::testing::v1::ControlReply* reply) override {
    impl_->SetMode(req->fail_percent(), req->delay_ms(), req->hang(),
                   req->apply_then_fail_percent(), req->capacity_per_second(),
                   req->late_percent(), req->late_ms());
    streams_->SetFaults(req->stream_fail_percent(), req->stream_seed());
    reply->set_total_attempts(impl_->total_attempts());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Stats(
      grpc::CallbackServerContext* ctx,
      const rpcguard::testing::v1::StatsRequest* req,
      rpcguard::testing::v1::StatsReply* reply) override {
    impl_->Stats(*req, reply);
    reply->set_stream_attempts(streams_->attempts());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  Impl* impl_;
  FaultStreams* streams_;
};

FaultServer::FaultServer(int port) : FaultServer(port, "127.0.0.1") {}

FaultServer::FaultServer(int port, const std::string& host)
    : impl_(std::make_unique<Impl>()),
      streams_(std::make_unique<FaultStreams>()),
      control_(std::make_unique<ControlService>(impl_.get(), streams_.get())) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(host, ":", port),
                           grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(impl_.get());
  builder.RegisterService(streams_.get());
  builder.RegisterService(control_.get());
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port_);
}

void FaultServer::SetMode(int fail_percent, int delay_ms, bool hang,
                          int apply_then_fail_percent, int capacity_per_second,
                          int late_percent, int late_ms) {
  impl_->SetMode(fail_percent, delay_ms, hang, apply_then_fail_percent,
                 capacity_per_second, late_percent, late_ms);
}

int64_t FaultServer::shed_attempts() const { return impl_->shed_attempts(); }

FaultServer::~FaultServer() { Shutdown(); }

void FaultServer::Shutdown() {
  if (server_) {
    SetMode(0, 0, false, 0, 0, 0,
            0);  // answer hung calls so shutdown can finish
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
}

OpRecord FaultServer::Op(const std::string& op_id) const {
  return impl_->Op(op_id);
}

int64_t FaultServer::total_attempts() const { return impl_->total_attempts(); }

}  // namespace testing
}  // namespace rpcguard
