// Copyright rpcguard authors.
//
// A policy for one call: fewer or more attempts, another per-attempt timeout
// or backoff, hedging off or on, another trace verbosity, for this call
// only, in place of its method's policy.
//
//   grpc::ClientContext ctx;
//   rpcguard::CallPolicy once;
//   once.max_attempts = 1;  // this call: not retried
//   once.trace_verbosity = rpcguard::TraceVerbosity::kAll;
//   if (absl::Status s = rpcguard::SetCallPolicy(&ctx, once); !s.ok()) ...
//   stub->Charge(&ctx, request, &reply);
//
// The fields and their rules are CallPolicy's (decision/call_policy.h). A
// call policy never loosens safety: it cannot make a method that is not
// declared safe to repeat retriable; only the caller's own idempotency-key
// metadata does that, as without one. Config::Explain(method, call) shows
// the policy a call would get.
//
// How it travels. gRPC's ClientContext has no slot an interceptor can read,
// so SetCallPolicy adds one metadata entry, kCallPolicyHeader
// ("rpcguard-call-policy", channel.h), with the policy in a short text form.
// rpcguard's interceptor takes the entry out of every call at its first
// batch, before anything is sent, whatever the call's kind (sync, CQ-async,
// callback; unary or streaming) and however rpcguard runs it; no server of a
// channel with rpcguard sees it. Nothing else changes on the wire. A call
// marked pass-through (MarkPassThrough) has the entry removed and the
// policy ignored, malformed or not. A stream takes it as a unary call does,
// but for two fields: per_attempt_timeout does not apply to streams (an
// attempt runs until the call's deadline), and hedging = true fails the
// call with INVALID_ARGUMENT (streams are not hedged).
//
// On a channel WITHOUT rpcguard's interceptor nothing takes the entry out:
// it reaches the server as ordinary metadata (e.g. "rpcguard-call-policy:
// max_attempts=1"), harmless to a server that does not read it, and the
// call runs under gRPC's own rules.

#ifndef RPCGUARD_CALL_POLICY_H_
#define RPCGUARD_CALL_POLICY_H_

#include <grpcpp/client_context.h>

#include "absl/status/status.h"
#include "rpcguard/channel.h"
#include "rpcguard/decision/call_policy.h"  // IWYU pragma: export
#include "rpcguard/observability/trace.h"

namespace rpcguard {

// Sets `policy` for the call `context` will carry. Call it before the call
// starts, at most once per context (a second entry fails the call with
// INVALID_ARGUMENT: gRPC cannot take metadata back off a context).
//
// Returns ValidateCallPolicy(policy): OK, or InvalidArgument naming the
// first bad field ("CallPolicy.max_attempts: must be at most 10"). A policy
// it refuses is set all the same, so that a caller who ignores the status
// does not run the call under the method's policy unawares: the call fails
// with INVALID_ARGUMENT naming the field, before anything is sent. The
// checks against the method's own policy (hedging on for a method without a
// hedgingPolicy, a max_backoff below the method's initial backoff) can only
// be made then, and fail the call the same way. A null `context` is
// InvalidArgument, and nothing is set.
//
// Thread-safety: as ClientContext::AddMetadata (not concurrently with other
// uses of `context`).
absl::Status SetCallPolicy(grpc::ClientContext* context,
                           const CallPolicy& policy);

}  // namespace rpcguard

#endif  // RPCGUARD_CALL_POLICY_H_
