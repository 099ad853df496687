// Copyright rpcguard authors.

#include "rpcguard/testing/recorder.h"

#include <algorithm>

#include "absl/strings/numbers.h"

namespace rpcguard {
namespace testing {

absl::string_view InjectedFaultName(InjectedFault fault) {
  switch (fault) {
    case InjectedFault::kNone:
      return "none";
    case InjectedFault::kDelayed:
      return "delayed";
    case InjectedFault::kFailed:
      return "failed";
    case InjectedFault::kAppliedThenFailed:
      return "applied_then_failed";
  }
  return "unknown";
}

int RecordedCall::reached_service() const {
  return static_cast<int>(std::count_if(
      attempts.begin(), attempts.end(),
      [](const RecordedAttempt& a) { return a.reached_service; }));
}

Recorder::Recorder(Clock* clock)
    : clock_(clock != nullptr ? clock : Clock::Real()) {}

std::vector<RecordedCall> Recorder::Calls(absl::string_view method) const {
  absl::MutexLock lock(&mu_);
  std::vector<RecordedCall> out;
  for (const RecordedCall& call : calls_) {
    if (method.empty() || call.method == method) out.push_back(call);
  }
  return out;
}

std::vector<RecordedAttempt> Recorder::Attempts(
    absl::string_view method) const {
  std::vector<RecordedAttempt> out;
  for (const RecordedCall& call : Calls(method)) {
    out.insert(out.end(), call.attempts.begin(), call.attempts.end());
  }
  // Stable: attempts that arrived at one instant keep their call's order.
  std::stable_sort(out.begin(), out.end(),
                   [](const RecordedAttempt& a, const RecordedAttempt& b) {
                     return a.arrival < b.arrival;
                   });
  return out;
}

int64_t Recorder::total_attempts() const {
  absl::MutexLock lock(&mu_);
  return total_attempts_;
}

void Recorder::Clear() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  calls_.clear();
  by_key_.clear();
  total_attempts_ = 0;
}

std::pair<Recorder::Handle, RecordedAttempt> Recorder::Arrive(
    absl::string_view method, absl::string_view idempotency_key,
    int attempt_header) {
  RecordedAttempt attempt;
  attempt.method = std::string(method);
  attempt.idempotency_key = std::string(idempotency_key);
  attempt.attempt_header = attempt_header > 0 ? attempt_header : 0;
  attempt.arrival = clock_->MonotonicNow();

  absl::MutexLock lock(&mu_);
  ++total_attempts_;
  size_t index = calls_.size();
  if (!idempotency_key.empty()) {
    auto [it, inserted] = by_key_.try_emplace(
        {attempt.method, attempt.idempotency_key}, calls_.size());
    index = it->second;
  }
  if (index == calls_.size()) {
    RecordedCall call;
    call.method = attempt.method;
    call.idempotency_key = attempt.idempotency_key;
    calls_.push_back(std::move(call));
  }
  RecordedCall& call = calls_[index];
  attempt.number = idempotency_key.empty()
                       ? std::max(1, attempt.attempt_header)
                       : static_cast<int>(call.attempts.size()) + 1;
  call.attempts.push_back(attempt);
  return {Handle{generation_, index, call.attempts.size() - 1}, attempt};
}

RecordedAttempt* Recorder::Find(const Handle& handle) {
  if (handle.generation != generation_ || handle.call >= calls_.size()) {
    return nullptr;
  }
  RecordedCall& call = calls_[handle.call];
  if (handle.attempt >= call.attempts.size()) return nullptr;
  return &call.attempts[handle.attempt];
}

void Recorder::SetFault(const Handle& handle, InjectedFault fault) {
  absl::MutexLock lock(&mu_);
  if (RecordedAttempt* a = Find(handle)) a->fault = fault;
}

void Recorder::PassOn(const Handle& handle) {
  absl::MutexLock lock(&mu_);
  if (RecordedAttempt* a = Find(handle)) a->reached_service = true;
}

void Recorder::SetServiceAnswer(const Handle& handle, grpc::StatusCode code) {
  absl::MutexLock lock(&mu_);
  if (RecordedAttempt* a = Find(handle)) a->service_code = code;
}

void Recorder::Finish(const Handle& handle, grpc::StatusCode code) {
  absl::MutexLock lock(&mu_);
  if (RecordedAttempt* a = Find(handle)) {
    a->finished = true;
    a->code = code;
  }
}

}  // namespace testing
}  // namespace rpcguard
