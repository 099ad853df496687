// Copyright rpcguard authors.

#include "tests/testing/deadline_control.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace testing {

bool ExpectWithinControl(absl::string_view what, absl::Duration quiet_bound,
                         absl::FunctionRef<Timing()> measure) {
  std::string seen;
  for (int measurement = 0; measurement < 3; ++measurement) {
    const Timing t = measure();
    const absl::Duration bound =
        std::max(quiet_bound, t.control + kControlAllowance);
    const std::string line =
        absl::StrCat("rpcguard ", absl::FormatDuration(t.rpcguard),
                     ", control ", absl::FormatDuration(t.control), ", bound ",
                     absl::FormatDuration(bound));
    std::printf("%s: %s\n", std::string(what).c_str(), line.c_str());
    absl::StrAppend(&seen, "\n  ", line);
    if (t.rpcguard <= bound) return true;
  }
  ADD_FAILURE() << what << ": rpcguard over max(" << quiet_bound
                << ", the control + " << kControlAllowance
                << ") in three measurements:" << seen;
  return false;
}

std::unique_ptr<FaultService::Stub> PlainStub(const std::string& target) {
  return FaultService::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

ControlCall::ControlCall(StubKind kind, FaultService::Stub* plain,
                         FaultRequest req, absl::Time deadline,
                         bool wait_for_ready)
    : ctx_(std::make_unique<grpc::ClientContext>()),
      req_(std::move(req)),
      deadline_(deadline) {
  if (deadline != absl::InfiniteFuture()) {
    ctx_->set_deadline(absl::ToChronoTime(deadline));
  }
  if (wait_for_ready) ctx_->set_wait_for_ready(true);
  Start(kind, plain);
}

ControlCall::ControlCall(StubKind kind, FaultService::Stub* plain,
                         FaultRequest req,
                         std::unique_ptr<grpc::ClientContext> ctx,
                         absl::Time deadline)
    : ctx_(std::move(ctx)), req_(std::move(req)), deadline_(deadline) {
  Start(kind, plain);
}

void ControlCall::Start(StubKind kind, FaultService::Stub* plain) {
  static std::atomic<int> n{0};
  req_.set_op_id(absl::StrCat("control-", ++n));
  start_ = absl::Now();
  call_ = StartCall(kind, plain, Method::kGet, ctx_.get(), req_, &reply_);
  waiter_ = std::thread([this] {
    status_ = call_->Wait();
    end_ = absl::Now();
  });
}

ControlCall::~ControlCall() { Wait(); }

FaultRequest ControlCall::Held(absl::Duration hold) {
  FaultRequest req;
  req.set_delay_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(hold)));
  return req;
}

FaultRequest ControlCall::HeldPast(absl::Time deadline) {
  return Held(std::max(absl::ZeroDuration(), deadline - absl::Now()) +
              absl::Seconds(1));
}

void ControlCall::Cancel() {
  cancelled_at_ = absl::Now();
  ctx_->TryCancel();
}

grpc::Status ControlCall::Wait() {
  if (waiter_.joinable()) waiter_.join();
  return status_;
}

ControlAttempts::ControlAttempts(StubKind kind, FaultService::Stub* plain,
                                 std::vector<ControlAttempt> attempts) {
  const absl::Time start = absl::Now();
  thread_ = std::thread([this, kind, plain, start,
                         attempts = std::move(attempts)] {
    for (const ControlAttempt& a : attempts) {
      const absl::Time deadline = a.timeout == absl::InfiniteDuration()
                                      ? absl::InfiniteFuture()
                                      : absl::Now() + a.timeout;
      statuses_.push_back(ControlCall(kind, plain, a.request, deadline).Wait());
    }
    took_ = absl::Now() - start;
  });
}

ControlAttempts::~ControlAttempts() { Wait(); }

std::vector<grpc::Status> ControlAttempts::Wait() {
  if (thread_.joinable()) thread_.join();
  return statuses_;
}

}  // namespace testing
}  // namespace rpcguard
