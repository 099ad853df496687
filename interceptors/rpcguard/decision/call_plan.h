// Copyright rpcguard authors.
//
// CallPlan: how one call is run, decided once at its first batch from the
// method's policy and what the call's context says. Pure: no gRPC call
// objects; the interceptor gathers CallFacts, asks PlanCall, and runs the
// call in the mode it answers.
//
//   kPassThrough   not rpcguard's business (marked pass-through): proceeds
//                  untouched, no metadata, no breaker.
//   kMetadataOnly  sent once as the application's own call, with rpcguard's
//                  metadata; the breaker is asked first. Calls that may not
//                  be repeated, or cannot be retried safely, end here.
//   kRide          a callback-API call that may be retried or hedged:
//                  attempt 1 is the application's own call; rpcguard takes
//                  over only if it fails or its hedge is due (no second call
//                  on the no-failure path).
//   kHijack        rpcguard owns the call from the start: every attempt is a
//                  call of its own on the channel below rpcguard.
//   kFailFast      refused before anything is sent (a bad declaration, a bad
//                  idempotency key, an open breaker): ends with `reject`.

#ifndef RPCGUARD_DECISION_CALL_PLAN_H_
#define RPCGUARD_DECISION_CALL_PLAN_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {

enum class CallMode { kPassThrough, kMetadataOnly, kRide, kHijack, kFailFast };

// Returns "pass_through", "metadata_only", "ride", "hijack" or "fail_fast".
absl::string_view CallModeName(CallMode mode);

// What the interceptor knows of a call at its first batch.
struct CallFacts {
  // Unary; otherwise a stream, retried until it commits (hijacked) when it
  // may be repeated and its policy retries, else sent once with rpcguard's
  // metadata; never hedged, and never riding.
  bool unary = true;
  // The caller asked for no rpcguard handling (MarkPassThrough).
  bool marked_pass_through = false;
  // The method's retry declaration is invalid (ResolvedPolicy::error).
  absl::Status declaration_error;
  // The method's shared destination state could not be set up (two channels
  // disagreeing about one breaker's options).
  absl::Status destination_error;
  // The call's own CallPolicy (call_policy.h) is malformed or invalid for
  // the method: the call fails with INVALID_ARGUMENT before anything is
  // sent, rather than run under a policy its caller did not ask for.
  absl::Status call_policy_error;
  // How many `idempotency-key` values the caller put on the call, and the
  // first of them.
  int caller_keys = 0;
  absl::string_view caller_key;
  // The call was recognised as a callback-API unary call, whose first
  // attempt can be the application's own call (grpc_1_51/probes.h).
  bool callback_api = false;
  // The application's response object may be a protobuf message: false
  // when it is known not to be (a grpc::GenericStub call's ByteBuffer),
  // true when it is one or is not known yet (the CQ API hands it over
  // later).
  bool response_may_be_message = true;
  // The method's hedging policy was written for this method itself (its
  // own config entry), not for its service or as a default: IDEMPOTENT and
  // KEYED methods are hedged only then.
  bool hedging_for_method = false;
  // The call is made for a server call that is itself a retry or a hedge
  // (its caller's attempt >= 2; server.h): it is not hedged, so that copies
  // do not multiply down a chain. It may still be retried.
  bool no_hedge = false;
};

// The answer of PlanCall.
struct CallPlan {
  CallMode mode = CallMode::kPassThrough;
  // The call's idempotency: the method's, or kKeyed when an undeclared
  // method's call carries the caller's own key.
  Idempotency idempotency = Idempotency::kUnknown;
  // Safe to send more than once (MayRepeat(idempotency)). Whether it will be
  // also depends on max_attempts: a method allowed one attempt that fails
  // gives up with max_attempts, not not_idempotent.
  bool may_repeat = false;
  // kFailFast: the status the call ends with, and why. kMetadataOnly: the
  // reason a failure gives up with when it is not the call's idempotency
  // or attempts (kUnsupportedCall: a call that may be repeated but cannot
  // be retried safely).
  grpc::Status reject;
  GiveUpReason reason = GiveUpReason::kNone;
  // The call is hedged (policy.hedging): copies instead of retries; kRide
  // on the callback API (its first copy is the application's own call),
  // kHijack elsewhere.
  bool hedge = false;
};

// Whether a call of `idempotency` under `policy` may be hedged: never
// without a hedging policy, always for NO_SIDE_EFFECTS, for IDEMPOTENT and
// KEYED only when the hedging policy was written for the method itself
// (`for_method`; every copy carries the same idempotency key), never for
// UNKNOWN (a caller's own key makes a call KEYED for retries, not hedges).
bool MayHedge(const MethodPolicy& policy, Idempotency idempotency,
              bool for_method);

// Decides how a call of a method with `policy` is run. Checks, in order:
// pass-through (nothing else matters), the declaration, the destination, the
// call's own policy, the caller's key (a call that cannot be sent safely fails
// before anything is sent), then the mode: a call that may be retried rides
// when it can, otherwise it is hijacked; a methodConfig `timeout` or
// `waitForReady` also needs hijacking (neither can be put on the application's
// own call). A call whose response object is not a protobuf message cannot have
// a hijacked attempt's response put into it: it is sent once (kMetadataOnly,
// reason kUnsupportedCall), never retried, and says so.
CallPlan PlanCall(const MethodPolicy& policy, const CallFacts& facts);

// `plan` after the destination's breaker refused the call (kMetadataOnly and
// kRide ask it before sending): kFailFast with UNAVAILABLE and `message`.
CallPlan RefusedByBreaker(CallPlan plan, absl::string_view message);

// `plan` after the destination's adaptive throttle refused the call:
// kFailFast with `status` (UNAVAILABLE), reason kThrottled.
CallPlan RefusedByThrottle(CallPlan plan, const grpc::Status& status);

}  // namespace rpcguard

#endif  // RPCGUARD_DECISION_CALL_PLAN_H_
