// Copyright rpcguard authors.

#include "rpcguard/decision/status_class.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace {

constexpr absl::string_view kCodeNames[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
constexpr int kNumCodes = sizeof(kCodeNames) / sizeof(kCodeNames[0]);

}  // namespace

absl::string_view StatusClassName(StatusClass c) {
  switch (c) {
    case StatusClass::kOk:
      return "OK";
    case StatusClass::kRetriable:
      return "RETRIABLE";
    case StatusClass::kFatal:
      return "FATAL";
    case StatusClass::kAuth:
      return "AUTH";
  }
  return "FATAL";
}

absl::string_view StatusCodeName(grpc::StatusCode code) {
  int c = static_cast<int>(code);
  if (c >= 0 && c < kNumCodes) return kCodeNames[c];
  return "CODE_OUT_OF_RANGE";
}

absl::StatusOr<grpc::StatusCode> ParseStatusCode(absl::string_view text) {
  int number;
  if (absl::SimpleAtoi(text, &number)) {
    if (number >= 0 && number < kNumCodes) {
      return static_cast<grpc::StatusCode>(number);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("status code ", number, " is out of range 0..16"));
  }
  std::string upper = absl::AsciiStrToUpper(text);
  for (int i = 0; i < kNumCodes; ++i) {
    if (upper == kCodeNames[i]) return static_cast<grpc::StatusCode>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown status code \"", text, "\""));
}

StatusCodeSet StatusCodeSet::DefaultRetriable() {
  return {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::RESOURCE_EXHAUSTED,
          grpc::StatusCode::ABORTED};
}

bool IsCredentialsPluginError(absl::string_view message) {
  return absl::StartsWith(message,
                          "Getting metadata from plugin failed with error: ");
}

bool IsLocalError(grpc::StatusCode code, absl::string_view message) {
  if (code == grpc::StatusCode::OK) return false;
  if (IsCredentialsPluginError(message)) return true;
  if (code != grpc::StatusCode::RESOURCE_EXHAUSTED) return false;
  return absl::StartsWith(message, "Sent message larger than max (") ||
         absl::StartsWith(message, "Received message larger than max (") ||
         absl::StartsWith(message,
                          "received initial metadata size exceeds limit");
}

bool IsNotSent(grpc::StatusCode code, absl::string_view message) {
  if (code != grpc::StatusCode::UNAVAILABLE) return false;
  return absl::StartsWith(message, "failed to connect to all addresses") ||
         absl::StartsWith(message, "connections to all backends failing") ||
         absl::StartsWith(message, "empty address list") ||
         absl::StartsWith(message, "DNS resolution failed for ");
}

absl::string_view AttemptOriginName(AttemptOrigin origin) {
  switch (origin) {
#define RPCGUARD_ATTEMPT_ORIGIN_NAME(e, name) \
  case AttemptOrigin::e:                      \
    return name;
    RPCGUARD_ATTEMPT_ORIGINS(RPCGUARD_ATTEMPT_ORIGIN_NAME)
#undef RPCGUARD_ATTEMPT_ORIGIN_NAME
  }
  return "server";
}

AttemptOrigin OriginOf(const AttemptOutcome& outcome) {
  if (outcome.code == grpc::StatusCode::OK) return AttemptOrigin::kServer;
  if (outcome.caller_cancelled || outcome.caller_deadline_expired ||
      outcome.local_error) {
    return AttemptOrigin::kCaller;
  }
  if (outcome.not_sent) return AttemptOrigin::kNoServer;
  // The trailer comes first: a middle passing up its store's overload, or
  // its own throttle's refusal, is not itself overloaded.
  if (outcome.downstream_gave_up) return AttemptOrigin::kBelow;
  if (outcome.code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return AttemptOrigin::kOverload;
  }
  // A6's "do not retry" is the server's considered answer: it is up.
  if (outcome.server_said_stop) return AttemptOrigin::kBelow;
  return AttemptOrigin::kServer;
}

StatusClass Classifier::Classify(const AttemptOutcome& outcome) const {
  if (outcome.code == grpc::StatusCode::OK) return StatusClass::kOk;
  if (outcome.caller_cancelled || outcome.caller_deadline_expired ||
      outcome.local_error) {
    return StatusClass::kFatal;
  }
  if (outcome.code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return outcome.per_attempt_timeout_expired ? StatusClass::kRetriable
                                               : StatusClass::kFatal;
  }
  if (retriable_.Contains(outcome.code)) return StatusClass::kRetriable;
  if (outcome.code == grpc::StatusCode::UNAUTHENTICATED ||
      outcome.code == grpc::StatusCode::PERMISSION_DENIED) {
    return StatusClass::kAuth;
  }
  return StatusClass::kFatal;
}

}  // namespace rpcguard
