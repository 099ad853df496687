// Copyright rpcguard authors.
//
// Sorting a finished attempt's status into what rpcguard may do about it.
//
//   kOk        the call succeeded;
//   kRetriable a transient failure that another attempt may fix (the server
//              was unreachable, overloaded, or the transaction conflicted);
//   kAuth      the credentials were refused: worth one more attempt only after
//              the credentials were refreshed;
//   kFatal     anything else: retrying would return the same answer, or the
//              caller itself ended the call (cancel, deadline).

#ifndef RPCGUARD_DECISION_STATUS_CLASS_H_
#define RPCGUARD_DECISION_STATUS_CLASS_H_

#include <grpcpp/support/status_code_enum.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rpcguard {

enum class StatusClass { kOk, kRetriable, kFatal, kAuth };

// Returns "OK", "RETRIABLE", "FATAL" or "AUTH".
absl::string_view StatusClassName(StatusClass c);

// Returns the canonical name of a gRPC status code ("UNAVAILABLE"), or
// "CODE_OUT_OF_RANGE" for a value outside 0..16.
absl::string_view StatusCodeName(grpc::StatusCode code);

// Parses a status code name in any case ("unavailable", "UNAVAILABLE") or its
// number as a string ("14"). InvalidArgument for anything else.
absl::StatusOr<grpc::StatusCode> ParseStatusCode(absl::string_view text);

// A set of gRPC status codes (0..16). A value type; cheap to copy.
class StatusCodeSet {
 public:
  StatusCodeSet() = default;
  StatusCodeSet(std::initializer_list<grpc::StatusCode> codes) {
    for (grpc::StatusCode c : codes) Add(c);
  }

  // Adds `code`; values outside 0..31 are ignored (parsers reject codes
  // outside 0..16 before they get here).
  void Add(grpc::StatusCode code) {
    int c = static_cast<int>(code);
    if (c >= 0 && c < 32) bits_ |= uint32_t{1} << c;
  }
  bool Contains(grpc::StatusCode code) const {
    int c = static_cast<int>(code);
    return c >= 0 && c < 32 && (bits_ & (uint32_t{1} << c)) != 0;
  }
  bool empty() const { return bits_ == 0; }
  bool operator==(const StatusCodeSet& o) const { return bits_ == o.bits_; }

  // The default retriable set: UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED.
  static StatusCodeSet DefaultRetriable();

 private:
  uint32_t bits_ = 0;
};

// What is known about how an attempt ended, beyond its status code. The
// interceptor fills this in; the classifier never looks at gRPC call objects.
struct AttemptOutcome {
  grpc::StatusCode code = grpc::StatusCode::OK;
  // The attempt's own per-attempt timeout expired (not the caller's deadline).
  bool per_attempt_timeout_expired = false;
  // The caller's deadline has passed.
  bool caller_deadline_expired = false;
  // The caller cancelled the call.
  bool caller_cancelled = false;
};

// Classifies attempt outcomes. Thread-compatible value type.
//
// Rules, in order:
//   1. OK is kOk.
//   2. The caller's cancel or deadline is kFatal, whatever the code: a call
//      the caller gave up on is never retried.
//   3. DEADLINE_EXCEEDED is kRetriable exactly when rpcguard's per-attempt
//      timeout (not the caller's deadline) expired, whatever the retriable
//      set says: the set governs statuses servers return, and a per-attempt
//      timeout that never led to a retry would be pointless.
//   4. Codes in the retriable set are kRetriable.
//   5. UNAUTHENTICATED and PERMISSION_DENIED are kAuth.
//   6. Everything else, CANCELLED included, is kFatal.
class Classifier {
 public:
  // Uses the default retriable set.
  Classifier() : Classifier(StatusCodeSet::DefaultRetriable()) {}

  // `retriable` replaces the default set (a policy's retryableStatusCodes).
  explicit Classifier(StatusCodeSet retriable) : retriable_(retriable) {}

  StatusClass Classify(const AttemptOutcome& outcome) const;

  const StatusCodeSet& retriable() const { return retriable_; }

 private:
  StatusCodeSet retriable_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_STATUS_CLASS_H_
