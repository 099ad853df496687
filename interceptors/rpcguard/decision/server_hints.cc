// Copyright rpcguard authors.

#include "rpcguard/decision/server_hints.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "proto/rpcguard/internal/v1/rpc_status.pb.h"

namespace rpcguard {

Pushback ParsePushback(absl::string_view value) {
  Pushback p;
  int64_t ms;
  // SimpleAtoi accepts a leading '+' and surrounding spaces; A6 wants a bare
  // non-negative integer, so require digits only.
  const bool digits_only =
      !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
  if (digits_only && absl::SimpleAtoi(value, &ms)) {
    p.kind = Pushback::Kind::kRetryAfter;
    p.delay = absl::Milliseconds(ms);
  } else {
    p.kind = Pushback::Kind::kStop;
  }
  return p;
}

GiveUpReason CheckServerDelay(absl::Duration delay, absl::Duration time_left) {
  if (time_left == absl::InfiniteDuration()) {
    return delay > kMaxServerDelay ? GiveUpReason::kPushbackStop
                                   : GiveUpReason::kNone;
  }
  return delay > time_left ? GiveUpReason::kDeadline : GiveUpReason::kNone;
}

std::optional<absl::Duration> ParseRetryInfo(absl::string_view status_details) {
  if (status_details.empty()) return std::nullopt;
  rpcguard::internal::v1::RpcStatus status;
  if (!status.ParseFromArray(status_details.data(),
                             static_cast<int>(status_details.size()))) {
    return std::nullopt;
  }
  for (const google::protobuf::Any& detail : status.details()) {
    if (detail.type_url() != "type.googleapis.com/google.rpc.RetryInfo") {
      continue;
    }
    rpcguard::internal::v1::RetryInfo info;
    if (!info.ParseFromString(detail.value())) return std::nullopt;
    const google::protobuf::Duration& d = info.retry_delay();
    // Duration's own rules: seconds and nanos share a sign, |nanos| < 1e9.
    if (d.seconds() < 0 || d.nanos() < 0 || d.nanos() >= 1000000000) {
      return std::nullopt;
    }
    return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
  }
  return std::nullopt;
}

std::string RetryInfoStatusDetails(int code, absl::string_view message,
                                   absl::Duration retry_delay) {
  retry_delay = std::max(retry_delay, absl::ZeroDuration());
  const int64_t seconds =
      absl::IDivDuration(retry_delay, absl::Seconds(1), &retry_delay);
  rpcguard::internal::v1::RetryInfo info;
  info.mutable_retry_delay()->set_seconds(seconds);
  info.mutable_retry_delay()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(retry_delay)));
  rpcguard::internal::v1::RpcStatus status;
  status.set_code(code);
  status.set_message(std::string(message));
  google::protobuf::Any* any = status.add_details();
  any->set_type_url("type.googleapis.com/google.rpc.RetryInfo");
  any->set_value(info.SerializeAsString());
  return status.SerializeAsString();
}

}  // namespace rpcguard
