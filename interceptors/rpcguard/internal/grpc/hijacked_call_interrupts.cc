// Copyright rpcguard authors.
//
// HijackedCall, continued: what interrupts a call from outside its attempts.
// The caller's cancel, the parent call's cancel or deadline (parent watch),
// and the one credential refresh. hijacked_call.cc holds the attempts and
// their decisions; both files implement the class declared, with its
// state diagram, in hijacked_call.h.

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpcguard/internal/grpc/deadline.h"
#include "rpcguard/internal/grpc/hijacked_call.h"

namespace rpcguard {
namespace internal {

void HijackedCall::Cancel() {
  {
    internal::MutexLock lock(&mu_);
    if (cancelled_ || phase_ == Phase::kDone) return;
    cancelled_ = true;
    cancel_status_ = CancelledByCaller();
    cancel_reason_ = GiveUpReason::kCancelled;
    cancel_alarm_ = std::make_unique<grpc::Alarm>();
  }
  std::weak_ptr<HijackedCall> weak = weak_from_this();
  // A deadline in the past: the alarm fires at once, on a gRPC thread.
  cancel_alarm_->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC), [weak](bool) {
    if (auto self = weak.lock()) self->DoCancel();
  });
}

void HijackedCall::BeginRefresh(absl::Time deadline) {
  std::weak_ptr<HijackedCall> weak = weak_from_this();
  if (refresh_alarm_) {
    refresh_alarm_->Set(
        GrpcDeadline(deadline, factory_->clock(), setup_.grpc_deadline),
        [weak](bool fired) {
          if (!fired) return;
          if (auto self = weak.lock()) {
            self->EndRefresh(absl::DeadlineExceededError(""));
          }
        });
  }
  // Held weakly: a refresher that answers after the call ended finds
  // nothing to do.
  factory_->refresher()(method_.name,
                        [weak](absl::StatusOr<RefreshedCredentials> result) {
                          if (auto self = weak.lock()) {
                            self->EndRefresh(std::move(result));
                          }
                        });
}

void HijackedCall::EndRefresh(absl::StatusOr<RefreshedCredentials> result) {
  Ending ending;
  bool start = false;
  {
    internal::MutexLock lock(&mu_);
    if (phase_ != Phase::kRefreshing) return;
    const bool timed_out =
        result.status().code() == absl::StatusCode::kDeadlineExceeded &&
        result.status().message().empty();
    if (cancelled_) {
      ending = FinishLocked(cancel_status_, cancel_reason_, nullptr);
    } else if (timed_out) {
      ending = FinishLocked(last_status_, GiveUpReason::kDeadline,
                            last_attempt_.get());
    } else if (!result.ok()) {
      ending = FinishLocked(
          grpc::Status(last_status_.error_code(),
                       absl::StrCat(last_status_.error_message(),
                                    " (rpcguard: credential refresh failed: ",
                                    result.status().message(), ")"),
                       last_status_.error_details()),
          GiveUpReason::kAuth, last_attempt_.get());
    } else {
      refreshed_ = *std::move(result);
      phase_ = Phase::kStarting;
      start = true;
    }
  }
  if (refresh_alarm_) refresh_alarm_->Cancel();
  if (start) {
    StartAttempt();
  } else {
    Conclude(ending);
  }
}

void HijackedCall::DoCancel() {
  if (hedging_) {
    CancelHedged();
    return;
  }
  std::shared_ptr<grpc::ClientContext> attempt;
  grpc::Alarm* alarm = nullptr;
  bool end_refresh = false;
  {
    internal::MutexLock lock(&mu_);
    switch (phase_) {
      case Phase::kRefreshing:
        // The refresher cannot be stopped; the call ends without it.
        end_refresh = true;
        break;
      case Phase::kAttempting:
        if (attempt_ != nullptr) attempt = attempt_->context;
        break;
      case Phase::kBackingOff:
        alarm = backoff_alarm_.get();
        break;
      default:
        // kSending, kBackoffPending: the thread in StartAttempt or Continue
        // sees cancelled_ and acts. kStarting, kDone: nothing runs.
        break;
    }
  }
  if (end_refresh) {
    EndRefresh(absl::CancelledError());
    return;
  }
  // Its completion (a CANCELLED attempt) ends the call.
  if (attempt) attempt->TryCancel();
  // Its callback calls StartAttempt, which ends the call as cancelled.
  if (alarm) alarm->Cancel();
}

void HijackedCall::WatchParent() {
  if (setup_.caller.parent == nullptr) return;
  {
    internal::MutexLock lock(&mu_);
    if (parent_watched_) return;
    parent_watched_ = true;
  }
  std::weak_ptr<HijackedCall> weak = weak_from_this();
  std::shared_ptr<ParentWatch> watch = ParentWatch::Start(
      setup_.core_channel, setup_.caller.parent,
      setup_.caller.propagation.c_bitmask(), [weak](grpc::StatusCode code) {
        if (auto self = weak.lock()) self->OnParentEnded(code);
      });
  if (watch == nullptr) return;
  bool done;
  {
    internal::MutexLock lock(&mu_);
    done = phase_ == Phase::kDone;
    if (!done) parent_watch_ = watch;
  }
  if (done) watch->Stop();
}

void HijackedCall::OnParentEnded(grpc::StatusCode code) {
  {
    internal::MutexLock lock(&mu_);
    if (cancelled_ || phase_ == Phase::kDone) return;
    cancelled_ = true;
    if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      cancel_status_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                    "the parent call's deadline passed");
      cancel_reason_ = GiveUpReason::kDeadline;
    } else {
      // At its deadline core cancels the parent too, which may reach the
      // watch before the watch's own deadline does.
      cancel_status_ = grpc::Status(grpc::StatusCode::CANCELLED,
                                    "the parent call ended: cancelled, or its "
                                    "deadline passed");
      cancel_reason_ = GiveUpReason::kCancelled;
    }
  }
  // On the watch's own gRPC thread, which holds no lock of the
  // application's call: no need to defer, as Cancel() must.
  DoCancel();
}

}  // namespace internal
}  // namespace rpcguard
