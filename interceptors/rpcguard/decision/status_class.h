// Copyright rpcguard authors.
//
// Sorting a finished attempt's status into what rpcguard may do about it.
//
//   kOk        the call succeeded;
//   kRetriable a transient failure that another attempt may fix (the server
//              was unreachable, overloaded, or the transaction conflicted);
//   kAuth      the credentials were refused: worth one more attempt only after
//              the credentials were refreshed;
//   kFatal     anything else: retrying would return the same answer, the
//              caller itself ended the call (cancel, deadline), or the
//              client library made the error itself (IsLocalError).

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
  // gRPC's client library made the failure itself (IsLocalError): it says
  // nothing about the destination.
  bool local_error = false;
  // The attempt never reached the server (no transport took it; where that
  // is not known, IsNotSent on a channel that was not READY): no evidence
  // about the server, and the server never saw it.
  bool not_sent = false;
  // The server said not to retry (a negative grpc-retry-pushback-ms).
  bool server_said_stop = false;
  // ... and named why in rpcguard's gave-up trailer: a service below it
  // failed (an rpcguard server's travelling give-up, server.h).
  bool downstream_gave_up = false;
};

// Who an attempt's end is evidence about: the one reading every judge of a
// destination takes (the breaker, the adaptive throttle, the budget's
// refunds), decided from facts the interceptor read, never from message
// text. In order of precedence:
//   kServer     the server answered about itself: OK, or a failure it
//               made (breaker evidence);
//   kCaller     the caller or its own client library ended it (cancel,
//               deadline, IsLocalError, a hedge copy that lost): nothing;
//   kNoServer   no server took it (no transport, no connection): nothing;
//   kBelow      the server answered about a service below it (an rpcguard
//               give-up trailer, or a negative pushback): the request stops,
//               and the server is up, so no judge holds it against it;
//   kOverload   the server refused for overload (RESOURCE_EXHAUSTED): the
//               adaptive throttle's evidence, never the breaker's.
// The list, once: names for traces and docs come from it.
#define RPCGUARD_ATTEMPT_ORIGINS(X) \
  X(kServer, "server")              \
  X(kCaller, "caller")              \
  X(kNoServer, "no_server")         \
  X(kBelow, "below")                \
  X(kOverload, "overload")

enum class AttemptOrigin {
#define RPCGUARD_ATTEMPT_ORIGIN_ENUM(e, name) e,
  RPCGUARD_ATTEMPT_ORIGINS(RPCGUARD_ATTEMPT_ORIGIN_ENUM)
#undef RPCGUARD_ATTEMPT_ORIGIN_ENUM
};

// Returns "server", "caller", "no_server", "below" or "overload".
absl::string_view AttemptOriginName(AttemptOrigin origin);

// The origin of `outcome` (see AttemptOrigin). An OK attempt is kServer.
// A per-attempt timeout is kServer: the server took too long.
AttemptOrigin OriginOf(const AttemptOutcome& outcome);

// Whether a failed attempt's status is one gRPC's client library makes
// itself about the call's own request, reply or credentials, rather than
// news of the destination's health:
//   RESOURCE_EXHAUSTED "Sent message larger than max (...)": the request is
//     over the channel's max send message size; it was never sent.
//   RESOURCE_EXHAUSTED "Received message larger than max (...)": the reply
//     is over the channel's max receive message size (the server ran the
//     call), or the request over the server's.
//   RESOURCE_EXHAUSTED "received initial metadata size exceeds limit...":
//     the reply's metadata is over the channel's max metadata size (the
//     server ran the call), or the request's over the server's.
//   any code, "Getting metadata from plugin failed with error: ...": the
//     call credentials' plugin failed; nothing was sent.
// gRPC uses the same words whichever side's limit was hit; either way
// another attempt of the same call fails the same way, and the outcome
// says nothing about the destination. The words are gRPC 1.51's:
// tests/e2e/local_errors_e2e_test.cc fails if a gRPC changes them.
bool IsLocalError(grpc::StatusCode code, absl::string_view message);

// Whether `message` is gRPC 1.51's word for a call-credentials plugin that
// failed (one of IsLocalError's). Credentials are asked for before a
// transport takes the call's headers, so the interceptor takes these words
// as the client's own only for an attempt no transport took; on one a
// transport took, they are a server relaying its own client's failure.
bool IsCredentialsPluginError(absl::string_view message);

// Whether a failed attempt's status is gRPC's own word that the call found
// no connection to send it on, so that the server never saw it:
//   UNAVAILABLE "failed to connect to all addresses; ..." (pick_first),
//   UNAVAILABLE "connections to all backends failing; ..." (round_robin),
//   UNAVAILABLE "empty address list: ...", "DNS resolution failed for ...".
// The channel fails such a call at once when it is in TRANSIENT_FAILURE and
// the call does not wait for ready. The interceptor reads these words only
// where it cannot see whether a transport took the attempt (ReachedTransport
// in internal/grpc_1_51/context.h: another gRPC, a target written as an
// address); words alone could be a server's, so it then also requires the
// channel not to be READY when the attempt ends. Like IsLocalError's, the
// words are gRPC 1.51's, and tests/e2e/local_errors_e2e_test.cc fails if a
// gRPC changes them.
bool IsNotSent(grpc::StatusCode code, absl::string_view message);

// Classifies attempt outcomes. Thread-compatible value type.
//
// Rules, in order:
//   1. OK is kOk.
//   2. The caller's cancel or deadline is kFatal, whatever the code: a call
//      the caller gave up on is never retried.
//   3. An error the client made itself (local_error) is kFatal, whatever
//      the code: another attempt would make it again.
//   4. DEADLINE_EXCEEDED is kRetriable exactly when rpcguard's per-attempt
//      timeout (not the caller's deadline) expired, whatever the retriable
//      set says: the set governs statuses servers return, and a per-attempt
//      timeout that never led to a retry would be pointless.
//   5. Codes in the retriable set are kRetriable.
//   6. UNAUTHENTICATED and PERMISSION_DENIED are kAuth.
//   7. Everything else, CANCELLED included, is kFatal.
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
